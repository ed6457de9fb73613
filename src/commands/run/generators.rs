//! `run --generators N` ([scale](docs/scale.md#several-generators-through-one-proxy)):
//! one host's load split over N generator processes, so a run is not
//! bounded by one process's event loop, with one `plbbench proxy` routing
//! every session (one controller, as in a single-generator `--via-proxy`
//! run). The parent keeps everything but the clients: the cluster, the
//! proxy, the faults, the samples and the one collector. Each child is this
//! executable again with the run's own flags and `--generator-child I`: it
//! builds the same plan, drives every Nth client (each client has its own
//! seed stream, so the union is the single generator's schedule), counts
//! time from the parent's time zero on the host's monotonic clock, and
//! streams its raw records back (`backend::generator_feed`). A child that
//! ends without its books fails the run's accounting. Children die with
//! the run: SIGTERM when it is interrupted, and the kernel's parent-death
//! signal if it is killed.

use super::args::RunArgs;
use super::plan::Plan;
use crate::backend::driver::{self, DriverInput, ProxyLink};
use crate::backend::generator_feed::{self, Go, Line};
use crate::backend::remote::{Remote, RemoteEnd};
use crate::cluster::external::ExternalCluster;
use crate::cluster::Cluster;
use crate::core::metrics::Collector;
use crate::core::outcome::Verdict;
use crate::core::schedule::Client;
use crate::core::settings::ClusterKind;
use crate::error::{input, Error};
use anyhow::{anyhow, Context};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most generator processes a run may start.
pub const MAX: u32 = 64;

/// How long a child may take to build its plan and say it is ready.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// Checks `--generators` (and the internal `--generator-child`) against
/// the other flags; whether the run has several (then it goes through a
/// proxy, as with `--via-proxy`).
pub fn check(args: &RunArgs) -> Result<bool, Error> {
    let n = args.generators;
    if n == 0 || n > MAX {
        return Err(input("--generators", format!("must be 1 to {MAX}, got {n}")));
    }
    if let Some(i) = args.generator_child.filter(|&i| i >= n) {
        return Err(input("--generator-child", format!("{i} is not below --generators {n}")));
    }
    if n == 1 {
        return Ok(false);
    }
    if args.common.cluster == ClusterKind::Sim {
        return Err(input(
            "--generators",
            "needs real servers (--cluster local, docker or external): the simulator runs every client in one process",
        ));
    }
    if n > args.common.clients {
        return Err(input(
            "--generators",
            format!("{n} generators need at least {n} clients; --T is {}", args.common.clients),
        ));
    }
    Ok(true)
}

/// Generator `index` of `n`'s clients: every `n`th, from the `index`th.
pub fn share(clients: Vec<Client>, index: u32, n: u32) -> Vec<Client> {
    let (index, n) = (index as usize, n as usize);
    clients.into_iter().enumerate().filter(|(i, _)| i % n == index).map(|(_, c)| c).collect()
}

/// A started child: its process, its stdin (for [`Go`]) and its clock.
pub struct Started {
    child: Child,
    stdin: Option<ChildStdin>,
    /// CLOCK_REALTIME - CLOCK_MONOTONIC the child saw, seconds.
    wall_minus_mono_s: f64,
    remote: Option<Remote>,
}

/// The run's generator children.
pub struct Children {
    started: Vec<Started>,
}

/// Starts `plan.generators` children with this process's own arguments
/// and waits until each is ready.
pub fn spawn(plan: &Plan) -> Result<Children, Error> {
    let exe = std::env::current_exe().context("finding plbbench's own executable")?;
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let mut children = Children { started: Vec::new() };
    for index in 0..plan.generators {
        let mut cmd = Command::new(&exe);
        cmd.args(&argv).arg("--generator-child").arg(index.to_string());
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        // Its own process group: a Ctrl-C at the terminal reaches the run,
        // which passes it on as one SIGTERM, so a child drains as the run does.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM).map_err(std::io::Error::from)
            });
        }
        let mut child = cmd.spawn().with_context(|| format!("starting generator {index}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let pid = child.id() as i32;
        let (ready, lines) = read_lines(stdout);
        let mut started = Started { child, stdin, wall_minus_mono_s: f64::NAN, remote: None };
        match ready.recv_timeout(READY_WITHIN) {
            Ok(Some(Line::Ready { wall_minus_mono_s })) => started.wall_minus_mono_s = wall_minus_mono_s,
            _ => {
                let status = stop(&mut started.child);
                children.started.push(started);
                return Err(Error::Run(anyhow!("generator {index} (pid {pid}) did not start ({status})")));
            }
        }
        started.remote = Some(Remote { index, of: plan.generators, pid, lines });
        children.started.push(started);
    }
    Ok(children)
}

/// Reads a child's stdout on a thread: the first line on the returned
/// std channel, the rest on the tokio one.
fn read_lines(
    stdout: std::process::ChildStdout,
) -> (std::sync::mpsc::Receiver<Option<Line>>, tokio::sync::mpsc::UnboundedReceiver<Line>) {
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok).filter_map(|l| Line::parse(&l).ok());
        let _ = first_tx.send(lines.next());
        for line in lines {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (first_rx, rx)
}

impl Children {
    /// Tells every child the run's time zero (now) and how to reach the
    /// proxy; returns time zero and what the driver reads of them.
    pub fn go(&mut self, proxy: std::net::SocketAddr, cluster: &Cluster) -> (std::time::Instant, Vec<Remote>) {
        let base = cluster.config(0);
        let dsns = (0..cluster.replicas()).map(|r| super::via_proxy::dsn(&cluster.config(r))).collect();
        let start_mono_ns = generator_feed::mono_ns();
        let start = generator_feed::instant_of(start_mono_ns);
        let go = Go {
            start_mono_ns,
            proxy,
            user: base.get_user().unwrap_or("postgres").to_string(),
            dbname: base.get_dbname().map(str::to_string),
            dsns,
        };
        let text = format!("{}\n", go.line());
        for s in &mut self.started {
            if let Some(stdin) = &mut s.stdin {
                let _ = stdin.write_all(text.as_bytes()).and_then(|_| stdin.flush());
            }
        }
        (start, self.started.iter_mut().filter_map(|s| s.remote.take()).collect())
    }

    /// Waits for every child to exit (then SIGKILL); the run's verdict on
    /// them, or the accounting failure of a child that never delivered its
    /// books.
    pub fn finish(mut self, ends: &[RemoteEnd], wall_minus_mono_s: f64) -> Result<Verdict, Error> {
        let statuses: Vec<String> = self.started.iter_mut().map(|s| wait(&mut s.child)).collect();
        if let Some(e) = ends.iter().find(|e| e.in_flight.is_none()) {
            let status = &statuses[e.index as usize];
            return Err(Error::Run(anyhow!(
                "accounting check failed: generator {} (pid {}) ended ({status}) without its books, so its sessions \
                 cannot be accounted; nothing was written",
                e.index,
                e.pid
            )));
        }
        Ok(verdict(&self.started, ends, wall_minus_mono_s))
    }
}

/// The `generators` verdict: how many, their clocks against the run's,
/// and each one's saturation guard (it fails if any child was saturated).
fn verdict(started: &[Started], ends: &[RemoteEnd], wall_minus_mono_s: f64) -> Verdict {
    let offsets: Vec<String> = started
        .iter()
        .zip(ends)
        .map(|(s, e)| {
            let offset_us = (s.wall_minus_mono_s - wall_minus_mono_s) * 1e6;
            let late_ms = e.late_s.map_or("?".into(), |l| format!("{:.1}", l * 1000.0));
            let load = e.generator.as_ref().map_or("no load report".into(), |g| g.detail());
            format!(
                "g{} pid {}: wall clock {offset_us:+.0} us, started {late_ms} ms after time zero, {load}",
                e.index, e.pid
            )
        })
        .collect();
    Verdict {
        name: "generators".into(),
        ok: ends.iter().all(|e| e.generator.as_ref().is_some_and(|g| !g.saturated)),
        detail: format!(
            "{} generator processes through one proxy, each counting from the run's time zero on this host's \
             monotonic clock; wall-minus-monotonic against the run's (records use the monotonic clock): {}",
            started.len(),
            offsets.join("; ")
        ),
    }
}

/// Up to 10 s for a child to exit, then SIGKILL; how it ended.
fn wait(child: &mut Child) -> String {
    for _ in 0..200 {
        if let Ok(Some(s)) = child.try_wait() {
            return s.to_string();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    child.wait().map_or_else(|e| e.to_string(), |s| format!("killed after 10 s ({s})"))
}

/// SIGKILL now; how it ended.
fn stop(child: &mut Child) -> String {
    let _ = child.kill();
    child.wait().map_or_else(|e| e.to_string(), |s| s.to_string())
}

impl Drop for Children {
    fn drop(&mut self) {
        for s in &mut self.started {
            if let Ok(None) = s.child.try_wait() {
                let _ = s.child.kill();
                let _ = s.child.wait();
            }
        }
    }
}

/// A child's whole life (`--generator-child I`): says it is ready, reads
/// the start, drives its share of the clients through the proxy and
/// streams every record to its stdout, then its books.
pub fn child(plan: &Plan, index: u32) -> Result<(), Error> {
    say(&Line::Ready { wall_minus_mono_s: generator_feed::wall_minus_mono_s() });
    let mut text = String::new();
    std::io::stdin().read_line(&mut text).context("reading the start from the parent run")?;
    let go: Go = serde_json::from_str(&text).context("reading the start from the parent run")?;
    let start = generator_feed::instant_of(go.start_mono_ns);
    say(&Line::Started { late_s: start.elapsed().as_secs_f64() });
    let configs = go.dsns.iter().map(|d| d.parse()).collect::<Result<Vec<_>, _>>().context("the replicas' DSNs")?;
    let cluster = Arc::new(Mutex::new(Cluster::External(ExternalCluster::unchecked(configs))));
    let (_, feed) = tokio::sync::mpsc::unbounded_channel();
    let configs = super::via_proxy::client_configs(go.proxy, &go.user, go.dbname.as_deref());
    let link = ProxyLink { configs, start_unix_s: crate::backend::proxy_feed::unix_now(), feed };
    let input = DriverInput {
        workload: Arc::new(plan.workload.clone()),
        clients: share(super::launch::clients(plan), index, plan.generators),
        control: super::launch::control(plan),
        faults: Vec::new(),
        duration_s: plan.duration_s,
        probe_interval: None,
        progress: crate::progress::Shown::Nothing,
        cpus: plan.cpus,
        metrics: None,
        proxy: Some(link),
        start: Some(start),
        tap: Some(generator_feed::Tap::new(std::io::stdout())),
        remotes: Vec::new(),
    };
    let collector = Collector::new(plan.phases.clone(), plan.replicas, plan.cpus, false);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the tokio runtime")?;
    let (_, out) = runtime.block_on(driver::run(input, cluster, collector));
    say(&Line::Done { in_flight: out.in_flight, interrupted: out.signal.is_some(), generator: out.generator });
    Ok(())
}

/// One line to the parent (a parent gone is no error: the child is
/// stopping too).
fn say(line: &Line) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line.line()).and_then(|_| out.flush());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::run::args::default_run_args;

    #[test]
    fn several_generators_need_real_servers_and_a_client_each() {
        let mut run = default_run_args();
        assert!(!check(&run).unwrap(), "one generator: the run as before");
        run.generators = 0;
        assert!(check(&run).unwrap_err().to_string().contains("--generators"));
        run.generators = 2;
        run.common.cluster = ClusterKind::Sim;
        let e = check(&run).unwrap_err();
        assert!(e.to_string().starts_with("--generators: needs real servers"), "{e}");
        assert_eq!(e.exit_code(), 2);
        run.common.cluster = ClusterKind::Local;
        assert!(check(&run).unwrap(), "two generators go through a proxy");
        run.common.clients = 1;
        assert!(check(&run).unwrap_err().to_string().contains("at least 2 clients"));
        run.common.clients = 10;
        run.generator_child = Some(2);
        assert!(check(&run).unwrap_err().to_string().starts_with("--generator-child"));
    }

    #[test]
    fn the_shares_are_the_single_generators_clients() {
        let all = crate::core::schedule::clients(10, 25, 5.0, 7);
        let mut union: Vec<(usize, f64)> = Vec::new();
        for index in 0..3 {
            let mine = share(crate::core::schedule::clients(10, 25, 5.0, 7), index, 3);
            assert_eq!(mine.len(), if index == 0 { 4 } else { 3 });
            union.extend(mine.iter().enumerate().map(|(k, c)| (k * 3 + index as usize, c.arrival_s)));
        }
        union.sort_by_key(|u| u.0);
        let arrivals: Vec<f64> = all.iter().map(|c| c.arrival_s).collect();
        assert_eq!(union.iter().map(|u| u.1).collect::<Vec<_>>(), arrivals);
    }
}
