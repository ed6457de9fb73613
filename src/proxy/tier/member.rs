//! A member's control connection and its election loop (docs/scale.md,
//! "Agreeing on roles", "When the leader dies"): the connection goes to
//! the first replica that answers, r1..rK, with TCP keepalives on both
//! ends and `tcp_user_timeout`, so that a vanished member's backend, and
//! its lock, go within seconds. Every `retry` a follower tries the lock
//! and reads the directory; the leader checks its connection and steps
//! down the moment it fails. [`join`] opens the connection at start and
//! refuses a second member with the same identity.

use super::election::{decide, lock_key, Member, Seen, Standing, Step};
use super::follow::{Books, Counts};
use super::{link, Tier};
use crate::proxy::Shared;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage};

/// The longest a control connection's login or query may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a new leader counts the sessions `pg_stat_activity` shows that
/// no follower reported: followers that live reconnect well within this.
const UNREPORTED_S: f64 = 5.0;

/// The control connection, on replica `r`.
pub struct Joined {
    client: Client,
    r: usize,
}

/// Why a member may not join its tier.
#[derive(Debug)]
pub enum JoinError {
    /// No replica accepted a control connection (each one's error).
    Unreachable(String),
    /// Another member already has this peer id.
    Taken(Member),
}

/// Opens the control connection and checks that no other member has
/// `me`'s peer id.
pub async fn join(replicas: &[Config], me: &Member) -> Result<Joined, JoinError> {
    let joined = connect_first(replicas, me).await.map_err(JoinError::Unreachable)?;
    let dir = directory(&joined.client, &me.tier).await.map_err(JoinError::Unreachable)?;
    match dir.into_iter().find(|(m, _, own)| m.peer == me.peer && !own) {
        Some((m, ..)) => Err(JoinError::Taken(m)),
        None => Ok(joined),
    }
}

/// A control connection to the first replica that answers, in r1..rK
/// order; `Err` lists why each did not.
async fn connect_first(replicas: &[Config], me: &Member) -> Result<Joined, String> {
    let mut why = Vec::new();
    for (r, cfg) in replicas.iter().enumerate() {
        let mut cfg = cfg.clone();
        cfg.application_name(me.app_name())
            .connect_timeout(CONTROL_TIMEOUT)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(2))
            .keepalives_interval(Duration::from_secs(1))
            .keepalives_retries(3)
            .tcp_user_timeout(Duration::from_secs(5));
        let login = async {
            let (client, conn) = cfg.connect(NoTls).await?;
            tokio::spawn(conn);
            // The server's side of the socket: a vanished member's backend
            // (and its lock) goes within about 5 s.
            client
                .batch_execute(
                    "SET tcp_keepalives_idle = 2; SET tcp_keepalives_interval = 1; \
                     SET tcp_keepalives_count = 3; SET tcp_user_timeout = 5000",
                )
                .await?;
            Ok::<_, tokio_postgres::Error>(client)
        };
        match tokio::time::timeout(CONTROL_TIMEOUT, login).await {
            Ok(Ok(client)) => return Ok(Joined { client, r }),
            Ok(Err(e)) => why.push(format!("r{}: {e}", r + 1)),
            Err(_) => why.push(format!("r{}: no answer within {CONTROL_TIMEOUT:?}", r + 1)),
        }
    }
    Err(why.join("; "))
}

/// The tier's members on the control connection's replica: each one, if
/// it holds the tier's lock, and whether it is this connection.
async fn directory(client: &Client, tier: &str) -> Result<Vec<(Member, bool, bool)>, String> {
    let (k1, k2) = lock_key(tier);
    let sql = format!(
        "SELECT a.application_name, EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND \
         l.locktype = 'advisory' AND l.classid = {k1} AND l.objid = {k2} AND l.objsubid = 2 AND l.granted), \
         a.pid = pg_backend_pid() FROM pg_stat_activity a WHERE a.application_name LIKE 'plbtier %'"
    );
    let rows = query(client, &sql).await?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            let m = Member::parse(row.first()?)?;
            (m.tier == tier).then(|| (m, row.get(1).is_some_and(|v| v == "t"), row.get(2).is_some_and(|v| v == "t")))
        })
        .collect())
}

/// The rows of `sql` as text, within [`CONTROL_TIMEOUT`].
async fn query(client: &Client, sql: &str) -> Result<Vec<Vec<String>>, String> {
    let rows = tokio::time::timeout(CONTROL_TIMEOUT, client.simple_query(sql))
        .await
        .map_err(|_| format!("no answer within {CONTROL_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())?;
    Ok(rows
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => {
                Some((0..row.len()).map(|i| row.get(i).unwrap_or_default().to_string()).collect())
            }
            _ => None,
        })
        .collect())
}

/// The election loop, for the life of the proxy.
pub(super) async fn elect(shared: Arc<Shared>, joined: Joined) {
    let t = shared.tier.clone().expect("a tier member");
    let mut conn = Some(joined);
    let mut every = tokio::time::interval(t.retry);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut expire_at: Option<f64> = None;
    loop {
        every.tick().await;
        if conn.as_ref().is_some_and(|c| c.client.is_closed()) {
            conn = None;
        }
        if conn.is_none() {
            conn = connect_first(&shared.replicas, &t.me).await.ok();
        }
        let standing = t.state().standing;
        let seen = round(&t, conn.as_ref(), standing).await;
        if !seen.answered {
            conn = None;
        }
        let next = t.state().view.fence.next();
        match decide(t.me.peer, standing, &seen, next) {
            Step::Lead(generation) => {
                // The tier's first leader has nothing to rebuild: every
                // member reports its sessions when it joins.
                let extra = match generation {
                    1 => vec![[0; 2]; shared.replicas.len()],
                    _ => unreported(&shared).await,
                };
                lead(&shared, &t, generation, extra, conn.as_ref().map_or(0, |c| c.r));
                expire_at = Some(shared.now() + UNREPORTED_S);
            }
            Step::StepDown => step_down(&shared, &t),
            Step::Follow(feed) => {
                let linked = t.state().link.as_ref().map(|l| l.1);
                if linked != Some(feed) {
                    tokio::spawn(link::follow(shared.clone(), feed));
                }
            }
            Step::Stay => {}
        }
        if expire_at.is_some_and(|at| shared.now() >= at) {
            expire_at = None;
            let mut s = t.state();
            if let Standing::Leader { .. } = s.standing {
                let change = s.books.expire();
                shared.control(|c, _| super::feed::apply(&mut c.c, &change));
            }
        }
    }
}

/// One round on the control connection: a leader's `SELECT 1`, a
/// follower's lock attempt, and the directory (which also tells where
/// cancel requests for other members go).
async fn round(t: &Tier, conn: Option<&Joined>, standing: Standing) -> Seen {
    let Some(c) = conn else { return Seen { answered: false, won: None, holder: None } };
    let (k1, k2) = lock_key(&t.me.tier);
    let asked = match standing {
        Standing::Leader { .. } => query(&c.client, "SELECT 1").await.map(|_| None),
        Standing::Follower => query(&c.client, &format!("SELECT pg_try_advisory_lock({k1}, {k2})"))
            .await
            .map(|rows| Some(rows.first().and_then(|r| r.first()).is_some_and(|v| v == "t"))),
    };
    let Ok(won) = asked else { return Seen { answered: false, won: None, holder: None } };
    let dir = directory(&c.client, &t.me.tier).await.unwrap_or_default();
    let peers: HashMap<u8, _> = dir.iter().map(|(m, ..)| (m.peer, m.client)).collect();
    *t.peers.lock().expect("peers lock") = peers;
    let holder = dir.into_iter().find(|(_, holds, _)| *holds).map(|(m, ..)| m);
    Seen { answered: true, won, holder }
}

/// This member won the lock: its controller goes on from the roles it
/// last followed, with its own sessions and `extra` (the cluster's, not
/// its own) as the counts, at `generation`.
fn lead(shared: &Shared, t: &Tier, generation: u64, extra: Counts, on: usize) {
    let mut s = t.state();
    let restored = shared.control(|c, _| {
        let k = c.c.replicas();
        let fallback = c.c.router().held();
        let healthy: Vec<bool> = (0..k).map(|r| c.c.is_healthy(crate::core::model::ReplicaId(r))).collect();
        let held = s.view.restored(&fallback, &healthy, &extra);
        c.c.restore(&held)
    });
    if let Err(e) = restored {
        eprintln!(
            "plbbench proxy: tier {}: could not restore the roles followed ({e}); starting from its own",
            t.me.tier
        );
    }
    s.books = Books::new(extra);
    s.standing = Standing::Leader { generation };
    s.seq = 0;
    s.view.fence.lead(generation, 0);
    s.link = None;
    s.asks.clear();
    t.leading.store(true, Ordering::SeqCst);
    eprintln!(
        "plbbench proxy: tier {}: peer {} leads, generation {generation} (lock on r{}, feed {})",
        t.me.tier,
        t.me.peer,
        on + 1,
        t.me.feed
    );
}

/// The leader's control connection failed: it stops leading at once and
/// routes within its own last roles until a new leader speaks.
fn step_down(shared: &Shared, t: &Tier) {
    let mut s = t.state();
    let Standing::Leader { generation } = s.standing else { return };
    t.leading.store(false, Ordering::SeqCst);
    s.standing = Standing::Follower;
    let held = shared.control(|c, _| c.c.router().held());
    s.view.stepped_down(generation, held);
    t.followers.lock().expect("followers lock").clear();
    eprintln!(
        "plbbench proxy: tier {}: peer {} lost its control connection and stops leading (generation {generation})",
        t.me.tier, t.me.peer
    );
}

/// Sessions per replica and class that `pg_stat_activity` shows beyond
/// this member's own (the fallback for followers that have not reported
/// yet). Idle kept server connections are left out (their last query is
/// the proxy's `DISCARD ALL`); other members' probes are not, so it is
/// dropped after [`UNREPORTED_S`]. A replica that does not answer counts
/// none.
async fn unreported(shared: &Shared) -> Counts {
    let own = shared.tier.as_ref().map(|t| t.state().view.own().clone()).unwrap_or_default();
    let column = match shared.rule.param {
        crate::proxy::class_rule::Param::ApplicationName => "application_name",
        crate::proxy::class_rule::Param::User => "usename",
        crate::proxy::class_rule::Param::Database => "datname",
    };
    let sql = format!(
        "SELECT coalesce({column}::text, '') FROM pg_stat_activity WHERE backend_type = 'client backend' \
         AND pid <> pg_backend_pid() AND coalesce(application_name, '') NOT LIKE 'plbtier %' \
         AND query IS DISTINCT FROM 'DISCARD ALL'"
    );
    let mut out = vec![[0u32; 2]; shared.replicas.len()];
    for (r, cfg) in shared.replicas.iter().enumerate() {
        let read = async {
            let (client, conn) = cfg.connect(NoTls).await.map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            query(&client, &sql).await
        };
        let Ok(Ok(rows)) = tokio::time::timeout(CONTROL_TIMEOUT, read).await else { continue };
        for row in rows {
            let class = shared.rule.class_of_value(row.first().map_or("", String::as_str));
            out[r][class.idx()] += 1;
        }
        for c in 0..2 {
            out[r][c] = out[r][c].saturating_sub(own.get(r).map_or(0, |o| o[c]));
        }
    }
    out
}
