//! The map's files (issue 49): map.json and map.csv (one row per cell and
//! mix, every finding), a heat map per finding under figures/, and
//! map.html, which shows them with what each finding's band is and in how
//! many valid cells it holds.

use super::axes::{self, Axis, Cell, Value};
use super::findings::{Finding, FINDINGS};
use super::heat::{self, Frame, Panel, Square};
use super::MapArgs;
use crate::commands::experiment::figures::Figures;
use crate::error::Error;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// What one cell measured.
pub struct CellResult {
    /// Its values.
    pub cell: Cell,
    /// Its folder name under cells/.
    pub name: String,
    /// Share of a 25:75 session's CPU spent connecting.
    pub connect_share: f64,
    /// Runs, and those that failed a check.
    pub runs: usize,
    /// See `runs`.
    pub runs_failing: usize,
    /// The checks its runs failed.
    pub failed_checks: Vec<String>,
    /// The paper's figures from its runs.
    pub figures: Figures,
    /// The base workload's own point.
    pub chosen: bool,
}

/// map.json's cell.
#[derive(Serialize)]
struct CellJson {
    name: String,
    params: BTreeMap<String, String>,
    connect_cpu_share: f64,
    runs: usize,
    runs_failing: usize,
    failed_checks: Vec<String>,
    chosen: bool,
    /// mix -> finding id -> value.
    findings: BTreeMap<String, BTreeMap<String, Option<f64>>>,
}

#[derive(Serialize)]
struct FindingJson {
    id: &'static str,
    title: &'static str,
    band: String,
}

/// The map, ready to write.
#[derive(Serialize)]
pub struct Map {
    schema_version: u32,
    workload: String,
    axes: Vec<(String, Vec<String>)>,
    mixes: Vec<String>,
    repeat: u32,
    findings: Vec<FindingJson>,
    cells: Vec<CellJson>,
    #[serde(skip)]
    svgs: Vec<(String, String)>,
}

impl Map {
    /// Builds the files' contents from the cells' results.
    pub fn build(args: &MapArgs, axes: &[Axis], results: &[CellResult]) -> Map {
        let mixes = args.mixes.clone();
        let cells: Vec<CellJson> = results.iter().map(|r| cell_json(r, &mixes)).collect();
        Map {
            schema_version: 1,
            workload: args.workload.as_ref().map_or("paper".into(), |p| p.display().to_string()),
            axes: axes
                .iter()
                .map(|a| (a.key.name().to_string(), a.values.iter().map(|v| v.to_string()).collect()))
                .collect(),
            mixes: mixes.clone(),
            repeat: args.repeat,
            findings: FINDINGS.iter().map(|f| FindingJson { id: f.id, title: f.title, band: f.band_text() }).collect(),
            svgs: figures(axes, results, &mixes),
            cells,
        }
    }

    /// Writes map.json, map.csv, figures/*.svg and map.html under `root`.
    pub fn write(&self, root: &Path) -> Result<(), Error> {
        let mut files = vec![
            ("map.json".to_string(), serde_json::to_string_pretty(self).map_err(anyhow::Error::from)? + "\n"),
            ("map.csv".to_string(), self.csv()),
            ("map.html".to_string(), self.html()),
        ];
        std::fs::create_dir_all(root.join("figures")).map_err(|e| Error::Run(e.into()))?;
        files.extend(self.svgs.iter().map(|(name, svg)| (format!("figures/{name}.svg"), svg.clone())));
        for (name, text) in &files {
            let path = root.join(name);
            crate::fsutil::write_atomic(&path, text, 0o666)
                .map_err(|e| Error::Run(anyhow::anyhow!("cannot write {}: {e}", path.display())))?;
        }
        Ok(())
    }

    fn csv(&self) -> String {
        let mut head: Vec<String> = self.axes.iter().map(|(k, _)| k.clone()).collect();
        head.push("mix".into());
        head.extend(FINDINGS.iter().map(|f| f.id.to_string()));
        head.extend(["connect_cpu_share", "runs", "runs_failing", "failed_checks", "chosen"].map(String::from));
        let mut out = head.join(",") + "\n";
        for c in &self.cells {
            for mix in &self.mixes {
                let mut row: Vec<String> = self.axes.iter().map(|(k, _)| c.params[k].clone()).collect();
                row.push(mix.clone());
                row.extend(FINDINGS.iter().map(|f| c.findings[mix][f.id].map_or(String::new(), |v| format!("{v:.4}"))));
                row.push(format!("{:.4}", c.connect_cpu_share));
                row.extend([
                    c.runs.to_string(),
                    c.runs_failing.to_string(),
                    c.failed_checks.join(" "),
                    c.chosen.to_string(),
                ]);
                out.push_str(&row.join(","));
                out.push('\n');
            }
        }
        out
    }

    /// Per finding and mix: the valid cells where it holds, of the valid cells.
    fn holds(&self, f: &Finding, mix: &str) -> (usize, usize) {
        let valid: Vec<&CellJson> = self.cells.iter().filter(|c| c.runs_failing == 0).collect();
        let held = valid.iter().filter(|c| c.findings[mix][f.id].is_some_and(|v| f.holds(v))).count();
        (held, valid.len())
    }

    /// [`Self::holds`] at every mix, in order.
    fn held<'a>(&'a self, f: &'a Finding) -> impl Iterator<Item = (usize, usize)> + 'a {
        self.mixes.iter().map(move |m| self.holds(f, m))
    }

    fn html(&self) -> String {
        let mut rows = String::new();
        for f in &FINDINGS {
            let cells: Vec<String> = self.held(f).map(|(h, n)| format!("<td>{h} of {n}</td>")).collect();
            rows.push_str(&format!("<tr><td>{}</td><td>{}</td>{}</tr>\n", f.title, f.band_text(), cells.concat()));
        }
        let mix_heads: String = self.mixes.iter().map(|m| format!("<th>{m}</th>")).collect();
        // The figures are files beside the page (figures/*.svg), not inlined:
        // a map draws a figure per finding and facet, and the page stays small.
        let svgs: String = self
            .svgs
            .iter()
            .map(|(name, _)| format!("<figure><img src=\"figures/{name}.svg\" alt=\"{name}\"></figure>\n"))
            .collect();
        let axes: Vec<String> = self.axes.iter().map(|(k, v)| format!("{k} = {}", v.join(", "))).collect();
        format!(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>plbbench map</title>\
            <style>body{{font-family:sans-serif;margin:24px}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px}}figure{{margin:24px 0}}</style></head><body>\
            <h1>Where the paper's findings hold</h1><p>Workload <b>{}</b>, axes: {}; {} repeats a cell; every cell runs premium-fault (plb, 3RR+2RR) and cascade (plb, 5RR) on the simulator. Numbers: map.csv, map.json.</p>\
            <h2>In how many valid cells each finding lies in the paper's band</h2><table><tr><th>finding</th><th>paper</th>{mix_heads}</tr>\n{rows}</table>\
            <h2>Heat maps</h2>{svgs}</body></html>\n",
            self.workload,
            axes.join("; "),
            self.repeat
        )
    }

    /// The terminal's summary: per finding and mix, the valid cells where it holds.
    pub fn summary_text(&self) -> String {
        let mut out = format!("{:<58} {:>10}  {}\n", "finding", "paper", self.mixes.join("  "));
        for f in &FINDINGS {
            let per: Vec<String> = self.held(f).map(|(h, n)| format!("{h}/{n}")).collect();
            out.push_str(&format!("{:<58} {:>10}  {}\n", f.title, f.band_text(), per.join("  ")));
        }
        let invalid = self.cells.iter().filter(|c| c.runs_failing > 0).count();
        out.push_str(&format!(
            "{} cells, {invalid} with a run that failed a check (hatched, not counted)\n",
            self.cells.len()
        ));
        out
    }
}

fn cell_json(r: &CellResult, mixes: &[String]) -> CellJson {
    CellJson {
        name: r.name.clone(),
        params: r.cell.iter().map(|(k, v)| (k.name().to_string(), v.to_string())).collect(),
        connect_cpu_share: (r.connect_share * 1e4).round() / 1e4,
        runs: r.runs,
        runs_failing: r.runs_failing,
        failed_checks: r.failed_checks.clone(),
        chosen: r.chosen,
        findings: mixes
            .iter()
            .map(|m| (m.clone(), FINDINGS.iter().map(|f| (f.id.to_string(), f.value(&r.figures, m))).collect()))
            .collect(),
    }
}

/// A heat map per finding (and per combination of the axes past the
/// second), named `<finding>[-<facet>]`.
fn figures(axes: &[Axis], results: &[CellResult], mixes: &[String]) -> Vec<(String, String)> {
    let labels = |a: Option<&Axis>| match a {
        Some(a) => (a.key.name().to_string(), a.values.iter().map(Value::to_string).collect()),
        None => (String::new(), vec![String::new()]),
    };
    let frame = Frame { x: labels(axes.first()), y: labels(axes.get(1)) };
    let index = |a: Option<&Axis>, c: &Cell| {
        a.map_or(0, |a| a.values.iter().position(|v| Some(*v) == axes::get(c, a.key)).unwrap_or(0))
    };
    let facet = |c: &Cell| axes::cell_name(&c.iter().skip(2).copied().collect());
    let mut facets: Vec<String> = results.iter().map(|r| facet(&r.cell)).collect();
    facets.dedup();
    let mut out = Vec::new();
    for f in &FINDINGS {
        for fc in &facets {
            let panels: Vec<Panel> = mixes
                .iter()
                .map(|m| Panel {
                    mix: m.clone(),
                    squares: results
                        .iter()
                        .filter(|r| &facet(&r.cell) == fc)
                        .map(|r| Square {
                            at: (index(axes.first(), &r.cell), index(axes.get(1), &r.cell)),
                            value: f.value(&r.figures, m),
                            invalid: r.runs_failing > 0,
                            chosen: r.chosen,
                        })
                        .collect(),
                })
                .collect();
            let name = if fc.is_empty() { f.id.to_string() } else { format!("{}-{fc}", f.id) };
            out.push((name, heat::svg(f, &frame, &panels, fc)));
        }
    }
    out
}
