//! An experiment's report.html (docs/manual.md, "Subcommands": experiment):
//! the paper's figures drawn from our runs, each saying which runs it comes
//! from. RQ1 as a table and bars (Premium-side fault, plb vs rr-split),
//! Fig. 4 style bars per phase (goodput, p95, session lifetime per class,
//! plb vs rr, whiskers the interquartile range across repeats), Fig. 5
//! style (p95 of plb relative to rr) and Fig. 6 style (plb's p95 relative
//! to each class's baseline), then the whole grid as a table and every run
//! linked. A view model of preformatted strings rendered through
//! `templates/experiment.html`.

use super::figures::{Figures, Rq2, Rq3, CASCADE_PHASES};
use crate::core::model::Class;
use crate::report::charts::{self, sig3, BarPanel, BarSeries};
use crate::report::experiment::{CellRow, ExperimentFile, RunEntry};
use crate::report::html::{Colours, ReportError, STYLE};
use crate::stats::Spread;
use minijinja::{AutoEscape, Environment, UndefinedBehavior, Value};
use plotters::style::RGBColor;
use serde::Serialize;

const TEMPLATE: &str = include_str!("../../../templates/experiment.html");

/// The baseline strategies of the comparisons, drawn in greys.
const OTHER: RGBColor = RGBColor(0x9a, 0x9a, 0x9a);
/// One colour per mix in the Fig. 6 panels (none is a class colour).
const MIX_COLOURS: [RGBColor; 4] =
    [RGBColor(0x2c, 0xa0, 0x2c), RGBColor(0x94, 0x67, 0xbd), RGBColor(0x8c, 0x56, 0x4b), RGBColor(0x17, 0xbe, 0xcf)];

/// The experiment's report.html and each figure's SVG by id (written as
/// `figures/<id>.svg` beside it, for papers and READMEs).
pub struct Rendered {
    /// The page.
    pub html: String,
    /// `(id, svg)` of every figure, in page order.
    pub svgs: Vec<(String, String)>,
}

/// Renders the experiment's report.html.
pub fn render(file: &ExperimentFile, figures: &Figures) -> Result<Rendered, ReportError> {
    let page = Page::new(file, figures)?;
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.add_template("style.css", STYLE)?;
    env.add_template("experiment.html", TEMPLATE)?;
    let html = env.get_template("experiment.html")?.render(&page)?;
    let svgs = page.figures.iter().map(|f| (f.id.clone(), f.svg.as_str().unwrap_or_default().to_string())).collect();
    Ok(Rendered { html, svgs })
}

#[derive(Serialize)]
struct Page {
    colours: Colours,
    title: Vec<(String, String)>,
    rq1: Vec<Rq1View>,
    figures: Vec<FigureView>,
    cells: Vec<CellView>,
    runs: Vec<RunView>,
    /// Runs left out of every aggregate for a failed check.
    excluded: usize,
    quantiles: String,
}

#[derive(Serialize)]
struct Rq1View {
    mix: String,
    sides: Vec<SideView>,
    gain_pp: String,
}

#[derive(Serialize)]
struct SideView {
    strategy: &'static str,
    n: usize,
    retention: String,
    u_mean: String,
    cv: String,
}

/// A figure: its SVG, a caption, and links to the runs it comes from.
#[derive(Serialize)]
struct FigureView {
    id: String,
    title: String,
    svg: Value,
    caption: String,
    runs: Vec<Link>,
}

#[derive(Serialize)]
struct Link {
    label: String,
    href: String,
}

#[derive(Serialize)]
struct CellView {
    fault: String,
    mix: String,
    strategy: String,
    phase: String,
    class: String,
    runs: usize,
    goodput: String,
    retention: String,
    p95: String,
    lifetime: String,
    cpu: String,
}

#[derive(Serialize)]
struct RunView {
    name: String,
    href: String,
    fault: String,
    mix: String,
    strategy: String,
    repeat: u32,
    seed: u64,
    wall: String,
    reused: bool,
    excluded: String,
}

/// `median [q1, q3]`, "–" when there is none.
fn spread_text(s: &Spread) -> String {
    match (s.median, s.q1, s.q3) {
        (Some(m), Some(a), Some(b)) if s.n > 1 => format!("{} [{}, {}]", sig3(m), sig3(a), sig3(b)),
        (Some(m), ..) => sig3(m),
        _ => "–".into(),
    }
}

fn signed(v: Option<f64>, unit: &str) -> String {
    v.map_or("–".into(), |v| format!("{v:+.1}{unit}"))
}

/// A median-only spread, for derived figures (ratios of medians).
fn point(v: Option<f64>) -> Option<Spread> {
    v.map(|m| Spread { n: 1, median: Some(m), q1: None, q3: None })
}

/// Links to the runs of `fault`, `mix` and any of `strategies`.
fn links(file: &ExperimentFile, fault: &str, mix: &str, strategies: &[&str]) -> Vec<Link> {
    let pick = |r: &&RunEntry| {
        r.fault == fault && r.mix == mix && strategies.contains(&r.strategy.as_str()) && r.excluded.is_empty()
    };
    file.runs.iter().filter(pick).map(|r| Link { label: run_name(r), href: format!("{}/report.html", r.dir) }).collect()
}

fn run_name(r: &RunEntry) -> String {
    r.dir.rsplit('/').next().unwrap_or(&r.dir).to_string()
}

impl Page {
    fn new(file: &ExperimentFile, f: &Figures) -> Result<Page, ReportError> {
        let s = &file.settings;
        let title = vec![
            ("strategies".into(), file.strategies.join(", ")),
            ("mixes".into(), file.mixes.join(", ")),
            ("faults".into(), file.faults.join(", ")),
            ("repeats".into(), format!("{} per cell ({} runs)", file.repeat, file.runs.len())),
            ("clients T".into(), s.clients.to_string()),
            ("cluster".into(), format!("{}, K = {}, reference {}", s.cluster, s.replicas, s.reference)),
            ("time scale".into(), format!("{} ({} s per run)", s.time_scale, sig3(s.duration_s))),
            ("workload".into(), s.workload.clone()),
            ("detection".into(), s.detection.clone()),
            ("plbbench".into(), file.plbbench_version.clone()),
            ("wall time".into(), format!("{} s over all runs", sig3(file.runs.iter().map(|r| r.wall_s).sum()))),
        ];
        let mut figures = Vec::new();
        figures.extend(rq1_figure(file, f)?);
        for m in &f.rq2 {
            for class in Class::ALL {
                figures.push(fig4(file, m, class)?);
            }
        }
        figures.extend(fig5(file, f)?);
        figures.extend(fig6(file, f)?);
        figures.extend(load_curves(file)?);
        Ok(Page {
            colours: Colours::new(),
            title,
            rq1: f.rq1.iter().map(rq1_view).collect(),
            figures,
            cells: cells(file),
            runs: file.runs.iter().map(run_view).collect(),
            excluded: file.runs.iter().filter(|r| !r.excluded.is_empty()).count(),
            quantiles: file.quantiles.clone(),
        })
    }
}

fn rq1_view(r: &super::figures::Rq1) -> Rq1View {
    let side = |strategy, s: &super::figures::Rq1Side| SideView {
        strategy,
        n: s.seeds.len(),
        retention: spread_text(&s.premium_retention),
        u_mean: spread_text(&s.u_mean),
        cv: spread_text(&s.cv),
    };
    Rq1View {
        mix: r.mix.clone(),
        sides: vec![side("plb", &r.plb), side("rr-split", &r.rr_split)],
        gain_pp: signed(r.retention_gain_pp, " pp"),
    }
}

fn rq1_figure(file: &ExperimentFile, f: &Figures) -> Result<Option<FigureView>, ReportError> {
    if f.rq1.is_empty() {
        return Ok(None);
    }
    let groups = f.rq1.iter().map(|r| r.mix.clone()).collect();
    let series = |label: &str, colour, pick: fn(&super::figures::Rq1) -> Spread| BarSeries {
        label: label.into(),
        colour,
        values: f.rq1.iter().map(|r| Some(pick(r))).collect(),
    };
    let panel = BarPanel {
        y_desc: "Premium goodput retention in down1 (× baseline)".into(),
        groups,
        series: vec![
            series("plb", charts::PREMIUM, |r| r.plb.premium_retention),
            series("rr-split", OTHER, |r| r.rr_split.premium_retention),
        ],
        reference: Some(1.0),
    };
    Ok(Some(FigureView {
        id: "rq1".into(),
        title: "RQ1: Premium goodput retention under a Premium-side fault, plb vs 3RR+2RR".into(),
        svg: Value::from_safe_string(charts::spread_bars("RQ1", &[panel])?),
        caption: "Bars: median over repeats of Premium goodput in phase down1 divided by its baseline; whiskers: interquartile range. \
                  The paper reports a gain of +26 to +28 percentage points for plb over 3RR+2RR."
            .into(),
        runs: f.rq1.iter().flat_map(|r| links(file, "premium-fault", &r.mix, &["plb", "rr-split"])).collect(),
    }))
}

/// Fig. 4 style: one class of one mix, goodput / p95 / lifetime per phase.
fn fig4(file: &ExperimentFile, m: &Rq2, class: Class) -> Result<FigureView, ReportError> {
    let colour = charts::class_colour(class);
    let rows: Vec<_> =
        CASCADE_PHASES.iter().filter_map(|p| m.rows.iter().find(|r| r.phase == *p && r.class == class)).collect();
    let groups: Vec<String> = rows.iter().map(|r| r.phase.clone()).collect();
    let panel = |y_desc: &str, pick: fn(&super::figures::Rq2Row) -> &super::figures::Versus| BarPanel {
        y_desc: y_desc.into(),
        groups: groups.clone(),
        series: vec![
            BarSeries { label: "plb".into(), colour, values: rows.iter().map(|r| Some(pick(r).plb)).collect() },
            BarSeries { label: "5RR".into(), colour: OTHER, values: rows.iter().map(|r| Some(pick(r).rr)).collect() },
        ],
        reference: None,
    };
    let panels = [
        panel("goodput (queries/s)", |r| &r.goodput_qps),
        panel("p95 latency (ms)", |r| &r.p95_ms),
        panel("session lifetime, mean (s)", |r| &r.lifetime_mean_s),
    ];
    let name = if class == Class::P { "Premium" } else { "Freemium" };
    let down2 = rows.iter().find(|r| r.phase == "down2");
    let ratio = down2.and_then(|r| crate::stats::ratio(r.goodput_qps.plb.median, r.goodput_qps.rr.median));
    let p95 = down2.and_then(|r| r.p95_change_pct);
    let paper = match class {
        Class::P => "the paper reports more than 2× and −18.2% at T=1000, 25:75",
        Class::F => "the paper reports less work and a higher p95 for Freemium, without a figure",
    };
    Ok(FigureView {
        id: format!("fig4-{}-{}", m.mix.replace(':', "-"), class),
        title: format!("Fig. 4 style, mix {}: {name} per phase of the cascade, plb vs 5RR", m.mix),
        svg: Value::from_safe_string(charts::spread_bars("Fig. 4", &panels)?),
        caption: format!(
            "cascade preset (r1 down, r2 down, r1 rejoins, r2 rejoins); {} plb and {} 5RR runs. Bars: medians over repeats; whiskers: interquartile range. \
             {name} in down2, plb vs 5RR: goodput {}, p95 {} ({paper}).",
            m.plb_seeds.len(),
            m.rr_seeds.len(),
            ratio.map_or("–".into(), |v| format!("{v:.2}×")),
            p95.map_or("–".into(), |v| format!("{v:+.1}%")),
        ),
        runs: links(file, "cascade", &m.mix, &["plb", "rr"]),
    })
}

/// Load curves (`--loads`): per fault, mix and class, goodput and p95 over
/// the offered loads, a bar per strategy, in the phase with the fewest
/// survivors (the baseline without faults).
fn load_curves(file: &ExperimentFile) -> Result<Vec<FigureView>, ReportError> {
    let mut loads: Vec<f64> = file.cells.iter().filter_map(|c| c.load).collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup();
    if loads.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for fault in &file.faults {
        for mix in &file.mixes {
            let here: Vec<&CellRow> = file.cells.iter().filter(|c| &c.fault == fault && &c.mix == mix).collect();
            let Some(phase) = here.iter().min_by_key(|c| c.survivors).map(|c| c.phase.clone()) else { continue };
            for class in Class::ALL {
                let pick = |strategy: &str, load: f64, metric: fn(&CellRow) -> Spread| {
                    here.iter()
                        .find(|c| {
                            c.strategy == strategy && c.load == Some(load) && c.phase == phase && c.class == class
                        })
                        .map(|c| metric(c))
                };
                let panel = |y_desc: &str, metric: fn(&CellRow) -> Spread| BarPanel {
                    y_desc: y_desc.into(),
                    groups: loads.iter().map(|l| format!("load {l}")).collect(),
                    series: file
                        .strategies
                        .iter()
                        .enumerate()
                        .map(|(i, s)| BarSeries {
                            label: s.clone(),
                            colour: MIX_COLOURS[i % MIX_COLOURS.len()],
                            values: loads.iter().map(|&l| pick(s, l, metric)).collect(),
                        })
                        .collect(),
                    reference: None,
                };
                let panels = [panel("goodput (queries/s)", |c| c.goodput_qps), panel("p95 latency (ms)", |c| c.p95_ms)];
                let name = if class == Class::P { "Premium" } else { "Freemium" };
                out.push(FigureView {
                    id: format!("load-{fault}-{}-{class}", mix.replace(':', "-")),
                    title: format!("Load curve, {fault}, mix {mix}: {name} in {phase} over the offered load"),
                    svg: Value::from_safe_string(charts::spread_bars("load curve", &panels)?),
                    caption: format!(
                        "x: offered CPU as a fraction of the cluster's K x C (--loads); bars: medians over repeats per strategy \
                         in phase {phase}; whiskers: interquartile range."
                    ),
                    runs: links(file, fault, mix, &file.strategies.iter().map(String::as_str).collect::<Vec<_>>()),
                });
            }
        }
    }
    Ok(out)
}

/// Fig. 5 style: p95 of plb relative to 5RR per class and mix, in the
/// one-down and two-down phases, in the paper's sign convention (positive:
/// plb is faster, the reduction it brings; negative: plb is slower).
fn fig5(file: &ExperimentFile, f: &Figures) -> Result<Option<FigureView>, ReportError> {
    if f.rq2.is_empty() {
        return Ok(None);
    }
    let groups: Vec<String> = f.rq2.iter().map(|m| m.mix.clone()).collect();
    let panel = |phase: &str| BarPanel {
        y_desc: format!("p95 reduction in {phase}, plb vs 5RR (%)"),
        groups: groups.clone(),
        series: Class::ALL
            .into_iter()
            .map(|c| BarSeries {
                label: if c == Class::P { "Premium".into() } else { "Freemium".into() },
                colour: charts::class_colour(c),
                values: f
                    .rq2
                    .iter()
                    .map(|m| {
                        let change =
                            m.rows.iter().find(|r| r.phase == phase && r.class == c).and_then(|r| r.p95_change_pct);
                        point(change.map(|x| -x))
                    })
                    .collect(),
            })
            .collect(),
        reference: None,
    };
    Ok(Some(FigureView {
        id: "fig5".into(),
        title: "Fig. 5 style: p95 latency of plb relative to 5RR, per class and mix".into(),
        svg: Value::from_safe_string(charts::spread_bars("Fig. 5", &[panel("down1"), panel("down2")])?),
        caption: "(median p95 of 5RR − median p95 of plb) / median p95 of 5RR, in percent, over the cascade runs: the paper's Fig. 5 convention, \
                  positive means plb is faster, negative slower. The paper reports, over its 25:75 and 50:50 mixes at T=1000, \
                  Premium +6.0% to +33.4% and Freemium −14.0% to −31.8% (a slowdown of 14.0% to 31.8%); narrower at 75:25."
            .into(),
        runs: f.rq2.iter().flat_map(|m| links(file, "cascade", &m.mix, &["plb", "rr"])).collect(),
    }))
}

/// Fig. 6 style: plb's p95 per class and phase relative to the class's own
/// baseline, one bar per mix.
fn fig6(file: &ExperimentFile, f: &Figures) -> Result<Option<FigureView>, ReportError> {
    if f.rq3.is_empty() {
        return Ok(None);
    }
    let phases: Vec<String> = CASCADE_PHASES[1..].iter().map(|p| p.to_string()).collect();
    let value = |m: &Rq3, c: Class, p: &str| {
        point(m.rows.iter().find(|r| r.class == c && r.phase == p).and_then(|r| r.change_pct))
    };
    let panel = |c: Class| BarPanel {
        y_desc: format!("{} p95 change vs baseline (%)", if c == Class::P { "Premium" } else { "Freemium" }),
        groups: phases.clone(),
        series: f
            .rq3
            .iter()
            .enumerate()
            .map(|(i, m)| BarSeries {
                label: format!("mix {}", m.mix),
                colour: MIX_COLOURS[i % MIX_COLOURS.len()],
                values: phases.iter().map(|p| value(m, c, p)).collect(),
            })
            .collect(),
        reference: None,
    };
    Ok(Some(FigureView {
        id: "fig6".into(),
        title: "Fig. 6 style: plb's p95 latency per phase relative to each class's own baseline".into(),
        svg: Value::from_safe_string(charts::spread_bars("Fig. 6", &[panel(Class::P), panel(Class::F)])?),
        caption: "(median p95 in the phase − median baseline p95) / median baseline p95, in percent, over the plb cascade runs of each mix; \
                  positive means slower than the class's own baseline. The paper (RQ3, at T=600) reports Premium −18.6% to −4.7% in one-down \
                  and −23.0% to −15.3% in two-down, Freemium +21.6% to +33.9% in two-down."
            .into(),
        runs: f.rq3.iter().flat_map(|m| links(file, "cascade", &m.mix, &["plb"])).collect(),
    }))
}

fn cells(file: &ExperimentFile) -> Vec<CellView> {
    file.cells
        .iter()
        .map(|c| CellView {
            fault: c.fault.clone(),
            mix: c.mix.clone(),
            strategy: c.load.map_or_else(|| c.strategy.clone(), |l| format!("{} @ load {l}", c.strategy)),
            phase: c.phase.clone(),
            class: c.class.to_string(),
            runs: c.runs,
            goodput: spread_text(&c.goodput_qps),
            retention: spread_text(&c.retention),
            p95: spread_text(&c.p95_ms),
            lifetime: spread_text(&c.lifetime_mean_s),
            cpu: spread_text(&c.cpu_mean),
        })
        .collect()
}

fn run_view(r: &RunEntry) -> RunView {
    RunView {
        name: run_name(r),
        href: format!("{}/report.html", r.dir),
        fault: r.fault.clone(),
        mix: r.mix.clone(),
        strategy: r.strategy.clone(),
        repeat: r.repeat,
        seed: r.seed,
        wall: format!("{} s", sig3(r.wall_s)),
        reused: r.reused,
        excluded: r.excluded.join(", "),
    }
}
