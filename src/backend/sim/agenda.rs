//! The simulator's agenda: what happens next, in time order, with events at
//! equal times in the order they were planned. A client has at most one
//! timer (its wake-up or its job's deadline) and a replica at most one
//! completion and one quota event, each in its own slot of a calendar queue
//! ([`Calendar`]), so a changed plan replaces the old one and a withdrawn
//! timer never fires ([performance](docs/performance.md#the-simulators-cost)). Faults,
//! probes, samples and admission deadlines are never withdrawn and wait in
//! a plain heap beside it.

use super::calendar::Calendar;
use crate::core::model::ReplicaId;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A simulator event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ev {
    /// Fault `i` of the schedule.
    Fault(usize),
    /// Every replica's health probe.
    Probe,
    /// The per-second sample.
    Sample,
    /// Client `c`'s next step (open a session or send a query).
    Wake(u32),
    /// Client `c`'s job `q` reaches its deadline.
    Timeout(u32, u64),
    /// Queued sessions' admission deadlines.
    Expire,
    /// A replica's next job finishes.
    Done(ReplicaId),
    /// A replica's quota is spent or its period ends.
    Quota(ReplicaId),
}

/// Whose timer is due a few events ahead.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Ahead {
    /// A client's wake-up or deadline.
    Client(usize),
    /// A replica's next completion.
    Done(ReplicaId),
}

/// The events planned, by time, then by planning order.
pub struct Agenda {
    timers: Calendar<Ev>,
    once: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    seq: u64,
    clients: usize,
}

impl Agenda {
    /// An empty agenda for `clients` clients on `replicas` replicas.
    pub fn new(clients: usize, replicas: usize) -> Agenda {
        Agenda { timers: Calendar::new(clients + 2 * replicas, Ev::Sample), once: BinaryHeap::new(), seq: 0, clients }
    }

    /// The timer slot of a withdrawable event.
    fn slot(&self, ev: Ev) -> Option<usize> {
        match ev {
            Ev::Wake(c) | Ev::Timeout(c, _) => Some(c as usize),
            Ev::Done(r) => Some(self.clients + 2 * r.idx()),
            Ev::Quota(r) => Some(self.clients + 2 * r.idx() + 1),
            Ev::Fault(_) | Ev::Probe | Ev::Sample | Ev::Expire => None,
        }
    }

    /// Plans `ev` at `t`; a client's or a replica's timer replaces the one
    /// its slot had.
    pub fn at(&mut self, t: f64, ev: Ev) {
        self.seq += 1;
        let key = (t.max(0.0).to_bits(), self.seq);
        match self.slot(ev) {
            Some(slot) => self.timers.set(slot, key, ev),
            None => self.once.push(Reverse((key.0, key.1, ev))),
        }
    }

    /// Withdraws `ev`'s slot's timer, if it has one.
    pub fn cancel(&mut self, ev: Ev) {
        if let Some(slot) = self.slot(ev) {
            self.timers.remove(slot);
        }
    }

    /// The next event and its time.
    pub fn pop(&mut self) -> Option<(f64, Ev)> {
        let timer = self.timers.peek();
        let once = self.once.peek().map(|&Reverse((t, s, _))| (t, s));
        let take_timer = match (timer, once) {
            (Some(k), Some(o)) => k < o,
            (t, _) => t.is_some(),
        };
        let (t, ev) = if take_timer {
            let ((t, _), ev) = self.timers.pop()?;
            (t, ev)
        } else {
            let Reverse((t, _, ev)) = self.once.pop()?;
            (t, ev)
        };
        Some((f64::from_bits(t), ev))
    }

    /// Whose event is `d` places ahead among those due now, if it is a
    /// client's or a replica's completion (a hint: a timer may yet be
    /// withdrawn or come before it).
    pub fn ahead(&self, d: usize) -> Option<Ahead> {
        let slot = self.timers.ahead(d)?;
        match slot.checked_sub(self.clients) {
            None => Some(Ahead::Client(slot)),
            Some(r) if r % 2 == 0 => Some(Ahead::Done(ReplicaId(r / 2))),
            Some(_) => None,
        }
    }

    /// Starts loading the timer slot of the event `d` places ahead.
    pub fn prefetch_ahead(&self, d: usize) {
        if let Some(slot) = self.timers.ahead(d) {
            self.timers.prefetch_slot(slot);
        }
    }

    /// Starts loading client `c`'s timer slot (its job's end replaces its
    /// deadline with its next wake-up).
    pub fn prefetch_client(&self, c: u32) {
        self.timers.prefetch_slot(self.slot(Ev::Wake(c)).expect("a client's timer has a slot"));
    }

    /// Starts loading replica `r`'s completion and quota timer slots.
    pub fn prefetch_replica(&self, r: ReplicaId) {
        for ev in [Ev::Done(r), Ev::Quota(r)] {
            self.timers.prefetch_slot(self.slot(ev).expect("a replica's timer has a slot"));
        }
    }

    /// Events planned (for tests: a replaced or withdrawn timer is not counted).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.timers.len() + self.once.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{Agenda, Ev};
    use crate::core::model::ReplicaId;

    #[test]
    fn time_order_then_planning_order_and_replaced_timers_vanish() {
        let mut a = Agenda::new(2, 1);
        a.at(2.0, Ev::Timeout(0, 7));
        a.at(1.0, Ev::Sample);
        a.at(1.0, Ev::Done(ReplicaId(0)));
        a.at(3.0, Ev::Wake(0)); // replaces client 0's deadline
        a.at(1.0, Ev::Wake(1));
        a.at(0.5, Ev::Quota(ReplicaId(0)));
        a.cancel(Ev::Quota(ReplicaId(0)));
        assert_eq!(a.len(), 4);
        let order: Vec<(f64, Ev)> = std::iter::from_fn(|| a.pop()).collect();
        assert_eq!(order, [(1.0, Ev::Sample), (1.0, Ev::Done(ReplicaId(0))), (1.0, Ev::Wake(1)), (3.0, Ev::Wake(0))]);
    }
}
