//! The report archive (docs/manual.md, "Archive"): `reports/index.html`, one page listing
//! every run and experiment folder under the archive root (recursively,
//! reports/examples/ included), newest first, with its key figures and a
//! relative link to its report. `plbbench archive` rebuilds it; `run` and
//! `experiment` refresh it after writing a folder under the root (a failed
//! refresh only warns). The folders are read through `compare::load`, so
//! the archive and `compare` agree on what a folder holds; the runs inside
//! an experiment folder are counted in its entry, not listed one by one.

use super::compare::load;
use super::compare::model::{Cell, Folder, Kind, Metric, Selection};
use crate::core::model::Class;
use crate::error::{input, Error};
use crate::report::charts::sig3;
use anyhow::Context;
use clap::Args;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The page template, embedded at build time.
const TEMPLATE: &str = include_str!("../../templates/archive.html");

/// The archive root of `run` and `experiment` (relative to the working folder).
pub const DEFAULT_ROOT: &str = "reports";

/// How deep below the root folders are searched.
const MAX_DEPTH: usize = 8;

/// `plbbench archive`.
#[derive(Debug, Args, Clone)]
pub struct ArchiveArgs {
    /// Folder whose run and experiment folders to index, recursively; index.html is written into it.
    #[arg(long, default_value = DEFAULT_ROOT, value_name = "DIR")]
    pub root: PathBuf,
}

/// `plbbench archive`: rebuilds `<root>/index.html`.
pub fn archive(args: ArchiveArgs) -> Result<(), Error> {
    if !args.root.is_dir() {
        return Err(input("--root", format!("{} is not a folder", args.root.display())));
    }
    let (path, n) = rebuild(&args.root)?;
    eprintln!("wrote {} ({n} folders)", path.display());
    Ok(())
}

/// Refreshes the default archive after a run or an experiment wrote `out`,
/// when `out` lies under it; a failure is a warning on stderr, never an error.
pub fn refresh_after(out: &Path) {
    let root = Path::new(DEFAULT_ROOT);
    let (Ok(root_abs), Ok(out_abs)) = (std::fs::canonicalize(root), std::fs::canonicalize(out)) else { return };
    if !out_abs.starts_with(&root_abs) {
        return;
    }
    if let Err(e) = rebuild(root) {
        eprintln!("plbbench: warning: cannot refresh {}: {e:#}", root.join("index.html").display());
    }
}

/// Scans `root` and writes `root/index.html` atomically; returns its path
/// and the number of folders listed.
pub fn rebuild(root: &Path) -> Result<(PathBuf, usize), Error> {
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    scan(root, root, 0, &mut entries, &mut skipped);
    for why in &skipped {
        eprintln!("plbbench: archive: skipped {why}");
    }
    entries.sort_by(|a, b| b.sort_key.cmp(&a.sort_key).then_with(|| a.name.cmp(&b.name)));
    let n = entries.len();
    let page = Page { root: root.display().to_string(), entries, skipped, version: env!("CARGO_PKG_VERSION") };
    let html = render(&page).context("rendering the archive page")?;
    let path = root.join("index.html");
    crate::fsutil::write_atomic(&path, &html, 0o666)
        .map_err(|e| Error::Run(anyhow::anyhow!("cannot write {}: {e}", path.display())))?;
    Ok((path, n))
}

fn render(page: &Page) -> Result<String, minijinja::Error> {
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.add_template("archive.html", TEMPLATE)?;
    env.get_template("archive.html")?.render(page)
}

/// Depth-first: a folder with experiment.json or summary.json is an entry,
/// and so is a findings map (map.json; not descended into); hidden folders
/// (temporary writes) and symbolic links are skipped.
fn scan(root: &Path, dir: &Path, depth: usize, out: &mut Vec<Entry>, skipped: &mut Vec<String>) {
    let Ok(read) = std::fs::read_dir(dir) else { return };
    let mut children: Vec<PathBuf> = read
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    children.sort();
    for child in children {
        let is_folder = ["experiment.json", "experiment.csv", "summary.json"].iter().any(|f| child.join(f).is_file());
        if child.join("map.json").is_file() {
            match map_entry(root, &child) {
                Some(e) => out.push(e),
                None => skipped.push(format!("{}: map.json does not parse", child.display())),
            }
        } else if is_folder {
            match load::load(&child) {
                Ok(folder) => out.push(entry(root, &child, &folder)),
                Err(e) => skipped.push(e.to_string()),
            }
        } else if depth < MAX_DEPTH {
            scan(root, &child, depth + 1, out, skipped);
        }
    }
}

/// Key figures of one cell: class p95 and retention in the worst phase.
#[derive(Serialize)]
struct Figures {
    label: String,
    phase: String,
    p_p95: String,
    p_retention: String,
    f_p95: String,
    f_retention: String,
}

/// One line of the archive.
#[derive(Serialize)]
struct Entry {
    /// Recorded start (else folder time) in seconds, then the folder time in nanoseconds.
    #[serde(skip)]
    sort_key: (i64, i128),
    when: String,
    when_source: &'static str,
    kind: &'static str,
    name: String,
    link: minijinja::Value,
    link_text: &'static str,
    strategies: Vec<String>,
    mixes: Vec<String>,
    faults: Vec<String>,
    clients: String,
    cluster: String,
    scale: String,
    runs: usize,
    partial: bool,
    /// Which cells the figures of an experiment come from.
    figures_of: String,
    figures: Vec<Figures>,
}

#[derive(Serialize)]
struct Page {
    root: String,
    entries: Vec<Entry>,
    skipped: Vec<String>,
    version: &'static str,
}

fn entry(root: &Path, dir: &Path, f: &Folder) -> Entry {
    let (secs, when, when_source) = timestamp(dir, f);
    let mtime = std::fs::metadata(dir).and_then(|m| m.modified()).ok();
    let nanos = mtime.and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos() as i128);
    let rel = dir.strip_prefix(root).unwrap_or(dir);
    let (target, link_text) = ["report.html", "experiment.json", "summary.json", "experiment.csv"]
        .into_iter()
        .find(|t| dir.join(t).is_file())
        .map_or(("", "folder"), |t| (t, if t == "report.html" { "report" } else { t }));
    let i = &f.info;
    Entry {
        sort_key: (secs, nanos),
        when,
        when_source,
        kind: match f.kind {
            Kind::Run => "run",
            Kind::Experiment => "experiment",
        },
        name: rel.display().to_string(),
        // Safe: percent-encoding leaves only [A-Za-z0-9-._~%/].
        link: minijinja::Value::from_safe_string(href(&rel.join(target))),
        link_text,
        strategies: i.strategies.clone(),
        mixes: i.mixes.clone(),
        faults: i.faults.clone(),
        clients: i.clients.map_or("–".into(), |t| t.to_string()),
        cluster: i.cluster.clone(),
        scale: i.time_scale.map_or("–".into(), |x| format!("{x}×")),
        runs: i.runs,
        partial: i.partial,
        figures_of: match (f.kind, f.selections().first()) {
            (Kind::Experiment, Some(s)) => format!("figures: medians of {}, {}", s.mix, s.faults),
            _ => String::new(),
        },
        figures: figures(f),
    }
}

/// A findings map's line (`plbbench map`): its mixes and cells, linked to
/// map.html, dated by its folder.
fn map_entry(root: &Path, dir: &Path) -> Option<Entry> {
    #[derive(serde::Deserialize)]
    struct MapFile {
        workload: String,
        mixes: Vec<String>,
        cells: Vec<serde_json::Value>,
    }
    let text = std::fs::read_to_string(dir.join("map.json")).ok()?;
    let m: MapFile = serde_json::from_str(&text).ok()?;
    let mtime = std::fs::metadata(dir).and_then(|m| m.modified()).ok()?;
    let utc: chrono::DateTime<chrono::Utc> = mtime.into();
    let rel = dir.strip_prefix(root).unwrap_or(dir);
    Some(Entry {
        sort_key: (utc.timestamp(), utc.timestamp_nanos_opt().map_or(0, i128::from)),
        when: utc.format("%Y-%m-%d %H:%M:%S").to_string(),
        when_source: "folder time",
        kind: "map",
        name: rel.display().to_string(),
        link: minijinja::Value::from_safe_string(href(&rel.join("map.html"))),
        link_text: "map",
        strategies: vec!["plb".into(), "rr-split".into(), "rr".into()],
        mixes: m.mixes,
        faults: vec!["premium-fault".into(), "cascade".into()],
        clients: "–".into(),
        cluster: "sim".into(),
        scale: "–".into(),
        runs: m.cells.len(),
        partial: false,
        figures_of: format!("findings map of {} over {} cells", m.workload, m.cells.len()),
        figures: Vec::new(),
    })
}

/// Seconds since the epoch, the text shown, and where it came from:
/// the recorded start (summary.json; an experiment's first run), else the
/// folder's modification time.
fn timestamp(dir: &Path, f: &Folder) -> (i64, String, &'static str) {
    if let Some(t) = f.info.started_utc.as_deref().and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok()) {
        let utc = t.with_timezone(&chrono::Utc);
        return (utc.timestamp(), utc.format("%Y-%m-%d %H:%M:%S").to_string(), "recorded");
    }
    let mtime = std::fs::metadata(dir).and_then(|m| m.modified()).ok();
    match mtime {
        Some(m) => {
            let utc: chrono::DateTime<chrono::Utc> = m.into();
            (utc.timestamp(), utc.format("%Y-%m-%d %H:%M:%S").to_string(), "folder time")
        }
        None => (i64::MIN, "–".into(), "unknown"),
    }
}

/// A relative URL: each path segment percent-encoded, prefixed `./` so a
/// segment with `:` is never read as a scheme.
pub fn href(rel: &Path) -> String {
    let segs: Vec<String> = rel
        .components()
        .map(|c| {
            let s = c.as_os_str().to_string_lossy();
            s.bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
                    _ => format!("%{b:02X}"),
                })
                .collect()
        })
        .collect();
    format!("./{}", segs.join("/"))
}

/// One line per cell of a run (one) or of an experiment's first mix and
/// fault preset (one per strategy): the phase with the fewest survivors.
fn figures(f: &Folder) -> Vec<Figures> {
    let sels = f.selections();
    let first = sels.first().map(|s| (s.mix.clone(), s.faults.clone()));
    sels.into_iter()
        .filter(|s| first.as_ref().is_some_and(|(m, x)| &s.mix == m && &s.faults == x))
        .map(|s| cell_figures(f, s))
        .collect()
}

fn cell_figures(f: &Folder, sel: &Selection) -> Figures {
    let phases = f.phases(sel);
    let worst = phases.iter().min_by_key(|p| p.1).map(|p| p.0.to_string());
    let get = |class: Class, m: Metric| -> String {
        let v = worst.as_deref().and_then(|p| f.cell(sel, p, class)).and_then(|c: &Cell| c.get(m).value);
        v.map_or("–".into(), sig3)
    };
    let label = match f.kind {
        Kind::Run => String::new(),
        Kind::Experiment => sel.strategy.clone(),
    };
    Figures {
        label,
        phase: match &worst {
            Some(p) => format!("{p} (K+={})", phases.iter().find(|q| q.0 == p).map_or(0, |q| q.1)),
            None => "–".into(),
        },
        p_p95: get(Class::P, Metric::P95Ms),
        p_retention: get(Class::P, Metric::Retention),
        f_p95: get(Class::F, Metric::P95Ms),
        f_retention: get(Class::F, Metric::Retention),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hrefs_are_relative_and_encoded() {
        assert_eq!(href(Path::new("examples/run-25:75/report.html")), "./examples/run-25%3A75/report.html");
        assert_eq!(href(Path::new("a b/é")), "./a%20b/%C3%A9");
    }
}
