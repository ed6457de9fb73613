//! An experiment folder's aggregate files (design.md §4 "Repeats";
//! docs/manual.md, "Subcommands"): the model of `experiment.json` (the
//! grid, every run, and the medians and quartiles per cell) and the
//! `experiment.csv` contract. Written by `plbbench experiment`, read back
//! by `compare` and the archive, as `summary` is for one run.

use crate::core::metrics::PhaseRow;
use crate::core::model::Class;
use crate::report::summary::Settings;
use crate::stats::Spread;
use serde::{Deserialize, Serialize};

/// One run of the experiment, as listed in experiment.json.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunEntry {
    /// Folder relative to the experiment folder.
    pub dir: String,
    /// Fault preset or file.
    pub fault: String,
    /// Mix `P:F`.
    pub mix: String,
    /// Strategy.
    pub strategy: String,
    /// Repeat number, from 1.
    pub repeat: u32,
    /// Seed of the run.
    pub seed: u64,
    /// Wall-clock seconds the run took.
    pub wall_s: f64,
    /// True when the run was kept from an earlier, interrupted invocation.
    pub reused: bool,
    /// The checks it failed, when that left it out of every aggregate
    /// (`--checks fail`); empty in files from before runs were excluded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<String>,
}

/// Median and quartiles of one (fault, mix, strategy, phase, class) across repeats.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CellRow {
    /// Fault preset or file.
    pub fault: String,
    /// Mix `P:F`.
    pub mix: String,
    /// Strategy.
    pub strategy: String,
    /// Offered load (`--loads`), when the experiment has that axis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<f64>,
    /// Phase name (warm-up excluded).
    pub phase: String,
    /// Survivors K+ in the phase.
    pub survivors: usize,
    /// Class.
    pub class: Class,
    /// Runs of this cell.
    pub runs: usize,
    /// Goodput, queries/s.
    pub goodput_qps: Spread,
    /// Goodput relative to the class's baseline.
    pub retention: Spread,
    /// p95 latency, ms.
    pub p95_ms: Spread,
    /// p95 relative to the class's baseline.
    pub inflation_p95: Spread,
    /// Mean session lifetime, s.
    pub lifetime_mean_s: Spread,
    /// u_mean over available replicas.
    pub cpu_mean: Spread,
    /// CV of u over available replicas.
    pub cpu_cv: Spread,
}

/// Decimal places of every median and quartile in experiment.json/csv
/// (per-run figures carry 4; interpolated quartiles may need one or two more).
pub const DECIMALS: i32 = 6;

/// The figures aggregated in experiment.csv, in column order.
pub const METRICS: [&str; 7] =
    ["goodput_qps", "retention", "p95_ms", "inflation_p95", "lifetime_mean_s", "cpu_mean", "cpu_cv"];

/// The per-run value of metric `name` (one of [`METRICS`]).
pub fn metric(row: &PhaseRow, name: &str) -> Option<f64> {
    match name {
        "goodput_qps" => Some(row.goodput_qps),
        "retention" => row.retention,
        "p95_ms" => row.p95_ms,
        "inflation_p95" => row.inflation_p95,
        "lifetime_mean_s" => row.lifetime_mean_s,
        "cpu_mean" => row.cpu_mean,
        "cpu_cv" => row.cpu_cv,
        _ => None,
    }
}

impl CellRow {
    /// The spread of metric `name` (one of [`METRICS`]).
    pub fn spread(&self, name: &str) -> Spread {
        match name {
            "goodput_qps" => self.goodput_qps,
            "retention" => self.retention,
            "p95_ms" => self.p95_ms,
            "inflation_p95" => self.inflation_p95,
            "lifetime_mean_s" => self.lifetime_mean_s,
            "cpu_mean" => self.cpu_mean,
            "cpu_cv" => self.cpu_cv,
            _ => Spread::default(),
        }
    }
}

/// The header of experiment.csv (a public contract: add at the end, never rename).
pub fn csv_header() -> Vec<String> {
    let mut h: Vec<String> =
        ["fault", "mix", "strategy", "phase", "survivors", "class", "runs"].iter().map(|s| s.to_string()).collect();
    for m in METRICS {
        for s in ["median", "q1", "q3", "n"] {
            h.push(format!("{m}_{s}"));
        }
    }
    h
}

/// experiment.json.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExperimentFile {
    /// Format version ([`super::version::EXPERIMENT`]); 0 in a file from
    /// before versioning.
    #[serde(default)]
    pub schema_version: u32,
    /// plbbench version.
    pub plbbench_version: String,
    /// Quantile definition of every q1/median/q3.
    pub quantiles: String,
    /// Strategies, in grid order.
    pub strategies: Vec<String>,
    /// Mixes, in grid order.
    pub mixes: Vec<String>,
    /// Fault presets or files, in grid order.
    pub faults: Vec<String>,
    /// Repeats per cell.
    pub repeat: u32,
    /// The settings every run shares (those of the first run; strategy, mix, faults and seed vary).
    pub settings: Settings,
    /// Every run, in execution order.
    pub runs: Vec<RunEntry>,
    /// Medians and quartiles per fault, mix, strategy, phase and class.
    pub cells: Vec<CellRow>,
}

/// experiment.csv: [`csv_header`] then one row per [`CellRow`]; a missing
/// value is an empty field, numbers at full precision.
pub fn experiment_csv(rows: &[CellRow]) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    // The load column is there only when the experiment has that axis
    // (`--loads`), last, so the columns before it never move.
    let loads = rows.iter().any(|r| r.load.is_some());
    let mut header = csv_header();
    if loads {
        header.push("load".into());
    }
    w.write_record(header)?;
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    for r in rows {
        let mut rec = vec![
            r.fault.clone(),
            r.mix.clone(),
            r.strategy.clone(),
            r.phase.clone(),
            r.survivors.to_string(),
            r.class.to_string(),
            r.runs.to_string(),
        ];
        for m in METRICS {
            let s = r.spread(m);
            rec.extend([opt(s.median), opt(s.q1), opt(s.q3), s.n.to_string()]);
        }
        if loads {
            rec.push(opt(r.load));
        }
        w.write_record(&rec)?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_header_is_the_contract() {
        let h = csv_header().join(",");
        assert!(h.starts_with("fault,mix,strategy,phase,survivors,class,runs,goodput_qps_median,goodput_qps_q1"));
        assert!(h.contains(",goodput_qps_q3,goodput_qps_n,retention_median,"));
        assert!(h.ends_with("cpu_cv_median,cpu_cv_q1,cpu_cv_q3,cpu_cv_n"));
        assert_eq!(csv_header().len(), 7 + 4 * METRICS.len());
    }
}
