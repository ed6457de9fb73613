//! Writes a run folder (design.md §5) atomically: every file goes into a
//! temporary sibling folder that is renamed into place at the end, so a
//! reader never sees a half-written run and a failure leaves nothing behind
//! (the sibling is named as `fsutil` names every temporary file).

use crate::core::metrics::RunMetrics;
use crate::report::summary::Summary;
use anyhow::{Context, Result};
use serde::Serialize;
use std::fs;
use std::path::Path;

/// Writes rows as CSV with a header taken from the row type's fields.
pub fn write_csv<T: Serialize>(path: &Path, rows: &[T], header: &[&str]) -> Result<()> {
    let mut w = csv::Writer::from_path(path)?;
    if rows.is_empty() {
        w.write_record(header)?;
    }
    for r in rows {
        w.serialize(r)?;
    }
    w.flush()?;
    Ok(())
}

/// Column lists (used for the header of an empty file).
pub mod columns {
    /// phases.csv
    pub const PHASES: &[&str] = &[
        "phase",
        "start_s",
        "end_s",
        "survivors",
        "class",
        "completed",
        "goodput_qps",
        "retention",
        "p50_ms",
        "p95_ms",
        "p99_ms",
        "inflation_p95",
        "sessions_ended",
        "lifetime_mean_s",
        "lifetime_p95_s",
        "errors",
        "aborted_sessions",
        "cpu_mean",
        "cpu_cv",
        "rejected",
        "queued_ms_p95",
        "login_p50_ms",
        "login_p95_ms",
        "login_p99_ms",
        "login_max_ms",
        "logins_waiting",
    ];
    /// timeseries.csv
    pub const SERIES: &[&str] =
        &["t_s", "class", "completed", "goodput_qps", "p95_ms", "active_sessions", "logins_waiting", "login_oldest_ms"];
    /// replicas.csv
    pub const REPLICAS: &[&str] = &["t_s", "replica", "up", "role", "cpu_fraction", "active_p", "active_f"];
    /// roles.csv (above `FLEET_ROWS` replicas, in place of replicas.csv)
    pub const ROLES: &[&str] =
        &["t_s", "role", "replicas", "cpu_p50", "cpu_p95", "cpu_max", "sessions_p50", "sessions_p95", "sessions_max"];
    /// events.csv
    pub const EVENTS: &[&str] = &["t_s", "kind", "replica", "detail"];
    /// queries.csv
    pub const QUERIES: &[&str] = &["session", "class", "replica", "intended_us", "start_us", "end_us", "ok", "error"];
}

/// Everything one run folder holds, rendered.
pub struct RunFiles<'a> {
    /// summary.json
    pub summary: &'a Summary,
    /// The csv rows.
    pub metrics: &'a RunMetrics,
    /// report.html
    pub html: String,
    /// config.toml
    pub config: String,
}

/// Writes the folder to a temporary name, then renames it to `out`
/// (replacing an existing folder only when `force`).
pub fn write_run(out: &Path, force: bool, files: &RunFiles<'_>) -> Result<()> {
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let tmp = crate::fsutil::temp_sibling(out);
    let result = write_all(&tmp, files);
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if out.exists() {
        if !force {
            let _ = fs::remove_dir_all(&tmp);
            anyhow::bail!("{} appeared while the run was going; results are not written over it", out.display());
        }
        fs::remove_dir_all(out).with_context(|| format!("cannot replace {}", out.display()))?;
    }
    fs::rename(&tmp, out).with_context(|| format!("cannot move the run folder into {}", out.display()))
}

fn write_all(dir: &Path, f: &RunFiles<'_>) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let m = f.metrics;
    write_csv(&dir.join("phases.csv"), &m.phases, columns::PHASES)?;
    write_csv(&dir.join("timeseries.csv"), &m.timeseries, columns::SERIES)?;
    match &m.roles {
        Some(roles) => write_csv(&dir.join("roles.csv"), roles, columns::ROLES)?,
        None => write_csv(&dir.join("replicas.csv"), &m.replicas, columns::REPLICAS)?,
    }
    write_csv(&dir.join("events.csv"), &m.events, columns::EVENTS)?;
    if let Some(q) = &m.queries {
        write_csv(&dir.join("queries.csv"), q, columns::QUERIES)?;
    }
    fs::write(dir.join("summary.json"), serde_json::to_string_pretty(f.summary)? + "\n")?;
    fs::write(dir.join("config.toml"), &f.config)?;
    fs::write(dir.join("report.html"), &f.html)?;
    Ok(())
}
