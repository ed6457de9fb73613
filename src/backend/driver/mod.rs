//! Real client sessions (design.md §1, §4): T tokio tasks, one per client,
//! each opening its own tokio-postgres connection on the replica the router
//! chose, running its queries with think times, and reporting every query
//! and session to one collector task over a channel. Every decision —
//! routing, admission, detection, the degradation mode — is the run
//! controller's (`core::control`, the simulator's too), kept behind one
//! mutex: the tasks here tell it what they saw and carry out what it
//! decides. Alongside run a fault injector, health probes (the router is
//! not told of faults unless `--detection oracle`) and a once-per-second
//! CPU sampler, which also samples plbbench's own CPU for the generator
//! saturation guard (`core::saturation`; every session start and query
//! reports its schedule lag to it too).
//!
//! Stopping: at the planned end every task stops at once and queries still
//! running are dropped (so no phase counts work done after its end). The
//! first SIGINT or SIGTERM stops admissions, new sessions and new queries
//! and lets queries in flight finish for up to [`DRAIN`] (they are recorded
//! as usual); the rest are then dropped, and the run returns marked
//! partial. A second signal during that wait drops them at once. Each
//! signal is logged as a `note` row in events.csv. Either way
//! the driver returns normally, so the caller writes the run folder and
//! tears the cluster down; sessions open at the end are counted in flight,
//! and a dropped query is never recorded.

use super::clock;
use super::generator_feed::Line;
use super::remote::{self, Record, Remote, RemoteEnd};
use super::signals::Signals;
use crate::backend::live_metrics::{self, LiveMetrics};
use crate::backend::proxy_feed::{self, unix_now, Feed};
use crate::backend::waiting::{Asked, Control};
use crate::cluster::{Cluster, Fault};
use crate::core::control::{Confirm, ControlEvent, Controller};
use crate::core::faults::Open;
use crate::core::metrics::{Collector, LoginRecord, LoginStep, QueryRecord, ReplicaSample, SessionRecord};
use crate::core::model::{AbortReason, Class, ConnectError, EventKind, FaultEvent, QueryError, ReplicaId, Role};
use crate::core::saturation::{GeneratorLoad, GeneratorReport};
use crate::core::schedule::Client;
use crate::core::workload::{QueryTemplate, Workload};
use crate::error::Signal;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tokio_postgres::types::Type;
use tokio_postgres::{Config, NoTls, Statement};

mod client;
mod tasks;

pub use client::prepare;
use client::*;
use tasks::*;

/// How long queries in flight may run on after the first SIGINT/SIGTERM.
pub const DRAIN: Duration = Duration::from_secs(2);

/// A message to the collector task.
enum Msg {
    Query(QueryRecord),
    /// A session the router admitted: class, replica, run time.
    Started(Class, ReplicaId, f64),
    Ended(SessionRecord),
    /// A step of a session's login.
    Login(LoginRecord),
    /// An event row or admission record from the controller.
    Control(ControlEvent),
    Sample(f64, Vec<ReplicaSample>),
    /// Schedule lag of a session start or query, seconds.
    Lag(f64),
    /// plbbench's cumulative CPU seconds at a run time, and sessions open.
    Generator(f64, f64, u64),
}

impl Msg {
    /// The line a generator child sends its parent for this message, if
    /// the parent wants it (records and lags; the child's samples, events
    /// and CPU stay its own).
    fn line(&self) -> Option<Line> {
        Some(match self {
            Msg::Query(q) => Line::Query(q.clone()),
            Msg::Started(class, replica, t_s) => Line::Session { class: *class, replica: *replica, t_s: *t_s },
            Msg::Ended(s) => Line::Ended(s.clone()),
            Msg::Login(l) => Line::Login(*l),
            Msg::Lag(s) => Line::Lag { s: *s },
            _ => return None,
        })
    }
}

impl From<Record> for Msg {
    fn from(r: Record) -> Msg {
        match r {
            Record::Query(q) => Msg::Query(q),
            Record::Session(c, r, t) => Msg::Started(c, r, t),
            Record::Ended(s) => Msg::Ended(s),
            Record::Login(l) => Msg::Login(l),
            Record::Lag(l) => Msg::Lag(l),
        }
    }
}

/// Test-only knob (documented in docs/testing.md): busy-spin this
/// many milliseconds of CPU inside the generator loop before every session
/// start and query, to starve the generator on purpose so the saturation
/// guard's integration test can check that such a run is flagged. Never set
/// it for a measurement.
pub const TEST_BURN_ENV: &str = "PLBBENCH_TEST_GENERATOR_BURN_MS";

/// What a real run needs.
pub struct DriverInput {
    /// The workload.
    pub workload: Arc<Workload>,
    /// Client scripts.
    pub clients: Vec<Client>,
    /// The run controller over a fresh router, its watch and the optional
    /// admission gate (`--admission modes`).
    pub control: Controller,
    /// Fault schedule, scaled.
    pub faults: Vec<FaultEvent>,
    /// Run length, seconds.
    pub duration_s: f64,
    /// CPU budget per replica C (cores): the base of the utilisation the
    /// gate sees and of a Slow's fraction (Restore gives back exactly C).
    pub cpus: f64,
    /// Probe interval; `None`: no probes (oracle detection).
    pub probe_interval: Option<Duration>,
    /// What progress to show: the bar, or status lines from the collector.
    pub progress: crate::progress::Shown,
    /// `--metrics-addr`: the bound listener to serve Prometheus metrics on.
    pub metrics: Option<std::net::TcpListener>,
    /// `--via-proxy`: the proxy child the clients go through (it routes;
    /// the controller here only logs the faults).
    pub proxy: Option<ProxyLink>,
    /// The run's time zero (`None`: when the driver starts): a generator
    /// child counts from its parent's.
    pub start: Option<std::time::Instant>,
    /// A generator child: where each of its records goes, besides its
    /// collector (in batches to its stdout, which its parent reads:
    /// `backend::generator_feed::Tap`).
    pub tap: Option<Tap>,
    /// `--generators N`: the generator children whose records this run
    /// collects with its own.
    pub remotes: Vec<Remote>,
}

/// A generator child's outlet for its records.
pub type Tap = super::generator_feed::Tap;

/// `run --via-proxy`: how the clients reach the proxy child and what it
/// reports (`backend::proxy_feed`).
pub struct ProxyLink {
    /// Connection settings through each proxy (one, or a tier's members in
    /// peer order), Premium then Freemium: their application_name tells the
    /// proxy the class.
    pub configs: Vec<[Config; 2]>,
    /// The time zero of the feed's `t_s`, Unix seconds.
    pub start_unix_s: f64,
    /// The rest of its feed.
    pub feed: mpsc::UnboundedReceiver<Feed>,
}

/// The proxy's router as its feed last showed it: each replica's role and
/// open sessions `[P, F]`.
type RouterView = (Vec<Role>, Vec<[u32; 2]>);

/// The proxy child as the run sees it.
struct Proxied {
    /// Through each proxy, in peer order.
    configs: Vec<[Config; 2]>,
    /// The last view of its router.
    view: Mutex<Option<RouterView>>,
    /// In a tier: sessions opened through each peer (index peer - 1) and,
    /// of them, those whose connection closed mid-session with no word
    /// (the member holding it vanished).
    through: Vec<[AtomicU64; 2]>,
}

impl Proxied {
    /// Counts a session opened through `peer` (`lost`: then lost).
    fn count(&self, peer: Option<u8>, lost: bool) {
        if let Some(n) = peer.and_then(|p| self.through.get(usize::from(p).wrapping_sub(1))) {
            n[usize::from(lost)].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The most members of a tier whose sessions the run counts by peer.
pub const MAX_PEERS: usize = 8;

/// The client's connect deadline through the proxy is the workload's plus
/// this, so the proxy's own deadline on the replica (the workload's) fires
/// first and says which replica failed.
const PROXY_HOP: Duration = Duration::from_secs(1);

/// What the driver reports at the end.
#[derive(Debug, Default)]
pub struct DriverOutcome {
    /// Sessions open at the end, per class.
    pub in_flight: [u64; 2],
    /// `--admission modes` (the run routes itself): what the gate's
    /// signals did while a mode was degraded.
    pub modes: Option<crate::core::degradation::ModeBooks>,
    /// Interrupted by a signal.
    pub partial: bool,
    /// Run time (seconds) of the first signal, when interrupted: no query
    /// started after it, and none recorded ends later than [`DRAIN`] after it.
    pub interrupted_s: Option<f64>,
    /// The first signal, when interrupted (`SIGINT` or `SIGTERM`).
    pub signal: Option<Signal>,
    /// Run time (seconds) when every task had stopped: the planned end (or
    /// the signal plus the drain) plus however long stopping took.
    pub ended_s: f64,
    /// How hard plbbench itself worked (the saturation guard's verdict).
    pub generator: Option<GeneratorReport>,
    /// `--generators N`: what each child delivered (its open sessions are
    /// in `in_flight` already).
    pub remotes: Vec<RemoteEnd>,
    /// In a tier of proxies: sessions `[opened, lost]` through each peer
    /// (index peer - 1), this process's and its generator children's.
    pub through: Vec<[u64; 2]>,
}

/// Shared state of one run.
struct Ctx {
    start: Instant,
    workload: Arc<Workload>,
    control: Mutex<Control>,
    configs: Vec<Config>,
    tx: mpsc::UnboundedSender<Msg>,
    /// Set at the end or on the first signal: no new session or query.
    stop: watch::Receiver<bool>,
    /// Set when queries in flight are to be dropped (after `stop`).
    abort: watch::Receiver<bool>,
    actual_up: Vec<AtomicBool>,
    /// The last instant (run seconds, f64 bits) a query may end and still be
    /// recorded: the planned end, or the first signal plus [`DRAIN`], or the
    /// second signal. See [`Ctx::counts`].
    cutoff_s: AtomicU64,
    sessions: AtomicU64,
    /// [`TEST_BURN_ENV`]: CPU to burn before each session start and query.
    burn: Option<Duration>,
    /// `--metrics-addr`: refreshed once per second.
    live: Option<Arc<Mutex<LiveMetrics>>>,
    /// `--via-proxy`.
    proxy: Option<Proxied>,
    /// The confirming probes the controller asked for, to [`confirmer`].
    confirms: mpsc::UnboundedSender<Confirm>,
    /// Per replica, the sessions whose next statement the admission gate
    /// holds wait here (`client::statement`): woken one at a time as a
    /// statement there ends, all at once when the mode changes.
    held: Vec<tokio::sync::Notify>,
    /// The run routes through an admission gate (`--admission modes`,
    /// not through a proxy): its statements ask the gate first.
    gated: bool,
}

impl Ctx {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn at(&self, t_s: f64) -> Instant {
        self.start + Duration::from_secs_f64(t_s.max(0.0))
    }

    fn send(&self, m: Msg) {
        let _ = self.tx.send(m);
    }

    /// Runs `f` on the controller (and the waiters) under its lock, with
    /// the run time now, then sends the events it produced to the
    /// collector, still under the lock so they keep the controller's order.
    fn control<T>(&self, f: impl FnOnce(&mut Control, f64) -> T) -> T {
        let mut ctl = self.control.lock().expect("control lock");
        let out = f(&mut ctl, self.now());
        for e in ctl.c.drain_events() {
            self.send(Msg::Control(e));
        }
        out
    }

    /// Hands the confirming probe the controller asked for, if any, to
    /// [`confirmer`].
    fn confirm(&self, asked: Option<Confirm>) {
        if let Some(c) = asked {
            let _ = self.confirms.send(c);
        }
    }

    /// Whether a query that ended at `end_s` is recorded. The rule compares
    /// the query's own end with the cutoff, so which queries count does not
    /// depend on when a task happens to see the stop: every recorded query
    /// ends at or before the planned end (or the drain's end).
    fn counts(&self, end_s: f64) -> bool {
        end_s <= f64::from_bits(self.cutoff_s.load(Ordering::SeqCst))
    }

    /// Moves the cutoff earlier (never later) to `t_s`.
    fn cut_at(&self, t_s: f64) {
        let _ = self
            .cutoff_s
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| (t_s < f64::from_bits(c)).then(|| t_s.to_bits()));
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Whether this run routes its own sessions (no `--via-proxy`): only
    /// then is the controller told what the sessions saw.
    fn routes(&self) -> bool {
        self.proxy.is_none()
    }

    /// A step of the login of a `class` session intended at `intended_s`.
    fn login(&self, class: Class, intended_s: f64, step: LoginStep) {
        self.send(Msg::Login(LoginRecord { class, intended_s, step }));
    }

    /// Records the schedule lag of something due at `due_s` that starts now;
    /// then the test-only burn, which stands for a generator with too much
    /// work (it delays the other clients on this worker thread).
    fn started_late(&self, due_s: f64) {
        self.send(Msg::Lag(self.now() - due_s));
        if let Some(d) = self.burn {
            let t = std::time::Instant::now();
            while t.elapsed() < d {
                std::hint::spin_loop();
            }
        }
    }
}

/// plbbench's own CPU seconds so far (user + system, all threads).
pub fn own_cpu_seconds() -> Option<f64> {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    Some(secs(u.user_time()) + secs(u.system_time()))
}

/// plbbench's peak resident memory so far (VmHWM of /proc/self/status), KiB.
pub fn own_peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The test-only burn from [`TEST_BURN_ENV`], if set to a positive number.
fn test_burn() -> Option<Duration> {
    let ms: f64 = std::env::var(TEST_BURN_ENV).ok()?.trim().parse().ok()?;
    (ms.is_finite() && ms > 0.0).then(|| {
        eprintln!("plbbench: warning: {TEST_BURN_ENV}={ms} burns CPU in the generator on purpose (test only)");
        Duration::from_secs_f64(ms / 1000.0)
    })
}

/// Sleeps until `t`, or returns false early when the run stops.
async fn wait_until(ctx: &Ctx, t: Instant) -> bool {
    let mut stop = ctx.stop.clone();
    tokio::select! {
        _ = clock::sleep_until(t) => !ctx.stopped(),
        _ = stop.wait_for(|s| *s) => false,
    }
}

/// Runs the sessions against `cluster` until the planned end (or a signal,
/// see the module doc).
pub async fn run(input: DriverInput, cluster: Arc<Mutex<Cluster>>, collector: Collector) -> (Collector, DriverOutcome) {
    let mut signals = Signals::listen();
    let k = input.control.replicas();
    let gated = input.control.gate().is_some();
    let tcp = Duration::from_millis(input.workload.client.connect_timeout_ms);
    let configs = {
        let c = cluster.lock().expect("cluster lock");
        (0..k).map(|r| with_tcp_deadline(c.config(r), tcp)).collect()
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let (confirms, asked) = mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (abort_tx, abort_rx) = watch::channel(false);
    let (proxy, feed) = match input.proxy {
        Some(l) => {
            let configs = l.configs.into_iter().map(|p| p.map(|c| with_tcp_deadline(c, tcp))).collect();
            let through = (0..MAX_PEERS).map(|_| [AtomicU64::new(0), AtomicU64::new(0)]).collect();
            (Some(Proxied { configs, view: Mutex::new(None), through }), Some((l.feed, l.start_unix_s)))
        }
        None => (None, None),
    };
    let start = input.start.map_or_else(Instant::now, Instant::from_std);
    let started_unix_s = unix_now() - start.elapsed().as_secs_f64();
    let ctx = Arc::new(Ctx {
        gated: gated && proxy.is_none(),
        start,
        workload: input.workload.clone(),
        control: Mutex::new(Control::new(input.control)),
        configs,
        tx,
        stop: stop_rx,
        abort: abort_rx,
        actual_up: (0..k).map(|_| AtomicBool::new(true)).collect(),
        cutoff_s: AtomicU64::new(input.duration_s.to_bits()),
        sessions: AtomicU64::new(0),
        burn: test_burn(),
        live: input.metrics.is_some().then(|| Arc::new(Mutex::new(LiveMetrics::new()))),
        proxy,
        confirms,
        held: (0..k).map(|_| tokio::sync::Notify::new()).collect(),
    });
    let confirming = tokio::spawn(confirmer(ctx.clone(), asked));
    let follower = feed.map(|(rx, at)| tokio::spawn(follow(ctx.clone(), rx, at - started_unix_s)));
    refresh_live(&ctx);
    let server = input.metrics.zip(ctx.live.clone()).map(|(l, m)| tokio::spawn(live_metrics::serve(l, m)));
    let lines = (input.progress == crate::progress::Shown::Lines).then_some(input.duration_s);
    let collecting = tokio::spawn(collect(rx, collector, lines, ctx.live.clone(), input.tap));
    let stops: Vec<remote::Stop> = input.remotes.iter().map(|r| r.stop.clone()).collect();
    let (died_tx, mut died) = mpsc::unbounded_channel();
    let forwarders: Vec<_> = input
        .remotes
        .into_iter()
        .map(|r| {
            let (ctx, died) = (ctx.clone(), died_tx.clone());
            tokio::spawn(async move { remote::forward(r, |rec| ctx.send(rec.into()), died).await })
        })
        .collect();
    drop(died_tx);
    let clients: Vec<_> =
        input.clients.into_iter().enumerate().map(|(i, c)| tokio::spawn(client(ctx.clone(), i as u32, c))).collect();
    let admitter = gated.then(|| tokio::spawn(admit_waiting(ctx.clone())));
    let mut clients = tokio::spawn(join_clients(clients));
    let injector = tokio::spawn(inject(ctx.clone(), cluster.clone(), input.faults, input.cpus));
    let prober = input.probe_interval.map(|i| tokio::spawn(probe(ctx.clone(), i)));
    let bar = crate::progress::bar(input.progress == crate::progress::Shown::Bar, input.duration_s.ceil() as u64, "s");
    let sampler = tokio::spawn(sample(ctx.clone(), cluster, bar.clone()));
    let interrupted = tokio::select! {
        _ = sleep_until(ctx.at(input.duration_s)) => None,
        s = signals.recv() => Some((Some(s), ctx.now())),
        // A generator child that dies takes its sessions' books with it:
        // the run stops now, as on a signal, and fails its accounting.
        Some((index, who)) = died.recv() => {
            let m = format!("plbbench: error: generator {index} ({who}) died; the run cannot account for its sessions");
            crate::progress::note(&bar, &m);
            Some((None, ctx.now()))
        }
    };
    if let Some((_, t)) = interrupted {
        ctx.cut_at(t + DRAIN.as_secs_f64());
        for stop in &stops {
            stop();
        }
    }
    let _ = stop_tx.send(true);
    let drained = match interrupted {
        Some((first, _)) => {
            let why = first.map_or_else(|| "a generator died".to_string(), |s| s.to_string());
            drain(&ctx, &bar, &mut signals, &mut clients, why).await
        }
        None => None,
    };
    let _ = abort_tx.send(true);
    let mut in_flight = match drained {
        Some(n) => n,
        None => clients.await.expect("client tasks"),
    };
    let mut through: Vec<[u64; 2]> = match &ctx.proxy {
        Some(p) => p.through.iter().map(|[a, b]| [a.load(Ordering::Relaxed), b.load(Ordering::Relaxed)]).collect(),
        None => Vec::new(),
    };
    let mut remotes = Vec::new();
    for f in forwarders {
        let end = f.await.expect("generator forwarder");
        for (sum, n) in in_flight.iter_mut().zip(end.in_flight.unwrap_or_default()) {
            *sum += n;
        }
        for (sum, n) in through.iter_mut().zip(&end.through) {
            *sum = [sum[0] + n[0], sum[1] + n[1]];
        }
        remotes.push(end);
    }
    let _ = injector.await;
    if let Some(p) = prober {
        let _ = p.await;
    }
    let _ = sampler.await;
    if let Some(a) = admitter {
        let _ = a.await;
    }
    confirming.abort();
    if let Some(s) = server {
        s.abort();
    }
    if let Some(f) = follower {
        f.abort();
        let _ = f.await;
    }
    bar.finish_and_clear();
    let (waiting, modes) = ctx.control(|ctl, _| (ctl.c.waiting(), ctl.c.mode_books()));
    let ended_s = ctx.now();
    drop(ctx);
    let (mut collector, load) = collecting.await.expect("collector task");
    if let Some(w) = waiting {
        collector.still_queued(w);
    }
    let (signal, interrupted_s) = (interrupted.and_then(|i| i.0), interrupted.map(|i| i.1));
    let generator = Some(load.report(own_peak_rss_kib()));
    (
        collector,
        DriverOutcome {
            in_flight,
            modes,
            partial: interrupted_s.is_some(),
            interrupted_s,
            signal,
            ended_s,
            generator,
            remotes,
            through,
        },
    )
}

/// Waits for every client; returns the sessions left open per class.
async fn join_clients(clients: Vec<JoinHandle<Option<Class>>>) -> [u64; 2] {
    let mut in_flight = [0u64; 2];
    for c in clients {
        if let Ok(Some(class)) = c.await {
            in_flight[class.idx()] += 1;
        }
    }
    in_flight
}

/// After the first signal or a generator's death (`first`; admissions
/// already stopped): gives queries in
/// flight up to [`DRAIN`] to finish, or less if a second signal comes.
/// Returns the clients' in-flight counts when every client finished first.
async fn drain(
    ctx: &Ctx,
    bar: &indicatif::ProgressBar,
    signals: &mut Signals,
    clients: &mut JoinHandle<[u64; 2]>,
    first: String,
) -> Option<[u64; 2]> {
    let note = |m: String| {
        crate::progress::note(bar, &format!("plbbench: {m}"));
        ctx.send(Msg::Control(ControlEvent::Log { t_s: ctx.now(), kind: EventKind::Note, replica: None, detail: m }));
    };
    note(format!(
        "{first}: stopping; queries in flight may finish within {} s (signal again to stop at once)",
        DRAIN.as_secs()
    ));
    tokio::select! {
        done = clients => Some(done.expect("client tasks")),
        _ = sleep(DRAIN) => None,
        again = signals.recv() => {
            ctx.cut_at(ctx.now());
            note(format!("{again}: stopping at once; queries in flight are dropped"));
            None
        }
    }
}

/// Feeds every message to the collector (and each query to the live
/// metrics, if served); with `lines` (the run's length), prints a status
/// line on stderr every few seconds of run time.
async fn collect(
    mut rx: mpsc::UnboundedReceiver<Msg>,
    mut col: Collector,
    lines: Option<f64>,
    live: Option<Arc<Mutex<LiveMetrics>>>,
    mut tap: Option<Tap>,
) -> (Collector, GeneratorLoad) {
    let mut load = GeneratorLoad::new();
    let mut due = crate::core::status::Schedule::default();
    while let Some(m) = next(&mut rx, &mut tap).await {
        if let (Some(tap), Some(line)) = (&mut tap, m.line()) {
            tap.push(&line);
        }
        match m {
            Msg::Query(q) => {
                if let Some(live) = &live {
                    let ok = q.error.is_none();
                    live.lock().expect("live metrics lock").observe(q.class, ok, q.end_s - q.intended_s);
                }
                col.query(q)
            }
            Msg::Started(c, r, t) => col.session_started(c, r, t),
            Msg::Ended(s) => col.session_ended(s),
            Msg::Login(l) => col.login(l),
            Msg::Control(e) => e.record(&mut col),
            Msg::Sample(t, s) => {
                col.sample(t, &s);
                if let Some(duration_s) = lines {
                    if let Some((from, to)) = due.due(t) {
                        eprintln!("{}", col.status(from, to, duration_s, &s).line());
                    }
                }
            }
            Msg::Lag(l) => load.lag(l),
            Msg::Generator(t, cpu, open) => {
                load.cpu(t, cpu);
                load.sessions(open);
            }
        }
    }
    (col, load)
}

/// The collector's next message; meanwhile a generator child's tap sends
/// its batch when it is due (`generator_feed::Tap`).
async fn next(rx: &mut mpsc::UnboundedReceiver<Msg>, tap: &mut Option<Tap>) -> Option<Msg> {
    let Some(tap) = tap else { return rx.recv().await };
    loop {
        let Some(due) = tap.due() else { return rx.recv().await };
        if std::time::Instant::now() >= due {
            tap.flush();
            continue;
        }
        // A message already queued needs no timer.
        if let Ok(m) = rx.try_recv() {
            return Some(m);
        }
        tokio::select! {
            m = rx.recv() => return m,
            _ = sleep_until(due.into()) => tap.flush(),
        }
    }
}
