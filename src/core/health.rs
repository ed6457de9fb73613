//! Suspicion before removal (docs/resilience.md, "Failure detection, gray
//! failures and recovery"; the handbook chapter in `shared/seeds/003_*`): a
//! per-replica health state machine that turns evidence — probe answers,
//! probe timeouts, refused connections, client connection errors and query
//! latency against the query's deadline budget — into one of five states,
//! each with the share of new sessions the router may send to the replica:
//!
//! ```text
//!      probe timeout / slow / slow connect      slow x N
//!  HEALTHY ─────────────────────────────▶ SUSPECT ──────────▶ DEGRADED
//!     ▲  ▲        fast answers x M          │  ▲   fast x M      │
//!     │  └──────────────────────────────────┘  └─────────────────┘
//!     │                                     │ probe timeouts x T or refused (any state)
//!     │  stability window with no failure   ▼
//!  RECOVERING ◀───────── probe answers ── ISOLATED
//! ```
//!
//! SUSPECT and DEGRADED reduce new admissions without touching open
//! sessions; ISOLATED stops routing; RECOVERING admits a bounded probation
//! share until the stability window passes. The machine is pure: callers
//! pass the time, so the simulator and the real driver decide alike.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a replica stands in the router's eyes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Health {
    /// Full share of new sessions.
    Healthy,
    /// Some evidence of trouble: a reduced share until it is confirmed or cleared.
    Suspect,
    /// Alive but slow: demoted to a small share, not removed.
    Degraded,
    /// Failed: no new sessions.
    Isolated,
    /// Answering again: a probation share until the stability window passes.
    Recovering,
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Health::Healthy => "HEALTHY",
            Health::Suspect => "SUSPECT",
            Health::Degraded => "DEGRADED",
            Health::Isolated => "ISOLATED",
            Health::Recovering => "RECOVERING",
        })
    }
}

/// One piece of evidence about a replica.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Evidence {
    /// A probe answered after `ms`.
    ProbeOk { ms: f64 },
    /// A probe got no answer within its deadline.
    ProbeTimeout,
    /// A connection was refused or broken: proof the server is gone.
    Refused,
    /// A client's connect failed or timed out (not a refusal).
    ConnError,
    /// A query finished after `ms` against a deadline budget of `budget_ms`.
    Query { ms: f64, budget_ms: f64 },
}

/// The thresholds of the machine; every one is configurable.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    /// Consecutive timeouts (probe or connect) that isolate a replica.
    pub timeouts_to_isolate: u32,
    /// A query slower than this fraction of its deadline budget is slow evidence.
    pub slow_fraction: f64,
    /// Consecutive slow answers that demote a SUSPECT replica to DEGRADED.
    pub slow_to_degrade: u32,
    /// Consecutive fast answers that clear SUSPECT (and lift DEGRADED to SUSPECT).
    pub fast_to_clear: u32,
    /// Share of new sessions while SUSPECT.
    pub suspect_share: f64,
    /// Share of new sessions while DEGRADED.
    pub degraded_share: f64,
    /// Share of new sessions while RECOVERING.
    pub probation_share: f64,
    /// Seconds RECOVERING must pass without failure evidence to be HEALTHY
    /// (scaled by `--time-scale` like the rest of the timeline); also the
    /// length of `--recovery probation`'s ramp.
    pub stability_window_s: f64,
    /// The deadline budget a query's latency is judged against, ms; 0 (the
    /// default) means the client's `query_timeout_ms`.
    pub budget_ms: f64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            timeouts_to_isolate: super::detect::TIMEOUTS_TO_DOWN,
            slow_fraction: 0.5,
            slow_to_degrade: 5,
            fast_to_clear: 3,
            suspect_share: 0.5,
            degraded_share: 0.2,
            probation_share: 0.25,
            stability_window_s: 10.0,
            budget_ms: 0.0,
        }
    }
}

impl HealthConfig {
    /// Checks ranges; the error is `(field, reason)`, the field as written
    /// in a workload file (`health.suspect_share`).
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |name: &str, reason: String| Err((format!("health.{name}"), reason));
        for (name, v) in [
            ("suspect_share", self.suspect_share),
            ("degraded_share", self.degraded_share),
            ("probation_share", self.probation_share),
        ] {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                return bad(name, format!("must be within 0..=1, got {v}"));
            }
        }
        if !(self.slow_fraction.is_finite() && self.slow_fraction > 0.0) {
            return bad("slow_fraction", format!("must be above 0, got {}", self.slow_fraction));
        }
        for (name, v) in [("budget_ms", self.budget_ms), ("stability_window_s", self.stability_window_s)] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(name, format!("must be 0 or more, got {v}"));
            }
        }
        for (name, v) in [
            ("timeouts_to_isolate", self.timeouts_to_isolate),
            ("slow_to_degrade", self.slow_to_degrade),
            ("fast_to_clear", self.fast_to_clear),
        ] {
            if v == 0 {
                return bad(name, "must be at least 1".into());
            }
        }
        Ok(())
    }

    /// The share of new sessions a replica in `state` may receive.
    pub fn share(&self, state: Health) -> f64 {
        match state {
            Health::Healthy => 1.0,
            Health::Suspect => self.suspect_share,
            Health::Degraded => self.degraded_share,
            Health::Isolated => 0.0,
            Health::Recovering => self.probation_share,
        }
    }
}

/// A change of state, with the evidence that caused it.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    pub at_s: f64,
    pub from: Health,
    pub to: Health,
    pub reason: &'static str,
}

/// The health of one replica.
#[derive(Clone, Debug)]
pub struct HealthMachine {
    cfg: HealthConfig,
    state: Health,
    since_s: f64,
    timeouts: u32,
    slow: u32,
    fast: u32,
}

/// What one piece of evidence says, once classified.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Signal {
    Gone,
    Timeout,
    /// Slow, and why (`slow answer`, `slow to connect`).
    Slow(&'static str),
    /// A query answered in time.
    Fast,
    /// A probe answered: the server is alive, which says nothing about
    /// whether it is slow (a trivial probe is fast on a starved replica).
    Alive,
}

impl HealthMachine {
    /// A healthy replica at time 0.
    pub fn new(cfg: HealthConfig) -> HealthMachine {
        HealthMachine { cfg, state: Health::Healthy, since_s: 0.0, timeouts: 0, slow: 0, fast: 0 }
    }

    /// The current state.
    pub fn state(&self) -> Health {
        self.state
    }

    /// The share of new sessions the replica may receive now.
    pub fn share(&self) -> f64 {
        self.cfg.share(self.state)
    }

    fn classify(&self, ev: Evidence) -> Signal {
        match ev {
            Evidence::Refused => Signal::Gone,
            Evidence::ProbeTimeout => Signal::Timeout,
            // Many clients time out at once on a busy replica: a burst of
            // them is one overload, not several missed heartbeats, so only
            // the prober's own timeouts (one observer, one per interval)
            // count toward isolation.
            Evidence::ConnError => Signal::Slow("slow to connect"),
            Evidence::ProbeOk { .. } => Signal::Alive,
            Evidence::Query { ms, budget_ms } if ms > budget_ms * self.cfg.slow_fraction => Signal::Slow("slow answer"),
            Evidence::Query { .. } => Signal::Fast,
        }
    }

    /// Folds in one piece of evidence seen at `now_s`; returns the
    /// transition it caused, if any.
    pub fn observe(&mut self, now_s: f64, ev: Evidence) -> Option<Transition> {
        if self.state == Health::Isolated && !matches!(ev, Evidence::ProbeOk { .. }) {
            // Only the prober readmits: a query of a session opened before
            // the isolation finishing fast says little about new ones.
            return None;
        }
        let signal = self.classify(ev);
        self.count(signal);
        let next = self.next(signal, now_s);
        self.move_to(now_s, next)
    }

    /// Lets time pass: RECOVERING becomes HEALTHY once the stability window
    /// has passed with no failure evidence.
    pub fn tick(&mut self, now_s: f64) -> Option<Transition> {
        let due = self.state == Health::Recovering && now_s - self.since_s >= self.cfg.stability_window_s;
        self.move_to(now_s, due.then_some((Health::Healthy, "stability window passed")))
    }

    fn count(&mut self, signal: Signal) {
        match signal {
            Signal::Gone | Signal::Timeout => {
                self.timeouts += 1;
                self.fast = 0;
            }
            Signal::Slow(_) => {
                // Slowness neither proves nor disproves a hang: probe
                // timeouts in a row stay counted.
                self.slow += 1;
                self.fast = 0;
            }
            Signal::Fast => {
                self.fast += 1;
                self.slow = 0;
                self.timeouts = 0;
            }
            Signal::Alive => {
                // Clears a suspicion raised by timeouts; one raised by
                // slowness needs fast answers to the clients.
                self.timeouts = 0;
                if self.slow == 0 {
                    self.fast += 1;
                }
            }
        }
    }

    fn next(&self, signal: Signal, now_s: f64) -> Option<(Health, &'static str)> {
        use Health::*;
        let c = &self.cfg;
        match (self.state, signal) {
            (Isolated, Signal::Alive) => Some((Recovering, "answering again")),
            (Isolated, _) => None,
            (_, Signal::Gone) => Some((Isolated, "connection refused")),
            (_, Signal::Timeout) if self.timeouts >= c.timeouts_to_isolate => Some((Isolated, "timeouts in a row")),
            (Recovering, Signal::Timeout) => Some((Isolated, "failed on probation")),
            (Recovering, _) => {
                (now_s - self.since_s >= c.stability_window_s).then_some((Healthy, "stability window passed"))
            }
            (Healthy, Signal::Timeout) => Some((Suspect, "timeout")),
            (Healthy, Signal::Slow(why)) => Some((Suspect, why)),
            (Suspect, Signal::Slow(_)) if self.slow >= c.slow_to_degrade => Some((Degraded, "slow answers in a row")),
            (Suspect, Signal::Fast | Signal::Alive) if self.fast >= c.fast_to_clear => {
                Some((Healthy, "fast answers in a row"))
            }
            (Degraded, Signal::Fast | Signal::Alive) if self.fast >= c.fast_to_clear => {
                Some((Suspect, "fast answers in a row"))
            }
            _ => None,
        }
    }

    fn move_to(&mut self, now_s: f64, next: Option<(Health, &'static str)>) -> Option<Transition> {
        let (to, reason) = next.filter(|(to, _)| *to != self.state)?;
        let t = Transition { at_s: now_s, from: self.state, to, reason };
        self.state = to;
        self.since_s = now_s;
        // Evidence in a row carries into the next state (a first timeout
        // counts toward isolation), except what the new state starts afresh.
        self.fast = 0;
        if to != Health::Suspect {
            self.slow = 0;
        }
        if matches!(to, Health::Healthy | Health::Recovering) {
            self.timeouts = 0;
        }
        Some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Health::*;

    fn slow() -> Evidence {
        Evidence::Query { ms: 20_000.0, budget_ms: 30_000.0 }
    }
    fn fast() -> Evidence {
        Evidence::Query { ms: 40.0, budget_ms: 30_000.0 }
    }
    fn feed(m: &mut HealthMachine, t: f64, ev: Evidence, n: usize) -> Vec<Health> {
        (0..n).filter_map(|i| m.observe(t + i as f64 * 0.1, ev)).map(|tr| tr.to).collect()
    }

    #[test]
    fn busy_but_answering_replica_is_never_isolated() {
        let mut m = HealthMachine::new(HealthConfig::default());
        // Long runs of fast answers with a lone timeout now and then.
        for round in 0..50 {
            let t = round as f64;
            m.observe(t, Evidence::ProbeTimeout);
            feed(&mut m, t + 0.1, fast(), 3);
            assert_ne!(m.state(), Isolated, "round {round}");
        }
        assert_eq!(m.state(), Healthy, "fast answers clear suspicion");
    }

    #[test]
    fn paused_replica_is_suspected_isolated_then_recovered() {
        let mut m = HealthMachine::new(HealthConfig::default());
        let path: Vec<Health> =
            (0..3).filter_map(|i| m.observe(i as f64, Evidence::ProbeTimeout)).map(|t| t.to).collect();
        assert_eq!(path, [Suspect, Isolated]);
        assert_eq!(m.share(), 0.0);
        assert_eq!(m.observe(10.0, Evidence::ProbeOk { ms: 2.0 }).map(|t| t.to), Some(Recovering));
        assert_eq!(m.share(), HealthConfig::default().probation_share);
        assert_eq!(m.tick(15.0), None, "window not passed");
        assert_eq!(m.tick(20.0).map(|t| t.to), Some(Healthy));
        assert_eq!(m.share(), 1.0);
    }

    #[test]
    fn slow_replica_is_demoted_before_removed() {
        let mut m = HealthMachine::new(HealthConfig::default());
        let path = feed(&mut m, 0.0, slow(), 6);
        assert_eq!(path, [Suspect, Degraded], "demoted, not isolated, while it still answers");
        assert!(m.share() > 0.0 && m.share() < HealthConfig::default().suspect_share);
        let path: Vec<Health> =
            (0..3).filter_map(|i| m.observe(10.0 + i as f64, Evidence::ProbeTimeout)).map(|t| t.to).collect();
        assert_eq!(path, [Isolated], "removed only once it stops answering");
    }

    #[test]
    fn contrary_evidence_leads_back_from_suspect_and_degraded() {
        let mut m = HealthMachine::new(HealthConfig::default());
        feed(&mut m, 0.0, slow(), 6);
        assert_eq!(m.state(), Degraded);
        assert_eq!(feed(&mut m, 1.0, fast(), 6), [Suspect, Healthy]);
    }

    #[test]
    fn refusal_isolates_from_any_state_and_fails_probation() {
        for pre in [vec![], vec![Evidence::ProbeTimeout], vec![slow(); 6]] {
            let mut m = HealthMachine::new(HealthConfig::default());
            pre.iter().for_each(|&e| {
                m.observe(0.0, e);
            });
            assert_eq!(m.observe(1.0, Evidence::Refused).map(|t| t.to), Some(Isolated));
        }
        let mut m = HealthMachine::new(HealthConfig::default());
        m.observe(0.0, Evidence::Refused);
        m.observe(1.0, Evidence::ProbeOk { ms: 1.0 });
        assert_eq!(m.observe(2.0, Evidence::Refused).map(|t| t.to), Some(Isolated));
        assert_eq!(m.observe(3.0, Evidence::ProbeTimeout), None, "already isolated");
        assert_eq!(m.observe(4.0, fast()), None, "only a probe readmits");
        assert_eq!(m.observe(5.0, Evidence::ProbeOk { ms: 1.0 }).map(|t| t.to), Some(Recovering));
        assert_eq!(m.observe(6.0, Evidence::ProbeTimeout).map(|t| t.to), Some(Isolated), "a timeout fails probation");
    }

    #[test]
    fn probe_answers_clear_a_timeout_but_not_slowness() {
        let mut m = HealthMachine::new(HealthConfig::default());
        m.observe(0.0, Evidence::ProbeTimeout);
        assert_eq!(feed(&mut m, 1.0, Evidence::ProbeOk { ms: 1.0 }, 3), [Healthy], "the hang is over");
        // A starved replica answers its trivial probe quickly between slow
        // queries: the slow answers still count in a row.
        let mut m = HealthMachine::new(HealthConfig::default());
        let mut path = Vec::new();
        for i in 0..5 {
            path.extend(m.observe(f64::from(i), slow()).map(|t| t.to));
            path.extend(m.observe(f64::from(i) + 0.5, Evidence::ProbeOk { ms: 1.0 }).map(|t| t.to));
        }
        assert_eq!(path, [Suspect, Degraded]);
    }

    #[test]
    fn a_burst_of_client_connect_timeouts_demotes_but_never_isolates() {
        let mut m = HealthMachine::new(HealthConfig::default());
        let path = feed(&mut m, 0.0, Evidence::ConnError, 50);
        assert_eq!(path, [Suspect, Degraded]);
        let t = m.observe(10.0, Evidence::ProbeTimeout);
        assert_eq!(t, None, "one probe timeout is not three");
    }

    #[test]
    fn every_threshold_is_honoured() {
        let cfg = HealthConfig { timeouts_to_isolate: 1, stability_window_s: 0.0, ..HealthConfig::default() };
        let mut m = HealthMachine::new(cfg);
        assert_eq!(m.observe(0.0, Evidence::ProbeTimeout).map(|t| t.to), Some(Isolated));
        assert_eq!(m.observe(1.0, Evidence::ProbeOk { ms: 1.0 }).map(|t| t.to), Some(Recovering));
        assert_eq!(m.tick(1.0).map(|t| t.to), Some(Healthy));
        let bad = HealthConfig { suspect_share: 1.5, ..HealthConfig::default() };
        assert_eq!(bad.validate().unwrap_err().0, "health.suspect_share");
        let bad = HealthConfig { fast_to_clear: 0, ..HealthConfig::default() };
        assert_eq!(bad.validate().unwrap_err().0, "health.fast_to_clear");
        let bad = HealthConfig { budget_ms: -1.0, ..HealthConfig::default() };
        assert_eq!(bad.validate().unwrap_err().0, "health.budget_ms");
        assert!(HealthConfig::default().validate().is_ok());
    }
}
