//! The experiment's own terminal summary, printed before the paper's RQ
//! tables so that any grid (one without premium-fault or rr-split runs
//! too) says what it measured: per cell and class, the baseline's goodput
//! and p95 and the worst phase after it (highest median p95, with its
//! retention), medians across repeats.

use super::figures::num;
use crate::core::phases::BASELINE;
use crate::report::experiment::CellRow;
use std::fmt::Write;

/// The table: one line per (fault, mix, strategy, load) and class.
pub fn render(cells: &[CellRow]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "\ncells: medians over repeats; worst = the phase with the highest p95 after the baseline");
    let _ = writeln!(
        o,
        "  {:<28} {:<2} {:>2}  {:>10} {:>9}  {:<9} {:>9} {:>9}",
        "fault mix strategy", "c", "n", "base q/s", "base p95", "worst", "p95 ms", "retention"
    );
    let mut seen = Vec::new();
    for c in cells {
        let key = (&c.fault, &c.mix, &c.strategy, c.load.map(f64::to_bits), c.class);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let same = |r: &&CellRow| (&r.fault, &r.mix, &r.strategy, r.load.map(f64::to_bits), r.class) == key;
        let rows: Vec<&CellRow> = cells.iter().filter(same).collect();
        let base = rows.iter().find(|r| r.phase == BASELINE);
        let worst = rows
            .iter()
            .filter(|r| r.phase != BASELINE)
            .max_by(|a, b| a.p95_ms.median.unwrap_or(0.0).total_cmp(&b.p95_ms.median.unwrap_or(0.0)));
        let load = c.load.map_or(String::new(), |l| format!(" @{l}"));
        let _ = writeln!(
            o,
            "  {:<28} {:<2} {:>2}  {:>10} {:>9}  {:<9} {:>9} {:>9}",
            format!("{} {} {}{load}", c.fault, c.mix, c.strategy),
            c.class.to_string(),
            c.runs,
            num(base.and_then(|b| b.goodput_qps.median), 1),
            num(base.and_then(|b| b.p95_ms.median), 1),
            worst.map_or("-", |w| w.phase.as_str()),
            num(worst.and_then(|w| w.p95_ms.median), 1),
            num(worst.and_then(|w| w.retention.median), 3),
        );
    }
    o
}
