//! recovery.csv (docs/resilience.md, "The recovery ledger"): the recovery
//! ledger across repeats. For every (fault, mix, strategy variant) and
//! every fault of the schedule (by its position: the cascade's first and
//! second Down are different faults), the median and quartiles of each
//! ledger figure over the repeats, with how many repeats had a value (a
//! step that never happened within a run counts as missing, so `n` below
//! the runs says how often it did not). Per run, the detector's false
//! suspicions and removals get one row per cell with the fault columns
//! empty. Pure, apart from the CSV text.

use crate::core::recovery::Entry;
use crate::report::summary::Summary;
use crate::stats::Spread;

/// The ledger figures, in column order.
pub const FIGURES: [&str; 10] = [
    "detect_s",
    "isolate_s",
    "accepts_again_s",
    "premium_p95_back_s",
    "freemium_p95_back_s",
    "backlog_drained_s",
    "full_service_s",
    "sessions_shifted",
    "retries",
    "false_suspicions",
];

/// One row: a fault of one cell (or the cell's detector row).
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub fault: String,
    pub mix: String,
    pub strategy: String,
    /// 1-based position of the fault in the schedule; 0 for the detector row.
    pub index: usize,
    /// `r2 Down`, or empty for the detector row.
    pub what: String,
    pub runs: usize,
    /// One spread per [`FIGURES`] entry.
    pub spreads: Vec<Spread>,
}

fn figure(e: &Entry, name: &str) -> Option<f64> {
    match name {
        "detect_s" => e.detect_s,
        "isolate_s" => e.isolate_s,
        "accepts_again_s" => e.accepts_again_s,
        "premium_p95_back_s" => e.premium_p95_back_s,
        "freemium_p95_back_s" => e.freemium_p95_back_s,
        "backlog_drained_s" => e.backlog_drained_s,
        "full_service_s" => e.full_service_s,
        "sessions_shifted" => e.sessions_shifted.map(|v| v as f64),
        "retries" => e.retries.map(|v| v as f64),
        _ => None,
    }
}

/// The rows of every cell, in order of first appearance.
pub fn rows(summaries: &[Summary]) -> Vec<Row> {
    let mut out = Vec::new();
    for ((fault, mix, strategy, _), group) in super::by_cell(summaries) {
        let row = |index: usize, what: String, spreads: Vec<Spread>| Row {
            fault: fault.clone(),
            mix: mix.clone(),
            strategy: strategy.clone(),
            index,
            what,
            runs: group.len(),
            spreads,
        };
        let faults = group.iter().map(|s| s.recovery.len()).max().unwrap_or(0);
        for i in 0..faults {
            let first = group.iter().find_map(|s| s.recovery.get(i)).expect("some run has fault i");
            let spreads = FIGURES
                .iter()
                .map(|f| {
                    Spread::of_options(group.iter().map(|s| s.recovery.get(i).and_then(|e| figure(e, f)))).rounded(3)
                })
                .collect();
            out.push(row(i + 1, format!("{} {}", first.replica, first.action), spreads));
        }
        let mut spreads = vec![Spread::of(&[]); FIGURES.len()];
        spreads[FIGURES.len() - 1] =
            Spread::of_options(group.iter().map(|s| s.detector.as_ref().map(|d| d.false_suspicions as f64)));
        out.push(row(0, "detector".into(), spreads));
    }
    out
}

/// recovery.csv: a header, then one row per [`Row`]; a missing value is an
/// empty field.
pub fn csv(rows: &[Row]) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> =
        ["fault", "mix", "strategy", "index", "what", "runs"].iter().map(|s| s.to_string()).collect();
    for f in FIGURES {
        header.extend(["median", "q1", "q3", "n"].iter().map(|q| format!("{f}_{q}")));
    }
    w.write_record(&header)?;
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    for r in rows {
        let mut rec = vec![
            r.fault.clone(),
            r.mix.clone(),
            r.strategy.clone(),
            r.index.to_string(),
            r.what.clone(),
            r.runs.to_string(),
        ];
        for s in &r.spreads {
            rec.extend([opt(s.median), opt(s.q1), opt(s.q3), s.n.to_string()]);
        }
        w.write_record(&rec)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}
