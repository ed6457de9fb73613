//! `plbbench agreement` (design.md §6, "Simulator fidelity"): how well the
//! simulator predicts a real backend, measured as one command. It runs the
//! same experiment grid twice, on the simulator (`<out>/sim`) and on the
//! real backend named by `--cluster` (`<out>/real`), each an ordinary
//! experiment folder (resumable, with its own report), then compares them
//! per (fault, mix, strategy, phase, class): goodput and p95, the median
//! across repeats, and their ratio sim/real. It writes `agreement.csv`,
//! `agreement.md` (the table and the summary fractions) and
//! `agreement.json` (versioned), and prints the summary.
//!
//! A cell agrees in goodput when sim/real lies within 1 +- 25%, in p95
//! when it lies within a factor 1.5 either way: the targets the simulator
//! is held to. A cell without a real median (no completed query) is not
//! comparable and counted apart.

use super::experiment::{self, ExperimentArgs};
use super::run::args::CommonArgs;
use crate::core::model::Class;
use crate::core::settings::ClusterKind;
use crate::error::{input, Error};
use crate::fsutil;
use crate::report::experiment::{CellRow, ExperimentFile};
use anyhow::Context;
use clap::Args;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Goodput agrees when |sim/real - 1| is at most this.
pub const GOODPUT_TOLERANCE: f64 = 0.25;
/// p95 agrees when sim/real lies in [1/F, F].
pub const P95_FACTOR: f64 = 1.5;
/// Version of agreement.json's layout.
pub const SCHEMA_VERSION: u32 = 1;

/// `plbbench agreement`: the grid (defaults: the comparison) and
/// the settings every run of both sides shares.
#[derive(Debug, Args, Clone)]
pub struct AgreementArgs {
    /// Strategies, comma-separated [default: plb,rr-split,rr,lc].
    #[arg(long, value_delimiter = ',', default_value = "plb,rr-split,rr,lc", hide_default_value = true)]
    #[arg(value_name = "LIST")]
    pub strategies: Vec<String>,
    /// Premium:Freemium mixes, comma-separated [default: 25:75].
    #[arg(long, value_delimiter = ',', default_value = "25:75", hide_default_value = true, value_name = "P:F,..")]
    pub mixes: Vec<String>,
    /// Fault presets or schedule files, comma-separated [default: cascade].
    #[arg(long, value_delimiter = ',', default_value = "cascade", hide_default_value = true, value_name = "LIST")]
    pub faults: Vec<String>,
    /// Repeats of every cell on each side; repeat k uses seed --seed + k - 1 [default: 3].
    #[arg(long, default_value_t = 3, hide_default_value = true, value_name = "N")]
    pub repeat: u32,
    /// Agreement folder (sim/ and real/ experiments inside); an existing one is resumed [default: reports/<utc-timestamp>-agreement].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Settings passed to every run; --cluster names the real side (local, docker or external).
    #[command(flatten)]
    pub common: CommonArgs,
}

/// One (fault, mix, strategy, phase, class) of the comparison.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgreementRow {
    pub fault: String,
    pub mix: String,
    pub strategy: String,
    pub phase: String,
    pub class: Class,
    /// Median goodput across repeats, queries/s.
    pub real_goodput_qps: Option<f64>,
    pub sim_goodput_qps: Option<f64>,
    /// sim / real goodput.
    pub goodput_ratio: Option<f64>,
    /// Median p95 across repeats, ms.
    pub real_p95_ms: Option<f64>,
    pub sim_p95_ms: Option<f64>,
    /// sim / real p95.
    pub p95_ratio: Option<f64>,
}

/// The summary fractions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fractions {
    /// Cells with both goodput medians (real > 0).
    pub goodput_cells: usize,
    /// Of those, within [`GOODPUT_TOLERANCE`].
    pub goodput_within: usize,
    /// Median |sim/real - 1| of goodput, as a fraction.
    pub goodput_median_abs_diff: Option<f64>,
    /// Cells with both p95 medians (real > 0).
    pub p95_cells: usize,
    /// Of those, within [`P95_FACTOR`].
    pub p95_within: usize,
    /// Median sim/real of p95.
    pub p95_median_ratio: Option<f64>,
}

/// agreement.json.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgreementFile {
    pub schema_version: u32,
    pub plbbench_version: String,
    /// The real side's backend.
    pub real_cluster: String,
    pub goodput_tolerance: f64,
    pub p95_factor: f64,
    pub repeat: u32,
    pub time_scale: f64,
    pub fractions: Fractions,
    pub rows: Vec<AgreementRow>,
}

/// Pairs the real experiment's cells with the simulator's, in the real
/// side's order. Pure.
pub fn compare_cells(real: &[CellRow], sim: &[CellRow]) -> Vec<AgreementRow> {
    let ratio = |s: Option<f64>, r: Option<f64>| match (s, r) {
        (Some(s), Some(r)) if r > 0.0 => Some(s / r),
        _ => None,
    };
    real.iter()
        .map(|r| {
            let s = sim.iter().find(|s| {
                (&s.fault, &s.mix, &s.strategy, &s.phase, s.class) == (&r.fault, &r.mix, &r.strategy, &r.phase, r.class)
            });
            let sg = s.and_then(|s| s.goodput_qps.median);
            let sp = s.and_then(|s| s.p95_ms.median);
            AgreementRow {
                fault: r.fault.clone(),
                mix: r.mix.clone(),
                strategy: r.strategy.clone(),
                phase: r.phase.clone(),
                class: r.class,
                real_goodput_qps: r.goodput_qps.median,
                sim_goodput_qps: sg,
                goodput_ratio: ratio(sg, r.goodput_qps.median),
                real_p95_ms: r.p95_ms.median,
                sim_p95_ms: sp,
                p95_ratio: ratio(sp, r.p95_ms.median),
            }
        })
        .collect()
}

/// The summary fractions of `rows`. Pure.
pub fn fractions(rows: &[AgreementRow]) -> Fractions {
    let g: Vec<f64> = rows.iter().filter_map(|r| r.goodput_ratio).map(|x| (x - 1.0).abs()).collect();
    let p: Vec<f64> = rows.iter().filter_map(|r| r.p95_ratio).collect();
    let median = |v: &[f64]| crate::stats::Spread::of(v).median;
    Fractions {
        goodput_cells: g.len(),
        goodput_within: g.iter().filter(|d| **d <= GOODPUT_TOLERANCE + 1e-12).count(),
        goodput_median_abs_diff: median(&g),
        p95_cells: p.len(),
        p95_within: p.iter().filter(|x| p95_agrees(**x)).count(),
        p95_median_ratio: median(&p),
    }
}

fn p95_agrees(ratio: f64) -> bool {
    (1.0 / P95_FACTOR - 1e-12..=P95_FACTOR + 1e-12).contains(&ratio)
}

/// The summary as sentences, one per line.
pub fn summary_lines(f: &Fractions) -> Vec<String> {
    let pct = |a: usize, b: usize| if b == 0 { 0.0 } else { 100.0 * a as f64 / b as f64 };
    let opt = |v: Option<f64>, scale: f64| v.map_or("-".to_string(), |v| format!("{:.2}", v * scale));
    vec![
        format!(
            "goodput: simulated within {:.0}% of real in {} of {} cells ({:.0}%), median difference {}%",
            GOODPUT_TOLERANCE * 100.0,
            f.goodput_within,
            f.goodput_cells,
            pct(f.goodput_within, f.goodput_cells),
            opt(f.goodput_median_abs_diff, 100.0)
        ),
        format!(
            "p95: simulated within a factor {P95_FACTOR} of real in {} of {} cells ({:.0}%), median sim/real {}",
            f.p95_within,
            f.p95_cells,
            pct(f.p95_within, f.p95_cells),
            opt(f.p95_median_ratio, 1.0)
        ),
    ]
}

fn fmt(v: Option<f64>, decimals: usize) -> String {
    v.map_or(String::new(), |v| format!("{v:.decimals$}"))
}

/// agreement.md: the summary, then the table (cells that miss a target
/// marked). Pure.
pub fn markdown(file: &AgreementFile) -> String {
    let mut out = format!(
        "# Simulator against {} ({} repeats, time scale {})\n\n",
        file.real_cluster, file.repeat, file.time_scale
    );
    for line in summary_lines(&file.fractions) {
        out += &format!("- {line}\n");
    }
    out += "\nMedians across repeats; `*` marks a cell outside its target.\n\n";
    out += "| fault | mix | strategy | phase | class | real goodput q/s | sim goodput q/s | sim/real | real p95 ms | sim p95 ms | sim/real |\n";
    out += "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
    for r in &file.rows {
        let mark = |ok: bool| if ok { "" } else { " *" };
        let g = r.goodput_ratio.map(|x| format!("{x:.2}{}", mark((x - 1.0).abs() <= GOODPUT_TOLERANCE + 1e-12)));
        let p = r.p95_ratio.map(|x| format!("{x:.2}{}", mark(p95_agrees(x))));
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.fault,
            r.mix,
            r.strategy,
            r.phase,
            r.class,
            fmt(r.real_goodput_qps, 1),
            fmt(r.sim_goodput_qps, 1),
            g.unwrap_or_default(),
            fmt(r.real_p95_ms, 1),
            fmt(r.sim_p95_ms, 1),
            p.unwrap_or_default()
        );
    }
    out
}

/// agreement.csv, one row per cell. Pure.
pub fn csv(rows: &[AgreementRow]) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "fault",
        "mix",
        "strategy",
        "phase",
        "class",
        "real_goodput_qps",
        "sim_goodput_qps",
        "goodput_ratio",
        "real_p95_ms",
        "sim_p95_ms",
        "p95_ratio",
    ])?;
    let o = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.6}"));
    for r in rows {
        w.write_record([
            r.fault.clone(),
            r.mix.clone(),
            r.strategy.clone(),
            r.phase.clone(),
            r.class.to_string(),
            o(r.real_goodput_qps),
            o(r.sim_goodput_qps),
            o(r.goodput_ratio),
            o(r.real_p95_ms),
            o(r.sim_p95_ms),
            o(r.p95_ratio),
        ])?;
    }
    Ok(String::from_utf8(w.into_inner()?)?)
}

/// The experiment of one side.
fn side(args: &AgreementArgs, root: &Path, cluster: ClusterKind, dir: &str) -> ExperimentArgs {
    let mut common = args.common.clone();
    common.cluster = cluster;
    ExperimentArgs {
        strategies: args.strategies.clone(),
        mixes: args.mixes.clone(),
        faults: args.faults.clone(),
        admissions: vec!["none".into()],
        detections: Vec::new(),
        recoveries: vec!["none".into()],
        loads: Vec::new(),
        repeat: args.repeat,
        out: Some(root.join(dir)),
        common,
    }
}

fn read_experiment(dir: &Path) -> Result<ExperimentFile, Error> {
    let path = dir.join("experiment.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    crate::report::version::check(&text, crate::report::version::EXPERIMENT)
        .map_err(|e| input(&path.display().to_string(), e))?;
    Ok(serde_json::from_str(&text).with_context(|| format!("{} does not parse", path.display()))?)
}

/// `plbbench agreement`: both experiments (the simulator's first: it is
/// quick and refuses bad input before the real cluster starts), then the
/// comparison. Runs that fail their checks are reported by each side and
/// decide the exit status after everything is written.
pub fn agreement(args: AgreementArgs) -> Result<(), Error> {
    if args.common.cluster == ClusterKind::Sim {
        return Err(input("--cluster", "names the real side (local, docker or external); the simulator is the other"));
    }
    let root = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("reports").join(format!("{}-agreement", chrono::Utc::now().format("%Y%m%dT%H%M%SZ")))
    });
    let sim = side(&args, &root, ClusterKind::Sim, "sim");
    let real = side(&args, &root, args.common.cluster, "real");
    experiment::grid(&real, &root.join("real"))?;
    let mut checks = Vec::new();
    for (name, e) in [("sim", sim), ("real", real)] {
        eprintln!("plbbench: agreement: the {name} side");
        match experiment::experiment(e) {
            Ok(()) => {}
            Err(Error::Checks(msg)) => checks.push(format!("{name}: {msg}")),
            Err(other) => return Err(other),
        }
    }
    let (real, sim) = (read_experiment(&root.join("real"))?, read_experiment(&root.join("sim"))?);
    let rows = compare_cells(&real.cells, &sim.cells);
    let file = AgreementFile {
        schema_version: SCHEMA_VERSION,
        plbbench_version: env!("CARGO_PKG_VERSION").into(),
        real_cluster: real.settings.cluster.clone(),
        goodput_tolerance: GOODPUT_TOLERANCE,
        p95_factor: P95_FACTOR,
        repeat: args.repeat,
        time_scale: args.common.time_scale,
        fractions: fractions(&rows),
        rows,
    };
    let files = [
        ("agreement.json", serde_json::to_string_pretty(&file).context("agreement.json")? + "\n"),
        ("agreement.csv", csv(&file.rows).context("agreement.csv")?),
        ("agreement.md", markdown(&file)),
    ];
    for (name, text) in &files {
        let path = root.join(name);
        fsutil::write_atomic(&path, text, 0o666)
            .map_err(|e| Error::Run(anyhow::anyhow!("cannot write {}: {e}", path.display())))?;
    }
    eprintln!("wrote {}", root.display());
    for line in summary_lines(&file.fractions) {
        println!("{line}");
    }
    match checks.is_empty() {
        true => Ok(()),
        false => Err(Error::Checks(checks.join("; "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Spread;

    fn cell(strategy: &str, phase: &str, class: Class, goodput: Option<f64>, p95: Option<f64>) -> CellRow {
        let one = |v: Option<f64>| Spread { n: usize::from(v.is_some()), median: v, q1: v, q3: v };
        CellRow {
            fault: "cascade".into(),
            mix: "25:75".into(),
            strategy: strategy.into(),
            load: None,
            phase: phase.into(),
            survivors: 5,
            class,
            runs: 1,
            goodput_qps: one(goodput),
            retention: one(None),
            p95_ms: one(p95),
            inflation_p95: one(None),
            lifetime_mean_s: one(None),
            cpu_mean: one(None),
            cpu_cv: one(None),
        }
    }

    #[test]
    fn cells_pair_by_key_and_fractions_use_the_targets() {
        let real = vec![
            cell("plb", "baseline", Class::P, Some(100.0), Some(10.0)),
            cell("plb", "baseline", Class::F, Some(100.0), Some(10.0)),
            cell("rr", "baseline", Class::P, Some(100.0), Some(10.0)),
            cell("rr", "down1", Class::P, Some(0.0), None),
        ];
        let sim = vec![
            // Out of order, and one 26% off in goodput, 1.6x in p95.
            cell("rr", "baseline", Class::P, Some(126.0), Some(16.0)),
            cell("plb", "baseline", Class::F, Some(75.0), Some(10.0 / 1.5)),
            cell("plb", "baseline", Class::P, Some(110.0), Some(5.0)),
        ];
        let rows = compare_cells(&real, &sim);
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].goodput_ratio, Some(1.1));
        assert_eq!(rows[0].p95_ratio, Some(0.5));
        assert_eq!(rows[2].sim_goodput_qps, Some(126.0));
        assert_eq!((rows[3].goodput_ratio, rows[3].p95_ratio), (None, None));
        let f = fractions(&rows);
        assert_eq!((f.goodput_cells, f.goodput_within), (3, 2));
        assert_eq!((f.p95_cells, f.p95_within), (3, 1));
        assert_eq!(f.goodput_median_abs_diff.map(|x| (x * 100.0).round()), Some(25.0));
        let md = markdown(&AgreementFile {
            schema_version: SCHEMA_VERSION,
            plbbench_version: "0".into(),
            real_cluster: "local".into(),
            goodput_tolerance: GOODPUT_TOLERANCE,
            p95_factor: P95_FACTOR,
            repeat: 1,
            time_scale: 0.5,
            fractions: f,
            rows,
        });
        assert!(md.contains("in 2 of 3 cells (67%)"), "{md}");
        assert!(
            md.contains("| cascade | 25:75 | rr | baseline | P | 100.0 | 126.0 | 1.26 * | 10.0 | 16.0 | 1.60 * |"),
            "{md}"
        );
        assert!(md.contains("| 1.10 | 10.0 | 5.0 | 0.50 * |"), "{md}");
    }

    #[test]
    fn the_simulator_is_not_a_real_side() {
        use clap::Parser;
        #[derive(Parser)]
        struct W {
            #[command(flatten)]
            a: AgreementArgs,
        }
        let a = W::try_parse_from(["plbbench", "--cluster", "sim", "--out", "/nonexistent/a"]).unwrap().a;
        match agreement(a) {
            Err(Error::Input(msg)) => assert!(msg.starts_with("--cluster: names the real side"), "{msg}"),
            other => panic!("expected an input error, got {other:?}"),
        }
        let a = W::try_parse_from(["plbbench"]).unwrap().a;
        assert_eq!(
            (a.repeat, a.mixes.as_slice(), a.faults.as_slice()),
            (3, &["25:75".to_string()][..], &["cascade".to_string()][..])
        );
    }
}
