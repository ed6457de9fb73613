//! The SVG charts of report.html (design.md §5): goodput and p95 latency per
//! class per second, CPU fraction per replica, and per-phase goodput
//! retention and p95 inflation; the PLB role timeline is in `timeline`.
//! Each chart is drawn with plotters' SVG backend into a `String` that the
//! HTML template embeds as it is. Time charts shade the fault windows (phases
//! with fewer than K survivors) and grey the warm-up, and every chart draws
//! its legend in a strip on its right so that it never hides data. Colours
//! are constants shared with the page, so a class looks the same everywhere.

mod bars;
mod logins;
mod timeline;

pub use bars::{spread_bars, BarPanel, BarSeries};
pub use logins::logins;
pub use timeline::roles;

use crate::core::metrics::{PhaseRow, ReplicaRow, SeriesRow};
use crate::core::model::Class;
use crate::core::phases::WARMUP;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Premium everywhere (lines, bars, the P role, table accents).
pub const PREMIUM: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
/// Freemium everywhere (lines, bars, the F role, table accents).
pub const FREEMIUM: RGBColor = RGBColor(0xff, 0x7f, 0x0e);
/// The Mixed role.
pub const MIXED: RGBColor = RGBColor(0x7f, 0x63, 0xb8);
/// A replica that is down.
pub const DOWN: RGBColor = RGBColor(0xa0, 0xa0, 0xa0);
/// Fault windows and fault markers.
pub const FAULT: RGBColor = RGBColor(0xd6, 0x27, 0x28);
/// The warm-up shade.
const WARM: RGBColor = RGBColor(0x80, 0x80, 0x80);
const INK: RGBColor = RGBColor(0x33, 0x33, 0x33);
/// One colour per replica on the CPU chart (cycled beyond eight); none of
/// them is a class colour.
const REPLICA_COLOURS: [RGBColor; 8] = [
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x55, 0x55, 0x55),
];

/// Chart size in pixels (the SVG scales down with the page).
pub const WIDTH: u32 = 1100;
/// Height of the time charts.
pub const HEIGHT: u32 = 330;
/// Width of the legend strip on the right of every chart.
const LEGEND_W: u32 = 170;
const FONT: &str = "sans-serif";

/// The error of the SVG backend (writing into a `String` cannot fail, but
/// plotters still reports layout errors through it).
pub type DrawErr = DrawingAreaErrorKind<std::io::Error>;
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type TimeChart<'a, 'b, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, Y>>;

/// A chart could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw the {chart} chart: {source}")]
pub struct ChartError {
    /// Which chart.
    pub chart: &'static str,
    /// What plotters said.
    #[source]
    pub source: DrawErr,
}

/// The colour of a class.
pub fn class_colour(c: Class) -> RGBColor {
    match c {
        Class::P => PREMIUM,
        Class::F => FREEMIUM,
    }
}

/// `#rrggbb` of a colour, for the page's CSS.
pub fn hex(c: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", c.0, c.1, c.2)
}

/// Three significant digits without exponent; integers above 100 keep all
/// their digits (`1234`, `56.7`, `0.0123`, `0`).
pub fn sig3(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    if x == 0.0 {
        return "0".into();
    }
    let mag = x.abs().log10().floor() as i32;
    let mut decimals = (2 - mag).clamp(0, 9);
    // Rounding may carry into the next decade (0.9996 -> 1.00, not 1.000).
    let scale = 10f64.powi(decimals);
    if decimals > 0 && (x.abs() * scale).round() / scale >= 10f64.powi(mag + 1) {
        decimals -= 1;
    }
    format!("{x:.prec$}", prec = decimals as usize)
}

/// An axis tick: [`sig3`] without trailing zeros (`20`, `0.2`, `1.25`).
fn tick(x: f64) -> String {
    let s = sig3(x);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A shaded interval of the time axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    /// Phase name (`warmup`, `down1`, ...).
    pub name: String,
    /// Start, seconds.
    pub start_s: f64,
    /// End, seconds.
    pub end_s: f64,
    /// Survivors K+ in the window.
    pub survivors: usize,
    /// True for the warm-up (grey), false for a fault window (red).
    pub warmup: bool,
}

/// What every time chart shares: the time axis and its shaded windows.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// End of the time axis, seconds.
    pub t_end: f64,
    /// The warm-up and every phase with fewer than K survivors.
    pub windows: Vec<Window>,
    /// Times of fault events, for markers.
    pub fault_times: Vec<f64>,
    /// Degraded-mode spans `(start, end, mode name, level 1..3)` of
    /// `--admission modes`, shaded under the latency chart.
    pub modes: Vec<(f64, f64, String, usize)>,
}

/// Colour of degraded-mode shading (darker = more degraded).
const MODE: RGBColor = RGBColor(0x6a, 0x3d, 0x9a);

impl Frame {
    /// The frame of a run with `k` replicas: windows from the phase rows
    /// (one per phase, not per class).
    pub fn new(phases: &[PhaseRow], k: usize, t_end: f64, fault_times: Vec<f64>) -> Frame {
        let mut windows: Vec<Window> = Vec::new();
        for r in phases {
            let warmup = r.phase == WARMUP;
            if windows.iter().any(|w| w.name == r.phase) || !(warmup || r.survivors < k) || r.end_s <= r.start_s {
                continue;
            }
            windows.push(Window {
                name: r.phase.clone(),
                start_s: r.start_s,
                end_s: r.end_s,
                survivors: r.survivors,
                warmup,
            });
        }
        Frame { t_end: t_end.max(1.0), windows, fault_times, modes: Vec::new() }
    }
}

/// Draws into a fresh SVG string of `size`; names the chart on error.
fn render(
    chart: &'static str,
    size: (u32, u32),
    draw: impl FnOnce(&Area<'_>) -> Result<(), DrawErr>,
) -> Result<String, ChartError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present())
            .map_err(|source| ChartError { chart, source })?;
    }
    Ok(svg)
}

/// The plot area and the legend strip of a chart.
fn split<'a>(root: &Area<'a>) -> (Area<'a>, Area<'a>) {
    let (w, _) = root.dim_in_pixel();
    root.split_horizontally(w - LEGEND_W)
}

fn builder<'a, 'b>(area: &'a Area<'b>) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(area);
    b.margin_top(16).margin_right(10).margin_left(6).margin_bottom(4).x_label_area_size(46).y_label_area_size(70);
    b
}

fn text_style(size: i32, colour: RGBColor, h: HPos, v: VPos) -> TextStyle<'static> {
    (FONT, size).into_font().color(&colour).pos(Pos::new(h, v))
}

/// How a legend entry is drawn.
#[derive(Clone, Copy)]
enum Swatch {
    Line(RGBColor),
    Faint(RGBColor),
    Dashed(RGBColor),
    Fill(RGBColor, f64),
    Hatch,
}

fn legend(area: &Area<'_>, entries: &[(Swatch, String)]) -> Result<(), DrawErr> {
    for (i, (swatch, label)) in entries.iter().enumerate() {
        let y = 28 + i as i32 * 24;
        let (x0, x1) = (10, 36);
        match *swatch {
            Swatch::Line(c) => area.draw(&PathElement::new(vec![(x0, y), (x1, y)], c.stroke_width(3)))?,
            Swatch::Faint(c) => area.draw(&PathElement::new(vec![(x0, y), (x1, y)], c.mix(0.35).stroke_width(1)))?,
            Swatch::Dashed(c) => {
                for x in (x0..x1).step_by(8) {
                    area.draw(&PathElement::new(vec![(x, y), ((x + 5).min(x1), y)], c.stroke_width(2)))?;
                }
            }
            Swatch::Fill(c, a) => area.draw(&Rectangle::new([(x0, y - 7), (x1, y + 7)], c.mix(a).filled()))?,
            Swatch::Hatch => hatch(area, (x0, y - 7), (x1, y + 7))?,
        }
        area.draw(&Text::new(label.clone(), (x1 + 8, y), text_style(14, INK, HPos::Left, VPos::Center)))?;
    }
    Ok(())
}

/// Grey rectangle with diagonal hatching, in pixels of `area`.
fn hatch(area: &Area<'_>, (x0, y0): (i32, i32), (x1, y1): (i32, i32)) -> Result<(), DrawErr> {
    area.draw(&Rectangle::new([(x0, y0), (x1, y1)], DOWN.mix(0.35).filled()))?;
    let h = y1 - y0;
    let mut x = x0 - h;
    while x < x1 {
        // The segment from (x, y1) to (x + h, y0), clipped to [x0, x1].
        let (a, b) = (x.max(x0), (x + h).min(x1));
        if a < b {
            let (ya, yb) = (y1 - (a - x), y1 - (b - x));
            area.draw(&PathElement::new(vec![(a, ya), (b, yb)], DOWN.stroke_width(1)))?;
        }
        x += 7;
    }
    Ok(())
}

/// The legend entries of the shaded windows.
fn window_entries(frame: &Frame) -> Vec<(Swatch, String)> {
    let mut e = Vec::new();
    if frame.windows.iter().any(|w| w.warmup) {
        e.push((Swatch::Fill(WARM, 0.18), "warm-up (ramp)".to_string()));
    }
    if frame.windows.iter().any(|w| !w.warmup) {
        e.push((Swatch::Fill(FAULT, 0.12), "fault window (K+ < K)".to_string()));
    }
    if !frame.fault_times.is_empty() {
        e.push((Swatch::Faint(FAULT), "fault event".to_string()));
    }
    e
}

/// Axis, grid and labels of a time chart.
fn mesh<Y>(chart: &mut TimeChart<'_, '_, Y>, y_desc: &str) -> Result<(), DrawErr>
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc("time since run start (s)")
        .y_desc(y_desc)
        .axis_desc_style((FONT, 15))
        .label_style((FONT, 13))
        .bold_line_style(RGBColor(0xe2, 0xe2, 0xe2))
        .light_line_style(RGBColor(0xf4, 0xf4, 0xf4))
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .draw()
}

/// Shades the warm-up and the fault windows between `y0` and `y1`.
fn shade<Y: Ranged<ValueType = f64>>(
    chart: &mut TimeChart<'_, '_, Y>,
    frame: &Frame,
    (y0, y1): (f64, f64),
) -> Result<(), DrawErr> {
    for w in &frame.windows {
        let (colour, alpha) = if w.warmup { (WARM, 0.14) } else { (FAULT, 0.10) };
        let end = w.end_s.min(frame.t_end);
        chart.draw_series(std::iter::once(Rectangle::new([(w.start_s, y0), (end, y1)], colour.mix(alpha).filled())))?;
        let label = if w.warmup { "warm-up".to_string() } else { format!("{} (K+={})", w.name, w.survivors) };
        let style = text_style(12, if w.warmup { WARM } else { FAULT }, HPos::Left, VPos::Top);
        chart.draw_series(std::iter::once(EmptyElement::at((w.start_s, y1)) + Text::new(label, (4, 4), style)))?;
    }
    for &t in frame.fault_times.iter().filter(|t| **t <= frame.t_end) {
        chart
            .draw_series(std::iter::once(PathElement::new(vec![(t, y0), (t, y1)], FAULT.mix(0.45).stroke_width(1))))?;
    }
    Ok(())
}

/// Splits `(t, value)` points into runs without gaps (a missing value or a
/// hole of more than 2.5 s in time ends a run).
fn runs(points: impl IntoIterator<Item = (f64, Option<f64>)>) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    let mut last_t = f64::NEG_INFINITY;
    for (t, v) in points {
        let gap = t - last_t > 2.5;
        last_t = t;
        let cur = out.last_mut().expect("never empty");
        match v.filter(|v| v.is_finite()) {
            Some(v) if !gap || cur.is_empty() => cur.push((t, v)),
            Some(v) => out.push(vec![(t, v)]),
            None if !cur.is_empty() => out.push(Vec::new()),
            None => {}
        }
    }
    out.retain(|r| !r.is_empty());
    out
}

/// Draws runs as lines (a lone point as a dot).
fn draw_runs<Y: Ranged<ValueType = f64>>(
    chart: &mut TimeChart<'_, '_, Y>,
    runs: &[Vec<(f64, f64)>],
    style: ShapeStyle,
) -> Result<(), DrawErr> {
    for run in runs {
        if run.len() == 1 {
            chart.draw_series(std::iter::once(Circle::new(run[0], 2, style.filled())))?;
        } else {
            chart.draw_series(LineSeries::new(run.iter().copied(), style))?;
        }
    }
    Ok(())
}

/// The rows of one class, in time order.
fn class_series(series: &[SeriesRow], class: Class) -> Vec<&SeriesRow> {
    let mut rows: Vec<&SeriesRow> = series.iter().filter(|r| r.class == class).collect();
    rows.sort_by_key(|r| r.t_s);
    rows
}

/// Centred moving mean over `2 * half + 1` points.
fn smooth(points: &[(f64, f64)], half: usize) -> Vec<(f64, f64)> {
    (0..points.len())
        .map(|i| {
            let w = &points[i.saturating_sub(half)..(i + half + 1).min(points.len())];
            (points[i].0, w.iter().map(|p| p.1).sum::<f64>() / w.len() as f64)
        })
        .collect()
}

/// A y-axis top with some headroom, never below `floor`.
fn top(values: impl Iterator<Item = f64>, floor: f64) -> f64 {
    values.filter(|v| v.is_finite()).fold(floor, f64::max) * 1.12
}

/// (a) Goodput per second per class: thin lines per second, bold lines the
/// 5 s moving mean.
pub fn goodput(series: &[SeriesRow], frame: &Frame) -> Result<String, ChartError> {
    render("goodput", (WIDTH, HEIGHT), |root| {
        let (plot, side) = split(root);
        let ymax = top(series.iter().map(|r| r.goodput_qps), 1.0);
        let mut chart = builder(&plot).build_cartesian_2d(0.0..frame.t_end, 0.0..ymax)?;
        mesh(&mut chart, "goodput (queries/s)")?;
        shade(&mut chart, frame, (0.0, ymax))?;
        draw_modes(&mut chart, frame, (0.0, ymax))?;
        let mut entries = Vec::new();
        for class in Class::ALL {
            let pts: Vec<(f64, f64)> =
                class_series(series, class).iter().map(|r| (r.t_s as f64 + 0.5, r.goodput_qps)).collect();
            let colour = class_colour(class);
            draw_runs(&mut chart, std::slice::from_ref(&pts), colour.mix(0.3).stroke_width(1))?;
            draw_runs(&mut chart, &[smooth(&pts, 2)], colour.stroke_width(2))?;
            entries.push((Swatch::Line(colour), format!("{} (5 s mean)", class_title(class))));
        }
        entries.push((Swatch::Faint(INK), "per second".to_string()));
        entries.extend(window_entries(frame));
        if !frame.modes.is_empty() {
            entries.push((Swatch::Fill(MODE, 0.14), "degraded mode (darker = worse)".to_string()));
        }
        legend(&side, &entries)
    })
}

fn class_title(c: Class) -> &'static str {
    match c {
        Class::P => "Premium",
        Class::F => "Freemium",
    }
}

/// (b) p95 latency per second per class; log-scale y when the values span
/// more than a factor of 20. Seconds without completions leave gaps.
pub fn p95(series: &[SeriesRow], frame: &Frame) -> Result<String, ChartError> {
    let values: Vec<f64> = series.iter().filter_map(|r| r.p95_ms).filter(|v| *v > 0.0).collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(0.0, f64::max);
    render("p95 latency", (WIDTH, HEIGHT), |root| {
        let (plot, side) = split(root);
        let mut b = builder(&plot);
        if values.is_empty() || hi / lo <= 20.0 {
            let ymax = top(values.iter().copied(), 1.0);
            let mut chart = b.build_cartesian_2d(0.0..frame.t_end, 0.0..ymax)?;
            p95_lines(&mut chart, series, frame, (0.0, ymax), "p95 latency (ms)")?;
        } else {
            let (y0, y1) = (10f64.powf(lo.log10().floor()), 10f64.powf(hi.log10().ceil()));
            let mut chart = b.build_cartesian_2d(0.0..frame.t_end, (y0..y1).log_scale())?;
            p95_lines(&mut chart, series, frame, (y0, y1), "p95 latency (ms, log scale)")?;
        }
        let mut entries: Vec<(Swatch, String)> =
            Class::ALL.iter().map(|&c| (Swatch::Line(class_colour(c)), class_title(c).to_string())).collect();
        entries.extend(window_entries(frame));
        if !frame.modes.is_empty() {
            entries.push((Swatch::Fill(MODE, 0.14), "degraded mode (darker = worse)".to_string()));
        }
        legend(&side, &entries)
    })
}

/// The degraded-mode spans of a run from its `mode` events (`a->b`), up to `t_end`.
pub fn mode_spans(events: &[crate::core::metrics::EventRow], t_end: f64) -> Vec<(f64, f64, String, usize)> {
    const NAMES: [&str; 4] = ["normal", "cautious", "restricted", "survival"];
    let mut spans = Vec::new();
    let mut open: Option<(f64, String, usize)> = None;
    for e in events.iter().filter(|e| e.kind == crate::core::model::EventKind::Mode) {
        let to = e.detail.rsplit("->").next().unwrap_or("").to_string();
        if let Some((t0, name, level)) = open.take() {
            spans.push((t0, e.t_s, name, level));
        }
        let level = NAMES.iter().position(|n| *n == to).unwrap_or(0);
        if level > 0 {
            open = Some((e.t_s, to, level));
        }
    }
    spans.extend(open.map(|(t0, name, level)| (t0, t_end, name, level)));
    spans
}

/// Shades each degraded mode's span, darker the worse, with its name.
fn draw_modes<Y: Ranged<ValueType = f64>>(
    chart: &mut TimeChart<'_, '_, Y>,
    frame: &Frame,
    ys: (f64, f64),
) -> Result<(), DrawErr> {
    for (start, end, name, level) in &frame.modes {
        let area =
            Rectangle::new([(*start, ys.0), (end.min(frame.t_end), ys.1)], MODE.mix(0.07 * *level as f64).filled());
        chart.draw_series(std::iter::once(area))?;
        let style = text_style(11, MODE, HPos::Left, VPos::Bottom);
        chart
            .draw_series(std::iter::once(EmptyElement::at((*start, ys.0)) + Text::new(name.clone(), (4, -4), style)))?;
    }
    Ok(())
}

fn p95_lines<Y>(
    chart: &mut TimeChart<'_, '_, Y>,
    series: &[SeriesRow],
    frame: &Frame,
    ys: (f64, f64),
    y_desc: &str,
) -> Result<(), DrawErr>
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    mesh(chart, y_desc)?;
    shade(chart, frame, ys)?;
    draw_modes(chart, frame, ys)?;
    for class in Class::ALL {
        let pts = class_series(series, class).into_iter().map(|r| (r.t_s as f64 + 0.5, r.p95_ms.filter(|v| *v > 0.0)));
        draw_runs(chart, &runs(pts), class_colour(class).stroke_width(2))?;
    }
    Ok(())
}

/// (c) CPU fraction of its budget per replica over time, with the budget
/// (1.0) dashed. Samples without a measurement (down, not measurable) leave
/// gaps.
pub fn cpu(replicas: &[ReplicaRow], names: &[String], frame: &Frame) -> Result<String, ChartError> {
    render("CPU", (WIDTH, HEIGHT), |root| {
        let (plot, side) = split(root);
        let ymax = top(replicas.iter().filter_map(|r| r.cpu_fraction), 1.0);
        let mut chart = builder(&plot).build_cartesian_2d(0.0..frame.t_end, 0.0..ymax)?;
        mesh(&mut chart, "CPU used / budget C")?;
        shade(&mut chart, frame, (0.0, ymax))?;
        let budget = DashedLineSeries::new(vec![(0.0, 1.0), (frame.t_end, 1.0)], 8, 5, INK.stroke_width(1));
        chart.draw_series(budget)?;
        let mut entries = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let colour = REPLICA_COLOURS[i % REPLICA_COLOURS.len()];
            let mut rows: Vec<&ReplicaRow> = replicas.iter().filter(|r| &r.replica == name).collect();
            rows.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
            let pts = rows.iter().map(|r| (r.t_s, r.cpu_fraction.filter(|_| r.up)));
            draw_runs(&mut chart, &runs(pts), colour.stroke_width(2))?;
            entries.push((Swatch::Line(colour), name.clone()));
        }
        entries.push((Swatch::Dashed(INK), "budget (1.0 = C)".to_string()));
        entries.extend(window_entries(frame));
        legend(&side, &entries)
    })
}

/// One phase's `[P, F]` values of a bar panel.
type Pair = [Option<f64>; 2];

/// (e) Per-phase goodput retention and p95 inflation per class, both
/// relative to the baseline (the dashed line at 1); the warm-up is left out.
pub fn phase_bars(phases: &[PhaseRow]) -> Result<String, ChartError> {
    let mut names: Vec<&str> = Vec::new();
    for r in phases.iter().filter(|r| r.phase != WARMUP) {
        if !names.contains(&r.phase.as_str()) {
            names.push(&r.phase);
        }
    }
    let pick = |f: fn(&PhaseRow) -> Option<f64>| -> Vec<Pair> {
        let get = |n: &str, c| phases.iter().find(|r| r.phase == n && r.class == c).and_then(f);
        names.iter().map(|n| [get(n, Class::P), get(n, Class::F)]).collect()
    };
    let (retention, inflation) = (pick(|r| r.retention), pick(|r| r.inflation_p95));
    render("phase bars", (WIDTH, HEIGHT + 20), |root| {
        let (plot, side) = split(root);
        let (left, right) = plot.split_horizontally(plot.dim_in_pixel().0 / 2);
        bar_panel(&left, "goodput retention (× baseline)", &names, &retention)?;
        bar_panel(&right, "p95 inflation (× baseline)", &names, &inflation)?;
        let mut entries: Vec<(Swatch, String)> =
            Class::ALL.iter().map(|&c| (Swatch::Fill(class_colour(c), 1.0), class_title(c).to_string())).collect();
        entries.push((Swatch::Dashed(INK), "baseline (1.0)".to_string()));
        legend(&side, &entries)
    })
}

/// Draws `text` on `area` at the backend pixel `at` (from a chart's
/// `backend_coord`), shifted by `d`; for labels outside the plotting area.
fn pin(area: &Area<'_>, at: (i32, i32), d: (i32, i32), text: String, style: TextStyle<'_>) -> Result<(), DrawErr> {
    let base = area.get_base_pixel();
    area.draw(&Text::new(text, (at.0 - base.0 + d.0, at.1 - base.1 + d.1), style))
}

/// One panel of grouped bars: a group per phase, P left and F right, each
/// bar labelled with its value ("n/a" when there is none).
fn bar_panel(area: &Area<'_>, y_desc: &str, names: &[&str], values: &[Pair]) -> Result<(), DrawErr> {
    let n = names.len().max(1) as f64;
    let ymax = top(values.iter().flatten().flatten().copied(), 1.2);
    let mut chart = builder(area).build_cartesian_2d(0.0..n, 0.0..ymax)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_label_formatter(&|v| tick(*v))
        .x_desc("phase")
        .y_desc(y_desc)
        .axis_desc_style((FONT, 15))
        .label_style((FONT, 13))
        .bold_line_style(RGBColor(0xe2, 0xe2, 0xe2))
        .light_line_style(RGBColor(0xf4, 0xf4, 0xf4))
        .draw()?;
    chart.draw_series(DashedLineSeries::new(vec![(0.0, 1.0), (n, 1.0)], 8, 5, INK.stroke_width(1)))?;
    for (i, (name, pair)) in names.iter().zip(values).enumerate() {
        let x = i as f64;
        let at = chart.backend_coord(&(x + 0.5, 0.0));
        pin(area, at, (0, 8), name.to_string(), text_style(13, INK, HPos::Center, VPos::Top))?;
        for (c, v) in pair.iter().enumerate() {
            let (x0, x1) = if c == 0 { (x + 0.12, x + 0.49) } else { (x + 0.51, x + 0.88) };
            if let Some(v) = v {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(x0, 0.0), (x1, *v)],
                    class_colour(Class::ALL[c]).filled(),
                )))?;
            }
            let text = v.map_or("n/a".to_string(), sig3);
            let at = EmptyElement::at(((x0 + x1) / 2.0, v.unwrap_or(0.0)));
            chart.draw_series(std::iter::once(
                at + Text::new(text, (0, -3), text_style(12, INK, HPos::Center, VPos::Bottom)),
            ))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_spans_follow_mode_events_to_the_end() {
        use crate::core::model::EventKind;
        let ev = |t_s: f64, kind: EventKind, detail: &str| crate::core::metrics::EventRow {
            t_s,
            kind,
            replica: String::new(),
            detail: detail.into(),
        };
        let events = [
            ev(10.0, EventKind::Mode, "normal->cautious"),
            ev(12.0, EventKind::Fault, "Down"),
            ev(40.0, EventKind::Mode, "cautious->survival"),
            ev(70.0, EventKind::Mode, "survival->normal"),
            ev(90.0, EventKind::Mode, "normal->restricted"),
        ];
        let spans = mode_spans(&events, 100.0);
        let got: Vec<_> = spans.iter().map(|(a, b, n, l)| (*a, *b, n.as_str(), *l)).collect();
        assert_eq!(got, [(10.0, 40.0, "cautious", 1), (40.0, 70.0, "survival", 3), (90.0, 100.0, "restricted", 2)]);
    }

    #[test]
    fn three_significant_digits() {
        for (x, want) in [
            (0.0, "0"),
            (1234.4, "1234"),
            (123.4, "123"),
            (56.789, "56.8"),
            (1.0, "1.00"),
            (0.98765, "0.988"),
            (0.0123456, "0.0123"),
            (-2.5, "-2.50"),
            (0.9996, "1.00"),
            (99.96, "100"),
            (f64::NAN, "–"),
        ] {
            assert_eq!(sig3(x), want, "{x}");
        }
    }

    #[test]
    fn runs_split_on_missing_values_and_time_holes() {
        let pts = vec![
            (0.0, Some(1.0)),
            (1.0, Some(2.0)),
            (2.0, None),
            (3.0, Some(3.0)),
            (9.0, Some(4.0)),
            (10.0, Some(5.0)),
        ];
        let r = runs(pts);
        assert_eq!(r, vec![vec![(0.0, 1.0), (1.0, 2.0)], vec![(3.0, 3.0)], vec![(9.0, 4.0), (10.0, 5.0)]]);
    }
}
