//! The run controller together with the sessions waiting for its
//! admission gate (`--admission modes`), for the two places that run
//! real sessions: a run's driver and `plbbench proxy`. The controller
//! decides; this keeps, per waiting session, where to send its answer, and
//! hands each admitted session its replica (or gives the place back when
//! the session stopped waiting). One owner, one lock: the caller holds it
//! in a mutex.

use crate::core::control::{Admission, Admitted, Controller};
use crate::core::model::{Class, ReplicaId};
use std::collections::{HashMap, VecDeque};
use tokio::sync::oneshot;

/// A session's answer from the gate: its replica, or `None` when rejected.
pub type Answer = oneshot::Receiver<Option<ReplicaId>>;

/// The controller and the sessions waiting for its admission.
pub struct Control {
    /// The run controller.
    pub c: Controller,
    waiters: HashMap<u32, oneshot::Sender<Option<ReplicaId>>>,
}

/// What the controller answered a new session.
pub enum Asked {
    /// The router's answer: a replica now, or none can take it (`None`).
    Now(Option<ReplicaId>),
    /// The gate refused it, with its reason.
    Rejected(&'static str),
    /// The gate queued it: the answer comes later.
    Waiting(Answer),
}

impl Control {
    /// A controller with nobody waiting.
    pub fn new(c: Controller) -> Control {
        Control { c, waiters: HashMap::new() }
    }

    /// Session `id` of `class` asks to start at `now`.
    pub fn request(&mut self, id: u32, class: Class, now: f64) -> Asked {
        match self.c.request(id, class, now) {
            Admission::Route(r) => Asked::Now(Some(r)),
            Admission::NoRoute => Asked::Now(None),
            Admission::Rejected(why) => Asked::Rejected(why),
            Admission::Queued { .. } => {
                let (tx, rx) = oneshot::channel();
                self.waiters.insert(id, tx);
                Asked::Waiting(rx)
            }
        }
    }

    /// A session of `class` on `r` ended: its freed capacity may admit
    /// waiting sessions.
    pub fn ended(&mut self, r: ReplicaId, class: Class, now: f64) {
        let admitted = self.c.session_ended(r, class, now);
        self.deliver(admitted, now);
    }

    /// Whether the periodic step ([`Self::admit_and_expire`] and the
    /// controller's tick) may change anything: a session waits at the
    /// gate, or the watch has a window running.
    pub fn timed(&self) -> bool {
        !self.waiters.is_empty() || self.c.timed()
    }

    /// The gate's periodic step: waiting sessions it now admits start,
    /// those past their deadline are refused.
    pub fn admit_and_expire(&mut self, now: f64) {
        let admitted = self.c.admit_waiting(now);
        self.deliver(admitted, now);
        for w in self.c.expire_waiting(now) {
            if let Some(tx) = self.waiters.remove(&w.client) {
                let _ = tx.send(None);
            }
        }
    }

    /// Hands admitted sessions their replica; one no longer waiting gives
    /// its place back, which may admit others.
    fn deliver(&mut self, admitted: Vec<Admitted>, now: f64) {
        let mut todo = VecDeque::from(admitted);
        while let Some(a) = todo.pop_front() {
            let delivered = self.waiters.remove(&a.client).is_some_and(|tx| tx.send(Some(a.replica)).is_ok());
            if !delivered {
                todo.extend(self.c.session_ended(a.replica, a.class, now));
            }
        }
    }
}
