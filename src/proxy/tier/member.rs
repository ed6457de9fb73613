//! A member's control connections and its election loop (docs/scale.md,
//! "Agreeing on roles", "When the leader dies"): one connection to every
//! replica that answers, with TCP keepalives on both ends and
//! `tcp_user_timeout`, so that a vanished member's backends, and its
//! locks, go within seconds. A member leads while it holds the tier's
//! advisory lock on a majority of the K replicas: two members cannot both
//! hold a majority of locks that are each exclusive on their server, even
//! when replicas fail and return (a lock on "the first replica that
//! answers" let a member restarted after r1 returned lead beside the
//! leader that had moved to r2). Every `retry` a follower tries the lock
//! on every replica and keeps its wins only when they are a majority; the
//! leader checks its connections, takes the lock where it lacks it (a
//! replica back), and steps down the moment it holds less than a
//! majority. [`join`] opens the connections at start and refuses a second
//! member with the same identity.
//!
//! A leader that hangs keeps its connections (its kernel answers for it),
//! and with them its locks. So leadership is also a lease ([`super`]): a
//! round that confirms a majority renews it from the round's start; a
//! leader whose lease ran out stands down ([`fence_expired`]) before
//! anything else it does as leader. A follower that heard nothing from its
//! leader for the lease ends, on every replica, the tier-lock holders'
//! backends that have been idle for the lease ([`depose`]): a live
//! leader's run `SELECT 1` every round, so only a silent one's qualify,
//! and by then the silent leader's own clock has ended its lease (its
//! rounds began before its backends went idle). Then it tries the locks
//! as at any election.

use super::election::{decide, holder_of, lock_key, majority_of, Member, Seen, Standing, Step};
use super::follow::{Books, Counts};
use super::{link, State, Tier};
use crate::proxy::Shared;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::{Client, Config, NoTls, SimpleQueryMessage};

/// The longest a control connection's login or query may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(3);

/// An election round slower than this is said on stderr.
const SLOW_ROUND: Duration = Duration::from_secs(1);

/// How long a new leader counts the sessions `pg_stat_activity` shows that
/// no follower reported: followers that live reconnect well within this.
const UNREPORTED_S: f64 = 5.0;

/// The control connections, one per replica (`None`: it did not answer
/// the last time), and the replicas whose tier lock it holds.
pub struct Joined {
    conns: Vec<Option<Client>>,
    held: Vec<bool>,
}

impl Joined {
    /// How many tier locks it holds.
    fn holds(&self) -> usize {
        self.held.iter().filter(|h| **h).count()
    }

    /// The replicas it holds the lock on, as `r1 r3 r4`.
    fn held_on(&self) -> String {
        let on: Vec<String> = (0..self.held.len()).filter(|&r| self.held[r]).map(|r| format!("r{}", r + 1)).collect();
        on.join(" ")
    }

    /// Drops replica `r`'s connection (and with it its lock).
    fn lose(&mut self, r: usize) {
        self.conns[r] = None;
        self.held[r] = false;
    }
}

/// Why a member may not join its tier.
#[derive(Debug)]
pub enum JoinError {
    /// No replica accepted a control connection (each one's error).
    Unreachable(String),
    /// Another member already has this peer id.
    Taken(Member),
}

/// Opens the control connections and checks that no other member has
/// `me`'s peer id.
pub async fn join(replicas: &[Config], me: &Member) -> Result<Joined, JoinError> {
    let tried = futures_util::future::join_all(replicas.iter().map(|cfg| connect_one(cfg, me))).await;
    let mut why = Vec::new();
    let mut conns = Vec::new();
    for (r, c) in tried.into_iter().enumerate() {
        match c {
            Ok(client) => conns.push(Some(client)),
            Err(e) => {
                why.push(format!("r{}: {e}", r + 1));
                conns.push(None);
            }
        }
    }
    if conns.iter().all(Option::is_none) {
        return Err(JoinError::Unreachable(why.join("; ")));
    }
    for client in conns.iter().flatten() {
        let dir = directory(client, &me.tier).await.map_err(JoinError::Unreachable)?;
        if let Some((m, ..)) = dir.into_iter().find(|(m, _, own)| m.peer == me.peer && !own) {
            return Err(JoinError::Taken(m));
        }
    }
    let held = vec![false; conns.len()];
    Ok(Joined { conns, held })
}

/// A control connection to one replica.
async fn connect_one(cfg: &Config, me: &Member) -> Result<Client, String> {
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
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {CONTROL_TIMEOUT:?}")),
    }
}

/// The tier's members on one control connection's replica: each one, if
/// it holds the tier's lock there, and whether it is this connection.
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
pub(super) async fn elect(shared: Arc<Shared>, mut c: Joined) {
    let t = shared.tier.clone().expect("a tier member");
    let mut every = tokio::time::interval(t.retry);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut expire_at: Option<f64> = None;
    loop {
        every.tick().await;
        fence_expired(&shared, &t, &mut t.state());
        let began = std::time::Instant::now();
        reconnect(&shared, &t, &mut c).await;
        let standing = t.state().standing;
        let seen = round(&t, &mut c, standing).await;
        if began.elapsed() > SLOW_ROUND {
            eprintln!(
                "plbbench proxy: tier {}: an election round took {} ms (locks held on {})",
                t.me.tier,
                began.elapsed().as_millis(),
                c.held_on()
            );
        }
        let next = t.state().view.fence.next();
        match decide(t.me.peer, standing, &seen, next) {
            Step::Lead(generation) => {
                t.renew(began);
                // It leads at once on its own sessions and the followers'
                // as they say hello; the cluster's view of the rest comes
                // after (reading it on a saturated cluster took seconds,
                // which the tier spent with no leader). The tier's first
                // leader has nothing to rebuild: every member reports its
                // sessions when it joins.
                lead(&shared, &t, generation, &c.held_on());
                if generation > 1 {
                    let seen = unreported(&shared).await;
                    let mut s = t.state();
                    if s.standing == (Standing::Leader { generation }) {
                        let change = s.books.late_unreported(&seen);
                        shared.control(|c, _| super::feed::apply(&mut c.c, &change));
                    }
                }
                expire_at = Some(shared.now() + UNREPORTED_S);
            }
            Step::StepDown => step_down(&shared, &t),
            Step::Follow(feed) => {
                let mut s = t.state();
                let linked = s.link.as_ref().map(|l| l.1);
                if linked != Some(feed) {
                    // A link to a deposed leader (hung, its socket alive)
                    // is let go: the locks name the leader.
                    (s.link, s.leader, s.heard) = (None, None, None);
                    drop(s);
                    tokio::spawn(link::follow(shared.clone(), feed));
                }
            }
            Step::Stay if matches!(standing, Standing::Leader { .. }) => t.renew(began),
            Step::Stay => {}
        }
        if seen.won == Some(false) && c.holds() == 0 && seen.holder.is_none() {
            // Nobody won a majority this round: wait a random part of a
            // round, so that members that keep colliding fall apart.
            let ms = rand::random::<u64>() % (t.retry.as_millis() as u64 / 2 + 1);
            tokio::time::sleep(Duration::from_millis(ms)).await;
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

/// Drops closed control connections and opens the missing ones, all at
/// once (a replica that is down costs one connect timeout, not one per
/// replica).
async fn reconnect(shared: &Shared, t: &Tier, c: &mut Joined) {
    for r in 0..c.conns.len() {
        if c.conns[r].as_ref().is_some_and(Client::is_closed) {
            c.lose(r);
        }
    }
    let missing: Vec<usize> = (0..c.conns.len()).filter(|&r| c.conns[r].is_none()).collect();
    let opened = futures_util::future::join_all(missing.iter().map(|&r| connect_one(&shared.replicas[r], &t.me))).await;
    for (r, client) in missing.into_iter().zip(opened) {
        c.conns[r] = client.ok();
    }
}

/// One round on the control connections: the lock tried where it is not
/// held (by the leader wherever it gets it; by a follower only while it
/// hears no leader, and kept only as a majority), a held one's connection
/// checked, and the directory (which also tells where cancel requests for
/// other members go), read on the replicas in order until one shows a
/// holder. On a saturated cluster each query waits for a CPU, so a round
/// asks no more than it needs. For a leader, `answered` says it still
/// holds a majority; for a follower, `won` says it took one.
async fn round(t: &Tier, c: &mut Joined, standing: Standing) -> Seen {
    let (k1, k2) = lock_key(&t.me.tier);
    let try_lock = format!("SELECT pg_try_advisory_lock({k1}, {k2})");
    let silent = { t.leader_silent(&t.state()) };
    let trying = matches!(standing, Standing::Leader { .. }) || silent;
    if standing == Standing::Follower && silent {
        depose(t, c).await;
    }
    for r in 0..c.conns.len() {
        let Some(client) = &c.conns[r] else { continue };
        let sql = match (c.held[r], trying) {
            (true, _) => "SELECT 1",
            (false, true) => try_lock.as_str(),
            (false, false) => continue,
        };
        match query(client, sql).await {
            Ok(rows) if !c.held[r] => c.held[r] = rows.first().and_then(|r| r.first()).is_some_and(|v| v == "t"),
            Ok(_) => {}
            Err(_) => c.lose(r),
        }
    }
    // A minority is let go before the directory is read: a member that
    // kept grabbing one replica's lock and read that replica first saw
    // itself as the holder, and did not follow the new leader for 32 s.
    let majority = c.holds() >= majority_of(c.conns.len());
    if !majority && c.holds() > 0 {
        release(c, &format!("SELECT pg_advisory_unlock({k1}, {k2})")).await;
    }
    let mut dirs = Vec::new();
    for client in c.conns.iter().flatten() {
        dirs.push(directory(client, &t.me.tier).await.unwrap_or_default());
        if holder_of(&dirs, t.me.peer).is_some() {
            break;
        }
    }
    let peers: HashMap<u8, _> = dirs.iter().flatten().map(|(m, ..)| (m.peer, m.client)).collect();
    *t.peers.lock().expect("peers lock") = peers;
    let holder = holder_of(&dirs, t.me.peer);
    match standing {
        Standing::Leader { .. } => Seen { answered: majority, won: None, holder },
        Standing::Follower => Seen { answered: c.conns.iter().any(Option::is_some), won: Some(majority), holder },
    }
}

/// Ends, on every replica, the backends that hold the tier's lock and have
/// been idle for the lease: a leader that stopped answering (see the
/// module doc); said on stderr when there were any.
async fn depose(t: &Tier, c: &mut Joined) {
    let (k1, k2) = lock_key(&t.me.tier);
    let sql = format!(
        "SELECT count(pg_terminate_backend(a.pid)) FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid \
         WHERE l.locktype = 'advisory' AND l.classid = {k1} AND l.objid = {k2} AND l.objsubid = 2 AND l.granted \
         AND a.pid <> pg_backend_pid() AND a.state = 'idle' \
         AND a.state_change < now() - interval '{} milliseconds'",
        t.lease.as_millis()
    );
    let mut on = Vec::new();
    for (r, conn) in c.conns.iter().enumerate() {
        let Some(client) = conn else { continue };
        let ended = query(client, &sql).await.ok().and_then(|rows| rows.first()?.first()?.parse::<u32>().ok());
        if ended.is_some_and(|n| n > 0) {
            on.push(format!("r{}", r + 1));
        }
    }
    if !on.is_empty() {
        eprintln!(
            "plbbench proxy: tier {}: peer {} heard no leader for {} ms: ended the silent lock holder's backends on {}",
            t.me.tier,
            t.me.peer,
            t.lease.as_millis(),
            on.join(" ")
        );
    }
}

/// Gives up every tier lock it holds (a minority: another member may be
/// taking the majority).
async fn release(c: &mut Joined, unlock: &str) {
    for r in 0..c.conns.len() {
        if !c.held[r] {
            continue;
        }
        c.held[r] = false;
        let released = match &c.conns[r] {
            Some(client) => query(client, unlock).await.is_ok(),
            None => true,
        };
        if !released {
            // A connection that does not answer loses its lock with it.
            c.lose(r);
        }
    }
}

/// This member won the locks: its controller goes on from the roles it
/// last followed, with its own sessions as the counts, at `generation`.
fn lead(shared: &Shared, t: &Tier, generation: u64, on: &str) {
    let extra = vec![[0; 2]; shared.replicas.len()];
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
    s.leader = None;
    t.leading.store(true, Ordering::SeqCst);
    drop(s);
    super::say(shared, t);
    eprintln!(
        "plbbench proxy: tier {}: peer {} leads, generation {generation} (locks on {on}, feed {})",
        t.me.tier, t.me.peer, t.me.feed
    );
}

/// The leader holds less than a majority of the locks: it stops leading at once and
/// routes within its own last roles until a new leader speaks.
fn step_down(shared: &Shared, t: &Tier) {
    let mut s = t.state();
    let Standing::Leader { generation } = s.standing else { return };
    stand_down(shared, t, &mut s, generation);
    drop(s);
    super::say(shared, t);
    eprintln!(
        "plbbench proxy: tier {}: peer {} lost its control connection and stops leading (generation {generation})",
        t.me.tier, t.me.peer
    );
}

/// A leader whose lease ran out (it was stopped, or no round confirmed a
/// majority for the lease) stands down, and says so; `true` when it did.
/// Called under the member's lock before anything it would do as leader.
pub(super) fn fence_expired(shared: &Shared, t: &Tier, s: &mut State) -> bool {
    let Standing::Leader { generation } = s.standing else { return false };
    if t.lease_lasts() {
        return false;
    }
    stand_down(shared, t, s, generation);
    eprintln!(
        "plbbench proxy: tier {}: peer {} lost its lease (no round confirmed a majority of its locks for {} ms) \
         and stops leading (generation {generation})",
        t.me.tier,
        t.me.peer,
        t.lease.as_millis()
    );
    true
}

/// Stops leading: routes within its own last roles until a leader speaks,
/// and lets its followers go.
fn stand_down(shared: &Shared, t: &Tier, s: &mut State, generation: u64) {
    t.leading.store(false, Ordering::SeqCst);
    s.standing = Standing::Follower;
    let held = shared.control(|c, _| c.c.router().held());
    s.view.stepped_down(generation, held);
    t.followers.lock().expect("followers lock").clear();
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
