//! `plbbench experiment` (design.md §4 "Repeats"): runs a grid of
//! strategies x mixes x fault presets x repeats, one ordinary run folder per
//! cell and repeat, and summarises the repeats as medians with interquartile
//! ranges (`experiment.json`, `experiment.csv`) and as the paper's figures
//! (`figures.json`, computed in [`figures`]), with its own report page
//! ([`html`]). It owns the grid order, the seeds, resumption and the
//! aggregation; every run itself goes through `run::plan::Plan` and
//! `run::execute` so an experiment's runs are byte-for-byte what `plbbench
//! run` would write.
//!
//! Order and seeds: the loop is repeat -> fault -> mix -> strategy, so drift
//! of the machine hits every strategy alike; repeat k (1-based) uses seed
//! `--seed + k - 1` for every cell (common random numbers across strategies).
//! Resumption: a run folder with a complete `summary.json` (not `partial`)
//! and the same settings is kept; anything else in the grid is (re)run.
//! Validity: each new run's failed checks are printed as it finishes; after
//! everything is written, the runs that failed a check (kept ones too) are
//! counted, an exit status 1 under `--checks fail` and a warning under
//! `--checks warn`.

use super::lists::{closed, parse_list};
use super::run as run_cmd;
use super::run::args::{default_run_args, CommonArgs, RunArgs};
use super::run::plan::{self, Plan, StrategyFlag};
use crate::core::faults;
use crate::core::model::Class;
use crate::core::phases::WARMUP;
use crate::core::router::Strategy;
use crate::core::settings::{Admission, Checks, Detection};
use crate::core::watch::Recovery;
use crate::error::{input, Error};
use crate::fsutil;
use crate::progress::Shown;
use crate::report::experiment::{experiment_csv, metric, CellRow, ExperimentFile, RunEntry, DECIMALS};
use crate::report::summary::{Settings, Summary};
use crate::stats::{self, Spread};
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};

pub mod figures;
pub mod html;
pub mod recovery;
mod summary;
pub use figures::{figures, render_figures};

/// `plbbench experiment`: the grid, the repeats and the flags passed through
/// to every run (same defaults as `plbbench run`).
#[derive(Debug, Args, Clone)]
pub struct ExperimentArgs {
    /// Strategies to compare, comma-separated [default: plb,rr-split,rr,lc].
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "plb,rr-split,rr,lc",
        hide_default_value = true,
        value_name = "LIST"
    )]
    pub strategies: Vec<String>,
    /// Premium:Freemium mixes, comma-separated [default: 25:75,50:50,75:25].
    #[arg(long, value_delimiter = ',', default_value = "25:75,50:50,75:25", hide_default_value = true)]
    #[arg(value_name = "P:F,..", allow_hyphen_values = true)]
    pub mixes: Vec<String>,
    /// Fault presets (premium-fault, cascade, gray-pause, slow-replica, flapping, none) or schedule files, comma-separated [default: premium-fault,cascade].
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "premium-fault,cascade",
        hide_default_value = true,
        value_name = "LIST"
    )]
    pub faults: Vec<String>,
    /// Admission layers to compare, comma-separated (none, modes) [default: none].
    #[arg(long, alias = "admission", value_delimiter = ',', default_value = "none", hide_default_value = true)]
    #[arg(value_name = "LIST")]
    pub admissions: Vec<String>,
    /// Detectors to compare, comma-separated (probe, oracle, suspicion) [default: --detection's].
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub detections: Vec<String>,
    /// Recovery policies to compare for plb, comma-separated (none, probation, slow-start); other strategies run with none [default: none].
    #[arg(long, alias = "recovery", value_delimiter = ',', default_value = "none", hide_default_value = true)]
    #[arg(value_name = "LIST")]
    pub recoveries: Vec<String>,
    /// Offered loads, comma-separated: each run's --load (CPU offered as a fraction of the cluster's K x C), an axis of the grid [default: the workload's own operating point, no axis].
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub loads: Vec<String>,
    /// Repeats of every cell; repeat k uses seed --seed + k - 1 [default: 5].
    #[arg(long, default_value_t = 5, hide_default_value = true, value_name = "N")]
    pub repeat: u32,
    /// Experiment folder; an existing one is resumed [default: reports/<utc-timestamp>-experiment].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Settings passed to every run, with `plbbench run`'s defaults.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// One cell and repeat of the grid, validated into a plan.
#[derive(Clone, Debug)]
pub struct GridRun {
    /// Fault preset or schedule file, as given.
    pub fault: String,
    /// Mix, normalised `P:F`.
    pub mix: String,
    /// Repeat number, from 1.
    pub repeat: u32,
    /// Folder name under `runs/`: `<fault>-<P>-<F>-<strategy>-r<k>`.
    pub name: String,
    /// The validated run (its `out` is the run folder).
    pub plan: Plan,
}

/// Checks the grid flags and builds every run's plan, so that any bad input
/// is refused before the first run starts.
pub fn grid(args: &ExperimentArgs, root: &Path) -> Result<Vec<GridRun>, Error> {
    let strategies = parse_strategies(&args.strategies)?;
    let mixes = parse_mixes(&args.mixes)?;
    let faults = parse_faults(&args.faults)?;
    let admissions: Vec<Admission> =
        parse_list("--admissions", &args.admissions, |s| closed("--admissions", "value", s))?;
    let detections: Vec<Detection> = match args.detections.is_empty() {
        true => vec![args.common.detection],
        false => parse_list("--detections", &args.detections, |s| closed("--detections", "value", s))?,
    };
    let recoveries: Vec<Recovery> =
        parse_list("--recoveries", &args.recoveries, |s| closed("--recoveries", "value", s))?;
    let loads = parse_loads(&args.loads)?;
    check_strategy_flags(&args.common, &strategies)?;
    let layers: Vec<(Strategy, Admission, Detection, Recovery)> = strategies
        .iter()
        .flat_map(|&s| admissions.iter().map(move |&a| (s, a)))
        .flat_map(|(s, a)| detections.iter().map(move |&d| (s, a, d)))
        .flat_map(|(s, a, d)| recoveries.iter().map(move |&r| (s, a, d, r)))
        .filter(|&(s, _, _, r)| s == Strategy::Plb || r == Recovery::None)
        .collect();
    if args.repeat == 0 {
        return Err(input("--repeat", "must be at least 1"));
    }
    if args.common.seed.checked_add(u64::from(args.repeat) - 1).is_none() {
        return Err(input("--seed", format!("{} + {} repeats overflows", args.common.seed, args.repeat)));
    }
    let mut runs = Vec::new();
    for repeat in 1..=args.repeat {
        for (fault, label) in &faults {
            for ((mix, pct), (load, load_label)) in mixes.iter().flat_map(|m| loads.iter().map(move |l| (m, l))) {
                for &(strategy, admission, detection, recovery) in &layers {
                    let mut a = default_run_args();
                    pass_through(args, &mut a);
                    a.strategy = strategy;
                    keep_flags_of(strategy, &mut a.common);
                    a.admission = admission;
                    a.common.detection = detection;
                    a.recovery = recovery;
                    // Runs without layers keep their historical names.
                    let variant = plan::variant(strategy, detection, recovery, admission);
                    let name = format!("{label}-{pct}-{}{load_label}-{variant}-r{repeat}", 100 - pct);
                    a.mix = mix.clone();
                    a.faults = Some(fault.clone());
                    a.common.seed = args.common.seed + u64::from(repeat - 1);
                    if load.is_some() {
                        a.common.load = *load;
                    }
                    a.out = Some(root.join("runs").join(&name));
                    let plan = Plan::new(a)?;
                    runs.push(GridRun { fault: fault.clone(), mix: mix.clone(), repeat, name, plan });
                }
            }
        }
    }
    Ok(runs)
}

fn pass_through(e: &ExperimentArgs, a: &mut RunArgs) {
    a.common = e.common.clone();
    a.force = true; // only incomplete runs are executed; they replace their leftovers
    a.common.quiet = true; // the experiment's own bar replaces each run's
}

/// The strategy-specific flags given: each value checked against K, and
/// each read by a strategy the grid lists.
fn check_strategy_flags(c: &CommonArgs, strategies: &[Strategy]) -> Result<(), Error> {
    plan::check_splits(c)?;
    match StrategyFlag::ALL.into_iter().find(|f| f.given(c) && !strategies.contains(&f.reader())) {
        Some(f) => {
            Err(input(f.flag(), format!("read only by strategy {}, which --strategies does not list", f.reader())))
        }
        None => Ok(()),
    }
}

/// A grid run's settings keep only the strategy-specific flags its
/// strategy reads.
fn keep_flags_of(strategy: Strategy, c: &mut CommonArgs) {
    for f in StrategyFlag::ALL.into_iter().filter(|f| f.reader() != strategy) {
        f.clear(c);
    }
}

fn parse_strategies(list: &[String]) -> Result<Vec<Strategy>, Error> {
    let out = parse_list("--strategies", list, |s| closed("--strategies", "strategy", s))?;
    if out.is_empty() {
        return Err(input("--strategies", "name at least one strategy"));
    }
    Ok(out)
}

/// Normalised mixes with their Premium percentage.
fn parse_mixes(list: &[String]) -> Result<Vec<(String, u32)>, Error> {
    let pcts = parse_list("--mixes", list, |m| {
        plan::parse_mix(m).map_err(|e| match e {
            Error::Input(msg) => Error::Input(msg.replacen("--mix:", "--mixes:", 1)),
            other => other,
        })
    })?;
    if pcts.is_empty() {
        return Err(input("--mixes", "name at least one mix"));
    }
    Ok(pcts.into_iter().map(|p| (format!("{p}:{}", 100 - p), p)).collect())
}

/// Offered loads with their folder-name part (`-l0.8`); without
/// `--loads`, one entry that leaves each run's `--load` alone.
fn parse_loads(list: &[String]) -> Result<Vec<(Option<f64>, String)>, Error> {
    if list.is_empty() {
        return Ok(vec![(None, String::new())]);
    }
    let loads = parse_list("--loads", list, |s| {
        let x: f64 = s.trim().parse().map_err(|_| input("--loads", format!("`{s}` is not a number")))?;
        if !(x.is_finite() && x > 0.0) {
            return Err(input("--loads", format!("`{s}` must be a positive fraction of the cluster's capacity")));
        }
        Ok(x)
    })?;
    Ok(loads.into_iter().map(|x| (Some(x), format!("-l{x}"))).collect())
}

/// Fault presets or files with the label used in folder names; a repeat, or
/// two files whose names give the same label, is refused.
fn parse_faults(list: &[String]) -> Result<Vec<(String, String)>, Error> {
    let mut labels: Vec<String> = Vec::new();
    let out = parse_list("--faults", list, |f| {
        let f = f.trim();
        let label: String = if faults::preset(f).is_some() {
            f.to_string()
        } else if Path::new(f).is_file() {
            let stem = Path::new(f).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            stem.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
        } else {
            return Err(input(
                "--faults",
                format!("unknown fault preset `{f}` (expected {}, or a schedule file)", faults::PRESETS.join(", ")),
            ));
        };
        if labels.contains(&label) {
            return Err(input("--faults", format!("`{f}` is listed twice (or two files share the name `{label}`)")));
        }
        labels.push(label.clone());
        Ok((f.to_string(), label))
    })?;
    if out.is_empty() {
        return Err(input("--faults", "name at least one fault preset"));
    }
    Ok(out)
}

/// What is on disk for one run of the grid.
#[derive(Debug)]
pub enum RunState {
    /// A complete run with the expected settings: kept.
    Done(Box<Summary>),
    /// No folder yet.
    Missing,
    /// A folder that must be rerun, and why.
    Incomplete(String),
}

/// Inspects a run folder. A complete run whose settings differ from the
/// plan's is refused (`--out` holds another experiment).
pub fn run_state(run: &GridRun) -> Result<RunState, Error> {
    let dir = &run.plan.out;
    if !dir.exists() {
        return Ok(RunState::Missing);
    }
    let text = match std::fs::read_to_string(dir.join("summary.json")) {
        Ok(t) => t,
        Err(e) => return Ok(RunState::Incomplete(format!("no readable summary.json ({e})"))),
    };
    if let Err(e) = crate::report::version::check(&text, crate::report::version::SUMMARY) {
        return Err(input(&dir.join("summary.json").display().to_string(), e));
    }
    let summary: Summary = match serde_json::from_str(&text) {
        Ok(s) => s,
        Err(e) => return Ok(RunState::Incomplete(format!("summary.json does not parse ({e})"))),
    };
    if summary.partial {
        return Ok(RunState::Incomplete("the run was interrupted (partial)".into()));
    }
    let expected = run_cmd::settings(&run.plan);
    let differ = settings_diff(&summary.settings, &expected);
    if !differ.is_empty() {
        return Err(input(
            "--out",
            format!(
                "{} holds a run with other settings ({}); use another --out or delete it",
                dir.display(),
                differ.join(", ")
            ),
        ));
    }
    Ok(RunState::Done(Box::new(summary)))
}

/// Names of the settings that differ, as `field: kept vs wanted`.
fn settings_diff(kept: &Settings, wanted: &Settings) -> Vec<String> {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(kept), serde_json::to_value(wanted))
    else {
        return vec!["settings".into()];
    };
    let null = serde_json::Value::Null;
    // `--checks` changes the exit status, not what a run measures.
    b.iter()
        .filter(|(k, v)| *k != "checks" && a.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: {} vs {v}", a.get(k).unwrap_or(&null)))
        .collect()
}

/// `plbbench experiment`: validates the grid, runs what is missing, and
/// writes experiment.json, experiment.csv, figures.json and report.html.
pub fn experiment(args: ExperimentArgs) -> Result<(), Error> {
    let root = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("reports").join(format!("{}-experiment", chrono::Utc::now().format("%Y%m%dT%H%M%SZ")))
    });
    if root.exists() && !root.is_dir() {
        return Err(input("--out", format!("{} exists and is not a folder", root.display())));
    }
    let grid = grid(&args, &root)?;
    let mut states = Vec::with_capacity(grid.len());
    for run in &grid {
        states.push(run_state(run)?);
    }
    let runs_dir = root.join("runs");
    std::fs::create_dir_all(&runs_dir).with_context(|| format!("cannot create {}", runs_dir.display()))?;
    clean_stale_temps(&runs_dir);
    clean_stale_temps(&root);
    let pending = states.iter().filter(|s| !matches!(s, RunState::Done(_))).count();
    eprintln!(
        "plbbench: experiment {}: {} runs, {} to do ({} kept); rerun with --out {} to resume after an interruption",
        root.display(),
        grid.len(),
        pending,
        grid.len() - pending,
        root.display()
    );
    let shown = args.common.progress.resolve(args.common.quiet);
    let summaries = execute_pending(&grid, states, pending, shown, true)?;
    // Under `--checks fail` a run that failed a check is in no aggregate
    // (its folder stays, named in experiment.json and the report).
    let exclude = args.common.checks == Checks::Fail;
    let all: Vec<Summary> =
        summaries.iter().map(|(s, _)| s.clone()).filter(|s| !exclude || s.failed_checks().is_empty()).collect();
    let file = experiment_file(&args, &grid, &summaries, exclude, &all);
    // The paper's figures compare strategies at one operating point: with
    // a load axis, that of the first of --loads (the curves show the rest).
    let first_load = grid.first().and_then(|r| r.plan.load);
    let at_first: Vec<Summary> = all.iter().filter(|s| s.settings.load == first_load).cloned().collect();
    let figures = figures(&at_first);
    let mut files = vec![
        ("experiment.json".to_string(), serde_json::to_string_pretty(&file).context("experiment.json")? + "\n"),
        ("experiment.csv".into(), experiment_csv(&file.cells).context("experiment.csv")?),
        ("recovery.csv".into(), recovery::csv(&recovery::rows(&all)).context("recovery.csv")?),
        ("figures.json".into(), serde_json::to_string_pretty(&figures).context("figures.json")? + "\n"),
    ];
    let page = html::render(&file, &figures).context("rendering the experiment's report.html")?;
    std::fs::create_dir_all(root.join("figures"))
        .with_context(|| format!("cannot create {}/figures", root.display()))?;
    files.extend(page.svgs.into_iter().map(|(id, svg)| (format!("figures/{id}.svg"), svg)));
    files.push(("report.html".into(), page.html));
    for (name, text) in &files {
        let path = root.join(name);
        fsutil::write_atomic(&path, text, 0o666)
            .map_err(|e| Error::Run(anyhow::anyhow!("cannot write {}: {e}", path.display())))?;
    }
    eprintln!("wrote {}", root.display());
    super::archive::refresh_after(&root);
    if !args.common.quiet {
        print!("{}", summary::render(&file.cells));
        print!("{}", render_figures(&figures));
    }
    checks_outcome(&grid, &summaries, args.common.checks)
}

/// The experiment's end under `--checks`: how many runs (kept ones too)
/// failed a check, as an [`Error::Checks`] (exit status 1) or, under
/// `--checks warn`, a warning.
fn checks_outcome(grid: &[GridRun], summaries: &[(Summary, bool)], checks: Checks) -> Result<(), Error> {
    let failed: Vec<&str> = grid
        .iter()
        .zip(summaries)
        .filter(|(_, (s, _))| !s.failed_checks().is_empty())
        .map(|(r, _)| r.name.as_str())
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    let shown = failed.iter().take(10).copied().collect::<Vec<_>>().join(", ");
    let more = if failed.len() > 10 { ", ..." } else { "" };
    let msg = format!("{} of {} runs failed their checks ({shown}{more})", failed.len(), grid.len());
    match checks {
        Checks::Fail => Err(Error::Checks(format!(
            "{msg}; they are left out of every aggregate and figure, everything was written (--checks warn keeps them and exits 0)"
        ))),
        Checks::Warn => {
            eprintln!("plbbench: warning: {msg}");
            Ok(())
        }
    }
}

/// An experiment's status line after a run: how many are done, the run,
/// its checks and the time left at the pace so far.
fn run_line(done: usize, pending: usize, name: &str, s: &Summary, elapsed_s: f64) -> String {
    let failed = s.failed_checks().len();
    let checks = if failed == 0 { "checks passed".to_string() } else { format!("{failed} check(s) failed") };
    let eta = elapsed_s / done as f64 * (pending - done) as f64;
    format!("plbbench: run {done}/{pending} {name} done in {:.0} s, {checks}; about {eta:.0} s left", s.wall_s)
}

/// Runs every run that is not done, in grid order, under one progress bar;
/// returns every run's summary (kept or new) with whether it was kept.
/// `checks_told`: each failed check is a line on stderr (a findings map
/// records them in its cells instead).
pub(crate) fn execute_pending(
    grid: &[GridRun],
    states: Vec<RunState>,
    pending: usize,
    shown: Shown,
    checks_told: bool,
) -> Result<Vec<(Summary, bool)>, Error> {
    let bar = crate::progress::bar(shown == Shown::Bar, pending as u64, "runs  eta {eta}");
    let mut out = Vec::with_capacity(grid.len());
    let (started, mut done) = (std::time::Instant::now(), 0usize);
    for (run, state) in grid.iter().zip(states) {
        match state {
            RunState::Done(s) => {
                out.push((*s, true));
                continue;
            }
            RunState::Incomplete(why) => {
                crate::progress::note(&bar, &format!("plbbench: rerunning {}: {why}", run.name))
            }
            RunState::Missing => {}
        }
        bar.set_message(run.name.clone());
        let result = run_cmd::execute(&run.plan).map_err(|e| match e {
            Error::Run(e) => {
                Error::Run(e.context(format!("run {} failed; rerun the same command to resume", run.name)))
            }
            other => other,
        });
        let result = result?;
        if let Some(signal) = result.summary.interrupted_by {
            bar.abandon();
            return Err(Error::Interrupted {
                signal,
                detail: format!("run {} is partial; rerun the same command to resume the experiment", run.name),
            });
        }
        let lines = run_cmd::failed_check_lines(&result.summary, run.plan.checks, Some(&run.name));
        for line in lines.iter().filter(|_| checks_told) {
            crate::progress::note(&bar, line);
        }
        done += 1;
        if shown == Shown::Lines {
            eprintln!("{}", run_line(done, pending, &run.name, &result.summary, started.elapsed().as_secs_f64()));
        }
        out.push((result.summary, false));
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(out)
}

/// Removes temporary run folders and files (`.<name>.tmp-<pid>`) left by a
/// killed process; those of a process that still runs are left alone.
fn clean_stale_temps(runs_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(runs_dir) else { return };
    if !Path::new("/proc/self").exists() {
        return;
    }
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = fsutil::stale_temp_pid(&name) else { continue };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(e.path()).or_else(|_| std::fs::remove_file(e.path()));
        }
    }
}

fn experiment_file(
    args: &ExperimentArgs,
    grid: &[GridRun],
    summaries: &[(Summary, bool)],
    exclude: bool,
    kept: &[Summary],
) -> ExperimentFile {
    let uniq = |f: &dyn Fn(&GridRun) -> String| {
        let mut v: Vec<String> = Vec::new();
        for r in grid {
            let x = f(r);
            if !v.contains(&x) {
                v.push(x);
            }
        }
        v
    };
    let runs = grid
        .iter()
        .zip(summaries)
        .map(|(r, (s, reused))| RunEntry {
            dir: format!("runs/{}", r.name),
            fault: r.fault.clone(),
            mix: r.mix.clone(),
            strategy: s.settings.strategy.clone(),
            repeat: r.repeat,
            seed: s.settings.seed,
            wall_s: s.wall_s,
            reused: *reused,
            excluded: if exclude { s.failed_checks().iter().map(|v| v.name.clone()).collect() } else { Vec::new() },
        })
        .collect();
    ExperimentFile {
        schema_version: crate::report::version::EXPERIMENT,
        plbbench_version: env!("CARGO_PKG_VERSION").into(),
        quantiles: stats::QUANTILE_DEFINITION.into(),
        strategies: uniq(&|r| run_cmd::settings(&r.plan).strategy),
        mixes: uniq(&|r| r.mix.clone()),
        faults: uniq(&|r| r.fault.clone()),
        repeat: args.repeat,
        settings: kept.first().map(|s| s.settings.clone()).unwrap_or_else(|| run_cmd::settings(&grid[0].plan)),
        runs,
        cells: aggregate(kept),
    }
}

/// A cell's key: fault, mix, strategy variant and offered load.
pub type CellKey = (String, String, String, Option<u64>);

/// The runs of each cell, cells in order of first appearance. Pure.
pub fn by_cell(summaries: &[Summary]) -> Vec<(CellKey, Vec<&Summary>)> {
    let mut cells: Vec<(CellKey, Vec<&Summary>)> = Vec::new();
    for s in summaries {
        let load = s.settings.load.map(f64::to_bits);
        let k = (s.settings.faults.clone(), s.settings.mix.clone(), s.settings.strategy.clone(), load);
        match cells.iter_mut().find(|(c, _)| *c == k) {
            Some((_, runs)) => runs.push(s),
            None => cells.push((k, vec![s])),
        }
    }
    cells
}

/// Medians and quartiles across repeats per (fault, mix, strategy, phase,
/// class), in order of first appearance; the warm-up is left out. Pure.
pub fn aggregate(summaries: &[Summary]) -> Vec<CellRow> {
    let mut rows = Vec::new();
    for ((fault, mix, strategy, load), group) in by_cell(summaries) {
        let mut phases: Vec<(String, usize)> = Vec::new();
        for r in group.iter().flat_map(|s| &s.phases).filter(|r| r.phase != WARMUP) {
            if !phases.iter().any(|(p, _)| *p == r.phase) {
                phases.push((r.phase.clone(), r.survivors));
            }
        }
        for (phase, survivors) in phases {
            for class in Class::ALL {
                let vals = |m: &str| {
                    Spread::of_options(group.iter().map(|s| s.phase(&phase, class).and_then(|r| metric(r, m))))
                        .rounded(DECIMALS)
                };
                rows.push(CellRow {
                    fault: fault.clone(),
                    mix: mix.clone(),
                    strategy: strategy.clone(),
                    load: load.map(f64::from_bits),
                    phase: phase.clone(),
                    survivors,
                    class,
                    runs: group.len(),
                    goodput_qps: vals("goodput_qps"),
                    retention: vals("retention"),
                    p95_ms: vals("p95_ms"),
                    inflation_p95: vals("inflation_p95"),
                    lifetime_mean_s: vals("lifetime_mean_s"),
                    cpu_mean: vals("cpu_mean"),
                    cpu_cv: vals("cpu_cv"),
                });
            }
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(args: &[&str]) -> ExperimentArgs {
        #[derive(Parser)]
        struct W {
            #[command(flatten)]
            e: ExperimentArgs,
        }
        let argv = std::iter::once("plbbench").chain(args.iter().copied());
        W::try_parse_from(argv).expect("valid flags").e
    }

    #[test]
    fn pass_through_copies_settings_and_silences_each_run() {
        let e = parse(&["--T", "77", "--seed", "3", "--theta", "12", "--cluster", "sim"]);
        let mut a = default_run_args();
        pass_through(&e, &mut a);
        assert_eq!((a.common.clients, a.common.seed, a.common.theta), (77, 3, Some(12)));
        assert_eq!(a.common.cluster, crate::core::settings::ClusterKind::Sim);
        assert!(a.common.quiet && a.force);
        assert_eq!(e.strategies, ["plb", "rr-split", "rr", "lc"]);
        assert_eq!(e.mixes, ["25:75", "50:50", "75:25"]);
        assert_eq!(e.faults, ["premium-fault", "cascade"]);
        assert_eq!(e.repeat, 5);
    }

    #[test]
    fn grid_order_names_and_seeds() {
        let e = parse(&[
            "--strategies",
            "plb,rr",
            "--mixes",
            "25:75,50:50",
            "--faults",
            "cascade",
            "--repeat",
            "2",
            "--seed",
            "7",
        ]);
        let g = grid(&e, Path::new("/nonexistent/exp")).unwrap();
        let names: Vec<(&str, u64)> = g.iter().map(|r| (r.name.as_str(), r.plan.seed)).collect();
        assert_eq!(
            names,
            [
                ("cascade-25-75-plb-r1", 7),
                ("cascade-25-75-rr-r1", 7),
                ("cascade-50-50-plb-r1", 7),
                ("cascade-50-50-rr-r1", 7),
                ("cascade-25-75-plb-r2", 8),
                ("cascade-25-75-rr-r2", 8),
                ("cascade-50-50-plb-r2", 8),
                ("cascade-50-50-rr-r2", 8),
            ]
        );
        assert_eq!(g[0].plan.out, Path::new("/nonexistent/exp/runs/cascade-25-75-plb-r1"));
        assert!(g.iter().all(|r| r.plan.progress == crate::progress::Shown::Nothing && r.plan.force));
    }

    #[test]
    fn loads_are_an_axis_inside_the_mix_with_their_own_names() {
        let axis = ["--strategies", "plb,rr", "--mixes", "25:75", "--faults", "none", "--loads", "0.6,1.2"];
        let e = parse(&[&axis[..], &["--workload", "analytics"]].concat());
        let g = grid(&e, Path::new("/x")).unwrap();
        let names: Vec<(&str, Option<f64>)> = g.iter().take(4).map(|r| (r.name.as_str(), r.plan.load)).collect();
        assert_eq!(
            names,
            [
                ("none-25-75-l0.6-plb-r1", Some(0.6)),
                ("none-25-75-l0.6-rr-r1", Some(0.6)),
                ("none-25-75-l1.2-plb-r1", Some(1.2)),
                ("none-25-75-l1.2-rr-r1", Some(1.2)),
            ]
        );
        assert!(g[0].plan.workload.session.between_ms > g[2].plan.workload.session.between_ms);
        assert_eq!(run_cmd::settings(&g[2].plan).load, Some(1.2));
        let plain = grid(&parse(&["--strategies", "plb", "--faults", "none", "--mixes", "25:75"]), Path::new("/x"));
        assert_eq!(plain.unwrap()[0].plan.load, None);
        for (bad, want) in [("0.6,x", "--loads: `x` is not a number"), ("0.6,0.6", "--loads: `0.6` is listed twice")] {
            match grid(&parse(&["--loads", bad]), Path::new("/x")) {
                Err(Error::Input(msg)) => assert!(msg.starts_with(want), "{msg}"),
                other => panic!("{bad}: {:?}", other.map(|g| g.len())),
            }
        }
    }

    #[test]
    fn a_kept_run_differs_in_checks_only_and_is_still_kept() {
        let g =
            grid(&parse(&["--strategies", "plb", "--mixes", "25:75", "--faults", "cascade"]), Path::new("/x")).unwrap();
        let kept = run_cmd::settings(&g[0].plan);
        let mut wanted = kept.clone();
        wanted.checks = Checks::Warn;
        assert!(settings_diff(&kept, &wanted).is_empty());
        wanted.clients += 1;
        assert_eq!(settings_diff(&kept, &wanted), ["clients: 1000 vs 1001"]);
    }

    #[test]
    fn bad_grid_names_the_flag() {
        let cases: [(&[&str], &str); 9] = [
            (&["--strategies", "plb,fastest"], "--strategies: unknown strategy `fastest`"),
            (&["--strategies", "plb,plb"], "--strategies: `plb` is listed twice"),
            (&["--mixes", "25:75,60:60"], "--mixes: `60:60` sums to 120"),
            (&["--mixes", "25:75,25:75"], "--mixes: `25:75` is listed twice"),
            (&["--faults", "cascade,meteor"], "--faults: unknown fault preset `meteor`"),
            (&["--repeat", "0"], "--repeat: must be at least 1"),
            (&["--T", "0"], "--T:"),
            (&["--reference", "1,1,1"], "--reference:"),
            (&["--cluster", "external"], "--dsn:"),
        ];
        for (args, want) in cases {
            match grid(&parse(args), Path::new("/nonexistent/exp")) {
                Err(Error::Input(msg)) => assert!(msg.starts_with(want), "{args:?}: {msg}"),
                other => panic!("{args:?}: expected an input error, got {:?}", other.map(|g| g.len())),
            }
        }
    }
}
