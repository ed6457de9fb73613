//! The routing interface shared by every backend (design.md §2): given the
//! router's view (replica health, roles, per-class active sessions) and a new
//! session's class, return a replica or "no capacity". Strategies are a closed
//! enum dispatched with `match`; PLB's role state lives here too. Its
//! least-loaded choices, guest placements, returns and counts read the
//! indexes of [`index`] (O(log K) a decision at fleet scale), which make
//! exactly the choices of a scan of every replica ([`Router::with_scans`]
//! keeps the scans, for the property test that compares the two).

use super::model::{Class, ReplicaId, Role};
use super::roles::{self, Move, RoleVector, Slot};
use index::{ordered, Entry, Index};
use serde::{Deserialize, Serialize};
use std::fmt;

mod index;
pub mod restore;
mod room;

pub use restore::Held;
pub use room::Room;

/// A routing strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// The paper's policy: P/M/F roles, load-aware admission, repair-to-target.
    Plb,
    /// Static per-class partitions (default 3RR+2RR), round robin inside each.
    RrSplit,
    /// Shared round robin over all healthy replicas (5RR).
    Rr,
    /// Least active sessions over all healthy replicas (ablation).
    Lc,
}

impl Strategy {
    /// Every strategy, in report order.
    pub const ALL: [Strategy; 4] = [Strategy::Plb, Strategy::RrSplit, Strategy::Rr, Strategy::Lc];

    /// The name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Plb => "plb",
            Strategy::RrSplit => "rr-split",
            Strategy::Rr => "rr",
            Strategy::Lc => "lc",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How far Freemium may borrow a Premium replica (admission step 3). The
/// paper says replicas are borrowed across roles "during normal load
/// variations" and returned "when pressure subsides"; design.md §2 (revised
/// 2026-12-03) makes the borrowing follow Premium's pressure, and the
/// earlier readings stay as ablations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FreemiumBorrow {
    /// The default: a Freemium session may be placed on a Premium replica
    /// (which keeps its role; the session is its guest) while that
    /// replica's CPU, scaled to the sessions it holds now, stays below
    /// [`PRESSURE_CPU`] of its budget. Guests never count against Premium's
    /// theta. No CPU reading (a backend that does not measure it): no
    /// borrowing.
    #[default]
    Pressure,
    /// `pressure`, and no guest either while a Premium session went past
    /// its own role and Mixed since the last CPU reading (sessions against
    /// theta as a second signal; an ablation).
    PressureFallback,
    /// design.md's first reading: a P replica idle of P sessions, only
    /// while the P role is above its target (so never right after a repair).
    Surplus,
    /// A P replica idle of P sessions, while the P role keeps another
    /// unborrowed replica.
    Idle,
    /// Premium's own rule mirrored: the least-loaded P replica, while the
    /// P role keeps another unborrowed replica and it is less loaded than
    /// Freemium's best.
    Mirror,
    /// Freemium never borrows.
    Never,
}

/// Premium's pressure level under [`FreemiumBorrow::Pressure`]: the share
/// of a Premium replica's CPU budget up to which Freemium may use it. Half:
/// the utilisation at which a single-server queue's mean wait equals its
/// service time, so Premium's queries at most double their CPU time by
/// queueing behind guests (a stated principle, not fitted to any result).
pub const PRESSURE_CPU: f64 = 0.5;

impl FreemiumBorrow {
    /// Every rule, in command-line order.
    pub const ALL: [FreemiumBorrow; 6] = [
        FreemiumBorrow::Pressure,
        FreemiumBorrow::PressureFallback,
        FreemiumBorrow::Surplus,
        FreemiumBorrow::Idle,
        FreemiumBorrow::Mirror,
        FreemiumBorrow::Never,
    ];

    /// The name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            FreemiumBorrow::Pressure => "pressure",
            FreemiumBorrow::PressureFallback => "pressure-fallback",
            FreemiumBorrow::Surplus => "surplus",
            FreemiumBorrow::Idle => "idle",
            FreemiumBorrow::Mirror => "mirror",
            FreemiumBorrow::Never => "never",
        }
    }

    /// Whether Freemium sessions are placed on Premium replicas as guests
    /// (the replica keeps its role) rather than by lending the replica.
    pub fn takes_guests(self) -> bool {
        matches!(self, FreemiumBorrow::Pressure | FreemiumBorrow::PressureFallback)
    }
}

/// Router settings (validated by the plan).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RouterConfig {
    /// Which strategy routes.
    pub strategy: Strategy,
    /// Number of replicas K (default 5).
    pub replicas: usize,
    /// PLB reference split `(K_P0, K_M0, K_F0)`, sum K (default 2,1,2).
    pub reference: RoleVector,
    /// rr-split partition sizes `(Premium, Freemium)`, sum K (default 3:2).
    pub split: (usize, usize),
    /// PLB admission threshold theta in sessions per replica (default 10).
    pub theta: u32,
    /// PLB return factor alpha; tau = floor(alpha * theta) (default 0.7).
    pub alpha: f64,
    /// Mixed admits only below theta too (design.md §2 as revised; false is
    /// the unbounded ablation).
    pub mixed_bounded: bool,
    /// How far Freemium may borrow a Premium replica.
    pub freemium_borrow: FreemiumBorrow,
}

impl RouterConfig {
    /// Test settings: `strategy` over `reference` (K = its sum), rr-split
    /// halves, theta 10, alpha 0.7, Mixed unbounded, design.md's borrowing.
    #[cfg(test)]
    pub(crate) fn for_tests(strategy: Strategy, reference: RoleVector) -> RouterConfig {
        let k = reference.iter().sum();
        RouterConfig {
            strategy,
            replicas: k,
            reference,
            split: (k - k / 2, k / 2),
            theta: 10,
            alpha: 0.7,
            mixed_bounded: false,
            freemium_borrow: FreemiumBorrow::Surplus,
        }
    }
}

/// A role change to log in events.csv.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoleChange {
    /// The replica.
    pub replica: ReplicaId,
    /// Role before.
    pub from: Role,
    /// Role after.
    pub to: Role,
    /// Why: `repair`, `canonical`, `borrow`, `return` or `rejoin`.
    pub reason: &'static str,
}

#[derive(Clone, Debug)]
struct Replica {
    healthy: bool,
    /// Per class (P, F), the share of the new sessions it would be given
    /// that it may take (1 = all; below 1 while the health machine suspects
    /// or probates it, or while `--recovery probation` ramps Freemium in).
    share: [f64; 2],
    /// Round robin: per class, credit toward the next admission under a share below 1.
    credit: [f64; 2],
    role: Role,
    home: Option<Role>,
    active: [u32; 2],
    /// Freemium sessions placed on it as guests of its Premium role (never
    /// more than its Freemium sessions: those that end count as guests last).
    guests: u32,
    /// CPU use over the last reading's interval, as a fraction of the
    /// budget (`None`: not measured), and the sessions it held then.
    cpu: Option<(f64, u32)>,
    /// Sessions held back for a tier's followers (their unused quota
    /// slots, [`crate::core::tier`]): the theta tests count them as open.
    reserved: u32,
}

impl Replica {
    /// What the index keeps of it (`tau`: the return level).
    fn entry(&self, tau: u32) -> Entry {
        let guest_ok = self.role == Role::P && self.home.is_none() && self.healthy && self.share[Class::F.idx()] >= 1.0;
        Entry {
            load: Class::ALL.map(|c| self.open(c).then(|| (self.role, ordered(self.weighted_load(c))))),
            guest: guest_ok.then(|| self.cpu_with_one_more()).flatten().filter(|c| !c.is_nan()).map(ordered),
            borrowed: self.home.is_some(),
            healthy: self.healthy.then_some((self.role, self.home.is_none(), self.load() >= tau)),
        }
    }

    fn load(&self) -> u32 {
        self.active[0] + self.active[1]
    }

    /// The CPU share it would use with one session more: the last reading
    /// scaled by the sessions it holds now plus one over those it held
    /// then, so sessions placed since the reading count before the next.
    /// A reading taken with no session says nothing of what a session
    /// costs: it admits one guest, and the next reading, with that guest,
    /// sizes the rest (an idle replica just repaired into Premium would
    /// otherwise read 0 whatever it was given, and take a whole queue of
    /// guests in the second before the next reading).
    fn cpu_with_one_more(&self) -> Option<f64> {
        let (used, then) = self.cpu?;
        if then == 0 {
            return (self.load() == 0).then_some(used);
        }
        Some(used * f64::from(self.load() + 1) / f64::from(then))
    }

    /// Whether new sessions of `class` may go to it at all.
    fn open(&self, class: Class) -> bool {
        self.healthy && self.share[class.idx()] > 0.0
    }

    /// Load as least-connections weighs it for `class`: a replica at share s
    /// looks (load + 1) / s - 1 loaded, so it settles at about s times the
    /// sessions of a full-share peer (weighted least-connections).
    fn weighted_load(&self, class: Class) -> f64 {
        f64::from(self.load() + 1) / self.share[class.idx()] - 1.0
    }
}

/// The router: one per run, driven by whichever backend runs the sessions.
#[derive(Clone, Debug)]
pub struct Router {
    cfg: RouterConfig,
    tau: u32,
    replicas: Vec<Replica>,
    cursors: [usize; 3],
    changes: Vec<RoleChange>,
    /// A Premium session went past its own role and Mixed since the last
    /// CPU reading (`pressure-fallback` lends nothing then).
    premium_fell_back: bool,
    /// The indexes the choices read; `None`: scan every replica instead.
    index: Option<Index>,
    /// The gate's limits for the choice under way ([`Self::admit_within`]).
    room: Option<Room>,
}

impl Router {
    /// A router with every replica healthy and roles at the reference split
    /// (PLB) or the partition (rr-split: P then F).
    pub fn new(cfg: RouterConfig) -> Router {
        let k = cfg.replicas;
        let role_at = |r: usize| match cfg.strategy {
            Strategy::Plb => {
                let [p, m, _] = cfg.reference;
                if r < p {
                    Role::P
                } else if r < p + m {
                    Role::M
                } else {
                    Role::F
                }
            }
            Strategy::RrSplit if r < cfg.split.0 => Role::P,
            Strategy::RrSplit => Role::F,
            Strategy::Rr | Strategy::Lc => Role::M,
        };
        let replicas = (0..k)
            .map(|r| Replica {
                healthy: true,
                share: [1.0; 2],
                credit: [0.0; 2],
                role: role_at(r),
                home: None,
                active: [0, 0],
                guests: 0,
                cpu: None,
                reserved: 0,
            })
            .collect();
        let tau = (cfg.alpha * f64::from(cfg.theta)).floor() as u32;
        let index = Some(Index::new(k));
        let mut router = Router {
            cfg,
            tau,
            replicas,
            cursors: [0; 3],
            changes: Vec::new(),
            premium_fell_back: false,
            index,
            room: None,
        };
        router.sync_all();
        router
    }

    /// The same router without indexes: every choice scans every replica
    /// (the reference the indexed choices are tested against).
    #[doc(hidden)]
    pub fn with_scans(cfg: RouterConfig) -> Router {
        Router { index: None, ..Router::new(cfg) }
    }

    /// Brings replica `i`'s index entries up to date after a change.
    fn sync(&mut self, i: usize) {
        if let Some(x) = &mut self.index {
            x.update(i, self.replicas[i].entry(self.tau));
        }
    }

    fn sync_all(&mut self) {
        for i in 0..self.replicas.len() {
            self.sync(i);
        }
    }

    /// The configuration this router was built with.
    pub fn config(&self) -> &RouterConfig {
        &self.cfg
    }

    /// Chooses a replica for a new session of `class` and counts it active,
    /// or returns `None` ("no capacity").
    pub fn admit(&mut self, class: Class) -> Option<ReplicaId> {
        let pick = self.pick(class)?;
        self.replicas[pick.idx()].active[class.idx()] += 1;
        self.sync(pick.idx());
        Some(pick)
    }

    /// [`Self::admit`] among the replicas with `room`: every choice the
    /// strategy makes passes over a replica at its limit, so the session
    /// goes to the next one the strategy would take (`None`: no replica
    /// eligible for it has room).
    pub fn admit_within(&mut self, class: Class, room: Room) -> Option<ReplicaId> {
        self.room = Some(room);
        let pick = self.admit(class);
        self.room = None;
        pick
    }

    /// Whether any replica may take a session of `class` at all, room
    /// aside: what [`Self::admit`] would answer `None` to otherwise.
    pub fn routable(&self, class: Class) -> bool {
        let want = Role::of(class);
        self.replicas.iter().any(|r| r.open(class) && (self.cfg.strategy != Strategy::RrSplit || r.role == want))
    }

    /// The sessions a least-loaded comparison weighs on `rep`: all of
    /// them, or under a gate's [`Room::weigh_counted`] only the counted
    /// classes' (the same weight the choice itself used).
    fn weighed(&self, rep: &Replica) -> u32 {
        match self.room.filter(|room| room.weigh_counted) {
            Some(room) => room.held(rep.active),
            None => rep.load(),
        }
    }

    /// Whether `rep` has room for one more session in the choice under way.
    fn fits(&self, rep: &Replica) -> bool {
        self.room.is_none_or(|room| room.fits(rep.role, rep.active))
    }

    /// Round robin under shares: a replica at share s takes s of the turns
    /// it is offered (its credit grows by s a turn); the rest pass it by.
    fn take_credit(&mut self, r: ReplicaId, class: Class) -> bool {
        let c = class.idx();
        let rep = &mut self.replicas[r.idx()];
        if rep.share[c] >= 1.0 {
            return true;
        }
        rep.credit[c] += rep.share[c];
        let granted = rep.credit[c] >= 1.0;
        if granted {
            rep.credit[c] -= 1.0;
        }
        granted
    }

    /// Sets the share of new sessions `replica` may take, for both classes
    /// (clamped to 0..=1; 0 stops new sessions like a failure would); open
    /// sessions are untouched.
    pub fn set_share(&mut self, replica: ReplicaId, share: f64) {
        self.set_shares(replica, [share; 2]);
    }

    /// [`Self::set_share`] per class `[P, F]`.
    pub fn set_shares(&mut self, replica: ReplicaId, shares: [f64; 2]) {
        let rep = &mut self.replicas[replica.idx()];
        let shares = shares.map(|s| s.clamp(0.0, 1.0));
        if rep.share != shares {
            rep.share = shares;
            rep.credit = [0.0; 2];
            self.sync(replica.idx());
        }
    }

    /// The shares `[P, F]` of new sessions `replica` may take.
    pub fn shares(&self, replica: ReplicaId) -> [f64; 2] {
        self.replicas[replica.idx()].share
    }

    fn pick(&mut self, class: Class) -> Option<ReplicaId> {
        match self.cfg.strategy {
            Strategy::Rr => self.round_robin(2, class, |_| true),
            Strategy::RrSplit => {
                let want = Role::of(class);
                self.round_robin(class.idx(), class, |r| r.role == want)
            }
            Strategy::Lc => self.least_loaded(class, &Role::ALL, |_| true),
            Strategy::Plb => self.plb_admit(class),
        }
    }

    /// A CPU reading: each replica's use since the last one as a fraction
    /// of its budget (`None` where it was not measured).
    pub fn observe_cpu(&mut self, used: &[Option<f64>]) {
        for (rep, u) in self.replicas.iter_mut().zip(used) {
            rep.cpu = u.map(|u| (u, rep.load()));
        }
        self.premium_fell_back = false;
        self.sync_all();
    }

    /// Marks a session of `class` on `replica` as ended (completed or broken).
    pub fn release(&mut self, replica: ReplicaId, class: Class) {
        debug_assert!(self.replicas[replica.idx()].active[class.idx()] > 0, "release without admit");
        self.unplace(replica, class);
        if self.cfg.strategy == Strategy::Plb {
            self.return_borrowed();
        }
    }

    /// Tells the router that `replica` is (un)healthy; PLB canonicalises and
    /// repairs its roles. A rejoining replica enters as Mixed.
    pub fn set_health(&mut self, replica: ReplicaId, healthy: bool) {
        let rep = &mut self.replicas[replica.idx()];
        if rep.healthy == healthy {
            return;
        }
        rep.healthy = healthy;
        self.sync(replica.idx());
        if self.cfg.strategy != Strategy::Plb {
            return;
        }
        if healthy {
            let rep = &mut self.replicas[replica.idx()];
            let from = rep.role;
            rep.role = Role::M;
            rep.home = None;
            if from != Role::M {
                self.changes.push(RoleChange { replica, from, to: Role::M, reason: "rejoin" });
            }
        }
        self.repair();
    }

    /// Takes the role changes made since the last call, oldest first.
    pub fn drain_changes(&mut self) -> Vec<RoleChange> {
        std::mem::take(&mut self.changes)
    }

    /// Whether the router currently believes `replica` is healthy.
    pub fn is_healthy(&self, replica: ReplicaId) -> bool {
        self.replicas[replica.idx()].healthy
    }

    /// The current role of `replica` (meaningful for PLB and rr-split).
    pub fn role(&self, replica: ReplicaId) -> Role {
        self.replicas[replica.idx()].role
    }

    /// Active sessions `[P, F]` on `replica`.
    pub fn active(&self, replica: ReplicaId) -> [u32; 2] {
        self.replicas[replica.idx()].active
    }

    /// Freemium guests on `replica` (sessions placed on a Premium replica
    /// under `pressure`).
    pub fn guests(&self, replica: ReplicaId) -> u32 {
        self.replicas[replica.idx()].guests
    }

    /// A copy for a follower of a tier of routers ([`crate::core::tier`]):
    /// the same roles, health and counts, no role change pending.
    pub fn snapshot(&self) -> Router {
        let mut s = self.clone();
        s.changes.clear();
        s
    }

    /// A tier follower's refresh: `leader`'s roles, health and counts,
    /// keeping this router's own round-robin cursors.
    pub fn refresh_from(&mut self, leader: &Router) {
        let cursors = self.cursors;
        self.clone_from(leader);
        self.cursors = cursors;
        self.changes.clear();
    }

    /// Counts a session of `class` on `replica` that another router of a
    /// tier chose: no choice and no role change.
    pub fn place(&mut self, replica: ReplicaId, class: Class) {
        self.replicas[replica.idx()].active[class.idx()] += 1;
        self.sync(replica.idx());
    }

    /// Uncounts a session of `class` on `replica` with no role change: a
    /// tier follower's snapshot forgetting it, and the count half of
    /// [`Self::release`] (which then returns what it lent).
    pub fn unplace(&mut self, replica: ReplicaId, class: Class) {
        let rep = &mut self.replicas[replica.idx()];
        rep.active[class.idx()] = rep.active[class.idx()].saturating_sub(1);
        rep.guests = rep.guests.min(rep.active[1]);
        self.sync(replica.idx());
    }

    /// Holds `slots` sessions of `replica` for a tier's followers: PLB's
    /// theta tests count them as open (quotas, [`crate::core::tier`]).
    pub fn reserve(&mut self, replica: ReplicaId, slots: u32) {
        self.replicas[replica.idx()].reserved = slots;
    }

    /// The count PLB's theta test reads: sessions less Freemium guests.
    pub fn theta_load(&self, replica: ReplicaId) -> u32 {
        let rep = &self.replicas[replica.idx()];
        rep.load() - rep.guests
    }

    /// The open replica of `role` with the least weighted load for `class`
    /// that `room` lets in, ties to the lowest id: a tier follower's choice
    /// (a scan).
    pub fn least_loaded_where(&self, class: Class, role: Role, room: impl Fn(ReplicaId) -> bool) -> Option<ReplicaId> {
        self.replicas
            .iter()
            .enumerate()
            .filter(|(i, r)| r.open(class) && r.role == role && room(ReplicaId(*i)))
            .min_by(|(i, a), (j, b)| a.weighted_load(class).total_cmp(&b.weighted_load(class)).then(i.cmp(j)))
            .map(|(i, _)| ReplicaId(i))
    }

    /// Number of healthy replicas in the router's view.
    pub fn survivors(&self) -> usize {
        match &self.index {
            Some(x) => Role::ALL.iter().map(|&role| x.healthy(role)).sum(),
            None => self.replicas.iter().filter(|r| r.healthy).count(),
        }
    }

    fn round_robin(&mut self, cursor: usize, class: Class, eligible: impl Fn(&Replica) -> bool) -> Option<ReplicaId> {
        let k = self.replicas.len();
        let start = self.cursors[cursor];
        let mut pick = None;
        for r in (0..k).map(|i| (start + i) % k) {
            let rep = &self.replicas[r];
            if rep.open(class) && eligible(rep) && self.fits(rep) && self.take_credit(ReplicaId(r), class) {
                pick = Some(r);
                break;
            }
        }
        let pick = pick?;
        self.cursors[cursor] = (pick + 1) % k;
        Some(ReplicaId(pick))
    }

    /// The open replica of one of `roles` with the least weighted load for
    /// `class` that is `eligible`, ties to the lowest id.
    fn least_loaded(&self, class: Class, roles: &[Role], eligible: impl Fn(&Replica) -> bool) -> Option<ReplicaId> {
        let eligible = |r: &Replica| eligible(r) && self.fits(r);
        if let Some(room) = self.room.filter(|room| room.weigh_counted) {
            let weight = |r: &Replica| f64::from(room.held(r.active) + 1) / r.share[class.idx()];
            return self
                .replicas
                .iter()
                .enumerate()
                .filter(|(_, r)| r.open(class) && roles.contains(&r.role) && eligible(r))
                .min_by(|(i, a), (j, b)| weight(a).total_cmp(&weight(b)).then(i.cmp(j)))
                .map(|(i, _)| ReplicaId(i));
        }
        if let Some(x) = &self.index {
            return x.least_loaded(class, roles, |i| eligible(&self.replicas[i])).map(ReplicaId);
        }
        self.replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| r.open(class) && roles.contains(&r.role) && eligible(r))
            .min_by(|(i, a), (j, b)| a.weighted_load(class).total_cmp(&b.weighted_load(class)).then(i.cmp(j)))
            .map(|(i, _)| ReplicaId(i))
    }

    fn plb_admit(&mut self, class: Class) -> Option<ReplicaId> {
        let own = Role::of(class);
        let theta = self.cfg.theta;
        // Freemium guests (only ever on a Premium replica) never keep
        // Premium out of its own role.
        if let Some(r) = self.least_loaded(class, &[own], |r| r.load() - r.guests + r.reserved < theta) {
            return Some(r);
        }
        let bounded = self.cfg.mixed_bounded;
        if let Some(r) = self.least_loaded(class, &[Role::M], |r| !bounded || r.load() + r.reserved < theta) {
            return Some(r);
        }
        if class == Class::P {
            self.premium_fell_back = true;
        }
        if let Some(r) = self.borrow(class) {
            return Some(r);
        }
        self.least_loaded(class, &[own], |_| true).or_else(|| self.least_loaded(class, &Role::ALL, |_| true))
    }

    /// Step 3 of PLB admission: lend a replica of the other class's role.
    fn borrow(&mut self, class: Class) -> Option<ReplicaId> {
        let own = Role::of(class);
        let lender = match (class, self.cfg.freemium_borrow) {
            (Class::F, rule) if rule.takes_guests() => {
                let guest = self.room_for_a_guest()?;
                self.replicas[guest.idx()].guests += 1;
                return Some(guest);
            }
            (Class::P, _) | (Class::F, FreemiumBorrow::Mirror) => self.lender_if_less_loaded(class)?,
            (Class::F, FreemiumBorrow::Never) => return None,
            (Class::F, rule) => {
                let idle = self.least_loaded(class, &[Role::P], |r| r.home.is_none() && r.active[0] == 0)?;
                let allowed = match rule {
                    FreemiumBorrow::Surplus => self.count(Role::P, false) > self.goal()[Role::P.idx()],
                    _ => self.count(Role::P, true) >= 2,
                };
                allowed.then_some(idle)?
            }
        };
        let rep = &mut self.replicas[lender.idx()];
        self.changes.push(RoleChange { replica: lender, from: rep.role, to: own, reason: "borrow" });
        rep.home = Some(rep.role);
        rep.role = own;
        self.sync(lender.idx());
        Some(lender)
    }

    /// Freemium's borrowing under `pressure`: the Premium replica whose CPU
    /// with one session more stays lowest, if below [`PRESSURE_CPU`] (and,
    /// under `pressure-fallback`, no Premium session fell back since the
    /// last reading). It keeps its role: the Freemium session is its guest.
    /// A replica the health watch doubts (a share below 1: suspected,
    /// degraded, probation) takes no guests: its CPU reading measures what
    /// it could do before, not spare capacity.
    fn room_for_a_guest(&self) -> Option<ReplicaId> {
        if self.premium_fell_back && self.cfg.freemium_borrow == FreemiumBorrow::PressureFallback {
            return None;
        }
        if let Some(x) = &self.index {
            let (i, _) = x.best_guest()?;
            let rep = &self.replicas[i];
            return rep.cpu_with_one_more().filter(|&cpu| cpu < PRESSURE_CPU && self.fits(rep)).map(|_| ReplicaId(i));
        }
        self.replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| r.role == Role::P && r.home.is_none() && r.healthy && r.share[Class::F.idx()] >= 1.0)
            .filter_map(|(i, r)| Some((i, r.cpu_with_one_more()?)))
            .filter(|&(_, cpu)| cpu < PRESSURE_CPU)
            .min_by(|(i, a), (j, b)| a.total_cmp(b).then(i.cmp(j)))
            .filter(|&(i, _)| self.fits(&self.replicas[i]))
            .map(|(i, _)| ReplicaId(i))
    }

    /// Premium's borrowing rule (and Freemium's under `mirror`): the
    /// least-loaded unborrowed replica of the other class's role, if that
    /// role keeps another unborrowed replica and the lender is less loaded
    /// than the best of `class`'s own role.
    fn lender_if_less_loaded(&self, class: Class) -> Option<ReplicaId> {
        let (own, other) = (Role::of(class), Role::of(class.other()));
        let unborrowed = self.count(other, true);
        let best = self.least_loaded(class, &[other], |r| r.home.is_none())?;
        let own_best = self.least_loaded(class, &[own], |_| true).map(|r| self.weighed(&self.replicas[r.idx()]));
        let less_loaded = own_best.is_none_or(|l| self.weighed(&self.replicas[best.idx()]) < l);
        (unborrowed >= 2 && less_loaded).then_some(best)
    }

    /// Returns borrowed replicas whose borrowers have left and whose
    /// borrower role is below tau elsewhere.
    fn return_borrowed(&mut self) {
        let borrowed = match &self.index {
            Some(x) => x.borrowed(),
            None => (0..self.replicas.len()).collect(),
        };
        for i in borrowed {
            let rep = &self.replicas[i];
            let Some(home) = rep.home else { continue };
            let borrower = rep.role;
            let class_idx = if borrower == Role::P { 0 } else { 1 };
            if rep.active[class_idx] > 0 || !self.calm(i, borrower) {
                continue;
            }
            let rep = &mut self.replicas[i];
            self.changes.push(RoleChange { replica: ReplicaId(i), from: rep.role, to: home, reason: "return" });
            rep.role = home;
            rep.home = None;
            self.sync(i);
        }
    }

    /// Whether every healthy replica of `role` but `i` is below tau.
    fn calm(&self, i: usize, role: Role) -> bool {
        let tau = self.tau;
        match &self.index {
            Some(x) => {
                let hot_self = x.entry(i).healthy.is_some_and(|(r, _, hot)| r == role && hot);
                x.hot(role) == usize::from(hot_self)
            }
            None => {
                self.replicas.iter().enumerate().all(|(j, r)| j == i || !r.healthy || r.role != role || r.load() < tau)
            }
        }
    }

    /// Healthy replicas of `role` (only the unborrowed ones if `unborrowed`).
    fn count(&self, role: Role, unborrowed: bool) -> usize {
        match (&self.index, unborrowed) {
            (Some(x), false) => x.healthy(role),
            (Some(x), true) => x.unborrowed(role),
            (None, _) => self
                .replicas
                .iter()
                .filter(|r| r.healthy && r.role == role && (!unborrowed || r.home.is_none()))
                .count(),
        }
    }

    fn goal(&self) -> RoleVector {
        roles::target(self.survivors(), self.cfg.reference, self.cfg.replicas)
    }

    /// Canonicalise, then repair toward the target for the current survivors.
    fn repair(&mut self) {
        for (i, rep) in self.replicas.iter_mut().enumerate().filter(|(_, r)| r.healthy) {
            let to = roles::canonical(&Slot { role: rep.role, home: rep.home, active: rep.active });
            if to != rep.role {
                self.changes.push(RoleChange { replica: ReplicaId(i), from: rep.role, to, reason: "canonical" });
                rep.guests = 0;
            }
            rep.role = to;
            rep.home = None;
        }
        let mut view: Vec<Option<Role>> = self.replicas.iter().map(|r| r.healthy.then_some(r.role)).collect();
        let load: Vec<u32> = self.replicas.iter().map(Replica::load).collect();
        let goal = self.goal();
        for Move { replica, from, to } in roles::repair(&mut view, &load, goal, self.cfg.reference) {
            self.replicas[replica.idx()].role = to;
            self.changes.push(RoleChange { replica, from, to, reason: "repair" });
        }
        // Guests are Freemium sessions on a Premium replica; a replica that
        // changed role holds its role's own sessions.
        for rep in self.replicas.iter_mut().filter(|r| r.role != Role::P) {
            rep.guests = 0;
        }
        self.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(strategy: Strategy) -> Router {
        Router::new(RouterConfig::for_tests(strategy, [2, 1, 2]))
    }

    #[test]
    fn a_share_takes_that_fraction_of_the_sessions() {
        let mut r = router(Strategy::Rr);
        r.set_share(ReplicaId(0), 0.25);
        let mut on = [0u32; 5];
        for _ in 0..1000 {
            on[(r.admit(Class::F).unwrap()).idx()] += 1;
        }
        // r1 takes a quarter of the turns it is offered: a quarter of what
        // each full-share replica gets.
        let peer = f64::from(on[1..].iter().sum::<u32>()) / 4.0;
        assert!((f64::from(on[0]) - peer / 4.0).abs() <= 2.0, "{on:?}");
        assert_eq!(on.iter().sum::<u32>(), 1000);
    }

    #[test]
    fn share_zero_on_the_only_choice_means_no_capacity_until_restored() {
        let mut r = router(Strategy::Rr);
        (1..5).for_each(|i| r.set_health(ReplicaId(i), false));
        r.set_share(ReplicaId(0), 0.0);
        assert_eq!(r.admit(Class::P), None);
        r.set_share(ReplicaId(0), 1.0);
        assert_eq!(r.admit(Class::P), Some(ReplicaId(0)));
        assert_eq!(r.active(ReplicaId(0)), [1, 0]);
    }

    /// PLB over 2,1,2 with theta 2, Mixed bounded and Freemium borrowing
    /// `rule`, after `p` Premium sessions and then `f` Freemium ones.
    fn loaded(rule: FreemiumBorrow, p: u32, f: u32) -> Router {
        let mut cfg = RouterConfig::for_tests(Strategy::Plb, [2, 1, 2]);
        (cfg.theta, cfg.mixed_bounded, cfg.freemium_borrow) = (2, true, rule);
        let mut r = Router::new(cfg);
        for class in std::iter::repeat_n(Class::P, p as usize).chain(std::iter::repeat_n(Class::F, f as usize)) {
            r.admit(class).expect("capacity");
        }
        r
    }

    #[test]
    fn bounded_admission_fills_own_role_then_mixed_up_to_theta() {
        // r1 r2 are P, r3 M, r4 r5 F; theta 2.
        let r = loaded(FreemiumBorrow::Surplus, 0, 6);
        assert_eq!((0..5).map(|i| r.active(ReplicaId(i))[1]).collect::<Vec<_>>(), [0, 0, 2, 2, 2]);
        let r = loaded(FreemiumBorrow::Surplus, 4, 0);
        assert_eq!((0..5).map(|i| r.active(ReplicaId(i))[0]).collect::<Vec<_>>(), [2, 2, 0, 0, 0]);
        let mut unbounded = loaded(FreemiumBorrow::Surplus, 0, 6);
        unbounded.cfg.mixed_bounded = false;
        assert_eq!(unbounded.admit(Class::F), Some(ReplicaId(2)), "the ablation keeps filling Mixed");
    }

    #[test]
    fn freemium_borrowing_follows_its_rule() {
        // Freemium's role and Mixed are at theta; which replica takes the
        // next Freemium session, and does a Premium replica change role?
        // (rule, Premium sessions before, expected replica, borrowed)
        let table = [
            (FreemiumBorrow::Surplus, 0, 3, false), // P role at target: no borrowing; own role past theta
            (FreemiumBorrow::Idle, 0, 0, true),     // an idle P replica is lent
            (FreemiumBorrow::Idle, 2, 3, false),    // both P replicas busy with Premium
            (FreemiumBorrow::Mirror, 3, 1, true),   // r2 (1 Premium session) is less loaded than Freemium's best (2)
            (FreemiumBorrow::Mirror, 4, 3, false),  // both P replicas at 2: not less loaded
            (FreemiumBorrow::Never, 0, 3, false),
        ];
        for (rule, p, want, borrowed) in table {
            let mut r = loaded(rule, p, 6);
            r.drain_changes();
            let got = r.admit(Class::F).expect("capacity");
            let changes = r.drain_changes();
            assert_eq!((got, !changes.is_empty()), (ReplicaId(want), borrowed), "{rule:?} with {p} Premium sessions");
            if borrowed {
                assert_eq!(r.role(got), Role::F);
                assert_eq!(changes[0].reason, "borrow");
            }
        }
    }

    #[test]
    fn pressure_lends_premium_cpu_headroom_to_freemium_guests() {
        // Freemium's role and Mixed are at theta; r1 and r2 (P) hold one
        // Premium session each.
        let mut r = loaded(FreemiumBorrow::Pressure, 2, 6);
        assert_eq!(r.admit(Class::F), Some(ReplicaId(3)), "no CPU measured: no borrowing");
        r.release(ReplicaId(3), Class::F);
        // r1 at 60% of its budget, r2 at 30%: with one session more r2
        // would use 60% (0.3 x 2 / 1), r1 120%; both over half.
        r.observe_cpu(&[Some(0.6), Some(0.3), Some(0.1), Some(0.1), Some(0.1)]);
        assert_eq!(r.admit(Class::F), Some(ReplicaId(3)), "no headroom under half the budget");
        r.release(ReplicaId(3), Class::F);
        r.observe_cpu(&[Some(0.6), Some(0.2), Some(0.1), Some(0.1), Some(0.1)]);
        assert_eq!(r.admit(Class::F), Some(ReplicaId(1)), "r2 with one more: 0.2 x 2 / 1 = 0.4");
        assert_eq!((r.role(ReplicaId(1)), r.guests(ReplicaId(1))), (Role::P, 1), "a guest, no role change");
        assert!(r.drain_changes().is_empty());
        // The reading now counts the guest: 0.2 x 3 / 1 = 0.6.
        assert_eq!(r.admit(Class::F), Some(ReplicaId(3)), "the guest used the headroom");
        // The guest does not count against Premium's theta (2): once r1
        // holds 2 Premium sessions, r2 (1 Premium + 1 guest) takes the next.
        assert_eq!(r.admit(Class::P), Some(ReplicaId(0)));
        assert_eq!(r.admit(Class::P), Some(ReplicaId(1)), "r2 is at theta only with its guest");
        r.release(ReplicaId(1), Class::F);
        assert_eq!(r.guests(ReplicaId(1)), 0, "its only Freemium session left");
    }

    #[test]
    fn a_reading_of_an_empty_replica_admits_one_guest_until_the_next() {
        // Premium idle (no sessions anywhere on r1, r2), Freemium's role
        // and Mixed at theta: r1 and r2 read 0 CPU with 0 sessions.
        let mut r = loaded(FreemiumBorrow::Pressure, 0, 6);
        r.observe_cpu(&[Some(0.0), Some(0.0), Some(0.5), Some(0.5), Some(0.5)]);
        let first = r.admit(Class::F).unwrap();
        assert_eq!(r.role(first), Role::P, "one guest on an idle Premium replica");
        let second = r.admit(Class::F).unwrap();
        assert_eq!(r.role(second), Role::P, "the other idle one");
        let third = r.admit(Class::F).unwrap();
        assert_eq!(r.role(third), Role::F, "no third: a reading at 0 sessions sizes nothing");
        // The next reading, with the guest, sizes the rest: 0.1 x 2 / 1.
        r.observe_cpu(&[Some(0.1), Some(0.1), Some(0.5), Some(0.5), Some(0.5)]);
        let fourth = r.admit(Class::F).unwrap();
        assert_eq!(r.role(fourth), Role::P);
    }

    #[test]
    fn a_replica_the_watch_doubts_takes_no_guests() {
        let mut r = loaded(FreemiumBorrow::Pressure, 2, 6);
        r.observe_cpu(&[Some(0.1), Some(0.3), Some(0.1), Some(0.1), Some(0.1)]);
        r.set_shares(ReplicaId(0), [0.5, 0.5]);
        // r1 is idlest but suspected: r2 (0.3 x 2 / 1 = 0.6) is over the cap.
        assert_eq!(r.admit(Class::F), Some(ReplicaId(3)), "no guest on a doubted replica");
        r.set_shares(ReplicaId(0), [1.0, 1.0]);
        assert_eq!(r.admit(Class::F), Some(ReplicaId(0)), "trusted again");
    }

    #[test]
    fn guests_are_forgotten_when_a_repair_moves_their_replica() {
        let mut r = loaded(FreemiumBorrow::Pressure, 2, 6);
        r.observe_cpu(&[Some(0.1); 5]);
        let guest = r.admit(Class::F).unwrap();
        assert_eq!((guest, r.guests(guest)), (ReplicaId(0), 1));
        // r3 (Mixed) dies: r1 carries both classes and turns Mixed, then
        // repair takes it back to P (goal 2,0,2): its Freemium session is
        // no longer a guest but a session Premium counts against theta.
        r.set_health(ReplicaId(2), false);
        assert_eq!(r.guests(guest), 0);
    }

    #[test]
    fn pressure_fallback_stops_guests_after_a_premium_fallback_until_the_next_reading() {
        let mut r = loaded(FreemiumBorrow::PressureFallback, 4, 6);
        r.observe_cpu(&[Some(0.1); 5]);
        // P role (r1, r2) and Mixed (r3) at theta 2: Premium falls back.
        let p = r.admit(Class::P).unwrap();
        assert_eq!(r.role(p), Role::P, "past its role and Mixed, back to its own");
        assert_eq!(r.admit(Class::F), Some(ReplicaId(3)), "no guest after the fallback");
        r.observe_cpu(&[Some(0.1); 5]);
        let guest = r.admit(Class::F).unwrap();
        assert_eq!((r.role(guest), r.guests(guest)), (Role::P, 1), "a new reading shows headroom");
    }

    #[test]
    fn a_borrowed_replica_goes_home_when_its_borrowers_leave() {
        let mut r = loaded(FreemiumBorrow::Idle, 0, 6);
        let lent = r.admit(Class::F).unwrap();
        assert_eq!(r.role(lent), Role::F);
        r.release(lent, Class::F);
        // The other Freemium replicas are still at theta (2 > tau 1): not calm yet.
        assert_eq!(r.role(lent), Role::F, "stays while the borrower role is under pressure");
        for i in [2, 3, 4] {
            r.release(ReplicaId(i), Class::F);
            r.release(ReplicaId(i), Class::F);
        }
        assert_eq!(r.role(lent), Role::P, "returned once pressure subsided");
    }

    #[test]
    fn plb_sends_premium_past_a_suspect_premium_replica() {
        let mut r = router(Strategy::Plb);
        r.set_share(ReplicaId(0), 0.5);
        let picks: Vec<ReplicaId> = (0..15).map(|_| r.admit(Class::P).unwrap()).collect();
        // Weighted least-connections: r1 settles at (load + 1) = (r2's load + 1) / 2.
        assert_eq!(picks.iter().filter(|&&p| p == ReplicaId(0)).count(), 5, "{picks:?}");
        assert!(picks.iter().all(|&p| p < ReplicaId(2)), "Premium stays on its own role: {picks:?}");
        assert_eq!(r.active(ReplicaId(0)), [5, 0]);
        assert_eq!(r.active(ReplicaId(1)), [10, 0]);
    }
}
