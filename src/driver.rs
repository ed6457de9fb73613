//! Real client sessions (design.md §1, §4): T tokio tasks, one per client,
//! each opening its own tokio-postgres connection on the replica the router
//! chose, running its queries with think times, and reporting every query
//! and session to one collector task over a channel. Alongside run a fault
//! injector, health probes (the router is not told of faults unless
//! `--detection oracle`) and a once-per-second CPU sampler.
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

use crate::cluster::Cluster;
use crate::core::detect::{Detector, Probe};
use crate::core::metrics::{Collector, QueryRecord, ReplicaSample, SessionRecord};
use crate::core::model::{Class, FaultEvent, ReplicaId};
use crate::core::router::Router;
use crate::core::schedule::Client;
use crate::core::workload::{QueryTemplate, Workload};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};
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
    Started(Class),
    Ended(SessionRecord),
    Event(f64, &'static str, Option<ReplicaId>, String),
    Sample(f64, Vec<ReplicaSample>),
}

/// What a real run needs.
pub struct DriverInput {
    /// The workload.
    pub workload: Arc<Workload>,
    /// Client scripts.
    pub clients: Vec<Client>,
    /// The router, fresh.
    pub router: Router,
    /// Fault schedule, scaled.
    pub faults: Vec<FaultEvent>,
    /// Run length, seconds.
    pub duration_s: f64,
    /// Probe interval; `None` = oracle detection.
    pub probe_interval: Option<Duration>,
    /// Show a progress bar.
    pub progress: bool,
}

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
    pub signal: Option<&'static str>,
    /// Run time (seconds) when every task had stopped: the planned end (or
    /// the signal plus the drain) plus however long stopping took.
    pub ended_s: f64,
}

/// SIGINT and SIGTERM as one stream. Listening replaces their default
/// action (termination) for the rest of the process, so once the driver has
/// run, later signals no longer kill plbbench before it cleans up.
struct Signals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Signals {
        let listen = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("plbbench: warning: cannot listen for {name}: {e}");
                None
            }
        };
        Signals { int: listen(SignalKind::interrupt(), "SIGINT"), term: listen(SignalKind::terminate(), "SIGTERM") }
    }

    /// The next signal's name; never returns when none can arrive.
    async fn recv(&mut self) -> &'static str {
        async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
            if let Some(s) = s {
                if s.recv().await.is_some() {
                    return;
                }
            }
            std::future::pending::<()>().await
        }
        tokio::select! {
            _ = next(&mut self.int) => "SIGINT",
            _ = next(&mut self.term) => "SIGTERM",
        }
    }
}

/// Shared state of one run.
struct Ctx {
    start: Instant,
    workload: Arc<Workload>,
    router: Mutex<Router>,
    configs: Vec<Config>,
    tx: mpsc::UnboundedSender<Msg>,
    /// Set at the end or on the first signal: no new session or query.
    stop: watch::Receiver<bool>,
    /// Set when queries in flight are to be dropped (after `stop`).
    abort: watch::Receiver<bool>,
    actual_up: Vec<AtomicBool>,
    /// Per replica, when a failure was last observed (f64 seconds as bits).
    failed_s: Vec<AtomicU64>,
    sessions: AtomicU64,
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

    fn role_events(&self, router: &mut Router) {
        let t = self.now();
        for ch in router.drain_changes() {
            self.send(Msg::Event(t, "role", Some(ch.replica), format!("{}->{} {}", ch.from, ch.to, ch.reason)));
        }
    }

    /// The router learns of a health change (from a probe, a connection
    /// error or the oracle); logged once per change.
    fn observe(&self, r: ReplicaId, healthy: bool, how: &str) {
        self.observe_since(r, healthy, how, f64::INFINITY);
    }

    /// [`Self::observe`] for a check that began at `began_s`: a success is
    /// stale, and ignored, when a failure of `r` was seen after it began
    /// (a probe that connected just before a Down must not undo its
    /// detection).
    fn observe_since(&self, r: ReplicaId, healthy: bool, how: &str, began_s: f64) {
        let mut router = self.router.lock().expect("router lock");
        if !healthy {
            self.failed_s[r].store(self.now().to_bits(), Ordering::SeqCst);
        } else if began_s < f64::from_bits(self.failed_s[r].load(Ordering::SeqCst)) {
            return;
        }
        if router.is_healthy(r) != healthy {
            router.set_health(r, healthy);
            let what = if healthy { "up" } else { "down" };
            self.send(Msg::Event(self.now(), "detect", Some(r), format!("{what} ({how})")));
            self.role_events(&mut router);
        }
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }
}

/// Sleeps until `t`, or returns false early when the run stops.
async fn wait_until(ctx: &Ctx, t: Instant) -> bool {
    let mut stop = ctx.stop.clone();
    tokio::select! {
        _ = sleep_until(t) => !ctx.stopped(),
        _ = stop.wait_for(|s| *s) => false,
    }
}

/// Runs the sessions against `cluster` until the planned end (or a signal,
/// see the module doc).
pub async fn run(input: DriverInput, cluster: Arc<Mutex<Cluster>>, collector: Collector) -> (Collector, DriverOutcome) {
    let mut signals = Signals::new();
    let k = input.router.config().replicas;
    let configs = {
        let c = cluster.lock().expect("cluster lock");
        (0..k).map(|r| c.config(r)).collect()
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (abort_tx, abort_rx) = watch::channel(false);
    let ctx = Arc::new(Ctx {
        start: Instant::now(),
        workload: input.workload.clone(),
        router: Mutex::new(input.router),
        configs,
        tx,
        stop: stop_rx,
        abort: abort_rx,
        actual_up: (0..k).map(|_| AtomicBool::new(true)).collect(),
        failed_s: (0..k).map(|_| AtomicU64::new(f64::NEG_INFINITY.to_bits())).collect(),
        sessions: AtomicU64::new(0),
    });
    let collecting = tokio::spawn(collect(rx, collector));
    let clients: Vec<_> = input.clients.into_iter().map(|c| tokio::spawn(client(ctx.clone(), c))).collect();
    let mut clients = tokio::spawn(join_clients(clients));
    let injector = tokio::spawn(inject(ctx.clone(), cluster.clone(), input.faults, input.probe_interval.is_none()));
    let prober = input.probe_interval.map(|i| tokio::spawn(probe(ctx.clone(), i)));
    let bar = progress_bar(input.progress, input.duration_s);
    let sampler = tokio::spawn(sample(ctx.clone(), cluster, bar.clone()));
    let interrupted = tokio::select! {
        _ = sleep_until(ctx.at(input.duration_s)) => None,
        s = signals.recv() => Some((s, ctx.now())),
    };
    let _ = stop_tx.send(true);
    let drained = match interrupted {
        Some((first, _)) => drain(&ctx, &bar, &mut signals, &mut clients, first).await,
        None => None,
    };
    let _ = abort_tx.send(true);
    let in_flight = match drained {
        Some(n) => n,
        None => clients.await.expect("client tasks"),
    };
    let _ = injector.await;
    if let Some(p) = prober {
        let _ = p.await;
    }
    let _ = sampler.await;
    bar.finish_and_clear();
    let ended_s = ctx.now();
    drop(ctx);
    let collector = collecting.await.expect("collector task");
    let (signal, interrupted_s) = (interrupted.map(|i| i.0), interrupted.map(|i| i.1));
    (collector, DriverOutcome { in_flight, partial: interrupted_s.is_some(), interrupted_s, signal, ended_s })
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

/// After the first signal (admissions already stopped): gives queries in
/// flight up to [`DRAIN`] to finish, or less if a second signal comes.
/// Returns the clients' in-flight counts when every client finished first.
async fn drain(
    ctx: &Ctx,
    bar: &indicatif::ProgressBar,
    signals: &mut Signals,
    clients: &mut JoinHandle<[u64; 2]>,
    first: &'static str,
) -> Option<[u64; 2]> {
    let note = |m: String| {
        bar.suspend(|| eprintln!("plbbench: {m}"));
        ctx.send(Msg::Event(ctx.now(), "note", None, m));
    };
    note(format!(
        "{first}: stopping; queries in flight may finish within {} s (signal again to stop at once)",
        DRAIN.as_secs()
    ));
    tokio::select! {
        done = clients => Some(done.expect("client tasks")),
        _ = sleep(DRAIN) => None,
        again = signals.recv() => {
            note(format!("{again}: stopping at once; queries in flight are dropped"));
            None
        }
    }
}

async fn collect(mut rx: mpsc::UnboundedReceiver<Msg>, mut col: Collector) -> Collector {
    while let Some(m) = rx.recv().await {
        match m {
            Msg::Query(q) => col.query(q),
            Msg::Started(c) => col.session_started(c),
            Msg::Ended(s) => col.session_ended(s),
            Msg::Event(t, kind, r, detail) => col.event(t, kind, r, detail),
            Msg::Sample(t, s) => col.sample(t, &s),
        }
    }
    col
}

fn progress_bar(show: bool, duration_s: f64) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(duration_s.ceil() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{wide_bar}] {pos}/{len} s  {msg}")
            .expect("valid template"),
    );
    bar
}

/// A session's outcome after its queries.
enum SessionEnd {
    Completed,
    Aborted(&'static str, u32),
    Stopped,
}

/// One client: think, open a session, run its queries, close, repeat.
/// Returns its class if a session was open when the run stopped.
async fn client(ctx: Arc<Ctx>, mut script: Client) -> Option<Class> {
    let w = ctx.workload.clone();
    let class = script.class;
    let mut intended = script.arrival_s + script.between_s(&w);
    let mut resume: Option<u32> = None;
    loop {
        if !wait_until(&ctx, ctx.at(intended)).await {
            return None;
        }
        let admitted = {
            let mut router = ctx.router.lock().expect("router lock");
            let r = router.admit(class);
            ctx.role_events(&mut router);
            r
        };
        let Some(r) = admitted else {
            intended = ctx.now() + w.client.backoff_ms as f64 / 1000.0;
            continue;
        };
        ctx.send(Msg::Started(class));
        let queries = resume.take().unwrap_or_else(|| script.session_len(&w));
        let end = session(&ctx, &mut script, r, queries, intended).await;
        ctx.router.lock().expect("router lock").release(r, class);
        let now = ctx.now();
        let abort = match end {
            SessionEnd::Stopped => return Some(class),
            SessionEnd::Completed => None,
            SessionEnd::Aborted(why, left) => {
                resume = Some(left);
                Some(why.to_string())
            }
        };
        ctx.send(Msg::Ended(SessionRecord { class, start_s: intended, end_s: now, abort: abort.clone() }));
        intended = if abort.is_some() { now + w.client.backoff_ms as f64 / 1000.0 } else { now + script.between_s(&w) };
    }
}

/// Runs one session on replica `r`; `intended` is when it should start.
async fn session(ctx: &Ctx, script: &mut Client, r: ReplicaId, queries: u32, intended: f64) -> SessionEnd {
    let w = &ctx.workload;
    let id = ctx.sessions.fetch_add(1, Ordering::Relaxed) + 1;
    let connect_deadline = Duration::from_millis(w.client.connect_timeout_ms);
    let mut stop = ctx.stop.clone();
    let connected = tokio::select! {
        c = timeout(connect_deadline, ctx.configs[r].connect(NoTls)) => c,
        _ = stop.wait_for(|s| *s) => return SessionEnd::Stopped,
    };
    let client = match connected {
        Ok(Ok((client, conn))) => {
            tokio::spawn(conn);
            client
        }
        Ok(Err(_)) => {
            ctx.observe(r, false, "connection refused");
            return SessionEnd::Aborted("connect refused", queries);
        }
        Err(_) => return SessionEnd::Aborted("connect timeout", queries),
    };
    let mut due = intended;
    let mut statements = std::collections::HashMap::new();
    for left in (1..=queries).rev() {
        if !wait_until(ctx, ctx.at(due)).await {
            return SessionEnd::Stopped;
        }
        let draw = script.query(w);
        let sent = ctx.now();
        let q = &w.query[draw.template];
        let deadline = Duration::from_millis(w.client.query_timeout_ms);
        let run = async {
            if !statements.contains_key(&draw.template) {
                statements.insert(draw.template, prepare(&client, q).await?);
            }
            execute(&client, &statements[&draw.template], q, draw.param).await
        };
        let mut abort = ctx.abort.clone();
        let result = tokio::select! {
            r = timeout(deadline, run) => r,
            _ = abort.wait_for(|s| *s) => return SessionEnd::Stopped,
        };
        let end = ctx.now();
        let error = match result {
            Ok(Ok(_)) => None,
            Ok(Err(e)) if e.is_closed() || e.code().is_none() => Some("connection lost"),
            Ok(Err(_)) => Some("query error"),
            Err(_) => Some("timeout"),
        };
        let class = script.class;
        ctx.send(Msg::Query(QueryRecord {
            session: id,
            class,
            replica: r,
            intended_s: due,
            start_s: sent,
            end_s: end,
            error: error.map(String::from),
        }));
        if let Some(e) = error {
            if e == "connection lost" {
                ctx.observe(r, false, "connection error");
            }
            return SessionEnd::Aborted(e, left);
        }
        due = end + script.think_s(w);
    }
    SessionEnd::Completed
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
/// the blocking pool); with the oracle the router is told at once.
async fn inject(ctx: Arc<Ctx>, cluster: Arc<Mutex<Cluster>>, faults: Vec<FaultEvent>, oracle: bool) {
    for f in faults {
        if !wait_until(&ctx, ctx.at(f.t_s)).await {
            return;
        }
        let c = cluster.clone();
        let result = tokio::task::spawn_blocking(move || {
            let mut c = c.lock().expect("cluster lock");
            c.apply(f.replica, f.action.into())
        })
        .await;
        let detail = match result {
            Ok(Ok(note)) if note.is_empty() => f.action.to_string(),
            Ok(Ok(note)) => format!("{} ({note})", f.action),
            Ok(Err(e)) => format!("{} failed: {e}", f.action),
            Err(e) => format!("{} failed: {e}", f.action),
        };
        ctx.actual_up[f.replica].store(f.action.leaves_up(), Ordering::SeqCst);
        ctx.send(Msg::Event(f.t_s, "fault", Some(f.replica), detail));
        if oracle {
            ctx.observe(f.replica, f.action.leaves_up(), "oracle");
        }
    }
}

/// Deadline of one health probe: longer than the interval, because a busy,
/// CPU-throttled replica may take a while to accept a connection.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Health probes, one task per replica, each over a persistent connection
/// (as a pooler checks its server connections), so a busy replica is asked
/// for `SELECT 1` rather than for a new backend. A broken or refused
/// connection removes a replica at once; timeouts only after
/// [`crate::core::detect::TIMEOUTS_TO_DOWN`] in a row (see `core::detect`).
async fn probe(ctx: Arc<Ctx>, interval: Duration) {
    let detector = Arc::new(Mutex::new(Detector::new(ctx.configs.len())));
    let tasks = (0..ctx.configs.len()).map(|r| probe_replica(ctx.clone(), detector.clone(), r, interval));
    futures_util::future::join_all(tasks).await;
}

async fn probe_replica(ctx: Arc<Ctx>, detector: Arc<Mutex<Detector>>, r: ReplicaId, interval: Duration) {
    let mut next = ctx.start + interval / 2;
    let mut client: Option<tokio_postgres::Client> = None;
    loop {
        if !wait_until(&ctx, next).await {
            return;
        }
        let began = ctx.now();
        let seen = match timeout(PROBE_TIMEOUT.max(interval), check(&ctx.configs[r], &mut client)).await {
            Ok(Ok(())) => Probe::Ok,
            Ok(Err(_)) => {
                client = None;
                Probe::Refused
            }
            Err(_) => Probe::Timeout,
        };
        let verdict = detector.lock().expect("detector lock").observe(r, seen);
        if let Some(healthy) = verdict {
            ctx.observe_since(r, healthy, "probe", began);
        }
        next = (next + interval).max(Instant::now());
    }
}

/// `SELECT 1` on the probe connection, (re)connecting when there is none.
async fn check(cfg: &Config, client: &mut Option<tokio_postgres::Client>) -> Result<(), tokio_postgres::Error> {
    if client.as_ref().is_none_or(|c| c.is_closed()) {
        let (c, conn) = cfg.connect(NoTls).await?;
        tokio::spawn(conn);
        *client = Some(c);
    }
    client.as_ref().expect("connected above").simple_query("SELECT 1").await.map(|_| ())
}

/// The view of every replica now: CPU (skipped while a fault action holds
/// the cluster), router role and sessions, real up state.
fn snapshot(ctx: &Ctx, cluster: &Mutex<Cluster>) -> Vec<ReplicaSample> {
    let k = ctx.configs.len();
    let cpu: Vec<Option<f64>> = match cluster.try_lock() {
        Ok(c) => (0..k).map(|r| c.cpu_seconds(r)).collect(),
        Err(_) => vec![None; k],
    };
    let router = ctx.router.lock().expect("router lock");
    (0..k)
        .map(|r| ReplicaSample {
            up: ctx.actual_up[r].load(Ordering::SeqCst),
            role: router.role(r),
            active: router.active(r),
            cpu_s: cpu[r],
        })
        .collect()
}

/// Once per second, and once more at the end so the last phase has its CPU.
async fn sample(ctx: Arc<Ctx>, cluster: Arc<Mutex<Cluster>>, bar: indicatif::ProgressBar) {
    let mut t = 0.0;
    loop {
        ctx.send(Msg::Sample(ctx.now(), snapshot(&ctx, &cluster)));
        bar.set_position(t as u64);
        t += 1.0;
        if !wait_until(&ctx, ctx.at(t)).await {
            ctx.send(Msg::Sample(ctx.now(), snapshot(&ctx, &cluster)));
            return;
        }
    }
}
