//! The simulator's own progress (design.md §4, revised 2026-12-06): virtual
//! time must advance. A loop in the model (a client that retries at the
//! same instant it was refused, say) would otherwise spin forever at 100%
//! of a core with no output. The guard counts events: at most
//! [`SAME_INSTANT`] per client or replica may share one instant of virtual
//! time, and at most [`PER_CLIENT_S`] per client per simulated second;
//! past either, the run stops with a one-line error naming the kind of
//! event that looped, and its books so far are written as a partial run's.
//! Both bounds are far above anything a model that advances can reach: a
//! client has at most a handful of events per instant (a wake-up, a
//! deadline, its query's completion) and a query takes at least tens of
//! microseconds of a replica's CPU.

use super::agenda::Ev;

/// Events per client or replica allowed at one instant (64).
pub const SAME_INSTANT: u64 = 64;
/// Events per client (or replica) allowed per simulated second (100,000).
pub const PER_CLIENT_S: u64 = 100_000;

/// Counts events against the bounds; see the module doc.
pub struct Guard {
    entities: u64,
    at: f64,
    same: u64,
    window_s: f64,
    in_window: u64,
    /// Per kind of event (see [`kind`]), those at the current instant.
    kinds: [u64; 8],
}

impl Guard {
    /// A guard for `clients` clients and `replicas` replicas.
    pub fn new(clients: usize, replicas: usize) -> Guard {
        Guard {
            entities: (clients + replicas).max(1) as u64,
            at: f64::NEG_INFINITY,
            same: 0,
            window_s: 0.0,
            in_window: 0,
            kinds: [0; 8],
        }
    }

    /// One more event, `ev` at `t_s`: `Err` with the reason when a bound
    /// is passed.
    pub fn step(&mut self, t_s: f64, ev: &Ev) -> Result<(), String> {
        if t_s > self.at {
            (self.at, self.same, self.kinds) = (t_s, 0, [0; 8]);
        }
        if t_s >= self.window_s + 1.0 {
            (self.window_s, self.in_window) = (t_s.floor(), 0);
        }
        self.same += 1;
        self.in_window += 1;
        self.kinds[kind(ev)] += 1;
        if self.same > SAME_INSTANT * self.entities {
            return Err(format!(
                "the simulator looped: {} events at t={t_s:.3} s without its clock advancing ({} per client or replica at most), most of them {}",
                self.same,
                SAME_INSTANT,
                self.dominant()
            ));
        }
        if self.in_window > PER_CLIENT_S * self.entities {
            return Err(format!(
                "the simulator looped: {} events in the simulated second from {:.0} s ({} per client or replica at most), most of them {}",
                self.in_window,
                self.window_s,
                PER_CLIENT_S,
                self.dominant()
            ));
        }
        Ok(())
    }

    /// The commonest kind of event at the current instant, in words.
    fn dominant(&self) -> &'static str {
        let i = (0..self.kinds.len()).max_by_key(|&i| self.kinds[i]).unwrap_or(0);
        NAMES[i]
    }
}

const NAMES: [&str; 8] = [
    "fault actions",
    "health probes",
    "per-second samples",
    "client wake-ups (a client opening a session or sending a query)",
    "client deadlines",
    "admission deadlines",
    "query completions",
    "CPU quota periods",
];

fn kind(ev: &Ev) -> usize {
    match ev {
        Ev::Fault(_) => 0,
        Ev::Probe => 1,
        Ev::Sample => 2,
        Ev::Wake(_) => 3,
        Ev::Timeout(..) => 4,
        Ev::Expire => 5,
        Ev::Done(_) => 6,
        Ev::Quota(_) => 7,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_that_stops_is_caught_and_named_and_one_that_advances_is_not() {
        let mut g = Guard::new(10, 5);
        for i in 0..10_000u32 {
            g.step(f64::from(i) * 1e-3, &Ev::Wake(i % 10)).expect("time advances");
        }
        let mut g = Guard::new(10, 5);
        let stuck = (0..).map(|_| g.step(7.0, &Ev::Wake(3))).find_map(Result::err).unwrap();
        assert!(stuck.contains("961 events at t=7.000 s") && stuck.contains("client wake-ups"), "{stuck}");
        let mut g = Guard::new(1, 0);
        let tiny = (0..).map(|i| g.step(f64::from(i) * 1e-9, &Ev::Expire)).find_map(Result::err).unwrap();
        assert!(tiny.contains("in the simulated second from 0 s") && tiny.contains("admission deadlines"), "{tiny}");
    }
}
