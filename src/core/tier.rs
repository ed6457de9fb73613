//! A tier of routers, simulated (issue 51; docs/scale.md, "Routing on
//! stale counts"): what PLB loses when n proxies route one service and
//! only one of them, the leader, holds fresh counts.
//!
//! The leader is the run's own router: it repairs, borrows and returns,
//! and its books count every session wherever it was admitted (a follower
//! reports its starts and ends one hop late; here at once). A follower
//! routes from a snapshot of the leader's roles, health and counts taken
//! every `refresh_s` (follower i at i/n of each interval), plus its own
//! clients' starts and ends since: the class's own role, then Mixed, each
//! below theta, or with quotas below its own share of every replica
//! (floor(theta / n) of its own open sessions, slots the leader holds for
//! it: the leader's theta tests count a follower's unused slots as open);
//! when neither has room it asks the leader, whose answer is fresh
//! (borrowing stays with the leader). Round robin and least-connections followers keep their own
//! cursor and read the snapshot's counts. Client c's sessions go through
//! router c mod n; router 0 is the leader.
//!
//! [`TierBooks`] counts what the staleness did: follower admissions that
//! differ from the leader's fresh choice at that instant, that took a
//! replica to theta or past it in the leader's books (the theta
//! overshoot), that went to a replica the leader already held failed, or
//! to one whose role had changed since the snapshot.

use super::model::{Class, ReplicaId, Role};
use super::router::{Router, Strategy};
use serde::{Deserialize, Serialize};

/// The most routers a tier may have.
pub const MAX_ROUTERS: u32 = 64;

/// The tier's shape (`--routers`, `--refresh-ms`, `--quotas`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TierConfig {
    /// Routers n, the leader included (at least 2 for a tier).
    pub routers: u32,
    /// How often a follower's snapshot is refreshed, seconds.
    pub refresh_s: f64,
    /// Followers admit within quotas of floor(theta / n) sessions per replica.
    pub quotas: bool,
}

/// What routing on stale counts did over a run (summary.json's `tier`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TierBooks {
    /// Routers n, the leader included.
    pub routers: u32,
    /// The followers' snapshot interval, milliseconds.
    pub refresh_ms: f64,
    /// Whether followers admitted within quotas.
    pub quotas: bool,
    /// Sessions the leader placed: its own clients' and those the followers forwarded (with the followers', every
    /// session started).
    pub leader_admissions: u64,
    /// Sessions a follower placed from its snapshot.
    pub follower_admissions: u64,
    /// Follower requests with no room in the class's role or Mixed, forwarded to the leader (placed or not).
    pub forwarded: u64,
    /// Follower placements on another replica than the leader would have chosen then (PLB and lc; round robin
    /// reads no counts).
    pub differed: u64,
    /// Follower placements (PLB) on a replica already at theta or above in the leader's books (own role:
    /// sessions less Freemium guests; Mixed when bounded) while the leader would have placed the session on one
    /// below theta: the theta overshoot that stale counts cause.
    pub over_theta: u64,
    /// The most sessions above theta such a placement took a replica to.
    pub overshoot_max: u32,
    /// Follower placements on a replica the leader already held failed.
    pub to_failed: u64,
    /// Follower placements on a replica whose role at the leader had changed since the snapshot.
    pub stale_role: u64,
}

impl TierBooks {
    /// The tier's shape and what its stale counts did, on one line.
    pub fn line(&self) -> String {
        format!(
            "{} routers (a leader and {} followers on snapshots every {} ms{}): followers placed {} sessions and \
             forwarded {}; {} differed from the leader's choice, {} went to theta or past it (by up to {}), {} to a \
             replica already failed, {} on a stale role",
            self.routers,
            self.routers.saturating_sub(1),
            self.refresh_ms,
            if self.quotas { ", within quotas" } else { "" },
            self.follower_admissions,
            self.forwarded,
            self.differed,
            self.over_theta,
            self.overshoot_max,
            self.to_failed,
            self.stale_role
        )
    }
}

/// One follower: its snapshot and its own clients' open sessions.
#[derive(Clone, Debug)]
struct Follower {
    snapshot: Router,
    next_refresh_s: f64,
    /// Its own clients' open sessions per replica, both classes.
    own: Vec<u32>,
}

impl Follower {
    /// Its choice for a session of `class` (counted on its snapshot and in
    /// its own sessions), or `None`: ask the leader.
    fn choose(&mut self, class: Class, quota: Option<u32>) -> Option<ReplicaId> {
        let r = if self.snapshot.config().strategy == Strategy::Plb {
            let r = self.within_roles(class, quota)?;
            self.snapshot.place(r, class);
            r
        } else {
            self.snapshot.admit(class)?
        };
        self.own[r.idx()] += 1;
        Some(r)
    }

    /// PLB's steps 1 and 2 on the snapshot: the class's own role, then
    /// Mixed, each below theta (or within the quota).
    fn within_roles(&self, class: Class, quota: Option<u32>) -> Option<ReplicaId> {
        let snap = &self.snapshot;
        let (theta, bounded) = (snap.config().theta, snap.config().mixed_bounded);
        let room = |r: ReplicaId, tested: bool| match quota {
            _ if !tested => true,
            Some(q) => self.own[r.idx()] < q,
            None => snap.theta_load(r) < theta,
        };
        snap.least_loaded_where(class, Role::of(class), |r| room(r, true))
            .or_else(|| snap.least_loaded_where(class, Role::M, |r| room(r, bounded)))
    }
}

/// The tier's followers and books; the leader is the caller's router.
#[derive(Clone, Debug)]
pub struct Tier {
    cfg: TierConfig,
    followers: Vec<Follower>,
    books: TierBooks,
}

impl Tier {
    /// A tier of `cfg.routers` around `leader`, every snapshot taken now.
    pub fn new(cfg: TierConfig, leader: &Router) -> Tier {
        let n = cfg.routers.max(1);
        let k = leader.config().replicas;
        let followers = (1..n)
            .map(|i| Follower {
                snapshot: leader.snapshot(),
                next_refresh_s: cfg.refresh_s * f64::from(i) / f64::from(n),
                own: vec![0; k],
            })
            .collect();
        let books =
            TierBooks { routers: n, refresh_ms: cfg.refresh_s * 1e3, quotas: cfg.quotas, ..TierBooks::default() };
        Tier { cfg, followers, books }
    }

    /// With quotas, each follower's quota per replica: floor(theta / n).
    fn quota(&self, leader: &Router) -> Option<u32> {
        self.cfg.quotas.then(|| leader.config().theta / self.cfg.routers.max(1))
    }

    /// With quotas, holds the followers' unused slots of `r` at the leader,
    /// so that neither its own clients nor what it is forwarded take them.
    fn reserve(&self, r: ReplicaId, leader: &mut Router) {
        if let Some(q) = self.quota(leader) {
            leader.reserve(r, self.followers.iter().map(|f| q.saturating_sub(f.own[r.idx()])).sum());
        }
    }

    /// Holds every replica's unused follower slots (call once, at the start).
    pub fn reserve_all(&self, leader: &mut Router) {
        for r in 0..leader.config().replicas {
            self.reserve(ReplicaId(r), leader);
        }
    }

    /// The books so far.
    pub fn books(&self) -> &TierBooks {
        &self.books
    }

    /// Which follower client `client` goes through (`None`: the leader).
    fn follower_of(&self, client: u32) -> Option<usize> {
        let i = client % self.cfg.routers.max(1);
        (i > 0).then(|| i as usize - 1)
    }

    /// Takes the snapshots due by `now_s`. Call it before the leader
    /// changes at `now_s`: its state has been the same since the last
    /// change, so a snapshot due earlier sees what it would have then.
    pub fn catch_up(&mut self, now_s: f64, leader: &Router) {
        let d = self.cfg.refresh_s;
        for f in self.followers.iter_mut().filter(|f| now_s >= f.next_refresh_s) {
            f.snapshot.refresh_from(leader);
            f.next_refresh_s += (((now_s - f.next_refresh_s) / d).floor() + 1.0) * d;
        }
    }

    /// Client `client`'s new session of `class`: routed by its router, and
    /// counted in the leader's books in every case.
    pub fn admit(&mut self, client: u32, class: Class, leader: &mut Router) -> Option<ReplicaId> {
        let Some(fi) = self.follower_of(client) else {
            let r = leader.admit(class)?;
            self.books.leader_admissions += 1;
            return Some(r);
        };
        let reads_counts = matches!(leader.config().strategy, Strategy::Plb | Strategy::Lc);
        let fresh = reads_counts.then(|| leader.clone().admit(class)).flatten();
        let quota = self.quota(leader);
        let f = &mut self.followers[fi];
        let Some(r) = f.choose(class, quota) else {
            self.books.forwarded += 1;
            let r = leader.admit(class)?;
            self.books.leader_admissions += 1;
            f.snapshot.place(r, class);
            f.own[r.idx()] += 1;
            self.reserve(r, leader);
            return Some(r);
        };
        let snapshot_role = f.snapshot.role(r);
        self.count(r, class, fresh, snapshot_role, leader);
        leader.place(r, class);
        self.reserve(r, leader);
        Some(r)
    }

    /// Books a follower's placement of a `class` session on `r` (whose
    /// role it read as `snapshot_role`), before the leader counts it.
    fn count(&mut self, r: ReplicaId, class: Class, fresh: Option<ReplicaId>, snapshot_role: Role, leader: &Router) {
        let cfg = leader.config();
        let b = &mut self.books;
        b.follower_admissions += 1;
        b.differed += u64::from(matches!(cfg.strategy, Strategy::Plb | Strategy::Lc) && fresh != Some(r));
        b.to_failed += u64::from(!leader.is_healthy(r));
        b.stale_role += u64::from(snapshot_role != leader.role(r));
        // Past theta through staleness: the replica was at theta while the
        // leader, fresh, would have found one below it (a replica past theta
        // because every one was, under saturation, is the leader's own
        // last resort, not the followers').
        let at_theta = |x: ReplicaId| {
            let role = leader.role(x);
            let tested = role == Role::of(class) || (role == Role::M && cfg.mixed_bounded);
            tested && leader.theta_load(x) >= cfg.theta
        };
        let room_elsewhere = fresh.is_some_and(|f| f != r && !at_theta(f));
        if cfg.strategy == Strategy::Plb && at_theta(r) && room_elsewhere {
            b.over_theta += 1;
            b.overshoot_max = b.overshoot_max.max(leader.theta_load(r) + 1 - cfg.theta);
        }
    }

    /// Client `client`'s session of `class` on `r` ended (the leader
    /// releases it; the caller's): its router forgets it, and with quotas
    /// its slot is held for it again.
    pub fn ended(&mut self, client: u32, r: ReplicaId, class: Class, leader: &mut Router) {
        if let Some(fi) = self.follower_of(client) {
            let f = &mut self.followers[fi];
            f.own[r.idx()] = f.own[r.idx()].saturating_sub(1);
            f.snapshot.unplace(r, class);
            self.reserve(r, leader);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::router::RouterConfig;

    fn plb(theta: u32) -> Router {
        Router::new(RouterConfig { theta, mixed_bounded: true, ..RouterConfig::for_tests(Strategy::Plb, [2, 1, 2]) })
    }

    fn tier(routers: u32, refresh_s: f64, quotas: bool, leader: &Router) -> Tier {
        Tier::new(TierConfig { routers, refresh_s, quotas }, leader)
    }

    #[test]
    fn one_router_is_the_leader_alone() {
        let (mut a, mut b) = (plb(3), plb(3));
        let mut t = tier(1, 1.0, false, &a);
        for i in 0..40 {
            let class = if i % 4 == 0 { Class::P } else { Class::F };
            assert_eq!(t.admit(i, class, &mut a), b.admit(class), "session {i}");
        }
        assert_eq!((t.books().leader_admissions, t.books().follower_admissions), (40, 0));
    }

    /// Followers that never refresh herd onto the replica that was least
    /// loaded in their snapshot, past theta; quotas keep each within its
    /// share (floor(4 / 4) = 1 session per replica), and what does not fit
    /// goes to the leader.
    #[test]
    fn stale_followers_overshoot_theta_and_quotas_stop_it() {
        for quotas in [false, true] {
            let mut leader = plb(4);
            let mut t = tier(4, 1e9, quotas, &leader);
            t.reserve_all(&mut leader);
            for client in 0..32 {
                t.catch_up(0.0, &leader);
                assert!(t.admit(client, Class::P, &mut leader).is_some());
            }
            let b = t.books().clone();
            assert_eq!(b.follower_admissions + b.forwarded + 8, 32, "{b:?}");
            if quotas {
                assert_eq!(b.follower_admissions, 9, "one slot per follower on r1, r2 and Mixed's r3: {b:?}");
                assert_eq!((b.over_theta, b.overshoot_max), (0, 0), "the leader keeps the followers' slots: {b:?}");
            } else {
                assert!(b.over_theta > 0 && b.overshoot_max >= 8, "three followers fill r1 each: {b:?}");
                assert!(b.differed > 0 && b.forwarded == 0, "{b:?}");
            }
            let total: u32 = (0..5).map(|r| leader.active(ReplicaId(r)).iter().sum::<u32>()).sum();
            assert_eq!(total, 32, "the leader counts every session");
        }
    }

    /// A follower's snapshot is refreshed on its own schedule (follower i
    /// at i/n of each interval) and its own ends are taken off at once.
    #[test]
    fn snapshots_refresh_on_schedule_and_ends_are_forgotten() {
        let mut leader = plb(2);
        let mut t = tier(2, 1.0, false, &leader);
        let r = t.admit(1, Class::F, &mut leader).unwrap();
        assert_eq!(t.followers[0].own[r.idx()], 1);
        t.ended(1, r, Class::F, &mut leader);
        leader.release(r, Class::F);
        assert_eq!(t.followers[0].own[r.idx()], 0);
        assert_eq!(t.followers[0].snapshot.active(r), [0, 0]);
        leader.admit(Class::F);
        t.catch_up(0.4, &leader);
        assert_eq!(t.followers[0].next_refresh_s, 0.5, "not due before 0.5 s");
        t.catch_up(2.7, &leader);
        assert_eq!(t.followers[0].next_refresh_s, 3.5, "due at 0.5, 1.5, 2.5: taken once, next at 3.5");
        let seen: u32 = (0..5).map(|r| t.followers[0].snapshot.active(ReplicaId(r))[1]).sum();
        assert_eq!(seen, 1, "the refreshed snapshot holds the leader's session");
    }

    #[test]
    fn round_robin_followers_keep_their_own_cursor() {
        let mut leader = Router::new(RouterConfig::for_tests(Strategy::Rr, [2, 1, 2]));
        let mut t = tier(2, 0.1, false, &leader);
        let picks: Vec<_> = (0..4).map(|_| t.admit(1, Class::F, &mut leader).unwrap().idx()).collect();
        assert_eq!(picks, [0, 1, 2, 3]);
        t.catch_up(5.0, &leader);
        assert_eq!(t.admit(1, Class::F, &mut leader).unwrap().idx(), 4, "a refresh keeps the cursor");
        assert_eq!(t.books().differed, 0, "round robin reads no counts");
    }
}
