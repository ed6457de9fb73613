//! The outputs of `plbbench compare`: an aligned text table for terminals
//! and CI logs, a Markdown table for pull-request comments, JSON for tools,
//! and a self-contained HTML page with charts (minijinja template
//! `templates/compare.html`, SVG bars from `report::charts::spread_bars`).
//! Rendering only: every number comes from the pure comparison model.

use super::model::{Better, Delta, Folder, Group, Kind, Metric, Row, Value, Verdict};
use super::threshold::Check;
use crate::core::model::Class;
use crate::report::charts::{self, sig3, BarPanel, BarSeries, ChartError};
use crate::stats::Spread;
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use plotters::style::RGBColor;
use serde::Serialize;

/// The page template, embedded at build time.
const TEMPLATE: &str = include_str!("../../../templates/compare.html");

/// A missing number.
const DASH: &str = "–";

/// One colour per compared folder on the page (the baseline dark grey),
/// cycled beyond eight; none is a class colour, as each chart is of one class.
const FOLDER_COLOURS: [RGBColor; 8] = [
    RGBColor(0x5f, 0x63, 0x68),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0xd6, 0x27, 0x28),
];

fn folder_colour(i: usize) -> RGBColor {
    FOLDER_COLOURS[i % FOLDER_COLOURS.len()]
}

/// Everything one comparison shows.
pub struct Report<'a> {
    /// The folders, baseline first.
    pub folders: &'a [Folder],
    /// The side-by-side groups.
    pub groups: &'a [Group],
    /// Threshold outcomes (empty without `--threshold`).
    pub checks: &'a [Check],
}

/// The short label of folder `i` in tables: A (the baseline), B, C, ...
pub fn label(i: usize) -> String {
    match u8::try_from(i) {
        Ok(i) if i < 26 => char::from(b'A' + i).to_string(),
        _ => format!("F{}", i + 1),
    }
}

fn class_name(c: Option<Class>) -> &'static str {
    match c {
        Some(Class::P) => "Premium",
        Some(Class::F) => "Freemium",
        None => "(phase)",
    }
}

fn value(m: Metric, v: Option<Value>) -> String {
    v.and_then(|v| v.value).map_or(DASH.to_string(), |x| m.format(x))
}

/// The change as the metric's tables show it: `+12.3%` or `+0.0500`.
fn change(m: Metric, d: &Delta) -> String {
    let signed = |x: f64, unit: &str| {
        if x.is_infinite() {
            format!("{}inf{unit}", if x > 0.0 { "+" } else { "-" })
        } else {
            format!("{}{}{unit}", if x >= 0.0 { "+" } else { "" }, sig3(x))
        }
    };
    match (m.relative(), d.pct, d.abs) {
        (true, Some(p), _) => signed(p, "%"),
        (false, _, Some(a)) if m.count() && a.is_finite() => {
            format!("{}{}", if a >= 0.0 { "+" } else { "" }, m.format(a))
        }
        (false, _, Some(a)) => signed(a, ""),
        _ => DASH.into(),
    }
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Good => "good",
        Verdict::Bad => "bad",
        Verdict::Same => "same",
        Verdict::Noise => "noise",
        Verdict::Changed => "changed",
        Verdict::Unknown => "n/a",
    }
}

/// One folder's line of the legend.
fn describe(f: &Folder) -> String {
    let i = &f.info;
    let mut parts = vec![
        match f.kind {
            Kind::Run => "run".to_string(),
            Kind::Experiment if i.runs == 0 => "experiment".to_string(),
            Kind::Experiment => format!("experiment of {} runs", i.runs),
        },
        i.strategies.join(","),
        i.mixes.join(","),
        i.faults.join(","),
    ];
    if let Some(t) = i.clients {
        parts.push(format!("T={t}"));
    }
    parts.push(i.cluster.clone());
    if let Some(s) = &i.started_utc {
        parts.push(s.clone());
    }
    if i.partial {
        parts.push("PARTIAL".into());
    }
    parts.join(" · ")
}

fn group_title(g: &Group) -> String {
    g.selection.clone().unwrap_or_else(|| "runs side by side".into())
}

/// Text: a legend, one aligned table per group, then the threshold checks.
pub fn text(r: &Report<'_>) -> String {
    let mut out = String::new();
    out.push_str(&format!("plbbench compare: {} folders; deltas against A\n", r.folders.len()));
    for (i, f) in r.folders.iter().enumerate() {
        out.push_str(&format!("  {}  {}  ({})\n", label(i), f.dir, describe(f)));
    }
    if r.folders.iter().any(|f| f.kind == Kind::Experiment) {
        out.push_str("  experiment values are medians across repeats (quartiles in --format json and --html)\n");
    }
    for g in r.groups {
        out.push_str(&format!("\n== {} ==\n", group_title(g)));
        let mut header = vec!["phase".to_string(), "K+".into(), "class".into(), "metric".into(), "better".into()];
        for i in 0..r.folders.len() {
            header.push(label(i));
            if i > 0 {
                header.push(format!("change {}", label(i)));
            }
        }
        let mut lines = vec![header];
        for row in &g.rows {
            lines.push(cells(row, false));
        }
        out.push_str(&align(&lines));
    }
    out.push_str(&checks_text(r.checks));
    out
}

fn better_word(b: Better) -> &'static str {
    match b {
        Better::Higher => "higher",
        Better::Lower => "lower",
        Better::Neither => "neither",
    }
}

/// The cells of one row: labels, then each value and each change with its verdict.
fn cells(row: &Row, markdown: bool) -> Vec<String> {
    let mut c = vec![
        row.phase.clone(),
        row.survivors.to_string(),
        class_name(row.class).to_string(),
        row.metric.name().to_string(),
        better_word(row.better).to_string(),
    ];
    for (i, v) in row.values.iter().enumerate() {
        c.push(value(row.metric, *v));
        if let Some(Some(d)) = row.deltas.get(i) {
            let text = format!("{} {}", change(row.metric, d), verdict_word(d.verdict));
            c.push(if markdown && d.verdict == Verdict::Bad { format!("**{text}**") } else { text });
        }
    }
    c
}

/// Left-aligned text columns separated by two spaces.
fn align(lines: &[Vec<String>]) -> String {
    let n = lines.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..n).map(|i| lines.iter().filter_map(|l| l.get(i)).map(|s| s.chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for l in lines {
        let padded: Vec<String> = l.iter().enumerate().map(|(i, s)| format!("{s:<w$}", w = widths[i])).collect();
        out.push_str(padded.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn checks_text(checks: &[Check]) -> String {
    if checks.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nthresholds (against A):\n");
    for c in checks {
        out.push_str(&format!("  {:<8}  {} ({})\n", if c.ok { "ok" } else { "VIOLATED" }, c, c.expr));
    }
    let bad = checks.iter().filter(|c| !c.ok).count();
    out.push_str(&format!("{bad} of {} checks violated\n", checks.len()));
    out
}

/// Markdown: the legend as a list, one table per group, the violated checks as a table.
pub fn markdown(r: &Report<'_>) -> String {
    let mut out = String::from("### plbbench compare\n\n");
    for (i, f) in r.folders.iter().enumerate() {
        let base = if i == 0 { " (baseline)" } else { "" };
        out.push_str(&format!("- **{}**{base}: `{}` ({})\n", label(i), f.dir, md(&describe(f))));
    }
    for g in r.groups {
        out.push_str(&format!("\n#### {}\n\n", md(&group_title(g))));
        let mut header = ["phase", "K+", "class", "metric", "better"].iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for i in 0..r.folders.len() {
            header.push(label(i));
            if i > 0 {
                header.push(format!("Δ {}", label(i)));
            }
        }
        out.push_str(&md_row(&header));
        out.push_str(&md_row(
            &header.iter().enumerate().map(|(i, _)| if i < 5 { "---" } else { "---:" }.to_string()).collect::<Vec<_>>(),
        ));
        for row in &g.rows {
            out.push_str(&md_row(&cells(row, true).iter().map(|c| md(c)).collect::<Vec<_>>()));
        }
    }
    if !r.checks.is_empty() {
        let bad = r.checks.iter().filter(|c| !c.ok).count();
        out.push_str(&format!("\n#### Thresholds: {bad} of {} checks violated\n\n", r.checks.len()));
        // Only the violations: a pull-request comment has little room.
        if bad > 0 {
            out.push_str("| violation | expression |\n| --- | --- |\n");
            for c in r.checks.iter().filter(|c| !c.ok) {
                out.push_str(&format!("| {} | `{}` |\n", md(&c.to_string()), c.expr.replace('`', "'")));
            }
        }
    }
    out
}

fn md_row(cells: &[String]) -> String {
    format!("| {} |\n", cells.join(" | "))
}

/// Escapes the characters that would break a Markdown table cell.
fn md(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

#[derive(Serialize)]
struct JsonFolder<'a> {
    label: String,
    dir: &'a str,
    kind: Kind,
    baseline: bool,
    info: &'a super::model::Info,
}

#[derive(Serialize)]
struct JsonOut<'a> {
    plbbench_version: &'static str,
    folders: Vec<JsonFolder<'a>>,
    groups: &'a [Group],
    checks: &'a [Check],
    violations: usize,
}

/// JSON: folders, groups with every value, quartile and delta, and the checks.
pub fn json(r: &Report<'_>) -> serde_json::Result<String> {
    let folders = r
        .folders
        .iter()
        .enumerate()
        .map(|(i, f)| JsonFolder { label: label(i), dir: &f.dir, kind: f.kind, baseline: i == 0, info: &f.info })
        .collect();
    let out = JsonOut {
        plbbench_version: env!("CARGO_PKG_VERSION"),
        folders,
        groups: r.groups,
        checks: r.checks,
        violations: r.checks.iter().filter(|c| !c.ok).count(),
    };
    Ok(serde_json::to_string_pretty(&out)? + "\n")
}

#[derive(Serialize)]
struct PageFolder {
    label: String,
    dir: String,
    describe: String,
    colour: String,
}

#[derive(Serialize)]
struct PageCell {
    text: String,
    iqr: String,
    change: String,
    verdict: &'static str,
}

#[derive(Serialize)]
struct PageRow {
    phase: String,
    survivors: usize,
    class: String,
    class_name: &'static str,
    metric: &'static str,
    better: &'static str,
    first: bool,
    cells: Vec<PageCell>,
}

#[derive(Serialize)]
struct PageGroup {
    title: String,
    charts: Vec<minijinja::Value>,
    rows: Vec<PageRow>,
}

#[derive(Serialize)]
struct PageCheck {
    ok: bool,
    line: String,
    expr: String,
}

#[derive(Serialize)]
struct Page {
    folders: Vec<PageFolder>,
    groups: Vec<PageGroup>,
    checks: Vec<PageCheck>,
    violations: usize,
    version: &'static str,
}

/// Why the page could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum HtmlError {
    /// A chart failed to draw.
    #[error(transparent)]
    Chart(#[from] ChartError),
    /// The template failed.
    #[error("cannot render the comparison template: {0}")]
    Template(#[from] minijinja::Error),
}

/// The self-contained comparison page.
pub fn html(r: &Report<'_>) -> Result<String, HtmlError> {
    let labels: Vec<String> =
        r.folders.iter().enumerate().map(|(i, f)| format!("{}: {}", label(i), short_name(&f.dir))).collect();
    let folders = r
        .folders
        .iter()
        .enumerate()
        .map(|(i, f)| PageFolder {
            label: label(i),
            dir: f.dir.clone(),
            describe: describe(f),
            colour: charts::hex(folder_colour(i)),
        })
        .collect();
    let mut groups = Vec::with_capacity(r.groups.len());
    for g in r.groups {
        let mut svgs = Vec::new();
        for class in Class::ALL {
            let panel = |m: Metric, y_desc: &str| BarPanel {
                y_desc: y_desc.into(),
                groups: phase_names(g),
                series: series(g, class, m, &labels),
                reference: None,
            };
            let name = if class == Class::P { "Premium comparison" } else { "Freemium comparison" };
            let svg = charts::spread_bars(
                name,
                &[panel(Metric::GoodputQps, "goodput (queries/s)"), panel(Metric::P95Ms, "p95 latency (ms)")],
            )?;
            svgs.push(minijinja::Value::from_safe_string(svg));
        }
        groups.push(PageGroup { title: group_title(g), charts: svgs, rows: page_rows(g) });
    }
    let checks = r.checks.iter().map(|c| PageCheck { ok: c.ok, line: c.to_string(), expr: c.expr.clone() }).collect();
    let page = Page {
        folders,
        groups,
        checks,
        violations: r.checks.iter().filter(|c| !c.ok).count(),
        version: env!("CARGO_PKG_VERSION"),
    };
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.add_template("compare.html", TEMPLATE)?;
    Ok(env.get_template("compare.html")?.render(&page)?)
}

/// The folder's last path component, cut to fit a chart legend.
fn short_name(dir: &str) -> String {
    let name = std::path::Path::new(dir).file_name().map_or(dir.to_string(), |n| n.to_string_lossy().into_owned());
    if name.chars().count() <= 16 {
        name
    } else {
        name.chars().take(15).collect::<String>() + "…"
    }
}

fn phase_names(g: &Group) -> Vec<String> {
    g.phases.iter().map(|(p, _)| p.clone()).collect()
}

/// One bar series per folder of metric `m` of `class`, one value per phase
/// (an experiment's median with its quartiles, a run's value alone).
fn series(g: &Group, class: Class, m: Metric, labels: &[String]) -> Vec<BarSeries> {
    labels
        .iter()
        .enumerate()
        .map(|(i, label)| BarSeries {
            label: label.clone(),
            colour: folder_colour(i),
            values: g
                .phases
                .iter()
                .map(|(p, _)| {
                    let row = g.rows.iter().find(|r| &r.phase == p && r.class == Some(class) && r.metric == m)?;
                    let v = row.values[i]?;
                    Some(Spread { n: v.n, median: v.value, q1: v.q1, q3: v.q3 })
                })
                .collect(),
        })
        .collect()
}

fn page_rows(g: &Group) -> Vec<PageRow> {
    let mut last_phase = None;
    g.rows
        .iter()
        .map(|row| {
            let first = last_phase != Some(&row.phase);
            last_phase = Some(&row.phase);
            let cells = row
                .values
                .iter()
                .zip(&row.deltas)
                .map(|(v, d)| PageCell {
                    text: value(row.metric, *v),
                    iqr: match v {
                        Some(Value { q1: Some(a), q3: Some(b), .. }) => format!("{}–{}", sig3(*a), sig3(*b)),
                        _ => String::new(),
                    },
                    change: d.as_ref().map_or(String::new(), |d| change(row.metric, d)),
                    verdict: d.as_ref().map_or("base", |d| verdict_word(d.verdict)),
                })
                .collect();
            PageRow {
                phase: row.phase.clone(),
                survivors: row.survivors,
                class: row.class.map_or("phase".to_string(), |c| c.to_string()),
                class_name: class_name(row.class),
                metric: row.metric.name(),
                better: better_word(row.better),
                first,
                cells,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_changes() {
        assert_eq!((label(0), label(1), label(25), label(26)), ("A".into(), "B".into(), "Z".into(), "F27".into()));
        let d = crate::commands::compare::model::delta(Metric::P95Ms, Some(100.0), Some(112.3));
        assert_eq!(change(Metric::P95Ms, &d), "+12.3%");
        let d = crate::commands::compare::model::delta(Metric::Retention, Some(0.9), Some(0.85));
        assert_eq!(change(Metric::Retention, &d), "-0.0500");
        let d = crate::commands::compare::model::delta(Metric::GoodputQps, Some(0.0), Some(3.0));
        assert_eq!(change(Metric::GoodputQps, &d), "+inf%");
        assert_eq!(md("a|b"), "a\\|b");
        assert_eq!(short_name("reports/examples/run-a"), "run-a");
        assert_eq!(short_name("x/real-cascade-25-75-rr-split"), "real-cascade-25…");
    }

    #[test]
    fn align_pads_columns() {
        let t = align(&[vec!["a".into(), "bb".into()], vec!["ccc".into(), "d".into()]]);
        assert_eq!(t, "a    bb\nccc  d\n");
    }
}
