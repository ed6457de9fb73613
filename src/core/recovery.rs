//! The recovery ledger (issue 9): a replica process starting again is not
//! the service recovering. For every fault this measures, from the moment
//! the fault was injected, how long it took to detect, to isolate, until the
//! replica accepted connections again, until each class's p95 was back
//! within 10% of its baseline, and until the backlog of delayed sessions was
//! drained (the age of the oldest waiting session back to its baseline).
//! Pure: it reads series and transitions the backends recorded.

use super::health::{Health, Transition};
use super::model::{Class, ReplicaId};
use serde::Serialize;

/// How far above baseline a p95 or backlog age may be and count as recovered.
pub const WITHIN: f64 = 1.10;
/// Consecutive samples that must hold before a series counts as recovered,
/// so one lucky second does not end an outage.
pub const HOLD: usize = 3;

/// One injected fault and, if any, the action that ended it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fault {
    pub replica: ReplicaId,
    pub at_s: f64,
    pub ended_s: Option<f64>,
}

/// A state change of one replica's health machine.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    pub replica: ReplicaId,
    pub transition: Transition,
}

/// A per-second series: `(t_s, value)`, `None` where the second had no data.
pub type Series = [(f64, Option<f64>)];

/// What the ledger needs of a run besides the faults.
pub struct Observed<'a> {
    pub transitions: &'a [Seen],
    /// Per class (P, F): p95 per second and the baseline phase's p95.
    pub p95: [(&'a Series, f64); 2],
    /// Age of the oldest waiting session per second, and its baseline.
    pub backlog: (&'a Series, f64),
}

/// The ledger entry of one fault; every duration counts from `at_s`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Entry {
    pub replica: String,
    pub at_s: f64,
    pub detect_s: Option<f64>,
    pub isolate_s: Option<f64>,
    pub accepts_again_s: Option<f64>,
    pub p95_back_s: [Option<f64>; 2],
    pub backlog_drained_s: Option<f64>,
}

impl Entry {
    /// The time a class's p95 came back, by class.
    pub fn p95_back(&self, class: Class) -> Option<f64> {
        self.p95_back_s[class.idx()]
    }
}

/// The ledger of every fault, in fault order.
pub fn ledger(faults: &[Fault], seen: &Observed) -> Vec<Entry> {
    faults.iter().map(|f| entry(f, seen)).collect()
}

fn entry(f: &Fault, seen: &Observed) -> Entry {
    let mine = |pred: &dyn Fn(&Transition) -> bool| {
        seen.transitions
            .iter()
            .filter(|s| s.replica == f.replica && s.transition.at_s >= f.at_s && pred(&s.transition))
            .map(|s| s.transition.at_s)
            .next()
    };
    let detect = mine(&|t| t.from == Health::Healthy);
    let isolate = mine(&|t| t.to == Health::Isolated);
    let back = f.ended_s.and_then(|end| {
        mine(&|t| t.at_s >= end && t.from == Health::Isolated).or_else(|| isolate.is_none().then_some(end))
    });
    let since = |t: Option<f64>| t.map(|t| round3(t - f.at_s));
    let start = f.ended_s.unwrap_or(f.at_s);
    let p95 = |i: usize| since(settled(seen.p95[i].0, start, seen.p95[i].1));
    Entry {
        replica: super::model::replica_name(f.replica),
        at_s: f.at_s,
        detect_s: since(detect),
        isolate_s: since(isolate),
        accepts_again_s: since(back),
        p95_back_s: [p95(0), p95(1)],
        backlog_drained_s: since(settled(seen.backlog.0, start, seen.backlog.1)),
    }
}

/// The first time at or after `from` that starts [`HOLD`] consecutive
/// samples with data, each within [`WITHIN`] x `baseline`.
pub fn settled(series: &Series, from: f64, baseline: f64) -> Option<f64> {
    let limit = baseline * WITHIN;
    let points: Vec<(f64, f64)> =
        series.iter().filter(|(t, _)| *t >= from).filter_map(|&(t, v)| v.map(|v| (t, v))).collect();
    points.windows(HOLD).find(|w| w.iter().all(|&(_, v)| v <= limit)).map(|w| w[0].0)
}

/// Transitions to SUSPECT or ISOLATED on a replica that had no fault open
/// at that moment: the detector suspected a healthy replica.
pub fn false_suspicions(faults: &[Fault], transitions: &[Seen]) -> usize {
    let open = |r: ReplicaId, t: f64| faults.iter().any(|f| f.replica == r && f.at_s <= t && f.ended_s.map_or(true, |e| t <= e));
    transitions
        .iter()
        .filter(|s| matches!(s.transition.to, Health::Suspect | Health::Isolated))
        .filter(|s| !open(s.replica, s.transition.at_s))
        .count()
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tr(replica: ReplicaId, at_s: f64, from: Health, to: Health) -> Seen {
        Seen { replica, transition: Transition { at_s, from, to, reason: "test" } }
    }

    fn series(values: &[f64]) -> Vec<(f64, Option<f64>)> {
        values.iter().enumerate().map(|(i, &v)| (i as f64, (v >= 0.0).then_some(v))).collect()
    }

    #[test]
    fn ledger_measures_every_step_from_the_fault() {
        use Health::*;
        let transitions = [
            tr(1, 10.5, Healthy, Suspect),
            tr(1, 12.0, Suspect, Isolated),
            tr(0, 13.0, Healthy, Suspect), // another replica: ignored
            tr(1, 20.4, Isolated, Recovering),
            tr(1, 30.4, Recovering, Healthy),
        ];
        // p95 of P: 40 ms baseline, high until second 24, back from 25 on.
        let mut p = vec![40.0; 10];
        p.extend(vec![500.0; 15]);
        p.extend(vec![42.0; 10]);
        // F: one good second at 22 does not count (needs HOLD in a row), no data at 27.
        let mut f = vec![1000.0; 20];
        f.extend([5000.0, 5000.0, 1000.0, 5000.0, 5000.0, 5000.0, 1050.0, -1.0, 1090.0, 1000.0, 900.0]);
        let backlog = series(&[0.5; 40].iter().enumerate().map(|(i, v)| if (10..28).contains(&i) { 9.0 } else { *v }).collect::<Vec<_>>());
        let (ps, fs) = (series(&p), series(&f));
        let seen = Observed { transitions: &transitions, p95: [(&ps, 40.0), (&fs, 1000.0)], backlog: (&backlog, 0.5) };
        let fault = Fault { replica: 1, at_s: 10.0, ended_s: Some(20.0) };
        let e = &ledger(&[fault], &seen)[0];
        assert_eq!(e.replica, "r2");
        assert_eq!(e.detect_s, Some(0.5));
        assert_eq!(e.isolate_s, Some(2.0));
        assert_eq!(e.accepts_again_s, Some(10.4));
        assert_eq!(e.p95_back(Class::P), Some(15.0), "second 25 starts the first good run");
        assert_eq!(e.p95_back(Class::F), Some(16.0), "the gap at 27 is skipped, not counted as good");
        assert_eq!(e.backlog_drained_s, Some(18.0));
    }

    #[test]
    fn a_series_that_never_settles_has_no_time() {
        let s = series(&[100.0, 30.0, 30.0, 100.0, 30.0]);
        assert_eq!(settled(&s, 0.0, 30.0), None);
        assert_eq!(settled(&s, 0.0, 100.0), Some(0.0));
    }

    #[test]
    fn suspicion_outside_any_fault_is_false() {
        use Health::*;
        let faults = [Fault { replica: 0, at_s: 10.0, ended_s: Some(20.0) }];
        let t = [tr(0, 11.0, Healthy, Suspect), tr(0, 25.0, Healthy, Suspect), tr(1, 12.0, Healthy, Isolated), tr(0, 26.0, Suspect, Healthy)];
        assert_eq!(false_suspicions(&faults, &t), 2);
    }
}
