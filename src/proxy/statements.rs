//! A routed session's statements under the admission gate
//! (`plbbench proxy --admission modes`, [resilience](docs/resilience.md#what-a-mode-does)):
//! the gate caps a lower class's running statements on the replicas that
//! serve the top class, as it does in `run`'s driver and simulator. The
//! proxy sees a statement as the client's first bytes on an idle session
//! (every Query, Sync and FunctionCall answered) up to the ReadyForQuery
//! that answers its last ask; a statement the gate holds waits, unsent, in
//! its pump ([`super::pump`]). Its latency, from its first byte to that
//! ReadyForQuery, is the gate's wait signal. Without a gate nothing here
//! takes the controller's lock.

use super::Shared;
use crate::core::model::{Class, ReplicaId};
use std::time::Instant;

/// One session's statement under the gate.
pub(super) struct Statements {
    /// Whether the controller has a gate (else every statement runs, unasked).
    gated: bool,
    /// When the current statement's first bytes came, while one is asked or runs.
    asked: Option<Instant>,
    /// The gate let the current statement run (its slot is held).
    running: bool,
}

impl Statements {
    pub fn new(gated: bool) -> Statements {
        Statements { gated, asked: None, running: false }
    }

    /// A statement of `class` begins on `r` (or asks again): `true` when it
    /// may run now.
    pub fn begin(&mut self, shared: &Shared, class: Class, r: ReplicaId) -> bool {
        if !self.gated || self.running {
            return true;
        }
        self.asked.get_or_insert_with(Instant::now);
        self.running = shared.control(|ctl, _| ctl.c.statement(class, r));
        self.running
    }

    /// The server answered the statement's last ask: its slot is given
    /// back and its latency told to the gate.
    pub fn end(&mut self, shared: &Shared, class: Class, r: ReplicaId) {
        if !self.running {
            return;
        }
        self.running = false;
        let ms = self.asked.take().map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3);
        shared.control(|ctl, _| {
            ctl.c.statement_ended(class, r);
            ctl.c.served(class, ms);
        });
    }

    /// The session ended: a statement still running gives its slot back.
    pub fn close(&mut self, shared: &Shared, class: Class, r: ReplicaId) {
        if self.running {
            self.running = false;
            shared.control(|ctl, _| ctl.c.statement_ended(class, r));
        }
    }
}
