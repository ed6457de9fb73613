//! `plbbench map` (issue 49): where the paper's findings hold over the
//! workload plane. It runs the findings' experiments (RQ1: premium-fault,
//! plb against 3RR+2RR; RQ2, Fig. 5 and RQ3: cascade, plb against 5RR) on
//! the simulator for every cell of a grid over workload parameters (think
//! time, session length, population, arrival process), with repeats, and
//! draws each finding as a heat map, a panel per mix, with the paper's band
//! outlined, cells whose runs failed a check hatched, and the base
//! workload's own point marked; map.csv and map.json hold the numbers.
//! Resumable: each cell is an experiment folder, kept runs are reused.

mod axes;
mod findings;
mod heat;
mod page;

use crate::commands::experiment::{self, ExperimentArgs, GridRun, RunState};
use crate::error::{input, Error};
use crate::report::summary::Summary;
use anyhow::Context;
use axes::{Axis, Cell, Key, Value};
use clap::{Args, Parser};
use std::path::{Path, PathBuf};

/// The most simulator runs one map may hold (about 10 minutes on two
/// cores at T=1000, 0.15 s a run).
pub const MAX_RUNS: usize = 4000;

/// The strategy and fault pairs every cell runs per mix and repeat.
const PAIRS: [(&str, &str); 2] = [("plb,rr-split", "premium-fault"), ("plb,rr", "cascade")];

/// `plbbench map`: the grid over workload parameters.
#[derive(Debug, Args, Clone)]
pub struct MapArgs {
    /// A workload parameter and its values, KEY=V1,V2,..; repeat the flag for more axes. Keys: think_ms (between a session's queries), queries (mean per session; min = mean/2, max = 3 x mean/2), T (clients), load (`closed`: no pause between sessions; a number: open, offering that fraction of the CPU budget), routers and refresh_ms (a simulated tier of routers on stale counts: run's --routers and --refresh-ms). The first two axes are the heat maps' x and y; more axes give a figure per combination.
    #[arg(long = "vary", value_name = "KEY=V,..", required = true)]
    pub vary: Vec<String>,
    /// Premium:Freemium mixes, a panel each [default: 25:75,50:50,75:25].
    #[arg(long, value_delimiter = ',', default_value = "25:75,50:50,75:25", hide_default_value = true)]
    #[arg(value_name = "P:F,..")]
    pub mixes: Vec<String>,
    /// Repeats of every cell's runs; repeat k uses seed --seed + k - 1 [default: 2].
    #[arg(long, default_value_t = 2, hide_default_value = true, value_name = "N")]
    pub repeat: u32,
    /// The workload the axes change: a file, or a built-in by name [default: paper].
    #[arg(long, value_name = "FILE|NAME")]
    pub workload: Option<PathBuf>,
    /// Clients T where T is not an axis [default: 1000].
    #[arg(long = "T", default_value_t = 1000, hide_default_value = true, value_name = "N")]
    pub clients: u32,
    /// Seed of the first repeat [default: 1].
    #[arg(long, default_value_t = 1, hide_default_value = true)]
    pub seed: u64,
    /// Map folder; an existing one is resumed [default: reports/<utc-timestamp>-map].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// With a `routers` axis: the tier's followers admit within quotas (run's --quotas) in every cell of more than
    /// one router.
    #[arg(long)]
    pub quotas: bool,
    /// No progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// One cell: its values, folder, workload and runs (indices into the map's runs).
struct CellPlan {
    cell: Cell,
    name: String,
    connect_share: f64,
    runs: std::ops::Range<usize>,
}

/// `plbbench map`: validates everything, runs what is missing, writes the map.
pub fn map(args: MapArgs) -> Result<(), Error> {
    let axes: Vec<Axis> = args.vary.iter().map(|v| axes::parse_axis(v)).collect::<Result<_, _>>()?;
    axes::check_axes(&axes)?;
    let root = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("reports").join(format!("{}-map", chrono::Utc::now().format("%Y%m%dT%H%M%SZ")))
    });
    if root.exists() && !root.is_dir() {
        return Err(input("--out", format!("{} exists and is not a folder", root.display())));
    }
    let base_name = args.workload.clone().unwrap_or_else(|| PathBuf::from("paper"));
    let base = match crate::commands::run::plan::built_in_workload(&base_name) {
        Some(text) => text.to_string(),
        None => crate::commands::run::plan::read_text("--workload", &base_name)?,
    };
    let cells = axes::cells(&axes);
    let total = cells.len() * args.mixes.len() * PAIRS.len() * 2 * args.repeat as usize;
    if total > MAX_RUNS {
        return Err(input(
            "--vary",
            format!(
                "{} cells x {} mixes x 4 strategy-fault pairs x {} repeats = {total} runs, more than the {MAX_RUNS} a map may hold; narrow an axis or lower --repeat",
                cells.len(),
                args.mixes.len(),
                args.repeat
            ),
        ));
    }
    let (plans, grid) = plan_cells(&args, &root, &base, &cells)?;
    let states: Vec<RunState> = grid.iter().map(experiment::run_state).collect::<Result<_, _>>()?;
    let pending = states.iter().filter(|s| !matches!(s, RunState::Done(_))).count();
    eprintln!(
        "plbbench: map {}: {} cells, {} runs, {pending} to do; rerun with --out {} to resume",
        root.display(),
        cells.len(),
        grid.len(),
        root.display()
    );
    let shown = crate::commands::run::args::Progress::Auto.resolve(args.quiet);
    let summaries: Vec<Summary> =
        experiment::execute_pending(&grid, states, pending, shown, false)?.into_iter().map(|(s, _)| s).collect();
    let chosen = chosen_point(&base, args.clients);
    let out =
        page::Map::build(&args, &axes, &plans.iter().map(|p| cell_result(p, &summaries, &chosen)).collect::<Vec<_>>());
    out.write(&root)?;
    eprintln!("wrote {}", root.display());
    if !args.quiet {
        print!("{}", out.summary_text());
    }
    Ok(())
}

/// Each cell's workload file and its runs' plans.
fn plan_cells(args: &MapArgs, root: &Path, base: &str, cells: &[Cell]) -> Result<(Vec<CellPlan>, Vec<GridRun>), Error> {
    let mut plans = Vec::new();
    let mut grid = Vec::new();
    for cell in cells {
        let name = axes::cell_name(cell);
        let dir = root.join("cells").join(&name);
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let text = axes::cell_workload(base, cell)?;
        let w = crate::core::workload::Workload::parse(&text).map_err(|e| input(&format!("--vary ({name})"), e))?;
        let path = dir.join("workload.toml");
        crate::fsutil::write_atomic(&path, &text, 0o666)
            .map_err(|e| Error::Run(anyhow::anyhow!("cannot write {}: {e}", path.display())))?;
        let first = grid.len();
        for (strategies, faults) in PAIRS {
            grid.extend(experiment::grid(&cell_args(args, cell, &path, &dir, strategies, faults)?, &dir)?);
        }
        plans.push(CellPlan {
            cell: cell.clone(),
            name,
            connect_share: findings::connect_share(&w, 25),
            runs: first..grid.len(),
        });
    }
    Ok((plans, grid))
}

/// The experiment flags of one cell and strategy-fault pair.
fn cell_args(
    args: &MapArgs,
    cell: &Cell,
    workload: &Path,
    dir: &Path,
    strategies: &str,
    faults: &str,
) -> Result<ExperimentArgs, Error> {
    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        e: ExperimentArgs,
    }
    let clients = match axes::get(cell, Key::Clients) {
        Some(Value::Num(t)) => t as u32,
        _ => args.clients,
    };
    let mut argv: Vec<String> = ["plbbench", "--cluster", "sim", "--checks", "warn", "-q"].map(String::from).to_vec();
    let mut flag = |k: &str, v: String| argv.extend([k.to_string(), v]);
    flag("--strategies", strategies.into());
    flag("--faults", faults.into());
    flag("--mixes", args.mixes.join(","));
    flag("--repeat", args.repeat.to_string());
    flag("--seed", args.seed.to_string());
    flag("--T", clients.to_string());
    flag("--workload", workload.display().to_string());
    flag("--out", dir.display().to_string());
    if let Some(Value::Num(load)) = axes::get(cell, Key::Load) {
        flag("--load", load.to_string());
    }
    let routers = match axes::get(cell, Key::Routers) {
        Some(Value::Num(n)) => n,
        _ => 1.0,
    };
    flag("--routers", routers.to_string());
    if let Some(Value::Num(ms)) = axes::get(cell, Key::RefreshMs) {
        flag("--refresh-ms", ms.to_string());
    }
    if args.quotas && routers > 1.0 {
        argv.push("--quotas".into());
    }
    Wrap::try_parse_from(argv).map(|w| w.e).map_err(|e| input("--mixes", e.to_string().lines().next().unwrap_or("")))
}

/// The base workload's own point: its think time, mean session length, T
/// and arrival process (closed when it has no pause between sessions, the
/// load of an operating point on the cluster's budget that holds at every
/// mix, as the map's open cells do; no cell's otherwise).
fn chosen_point(base: &str, clients: u32) -> Vec<(Key, Value)> {
    use crate::core::operating_point::Basis;
    let Ok(w) = crate::core::workload::Workload::parse(base) else { return Vec::new() };
    let s = &w.session;
    let load = match w.operating_point {
        _ if s.between_ms == 0.0 => Value::Closed,
        Some(op) if op.per_mix() && op.basis == Basis::Cluster && op.clients == clients => Value::Num(op.utilisation),
        _ => Value::Num(f64::NAN),
    };
    vec![
        (Key::ThinkMs, Value::Num(s.think_ms)),
        (Key::Queries, Value::Num(f64::from(s.queries_min + s.queries_max) / 2.0)),
        (Key::Clients, Value::Num(f64::from(clients))),
        (Key::Load, load),
        (Key::Routers, Value::Num(1.0)),
        (Key::RefreshMs, Value::Num(1000.0)),
    ]
}

/// One cell's figures, checks and whether it is the chosen point.
fn cell_result(p: &CellPlan, summaries: &[Summary], chosen: &[(Key, Value)]) -> page::CellResult {
    let runs = &summaries[p.runs.clone()];
    let per_run: Vec<Vec<String>> =
        runs.iter().map(|s| s.failed_checks().into_iter().map(|v| v.name.clone()).collect()).collect();
    let mut failed: Vec<String> = per_run.concat();
    failed.sort();
    failed.dedup();
    page::CellResult {
        cell: p.cell.clone(),
        name: p.name.clone(),
        connect_share: p.connect_share,
        runs: runs.len(),
        runs_failing: per_run.iter().filter(|f| !f.is_empty()).count(),
        failed_checks: failed,
        figures: experiment::figures(runs),
        chosen: p.cell.iter().all(|(k, v)| chosen.iter().any(|(ck, cv)| ck == k && cv == v)),
    }
}
