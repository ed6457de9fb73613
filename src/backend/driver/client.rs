//! One client of a real run: it thinks, opens a session (admission by the
//! controller, or through the proxy), logs in under the workload's
//! deadlines, runs its queries and closes, and tells the collector each
//! step (queries, sessions, logins). The driver's hot path.

use super::*;

/// A session's outcome after its queries.
pub(super) enum SessionEnd {
    Completed,
    Aborted(AbortReason, u32),
    Stopped,
}

/// One client: think, open a session, run its queries, close, repeat.
/// Returns its class if a session was open when the run stopped.
pub(super) async fn client(ctx: Arc<Ctx>, id: u32, mut script: Client) -> Option<Class> {
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
            Some(p) => open_proxied(&ctx, p, class, id as usize).await,
        };
        let (r, connected, via) = match opened {
            Opened::On(r, connected, via) => (r, connected, via),
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
            Ok(c) => session(&ctx, &mut script, (r, via), c, queries, intended).await,
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
pub(super) fn with_tcp_deadline(mut c: Config, tcp: Duration) -> Config {
    c.connect_timeout(tcp);
    c
}

/// The workload's login deadline plus `hop` (the proxy's own step), or
/// none when the workload waits as pgjdbc's and libpq's defaults do.
pub(super) fn login_deadline(w: &Workload, hop: Duration) -> Option<Duration> {
    w.client.login_deadline_s().map(|s| Duration::from_secs_f64(s) + hop)
}

/// The TCP connect's own deadline passed (tokio-postgres's
/// `connect_timeout`, an I/O error of kind `TimedOut`).
pub(super) fn tcp_timed_out(e: &tokio_postgres::Error) -> bool {
    let io = std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>());
    io.is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
}

/// `f` under `deadline` if there is one: `None` when it passed first.
pub(super) async fn within<T>(deadline: Option<Duration>, f: impl Future<Output = T>) -> Option<T> {
    match deadline {
        Some(d) => timeout(d, f).await.ok(),
        None => Some(f.await),
    }
}

/// A session's start: on a replica (connected, or why not: `None` when
/// the run stopped while it connected), or no session this time.
pub(super) enum Opened {
    /// On a replica, through the proxy of this peer id when a tier's
    /// member said so.
    On(ReplicaId, Result<tokio_postgres::Client, Option<AbortReason>>, Option<u8>),
    /// The admission gate refused it.
    Rejected,
    /// No replica could take it: back off and try again.
    NoRoute,
    /// The run stopped first.
    Stopped,
}

/// Admission by the controller here, then a connection to its replica.
pub(super) async fn open(ctx: &Ctx, id: u32, class: Class) -> Opened {
    let r = match admit(ctx, id, class).await {
        Ok(r) => r,
        Err(no) => return no,
    };
    ctx.send(Msg::Started(class, r, ctx.now()));
    let deadline = login_deadline(&ctx.workload, Duration::ZERO);
    let mut stop = ctx.stop.clone();
    let connected = tokio::select! {
        c = within(deadline, ctx.configs[r.idx()].connect(NoTls)) => c,
        _ = stop.wait_for(|s| *s) => return Opened::On(r, Err(None), None),
    };
    let err = match connected {
        Some(Ok((client, conn))) => {
            tokio::spawn(conn);
            return Opened::On(r, Ok(client), None);
        }
        Some(Err(e)) if tcp_timed_out(&e) => ConnectError::Timeout,
        Some(Err(e)) => ConnectError::of_sqlstate(e.code().map(|c| c.code())),
        None => ConnectError::Timeout,
    };
    let (why, confirm) = ctx.control(|ctl, now| ctl.c.connect_failed(r, err, now));
    ctx.confirm(confirm);
    Opened::On(r, Err(Some(why)), None)
}

/// `--via-proxy`: a connection through the proxy, which routes it and
/// names the replica (a ParameterStatus, or the DETAIL of its FATAL). A
/// refusal naming no replica (no replica can take the session, or the
/// proxy is unreachable) backs off as when no replica can take it here.
/// In a tier, client `id` goes first to member `id` mod N and, when that
/// one does not answer at all, to the next, as libpq tries its hosts: a
/// member that answers with a refusal is not passed over.
pub(super) async fn open_proxied(ctx: &Ctx, p: &Proxied, class: Class, id: usize) -> Opened {
    let deadline = login_deadline(&ctx.workload, PROXY_HOP);
    let mut stop = ctx.stop.clone();
    let n = p.configs.len();
    let connect = async {
        let mut last = None;
        for i in 0..n {
            match p.configs[(id + i) % n][class.idx()].connect(NoTls).await {
                Err(e) if e.as_db_error().is_none() && !tcp_timed_out(&e) => last = Some(Err(e)),
                done => return done,
            }
        }
        last.expect("at least one proxy")
    };
    let connected = tokio::select! {
        c = within(deadline, connect) => c,
        _ = stop.wait_for(|s| *s) => return Opened::Stopped,
    };
    let (r, connected, via) = match connected {
        Some(Ok((client, conn))) => {
            let Some(r) = conn.parameter(proxy_feed::REPLICA_PARAM).and_then(proxy_feed::replica_of_param) else {
                return Opened::NoRoute;
            };
            let via = conn.parameter(proxy_feed::PROXY_PARAM).and_then(|v| v.parse().ok());
            tokio::spawn(conn);
            p.count(via, false);
            (r, Ok(client), via)
        }
        Some(Err(e)) => match e.as_db_error().and_then(|d| d.detail()).and_then(proxy_feed::failure_of_detail) {
            Some((r, why)) => (r, Err(Some(AbortReason::Connect(why))), None),
            None => return Opened::NoRoute,
        },
        None => return Opened::NoRoute,
    };
    ctx.send(Msg::Started(class, r, ctx.now()));
    Opened::On(r, connected, via)
}

/// Asks the controller for a replica; a session the gate holds back waits
/// for [`admit_waiting`] (or a session's end) to admit or reject it. Not
/// admitted: the [`Opened`] the session ends its attempt with.
pub(super) async fn admit(ctx: &Ctx, id: u32, class: Class) -> Result<ReplicaId, Opened> {
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

/// Runs the queries of one session on replica `r` over `client` (through
/// the tier member `via`, if any); `intended` is when the session should
/// have started.
pub(super) async fn session(
    ctx: &Ctx,
    script: &mut Client,
    (r, via): (ReplicaId, Option<u8>),
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
        if !statement(ctx, script.class, r).await {
            return SessionEnd::Stopped;
        }
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
        if let (Some(p), Ok(Err(e))) = (&ctx.proxy, &result) {
            // Closed with no word: the proxy holding it is gone (a proxy
            // that loses the replica says 08006).
            if e.code().is_none() && connection_lost(e) {
                p.count(via, true);
            }
        }
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
            let (confirm, freed) = ctx.control(|ctl, now| {
                if error.is_none() {
                    ctl.c.served(class, (end - due) * 1000.0);
                }
                (ctl.c.query_answered(r, answer, sent, now), ctl.c.statement_ended(class, r))
            });
            if freed {
                ctx.held[r.idx()].notify_one();
            }
            ctx.confirm(confirm);
        }
        if let Some(e) = error {
            return SessionEnd::Aborted(AbortReason::Query(e), left);
        }
        due = end + script.think_s(w);
    }
    SessionEnd::Completed
}

/// Waits until the admission gate lets a statement of `class` run on `r`
/// (at once, with no lock taken, without a gate or through a proxy),
/// asking again when a statement there ends, when the mode changes and
/// at least once a second, so a hold that lasts is seen in every window
/// of the gate's signals. `false`: the run stopped meanwhile. The wait is
/// part of the query's latency, which runs from its intended send.
async fn statement(ctx: &Ctx, class: Class, r: ReplicaId) -> bool {
    if !ctx.gated {
        return true;
    }
    let mut stop = ctx.stop.clone();
    loop {
        let woken = ctx.held[r.idx()].notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if ctx.control(|ctl, _| ctl.c.statement(class, r)) {
            return true;
        }
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.wait_for(|s| *s) => return false,
        }
    }
}

/// Whether a query's error means its connection is gone, as the run's
/// books count it: closed, no answer code, or SQLSTATE class 08
/// (connection exception: the 08006 a `plbbench proxy` sends when the
/// session's replica is lost). The controller is told a connection was lost
/// only when no server said so (see [`session`]).
pub(super) fn connection_lost(e: &tokio_postgres::Error) -> bool {
    e.is_closed() || e.code().is_none_or(|c| c.code().starts_with("08"))
}

/// Prepares a query template; `$1` is typed int8 when it takes a key.
pub async fn prepare(client: &tokio_postgres::Client, q: &QueryTemplate) -> Result<Statement, tokio_postgres::Error> {
    let types: &[Type] = if q.key_range > 0 { &[Type::INT8] } else { &[] };
    client.prepare_typed(&q.sql, types).await
}

/// Runs a prepared template, binding `param` to `$1` when it takes a key.
pub(super) async fn execute(
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
