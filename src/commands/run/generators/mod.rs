//! `run --generators N` ([scale](docs/scale.md#several-generators-through-one-proxy)):
//! the load split over N generator children, so a run is not bounded by
//! one process's event loop, with one `plbbench proxy` routing every
//! session (one controller, as in a single-generator `--via-proxy` run).
//! The parent keeps everything but the clients: the cluster, the proxy,
//! the faults, the samples and the one collector. Each child is this
//! executable again with the run's own flags and `--generator-child I`
//! ([`child`]), as a process on this host or in a container
//! (`--generators-on docker`, `cluster::docker::generators`): it builds the
//! same plan, drives every Nth client (each client has its own seed
//! stream, so the union is the single generator's schedule), counts time
//! from the run's time zero on its own monotonic clock (the parent measures
//! the offset by round trips and states it), and streams its raw records
//! back (`backend::generator_feed`). A child that ends without its books
//! fails the run's accounting. Children die with the run: SIGTERM when it
//! is interrupted; if it is killed, the kernel's parent-death signal (a
//! process) or the end of its stdin (both).

use super::plan::Plan;
use crate::backend::generator_feed::{self, Go, Line, Offset, Word};
use crate::backend::remote::{Remote, RemoteEnd, Stop};
use crate::cluster::docker::generators::{Containers, Spec};
use crate::cluster::Cluster;
use crate::core::outcome::Verdict;
use crate::core::schedule::Client;
use crate::core::settings::GeneratorsOn;
use crate::error::Error;
use anyhow::{anyhow, Context};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

mod child;

pub use child::run as child;

pub use super::proxy_args::MAX_GENERATORS as MAX;

/// How long a child may take to build its plan and say it is ready (a
/// container's includes its start).
const READY_WITHIN: Duration = Duration::from_secs(60);

/// Clock readings per child; the fastest round trip gives the offset.
const PINGS: usize = 8;

/// How long a child may take to answer one clock reading.
const PONG_WITHIN: Duration = Duration::from_secs(5);

/// Generator `index` of `n`'s clients: every `n`th, from the `index`th.
pub fn share(clients: Vec<Client>, index: u32, n: u32) -> Vec<Client> {
    let (index, n) = (index as usize, n as usize);
    clients.into_iter().enumerate().filter(|(i, _)| i % n == index).map(|(_, c)| c).collect()
}

/// How a child runs.
enum Proc {
    /// A process on this host.
    Process(Child),
    /// Container `i` of the run's generator containers.
    Container(usize),
}

/// A started child: how it runs, its stdin, and its clock.
struct Started {
    proc_: Proc,
    stdin: Option<Box<dyn Write + Send>>,
    /// `pid N` or `container NAME`.
    who: String,
    /// CLOCK_REALTIME - CLOCK_MONOTONIC the child saw, seconds.
    wall_minus_mono_s: f64,
    /// Its monotonic clock against the run's.
    offset: Offset,
    remote: Option<Remote>,
}

/// The run's generator children.
pub struct Children {
    started: Vec<Started>,
    containers: Option<Containers>,
}

/// One child's ends before its handshake: how it runs, what it is, how to
/// stop it, its stdout and its stdin.
struct Ends {
    proc_: Proc,
    who: String,
    stop: Stop,
    stdout: Box<dyn Read + Send>,
    stdin: Box<dyn Write + Send>,
}

/// Starts `plan.generators` children where `plan.generators_on` says, with
/// this process's own arguments, and waits until each is ready and its
/// clock is read.
pub fn spawn(plan: &Plan) -> Result<Children, Error> {
    let exe = std::env::current_exe().context("finding plbbench's own executable")?;
    let mut children = Children { started: Vec::new(), containers: None };
    let ends = match plan.generators_on {
        GeneratorsOn::Host => (0..plan.generators).map(|i| process(&exe, i)).collect::<Result<Vec<_>, _>>()?,
        GeneratorsOn::Docker => {
            let (containers, ends) = containers(plan, &exe)?;
            children.containers = Some(containers);
            ends
        }
    };
    for (index, e) in ends.into_iter().enumerate() {
        let (first, lines) = read_lines(e.stdout);
        let mut started = Started {
            proc_: e.proc_,
            stdin: Some(e.stdin),
            who: e.who,
            wall_minus_mono_s: f64::NAN,
            offset: Offset::default(),
            remote: None,
        };
        let shook = handshake(&mut started, &first);
        let who = started.who.clone();
        let remote = Remote { index: index as u32, of: plan.generators, who: who.clone(), stop: e.stop, lines };
        started.remote = Some(remote);
        children.started.push(started);
        if let Err(why) = shook {
            return Err(Error::Run(anyhow!("generator {index} ({who}) did not start: {why}")));
        }
    }
    Ok(children)
}

/// Child `index` as a process on this host.
fn process(exe: &std::path::Path, index: u32) -> Result<Ends, Error> {
    let mut cmd = Command::new(exe);
    cmd.args(std::env::args_os().skip(1)).arg("--generator-child").arg(index.to_string());
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    // A Ctrl-C at the terminal reaches the run, which passes it on as one
    // SIGTERM, so a child drains as the run does.
    super::via_proxy::child_of_run(&mut cmd);
    let mut child = cmd.spawn().with_context(|| format!("starting generator {index}"))?;
    let stdin = Box::new(child.stdin.take().expect("stdin is piped"));
    let stdout = Box::new(child.stdout.take().expect("stdout is piped"));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let stop: Stop = Arc::new(move || {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    });
    Ok(Ends { proc_: Proc::Process(child), who: format!("pid {pid}"), stop, stdout, stdin })
}

/// Every child as a container (`--generators-on docker`).
fn containers(plan: &Plan, exe: &std::path::Path) -> Result<(Containers, Vec<Ends>), Error> {
    let own: Vec<String> = std::env::args().skip(1).collect();
    let args = |i: u32| own.iter().cloned().chain(["--generator-child".into(), i.to_string()]).collect();
    let workdir = std::env::current_dir().context("reading the working directory")?;
    let spec = Spec { n: plan.generators, exe, args: &args, files: plan.inputs.clone(), workdir };
    eprintln!("plbbench: starting {} generator containers", plan.generators);
    let (containers, attached) =
        Containers::start(&spec).map_err(|e| Error::Run(anyhow!("--generators-on docker: {e}")))?;
    let mut ends = Vec::new();
    for (i, a) in attached.into_iter().enumerate() {
        let io = |e| anyhow!("generator container {}: {e}", a.name);
        let stdin = Box::new(HalfClose(a.io.try_clone().map_err(io)?));
        let stop: Stop = Arc::new(containers.stopper(i));
        ends.push(Ends {
            proc_: Proc::Container(i),
            who: format!("container {}", a.name),
            stop,
            stdout: Box::new(a.io),
            stdin,
        });
    }
    Ok((containers, ends))
}

/// A socket's writing half: dropping it shuts the writing down (the other
/// end reads the end of its stdin) while the reading half lives on.
struct HalfClose(std::os::unix::net::UnixStream);

impl Write for HalfClose {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl Drop for HalfClose {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Write);
    }
}

/// Reads a child's stdout on a thread: its handshake lines ([`Line::Ready`],
/// [`Line::Pong`]) on the returned std channel, the rest on the tokio one.
fn read_lines(stdout: Box<dyn Read + Send>) -> (Receiver<Line>, tokio::sync::mpsc::UnboundedReceiver<Line>) {
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let lines = BufReader::new(stdout).lines().map_while(Result::ok).filter_map(|l| Line::parse(&l).ok());
        for line in lines {
            let sent = match line {
                Line::Ready { .. } | Line::Pong { .. } => first_tx.send(line).is_ok(),
                _ => tx.send(line).is_ok(),
            };
            if !sent {
                break;
            }
        }
    });
    (first_rx, rx)
}

/// Waits for the child's [`Line::Ready`], then reads its clock [`PINGS`]
/// times; why not, if it fails.
fn handshake(s: &mut Started, first: &Receiver<Line>) -> Result<(), String> {
    match first.recv_timeout(READY_WITHIN) {
        Ok(Line::Ready { wall_minus_mono_s }) => s.wall_minus_mono_s = wall_minus_mono_s,
        _ => return Err(format!("no word within {} s", READY_WITHIN.as_secs())),
    }
    let stdin = s.stdin.as_mut().expect("stdin is open until the start");
    let ping = format!("{}\n", Word::Ping.line());
    let mut trips = Vec::with_capacity(PINGS);
    for _ in 0..PINGS {
        let sent = generator_feed::mono_ns();
        stdin.write_all(ping.as_bytes()).and_then(|_| stdin.flush()).map_err(|e| format!("writing to it: {e}"))?;
        match first.recv_timeout(PONG_WITHIN) {
            Ok(Line::Pong { mono_ns }) => trips.push((sent, mono_ns, generator_feed::mono_ns())),
            _ => return Err(format!("no answer to a clock reading within {} s", PONG_WITHIN.as_secs())),
        }
    }
    s.offset = Offset::of(&trips).expect("PINGS trips");
    Ok(())
}

impl Children {
    /// Tells every child the run's time zero (now, on its own clock) and
    /// how to reach the proxies (and the password they ask, if any); returns
    /// time zero and what the driver reads of them.
    pub fn go(
        &mut self,
        proxies: &[std::net::SocketAddr],
        password: Option<&str>,
        cluster: &Cluster,
    ) -> (std::time::Instant, Vec<Remote>) {
        let base = cluster.config(0);
        let dsns: Vec<String> = (0..cluster.replicas()).map(|r| super::via_proxy::dsn(&cluster.config(r))).collect();
        let start_mono_ns = generator_feed::mono_ns();
        let start = generator_feed::instant_of(start_mono_ns);
        for s in &mut self.started {
            let go = Go {
                start_mono_ns: s.offset.to_child(start_mono_ns),
                proxy: proxies[0],
                tier: if proxies.len() > 1 { proxies.to_vec() } else { Vec::new() },
                user: base.get_user().unwrap_or("postgres").to_string(),
                password: password.map(str::to_string),
                dbname: base.get_dbname().map(str::to_string),
                dsns: dsns.clone(),
            };
            if let Some(stdin) = &mut s.stdin {
                let text = format!("{}\n", Word::Go(go).line());
                let _ = stdin.write_all(text.as_bytes()).and_then(|_| stdin.flush());
            }
        }
        (start, self.started.iter_mut().filter_map(|s| s.remote.take()).collect())
    }

    /// Waits for every child to exit (then stops it by force); the run's
    /// verdict on them, or the accounting failure of a child that never
    /// delivered its books.
    pub fn finish(mut self, ends: &[RemoteEnd], wall_minus_mono_s: f64) -> Result<Verdict, Error> {
        let containers = self.containers.take();
        let statuses: Vec<String> = self
            .started
            .iter_mut()
            .map(|s| match &mut s.proc_ {
                Proc::Process(child) => super::via_proxy::wait_or_kill(child, Duration::from_secs(10)),
                Proc::Container(i) => containers.as_ref().expect("containers").wait(*i, Duration::from_secs(10)),
            })
            .collect();
        if let Some(e) = ends.iter().find(|e| e.in_flight.is_none()) {
            let status = &statuses[e.index as usize];
            return Err(Error::Run(anyhow!(
                "accounting check failed: generator {} ({}) ended ({status}) without its books, so its sessions \
                 cannot be accounted; nothing was written",
                e.index,
                e.who
            )));
        }
        Ok(verdict(&self.started, ends, wall_minus_mono_s, containers.is_some()))
    }
}

/// The `generators` verdict: how many and where, their clocks against the
/// run's, and each one's saturation guard (it fails if any child was
/// saturated).
fn verdict(started: &[Started], ends: &[RemoteEnd], wall_minus_mono_s: f64, in_containers: bool) -> Verdict {
    let offsets: Vec<String> = started
        .iter()
        .zip(ends)
        .map(|(s, e)| {
            let wall_us = ((s.wall_minus_mono_s + s.offset.ns as f64 / 1e9) - wall_minus_mono_s) * 1e6;
            let late_ms = e.late_s.map_or("?".into(), |l| format!("{:.1}", l * 1000.0));
            let load = e.generator.as_ref().map_or("no load report".into(), |g| g.detail());
            format!(
                "g{} {}: monotonic clock {:+.0} us (within {:.0} us), wall clock {wall_us:+.0} us, started {late_ms} ms \
                 after time zero, {load}",
                e.index,
                s.who,
                s.offset.ns as f64 / 1e3,
                s.offset.within_ns as f64 / 1e3,
            )
        })
        .collect();
    let place = if in_containers { "generator containers" } else { "generator processes" };
    Verdict {
        name: "generators".into(),
        ok: ends.iter().all(|e| e.generator.as_ref().is_some_and(|g| !g.saturated)),
        detail: format!(
            "{} {place} through one proxy, each counting from the run's time zero on its own monotonic clock, \
             offset by the amount measured (fastest of {PINGS} round trips); against the run's clocks: {}",
            started.len(),
            offsets.join("; ")
        ),
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for s in &mut self.started {
            if let Proc::Process(child) = &mut s.proc_ {
                if let Ok(None) = child.try_wait() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
