//! `plbbench compare DIR...` (docs/manual.md, "Comparing runs"): run and experiment folders side by
//! side, per phase and class, with deltas against a baseline folder and the
//! direction of each change marked good or bad; `--threshold` turns it into
//! a regression gate (exit 1 when a threshold is violated). This module is
//! the I/O shell: flags, reading folders (`load`), writing outputs
//! (`render`); the table (`model`) and the gate (`threshold`) are pure.

use super::lists::parse_list;
use crate::error::{input, Error};
use anyhow::Context;
use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};

pub mod load;
pub mod model;
pub mod render;
pub mod threshold;

use model::{Folder, Metric};
use threshold::Threshold;

/// Output format of `plbbench compare` on stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns, for terminals and CI logs.
    Text,
    /// Every value, quartile, delta and check, for tools.
    Json,
    /// Tables for pull-request comments.
    Markdown,
}

/// `plbbench compare`.
#[derive(Debug, Args, Clone)]
pub struct CompareArgs {
    /// Run or experiment folders, side by side; the first is the baseline unless --baseline is given.
    #[arg(value_name = "DIR", required = true)]
    pub dirs: Vec<PathBuf>,
    /// Folder every delta and threshold is relative to [default: the first DIR].
    #[arg(long, value_name = "DIR")]
    pub baseline: Option<PathBuf>,
    /// Regression gate, repeatable: [STRATEGY/MIX/FAULTS/]CLASS.PHASE.METRIC OP CHANGE, e.g. premium.down2.p95_ms<+10%
    /// or premium.down1.retention>-0.05 (CHANGE with % is relative, else absolute; * matches any); exit 1 when violated.
    #[arg(long = "threshold", value_name = "EXPR", allow_hyphen_values = true)]
    pub thresholds: Vec<String>,
    /// Output on stdout.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Also write a self-contained comparison page with charts to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Metrics in the table, comma-separated, of goodput_qps, retention, p50_ms, p95_ms, p99_ms, inflation_p95,
    /// lifetime_mean_s, lifetime_p95_s, errors, aborted_sessions, cpu_mean, cpu_cv
    /// [default: goodput_qps,retention,p95_ms,inflation_p95,lifetime_mean_s,aborted_sessions,cpu_mean,cpu_cv].
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub metrics: Vec<String>,
}

/// `plbbench compare`: prints the comparison; `Error::Run` (exit 1) when a
/// threshold is violated, `Error::Input` (exit 2) for bad input.
pub fn compare(args: CompareArgs) -> Result<(), Error> {
    let thresholds = args
        .thresholds
        .iter()
        .map(|t| Threshold::parse(t).map_err(|e| input("--threshold", format!("`{t}`: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let metrics = parse_metrics(&args.metrics)?;
    let folders = load_all(args.baseline.as_deref(), &args.dirs)?;
    if !thresholds.is_empty() && folders.len() < 2 {
        return Err(input("--threshold", "needs a folder to compare with the baseline"));
    }
    let groups = model::groups(&folders, &metrics);
    let checks = threshold::check(&thresholds, &folders[0], &folders[1..]).map_err(|e| input("--threshold", e))?;
    let report = render::Report { folders: &folders, groups: &groups, checks: &checks };
    let out = match args.format {
        Format::Text => render::text(&report),
        Format::Markdown => render::markdown(&report),
        Format::Json => render::json(&report).context("rendering the comparison as JSON")?,
    };
    print!("{out}");
    if let Some(path) = &args.html {
        let page = render::html(&report).context("rendering the comparison page")?;
        crate::fsutil::write_atomic(path, &page, 0o666)
            .map_err(|e| Error::Run(anyhow::anyhow!("cannot write {}: {e}", path.display())))?;
        eprintln!("wrote {}", path.display());
    }
    let violated: Vec<_> = checks.iter().filter(|c| !c.ok).collect();
    for c in &violated {
        eprintln!("plbbench: threshold violated: {c} ({})", c.expr);
    }
    if violated.is_empty() {
        Ok(())
    } else {
        Err(Error::Run(anyhow::anyhow!("{} of {} threshold checks violated", violated.len(), checks.len())))
    }
}

fn parse_metrics(list: &[String]) -> Result<Vec<Metric>, Error> {
    if list.is_empty() {
        return Ok(Metric::DEFAULT.to_vec());
    }
    let names: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
    parse_list("--metrics", list, |s| {
        Metric::parse(s)
            .ok_or_else(|| input("--metrics", format!("unknown metric `{s}` (expected {})", names.join(", "))))
    })
}

/// The baseline first, then every other folder once.
fn load_all(baseline: Option<&Path>, dirs: &[PathBuf]) -> Result<Vec<Folder>, Error> {
    let mut paths: Vec<&Path> = baseline.into_iter().collect();
    let mut seen: Vec<PathBuf> = Vec::new();
    let mut out = Vec::new();
    paths.extend(dirs.iter().map(PathBuf::as_path));
    for p in paths {
        let key = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        out.push(load::load(p)?);
    }
    Ok(out)
}
