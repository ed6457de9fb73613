//! The router's view of replica health over time, one place for the
//! simulator and the real driver (docs/resilience.md, "Three detectors, one
//! watch"). Evidence (probe answers, refusals, timeouts, connection errors,
//! query latency) goes in; the router's health flags and per-class shares,
//! and the events to log, come out. Three detectors share it: the oracle
//! (told of every fault), the probe detector of the paper's middleware
//! (`core::detect`: a refusal removes a replica at once, timeouts only in a
//! row) and the suspicion state machine (`core::health`). On top of any of
//! them, `--recovery probation` ramps a returning replica: Premium may use
//! it at once, while its Freemium share rises from 0 to 1 over the
//! stability window, so the Premium work delayed by the outage drains
//! before the Freemium backlog floods the new capacity. Pure: callers pass
//! the time.

use super::detect::{Detector, Probe};
use super::health::{Evidence, Health, HealthConfig, HealthMachine};
use super::model::{EventKind, ReplicaId, Role};
use super::router::Router;
use serde::{Deserialize, Serialize};

/// What the router does with a replica that comes back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Recovery {
    /// The paper's behaviour: full share at once (after the health machine's
    /// probation, under `--detection suspicion`).
    #[default]
    None,
    /// Premium first: Premium may use the returning replica at once; its
    /// Freemium share ramps from 0 to 1 over the stability window.
    Probation,
    /// Probation, and a slow start for a replica a repair opens to
    /// Freemium (its role goes from Premium to Freemium or Mixed): its
    /// Freemium share ramps from 0 to 1 over the same window, so the role's
    /// new sessions do not all herd onto the one replica that holds the
    /// fewest (HAProxy's `slowstart`, Envoy's slow-start window).
    SlowStart,
}

impl Recovery {
    /// The name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            Recovery::None => "none",
            Recovery::Probation => "probation",
            Recovery::SlowStart => "slow-start",
        }
    }
}

/// Which detector feeds the router.
#[derive(Clone, Debug)]
enum Detect {
    /// Told of faults; evidence is ignored.
    Oracle,
    /// Probe answers, refusals and timeouts in a row (`core::detect`).
    Probe(Detector),
    /// The suspicion state machine, one per replica.
    Suspicion(Vec<HealthMachine>),
}

/// How a query's answer counts as evidence under suspicion: a small copy
/// the backends keep beside their clients, so a query needs no lock to
/// judge its own answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Answers {
    timeout_ms: f64,
    budget_ms: f64,
}

impl Answers {
    /// The evidence of a query that took `took_ms`, or timed out (`None`):
    /// a timed-out query is the slowest answer, not proof of death.
    pub fn evidence(self, took_ms: Option<f64>) -> Evidence {
        Evidence::Query { ms: took_ms.unwrap_or(self.timeout_ms), budget_ms: self.budget_ms }
    }
}

/// One line for events.csv: kind, replica, detail.
pub type Note = (EventKind, ReplicaId, String);

/// The router's view of replica health; see the module doc.
#[derive(Clone, Debug)]
pub struct Watch {
    detect: Detect,
    recovery: Recovery,
    window_s: f64,
    /// Per replica, when its probation ramp began (under `Recovery::Probation`).
    ramp: Vec<Option<f64>>,
    /// `HealthConfig::budget_ms`.
    budget_ms: f64,
}

impl Watch {
    /// The oracle: the router is told of each fault by [`Self::told`].
    pub fn oracle(replicas: usize, recovery: Recovery, cfg: HealthConfig) -> Watch {
        Watch::with(Detect::Oracle, replicas, recovery, cfg)
    }

    /// The paper's probe detector.
    pub fn probe(replicas: usize, recovery: Recovery, cfg: HealthConfig) -> Watch {
        Watch::with(Detect::Probe(Detector::new(replicas)), replicas, recovery, cfg)
    }

    /// The suspicion state machine with `cfg`'s thresholds.
    pub fn suspicion(replicas: usize, recovery: Recovery, cfg: HealthConfig) -> Watch {
        Watch::with(Detect::Suspicion(vec![HealthMachine::new(cfg); replicas]), replicas, recovery, cfg)
    }

    fn with(detect: Detect, replicas: usize, recovery: Recovery, cfg: HealthConfig) -> Watch {
        Watch {
            detect,
            recovery,
            window_s: cfg.stability_window_s,
            ramp: vec![None; replicas],
            budget_ms: cfg.budget_ms,
        }
    }

    /// How query answers count as evidence, for a client query timeout of
    /// `timeout_ms`; `None` unless the suspicion machine decides (the other
    /// detectors ignore latency). The budget is the configured one, or else
    /// the timeout.
    pub fn answers(&self, timeout_ms: f64) -> Option<Answers> {
        let budget_ms = if self.budget_ms > 0.0 { self.budget_ms } else { timeout_ms };
        matches!(self.detect, Detect::Suspicion(_)).then_some(Answers { timeout_ms, budget_ms })
    }

    /// Whether the oracle feeds the router (faults are told, not observed).
    pub fn is_oracle(&self) -> bool {
        matches!(self.detect, Detect::Oracle)
    }

    /// The state of `r`'s health machine, under suspicion.
    pub fn state(&self, r: ReplicaId) -> Option<Health> {
        match &self.detect {
            Detect::Suspicion(m) => Some(m[r.idx()].state()),
            _ => None,
        }
    }

    /// The oracle tells the router that `r` is up or down now; `how` names
    /// the source in events.csv. Ignored by the other detectors.
    pub fn told(&mut self, router: &mut Router, r: ReplicaId, up: bool, now_s: f64, how: &str) -> Vec<Note> {
        let mut notes = Vec::new();
        if self.is_oracle() {
            self.set_up(router, r, up, now_s, how, &mut notes);
        }
        notes
    }

    /// Folds one piece of evidence about `r`, seen at `now_s`; `how` names
    /// its source for the probe detector's events (`probe`, `connection error`).
    pub fn evidence(&mut self, router: &mut Router, r: ReplicaId, ev: Evidence, now_s: f64, how: &str) -> Vec<Note> {
        let mut notes = Vec::new();
        let verdict = match &mut self.detect {
            Detect::Oracle => None,
            Detect::Probe(d) => {
                let probe = match ev {
                    Evidence::ProbeOk { .. } => Probe::Ok,
                    Evidence::Refused => Probe::Refused,
                    Evidence::ProbeTimeout => Probe::Timeout,
                    Evidence::ConnError | Evidence::Query { .. } => return notes,
                };
                d.observe(r, probe).map(|up| (up, how))
            }
            Detect::Suspicion(m) => m[r.idx()].observe(now_s, ev).map(|t| {
                notes.push((EventKind::Health, r, format!("{}->{} ({})", t.from, t.to, t.reason)));
                (t.to != Health::Isolated, "health")
            }),
        };
        if let Some((up, how)) = verdict {
            self.set_up(router, r, up, now_s, how, &mut notes);
        }
        self.apply_shares(router, r, now_s, &mut notes);
        notes
    }

    /// Whether letting time pass may change anything: a probation ramp
    /// runs, or a replica waits out its stability window. With neither,
    /// [`Self::tick`] changes nothing and need not be called.
    pub fn timed(&self) -> bool {
        let waiting = match &self.detect {
            Detect::Suspicion(m) => m.iter().any(|m| m.state() == Health::Recovering),
            Detect::Oracle | Detect::Probe(_) => false,
        };
        waiting || self.ramp.iter().any(Option::is_some)
    }

    /// Lets time pass: probation windows end and ramps advance.
    pub fn tick(&mut self, router: &mut Router, now_s: f64) -> Vec<Note> {
        let mut notes = Vec::new();
        for r in ReplicaId::all(self.ramp.len()) {
            if let Detect::Suspicion(m) = &mut self.detect {
                if let Some(t) = m[r.idx()].tick(now_s) {
                    notes.push((EventKind::Health, r, format!("{}->{} ({})", t.from, t.to, t.reason)));
                }
            }
            self.apply_shares(router, r, now_s, &mut notes);
        }
        notes
    }

    /// Marks `r` up or down in the router (logging a `detect` event when
    /// that changes it); a replica that comes back starts its ramp.
    fn set_up(&mut self, router: &mut Router, r: ReplicaId, up: bool, now_s: f64, how: &str, notes: &mut Vec<Note>) {
        if router.is_healthy(r) == up {
            return;
        }
        let slow_start = self.recovery == Recovery::SlowStart;
        let before: Option<Vec<Role>> =
            slow_start.then(|| ReplicaId::all(self.ramp.len()).map(|i| router.role(i)).collect());
        router.set_health(r, up);
        notes.push((EventKind::Detect, r, format!("{} ({how})", if up { "up" } else { "down" })));
        self.ramp[r.idx()] = None;
        if let Some(before) = before {
            self.slow_start(router, &before, r, now_s, notes);
        }
        if up && self.recovery != Recovery::None {
            self.ramp[r.idx()] = Some(now_s);
            notes.push((
                EventKind::Recovery,
                r,
                format!("probation: Premium at once, Freemium ramps in over {} s", self.window_s),
            ));
        }
    }

    /// Starts a Freemium ramp on every healthy replica other than `changed`
    /// whose role went from Premium (`before`) to one that takes Freemium.
    fn slow_start(
        &mut self,
        router: &mut Router,
        before: &[Role],
        changed: ReplicaId,
        now_s: f64,
        notes: &mut Vec<Note>,
    ) {
        for i in ReplicaId::all(before.len()) {
            let opened = before[i.idx()] == Role::P && router.role(i) != Role::P;
            if i != changed && opened && router.is_healthy(i) && self.ramp[i.idx()].is_none() {
                self.ramp[i.idx()] = Some(now_s);
                let detail = format!("slow start: Freemium ramps in over {} s", self.window_s);
                notes.push((EventKind::Recovery, i, detail));
                router.set_shares(i, self.shares(i, now_s));
            }
        }
    }

    /// The shares `[P, F]` `r` may take now.
    fn shares(&self, r: ReplicaId, now_s: f64) -> [f64; 2] {
        let state = self.state(r);
        let base = match &self.detect {
            Detect::Suspicion(m) => m[r.idx()].share(),
            _ => 1.0,
        };
        let ramping = self.ramp[r.idx()].filter(|_| matches!(state, None | Some(Health::Recovering | Health::Healthy)));
        match ramping {
            Some(t0) => [1.0, ramp(now_s - t0, self.window_s)],
            None => [base; 2],
        }
    }

    fn apply_shares(&mut self, router: &mut Router, r: ReplicaId, now_s: f64, notes: &mut Vec<Note>) {
        if let Some(t0) = self.ramp[r.idx()] {
            if now_s - t0 >= self.window_s || !router.is_healthy(r) {
                self.ramp[r.idx()] = None;
                notes.push((EventKind::Recovery, r, "probation over".to_string()));
            }
        }
        router.set_shares(r, self.shares(r, now_s));
    }
}

/// The Freemium share `elapsed_s` into a ramp of `window_s`: 0 to 1, linear.
fn ramp(elapsed_s: f64, window_s: f64) -> f64 {
    if window_s <= 0.0 {
        return 1.0;
    }
    (elapsed_s / window_s).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::Class;
    use crate::core::router::{RouterConfig, Strategy};

    fn router() -> Router {
        Router::new(RouterConfig::for_tests(Strategy::Plb, [2, 1, 2]))
    }

    fn kinds(notes: &[Note]) -> Vec<&str> {
        notes.iter().map(|n| n.0.name()).collect()
    }

    #[test]
    fn probe_detector_removes_on_refusal_and_restores_on_answer() {
        let mut rt = router();
        let mut w = Watch::probe(5, Recovery::None, HealthConfig::default());
        let n = w.evidence(&mut rt, ReplicaId(1), Evidence::Refused, 1.0, "connection error");
        assert_eq!(n, vec![(EventKind::Detect, ReplicaId(1), "down (connection error)".to_string())]);
        assert!(!rt.is_healthy(ReplicaId(1)));
        assert!(
            w.evidence(&mut rt, ReplicaId(1), Evidence::Query { ms: 1e9, budget_ms: 1.0 }, 2.0, "query").is_empty(),
            "latency is not the probe detector's evidence"
        );
        w.evidence(&mut rt, ReplicaId(1), Evidence::ProbeOk { ms: 1.0 }, 3.0, "probe");
        assert!(rt.is_healthy(ReplicaId(1)));
        assert_eq!(rt.shares(ReplicaId(1)), [1.0, 1.0], "no ramp without probation");
    }

    #[test]
    fn only_suspicion_judges_answers_against_the_budget() {
        let cfg = HealthConfig::default();
        assert_eq!(Watch::probe(5, Recovery::None, cfg).answers(30_000.0), None);
        let a = Watch::suspicion(5, Recovery::None, cfg).answers(30_000.0).expect("suspicion judges answers");
        assert_eq!(
            a.evidence(Some(40.0)),
            Evidence::Query { ms: 40.0, budget_ms: 30_000.0 },
            "budget defaults to the timeout"
        );
        assert_eq!(
            a.evidence(None),
            Evidence::Query { ms: 30_000.0, budget_ms: 30_000.0 },
            "a timeout is the slowest answer"
        );
        let set = HealthConfig { budget_ms: 600.0, ..cfg };
        let a = Watch::suspicion(5, Recovery::None, set).answers(30_000.0).unwrap();
        assert_eq!(a.evidence(None), Evidence::Query { ms: 30_000.0, budget_ms: 600.0 });
    }

    #[test]
    fn oracle_ignores_evidence() {
        let mut rt = router();
        let mut w = Watch::oracle(5, Recovery::None, HealthConfig::default());
        assert!(w.evidence(&mut rt, ReplicaId(0), Evidence::Refused, 1.0, "probe").is_empty());
        assert!(rt.is_healthy(ReplicaId(0)));
        assert_eq!(kinds(&w.told(&mut rt, ReplicaId(0), false, 2.0, "oracle")), ["detect"]);
        assert!(!rt.is_healthy(ReplicaId(0)));
    }

    #[test]
    fn probation_puts_premium_first_and_ramps_freemium() {
        let cfg = HealthConfig { stability_window_s: 10.0, ..HealthConfig::default() };
        let mut rt = router();
        let mut w = Watch::probe(5, Recovery::Probation, cfg);
        w.evidence(&mut rt, ReplicaId(0), Evidence::Refused, 1.0, "probe");
        assert!(!w.timed(), "a replica down with no ramp: time changes nothing");
        let n = w.evidence(&mut rt, ReplicaId(0), Evidence::ProbeOk { ms: 1.0 }, 20.0, "probe");
        assert_eq!(kinds(&n), ["detect", "recovery"]);
        assert_eq!(rt.shares(ReplicaId(0)), [1.0, 0.0], "Premium at once, no Freemium yet");
        assert!(w.timed(), "the ramp needs ticks");
        w.tick(&mut rt, 25.0);
        assert_eq!(rt.shares(ReplicaId(0)), [1.0, 0.5]);
        let n = w.tick(&mut rt, 30.0);
        assert_eq!(n, vec![(EventKind::Recovery, ReplicaId(0), "probation over".to_string())]);
        assert_eq!(rt.shares(ReplicaId(0)), [1.0, 1.0]);
        assert!(!w.timed(), "probation over");
    }

    #[test]
    fn a_suspicion_waiting_out_its_stability_window_needs_ticks() {
        let cfg = HealthConfig { stability_window_s: 10.0, ..HealthConfig::default() };
        let mut rt = router();
        let mut w = Watch::suspicion(5, Recovery::None, cfg);
        assert!(!w.timed());
        for t in 1..=20 {
            w.evidence(&mut rt, ReplicaId(2), Evidence::Refused, f64::from(t), "probe");
        }
        assert!(!rt.is_healthy(ReplicaId(2)));
        w.evidence(&mut rt, ReplicaId(2), Evidence::ProbeOk { ms: 1.0 }, 30.0, "probe");
        assert!(w.timed(), "RECOVERING ends by the clock");
        w.tick(&mut rt, 45.0);
        assert!(!w.timed(), "HEALTHY again: nothing timed");
    }

    #[test]
    fn slow_start_ramps_freemium_on_a_premium_replica_a_repair_opens_to_it() {
        let cfg = HealthConfig { stability_window_s: 10.0, ..HealthConfig::default() };
        for (recovery, ramped) in [(Recovery::Probation, false), (Recovery::SlowStart, true)] {
            let mut rt = router();
            let mut w = Watch::oracle(5, recovery, cfg);
            for _ in 0..20 {
                rt.admit(Class::F).expect("capacity");
            }
            // Freemium sessions on r3, r4 and r5; then the cascade: r1 and
            // r2 (Premium) fail, and the repairs make r3 and then r4 Premium.
            w.told(&mut rt, ReplicaId(0), false, 1.0, "oracle");
            w.told(&mut rt, ReplicaId(1), false, 2.0, "oracle");
            // r1 comes back: the repair gives r4 back to Freemium.
            let n = w.told(&mut rt, ReplicaId(0), true, 20.0, "oracle");
            assert_eq!(rt.role(ReplicaId(3)), Role::F);
            let starts = n
                .iter()
                .filter(|(k, r, d)| *k == EventKind::Recovery && *r == ReplicaId(3) && d.starts_with("slow start"))
                .count();
            assert_eq!(starts, usize::from(ramped), "{recovery:?}: {n:?}");
            let want = if ramped { [1.0, 0.0] } else { [1.0, 1.0] };
            assert_eq!(rt.shares(ReplicaId(3)), want, "{recovery:?}");
            w.tick(&mut rt, 25.0);
            assert_eq!(rt.shares(ReplicaId(3))[1], if ramped { 0.5 } else { 1.0 });
            w.tick(&mut rt, 30.0);
            assert_eq!(rt.shares(ReplicaId(3)), [1.0, 1.0], "{recovery:?}: the ramp ends with the window");
        }
    }

    #[test]
    fn a_freemium_share_of_zero_sends_freemium_elsewhere() {
        let mut rt = router();
        let mut w = Watch::probe(5, Recovery::Probation, HealthConfig::default());
        // r3 (Mixed) fails and returns: it is Mixed again, the least loaded.
        w.evidence(&mut rt, ReplicaId(2), Evidence::Refused, 1.0, "probe");
        w.evidence(&mut rt, ReplicaId(2), Evidence::ProbeOk { ms: 1.0 }, 2.0, "probe");
        for _ in 0..30 {
            assert_ne!(rt.admit(Class::F), Some(ReplicaId(2)), "Freemium waits for the ramp");
        }
        assert!(
            (0..25).any(|_| rt.admit(Class::P) == Some(ReplicaId(2))),
            "Premium may use it at once (once the P role is at theta)"
        );
    }

    #[test]
    fn suspicion_logs_every_transition_and_probation_replaces_the_flat_share() {
        let cfg = HealthConfig { stability_window_s: 4.0, ..HealthConfig::default() };
        let mut rt = router();
        let mut w = Watch::suspicion(5, Recovery::Probation, cfg);
        let mut notes = Vec::new();
        for t in 0..3 {
            notes.extend(w.evidence(&mut rt, ReplicaId(1), Evidence::ProbeTimeout, f64::from(t), "probe"));
        }
        assert_eq!(kinds(&notes), ["health", "health", "detect"]);
        assert_eq!(notes[1].2, "SUSPECT->ISOLATED (timeouts in a row)");
        assert!(!rt.is_healthy(ReplicaId(1)));
        let n = w.evidence(&mut rt, ReplicaId(1), Evidence::ProbeOk { ms: 1.0 }, 10.0, "probe");
        assert_eq!(kinds(&n), ["health", "detect", "recovery"]);
        assert_eq!(w.state(ReplicaId(1)), Some(Health::Recovering));
        assert_eq!(rt.shares(ReplicaId(1)), [1.0, 0.0]);
        w.tick(&mut rt, 12.0);
        assert_eq!(rt.shares(ReplicaId(1)), [1.0, 0.5]);
        let n = w.tick(&mut rt, 14.0);
        assert_eq!(kinds(&n), ["health", "recovery"]);
        assert_eq!(w.state(ReplicaId(1)), Some(Health::Healthy));
        assert_eq!(rt.shares(ReplicaId(1)), [1.0, 1.0]);
    }

    #[test]
    fn without_probation_recovering_gets_the_flat_probation_share() {
        let cfg = HealthConfig::default();
        let mut rt = router();
        let mut w = Watch::suspicion(5, Recovery::None, cfg);
        w.evidence(&mut rt, ReplicaId(1), Evidence::Refused, 0.0, "probe");
        w.evidence(&mut rt, ReplicaId(1), Evidence::ProbeOk { ms: 1.0 }, 5.0, "probe");
        assert_eq!(rt.shares(ReplicaId(1)), [cfg.probation_share; 2]);
    }
}
