//! A tier member's own sessions and, while it follows, the leader's roles
//! it routes within (docs/scale.md, "Agreeing on roles"); and the leader's
//! books of its followers' sessions, which make its counts the tier's
//! (and rebuild them after a failover). Pure: the I/O is in
//! [`super::link`] and [`super::feed`].

use super::wire::{Fence, Verdict};
use crate::core::model::{Class, ReplicaId, Role};
use crate::core::router::restore::Held;
use crate::core::router::{Router, RouterConfig, Strategy};
use std::collections::HashMap;

/// Open sessions `[P, F]` per replica.
pub type Counts = Vec<[u32; 2]>;

/// What a member knows of its own sessions and of the leader's roles.
#[derive(Clone, Debug)]
pub struct View {
    cfg: RouterConfig,
    /// The newest role vector applied.
    pub fence: Fence,
    /// The leader's last vector as applied, with this member's sessions
    /// since counted in (`None`: none yet).
    snapshot: Option<Router>,
    /// The last vector as received.
    held: Option<Vec<Held>>,
    /// This member's open sessions, whoever routed them.
    own: Counts,
    /// Replicas this member's own probes confirmed down: kept down in every
    /// vector it applies, whatever the leader said or did not say, until
    /// its probes see them answer again.
    down: Vec<bool>,
}

impl View {
    /// No roles yet, no sessions.
    pub fn new(cfg: RouterConfig) -> View {
        let k = cfg.replicas;
        View { cfg, fence: Fence::default(), snapshot: None, held: None, own: vec![[0; 2]; k], down: vec![false; k] }
    }

    /// A vector from the leader: applied unless older than the newest (the
    /// verdict says which); `Err` when it does not fit the router.
    pub fn apply(&mut self, generation: u64, seq: u64, held: Vec<Held>) -> Result<Verdict, String> {
        let snapshot = Router::restore(self.cfg.clone(), &held)?;
        let v = self.fence.check(generation, seq);
        if v == Verdict::Apply {
            self.snapshot = Some(snapshot);
            self.held = Some(held);
            self.keep_down();
        }
        Ok(v)
    }

    /// What this member's own probes say of each replica now. One it
    /// confirmed down leaves its snapshot at once, repaired as the leader
    /// would repair it (PLB's target is a pure function of the survivors,
    /// so every member that saw the same deaths computes the same roles).
    /// One that answers again comes back only with the leader's next
    /// vector, unless no leader speaks (`leaderless`): then it rejoins
    /// as the leader would let it, as Mixed.
    /// Returns the replicas whose own health changed, and to what.
    pub fn own_health(&mut self, healthy: &[bool], leaderless: bool) -> Vec<(ReplicaId, bool)> {
        let mut changed = Vec::new();
        for (i, &up) in healthy.iter().enumerate().take(self.down.len()) {
            let was_down = self.down[i];
            self.down[i] = !up;
            let r = ReplicaId(i);
            if was_down == up {
                changed.push((r, up));
            }
            match (&mut self.snapshot, up) {
                (Some(s), false) if s.is_healthy(r) => s.set_health(r, false),
                (Some(s), true) if was_down && leaderless && !s.is_healthy(r) => s.set_health(r, true),
                _ => {}
            }
        }
        changed
    }

    /// Whether this member's own probes confirmed `r` down.
    pub fn known_down(&self, r: ReplicaId) -> bool {
        self.down.get(r.idx()).copied().unwrap_or(false)
    }

    /// Applies this member's own confirmed deaths to the snapshot.
    fn keep_down(&mut self) {
        let Some(s) = &mut self.snapshot else { return };
        for (i, &d) in self.down.iter().enumerate() {
            if d && s.is_healthy(ReplicaId(i)) {
                s.set_health(ReplicaId(i), false);
            }
        }
    }

    /// The member led at `generation` and steps down with `held`, its own
    /// router's: it routes within those roles until a leader speaks.
    pub fn stepped_down(&mut self, generation: u64, held: Vec<Held>) {
        self.fence.lead(generation, u64::MAX);
        self.snapshot = Router::restore(self.cfg.clone(), &held).ok();
        self.held = Some(held);
        self.keep_down();
    }

    /// Whether it has roles to route within.
    pub fn has_roles(&self) -> bool {
        self.snapshot.is_some()
    }

    /// A replica for a session of `class` within the leader's roles (PLB:
    /// its class's role, then Mixed, each below theta, as the simulated
    /// tier's followers, `core::tier`; the other strategies: their own
    /// choice on the snapshot), counted; `None`: no room, ask the leader.
    pub fn choose(&mut self, class: Class) -> Option<ReplicaId> {
        let snap = self.snapshot.as_mut()?;
        let r = if snap.config().strategy == Strategy::Plb {
            let (theta, bounded) = (snap.config().theta, snap.config().mixed_bounded);
            let room = |s: &Router, r: ReplicaId, tested: bool| !tested || s.theta_load(r) < theta;
            let s = &*snap;
            let r = s
                .least_loaded_where(class, Role::of(class), |r| room(s, r, true))
                .or_else(|| s.least_loaded_where(class, Role::M, |r| room(s, r, bounded)))?;
            snap.place(r, class);
            r
        } else {
            snap.admit(class)?
        };
        self.own[r.idx()][class.idx()] += 1;
        Some(r)
    }

    /// A session of `class` this member started on `r` that it did not
    /// choose from its snapshot (the leader placed it, or it led).
    pub fn started(&mut self, r: ReplicaId, class: Class) {
        if let Some(s) = &mut self.snapshot {
            s.place(r, class);
        }
        self.own[r.idx()][class.idx()] += 1;
    }

    /// One of its sessions ended.
    pub fn ended(&mut self, r: ReplicaId, class: Class) {
        if let Some(s) = &mut self.snapshot {
            s.unplace(r, class);
        }
        let n = &mut self.own[r.idx()][class.idx()];
        *n = n.saturating_sub(1);
    }

    /// Its open sessions.
    pub fn own(&self) -> &Counts {
        &self.own
    }

    /// What it starts from when it wins the election: the roles and loans
    /// it last followed (its own router's `fallback` when it followed
    /// none), health as its own probes see it, and as open sessions its
    /// own plus `extra` (sessions the cluster shows that nobody reported
    /// yet); no guests (unknown: a follower does not report them).
    pub fn restored(&self, fallback: &[Held], healthy: &[bool], extra: &Counts) -> Vec<Held> {
        let roles = self.held.as_deref().unwrap_or(fallback);
        roles
            .iter()
            .enumerate()
            .map(|(i, h)| Held {
                role: h.role,
                home: h.home,
                healthy: healthy[i],
                active: [self.own[i][0] + extra[i][0], self.own[i][1] + extra[i][1]],
                guests: 0,
            })
            .collect()
    }
}

/// A leader's books: each follower's open sessions as it reported them,
/// and the sessions the cluster showed when it was elected that no
/// follower has reported yet.
#[derive(Clone, Debug, Default)]
pub struct Books {
    followers: HashMap<u8, Counts>,
    unreported: Counts,
}

/// A change to the leader's router counts: place (`+`) or unplace (`-`)
/// this many sessions of each class on each replica.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Change {
    pub place: Counts,
    pub unplace: Counts,
}

impl Books {
    /// Books of a new leader that counted `unreported` sessions from
    /// `pg_stat_activity` (beyond its own) into its router.
    pub fn new(unreported: Counts) -> Books {
        Books { followers: HashMap::new(), unreported }
    }

    /// Whether peer `peer` is a follower now.
    pub fn has(&self, peer: u8) -> bool {
        self.followers.contains_key(&peer)
    }

    /// Peer `peer` joins with `open` sessions: the router places those
    /// not already counted as unreported.
    pub fn join(&mut self, peer: u8, open: Counts) -> Change {
        let k = self.unreported.len().max(open.len());
        self.unreported.resize(k, [0; 2]);
        let mut place = vec![[0; 2]; k];
        for (r, o) in open.iter().enumerate() {
            for c in 0..2 {
                let known = o[c].min(self.unreported[r][c]);
                self.unreported[r][c] -= known;
                place[r][c] = o[c] - known;
            }
        }
        self.followers.insert(peer, open);
        Change { place, unplace: Vec::new() }
    }

    /// `pg_stat_activity` read after the leader began to lead showed `seen`
    /// sessions beyond its own: those no follower has reported (and not
    /// counted yet) are counted as unreported, until [`Books::expire`].
    pub fn late_unreported(&mut self, seen: &Counts) -> Change {
        let k = seen.len().max(self.unreported.len());
        self.unreported.resize(k, [0; 2]);
        let mut place = vec![[0; 2]; k];
        for (r, s) in seen.iter().enumerate() {
            for c in 0..2 {
                let reported: u32 = self.followers.values().map(|f| f.get(r).map_or(0, |n| n[c])).sum();
                place[r][c] = s[c].saturating_sub(reported).saturating_sub(self.unreported[r][c]);
                self.unreported[r][c] += place[r][c];
            }
        }
        Change { place, unplace: Vec::new() }
    }

    /// A follower's session started (`true`) or ended on `r`.
    pub fn session(&mut self, peer: u8, r: ReplicaId, class: Class, started: bool) {
        if let Some(n) = self.followers.get_mut(&peer).and_then(|f| f.get_mut(r.idx())) {
            let n = &mut n[class.idx()];
            *n = if started { *n + 1 } else { n.saturating_sub(1) };
        }
    }

    /// The sessions counted from `pg_stat_activity` that no follower
    /// reported are no longer counted (the followers that live have
    /// reported by now).
    pub fn expire(&mut self) -> Change {
        let unplace = std::mem::take(&mut self.unreported);
        Change { place: Vec::new(), unplace }
    }

    /// Peer `peer` left (its connection closed): its sessions are no
    /// longer counted (they went with it, or it reports them again when it
    /// comes back).
    pub fn leave(&mut self, peer: u8) -> Change {
        let unplace = self.followers.remove(&peer).unwrap_or_default();
        Change { place: Vec::new(), unplace }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> RouterConfig {
        RouterConfig { theta: 2, mixed_bounded: true, ..RouterConfig::for_tests(Strategy::Plb, [2, 1, 2]) }
    }

    fn held(router: &Router) -> Vec<Held> {
        router.held()
    }

    /// A follower routes within the roles it was given, up to theta, and
    /// asks the leader beyond; a newer vector replaces its snapshot, an
    /// older one is ignored.
    #[test]
    fn a_follower_routes_within_the_leaders_roles() {
        let mut leader = Router::new(cfg());
        leader.set_health(ReplicaId(0), false);
        let mut v = View::new(cfg());
        assert_eq!(v.choose(Class::P), None, "no roles yet");
        assert_eq!(v.apply(1, 1, held(&leader)).unwrap(), Verdict::Apply);
        let roles: Vec<Role> = (0..5).map(|r| leader.role(ReplicaId(r))).collect();
        let mut picks = Vec::new();
        while let Some(r) = v.choose(Class::P) {
            assert!(matches!(roles[r.idx()], Role::P | Role::M), "{r} is {:?}", roles[r.idx()]);
            assert!(leader.is_healthy(r), "{r}");
            picks.push(r);
        }
        let room: u32 = (0..5)
            .filter(|&r| leader.is_healthy(ReplicaId(r)) && matches!(roles[r], Role::P | Role::M))
            .map(|_| 2)
            .sum();
        assert_eq!(picks.len() as u32, room, "theta 2 on each healthy P or M replica, then ask: {picks:?}");
        assert_eq!(v.own().iter().map(|c| c[0]).sum::<u32>(), room);
        let r = picks[0];
        v.ended(r, Class::P);
        assert_eq!(v.choose(Class::P), Some(r), "an end frees its place");
        assert_eq!(v.apply(1, 1, held(&Router::new(cfg()))).unwrap(), Verdict::Old);
        assert_eq!(v.apply(0, 9, held(&Router::new(cfg()))).unwrap(), Verdict::Fenced);
        assert_eq!(v.choose(Class::P), None, "ignored vectors do not reset the counts");
        assert_eq!(v.apply(2, 1, held(&Router::new(cfg()))).unwrap(), Verdict::Apply);
        assert!(v.choose(Class::P).is_some(), "a newer leader's empty counts give room again");
        assert!(v.apply(3, 1, held(&Router::new(cfg()))[..4].to_vec()).is_err());
    }

    /// A new leader starts from the roles it followed, its own health view
    /// and sessions; followers' reports then count only what the cluster
    /// did not already show.
    #[test]
    fn a_new_leader_rebuilds_the_counts() {
        let mut old = Router::new(cfg());
        old.set_health(ReplicaId(0), false);
        let mut v = View::new(cfg());
        v.apply(4, 2, held(&old)).unwrap();
        let r = v.choose(Class::F).unwrap();
        let healthy = [true, true, true, true, false];
        let extra = vec![[0, 0], [1, 0], [0, 0], [0, 2], [0, 0]];
        let h = v.restored(&Router::new(cfg()).held(), &healthy, &extra);
        for (i, x) in h.iter().enumerate() {
            assert_eq!(x.role, old.role(ReplicaId(i)), "the followed roles, not the reference split");
            assert_eq!(x.healthy, healthy[i]);
        }
        assert_eq!(h[r.idx()].active[1], 1 + extra[r.idx()][1]);
        assert_eq!(h[1].active, [1, 0]);
        assert!(Router::restore(cfg(), &h).is_ok());
        assert_eq!(v.fence.next(), 5);

        let mut b = Books::new(extra);
        let c = b.join(2, vec![[0, 0], [2, 0], [0, 0], [0, 1], [0, 0]]);
        assert_eq!(c.place, vec![[0, 0], [1, 0], [0, 0], [0, 0], [0, 0]], "one of r2's two was already counted");
        let c = b.join(3, vec![[0, 0], [0, 0], [0, 0], [0, 3], [0, 0]]);
        assert_eq!(c.place[3], [0, 2], "r4 had two unreported, one went to peer 2");
        b.session(2, ReplicaId(1), Class::P, false);
        b.session(2, ReplicaId(4), Class::F, true);
        assert!(b.has(2) && !b.has(4));
        let c = b.leave(2);
        assert_eq!(c.unplace, vec![[0, 0], [1, 0], [0, 0], [0, 1], [0, 1]]);
        assert!(!b.has(2));
        assert_eq!(b.leave(2), Change::default());
        assert_eq!(b.expire().unplace, vec![[0, 0], [0, 0], [0, 0], [0, 0], [0, 0]], "every unreported one claimed");
        let mut fresh = Books::new(vec![[1, 2]]);
        assert_eq!(fresh.expire().unplace, vec![[1, 2]], "unclaimed sessions go after the grace period");
        assert_eq!(fresh.expire(), Change::default());
    }

    /// Read after the followers said hello, `pg_stat_activity` adds only
    /// what none of them reported; a follower joining later claims its own
    /// from it, and all of it goes at expiry.
    #[test]
    fn a_late_reading_counts_only_what_nobody_reported() {
        let mut b = Books::new(vec![[0; 2]; 3]);
        b.join(2, vec![[1, 0], [0, 2], [0, 0]]);
        let c = b.late_unreported(&vec![[3, 0], [0, 2], [0, 4]]);
        assert_eq!(c.place, vec![[2, 0], [0, 0], [0, 4]]);
        assert_eq!(b.late_unreported(&vec![[3, 0], [0, 2], [0, 4]]).place, vec![[0; 2]; 3], "counted once");
        assert_eq!(b.join(3, vec![[0, 0], [0, 0], [0, 3]]).place, vec![[0; 2]; 3], "claimed from the unreported");
        assert_eq!(b.expire().unplace, vec![[2, 0], [0, 0], [0, 1]]);
    }

    /// A replica the member's own probes confirmed down is out of every
    /// choice, whatever vector the leader sends (a hung leader's old one,
    /// again), repaired as the leader would repair; it comes back with the
    /// leader's next vector, or at once as Mixed when no leader speaks.
    #[test]
    fn a_follower_never_routes_to_a_replica_its_own_probes_confirmed_down() {
        let leader = Router::new(cfg());
        let dead = (0..5).map(ReplicaId).find(|&r| leader.role(r) == Role::P).unwrap();
        let mut v = View::new(cfg());
        v.apply(1, 1, held(&leader)).unwrap();
        let mut healthy = vec![true; 5];
        healthy[dead.idx()] = false;
        v.own_health(&healthy, false);
        assert!(v.known_down(dead));
        let mut expect = Router::new(cfg());
        expect.set_health(dead, false);
        let snap = v.snapshot.as_ref().unwrap();
        for r in (0..5).map(ReplicaId) {
            assert_eq!(snap.role(r), expect.role(r), "{r}: the leader's own repair");
        }
        v.apply(1, 2, held(&leader)).unwrap();
        for _ in 0..20 {
            for class in [Class::P, Class::F] {
                assert_ne!(v.choose(class), Some(dead), "a {class:?} session sent to the dead replica");
            }
        }
        v.own_health(&[true; 5], false);
        assert!(!v.snapshot.as_ref().unwrap().is_healthy(dead), "back only with the leader's word");
        v.own_health(&healthy, false);
        v.own_health(&[true; 5], true);
        let snap = v.snapshot.as_ref().unwrap();
        assert!(snap.is_healthy(dead) && snap.role(dead) == Role::M, "no leader: it rejoins as Mixed");
    }

    #[test]
    fn a_leader_that_steps_down_routes_on_its_own_last_roles() {
        let mut mine = Router::new(cfg());
        mine.set_health(ReplicaId(1), false);
        let mut v = View::new(cfg());
        v.started(ReplicaId(3), Class::F);
        v.stepped_down(7, mine.held());
        assert!(v.has_roles());
        assert_eq!(v.fence.next(), 8);
        assert_eq!(v.apply(7, 5, Router::new(cfg()).held()).unwrap(), Verdict::Old, "its own generation is done");
        let r = v.choose(Class::P).unwrap();
        assert_ne!(r, ReplicaId(1), "not the replica it held failed");
        assert_eq!(v.own()[3], [0, 1]);
    }
}
