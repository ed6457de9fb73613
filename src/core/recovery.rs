//! The recovery ledger (docs/resilience.md, "The recovery ledger"): a
//! replica process starting again is not the service recovering. For every
//! fault this measures, from the moment the fault was injected, how long it
//! took to detect, to isolate, until the replica accepted connections
//! again, until each class's p95 was back within 10% of its baseline, and
//! until the backlog of delayed sessions was drained (the age of the oldest
//! waiting session back to its baseline). It also counts what the fault
//! cost in traffic: the new sessions the router sent elsewhere (sessions
//! shifted) and the sessions that broke on the replica and were retried
//! (retries created); and, per run, how often the detector suspected a
//! replica that had no fault (false suspicions), which is what a fast
//! detector pays in capacity and shifted traffic. Pure: it reads series and
//! transitions the backends recorded.

use super::health::{Health, Transition};
use super::metrics::{EventRow, Flow, RunMetrics};
use super::model::{parse_replica, Action, Class, EventKind, FaultEvent, ReplicaId};
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
    /// Per second, per replica: session starts and aborts.
    pub flow: &'a [Vec<Flow>],
    /// Each replica's share of all session starts in the baseline phase;
    /// empty when the baseline started no session (nothing to expect).
    pub share: &'a [f64],
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
    /// Until the router had the replica back in full service: its view was
    /// HEALTHY again after the fault ended (the health machine's
    /// RECOVERING -> HEALTHY, or the detector's `up`); the fault's end when
    /// the router never changed its view. Ends the window over which
    /// `sessions_shifted` and `retries` are counted; `None`: not within the
    /// run, and the window runs to the end of the run.
    #[serde(default)]
    pub full_service_s: Option<f64>,
    /// New sessions that went to other replicas because of the fault: per
    /// second of the window, the replica's expected starts (its share of all
    /// starts in the baseline phase times all starts that second) minus its
    /// actual starts, where positive, summed and rounded. `None` when the
    /// baseline started no session (or in a summary.json from before this
    /// field).
    #[serde(default)]
    pub sessions_shifted: Option<u64>,
    /// Sessions aborted on the replica during the window, each of which its
    /// client retries elsewhere after a backoff. `None` in a summary.json
    /// from before this field.
    #[serde(default)]
    pub retries: Option<u64>,
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
    let machine = events.iter().any(|e| e.kind == EventKind::Health);
    events
        .iter()
        .filter_map(|e| {
            let replica = parse_replica(&e.replica, replicas).ok()?;
            let (from, to) = match (machine, e.kind) {
                (true, EventKind::Health) => parse_health(&e.detail)?,
                (false, EventKind::Detect) if e.detail.starts_with("down") => (Health::Healthy, Health::Isolated),
                (false, EventKind::Detect) if e.detail.starts_with("up") => (Health::Isolated, Health::Healthy),
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

/// When the router had replica `f.replica` back in full service after `f`:
/// the fault's end if its view was HEALTHY then, else the first later
/// transition to HEALTHY; `None` if the fault never ended or the replica
/// never came back within the run.
pub fn full_service(f: &Fault, transitions: &[Seen]) -> Option<f64> {
    let end = f.ended_s?;
    let mine = || transitions.iter().filter(|s| s.replica == f.replica);
    let at_end = mine().rfind(|s| s.transition.at_s <= end).map_or(Health::Healthy, |s| s.transition.to);
    if at_end == Health::Healthy {
        return Some(end);
    }
    mine().find(|s| s.transition.at_s > end && s.transition.to == Health::Healthy).map(|s| s.transition.at_s)
}

/// The seconds of `flow` that overlap `[from, to)`.
fn overlapping(flow: &[Vec<Flow>], from: f64, to: f64) -> std::ops::Range<usize> {
    let first = (from.max(0.0).floor() as usize).min(flow.len());
    first..(to.max(0.0).ceil() as usize).clamp(first, flow.len())
}

fn started(row: &[Flow], r: ReplicaId) -> f64 {
    f64::from(row.get(r.idx()).map_or(0, |f| f.started))
}

/// Each replica's share of all session starts in the seconds wholly inside
/// `[from, to)`; `None` when there were none.
pub fn shares(flow: &[Vec<Flow>], from: f64, to: f64, replicas: usize) -> Option<Vec<f64>> {
    let secs = overlapping(flow, from.ceil(), to.floor());
    let per: Vec<f64> =
        (0..replicas).map(|r| flow[secs.clone()].iter().map(|row| started(row, ReplicaId(r))).sum()).collect();
    let all: f64 = flow[secs].iter().flat_map(|row| row.iter()).map(|f| f64::from(f.started)).sum();
    (all > 0.0).then(|| per.iter().map(|n| n / all).collect())
}

/// Sessions shifted away from `r` over the seconds overlapping `[from, to)`:
/// the sum of `max(0, share × all starts − starts on r)`, rounded.
pub fn shifted(flow: &[Vec<Flow>], r: ReplicaId, share: f64, from: f64, to: f64) -> u64 {
    let missing = |row: &Vec<Flow>| {
        let all: f64 = row.iter().map(|f| f64::from(f.started)).sum();
        (share * all - started(row, r)).max(0.0)
    };
    flow[overlapping(flow, from, to)].iter().map(missing).sum::<f64>().round() as u64
}

/// Sessions aborted on `r` in the seconds overlapping `[from, to)`.
pub fn retries(flow: &[Vec<Flow>], r: ReplicaId, from: f64, to: f64) -> u64 {
    flow[overlapping(flow, from, to)].iter().map(|row| u64::from(row.get(r.idx()).map_or(0, |f| f.aborted))).sum()
}

/// The ledger of a finished run: baselines are the `baseline` phase's p95
/// per class, the median per-second backlog of that phase and each
/// replica's share of the session starts in it.
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
    let share = shares(&m.flow, base.start_s, base.end_s, replicas).unwrap_or_default();
    let seen = Observed {
        transitions: &transitions,
        p95: [(&ps, p95_base(Class::P).unwrap_or(f64::INFINITY)), (&fs, p95_base(Class::F).unwrap_or(f64::INFINITY))],
        backlog: (&m.backlog, backlog_base),
        flow: &m.flow,
        share: &share,
    };
    let pairs = faults_of(faults);
    let faults: Vec<Fault> = pairs.iter().map(|(f, _)| *f).collect();
    ledger(&faults, &seen)
        .into_iter()
        .zip(pairs)
        .map(|(mut e, (_, a))| {
            e.action = a.to_string();
            e
        })
        .collect()
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
    let full = full_service(f, seen.transitions);
    let window_end = full.unwrap_or(seen.flow.len() as f64);
    let share = seen.share.get(f.replica.idx()).copied();
    Entry {
        replica: f.replica.to_string(),
        action: String::new(),
        at_s: f.at_s,
        ended_s: f.ended_s,
        detect_s: since(detect),
        isolate_s: since(isolate),
        accepts_again_s: since(back),
        premium_p95_back_s: p95(0),
        freemium_p95_back_s: p95(1),
        backlog_drained_s: since(settled(seen.backlog.0, start, backlog_limit)),
        full_service_s: since(full),
        sessions_shifted: share.map(|s| shifted(seen.flow, f.replica, s, f.at_s, window_end)),
        retries: Some(retries(seen.flow, f.replica, f.at_s, window_end)),
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
    let open =
        |r: ReplicaId, t: f64| faults.iter().any(|f| f.replica == r && f.at_s <= t && f.ended_s.is_none_or(|e| t <= e));
    transitions
        .iter()
        .filter(|s| matches!(s.transition.to, Health::Suspect | Health::Isolated))
        .filter(|s| !open(s.replica, s.transition.at_s))
        .count()
}

/// The run-level detector figures reported next to the ledger.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Suspicions {
    /// Transitions to SUSPECT or ISOLATED (without the health machine: the
    /// detector's `down` verdicts) over the whole run.
    pub suspicions: u64,
    /// Those on a replica with no fault open at that moment
    /// ([`false_suspicions`]): the detector doubted a healthy replica.
    pub false_suspicions: u64,
    /// Of the false suspicions, transitions to ISOLATED: a healthy replica
    /// removed from service, its capacity lost and its traffic shifted.
    pub false_removals: u64,
}

/// The detector figures of a finished run.
pub fn suspicions_of_run(faults: &[FaultEvent], m: &RunMetrics, replicas: usize) -> Suspicions {
    let faults: Vec<Fault> = faults_of(faults).into_iter().map(|(f, _)| f).collect();
    let transitions = transitions_of(&m.events, replicas);
    let doubted = |s: &&Seen| matches!(s.transition.to, Health::Suspect | Health::Isolated);
    let removals: Vec<Seen> = transitions.iter().filter(|s| s.transition.to == Health::Isolated).cloned().collect();
    Suspicions {
        suspicions: transitions.iter().filter(doubted).count() as u64,
        false_suspicions: false_suspicions(&faults, &transitions) as u64,
        false_removals: false_suspicions(&faults, &removals) as u64,
    }
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
            tr(ReplicaId(1), 10.5, Healthy, Suspect),
            tr(ReplicaId(1), 12.0, Suspect, Isolated),
            tr(ReplicaId(0), 13.0, Healthy, Suspect), // another replica: ignored
            tr(ReplicaId(1), 20.4, Isolated, Recovering),
            tr(ReplicaId(1), 30.4, Recovering, Healthy),
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
        let flow = vec![vec![Flow::default(); 2]; 40];
        let seen = Observed {
            transitions: &transitions,
            p95: [(&ps, 40.0), (&fs, 1000.0)],
            backlog: (&backlog, 500.0),
            flow: &flow,
            share: &[],
        };
        let fault = Fault { replica: ReplicaId(1), at_s: 10.0, ended_s: Some(20.0) };
        let e = &ledger(&[fault], &seen)[0];
        assert_eq!(e.replica, "r2");
        assert_eq!(e.detect_s, Some(0.5));
        assert_eq!(e.isolate_s, Some(2.0));
        assert_eq!(e.accepts_again_s, Some(10.4));
        assert_eq!(e.p95_back(Class::P), Some(15.0), "second 25 starts the first good run");
        assert_eq!(e.p95_back(Class::F), Some(16.0), "the gap at 27 is skipped, not counted as good");
        assert_eq!(e.backlog_drained_s, Some(18.0));
        assert_eq!(e.full_service_s, Some(20.4), "RECOVERING -> HEALTHY at 30.4");
        assert_eq!(e.sessions_shifted, None, "no baseline starts, nothing to expect");
        assert_eq!(e.retries, Some(0));
    }

    /// Three replicas starting 2 sessions a second each; r2 (id 1) is down
    /// from 10 to 15, on probation until 20 and healthy again at 20.
    fn traffic() -> (Vec<Vec<Flow>>, Vec<Seen>) {
        use Health::*;
        let f = |started| Flow { started, aborted: 0 };
        let mut flow: Vec<Vec<Flow>> = (0..30)
            .map(|t| match t {
                10..=14 => vec![f(3), f(0), f(3)], // r2 owed 2 a second
                15..=19 => vec![f(2), f(1), f(3)], // owed 1 a second
                _ => vec![f(2), f(2), f(2)],
            })
            .collect();
        flow[9][1].aborted = 1; // before the fault
        flow[10][1].aborted = 4; // the sessions the Down broke
        flow[12][0].aborted = 2; // another replica
        flow[25][1].aborted = 3; // after the window
        let transitions = vec![
            tr(ReplicaId(1), 10.2, Healthy, Suspect),
            tr(ReplicaId(1), 11.0, Suspect, Isolated),
            tr(ReplicaId(1), 15.3, Isolated, Recovering),
            tr(ReplicaId(1), 20.0, Recovering, Healthy),
        ];
        (flow, transitions)
    }

    #[test]
    fn shifted_sessions_are_the_starts_the_replica_was_owed_until_full_service() {
        let (flow, transitions) = traffic();
        let share = shares(&flow, 0.0, 10.0, 3).expect("baseline starts");
        assert_eq!(share, vec![1.0 / 3.0; 3]);
        let (series, backlog) = (series(&[10.0; 30]), series(&[0.0; 30]));
        let seen = Observed {
            transitions: &transitions,
            p95: [(&series, 10.0), (&series, 10.0)],
            backlog: (&backlog, 0.0),
            flow: &flow,
            share: &share,
        };
        let e = &ledger(&[Fault { replica: ReplicaId(1), at_s: 10.0, ended_s: Some(15.0) }], &seen)[0];
        assert_eq!(e.full_service_s, Some(10.0), "healthy again at 20");
        assert_eq!(e.sessions_shifted, Some(5 * 2 + 5), "2 a second while down, 1 while recovering");
        assert_eq!(e.retries, Some(4), "only r2's aborts inside [10, 20)");
        // Another replica gained sessions but lost none: nothing shifted away from it.
        assert_eq!(shifted(&flow, ReplicaId(0), 1.0 / 3.0, 10.0, 20.0), 0);
    }

    #[test]
    fn a_fault_the_router_never_noticed_ends_at_its_end_and_an_endless_one_at_the_run_end() {
        let (flow, _) = traffic();
        let unseen = Fault { replica: ReplicaId(1), at_s: 10.0, ended_s: Some(15.0) };
        assert_eq!(full_service(&unseen, &[]), Some(15.0));
        assert_eq!(shifted(&flow, ReplicaId(1), 1.0 / 3.0, 10.0, 15.0), 10);
        let endless = Fault { replica: ReplicaId(1), at_s: 10.0, ended_s: None };
        assert_eq!(full_service(&endless, &traffic().1), None);
        let share = [1.0 / 3.0; 3];
        let (series, backlog) = (series(&[10.0; 30]), series(&[0.0; 30]));
        let seen = Observed {
            transitions: &[],
            p95: [(&series, 10.0), (&series, 10.0)],
            backlog: (&backlog, 0.0),
            flow: &flow,
            share: &share,
        };
        let e = &ledger(&[endless], &seen)[0];
        assert_eq!(
            (e.full_service_s, e.sessions_shifted, e.retries),
            (None, Some(15), Some(7)),
            "counted to the run's end"
        );
        assert_eq!(shares(&flow, 3.0, 3.5, 3), None, "no whole second, no share");
    }

    #[test]
    fn a_run_reports_its_false_suspicions_and_removals() {
        use crate::core::metrics::{Collector, SessionRecord};
        use crate::core::model::Action;
        let faults = [
            FaultEvent { t_s: 20.0, replica: ReplicaId(0), action: Action::Down },
            FaultEvent { t_s: 30.0, replica: ReplicaId(0), action: Action::Rejoin },
        ];
        let phases = crate::core::phases::cut(&faults, 2, 10.0, 10.0, 40.0);
        let mut c = Collector::new(phases, 2, 1.0, false);
        for t in 10..40 {
            // One start a second on each; r2 takes r1's while r1 is down.
            let down = (20..30).contains(&t);
            let on = if down { [1, 1] } else { [0, 1] };
            for r in on {
                c.session_started(Class::P, ReplicaId(r), f64::from(t) + 0.5);
            }
        }
        c.session_ended(SessionRecord {
            class: Class::P,
            replica: ReplicaId(0),
            start_s: 19.5,
            end_s: 20.0,
            abort: Some(crate::core::model::AbortReason::Query(crate::core::model::QueryError::ConnectionLost)),
        });
        c.event(5.0, EventKind::Health, Some(ReplicaId(1)), "HEALTHY->SUSPECT (slow)"); // false
        c.event(6.0, EventKind::Health, Some(ReplicaId(1)), "SUSPECT->HEALTHY (fast)");
        c.event(20.2, EventKind::Health, Some(ReplicaId(0)), "HEALTHY->SUSPECT (refused)");
        c.event(20.3, EventKind::Health, Some(ReplicaId(0)), "SUSPECT->ISOLATED (refused)");
        c.event(25.0, EventKind::Health, Some(ReplicaId(1)), "HEALTHY->ISOLATED (timeout)"); // false, and a removal
        c.event(30.5, EventKind::Health, Some(ReplicaId(0)), "ISOLATED->RECOVERING (probe)");
        c.event(33.0, EventKind::Health, Some(ReplicaId(0)), "RECOVERING->HEALTHY (stable)");
        let m = c.finish(&|_, _| true, [0, 0]);
        let s = suspicions_of_run(&faults, &m, 2);
        assert_eq!(s, Suspicions { suspicions: 4, false_suspicions: 2, false_removals: 1 });
        let e = &of_run(&faults, &m, 2)[0];
        assert_eq!(e.full_service_s, Some(13.0));
        assert_eq!(e.sessions_shifted, Some(10), "one start a second owed to r1 for the 10 s it was down");
        assert_eq!(e.retries, Some(1));
    }

    #[test]
    fn every_fault_pairs_with_the_action_that_ends_it() {
        let ev = |t_s, replica, action| FaultEvent { t_s, replica, action };
        let events = [
            ev(10.0, ReplicaId(0), Action::Slow(0.25)),
            ev(12.0, ReplicaId(1), Action::Partition),
            ev(14.0, ReplicaId(0), Action::Pause),
            ev(16.0, ReplicaId(0), Action::Resume),
            ev(18.0, ReplicaId(1), Action::Heal),
            ev(20.0, ReplicaId(0), Action::Restore),
            ev(22.0, ReplicaId(2), Action::Down),
        ];
        let got: Vec<_> = faults_of(&events).into_iter().map(|(f, a)| (f.replica, a, f.at_s, f.ended_s)).collect();
        assert_eq!(
            got,
            vec![
                (ReplicaId(0), Action::Slow(0.25), 10.0, Some(20.0)),
                (ReplicaId(1), Action::Partition, 12.0, Some(18.0)),
                (ReplicaId(0), Action::Pause, 14.0, Some(16.0)),
                (ReplicaId(2), Action::Down, 22.0, None),
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
        let faults = [Fault { replica: ReplicaId(0), at_s: 10.0, ended_s: Some(20.0) }];
        let t = [
            tr(ReplicaId(0), 11.0, Healthy, Suspect),
            tr(ReplicaId(0), 25.0, Healthy, Suspect),
            tr(ReplicaId(1), 12.0, Healthy, Isolated),
            tr(ReplicaId(0), 26.0, Suspect, Healthy),
        ];
        assert_eq!(false_suspicions(&faults, &t), 2);
    }
}
