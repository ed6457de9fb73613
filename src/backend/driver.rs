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
    /// Connection settings through the proxy, Premium then Freemium: their
    /// application_name tells the proxy the class.
    pub configs: [Config; 2],
    /// The proxy's time zero, Unix seconds.
    pub start_unix_s: f64,
    /// The rest of its feed.
    pub feed: mpsc::UnboundedReceiver<Feed>,
}

/// The proxy's router as its feed last showed it: each replica's role and
/// open sessions `[P, F]`.
type RouterView = (Vec<Role>, Vec<[u32; 2]>);

/// The proxy child as the run sees it.
struct Proxied {
    configs: [Config; 2],
    /// The last view of its router.
    view: Mutex<Option<RouterView>>,
}

/// The client's connect deadline through the proxy is the workload's plus
/// this, so the proxy's own deadline on the replica (the workload's) fires
/// first and says which replica failed.
const PROXY_HOP: Duration = Duration::from_secs(1);

/// What the driver reports at the end.
#[derive(Debug, Default)]
pub struct DriverOutcome {
    /// Sessions open at the end, per class.
    pub in_flight: [u64; 2],
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
            let configs = l.configs.map(|c| with_tcp_deadline(c, tcp));
            (Some(Proxied { configs, view: Mutex::new(None) }), Some((l.feed, l.start_unix_s)))
        }
        None => (None, None),
    };
    let start = input.start.map_or_else(Instant::now, Instant::from_std);
    let started_unix_s = unix_now() - start.elapsed().as_secs_f64();
    let ctx = Arc::new(Ctx {
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
    let mut remotes = Vec::new();
    for f in forwarders {
        let end = f.await.expect("generator forwarder");
        for (sum, n) in in_flight.iter_mut().zip(end.in_flight.unwrap_or_default()) {
            *sum += n;
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
    let waiting = ctx.control(|ctl, _| ctl.c.waiting());
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
            partial: interrupted_s.is_some(),
            interrupted_s,
            signal,
            ended_s,
            generator,
            remotes,
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

/// A session's outcome after its queries.
enum SessionEnd {
    Completed,
    Aborted(AbortReason, u32),
    Stopped,
}

/// One client: think, open a session, run its queries, close, repeat.
/// Returns its class if a session was open when the run stopped.
async fn client(ctx: Arc<Ctx>, id: u32, mut script: Client) -> Option<Class> {
    let w = ctx.workload.clone();
    let class = script.class;
    let mut intended = script.arrival_s + script.between_s(&w);
    // When the client next tries; after "no replica can take it" the
    // session's intended start stays put, as in the simulator.
    let mut wake = intended;
    let mut login = false;
    let mut resume: Option<u32> = None;
    loop {
        if !wait_until(&ctx, ctx.at(wake)).await {
            return None;
        }
        ctx.started_late(wake);
        if !std::mem::replace(&mut login, true) {
            ctx.login(class, intended, LoginStep::Began);
        }
        let opened = match &ctx.proxy {
            None => open(&ctx, id, class).await,
            Some(p) => open_proxied(&ctx, p, class).await,
        };
        let (r, connected) = match opened {
            Opened::On(r, connected) => (r, connected),
            Opened::Rejected => {
                // Backs off as pools and drivers do (the workload's
                // `[client]` backoff with jitter), as after any refusal.
                ctx.login(class, intended, LoginStep::GaveUp(ctx.now()));
                login = false;
                intended = ctx.now() + script.backoff_s(&w);
                wake = intended;
                resume = None;
                continue;
            }
            Opened::NoRoute => {
                wake = ctx.now() + script.backoff_s(&w);
                continue;
            }
            Opened::Stopped => return None,
        };
        match &connected {
            Ok(_) => ctx.login(class, intended, LoginStep::LoggedIn(ctx.now())),
            Err(Some(_)) => ctx.login(class, intended, LoginStep::GaveUp(ctx.now())),
            Err(None) => {}
        }
        login = false;
        let queries = resume.take().unwrap_or_else(|| script.session_len(&w));
        let end = match connected {
            Ok(c) => session(&ctx, &mut script, r, c, queries, intended).await,
            Err(Some(why)) => SessionEnd::Aborted(why, queries),
            Err(None) => SessionEnd::Stopped,
        };
        if ctx.routes() {
            ctx.control(|ctl, now| ctl.ended(r, class, now));
        }
        let now = ctx.now();
        let abort = match end {
            SessionEnd::Stopped => return Some(class),
            SessionEnd::Completed => None,
            SessionEnd::Aborted(why, left) => {
                resume = Some(left);
                Some(why)
            }
        };
        ctx.send(Msg::Ended(SessionRecord { class, replica: r, start_s: intended, end_s: now, abort }));
        intended = if abort.is_some() {
            now + script.backoff_s(&w)
        } else {
            script.succeeded();
            now + script.between_s(&w)
        };
        wake = intended;
    }
}

/// A session's connection config with the workload's TCP connect deadline
/// (pgjdbc's `connectTimeout`); the login's deadline is [`login_deadline`].
fn with_tcp_deadline(mut c: Config, tcp: Duration) -> Config {
    c.connect_timeout(tcp);
    c
}

/// The workload's login deadline plus `hop` (the proxy's own step), or
/// none when the workload waits as pgjdbc's and libpq's defaults do.
fn login_deadline(w: &Workload, hop: Duration) -> Option<Duration> {
    w.client.login_deadline_s().map(|s| Duration::from_secs_f64(s) + hop)
}

/// The TCP connect's own deadline passed (tokio-postgres's
/// `connect_timeout`, an I/O error of kind `TimedOut`).
fn tcp_timed_out(e: &tokio_postgres::Error) -> bool {
    let io = std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>());
    io.is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
}

/// `f` under `deadline` if there is one: `None` when it passed first.
async fn within<T>(deadline: Option<Duration>, f: impl Future<Output = T>) -> Option<T> {
    match deadline {
        Some(d) => timeout(d, f).await.ok(),
        None => Some(f.await),
    }
}

/// A session's start: on a replica (connected, or why not: `None` when
/// the run stopped while it connected), or no session this time.
enum Opened {
    On(ReplicaId, Result<tokio_postgres::Client, Option<AbortReason>>),
    /// The admission gate refused it.
    Rejected,
    /// No replica could take it: back off and try again.
    NoRoute,
    /// The run stopped first.
    Stopped,
}

/// Admission by the controller here, then a connection to its replica.
async fn open(ctx: &Ctx, id: u32, class: Class) -> Opened {
    let r = match admit(ctx, id, class).await {
        Ok(r) => r,
        Err(no) => return no,
    };
    ctx.send(Msg::Started(class, r, ctx.now()));
    let deadline = login_deadline(&ctx.workload, Duration::ZERO);
    let mut stop = ctx.stop.clone();
    let connected = tokio::select! {
        c = within(deadline, ctx.configs[r.idx()].connect(NoTls)) => c,
        _ = stop.wait_for(|s| *s) => return Opened::On(r, Err(None)),
    };
    let err = match connected {
        Some(Ok((client, conn))) => {
            tokio::spawn(conn);
            return Opened::On(r, Ok(client));
        }
        Some(Err(e)) if tcp_timed_out(&e) => ConnectError::Timeout,
        Some(Err(e)) => ConnectError::of_sqlstate(e.code().map(|c| c.code())),
        None => ConnectError::Timeout,
    };
    let (why, confirm) = ctx.control(|ctl, now| ctl.c.connect_failed(r, err, now));
    ctx.confirm(confirm);
    Opened::On(r, Err(Some(why)))
}

/// `--via-proxy`: a connection through the proxy, which routes it and
/// names the replica (a ParameterStatus, or the DETAIL of its FATAL). A
/// refusal naming no replica (no replica can take the session, or the
/// proxy is unreachable) backs off as when no replica can take it here.
async fn open_proxied(ctx: &Ctx, p: &Proxied, class: Class) -> Opened {
    let deadline = login_deadline(&ctx.workload, PROXY_HOP);
    let mut stop = ctx.stop.clone();
    let connected = tokio::select! {
        c = within(deadline, p.configs[class.idx()].connect(NoTls)) => c,
        _ = stop.wait_for(|s| *s) => return Opened::Stopped,
    };
    let (r, connected) = match connected {
        Some(Ok((client, conn))) => {
            let Some(r) = conn.parameter(proxy_feed::REPLICA_PARAM).and_then(proxy_feed::replica_of_param) else {
                return Opened::NoRoute;
            };
            tokio::spawn(conn);
            (r, Ok(client))
        }
        Some(Err(e)) => match e.as_db_error().and_then(|d| d.detail()).and_then(proxy_feed::failure_of_detail) {
            Some((r, why)) => (r, Err(Some(AbortReason::Connect(why)))),
            None => return Opened::NoRoute,
        },
        None => return Opened::NoRoute,
    };
    ctx.send(Msg::Started(class, r, ctx.now()));
    Opened::On(r, connected)
}

/// `--via-proxy`: the proxy's events into the run's events (on the run's
/// clock) and its router's view for the once-per-second samples.
async fn follow(ctx: Arc<Ctx>, mut feed: mpsc::UnboundedReceiver<Feed>, offset_s: f64) {
    while let Some(msg) = feed.recv().await {
        match msg {
            Feed::Event { t_s, kind, replica, detail } => {
                let t_s = (t_s + offset_s).max(0.0);
                ctx.send(Msg::Control(ControlEvent::Log { t_s, kind, replica, detail }));
            }
            Feed::State { roles, active, .. } => {
                if let Some(p) = &ctx.proxy {
                    *p.view.lock().expect("proxy view lock") = Some((roles, active));
                }
            }
            Feed::Listening { .. } => {}
        }
    }
}

/// Asks the controller for a replica; a session the gate holds back waits
/// for [`admit_waiting`] (or a session's end) to admit or reject it. Not
/// admitted: the [`Opened`] the session ends its attempt with.
async fn admit(ctx: &Ctx, id: u32, class: Class) -> Result<ReplicaId, Opened> {
    let waiting = match ctx.control(|ctl, now| ctl.request(id, class, now)) {
        Asked::Now(Some(r)) => return Ok(r),
        Asked::Now(None) => return Err(Opened::NoRoute),
        Asked::Rejected(_) => return Err(Opened::Rejected),
        Asked::Waiting(rx) => rx,
    };
    let mut stop = ctx.stop.clone();
    tokio::select! {
        r = waiting => match r {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err(Opened::Rejected),
            Err(_) => Err(Opened::Stopped),
        },
        _ = stop.wait_for(|s| *s) => Err(Opened::Stopped),
    }
}

/// How often waiting sessions are admitted or expired.
const ADMIT_TICK: Duration = Duration::from_millis(20);

/// `--admission modes`: every [`ADMIT_TICK`], starts the waiting sessions
/// the gate now admits and rejects those past their deadline.
async fn admit_waiting(ctx: Arc<Ctx>) {
    let mut next = Instant::now();
    loop {
        next += ADMIT_TICK;
        if !wait_until(&ctx, next).await {
            return;
        }
        ctx.control(|ctl, now| ctl.admit_and_expire(now));
    }
}

/// `--metrics-addr`: copies the router and gate into the live metrics.
fn refresh_live(ctx: &Ctx) {
    if let Some(live) = &ctx.live {
        let ctl = ctx.control.lock().expect("control lock");
        live.lock().expect("metrics lock").refresh(ctl.c.router(), ctl.c.gate());
    }
}

/// Runs the queries of one session on replica `r` over `client`;
/// `intended` is when the session should have started.
async fn session(
    ctx: &Ctx,
    script: &mut Client,
    r: ReplicaId,
    client: tokio_postgres::Client,
    queries: u32,
    intended: f64,
) -> SessionEnd {
    let w = &ctx.workload;
    let id = ctx.sessions.fetch_add(1, Ordering::Relaxed) + 1;
    let mut due = intended;
    let mut statements = std::collections::HashMap::new();
    for left in (1..=queries).rev() {
        if !wait_until(ctx, ctx.at(due)).await {
            return SessionEnd::Stopped;
        }
        if left < queries {
            // The first query was due at the session's start, before the
            // connection: its wait is the database's, not the generator's.
            ctx.started_late(due);
        }
        let draw = script.query(w);
        let sent = ctx.now();
        let q = &w.query[draw.template];
        let base_s = Duration::from_millis(w.client.query_timeout_ms).as_secs_f64();
        let deadline = Duration::from_secs_f64(ctx.control(|ctl, _| ctl.c.query_deadline_s(base_s)));
        let run = async {
            let st = match statements.entry(draw.template) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(prepare(&client, q).await?),
            };
            execute(&client, st, q, draw.param).await
        };
        let mut abort = ctx.abort.clone();
        let result = tokio::select! {
            r = timeout(deadline, run) => r,
            _ = abort.wait_for(|s| *s) => return SessionEnd::Stopped,
        };
        let end = ctx.now();
        if !ctx.counts(end) {
            // Ended after the cutoff: dropped like a query still running.
            return SessionEnd::Stopped;
        }
        // What the server said, if it answered with an error: a session it
        // ended with its own FATAL is no evidence against the replica.
        let said = matches!(&result, Ok(Err(e)) if e.as_db_error().is_some());
        let error = match result {
            Ok(Ok(_)) => None,
            Ok(Err(e)) if connection_lost(&e) => Some(QueryError::ConnectionLost),
            Ok(Err(_)) => Some(QueryError::Failed),
            Err(_) => Some(QueryError::Timeout),
        };
        let class = script.class;
        ctx.send(Msg::Query(QueryRecord {
            session: id,
            class,
            replica: r,
            intended_s: due,
            start_s: sent,
            end_s: end,
            error,
        }));
        if ctx.routes() {
            let seen = if said { Some(QueryError::Failed) } else { error };
            let answer = seen.map_or(Ok((end - sent) * 1000.0), Err);
            let confirm = ctx.control(|ctl, now| ctl.c.query_answered(r, answer, sent, now));
            ctx.confirm(confirm);
        }
        if let Some(e) = error {
            return SessionEnd::Aborted(AbortReason::Query(e), left);
        }
        due = end + script.think_s(w);
    }
    SessionEnd::Completed
}

/// Whether a query's error means its connection is gone, as the run's
/// books count it: closed, no answer code, or SQLSTATE class 08
/// (connection exception: the 08006 a `plbbench proxy` sends when the
/// session's replica is lost). The controller is told a connection was lost
/// only when no server said so (see [`session`]).
fn connection_lost(e: &tokio_postgres::Error) -> bool {
    e.is_closed() || e.code().is_none_or(|c| c.code().starts_with("08"))
}

/// Prepares a query template; `$1` is typed int8 when it takes a key.
pub async fn prepare(client: &tokio_postgres::Client, q: &QueryTemplate) -> Result<Statement, tokio_postgres::Error> {
    let types: &[Type] = if q.key_range > 0 { &[Type::INT8] } else { &[] };
    client.prepare_typed(&q.sql, types).await
}

/// Runs a prepared template, binding `param` to `$1` when it takes a key.
pub async fn execute(
    client: &tokio_postgres::Client,
    st: &Statement,
    q: &QueryTemplate,
    param: i64,
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    if q.key_range > 0 {
        client.query(st, &[&param]).await
    } else {
        client.query(st, &[]).await
    }
}

/// Applies the fault schedule at its times (blocking cluster calls run on
/// the blocking pool); a Slow's fraction is of the budget `cpus`. The real
/// up state follows the replica's open faults (a slow replica is up); with
/// the oracle the router is told when it changes.
async fn inject(ctx: Arc<Ctx>, cluster: Arc<Mutex<Cluster>>, faults: Vec<FaultEvent>, cpus: f64) {
    let mut open = vec![Open::default(); ctx.configs.len()];
    for f in faults {
        if !wait_until(&ctx, ctx.at(f.t_s)).await {
            return;
        }
        let c = cluster.clone();
        let fault = Fault::of(f.action, cpus);
        let result = tokio::task::spawn_blocking(move || {
            let mut c = c.lock().expect("cluster lock");
            c.apply(f.replica.idx(), fault)
        })
        .await;
        let what = match fault {
            Fault::Slow(c) => format!("{} ({c:.3} cores)", f.action),
            _ => f.action.to_string(),
        };
        let detail = match result {
            Ok(Ok(note)) if note.is_empty() => what,
            Ok(Ok(note)) => format!("{what} ({note})"),
            Ok(Err(e)) => format!("{what} failed: {e}"),
            Err(e) => format!("{what} failed: {e}"),
        };
        let was_up = open[f.replica.idx()].survivor();
        let _ = open[f.replica.idx()].apply(f.action);
        let up = open[f.replica.idx()].survivor();
        ctx.actual_up[f.replica.idx()].store(up, Ordering::SeqCst);
        ctx.control(|ctl, now| {
            ctl.c.fault(f.replica, detail, f.t_s);
            if up != was_up {
                ctl.c.told(f.replica, up, now);
            }
        });
    }
}

/// Runs each confirming probe the controller asks for on a task of its own
/// (`backend::probe::confirm`, a new connection within
/// `core::control::CONFIRM_TIMEOUT_S`) and tells the controller what it saw.
async fn confirmer(ctx: Arc<Ctx>, mut asked: mpsc::UnboundedReceiver<Confirm>) {
    while let Some(Confirm(r)) = asked.recv().await {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let began = ctx.now();
            let seen = super::probe::confirm(&ctx.configs[r.idx()]).await;
            ctx.control(|ctl, now| ctl.c.confirmed(r, seen, began, now));
        });
    }
}

/// Health probes, one task per replica, each over a persistent connection
/// (as a pooler checks its server connections), so a busy replica is asked
/// for `SELECT 1` rather than for a new backend. Each answer, refusal or
/// timeout is evidence for the router's watch (`core::watch`): the probe
/// detector removes a replica on a refusal at once, on timeouts only after
/// [`crate::core::detect::TIMEOUTS_TO_DOWN`] in a row; the suspicion
/// machine applies its own rules.
async fn probe(ctx: Arc<Ctx>, interval: Duration) {
    let tasks = (0..ctx.configs.len()).map(|r| probe_replica(ctx.clone(), ReplicaId(r), interval));
    futures_util::future::join_all(tasks).await;
}

async fn probe_replica(ctx: Arc<Ctx>, r: ReplicaId, interval: Duration) {
    let mut next = ctx.start + interval / 2;
    let mut client: Option<tokio_postgres::Client> = None;
    loop {
        if !wait_until(&ctx, next).await {
            return;
        }
        let began = ctx.now();
        let seen = super::probe::periodic(&ctx.configs[r.idx()], &mut client, interval).await;
        ctx.control(|ctl, now| {
            ctl.c.probed(r, seen, began, now);
            ctl.c.tick(now);
        });
        next = (next + interval).max(Instant::now());
    }
}

/// The view of every replica now: CPU (skipped while a fault action holds
/// the cluster), router role and sessions, real up state.
fn snapshot(ctx: &Ctx, cluster: &Mutex<Cluster>) -> Vec<ReplicaSample> {
    let k = ctx.configs.len();
    let cpu = cluster.try_lock().map_or_else(|_| vec![None; k], |c| c.cpu_readings());
    let proxy = ctx.proxy.as_ref().and_then(|p| p.view.lock().expect("proxy view lock").clone());
    ctx.control(|ctl, _| {
        (0..k)
            .map(|r| {
                let (role, active) = match &proxy {
                    Some((roles, active)) => (roles[r], active[r]),
                    None => (ctl.c.role(ReplicaId(r)), ctl.c.active(ReplicaId(r))),
                };
                ReplicaSample { up: ctx.actual_up[r].load(Ordering::SeqCst), role, active, cpu_s: cpu[r] }
            })
            .collect()
    })
}

/// plbbench's own CPU and the sessions open now, for the saturation guard.
fn generator_sample(ctx: &Ctx, replicas: &[ReplicaSample]) {
    if let Some(cpu) = own_cpu_seconds() {
        let open = replicas.iter().map(|r| u64::from(r.active[0] + r.active[1])).sum();
        ctx.send(Msg::Generator(ctx.now(), cpu, open));
    }
}

/// Once per second, and once more at the end so the last phase has its CPU.
/// Each reading is the gate's load too (`Controller::sample`).
async fn sample(ctx: Arc<Ctx>, cluster: Arc<Mutex<Cluster>>, bar: indicatif::ProgressBar) {
    let mut t = 0.0;
    loop {
        ctx.control(|ctl, now| ctl.c.tick(now));
        let (now, snap) = (ctx.now(), snapshot(&ctx, &cluster));
        generator_sample(&ctx, &snap);
        let cpu: Vec<Option<f64>> = snap.iter().map(|s| s.cpu_s).collect();
        ctx.control(|ctl, _| ctl.c.sample(now, &cpu));
        ctx.send(Msg::Sample(now, snap));
        refresh_live(&ctx);
        bar.set_position(t as u64);
        t += 1.0;
        if !wait_until(&ctx, ctx.at(t)).await {
            let view = snapshot(&ctx, &cluster);
            generator_sample(&ctx, &view);
            ctx.send(Msg::Sample(ctx.now(), view));
            return;
        }
    }
}
