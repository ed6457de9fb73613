//! The recovery ledger (issue 9): a replica process starting again is not
//! the service recovering. For every fault this measures, from the moment
//! the fault was injected, how long it took to detect, to isolate, until the
//! replica accepted connections again, until each class's p95 was back
//! within 10% of its baseline, and until the backlog of delayed sessions was
//! drained (the age of the oldest waiting session back to its baseline).
//! Pure: it reads series and transitions the backends recorded.

use super::health::{Health, Transition};
use super::metrics::{EventRow, RunMetrics};
use super::model::{parse_replica, Action, Class, FaultEvent, ReplicaId};
use serde::{Deserialize, Serialize};

/// How far above baseline a p95 or backlog age may be and count as recovered.
pub const WITHIN: f64 = 1.10;
/// Consecutive samples that must hold before a series counts as recovered,
/// so one lucky second does not end an outage.
pub const HOLD: usize = 3;
/// A band of 10% around a near-zero baseline is noise: a series within this
/// many milliseconds of its baseline counts as recovered too.
pub const FLOOR_MS: f64 = 100.0;

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
    /// Longest wait (ms) of a query started in each second, and its
    /// baseline; recovered within 10% or [`FLOOR_MS`] of it.
    pub backlog: (&'a Series, f64),
}

/// The ledger entry of one fault; every duration counts from `at_s`, and
/// `None` means "not within the run".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The replica the fault hit.
    pub replica: String,
    /// The fault's action (`Down`, `Pause`, `Slow 0.25`, `Partition`).
    pub action: String,
    /// When the fault was injected, seconds from run start.
    pub at_s: f64,
    /// When the action that ended it ran (`Rejoin`, `Resume`, `Restore`,
    /// `Heal`), if it did.
    pub ended_s: Option<f64>,
    /// Until the router's view of the replica first changed.
    pub detect_s: Option<f64>,
    /// Until the router stopped sending it new sessions.
    pub isolate_s: Option<f64>,
    /// Until it was seen answering again after the fault ended.
    pub accepts_again_s: Option<f64>,
    /// Until Premium's per-second p95 was back within 10% of its baseline
    /// for HOLD seconds in a row (looked for from the fault's end on; the
    /// duration still counts from `at_s`).
    pub premium_p95_back_s: Option<f64>,
    /// The same for Freemium.
    pub freemium_p95_back_s: Option<f64>,
    /// Until the longest wait of newly started queries was back to its baseline.
    pub backlog_drained_s: Option<f64>,
}

impl Entry {
    /// The time a class's p95 came back, by class.
    pub fn p95_back(&self, class: Class) -> Option<f64> {
        match class {
            Class::P => self.premium_p95_back_s,
            Class::F => self.freemium_p95_back_s,
        }
    }
}

/// The ledger of every fault, in fault order.
pub fn ledger(faults: &[Fault], seen: &Observed) -> Vec<Entry> {
    faults.iter().map(|f| entry(f, seen)).collect()
}

/// Pairs each fault (Down, Pause, Slow, Partition) with the action that
/// ends it (Rejoin, Resume, Restore, Heal) on the same replica, if any.
pub fn faults_of(events: &[FaultEvent]) -> Vec<(Fault, Action)> {
    events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let end = e.action.ended_by()?;
            let ended_s = events[i + 1..].iter().find(|n| n.replica == e.replica && n.action == end).map(|n| n.t_s);
            Some((Fault { replica: e.replica, at_s: e.t_s, ended_s }, e.action))
        })
        .collect()
}

/// The router-view transitions a run logged: the health machine's own
/// (`health` events) or, without it, the up/down verdicts (`detect`).
pub fn transitions_of(events: &[EventRow], replicas: usize) -> Vec<Seen> {
    let machine = events.iter().any(|e| e.kind == "health");
    events
        .iter()
        .filter_map(|e| {
            let replica = parse_replica(&e.replica, replicas).ok()?;
            let (from, to) = match (machine, e.kind.as_str()) {
                (true, "health") => parse_health(&e.detail)?,
                (false, "detect") if e.detail.starts_with("down") => (Health::Healthy, Health::Isolated),
                (false, "detect") if e.detail.starts_with("up") => (Health::Isolated, Health::Healthy),
                _ => return None,
            };
            Some(Seen { replica, transition: Transition { at_s: e.t_s, from, to, reason: "logged" } })
        })
        .collect()
}

fn parse_health(detail: &str) -> Option<(Health, Health)> {
    let arrow = detail.split_whitespace().next()?;
    let (from, to) = arrow.split_once("->")?;
    let state = |s: &str| serde_json::from_value::<Health>(serde_json::Value::String(s.to_string())).ok();
    Some((state(from)?, state(to)?))
}

/// The ledger of a finished run: baselines are the `baseline` phase's p95
/// per class and the median per-second backlog of that phase.
pub fn of_run(faults: &[FaultEvent], m: &RunMetrics, replicas: usize) -> Vec<Entry> {
    let Some(base) = m.phases.iter().find(|p| p.phase == "baseline") else { return Vec::new() };
    let series = |c: Class| -> Vec<(f64, Option<f64>)> {
        m.timeseries.iter().filter(|r| r.class == c).map(|r| (f64::from(r.t_s), r.p95_ms)).collect()
    };
    let p95_base = |c: Class| m.phases.iter().find(|p| p.phase == base.phase && p.class == c).and_then(|p| p.p95_ms);
    let mut waits: Vec<f64> =
        m.backlog.iter().filter(|(t, _)| (base.start_s..base.end_s).contains(t)).filter_map(|(_, v)| *v).collect();
    waits.sort_by(f64::total_cmp);
    let backlog_base = waits.get(waits.len() / 2).copied().unwrap_or(0.0);
    let (ps, fs) = (series(Class::P), series(Class::F));
    let transitions = transitions_of(&m.events, replicas);
    let seen = Observed {
        transitions: &transitions,
        p95: [(&ps, p95_base(Class::P).unwrap_or(f64::INFINITY)), (&fs, p95_base(Class::F).unwrap_or(f64::INFINITY))],
        backlog: (&m.backlog, backlog_base),
    };
    let pairs = faults_of(faults);
    let faults: Vec<Fault> = pairs.iter().map(|(f, _)| *f).collect();
    ledger(&faults, &seen).into_iter().zip(pairs).map(|(mut e, (_, a))| {
        e.action = a.to_string();
        e
    }).collect()
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
    let p95 = |i: usize| since(settled(seen.p95[i].0, start, seen.p95[i].1 * WITHIN));
    let backlog_limit = (seen.backlog.1 * WITHIN).max(seen.backlog.1 + FLOOR_MS);
    Entry {
        replica: super::model::replica_name(f.replica),
        action: String::new(),
        at_s: f.at_s,
        ended_s: f.ended_s,
        detect_s: since(detect),
        isolate_s: since(isolate),
        accepts_again_s: since(back),
        premium_p95_back_s: p95(0),
        freemium_p95_back_s: p95(1),
        backlog_drained_s: since(settled(seen.backlog.0, start, backlog_limit)),
    }
}

/// The first time at or after `from` that starts [`HOLD`] consecutive
/// samples with data, each at most `limit`.
pub fn settled(series: &Series, from: f64, limit: f64) -> Option<f64> {
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
        let backlog = series(&(0..40).map(|i| if (10..28).contains(&i) { 9000.0 } else { 500.0 }).collect::<Vec<_>>());
        let (ps, fs) = (series(&p), series(&f));
        let seen = Observed { transitions: &transitions, p95: [(&ps, 40.0), (&fs, 1000.0)], backlog: (&backlog, 500.0) };
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
    fn every_fault_pairs_with_the_action_that_ends_it() {
        let ev = |t_s, replica, action| FaultEvent { t_s, replica, action };
        let events = [
            ev(10.0, 0, Action::Slow(0.25)),
            ev(12.0, 1, Action::Partition),
            ev(14.0, 0, Action::Pause),
            ev(16.0, 0, Action::Resume),
            ev(18.0, 1, Action::Heal),
            ev(20.0, 0, Action::Restore),
            ev(22.0, 2, Action::Down),
        ];
        let got: Vec<_> = faults_of(&events).into_iter().map(|(f, a)| (f.replica, a, f.at_s, f.ended_s)).collect();
        assert_eq!(
            got,
            vec![
                (0, Action::Slow(0.25), 10.0, Some(20.0)),
                (1, Action::Partition, 12.0, Some(18.0)),
                (0, Action::Pause, 14.0, Some(16.0)),
                (2, Action::Down, 22.0, None),
            ]
        );
    }

    #[test]
    fn a_series_that_never_settles_has_no_time() {
        let s = series(&[100.0, 30.0, 30.0, 100.0, 30.0]);
        assert_eq!(settled(&s, 0.0, 33.0), None);
        assert_eq!(settled(&s, 0.0, 100.0), Some(0.0));
        assert_eq!(settled(&s, 1.0, 100.0), Some(1.0), "from is honoured");
    }

    #[test]
    fn suspicion_outside_any_fault_is_false() {
        use Health::*;
        let faults = [Fault { replica: 0, at_s: 10.0, ended_s: Some(20.0) }];
        let t = [tr(0, 11.0, Healthy, Suspect), tr(0, 25.0, Healthy, Suspect), tr(1, 12.0, Healthy, Isolated), tr(0, 26.0, Suspect, Healthy)];
        assert_eq!(false_suspicions(&faults, &t), 2);
    }
}
