//! The status line a run prints on a non-terminal every few seconds
//! (`--progress lines`, as pgbench `-P` and k6 do): elapsed time, each
//! class's goodput and p95 over the last window, replicas up, sessions
//! aborted so far, and the logins waiting now with the oldest one's wait. Pure: the collector fills a [`Status`] and the driver
//! prints its line.

use super::model::Class;

/// Seconds between status lines.
pub const EVERY_S: f64 = 5.0;

/// What a status line says.
#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    /// Run time now, s.
    pub t_s: f64,
    /// The run's length, s.
    pub duration_s: f64,
    /// Length of the window the rates and p95 cover, s.
    pub window_s: f64,
    /// Queries completed in the window, per class.
    pub completed: [u64; 2],
    /// p95 latency of those queries, ms, per class.
    pub p95_ms: [Option<u64>; 2],
    /// Replicas up, of all.
    pub up: (usize, usize),
    /// Sessions aborted since the start, per class.
    pub aborted: [u64; 2],
    /// Logins waiting now per class, and how long the oldest has, s.
    pub logins: [(u64, Option<f64>); 2],
}

impl Status {
    /// `plbbench: 35/150 s  P 49.8 q/s p95 5 ms  F 133.0 q/s p95 6 ms  up 5/5  aborted P 0 F 0  logins waiting P 0 F 3 (oldest 1.2 s)`
    pub fn line(&self) -> String {
        let waiting = |c: Class| match self.logins[c.idx()] {
            (n, Some(s)) if n > 0 => format!("{c} {n} (oldest {s:.1} s)"),
            (n, _) => format!("{c} {n}"),
        };
        let class = |c: Class| {
            let i = c.idx();
            let qps = self.completed[i] as f64 / self.window_s.max(1e-9);
            let p95 = self.p95_ms[i].map_or("-".to_string(), |p| format!("{p} ms"));
            format!("{c} {qps:.1} q/s p95 {p95}")
        };
        format!(
            "plbbench: {:.0}/{:.0} s  {}  {}  up {}/{}  aborted P {} F {}  logins waiting {} {}",
            self.t_s,
            self.duration_s,
            class(Class::P),
            class(Class::F),
            self.up.0,
            self.up.1,
            self.aborted[0],
            self.aborted[1],
            waiting(Class::P),
            waiting(Class::F)
        )
    }
}

/// When the next line is due.
#[derive(Clone, Debug)]
pub struct Schedule {
    next_s: f64,
    last_s: f64,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule { next_s: EVERY_S, last_s: 0.0 }
    }
}

impl Schedule {
    /// At a sample at `t_s`: the window `[from, t_s)` to report when a line
    /// is due, and the schedule moves on.
    pub fn due(&mut self, t_s: f64) -> Option<(f64, f64)> {
        if t_s + 1e-6 < self.next_s {
            return None;
        }
        let from = self.last_s;
        self.last_s = t_s;
        while self.next_s <= t_s + 1e-6 {
            self.next_s += EVERY_S;
        }
        Some((from, t_s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_each_class_and_the_cluster() {
        let s = Status {
            t_s: 35.0,
            duration_s: 150.0,
            window_s: 5.0,
            completed: [249, 665],
            p95_ms: [Some(5), None],
            up: (4, 5),
            aborted: [2, 0],
            logins: [(0, None), (3, Some(1.24))],
        };
        assert_eq!(
            s.line(),
            "plbbench: 35/150 s  P 49.8 q/s p95 5 ms  F 133.0 q/s p95 -  up 4/5  aborted P 2 F 0  logins waiting P 0 F 3 (oldest 1.2 s)"
        );
    }

    #[test]
    fn lines_are_due_every_five_seconds_over_the_window_since_the_last() {
        let mut s = Schedule::default();
        let due: Vec<_> = (0..=12).filter_map(|t| s.due(f64::from(t))).collect();
        assert_eq!(due, [(0.0, 5.0), (5.0, 10.0)]);
        let mut late = Schedule::default();
        assert_eq!(late.due(11.0), Some((0.0, 11.0)), "a late sample reports once");
        assert_eq!(late.due(14.0), None);
        assert_eq!(late.due(15.0), Some((11.0, 15.0)));
    }
}
