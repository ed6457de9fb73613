//! A generator child's whole life (`--generator-child I`), in a process or
//! a container alike: it says it is ready, answers the parent's clock
//! readings, reads the start, drives its share of the clients through the
//! proxy and streams every record to its stdout, then its books. Its stdin
//! stays open for the run: when it closes (the parent ended or died, or
//! the engine closed a container's), the child stops as on SIGTERM.

use super::super::plan::Plan;
use super::share;
use crate::backend::driver::{self, DriverInput, ProxyLink};
use crate::backend::generator_feed::{self, Go, Line, Word};
use crate::cluster::external::ExternalCluster;
use crate::cluster::Cluster;
use crate::core::metrics::Collector;
use crate::error::Error;
use anyhow::{anyhow, Context};
use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

/// Runs generator `index` of `plan`.
pub fn run(plan: &Plan, index: u32) -> Result<(), Error> {
    say(&Line::Ready { wall_minus_mono_s: generator_feed::wall_minus_mono_s() });
    let mut stdin = std::io::stdin().lock();
    let go = read_go(&mut stdin)?;
    drop(stdin);
    let start = generator_feed::instant_of(go.start_mono_ns);
    say(&Line::Started { late_s: start.elapsed().as_secs_f64() });
    std::thread::spawn(stop_when_stdin_closes);
    let configs = go.dsns.iter().map(|d| d.parse()).collect::<Result<Vec<_>, _>>().context("the replicas' DSNs")?;
    let cluster = Arc::new(Mutex::new(Cluster::External(ExternalCluster::unchecked(configs))));
    let (_, feed) = tokio::sync::mpsc::unbounded_channel();
    let proxies = if go.tier.is_empty() { vec![go.proxy] } else { go.tier.clone() };
    let configs = proxies
        .into_iter()
        .map(|p| super::super::via_proxy::client_configs(p, &go.user, go.password.as_deref(), go.dbname.as_deref()))
        .collect();
    let link = ProxyLink { configs, start_unix_s: crate::backend::proxy_feed::unix_now(), feed };
    let input = DriverInput {
        workload: Arc::new(plan.workload.clone()),
        clients: share(super::super::launch::clients(plan), index, plan.generators),
        control: super::super::launch::control(plan),
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
    say(&Line::Done {
        in_flight: out.in_flight,
        interrupted: out.signal.is_some(),
        generator: out.generator,
        through: out.through,
    });
    Ok(())
}

/// Answers every [`Word::Ping`] until the [`Go`].
fn read_go(stdin: &mut impl BufRead) -> Result<Go, Error> {
    let mut text = String::new();
    loop {
        text.clear();
        if stdin.read_line(&mut text).context("reading the start from the parent run")? == 0 {
            return Err(Error::Run(anyhow!("the parent run closed this generator's stdin before the start")));
        }
        match Word::parse(&text).context("reading the start from the parent run")? {
            Word::Ping => say(&Line::Pong { mono_ns: generator_feed::mono_ns() }),
            Word::Go(go) => return Ok(go),
        }
    }
}

/// Waits for the end of stdin, then stops this process as SIGTERM does
/// (it drains its sessions and sends its books, if anyone still reads).
fn stop_when_stdin_closes() {
    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM);
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

    #[test]
    fn pings_are_answered_until_the_start() {
        let go = Go {
            start_mono_ns: 42,
            proxy: "127.0.0.1:6432".parse().unwrap(),
            tier: Vec::new(),
            user: "postgres".into(),
            password: None,
            dbname: Some("plb".into()),
            dsns: Vec::new(),
        };
        let text = format!("{}\n{}\n{}\n", Word::Ping.line(), Word::Ping.line(), Word::Go(go.clone()).line());
        assert_eq!(read_go(&mut text.as_bytes()).unwrap(), go);
        let e = read_go(&mut format!("{}\n", Word::Ping.line()).as_bytes()).unwrap_err();
        assert!(e.to_string().contains("closed this generator's stdin before the start"), "{e}");
    }
}
