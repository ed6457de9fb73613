//! `plbbench proxy` ([proxy](docs/proxy.md)): a session-level PostgreSQL router that puts
//! PLB in front of clients plbbench did not write (psql, pgbench,
//! applications). A session's class comes from its startup packet
//! ([`class_rule`]), or, for a client that names itself late, from its
//! first statement ([`late_class`], [`late`]); the proxy authenticates the client itself
//! ([`login`], [`scram`]), in TLS when the config turns it on ([`tls`]);
//! the replica is chosen once, when the client
//! is ready, by the same run controller as `run` (`core::control`: router,
//! watch, admission gate, probation), fed by the same health probes; after
//! that bytes flow both ways, followed by message length only, save the
//! start of each statement, read for `SET application_name` ([`relay`]). Events go to stderr as
//! a run's go to events.csv; the run's Prometheus metrics are served with
//! the proxy's own beside them. SIGINT or SIGTERM stops accepting, lets
//! sessions finish for the configured drain time, then closes the rest
//! with an error. Logins and admission run on one tokio event loop, the
//! caller's; routed plain-TCP sessions are copied on pump threads of their
//! own ([`pump`]), TLS ones on that event loop.

pub mod class_rule;
pub mod config;
mod framing;
mod late;
pub mod late_class;
mod login;
mod pump;
mod relay;
pub mod scram;
mod server_pool;
pub mod startup;
mod statements;
pub mod tier;
pub mod tls;
mod violations;

use crate::backend::live_metrics::{self, LiveMetrics, SessionOutcome};
use crate::backend::proxy_feed::{unix_now, Feed, PROXY_PARAM, REPLICA_PARAM};
use crate::backend::signals::Signals;
use crate::backend::waiting::{Asked, Control};
use crate::cluster::Cluster;
use crate::core::control::{Confirm, ControlEvent, Controller, CONFIRM_TIMEOUT_S};
use crate::core::health::Evidence;
use crate::core::model::{Class, QueryError, ReplicaId};
use bytes::BytesMut;
use class_rule::ClassRule;
use login::{Entry, Fatal};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tls::ClientStream;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Notify};
use tokio_postgres::Config;
use tokio_rustls::TlsAcceptor;
use violations::{Verdict, Violations, Who};

/// What the proxy needs, resolved by the command.
pub struct ProxyInput {
    /// The listening socket, bound before the cluster started.
    pub listener: std::net::TcpListener,
    /// The run controller, fresh.
    pub control: Controller,
    /// How each replica is reached, r1..rK, with the cluster's credentials.
    pub replicas: Vec<Config>,
    /// The class rule.
    pub rule: ClassRule,
    /// Users and their secrets; `None`: trust.
    pub users: Option<HashMap<String, scram::Secret>>,
    /// TLS to clients, when the config enables it.
    pub tls: Option<tls::Tls>,
    /// Limits from the config file.
    pub login_timeout: Duration,
    /// How long a client whose startup packet carries no class may take
    /// to name it with its first statement.
    pub late_class_timeout: Duration,
    /// The proxy's own connection to a replica.
    pub server_connect_timeout: Duration,
    /// How long sessions may finish after a signal.
    pub drain: Duration,
    /// Health probe interval (`None`: oracle detection, no probes).
    pub probe_interval: Option<Duration>,
    /// The cluster, whose replicas' CPU the proxy reads once a second as a
    /// run does (PLB's `pressure` borrowing and the admission gate read it).
    pub cluster: Arc<Mutex<Cluster>>,
    /// `--metrics-addr`, bound.
    pub metrics: Option<std::net::TcpListener>,
    /// Write the feed (`backend::proxy_feed`) on stdout instead of event
    /// lines on stderr: a proxy `run --via-proxy` started.
    pub feed: bool,
    /// Pump threads that copy routed plain-TCP sessions (at least 1; see
    /// [`pump`]).
    pub threads: usize,
    /// Idle server connections kept per replica for later sessions (0:
    /// none; see [`server_pool`]), and how long one may stay idle.
    pub server_pool: usize,
    pub server_idle_timeout: Duration,
    /// Refuse a client's logins past its allowance of protocol violations
    /// ([`violations`]); else they are only counted and logged.
    pub refuse_violators: bool,
    /// Membership of a tier of proxies ([`tier`]), if any.
    pub tier: Option<tier::TierInput>,
}

/// How the proxy ended.
#[derive(Debug)]
pub struct ProxyOutcome {
    /// Sessions served (logged in and routed).
    pub sessions: u64,
    /// Sessions closed by the drain deadline.
    pub cut: usize,
    /// Logins to replicas, and sessions served on a kept connection.
    pub logins: u64,
    pub reused: u64,
    /// The tier's leader refused this member, saying why.
    pub refused: Option<String>,
}

/// A BackendKeyData's process id and secret key.
type CancelKey = (u32, u32);

/// State every connection task shares.
pub(crate) struct Shared {
    start: Instant,
    control: Mutex<Control>,
    replicas: Vec<Config>,
    rule: ClassRule,
    users: Option<HashMap<String, scram::Secret>>,
    tls: Option<tls::Tls>,
    server_connect_timeout: Duration,
    /// See [`ProxyInput::late_class_timeout`].
    late_class_timeout: Duration,
    /// The ParameterStatus messages of a server login (the first one the
    /// proxy saw), told to clients the proxy logs in itself.
    server_params: Mutex<Option<Vec<Vec<u8>>>>,
    /// Cancel keys of live sessions, as their clients know them: the
    /// replica that issued the session's key and that key (the same key,
    /// unless the proxy gave the client one of its own).
    keys: Mutex<HashMap<CancelKey, (ReplicaId, CancelKey)>>,
    /// Set when open sessions are to be closed.
    terminate: watch::Receiver<bool>,
    live: Option<Arc<Mutex<LiveMetrics>>>,
    /// Connections open now (logging in or in a session).
    open: AtomicUsize,
    routed: AtomicU32,
    /// See [`ProxyInput::feed`].
    feed: bool,
    /// Whether [`tick`] runs every 20 ms (something in the controller is
    /// timed) rather than once a second.
    ticking: AtomicBool,
    /// Wakes [`tick`] when something timed begins.
    timed: Notify,
    /// The threads that copy routed plain-TCP sessions.
    pumps: pump::Pumps<relay::Flow>,
    /// The confirming probes the controller asked for, to [`confirmer`].
    confirms: mpsc::UnboundedSender<Confirm>,
    /// Each client's allowance of protocol violations.
    violations: Mutex<Violations>,
    /// Server connections kept for later sessions.
    pool: Arc<server_pool::ServerPool>,
    /// This member's tier state, in a tier.
    tier: Option<Arc<tier::Tier>>,
    /// The controller has an admission gate: sessions' statements ask it
    /// ([`statements`]).
    gated: bool,
    /// See [`ProxyInput::refuse_violators`].
    refuse_violators: bool,
}

impl Shared {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Runs `f` on the controller under its lock and prints its events;
    /// wakes [`tick`] when `f` began something timed.
    fn control<T>(&self, f: impl FnOnce(&mut Control, f64) -> T) -> T {
        let mut ctl = self.control.lock().expect("control lock");
        let out = f(&mut ctl, self.now());
        self.log(ctl.c.drain_events());
        if ctl.timed() && !self.ticking.swap(true, Ordering::SeqCst) {
            self.timed.notify_one();
        }
        out
    }

    /// The controller's event rows: feed lines on stdout, or lines on
    /// stderr as events.csv's rows would read.
    fn log(&self, events: Vec<ControlEvent>) {
        if self.tier.as_ref().is_some_and(|t| !t.leading()) {
            // A follower's controller watches health for the day it leads;
            // the tier's roles are the leader's, and so are the events.
            return;
        }
        for e in events {
            let ControlEvent::Log { t_s, kind, replica, detail } = e else { continue };
            if self.feed {
                println!("{}", Feed::Event { t_s, kind, replica, detail }.line());
            } else {
                let r = replica.map(|r| r.to_string()).unwrap_or_default();
                eprintln!("plbbench proxy: event t={t_s:.3} {kind} {r} {detail}");
            }
        }
    }

    /// The feed's once-a-second view of the router.
    fn state(&self, c: &Controller) -> Feed {
        let k = self.replicas.len();
        Feed::State {
            t_s: self.now(),
            roles: ReplicaId::all(k).map(|r| c.role(r)).collect(),
            active: ReplicaId::all(k).map(|r| c.active(r)).collect(),
        }
    }

    /// The replica for a new session of `class`, as `run` admits one: at
    /// once, after a wait in the gate's queue, or refused with 53300.
    async fn admit(&self, id: u32, class: Class) -> Result<ReplicaId, Fatal> {
        if let Some(t) = &self.tier {
            return tier::admit(self, t, id, class).await;
        }
        let waiting = match self.control(|c, now| c.request(id, class, now)) {
            Asked::Now(Some(r)) => return Ok(r),
            Asked::Now(None) => return Err(full(class, "no replica can take it now")),
            Asked::Rejected(why) => return Err(full(class, &format!("refused by admission ({why})"))),
            Asked::Waiting(rx) => rx,
        };
        match waiting.await {
            Ok(Some(r)) => Ok(r),
            _ => Err(full(class, "refused by admission (deadline)")),
        }
    }

    /// Keeps the ParameterStatus messages of a server's login (from its
    /// AuthenticationOk through its ReadyForQuery), if none are kept yet.
    fn remember_params(&self, greeting: &[u8]) {
        let mut kept = self.server_params.lock().expect("params lock");
        if kept.is_none() {
            *kept = late_class::greeting(greeting).map(|g| g.params);
        }
    }

    /// Session `id`, routed as `class` to `r`, named itself `value` with
    /// `SET application_name`: said on stderr and counted when it names
    /// another class (the caller does this once per session).
    fn named_after_routing(&self, id: u32, r: ReplicaId, class: Class, value: &str) -> bool {
        let named = self.rule.class_of_value(value);
        if named == class {
            return false;
        }
        eprintln!(
            "plbbench proxy: session {id} set application_name {value:?} ({}) after it was routed as {} to {r}; \
             it stays there (sessions are routed once, at their start)",
            named.long(),
            class.long()
        );
        if let Some(live) = &self.live {
            live.lock().expect("metrics lock").proxy_class_after_routing(class);
        }
        true
    }

    /// Hands the confirming probe the controller asked for, if any, to
    /// [`confirmer`].
    fn confirm(&self, asked: Option<Confirm>) {
        if let Some(c) = asked {
            let _ = self.confirms.send(c);
        }
    }

    /// A session relayed to `r` since `began_s` lost its server with no word
    /// from it: `r` is suspect until a probe of the proxy's own says.
    /// Waits for that probe (at most `CONFIRM_TIMEOUT_S` and a little) and
    /// returns whether `r` is still up: then the server closed this session
    /// alone (as PostgreSQL does, with only a line in its log, on a message
    /// length it cannot take).
    async fn lost(&self, r: ReplicaId, began_s: f64) -> bool {
        let asked = self.control(|ctl, now| ctl.c.query_answered(r, Err(QueryError::ConnectionLost), began_s, now));
        self.confirm(asked);
        let until = Instant::now() + Duration::from_secs_f64(CONFIRM_TIMEOUT_S + 0.1);
        while self.control.lock().expect("control lock").c.confirming(r) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.control.lock().expect("control lock").c.is_healthy(r)
    }

    /// A session of `who` that the server ended with its own error `code`
    /// (passed on to the client): counted, and a protocol violation spends
    /// the client's allowance. Never evidence against the replica.
    /// `None`: it closed with no word while the replica still answers, as
    /// PostgreSQL does on a message length it cannot take (counted as a
    /// protocol violation too).
    fn server_ended(&self, who: &Who, code: Option<[u8; 5]>) {
        let code = code.map_or_else(|| "none".to_string(), |c| String::from_utf8_lossy(&c).into_owned());
        if code == "08P01" || code == "none" {
            self.violations.lock().expect("violations lock").record(who, self.now());
        }
        if let Some(live) = &self.live {
            live.lock().expect("metrics lock").proxy_server_ended(&code);
        }
    }

    /// Whether `who` may log in now: past its allowance of protocol
    /// violations it is said on stderr once per episode, and refused only
    /// when the config asks (`refuse_protocol_violators`): a neighbour
    /// sharing its address and user would be refused with it.
    fn allowed(&self, who: &Who) -> Result<(), Fatal> {
        let verdict = self.violations.lock().expect("violations lock").admit(who, self.now());
        let Verdict::Refuse { retry_s, first } = verdict else { return Ok(()) };
        let (addr, user) = who;
        if first {
            let then = if self.refuse_violators {
                "its logins are refused until its allowance is back"
            } else {
                "its logins are still served (refuse_protocol_violators is off)"
            };
            eprintln!(
                "plbbench proxy: client {addr} user {user:?}: more than {} sessions ended in protocol violations \
                 (08P01) at over {}/s; {then} (the roles are unchanged)",
                violations::BURST,
                violations::REFILL_PER_S
            );
        }
        if !self.refuse_violators {
            return Ok(());
        }
        if let Some(live) = &self.live {
            live.lock().expect("metrics lock").proxy_violation_refusal();
        }
        Err(Fatal::new(
            "53400",
            format!(
                "plbbench proxy: too many sessions from {addr} as {user:?} ended in protocol violations; retry in {retry_s:.1} s"
            ),
        ))
    }

    /// A session on `r` ended; hands freed capacity to waiting sessions.
    fn ended(&self, r: ReplicaId, class: Class) {
        if let Some(t) = &self.tier {
            return tier::ended(self, t, r, class);
        }
        self.control(|c, now| c.ended(r, class, now));
    }

    /// Counts a session's outcome in the metrics.
    fn count(&self, class: Class, r: Option<ReplicaId>, outcome: SessionOutcome, took: Duration) {
        if outcome == SessionOutcome::Routed {
            self.routed.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(live) = &self.live {
            live.lock().expect("metrics lock").proxy_session(class, r, outcome, took.as_secs_f64());
        }
    }

    /// Passes a cancel request to the replica that issued the key (PostgreSQL
    /// answers none; an unknown key is ignored, as a server does); in a
    /// tier, a key another member handed out goes to that member as it came.
    async fn cancel(&self, pid: u32, key: u32) {
        let peer = self.tier.as_ref().and_then(|t| match tier::cancel_key::owner(t.me.peer, pid) {
            tier::cancel_key::Owner::Peer(p) => Some(t.peer(p)),
            tier::cancel_key::Owner::Here => None,
        });
        let to = match peer {
            Some(Some(addr)) => Some((addr.ip().to_string(), addr.port(), (pid, key))),
            Some(None) => None,
            None => self.keys.lock().expect("keys lock").get(&(pid, key)).copied().and_then(|(r, k)| {
                let cfg = &self.replicas[r.idx()];
                match (cfg.get_hosts().first(), cfg.get_ports().first()) {
                    (Some(tokio_postgres::config::Host::Tcp(h)), Some(port)) => Some((h.clone(), *port, k)),
                    _ => None,
                }
            }),
        };
        let Some((host, port, (pid, key))) = to else { return };
        let mut packet = BytesMut::with_capacity(16);
        postgres_protocol::message::frontend::cancel_request(pid as i32, key as i32, &mut packet);
        let send = async {
            let mut s = TcpStream::connect((host.as_str(), port)).await?;
            s.write_all(&packet).await
        };
        let _ = tokio::time::timeout(self.server_connect_timeout, send).await;
    }

    /// The cancel key a client of this member gets for a server's
    /// greeting `greeting` (rewritten in place): in a tier, the server's
    /// key with this member's peer id in it, registered; `None` otherwise
    /// (the server's own key goes through).
    fn tier_key(&self, r: ReplicaId, greeting: &mut [u8]) -> Option<CancelKey> {
        let t = self.tier.as_ref()?;
        let (server, client) = tier::cancel_key::rewrite(greeting, t.me.peer)?;
        self.keys.lock().expect("keys lock").insert(client, (r, server));
        Some(client)
    }

    /// The ParameterStatus messages a routed session's client gets first:
    /// its replica, and in a tier the member that holds it.
    fn routed_params(&self, r: ReplicaId) -> Vec<u8> {
        let mut out = relay::parameter_status(REPLICA_PARAM, &r.to_string());
        if let Some(t) = &self.tier {
            out.extend(relay::parameter_status(PROXY_PARAM, &t.me.peer.to_string()));
        }
        out
    }

    /// A process id for the proxy's own cancel keys: in a tier, with this
    /// member's peer id in it.
    fn own_pid(&self) -> u32 {
        match &self.tier {
            Some(t) => tier::cancel_key::encode(t.me.peer, rand::random::<u32>() >> 8).expect("a peer id in range"),
            None => rand::random::<u32>() >> 1,
        }
    }
}

/// 53300, PostgreSQL's "too many connections", for a session no replica
/// may take.
fn full(class: Class, why: &str) -> Fatal {
    Fatal::new("53300", format!("plbbench proxy: {} session {why}", class.long()))
}

/// Serves clients until SIGINT or SIGTERM, then drains.
pub async fn serve(input: ProxyInput) -> std::io::Result<ProxyOutcome> {
    let listener = TcpListener::from_std(input.listener)?;
    let start = Instant::now();
    if input.feed {
        println!("{}", Feed::Listening { addr: listener.local_addr()?, start_unix_s: unix_now() }.line());
    }
    let (term_tx, terminate) = watch::channel(false);
    let live = input.metrics.as_ref().map(|_| Arc::new(Mutex::new(LiveMetrics::new())));
    let (confirms, asked) = mpsc::unbounded_channel();
    let (ends_tx, ends_rx) = mpsc::unbounded_channel();
    let mut background = Vec::new();
    let tier_state = input.tier.as_ref().map(|t| tier::tier(t, input.control.router().config().clone()));
    let gated = input.control.gate().is_some();
    let shared = Arc::new(Shared {
        start,
        control: Mutex::new(Control::new(input.control)),
        replicas: input.replicas,
        rule: input.rule,
        users: input.users,
        tls: input.tls,
        server_connect_timeout: input.server_connect_timeout,
        late_class_timeout: input.late_class_timeout,
        server_params: Mutex::new(None),
        keys: Mutex::new(HashMap::new()),
        terminate,
        live: live.clone(),
        open: AtomicUsize::new(0),
        routed: AtomicU32::new(0),
        feed: input.feed,
        ticking: AtomicBool::new(false),
        timed: Notify::new(),
        pumps: pump::Pumps::start(input.threads, ends_tx, input.server_connect_timeout)?,
        confirms,
        violations: Mutex::new(Violations::default()),
        pool: Arc::new(server_pool::ServerPool::new(input.server_pool, input.server_idle_timeout)),
        tier: tier_state,
        gated,
        refuse_violators: input.refuse_violators,
    });
    background.push(tokio::spawn(ends(ends_rx)));
    if let Some(t) = input.tier {
        tier::start(&shared, t, &mut background)?;
    }
    let no_tier = Notify::new();
    let refused = shared.tier.as_ref().map_or(&no_tier, |t| &t.stop);
    background.push(tokio::spawn(confirmer(shared.clone(), asked)));
    if let Some(live) = &live {
        let ctl = shared.control.lock().expect("control lock");
        live.lock().expect("metrics lock").refresh(ctl.c.router(), ctl.c.gate());
    }
    if let (Some(l), Some(live)) = (input.metrics, live) {
        background.push(tokio::spawn(live_metrics::serve(l, live)));
    }
    if let Some(interval) = input.probe_interval {
        for r in 0..shared.replicas.len() {
            background.push(tokio::spawn(probe(shared.clone(), ReplicaId(r), interval)));
        }
    }
    background.push(tokio::spawn(tick(shared.clone())));
    background.push(tokio::spawn(sample_cpu(shared.clone(), input.cluster)));
    let mut signals = Signals::require()?;
    let mut next = 0u32;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((sock, peer)) = accepted else { continue };
                let id = next;
                next = next.wrapping_add(1);
                shared.open.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(connection(shared.clone(), id, sock, peer.ip(), input.login_timeout));
            }
            _ = signals.recv() => break,
            _ = refused.notified() => break,
        }
    }
    drop(listener);
    let open = shared.open.load(Ordering::SeqCst);
    eprintln!("plbbench proxy: stopping: no new connections; {open} open, waiting up to {:?} for them", input.drain);
    let deadline = tokio::time::Instant::now() + input.drain;
    loop {
        if shared.open.load(Ordering::SeqCst) == 0 {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break,
            _ = tokio::time::sleep(Duration::from_millis(20)) => {},
            _ = signals.recv() => break,
        }
    }
    let cut = shared.open.load(Ordering::SeqCst);
    let _ = term_tx.send(true);
    shared.pumps.stop();
    let gone = tokio::time::Instant::now() + Duration::from_secs(2);
    while shared.open.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < gone {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    background.iter().for_each(|t| t.abort());
    Ok(ProxyOutcome {
        sessions: u64::from(shared.routed.load(Ordering::Relaxed)),
        cut,
        logins: shared.pool.logins.load(Ordering::Relaxed),
        reused: shared.pool.reused.load(Ordering::Relaxed),
        refused: shared.tier.as_ref().and_then(|t| t.refused.lock().expect("refused lock").clone()),
    })
}

/// Finishes, each on a task of its own, the sessions the pumps give back
/// at an end that is not quiet ([`relay::ended`]).
async fn ends(mut rx: mpsc::UnboundedReceiver<pump::Back<relay::Flow>>) {
    while let Some(back) = rx.recv().await {
        tokio::spawn(relay::ended(back));
    }
}

/// Resolves once the proxy closes its sessions.
async fn stopping(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await.map(|_| ());
}

/// One client connection from `peer`, counted open by the accept loop: log
/// in within the deadline (in TLS once the client asks for it and the
/// proxy offers it), then its session, unless the client's sessions end in
/// protocol violations faster than its allowance ([`violations`]).
async fn connection(shared: Arc<Shared>, id: u32, sock: TcpStream, peer: std::net::IpAddr, login_timeout: Duration) {
    let _ = sock.set_nodelay(true);
    let mut sock = ClientStream::Plain(sock);
    let mut buf = BytesMut::with_capacity(1024);
    let mut stop = shared.terminate.clone();
    let entry = loop {
        let entry = tokio::select! {
            e = tokio::time::timeout(login_timeout, login::login(&shared, &mut sock, &mut buf)) => {
                e.unwrap_or_else(|_| Err(Fatal::new("08P01", "canceling authentication due to timeout")))
            }
            _ = stopping(&mut stop) => Err(Fatal::new("57P01", "terminating connection due to administrator command")),
        };
        match entry {
            Ok(Entry::StartTls(acceptor)) => match encrypt(sock, acceptor, login_timeout).await {
                Some(s) => sock = s,
                None => {
                    shared.open.fetch_sub(1, Ordering::SeqCst);
                    return;
                }
            },
            other => break other,
        }
    };
    match entry {
        Ok(Entry::Session(startup)) if buf.is_empty() => {
            let who: Who = (peer, startup.param("user").unwrap_or_default().to_string());
            match (shared.allowed(&who), shared.rule.class_of(&startup)) {
                (Err(f), _) => login::send_fatal(&mut sock, &f).await,
                (Ok(()), Some(class)) => relay::session(&shared, id, sock, &startup, class, who).await,
                (Ok(()), None) => late::session(&shared, id, sock, &startup, who).await,
            }
        }
        Ok(Entry::Session(_)) => {
            let f = Fatal::new("08P01", "unexpected message before authentication finished");
            login::send_fatal(&mut sock, &f).await;
        }
        Ok(Entry::Done | Entry::StartTls(_)) => {}
        Err(f) => login::send_fatal(&mut sock, &f).await,
    }
    shared.open.fetch_sub(1, Ordering::SeqCst);
}

/// The TLS handshake on a plain connection, within `limit`; `None` when it
/// failed (the client is gone or spoke no TLS).
async fn encrypt(sock: ClientStream, acceptor: TlsAcceptor, limit: Duration) -> Option<ClientStream> {
    let ClientStream::Plain(tcp) = sock else { return Some(sock) };
    match tokio::time::timeout(limit, acceptor.accept(tcp)).await {
        Ok(Ok(s)) => Some(ClientStream::Tls(Box::new(s))),
        _ => None,
    }
}

/// Every 20 ms while something is timed (sessions wait at the gate, a
/// stability window or a probation ramp runs): waiting sessions the gate
/// now admits start, those past their deadline are refused, windows end.
/// Every second the metrics are refreshed, the feed told the state, and
/// kept server connections closed when idle too long or when their
/// replica is no longer held healthy.
/// With nothing timed the proxy does not wake between seconds, as
/// PgBouncer does not: an idle wake-up costs CPU that relaying needs.
async fn tick(shared: Arc<Shared>) {
    let fast = Duration::from_millis(20);
    let mut second = tokio::time::Instant::now();
    loop {
        let now = tokio::time::Instant::now();
        let whole = now >= second;
        if whole {
            second = (second + Duration::from_secs(1)).max(now);
        }
        let timed = shared.control(|ctl, now| {
            ctl.admit_and_expire(now);
            ctl.c.tick(now);
            if whole {
                if let Some(live) = &shared.live {
                    live.lock().expect("metrics lock").refresh(ctl.c.router(), ctl.c.gate());
                }
                if shared.feed && shared.tier.as_ref().is_none_or(|t| t.leading()) {
                    println!("{}", shared.state(&ctl.c).line());
                }
                let replicas = ReplicaId::all(shared.replicas.len());
                let states: Vec<_> = replicas.map(|r| (ctl.c.is_healthy(r), ctl.c.role(r))).collect();
                shared.pool.expire(&states);
            }
            let timed = ctl.timed();
            shared.ticking.store(timed, Ordering::SeqCst);
            timed
        });
        // Outside the controller's lock: a member's tier state comes first.
        if let Some(t) = shared.tier.as_ref().filter(|_| whole) {
            tier::say(&shared, t);
        }
        let next = if timed { (now + fast).min(second) } else { second };
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = shared.timed.notified() => {}
        }
    }
}

/// Every second: each replica's cumulative CPU, read as a run reads it,
/// for the controller (`Controller::sample`). The reading walks /proc or
/// cgroup files, so it runs off the event loop.
async fn sample_cpu(shared: Arc<Shared>, cluster: Arc<Mutex<Cluster>>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        let c = cluster.clone();
        let read = move || {
            let c = c.lock().expect("cluster lock");
            (c.cpu_readings(), c.memory_pct())
        };
        let Ok((cpu, memory)) = tokio::task::spawn_blocking(read).await else {
            continue;
        };
        shared.control(|ctl, now| ctl.c.sample(now, &cpu, memory));
    }
}

/// Runs each confirming probe the controller asks for on a task of its own
/// (`backend::probe::confirm`: a new connection and `SELECT 1` within
/// `core::control::CONFIRM_TIMEOUT_S`), says on stderr what it saw, counts
/// it and tells the controller.
async fn confirmer(shared: Arc<Shared>, mut asked: mpsc::UnboundedReceiver<Confirm>) {
    while let Some(Confirm(r)) = asked.recv().await {
        let shared = shared.clone();
        tokio::spawn(async move {
            let began = shared.now();
            let seen = crate::backend::probe::confirm(&shared.replicas[r.idx()]).await;
            let (name, verdict) = match seen {
                Evidence::ProbeOk { ms } => ("ok", format!("it answered in {ms:.1} ms: {r} stays up")),
                Evidence::ProbeTimeout => ("timeout", "no answer within the deadline: one timeout".to_string()),
                _ => ("refused", "it was refused".to_string()),
            };
            eprintln!("plbbench proxy: {r} suspect (a connection lost or refused with no word from the server); confirming probe: {verdict}");
            if let Some(live) = &shared.live {
                live.lock().expect("metrics lock").proxy_confirm(r, name);
            }
            shared.control(|ctl, now| ctl.c.confirmed(r, seen, began, now));
        });
    }
}

/// Health probes of replica `r`, as a run's (`backend::probe::periodic`).
async fn probe(shared: Arc<Shared>, r: ReplicaId, interval: Duration) {
    let mut client = None;
    let mut every = tokio::time::interval(interval);
    loop {
        every.tick().await;
        let began = shared.now();
        let seen = crate::backend::probe::periodic(&shared.replicas[r.idx()], &mut client, interval).await;
        shared.control(|ctl, now| {
            ctl.c.probed(r, seen, began, now);
            ctl.c.tick(now);
        });
    }
}
