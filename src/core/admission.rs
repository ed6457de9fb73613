//! Priority admission in front of any strategy ([admission
//! modes](docs/resilience.md#graceful-degradation-admission-modes)): the
//! degradation mode decides how much of the replicas the top class uses a
//! lower class may hold, in sessions and in running statements; a session
//! that may not start waits in a bounded queue until its deadline, then is
//! rejected. Every rejection is counted per class and reason. Pure: the
//! caller passes the time and the router.
//!
//! The rules (revised 2026-12-07, issue 64; Google SRE's "Handling
//! Overload": a criticality is rejected only after every lower one):
//! - the mode's share caps only the classes below the top one, and only on
//!   the replicas the top class uses (its own role and Mixed; every
//!   replica under rr and lc); the top class's limit is the replica's whole
//!   session limit in every mode;
//! - a lower class's statements on those replicas are held to the mode's
//!   share of the replica's statement slots (at least one: no mode shuts a
//!   class's service), so the CPU moves to the top class within a
//!   statement, not only as sessions end;
//! - a session the strategy's first choice cannot take goes to the next
//!   replica with room ([`Router::admit_within`]) before it queues;
//! - while a session of a higher class waits, a lower class starts only on
//!   replicas the higher class is not served by, so a top-class waiter is
//!   never rejected while a lower class was admitted to capacity it could
//!   have had; a full queue refuses the lowest class first.

use super::degradation::{implied_utilisation_pct, DegradationKnobs, Load, Manager, Mode, Priority, Transition};
use super::model::{Class, ReplicaId, Role};
use super::router::{Room, Router};
use super::workload::Workload;
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

/// A replica as the gate sees it: its role and its sessions `[P, F]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// Its role.
    pub role: Role,
    /// Its sessions `[P, F]`.
    pub active: [u32; 2],
}

/// What the gate is sized by, besides its knobs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sizing {
    /// Replicas K.
    pub replicas: usize,
    /// Sessions a replica may hold at 100 % share.
    pub replica_sessions: u32,
    /// The top class's query service time, ms (the base of its wait signal).
    pub service_ms: f64,
}

impl Sizing {
    /// The sizing `knobs` give a run of `clients` over `replicas` of
    /// workload `w`: `replica_sessions` 0 is ceil(T / K), `service_ms` 0
    /// the workload's mean top-class query cost; with whether that cost
    /// was the workload's (`true`) or the knob's.
    pub fn of(knobs: &DegradationKnobs, w: &Workload, clients: u32, replicas: usize) -> (Sizing, bool) {
        let replica_sessions = match knobs.replica_sessions {
            0 => clients.div_ceil(replicas as u32),
            n => n,
        };
        let from_workload = knobs.service_ms <= 0.0;
        let service_ms = if from_workload { w.mean_cpu_ms(knobs.top_class()) } else { knobs.service_ms };
        (Sizing { replicas, replica_sessions, service_ms }, from_workload)
    }
}

/// Admission gate: manager, queue, statements and counters.
#[derive(Clone, Debug)]
pub struct Gate {
    knobs: DegradationKnobs,
    manager: Manager,
    sizing: Sizing,
    deadline_s: f64,
    queue: VecDeque<Waiting>,
    /// Clients refused since their last admission (their next request is
    /// a retry).
    refused: std::collections::HashSet<u32>,
    /// Rejections per class and reason.
    pub rejections: [[u64; 2]; 2],
    /// Statements running per replica and class `[P, F]`.
    running: Vec<[u32; 2]>,
    /// A lower-class statement was held since the last observation.
    held: bool,
    /// The least top-class latency since the last observation, ms.
    least_ms: Option<f64>,
}

impl Gate {
    /// A gate in Normal mode.
    pub fn new(knobs: DegradationKnobs, time_scale: f64, sizing: Sizing) -> Gate {
        let manager = Manager::new(knobs.thresholds(time_scale));
        let deadline_s = knobs.queue_deadline_ms as f64 / 1000.0;
        let sizing = Sizing { replica_sessions: sizing.replica_sessions.max(1), ..sizing };
        Gate {
            knobs,
            manager,
            sizing,
            deadline_s,
            queue: VecDeque::new(),
            refused: std::collections::HashSet::new(),
            rejections: [[0; 2]; 2],
            running: vec![[0; 2]; sizing.replicas],
            held: false,
            least_ms: None,
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

    /// What the signals did while the mode was degraded.
    pub fn books(&self) -> super::degradation::ModeBooks {
        self.manager.books()
    }

    /// The manager (for counters and time in mode).
    pub fn manager(&self) -> &Manager {
        &self.manager
    }

    /// The knobs the gate runs with.
    pub fn knobs(&self) -> &DegradationKnobs {
        &self.knobs
    }

    /// Sessions waiting now.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Total rejections of `class`.
    pub fn rejected(&self, class: Class) -> u64 {
        self.rejections[class.idx()].iter().sum()
    }

    /// The highest priority of any class.
    fn top(&self) -> Priority {
        self.knobs.premium.max(self.knobs.freemium)
    }

    /// Whether `class` is the top class (or ties with it).
    pub fn is_top(&self, class: Class) -> bool {
        self.knobs.priority(class) == self.top()
    }

    /// Whether `role` is the top class's own role.
    fn top_role(&self, role: Role) -> bool {
        Class::ALL.iter().any(|&c| self.is_top(c) && Role::of(c) == role)
    }

    /// Whether the top class uses a replica: one of its own role or Mixed
    /// (rr and lc hold every replica as Mixed), or, for statements, any
    /// that holds its sessions (a role repair leaves sessions pinned where
    /// they were). New sessions are placed by role alone: a few top-class
    /// sessions pinned on a lower class's replica must not push that class
    /// onto the top class's replicas.
    pub fn serves_top(&self, at: Place) -> bool {
        at.role == Role::M
            || self.top_role(at.role)
            || Class::ALL.iter().any(|&c| self.is_top(c) && at.active[c.idx()] > 0)
    }

    /// Which replicas' CPU is the top class's CPU signal: the healthy ones
    /// (`Some(role)`) of its own role, or, where no replica has that role
    /// (rr, lc), every healthy one: each is shared with the top class.
    /// A lower class's replica at its budget is the regime, not overload.
    pub fn own_replicas(&self, roles: &[Option<Role>]) -> Vec<bool> {
        let any = roles.iter().flatten().any(|&r| self.top_role(r));
        roles.iter().map(|r| r.is_some_and(|r| !any || self.top_role(r))).collect()
    }

    /// The sessions a replica may hold for a lower class in the current
    /// mode, on the replicas the top class uses.
    pub fn replica_limit(&self) -> u32 {
        ((f64::from(self.sizing.replica_sessions) * self.mode().concurrency_share()).ceil() as u32).max(1)
    }

    /// The limits a new session of `class` meets: the whole session limit
    /// for the top class; the mode's share of it for a lower class on the
    /// replicas the top class uses, and none on the others (a lower
    /// class's own replicas are its own, as without the gate). Only the
    /// sessions of `class`'s own priority count against its limit: a lower
    /// class never holds a higher one back, and a replica full of the top
    /// class still gives a lower class its share (else it starves where
    /// every replica is shared, as under rr and lc). In a
    /// degraded mode the top class's least-loaded choices weigh only its
    /// own sessions: a lower class's there are held to a statement slot,
    /// so a replica full of them is capacity for the top class (a role
    /// repair leaves a new Premium replica holding the Freemium sessions
    /// it had, and the top class would otherwise pile onto the other).
    /// While a higher class waits (`yielding`), a lower one may start only
    /// where the higher class is not served: it takes nothing the waiter
    /// could have had (rr-split's Freemium partition, PLB's Freemium
    /// replicas).
    fn room(&self, class: Class, yielding: bool) -> Room {
        let whole = self.sizing.replica_sessions;
        let top = self.is_top(class);
        let max = Role::ALL.map(|role| match (top, self.serves_top(Place { role, active: [0; 2] })) {
            (true, _) => Some(whole),
            (false, true) if yielding => Some(0),
            (false, true) => Some(self.replica_limit()),
            (false, false) => None,
        });
        let mine = self.knobs.priority(class);
        let weigh_counted = top && self.mode() != Mode::Normal;
        Room { max, counted: Class::ALL.map(|c| self.knobs.priority(c) == mine), weigh_counted }
    }

    /// The statements a lower class may run at once on a replica `at`
    /// now (`None`: no limit): in a degraded mode, on the replicas the top
    /// class uses, the mode's share of the replica's statement slots, at
    /// least one.
    pub fn statement_limit(&self, class: Class, at: Place) -> Option<u32> {
        if self.is_top(class) || !self.serves_top(at) || self.mode() == Mode::Normal {
            return None;
        }
        let slots = f64::from(self.knobs.statement_slots) * self.mode().concurrency_share();
        Some((slots.floor() as u32).max(1))
    }

    /// A statement of `class` asks to run on `r`, now `at`: `true` counts
    /// it running (end it with [`Self::end_statement`]); `false` holds it
    /// (ask again when a statement of its class on `r` ends or the mode
    /// changes).
    pub fn begin_statement(&mut self, class: Class, r: ReplicaId, at: Place) -> bool {
        let running = self.running[r.idx()][class.idx()];
        if self.statement_limit(class, at).is_some_and(|limit| running >= limit) {
            self.held = true;
            return false;
        }
        self.running[r.idx()][class.idx()] += 1;
        true
    }

    /// A statement [`Self::begin_statement`] let run on `r` ended.
    pub fn end_statement(&mut self, class: Class, r: ReplicaId) {
        let running = &mut self.running[r.idx()][class.idx()];
        *running = running.saturating_sub(1);
    }

    /// A query of `class` answered `ms` after it was meant to be sent: the
    /// top class's least latency over a window is its wait signal.
    pub fn served(&mut self, class: Class, ms: f64) {
        if self.is_top(class) {
            self.least_ms = Some(self.least_ms.map_or(ms, |m| m.min(ms)));
        }
    }

    /// The query deadline in the current mode.
    pub fn query_timeout_s(&self, base_s: f64) -> f64 {
        base_s * self.mode().timeout_multiplier()
    }

    /// Feeds a load observation: the gate adds the top class's fresh
    /// waiters, its wait signal since the last observation and whether
    /// lower-class work was held back since then (a statement held, or a
    /// session waiting). A held statement is asked for again at least
    /// once a second by the backends, so a hold that lasts is seen in
    /// every window.
    pub fn observe(&mut self, t_s: f64, mut load: Load) -> Option<Transition> {
        load.queue = self.queue.iter().filter(|w| !w.retry && self.is_top(w.class)).count() as f64;
        load.wait_pct = self.least_ms.take().map(|ms| implied_utilisation_pct(ms, self.sizing.service_ms));
        let waiting = self.queue.iter().any(|w| !self.is_top(w.class));
        load.held = std::mem::take(&mut self.held) || waiting;
        self.manager.observe(t_s, &load)
    }

    /// Tries to start a session of `class` now, without queueing: on the
    /// strategy's choice among the replicas with room (see [`Self::room`]
    /// for `yielding`); queued when the router has replicas for it but
    /// none with room.
    fn try_start(&self, router: &mut Router, class: Class, yielding: bool) -> Decision {
        match router.admit_within(class, self.room(class, yielding)) {
            Some(r) => Decision::Admit(r),
            None if router.routable(class) => Decision::Queued,
            None => Decision::NoRoute,
        }
    }

    /// The lowest priority the seed's mode admits, never above the highest
    /// class's (revised 2026-12-06: no mode shuts the service). Classes
    /// below it are held to the mode's share (informational).
    pub fn floor(&self) -> Priority {
        self.mode().min_priority().min(self.top())
    }

    /// A new session of `class` from client `client` asks to start at
    /// `t_s`. Sessions of its priority or above already waiting go first;
    /// lower ones do not hold it back.
    pub fn request(&mut self, router: &mut Router, client: u32, class: Class, t_s: f64) -> Decision {
        let mine = self.knobs.priority(class);
        let same = self.queue.iter().any(|w| self.knobs.priority(w.class) == mine);
        let higher = self.queue.iter().any(|w| self.knobs.priority(w.class) > mine);
        let decision = if same { Decision::Queued } else { self.try_start(router, class, higher) };
        if decision != Decision::Queued {
            if matches!(decision, Decision::Admit(_)) {
                self.refused.remove(&client);
            }
            return decision;
        }
        let below = self.queue.iter().any(|w| self.knobs.priority(w.class) < mine);
        if self.queue.len() >= self.knobs.queue_capacity && !below {
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
    /// its postmaster's queue with it). Once a waiter cannot start, a
    /// waiter of a lower priority starts only where the higher class is
    /// not served. Returns the admitted sessions with their replicas.
    pub fn drain(&mut self, router: &mut Router) -> Vec<(Waiting, ReplicaId)> {
        let mut admitted = Vec::new();
        let mut keep = VecDeque::new();
        let knobs = self.knobs.clone();
        self.queue.make_contiguous().sort_by_key(|w| std::cmp::Reverse(knobs.priority(w.class)));
        let mut stuck: Option<Priority> = None;
        while let Some(w) = self.queue.pop_front() {
            let p = knobs.priority(w.class);
            match self.try_start(router, w.class, stuck.is_some_and(|s| p < s)) {
                Decision::Admit(r) => {
                    self.refused.remove(&w.client);
                    admitted.push((w, r));
                }
                _ => {
                    stuck = Some(stuck.map_or(p, |s| s.max(p)));
                    keep.push_back(w);
                }
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

/// Mean CPU of the `counted` replicas, percent of their saturation point
/// `saturation` (a fraction of the budget), from their utilisations
/// ([`utilisation`]); `None` if none was measured.
pub fn cpu_pct(utilisation: &[Option<f64>], counted: &[bool], saturation: f64) -> Option<f64> {
    let us: Vec<f64> = utilisation.iter().enumerate().filter(|&(r, _)| counted[r]).filter_map(|(_, u)| *u).collect();
    (!us.is_empty()).then(|| 100.0 * us.iter().sum::<f64>() / us.len() as f64 / saturation)
}

#[cfg(test)]
mod tests;
