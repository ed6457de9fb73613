//! `--admission modes` in a run's summary.json, report and terminal
//! (issue 64): how long each mode lasted, the signals and where each
//! threshold comes from, the rejections per phase, class and reason.

use super::plan::Plan;
use crate::core::admission::Sizing;
use crate::core::degradation::{Mode, ModeBooks};
use crate::core::metrics::RunMetrics;
use crate::core::model::{Class, EventKind};
use crate::core::outcome::Verdict;
use crate::core::settings::Admission;
use crate::report::summary::ModesReport;

/// The modes section of a run with `--admission modes`.
pub fn report(plan: &Plan, m: &RunMetrics, books: Option<ModeBooks>) -> Option<ModesReport> {
    if plan.admission == Admission::None {
        return None;
    }
    let d = &plan.workload.degradation;
    let spans = crate::report::charts::mode_spans(&m.events, plan.duration_s);
    let mut time = [0.0; 4];
    for (t0, t1, _, level) in &spans {
        time[*level] += t1 - t0;
    }
    time[0] = (plan.duration_s - time[1..].iter().sum::<f64>()).max(0.0);
    let top = d.top_class();
    let (sizing, from_workload) = Sizing::of(d, &plan.workload, plan.clients, plan.router.replicas);
    let service_from = match from_workload {
        true => format!("the workload's mean {} query CPU cost, as calibrated", top.long()),
        false => "[degradation] service_ms".to_string(),
    };
    let rejections = m
        .phases
        .iter()
        .flat_map(|r| {
            let deadline = r.rejected - r.rejected_full;
            [
                (crate::core::admission::REJECT_DEADLINE, deadline),
                (crate::core::admission::REJECT_FULL, r.rejected_full),
            ]
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(why, n)| (r.phase.clone(), r.class, why.to_string(), n))
        })
        .collect();
    Some(ModesReport {
        time_in_mode_s: Mode::ALL
            .iter()
            .map(|m| (m.name().to_string(), (time[m.idx()] * 10.0).round() / 10.0))
            .collect(),
        transitions: m.events.iter().filter(|e| e.kind == EventKind::Mode).count() as u64,
        thresholds: d.thresholds(plan.time_scale),
        signals: signals(top),
        statement_slots: d.statement_slots,
        replica_sessions: sizing.replica_sessions,
        saturation: d.saturation,
        service_ms: (sizing.service_ms * 1000.0).round() / 1000.0,
        service_from,
        rejections,
        books: books.map(|b| ModeBooks {
            longest_clear_s: (b.longest_clear_s * 10.0).round() / 10.0,
            held_s: (b.held_s * 10.0).round() / 10.0,
        }),
    })
}

/// What each signal measures and where its threshold comes from.
fn signals(top: Class) -> Vec<(String, String)> {
    let t = top.long();
    [
        ("cpu", format!("mean CPU of the healthy replicas of {t}'s own role (every healthy replica under rr and lc), per second, over the saturation point; the seed's CPU thresholds")),
        ("wait", format!("{t}'s least query latency from its intended send over each second, read as the utilisation it implies on a processor-sharing replica (1 - service / latency); the seed's CPU thresholds")),
        ("memory", "the highest replica's memory in use over its cgroup's limit or the host's memory (local replicas; none on the simulator, docker or external); the seed's memory thresholds".to_string()),
        ("queue", format!("{t} sessions waiting for admission, retries left out; the seed's queue thresholds")),
        ("held", "lower-class work held back since the last second (a statement at its limit, a session waiting): the mode is not left while the shedding, not the demand, clears the signals".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// The informational `degradation` verdict: time in each mode,
/// transitions and rejections per class.
pub fn verdict(r: &ModesReport) -> Verdict {
    let time: Vec<String> =
        r.time_in_mode_s.iter().filter(|(_, t)| *t > 0.0).map(|(n, t)| format!("{n} {t:.1} s")).collect();
    let rejected = |c: Class| r.rejections.iter().filter(|x| x.1 == c).map(|x| x.3).sum::<u64>();
    Verdict {
        name: "degradation".into(),
        ok: true,
        detail: format!(
            "time in mode: {}; {} transitions; rejected sessions: Premium {}, Freemium {}{}",
            time.join(", "),
            r.transitions,
            rejected(Class::P),
            rejected(Class::F),
            r.books.map_or(String::new(), |b| format!(
                "; held by shedding alone {:.0} s, longest with every signal clear {:.0} s",
                b.held_s, b.longest_clear_s
            ))
        ),
    }
}
