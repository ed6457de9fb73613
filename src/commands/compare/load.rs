//! Reads run and experiment folders into `compare`'s [`Folder`] model.
//! A run folder is read from summary.json (else phases.csv), an experiment
//! folder from experiment.json (else experiment.csv). Only the fields
//! compare needs are parsed, each with a default, so folders written by
//! older or newer plbbench versions still compare. Any failure is bad input
//! naming the folder (exit status 2).

use super::model::{Cell, Folder, Info, Kind, Metric, Selection, Value};
use crate::core::metrics::PhaseRow;
use crate::core::model::Class;
use crate::core::phases::WARMUP;
use crate::error::{input, Error};
use crate::report::experiment::{CellRow, METRICS};
use crate::report::version;
use crate::stats::Spread;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::Path;

/// The settings compare shows (a subset of summary.json's).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SettingsView {
    strategy: String,
    mix: String,
    faults: String,
    clients: Option<u32>,
    replicas: Option<usize>,
    cluster: String,
    time_scale: Option<f64>,
    seed: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct EnvView {
    started_utc: Option<String>,
}

/// summary.json, as far as compare reads it.
#[derive(Debug, Deserialize)]
struct RunView {
    #[serde(default)]
    partial: bool,
    #[serde(default)]
    settings: SettingsView,
    #[serde(default)]
    environment: EnvView,
    phases: Vec<PhaseRow>,
}

#[derive(Debug, Deserialize)]
struct RunRef {
    dir: String,
}

/// experiment.json, as far as compare reads it.
#[derive(Debug, Deserialize)]
struct ExperimentView {
    #[serde(default)]
    strategies: Vec<String>,
    #[serde(default)]
    mixes: Vec<String>,
    #[serde(default)]
    faults: Vec<String>,
    #[serde(default)]
    repeat: Option<u32>,
    #[serde(default)]
    settings: SettingsView,
    #[serde(default)]
    runs: Vec<RunRef>,
    cells: Vec<CellRow>,
}

/// Reads `dir` as a run or an experiment folder.
pub fn load(dir: &Path) -> Result<Folder, Error> {
    let name = dir.display().to_string();
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(input(&name, "not a folder")),
        Err(e) => return Err(input(&name, format!("cannot read the folder ({e})"))),
    }
    let has = |f: &str| dir.join(f).is_file();
    if has("experiment.json") {
        experiment_json(dir, &name)
    } else if has("experiment.csv") {
        experiment_csv(dir, &name)
    } else if has("summary.json") {
        run_json(dir, &name)
    } else if has("phases.csv") {
        run_csv(dir, &name)
    } else {
        Err(input(
            &name,
            "not a run or experiment folder (no summary.json, phases.csv, experiment.json or experiment.csv)",
        ))
    }
}

/// A file's text; unreadable is bad input naming the file.
fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| input(&path.display().to_string(), format!("cannot read ({e})")))
}

/// A versioned JSON file (`version::SUMMARY` or `EXPERIMENT`) as `T`; a
/// newer version or a parse error names the file (and the position).
fn json<T: for<'de> Deserialize<'de>>(path: &Path, current: u32) -> Result<T, Error> {
    let name = path.display().to_string();
    let text = read(path)?;
    version::check(&text, current).map_err(|e| input(&name, e))?;
    serde_json::from_str(&text).map_err(|e| input(&name, format!("does not parse ({e})")))
}

fn run_json(dir: &Path, name: &str) -> Result<Folder, Error> {
    let v: RunView = json(&dir.join("summary.json"), version::SUMMARY)?;
    Ok(run_folder(name, v, "summary.json"))
}

fn run_csv(dir: &Path, name: &str) -> Result<Folder, Error> {
    let path = dir.join("phases.csv");
    let bad =
        |e: csv::Error| input(&path.display().to_string(), format!("does not parse ({})", one_line(&e.to_string())));
    let text = read(&path)?;
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let phases = r.deserialize::<PhaseRow>().collect::<Result<Vec<_>, _>>().map_err(bad)?;
    let v = RunView { partial: false, settings: SettingsView::default(), environment: EnvView::default(), phases };
    Ok(run_folder(name, v, "phases.csv"))
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn or_unknown(s: &str) -> String {
    if s.is_empty() {
        "?".into()
    } else {
        s.to_string()
    }
}

fn run_folder(name: &str, v: RunView, source: &str) -> Folder {
    let s = &v.settings;
    let sel = Selection { strategy: or_unknown(&s.strategy), mix: or_unknown(&s.mix), faults: or_unknown(&s.faults) };
    let cells = v.phases.iter().filter(|r| r.phase != WARMUP).map(|r| Cell::of_row(&sel, r)).collect();
    let info = Info {
        strategies: vec![sel.strategy.clone()],
        mixes: vec![sel.mix.clone()],
        faults: vec![sel.faults.clone()],
        clients: s.clients,
        replicas: s.replicas,
        cluster: or_unknown(&s.cluster),
        time_scale: s.time_scale,
        seed: s.seed,
        repeat: None,
        runs: 1,
        started_utc: v.environment.started_utc.clone(),
        partial: v.partial,
        source: source.into(),
    };
    Folder { dir: name.into(), kind: Kind::Run, info, metrics: Metric::ALL.to_vec(), cells }
}

fn experiment_json(dir: &Path, name: &str) -> Result<Folder, Error> {
    let v: ExperimentView = json(&dir.join("experiment.json"), version::EXPERIMENT)?;
    // The experiment started when its first run did.
    let started = v.runs.first().and_then(|r| {
        let text = std::fs::read_to_string(dir.join(&r.dir).join("summary.json")).ok()?;
        serde_json::from_str::<RunView>(&text).ok()?.environment.started_utc
    });
    let s = &v.settings;
    let info = Info {
        strategies: v.strategies.clone(),
        mixes: v.mixes.clone(),
        faults: v.faults.clone(),
        clients: s.clients,
        replicas: s.replicas,
        cluster: or_unknown(&s.cluster),
        time_scale: s.time_scale,
        seed: s.seed,
        repeat: v.repeat,
        runs: v.runs.len(),
        started_utc: started,
        partial: false,
        source: "experiment.json".into(),
    };
    Ok(experiment_folder(name, info, &v.cells))
}

fn experiment_folder(name: &str, mut info: Info, rows: &[CellRow]) -> Folder {
    let cells: Vec<Cell> = rows.iter().filter(|r| r.phase != WARMUP).map(cell_of).collect();
    let uniq = |f: &dyn Fn(&Cell) -> &String| {
        let mut v: Vec<String> = Vec::new();
        for c in &cells {
            if !v.contains(f(c)) {
                v.push(f(c).clone());
            }
        }
        v
    };
    if info.strategies.is_empty() {
        info.strategies = uniq(&|c| &c.sel.strategy);
        info.mixes = uniq(&|c| &c.sel.mix);
        info.faults = uniq(&|c| &c.sel.faults);
    }
    Folder { dir: name.into(), kind: Kind::Experiment, info, metrics: Metric::EXPERIMENT.to_vec(), cells }
}

fn cell_of(r: &CellRow) -> Cell {
    let mut values = [Value::default(); 12];
    for (i, m) in Metric::ALL.into_iter().enumerate() {
        if Metric::EXPERIMENT.contains(&m) {
            let s = r.spread(m.name());
            values[i] = Value { value: s.median, q1: s.q1, q3: s.q3, n: s.n };
        }
    }
    Cell {
        // Cells of an experiment with a load axis stay apart: `plb@load0.8`.
        sel: Selection { strategy: with_load(&r.strategy, r.load), mix: r.mix.clone(), faults: r.fault.clone() },
        phase: r.phase.clone(),
        survivors: r.survivors,
        class: r.class,
        values,
    }
}

/// experiment.csv (the same cells as experiment.json, without the settings).
fn experiment_csv(dir: &Path, name: &str) -> Result<Folder, Error> {
    let path = dir.join("experiment.csv");
    let file = path.display().to_string();
    let text = read(&path)?;
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let rows = r.deserialize::<HashMap<String, String>>().collect::<Result<Vec<_>, _>>();
    let rows = rows.map_err(|e| input(&file, format!("does not parse ({})", one_line(&e.to_string()))))?;
    let mut cells = Vec::with_capacity(rows.len());
    for (i, row) in rows.iter().enumerate() {
        cells.push(csv_row(row).map_err(|why| input(&file, format!("row {}: {why}", i + 2)))?);
    }
    let info = Info { runs: 0, cluster: "?".into(), source: "experiment.csv".into(), ..Info::default() };
    Ok(experiment_folder(name, info, &cells))
}

/// A strategy label with the offered load of its cell, if any.
fn with_load(strategy: &str, load: Option<f64>) -> String {
    match load {
        Some(l) => format!("{strategy}@load{l}"),
        None => strategy.to_string(),
    }
}

fn csv_row(row: &HashMap<String, String>) -> Result<CellRow, String> {
    let text = |k: &str| row.get(k).cloned().ok_or_else(|| format!("no column {k}"));
    let num = |k: &str| -> Result<Option<f64>, String> {
        match row.get(k).map(|s| s.trim()) {
            None | Some("") => Ok(None),
            Some(s) => s.parse().map(Some).map_err(|_| format!("{k} `{s}` is not a number")),
        }
    };
    let spread = |m: &str| -> Result<Spread, String> {
        let n = num(&format!("{m}_n"))?.unwrap_or(0.0) as usize;
        Ok(Spread {
            n,
            median: num(&format!("{m}_median"))?,
            q1: num(&format!("{m}_q1"))?,
            q3: num(&format!("{m}_q3"))?,
        })
    };
    let class = match text("class")?.as_str() {
        "P" => Class::P,
        "F" => Class::F,
        other => return Err(format!("class `{other}` is not P or F")),
    };
    let mut s: HashMap<&str, Spread> = HashMap::new();
    for m in METRICS {
        s.insert(m, spread(m)?);
    }
    Ok(CellRow {
        fault: text("fault")?,
        mix: text("mix")?,
        strategy: text("strategy")?,
        load: num("load")?,
        phase: text("phase")?,
        survivors: num("survivors")?.unwrap_or(0.0) as usize,
        class,
        runs: num("runs")?.unwrap_or(0.0) as usize,
        goodput_qps: s["goodput_qps"],
        retention: s["retention"],
        p95_ms: s["p95_ms"],
        inflation_p95: s["inflation_p95"],
        lifetime_mean_s: s["lifetime_mean_s"],
        cpu_mean: s["cpu_mean"],
        cpu_cv: s["cpu_cv"],
    })
}
