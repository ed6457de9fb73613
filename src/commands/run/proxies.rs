//! The run's proxy processes (`--via-proxy`, `--proxies N`; docs/proxy.md,
//! "A tier of proxies"): one, or a tier of N that elect a leader through
//! the cluster and follow its roles. This file starts them (and, for a
//! tier, waits until one leads and the others follow), merges their feeds
//! into the run's, injects the run's proxy faults on a thread of its own
//! (`--proxy-faults`: the leader SIGKILLed, a follower stopped, the lost
//! members started again), and at the end stops them and judges the tier
//! (`core::proxy_tier`).

use super::via_proxy::{self, ProxyChild};
use crate::backend::driver::ProxyLink;
use crate::backend::proxy_feed::{unix_now, Feed};
use crate::cluster::Cluster;
use crate::core::model::EventKind;
use crate::core::outcome::Verdict;
use crate::core::proxy_tier::{self, ProxyAction, ProxyFault, Seen, TierLog, TierReport};
use crate::core::workload::Workload;
use crate::error::Error;
use anyhow::{anyhow, Context};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// How long a new tier may take to elect its leader and link every
/// follower (a member tries the lock every 500 ms).
const SETTLE_WITHIN: Duration = Duration::from_secs(20);

/// One member's place: its process now, and how it got there.
struct Slot {
    child: ProxyChild,
    config: PathBuf,
    log: PathBuf,
    /// The proxy fault that ended its last process, until it is restarted.
    ended: Option<ProxyAction>,
    /// Processes it had.
    processes: u32,
}

/// What the fault thread and the run share.
struct Shared {
    slots: Mutex<Vec<Slot>>,
    /// On the Unix clock.
    log: Arc<Mutex<TierLog>>,
    feed: UnboundedSender<Feed>,
    /// Each member's routing flags (with its tier identity).
    flags: Vec<Vec<String>>,
}

/// The run's proxies.
pub struct Proxies {
    shared: Arc<Shared>,
    /// Configs, logs and the users file.
    _dir: tempfile::TempDir,
    /// Where each listens, in peer order.
    pub addrs: Vec<SocketAddr>,
    /// The password their clients log in with, when they listen off loopback.
    pub password: Option<String>,
    faults: Vec<ProxyFault>,
    injector: Option<(mpsc::Sender<()>, std::thread::JoinHandle<()>)>,
}

/// Starts `n` proxies in front of `cluster` with the run's routing
/// `flags`, listening on `ip` (a tier when `n` > 1, named for this run);
/// returns them and what the driver needs.
pub fn start(
    cluster: &Cluster,
    flags: &[String],
    w: &Workload,
    ip: IpAddr,
    n: u32,
    faults: Vec<ProxyFault>,
) -> Result<(Proxies, ProxyLink), Error> {
    // Named for this process: a killed run's folder is removed by the next
    // command (`commands::reap`).
    let prefix = format!("{}{}-", crate::commands::reap::PROXY_FOLDER, std::process::id());
    let dir = tempfile::Builder::new().prefix(&prefix).tempdir().context("creating a temporary folder")?;
    let base = cluster.config(0);
    let user = base.get_user().unwrap_or("postgres").to_string();
    let (password, users) = via_proxy::users(dir.path(), &user, ip)?;
    let tier = format!("run{}", std::process::id());
    let (tx, feed) = tokio::sync::mpsc::unbounded_channel();
    let log = Arc::new(Mutex::new(TierLog::default()));
    let mut slots = Vec::new();
    let mut all_flags = Vec::new();
    for i in 0..n as usize {
        let config = via_proxy::write_config(
            dir.path(),
            &format!("proxy-{}.toml", i + 1),
            cluster,
            w,
            SocketAddr::new(ip, 0),
            users.as_deref(),
        )?;
        let mut f = flags.to_vec();
        if n > 1 {
            f.extend(["--tier".into(), tier.clone(), "--peer-id".into(), (i + 1).to_string()]);
        }
        let path = dir.path().join(format!("proxy-{}.log", i + 1));
        let child = via_proxy::spawn(&config, &path, &f, sink(i, &log, &tx))?;
        slots.push(Slot { child, config, log: path, ended: None, processes: 1 });
        all_flags.push(f);
    }
    let addrs: Vec<SocketAddr> = slots.iter().map(|s| s.child.addr).collect();
    let shared = Arc::new(Shared { slots: Mutex::new(slots), log, feed: tx, flags: all_flags });
    if n > 1 {
        settle(&shared, n as usize)?;
    }
    let configs =
        addrs.iter().map(|&a| via_proxy::client_configs(a, &user, password.as_deref(), base.get_dbname())).collect();
    let who: Vec<String> = shared.slots.lock().expect("slots lock").iter().map(|s| s.child.pid().to_string()).collect();
    match n {
        1 => eprintln!("plbbench: clients go through a plbbench proxy process at {} (pid {})", addrs[0], who[0]),
        _ => eprintln!(
            "plbbench: clients go through a tier of {n} plbbench proxy processes ({tier}) at {} (pids {})",
            list(&addrs),
            who.join(", ")
        ),
    }
    let proxies = Proxies { shared, _dir: dir, addrs, password, faults, injector: None };
    Ok((proxies, ProxyLink { configs, start_unix_s: 0.0, feed }))
}

/// Where slot `i`'s feed lines go: the run's feed, and its tier lines to
/// the log too.
fn sink(i: usize, log: &Arc<Mutex<TierLog>>, tx: &UnboundedSender<Feed>) -> via_proxy::Sink {
    let (log, tx) = (log.clone(), tx.clone());
    Box::new(move |f: Feed| {
        if let Feed::Tier(l) = &f {
            log.lock().expect("tier log lock").push(l.t_s, i, Seen::Said(l.clone()));
        }
        let _ = tx.send(f);
    })
}

/// Waits until one member leads and every other follows it.
fn settle(shared: &Shared, n: usize) -> Result<(), Error> {
    let until = Instant::now() + SETTLE_WITHIN;
    while Instant::now() < until {
        if shared.log.lock().expect("tier log lock").settled(n) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let slots = shared.slots.lock().expect("slots lock");
    let tails: Vec<String> =
        slots.iter().enumerate().map(|(i, s)| format!("peer {}: {}", i + 1, via_proxy::log_tail(&s.log))).collect();
    Err(Error::Run(anyhow!(
        "the tier of {n} proxies did not elect a leader within {} s; their logs: {}",
        SETTLE_WITHIN.as_secs(),
        tails.join(" || ")
    )))
}

fn list(addrs: &[SocketAddr]) -> String {
    addrs.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(", ")
}

impl Proxies {
    /// Starts the proxy faults on their own thread, on the run's clock
    /// from `start`.
    pub fn inject(&mut self, start: Instant) {
        if self.faults.is_empty() {
            return;
        }
        let (stop, stopped) = mpsc::channel();
        let (shared, faults) = (self.shared.clone(), self.faults.clone());
        let thread = std::thread::spawn(move || {
            for f in faults {
                let due = start + Duration::from_secs_f64(f.t_s);
                if !matches!(
                    stopped.recv_timeout(due.saturating_duration_since(Instant::now())),
                    Err(mpsc::RecvTimeoutError::Timeout)
                ) {
                    return;
                }
                apply(&shared, f.action);
            }
            // The members it started again die with the thread that
            // started them (their parent-death signal is the thread's):
            // it lives until the run stops them.
            let _ = stopped.recv();
        });
        self.injector = Some((stop, thread));
    }

    /// What the report says of the proxies.
    pub fn describe(&self) -> String {
        match self.addrs.len() {
            1 => format!(
                "plbbench proxy process at {}: it routed every session; roles, probes and events are its own",
                self.addrs[0]
            ),
            n => format!(
                "a tier of {n} plbbench proxy processes at {} (peers 1 to {n}): they routed every session; roles \
                 and events are the leader's",
                list(&self.addrs)
            ),
        }
    }

    /// Stops the fault thread and every proxy; the verdicts (`proxy`, and
    /// `proxy tier` for a tier) and the tier's report, with the run's
    /// time zero `start_unix_s`, its end `end_s` and the sessions
    /// `[opened, lost]` the run counted through each peer.
    pub fn stop(mut self, start_unix_s: f64, end_s: f64, through: &[[u64; 2]]) -> (Vec<Verdict>, Option<TierReport>) {
        // In time order: a member's last lines may come after the run's
        // word that it ended, which is stamped when the signal was sent.
        let mut log = TierLog::default();
        let mut seen = self.shared.log.lock().expect("tier log lock").seen.clone();
        seen.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (t, slot, what) in seen {
            let t = t - start_unix_s;
            if t <= end_s {
                log.push(t, slot, what);
            }
        }
        let mut slots = self.shared.slots.lock().expect("slots lock");
        let n = slots.len();
        let mut ok = true;
        let mut parts = Vec::new();
        for (i, s) in slots.iter_mut().enumerate() {
            let (fine, how) = match s.ended {
                Some(ProxyAction::Restart) => {
                    (false, format!("could not be started again; its log: {}", via_proxy::log_tail(&s.log)))
                }
                Some(a) => (true, format!("was ended by the proxy fault {} and not started again", a.name())),
                None => s.child.stop(),
            };
            ok &= fine;
            let restarted = if s.processes > 1 { format!(" ({} processes)", s.processes) } else { String::new() };
            parts.push(match n {
                1 => format!("the proxy process {how}"),
                _ => format!("peer {}{restarted} {how}", i + 1),
            });
        }
        drop(slots);
        // Only now: the members the fault thread started again got its
        // death as their parent-death signal.
        if let Some((stop, thread)) = self.injector.take() {
            let _ = stop.send(());
            let _ = thread.join();
        }
        let mut verdicts = vec![Verdict { name: "proxy".into(), ok, detail: parts.join("; ") }];
        let report = (n > 1).then(|| proxy_tier::judge(&log, n as u32, &self.faults, end_s, through));
        if let Some(r) = &report {
            let (ok, detail) = r.verdict(end_s);
            verdicts.push(Verdict { name: "proxy tier".into(), ok, detail });
        }
        (verdicts, report)
    }
}

/// Applies one proxy fault now, and says so in the run's events.
fn apply(shared: &Shared, action: ProxyAction) {
    let leader = shared.log.lock().expect("tier log lock").leader();
    let mut slots = shared.slots.lock().expect("slots lock");
    let running: Vec<usize> = (0..slots.len()).filter(|&i| slots[i].ended.is_none()).collect();
    let said = match action {
        ProxyAction::KillLeader => match leader.filter(|l| running.contains(l)) {
            Some(i) => {
                let t = unix_now();
                slots[i].child.kill();
                end(shared, &mut slots[i], i, action, t);
                format!("proxy peer {} (the leader) killed with SIGKILL", i + 1)
            }
            None => "kill-leader: no member leads now; nothing killed".into(),
        },
        ProxyAction::StopFollower => match running.iter().copied().find(|&i| Some(i) != leader) {
            Some(i) => {
                let t = unix_now();
                let (_, how) = slots[i].child.stop();
                end(shared, &mut slots[i], i, action, t);
                format!("proxy peer {} (a follower) stopped with SIGTERM: it {how}", i + 1)
            }
            None => "stop-follower: no member follows now; nothing stopped".into(),
        },
        ProxyAction::Restart => {
            let mut said = Vec::new();
            let down: Vec<usize> = (0..slots.len()).filter(|&i| slots[i].ended.is_some()).collect();
            for i in down {
                said.push(match restart(shared, &mut slots[i], i) {
                    Ok(()) => format!("proxy peer {} started again (pid {})", i + 1, slots[i].child.pid()),
                    Err(e) => {
                        slots[i].ended = Some(ProxyAction::Restart);
                        format!("proxy peer {} could not start again: {e}", i + 1)
                    }
                });
            }
            said.join("; ")
        }
    };
    eprintln!("plbbench: {said}");
    let t_s = unix_now();
    let _ = shared.feed.send(Feed::Event { t_s, kind: EventKind::Tier, replica: None, detail: said });
}

/// Slot `i`'s process was ended by `action`, sent at `t` (Unix seconds:
/// it led or followed until then at most): logged.
fn end(shared: &Shared, slot: &mut Slot, i: usize, action: ProxyAction, t: f64) {
    slot.ended = Some(action);
    shared.log.lock().expect("tier log lock").push(t, i, Seen::Ended(action));
}

/// Starts slot `i` again with its peer id, at its client address.
fn restart(shared: &Shared, slot: &mut Slot, i: usize) -> Result<(), Error> {
    let text = std::fs::read_to_string(&slot.config).context("reading the proxy config")?;
    let listen = format!("listen = \"{}\"", slot.child.addr);
    let fixed: Vec<String> =
        text.lines().map(|l| if l.starts_with("listen = ") { listen.clone() } else { l.to_string() }).collect();
    crate::fsutil::write_atomic(&slot.config, fixed.join("\n") + "\n", 0o600).context("writing the proxy config")?;
    let log = slot.log.with_extension(format!("{}.log", slot.processes + 1));
    // Logged first: the new process's lines are its own, not the last one's.
    shared.log.lock().expect("tier log lock").push(unix_now(), i, Seen::Restarted);
    let child = via_proxy::spawn(&slot.config, &log, &shared.flags[i], sink(i, &shared.log, &shared.feed))
        .inspect_err(|_| {
            shared.log.lock().expect("tier log lock").push(unix_now(), i, Seen::Ended(ProxyAction::Restart))
        })?;
    slot.child = child;
    slot.log = log;
    slot.ended = None;
    slot.processes += 1;
    Ok(())
}
