//! Priority admission in front of any strategy ([admission
//! modes](docs/resilience.md#graceful-degradation-admission-modes)): the
//! degradation mode decides whether a session's class may start and how
//! many sessions a replica may hold; a session that may not start waits in
//! a bounded FIFO queue until its deadline, then is rejected. Every
//! rejection is counted per class and reason. Pure: the caller passes the
//! time and the router.

use super::degradation::{DegradationKnobs, Load, Manager, Mode, Transition};
use super::model::{Class, ReplicaId};
use super::router::Router;
use std::collections::VecDeque;

/// Why a session was rejected.
pub const REJECT_DEADLINE: &str = "queue deadline";
/// The queue was full when the session arrived.
pub const REJECT_FULL: &str = "queue full";

/// The outcome of one admission attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start the session on this replica (the router counted it).
    Admit(ReplicaId),
    /// The mode holds it back: it waits in the queue.
    Queued,
    /// The queue is full: rejected now.
    Rejected(&'static str),
    /// The router itself has no replica (as without admission).
    NoRoute,
}

/// A session waiting for admission.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Waiting {
    /// Client index.
    pub client: u32,
    /// Its class.
    pub class: Class,
    /// When it joined the queue.
    pub since_s: f64,
    /// Its client was refused since its last admission: a retry, not fresh
    /// demand (not counted in the queue depth the modes read).
    pub retry: bool,
}

/// Admission gate: manager, queue and counters.
#[derive(Clone, Debug)]
pub struct Gate {
    knobs: DegradationKnobs,
    manager: Manager,
    replica_sessions: u32,
    deadline_s: f64,
    queue: VecDeque<Waiting>,
    /// Clients refused since their last admission (their next request is
    /// a retry).
    refused: std::collections::HashSet<u32>,
    /// Rejections per class and reason.
    pub rejections: [[u64; 2]; 2],
}

impl Gate {
    /// A gate in Normal mode; `replica_sessions` is the per-replica limit
    /// at 100 % share.
    pub fn new(knobs: DegradationKnobs, time_scale: f64, replica_sessions: u32) -> Gate {
        let manager = Manager::new(knobs.thresholds(time_scale));
        let deadline_s = knobs.queue_deadline_ms as f64 / 1000.0;
        Gate {
            knobs,
            manager,
            replica_sessions: replica_sessions.max(1),
            deadline_s,
            queue: VecDeque::new(),
            refused: std::collections::HashSet::new(),
            rejections: [[0; 2]; 2],
        }
    }

    /// How long a session may wait for admission, seconds.
    pub fn deadline_s(&self) -> f64 {
        self.deadline_s
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.manager.mode()
    }

    /// The manager (for counters and time in mode).
    pub fn manager(&self) -> &Manager {
        &self.manager
    }

    /// Sessions waiting now.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Total rejections of `class`.
    pub fn rejected(&self, class: Class) -> u64 {
        self.rejections[class.idx()].iter().sum()
    }

    /// The sessions a replica may hold in the current mode.
    pub fn replica_limit(&self) -> u32 {
        ((f64::from(self.replica_sessions) * self.mode().concurrency_share()).ceil() as u32).max(1)
    }

    /// The query deadline in the current mode.
    pub fn query_timeout_s(&self, base_s: f64) -> f64 {
        base_s * self.mode().timeout_multiplier()
    }

    /// Feeds a load observation (the queue depth is added here).
    pub fn observe(&mut self, t_s: f64, mut load: Load) -> Option<Transition> {
        load.queue = self.queue.iter().filter(|w| !w.retry).count() as f64;
        self.manager.observe(t_s, &load)
    }

    /// Tries to start a session of `class` now, without queueing.
    fn try_start(&self, router: &mut Router, class: Class) -> Decision {
        if self.knobs.priority(class) < self.floor() {
            return Decision::Queued;
        }
        let Some(r) = router.admit(class) else { return Decision::NoRoute };
        if self.holding(router.active(r), class) > self.replica_limit() {
            router.release(r, class);
            return Decision::Queued;
        }
        Decision::Admit(r)
    }

    /// The sessions on a replica that count against `class`'s share: those
    /// of classes of its priority or above. Sessions of a lower class
    /// never hold a higher one back (revised 2026-12-06): in a saturated
    /// population they are pinned for a minute, and a replica that repair
    /// made Premium would otherwise admit no Premium session until they end.
    fn holding(&self, active: [u32; 2], class: Class) -> u32 {
        let mine = self.knobs.priority(class);
        Class::ALL.iter().filter(|c| self.knobs.priority(**c) >= mine).map(|c| active[c.idx()]).sum()
    }

    /// The lowest priority admitted now: the mode's, but never above the
    /// highest class's (revised 2026-12-06: no mode shuts the service; the
    /// most degraded mode still admits the highest class at its share).
    pub fn floor(&self) -> super::degradation::Priority {
        let top = self.knobs.premium.max(self.knobs.freemium);
        self.mode().min_priority().min(top)
    }

    /// A new session of `class` from client `client` asks to start at
    /// `t_s`. Sessions already waiting go first.
    pub fn request(&mut self, router: &mut Router, client: u32, class: Class, t_s: f64) -> Decision {
        let decision = if self.queue.is_empty() { self.try_start(router, class) } else { Decision::Queued };
        if decision != Decision::Queued {
            if matches!(decision, Decision::Admit(_)) {
                self.refused.remove(&client);
            }
            return decision;
        }
        if self.queue.len() >= self.knobs.queue_capacity {
            self.rejections[class.idx()][1] += 1;
            self.refused.insert(client);
            return Decision::Rejected(REJECT_FULL);
        }
        let retry = self.refused.contains(&client);
        self.queue.push_back(Waiting { client, class, since_s: t_s, retry });
        Decision::Queued
    }

    /// Starts waiting sessions while they may start, the highest priority
    /// first and in queue order within a priority (revised 2026-12-06: a
    /// burst of lower-class sessions released when capacity appears would
    /// otherwise take a replica just repaired for the higher class, and
    /// its postmaster's queue with it); a waiting session the router cannot
    /// place keeps its place. Returns the admitted sessions with their
    /// replicas.
    pub fn drain(&mut self, router: &mut Router) -> Vec<(Waiting, ReplicaId)> {
        let mut admitted = Vec::new();
        let mut keep = VecDeque::new();
        let knobs = &self.knobs;
        self.queue.make_contiguous().sort_by_key(|w| std::cmp::Reverse(knobs.priority(w.class)));
        while let Some(w) = self.queue.pop_front() {
            match self.try_start(router, w.class) {
                Decision::Admit(r) => {
                    self.refused.remove(&w.client);
                    admitted.push((w, r));
                }
                _ => keep.push_back(w),
            }
        }
        self.queue = keep;
        admitted
    }

    /// Rejects the sessions whose deadline has passed at `t_s`.
    pub fn expire(&mut self, t_s: f64) -> Vec<Waiting> {
        let deadline = self.deadline_s;
        let (gone, keep): (Vec<_>, Vec<_>) = self.queue.drain(..).partition(|w| t_s - w.since_s >= deadline - 1e-9);
        self.queue = keep.into();
        for w in &gone {
            self.rejections[w.class.idx()][0] += 1;
            self.refused.insert(w.client);
        }
        gone
    }

    /// Sessions still waiting per class (at the end of a run).
    pub fn waiting(&self) -> [u64; 2] {
        let mut n = [0; 2];
        for w in &self.queue {
            n[w.class.idx()] += 1;
        }
        n
    }
}

/// Each replica's CPU use as a fraction of its budget between two
/// cumulative CPU readings `dt_s` apart, `cpus` cores each; `None` where
/// either reading is missing (or no time passed).
pub fn utilisation(before: &[Option<f64>], after: &[Option<f64>], dt_s: f64, cpus: f64) -> Vec<Option<f64>> {
    (0..after.len())
        .map(|r| Some((after[r]? - (*before.get(r)?)?).max(0.0) / (cpus * dt_s)).filter(|_| dt_s > 0.0))
        .collect()
}

/// Mean CPU percent of the `healthy` replicas, from their utilisations
/// ([`utilisation`]); `None` if none was measured.
pub fn cpu_pct(utilisation: &[Option<f64>], healthy: &[bool]) -> Option<f64> {
    let us: Vec<f64> = utilisation.iter().enumerate().filter(|&(r, _)| healthy[r]).filter_map(|(_, u)| *u).collect();
    (!us.is_empty()).then(|| 100.0 * us.iter().sum::<f64>() / us.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::degradation::{Priority, Thresholds};
    use crate::core::router::{RouterConfig, Strategy};

    fn router() -> Router {
        Router::new(RouterConfig::for_tests(Strategy::Rr, [1, 0, 1]))
    }

    fn gate() -> Gate {
        let knobs = DegradationKnobs {
            queue_capacity: 3,
            queue_deadline_ms: 2000,
            min_mode_duration_s: Some(0.0),
            ..Default::default()
        };
        Gate::new(knobs, 1.0, 10)
    }

    #[test]
    fn survival_admits_only_the_highest_class_and_the_deadline_rejects_and_counts() {
        let knobs = DegradationKnobs {
            queue_capacity: 3,
            queue_deadline_ms: 2000,
            min_mode_duration_s: Some(0.0),
            premium: Priority::Normal,
            ..Default::default()
        };
        let mut g = Gate::new(knobs, 1.0, 10);
        let mut r = router();
        assert!(matches!(g.request(&mut r, 0, Class::P, 0.0), Decision::Admit(_)));
        g.observe(1.0, Load { cpu_pct: Some(99.0), ..Default::default() });
        assert_eq!(g.mode(), Mode::Survival);
        assert_eq!(g.floor(), Priority::Normal, "Survival's Critical floor comes down to the highest class");
        // Both classes Normal here: both admitted at Survival's 30 % share
        // (3 sessions of 10 per replica).
        let mut g = gate();
        let mut r = router();
        assert!(matches!(g.request(&mut r, 0, Class::P, 0.0), Decision::Admit(_)));
        g.observe(1.0, Load { cpu_pct: Some(99.0), ..Default::default() });
        assert_eq!((g.mode(), g.floor()), (Mode::Survival, Priority::High), "Premium (High) still admitted");
        assert!(matches!(g.request(&mut r, 9, Class::P, 1.0), Decision::Admit(_)));
        for (c, class) in [(1, Class::F), (2, Class::F), (3, Class::F)] {
            assert_eq!(g.request(&mut r, c, class, 1.0), Decision::Queued);
        }
        assert_eq!(g.request(&mut r, 4, Class::F, 1.5), Decision::Rejected(REJECT_FULL), "capacity 3");
        assert!(g.expire(2.9).is_empty(), "before the 2 s deadline");
        assert!(g.drain(&mut r).is_empty(), "still Survival");
        let gone = g.expire(3.0);
        assert_eq!(gone.len(), 3);
        assert_eq!(g.rejections, [[0, 0], [3, 1]], "F: 3 deadline + 1 full");
        assert_eq!((g.rejected(Class::P), g.rejected(Class::F), g.queued()), (0, 4, 0));
        // The refused clients come back: retries, not fresh queue depth.
        g.observe(4.0, Load { cpu_pct: Some(10.0), ..Default::default() });
        assert_eq!(g.mode(), Mode::Normal);
        g.observe(5.0, Load { cpu_pct: Some(99.0), ..Default::default() });
        for c in 1..=3 {
            assert_eq!(g.request(&mut r, c, Class::F, 5.0), Decision::Queued);
        }
        assert!(g.queue.iter().all(|w| w.retry));
        g.observe(6.0, Load { cpu_pct: Some(10.0), ..Default::default() });
        assert_eq!(g.mode(), Mode::Normal, "retries hold no mode");
    }

    #[test]
    fn lower_class_sessions_already_placed_never_hold_premium_back() {
        // Two replicas full of Freemium sessions admitted in Normal mode
        // (10 each, the 100 % limit), then Survival (3 per replica): no
        // Freemium starts, but Premium does, 3 per replica, counting only
        // Premium's own sessions against its share.
        let mut g = gate();
        let mut r = router();
        let placed = (0..20).filter(|c| matches!(g.request(&mut r, *c, Class::F, 0.0), Decision::Admit(_))).count();
        assert_eq!(placed, 20);
        g.observe(1.0, Load { cpu_pct: Some(99.0), ..Default::default() });
        assert_eq!((g.mode(), g.replica_limit()), (Mode::Survival, 3));
        assert_eq!(g.request(&mut r, 20, Class::F, 1.0), Decision::Queued);
        let _ = g.expire(10.0);
        let started = (30..40).filter(|c| matches!(g.request(&mut r, *c, Class::P, 10.0), Decision::Admit(_))).count();
        assert_eq!(started, 6, "2 replicas x 30 % of 10, whatever Freemium holds");
        assert_eq!(r.active(ReplicaId(0))[Class::F.idx()] + r.active(ReplicaId(1))[Class::F.idx()], 20);
    }

    #[test]
    fn the_queue_drains_the_highest_priority_first() {
        // Both replicas at their 10 sessions of Premium: a Freemium then a
        // Premium session wait. One Premium session ends: the freed place
        // goes to the Premium session that arrived second (least
        // connections: both try the replica with the free place).
        let mut g = gate();
        let mut r = Router::new(RouterConfig::for_tests(Strategy::Lc, [1, 0, 1]));
        assert_eq!((0..20).filter(|c| matches!(g.request(&mut r, *c, Class::P, 0.0), Decision::Admit(_))).count(), 20);
        assert_eq!(g.request(&mut r, 20, Class::F, 0.0), Decision::Queued);
        assert_eq!(g.request(&mut r, 21, Class::P, 0.1), Decision::Queued);
        r.release(ReplicaId(0), Class::P);
        let admitted = g.drain(&mut r);
        assert_eq!(admitted.iter().map(|(w, _)| w.client).collect::<Vec<_>>(), [21], "Premium first");
        assert_eq!((g.queued(), g.waiting()), (1, [0, 1]), "Freemium still waits");
    }

    #[test]
    fn restricted_admits_normal_and_above_and_limits_each_replica() {
        let knobs =
            DegradationKnobs { freemium: Priority::Background, min_mode_duration_s: Some(0.0), ..Default::default() };
        let mut g = Gate::new(knobs, 1.0, 10);
        let mut r = router();
        g.observe(1.0, Load { cpu_pct: Some(91.0), ..Default::default() });
        assert_eq!((g.mode(), g.replica_limit()), (Mode::Restricted, 5));
        assert_eq!(g.request(&mut r, 0, Class::F, 1.0), Decision::Queued, "Background below Normal");
        assert_eq!(g.request(&mut r, 1, Class::P, 1.0), Decision::Queued, "waiting sessions go first");
        let admitted = g.drain(&mut r);
        assert_eq!((admitted.len(), admitted[0].0.client, g.queued()), (1, 1, 1), "Premium passes, Freemium waits");
        // Back to Normal: the queue drains, Premium up to 10 per replica.
        let mut g = Gate::new(DegradationKnobs { min_mode_duration_s: Some(0.0), ..Default::default() }, 1.0, 10);
        g.observe(1.0, Load { cpu_pct: Some(91.0), ..Default::default() });
        let mut r = router();
        let started = (0..20).filter(|c| matches!(g.request(&mut r, *c, Class::P, 1.0), Decision::Admit(_))).count();
        assert_eq!(started, 10, "2 replicas x 50 % of 10");
        assert_eq!(g.queued(), 10);
        g.observe(2.0, Load { cpu_pct: Some(10.0), ..Default::default() });
        assert_eq!(g.mode(), Mode::Normal);
        assert_eq!(g.drain(&mut r).len(), 10);
        assert_eq!(r.active(ReplicaId(0))[0] + r.active(ReplicaId(1))[0], 20);
        assert_eq!(g.query_timeout_s(30.0), 30.0);
    }

    #[test]
    fn thresholds_reach_the_gate() {
        let g = gate();
        assert_eq!(
            g.manager().thresholds().cpu_pct,
            Thresholds::preset(crate::core::degradation::Preset::Default).cpu_pct
        );
    }
}
