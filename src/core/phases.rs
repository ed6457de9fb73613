//! Phase cutting (design.md §1): the fault timeline splits a run into a
//! warm-up (ramp and settling, excluded from every figure), the baseline
//! window just before the first fault, then one phase per distinct event
//! time, named by the change (`down1`, `rejoin1`, `slow1`, ...) with its
//! survivors K+ (a slow replica still counts; a down, paused or partitioned
//! one does not).

use super::faults::Open;
use super::model::FaultEvent;
use serde::Serialize;
use std::collections::BTreeMap;

/// Name of the phase that holds the ramp; excluded from figures but counted
/// so that every query belongs to exactly one phase.
pub const WARMUP: &str = "warmup";

/// Name of the steady window before the first fault.
pub const BASELINE: &str = "baseline";

/// One phase of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Phase {
    /// `warmup`, `baseline`, `down1`, `rejoin1`, ...
    pub name: String,
    /// Start, seconds from run start.
    pub start_s: f64,
    /// End (exclusive).
    pub end_s: f64,
    /// Replicas up during the phase (K+).
    pub survivors: usize,
}

impl Phase {
    /// Phase length in seconds.
    pub fn len_s(&self) -> f64 {
        self.end_s - self.start_s
    }
}

/// Cuts `[0, duration_s)` into phases. With no events the baseline runs
/// from the end of the ramp to the end of the run. Times are already scaled.
pub fn cut(events: &[FaultEvent], replicas: usize, ramp_s: f64, baseline_s: f64, duration_s: f64) -> Vec<Phase> {
    let first = events.first().map_or(ramp_s, |e| e.t_s - baseline_s).max(0.0);
    let mut phases = vec![
        Phase { name: WARMUP.into(), start_s: 0.0, end_s: first, survivors: replicas },
        Phase {
            name: BASELINE.into(),
            start_s: first,
            end_s: events.first().map_or(duration_s, |e| e.t_s),
            survivors: replicas,
        },
    ];
    let mut open = vec![Open::default(); replicas];
    let mut ordinal: BTreeMap<&str, usize> = BTreeMap::new();
    let mut i = 0;
    while i < events.len() {
        let t = events[i].t_s;
        let mut name = String::new();
        while i < events.len() && events[i].t_s == t {
            let (a, r) = (events[i].action, events[i].replica);
            if let Some(o) = open.get_mut(r.idx()) {
                // Schedules are validated before they are cut.
                let _ = o.apply(a);
            }
            let n = ordinal.entry(a.phase_prefix()).or_default();
            *n += 1;
            if !name.is_empty() {
                name.push('+');
            }
            name.push_str(&format!("{}{n}", a.phase_prefix()));
            i += 1;
        }
        let up = open.iter().filter(|o| o.survivor()).count();
        let end_s = events.get(i).map_or(duration_s, |e| e.t_s);
        phases.push(Phase { name, start_s: t, end_s, survivors: up });
    }
    phases.retain(|p| p.end_s > p.start_s || p.name == BASELINE);
    phases
}

/// Index of the phase containing time `t_s` (the last phase holds `t >= end`).
pub fn locate(phases: &[Phase], t_s: f64) -> usize {
    phases.iter().position(|p| t_s < p.end_s).unwrap_or(phases.len() - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::Action::{self, *};
    use crate::core::model::ReplicaId;

    fn ev(t_s: f64, replica: usize, action: Action) -> FaultEvent {
        FaultEvent { t_s, replica: ReplicaId(replica), action }
    }

    #[test]
    fn cascade_phases() {
        let e = [ev(120.0, 0, Down), ev(150.0, 1, Down), ev(210.0, 0, Rejoin), ev(240.0, 1, Rejoin)];
        let p = cut(&e, 5, 60.0, 30.0, 300.0);
        let names: Vec<_> = p.iter().map(|p| (p.name.as_str(), p.start_s, p.end_s, p.survivors)).collect();
        assert_eq!(
            names,
            vec![
                ("warmup", 0.0, 90.0, 5),
                ("baseline", 90.0, 120.0, 5),
                ("down1", 120.0, 150.0, 4),
                ("down2", 150.0, 210.0, 3),
                ("rejoin1", 210.0, 240.0, 4),
                ("rejoin2", 240.0, 300.0, 5)
            ]
        );
        assert_eq!(locate(&p, 0.0), 0);
        assert_eq!(locate(&p, 150.0), 3);
        assert_eq!(locate(&p, 999.0), 5);
    }

    #[test]
    fn gray_faults_name_phases_and_only_slow_keeps_its_survivor() {
        let e = [
            ev(120.0, 0, Slow(0.25)),
            ev(130.0, 1, Partition),
            ev(140.0, 1, Heal),
            ev(150.0, 0, Restore),
            ev(160.0, 2, Slow(0.5)),
            ev(170.0, 2, Down),
            ev(180.0, 2, Rejoin),
        ];
        let p = cut(&e, 5, 60.0, 30.0, 300.0);
        let names: Vec<_> = p.iter().skip(2).map(|p| (p.name.as_str(), p.survivors)).collect();
        assert_eq!(
            names,
            vec![
                ("slow1", 5),
                ("partition1", 4),
                ("heal1", 5),
                ("restore1", 5),
                ("slow2", 5),
                ("down1", 4),
                ("rejoin1", 5)
            ]
        );
    }

    #[test]
    fn simultaneous_events_share_a_phase_and_none_has_one_baseline() {
        let e = [ev(120.0, 0, Down), ev(120.0, 1, Down)];
        let p = cut(&e, 5, 60.0, 30.0, 300.0);
        assert_eq!(p[2].name, "down1+down2");
        assert_eq!(p[2].survivors, 3);
        let none = cut(&[], 5, 60.0, 30.0, 300.0);
        assert_eq!(none.len(), 2);
        assert_eq!((none[1].start_s, none[1].end_s), (60.0, 300.0));
    }
}
