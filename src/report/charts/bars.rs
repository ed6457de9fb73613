//! Grouped bar charts with interquartile error bars, for figures across
//! repeats (the experiment report's Fig. 4-6 style panels and comparisons).
//! A bar is a median; its whisker runs from the first to the third
//! quartile, so the reader sees the spread the median hides. Values may be
//! negative (percent changes): the axis then spans zero, which is drawn.

use super::{builder, legend, pin, render, split, text_style, tick, top, ChartError, DrawErr, Swatch, FONT, INK};
use crate::stats::Spread;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

/// One series of bars: a label for the legend, a colour, and one spread per
/// group (`None` draws "n/a").
#[derive(Clone, Debug)]
pub struct BarSeries {
    /// Legend label.
    pub label: String,
    /// Fill colour.
    pub colour: RGBColor,
    /// One value per group.
    pub values: Vec<Option<Spread>>,
}

/// One panel: groups along x (phases, mixes), a bar per series in each.
#[derive(Clone, Debug)]
pub struct BarPanel {
    /// The y-axis description, with its unit.
    pub y_desc: String,
    /// Group names along x.
    pub groups: Vec<String>,
    /// The series; every one has `groups.len()` values.
    pub series: Vec<BarSeries>,
    /// A dashed reference line (e.g. 1 for a ratio to baseline).
    pub reference: Option<f64>,
}

/// Panel height in pixels.
const PANEL_H: u32 = 330;

/// Draws `panels` side by side with one legend (from the first panel's
/// series, plus the whisker) on the right.
pub fn spread_bars(chart: &'static str, panels: &[BarPanel]) -> Result<String, ChartError> {
    let width = super::WIDTH.max(520 * panels.len() as u32 / 2 + 200);
    render(chart, (width, PANEL_H), |root| {
        let (plot, side) = split(root);
        let n = panels.len().max(1) as u32;
        let w = plot.dim_in_pixel().0 / n;
        let mut rest = plot;
        for (i, p) in panels.iter().enumerate() {
            let (here, next) =
                if i + 1 < panels.len() { rest.split_horizontally(w) } else { (rest.clone(), rest.clone()) };
            panel(&here, p)?;
            rest = next;
        }
        let mut entries: Vec<(Swatch, String)> = panels
            .first()
            .map(|p| p.series.iter().map(|s| (Swatch::Fill(s.colour, 1.0), s.label.clone())).collect())
            .unwrap_or_default();
        entries.push((Swatch::Line(INK), "interquartile range".into()));
        legend(&side, &entries)
    })
}

/// Width of a value label's character at 11 px, px (a generous estimate).
const LABEL_CHAR_PX: f64 = 6.6;

/// The y range of a panel: spans zero, the whiskers and the reference.
fn y_range(p: &BarPanel) -> (f64, f64) {
    let values = p.series.iter().flat_map(|s| s.values.iter().flatten()).flat_map(|v| [v.median, v.q1, v.q3]).flatten();
    let values: Vec<f64> = values.chain(p.reference).filter(|v| v.is_finite()).collect();
    let hi = top(values.iter().copied(), 0.0);
    // Below zero, room for the value label under the lowest whisker.
    let lo = values.iter().copied().fold(0.0, f64::min) * 1.25;
    if hi - lo <= 0.0 {
        (0.0, 1.0)
    } else {
        (lo, hi)
    }
}

fn panel(area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>, p: &BarPanel) -> Result<(), DrawErr> {
    let g = p.groups.len().max(1) as f64;
    let (lo, hi) = y_range(p);
    let mut chart = builder(area).build_cartesian_2d(0.0..g, lo..hi)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_label_formatter(&|v| tick(*v))
        .y_desc(p.y_desc.as_str())
        .axis_desc_style((FONT, 15))
        .label_style((FONT, 13))
        .bold_line_style(RGBColor(0xe2, 0xe2, 0xe2))
        .light_line_style(RGBColor(0xf4, 0xf4, 0xf4))
        .draw()?;
    if lo < 0.0 {
        chart.draw_series(LineSeries::new(vec![(0.0, 0.0), (g, 0.0)], INK.stroke_width(1)))?;
    }
    if let Some(r) = p.reference {
        chart.draw_series(DashedLineSeries::new(vec![(0.0, r), (g, r)], 8, 5, INK.stroke_width(1)))?;
    }
    let k = p.series.len().max(1) as f64;
    let slot = 0.8 / k;
    for (i, name) in p.groups.iter().enumerate() {
        let x = i as f64;
        let at = chart.backend_coord(&(x + 0.5, lo));
        pin(area, at, (0, 8), name.clone(), text_style(13, INK, HPos::Center, VPos::Top))?;
        for (j, s) in p.series.iter().enumerate() {
            let x0 = x + 0.1 + j as f64 * slot;
            let (x1, mid) = (x0 + slot * 0.92, x0 + slot * 0.46);
            let v = s.values.get(i).cloned().flatten();
            let median = v.as_ref().and_then(|v| v.median);
            if let Some(m) = median {
                chart.draw_series(std::iter::once(Rectangle::new([(x0, 0.0), (x1, m)], s.colour.filled())))?;
            }
            if let Some((q1, q3)) = v.as_ref().and_then(|v| v.q1.zip(v.q3)).filter(|(a, b)| b > a) {
                let cap = slot * 0.18;
                let lines = [
                    vec![(mid, q1), (mid, q3)],
                    vec![(mid - cap, q1), (mid + cap, q1)],
                    vec![(mid - cap, q3), (mid + cap, q3)],
                ];
                chart.draw_series(lines.into_iter().map(|l| PathElement::new(l, INK.stroke_width(1))))?;
            }
            let text = median.map_or("n/a".to_string(), super::sig3);
            // The label sits beyond the whisker's end, under a negative bar
            // and over a positive one; where a slot is narrower than its
            // label, every other series' label is lifted a line so that
            // neighbours never run together.
            let (q1, q3) = (v.as_ref().and_then(|v| v.q1), v.as_ref().and_then(|v| v.q3));
            let below = median.is_some_and(|m| m < 0.0);
            let y = median.map_or(0.0, |m| if below { m.min(q1.unwrap_or(m)) } else { m.max(q3.unwrap_or(m)) });
            let slot_px = chart.backend_coord(&(x0 + slot, lo)).0 - chart.backend_coord(&(x0, lo)).0;
            let stagger = if (text.len() as f64 * LABEL_CHAR_PX) > f64::from(slot_px) && j % 2 == 1 { 12 } else { 0 };
            let (vpos, dy) = if below { (VPos::Top, 3 + stagger) } else { (VPos::Bottom, -3 - stagger) };
            let label = EmptyElement::at((mid, y)) + Text::new(text, (0, dy), text_style(11, INK, HPos::Center, vpos));
            chart.draw_series(std::iter::once(label))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(m: f64, q1: f64, q3: f64) -> Option<Spread> {
        Some(Spread { n: 3, median: Some(m), q1: Some(q1), q3: Some(q3) })
    }

    fn panel_of(values: Vec<Option<Spread>>) -> BarPanel {
        BarPanel {
            y_desc: "p95 change (%)".into(),
            groups: vec!["down1".into(), "down2".into()],
            series: vec![BarSeries { label: "Premium".into(), colour: super::super::PREMIUM, values }],
            reference: None,
        }
    }

    #[test]
    fn the_axis_spans_zero_and_every_whisker() {
        let (lo, hi) = y_range(&panel_of(vec![spread(-20.0, -30.0, -5.0), spread(10.0, 5.0, 40.0)]));
        assert!(lo <= -30.0 && hi >= 40.0, "{lo}..{hi}");
        let (lo, hi) = y_range(&panel_of(vec![spread(2.0, 1.0, 3.0), None]));
        assert!(lo == 0.0 && hi >= 3.0, "{lo}..{hi}");
        assert_eq!(y_range(&panel_of(vec![None, None])), (0.0, 1.0));
    }

    /// `(x, y, text)` of every `<text>` element of an SVG.
    fn text_xys(svg: &str) -> Vec<(f64, f64, String)> {
        let attr =
            |t: &str, a: &str| -> Option<f64> { t.split_once(&format!(" {a}=\""))?.1.split_once('"')?.0.parse().ok() };
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let head = t.split_once('>')?;
                Some((attr(head.0, "x")?, attr(head.0, "y")?, head.1.split_once("</text>")?.0.trim().to_string()))
            })
            .collect()
    }

    /// Four series over twelve groups: the slots are narrower than a label,
    /// so any two value labels closer than a label's width are on different
    /// lines, never run together (38.8 beside 39.5).
    #[test]
    fn neighbouring_labels_of_narrow_bars_are_staggered() {
        let series = |label: &str, m: f64| BarSeries {
            label: label.into(),
            colour: super::super::PREMIUM,
            values: (0..12).map(|_| Some(Spread { n: 1, median: Some(m), q1: None, q3: None })).collect(),
        };
        let p = BarPanel {
            y_desc: "goodput".into(),
            groups: (1..=12).map(|i| format!("p{i}")).collect(),
            series: vec![series("A", 38.8), series("B", 39.5), series("C", 38.9), series("D", 39.4)],
            reference: None,
        };
        let svg = spread_bars("test", &[p]).unwrap();
        let labels: Vec<(f64, f64, String)> = text_xys(&svg)
            .into_iter()
            .filter(|(_, _, t)| ["38.8", "39.5", "38.9", "39.4"].contains(&t.as_str()))
            .collect();
        assert_eq!(labels.len(), 48);
        let width = 4.0 * LABEL_CHAR_PX;
        let mut close = 0;
        for (i, a) in labels.iter().enumerate() {
            for b in &labels[i + 1..] {
                if (a.0 - b.0).abs() < width {
                    close += 1;
                    assert!((a.1 - b.1).abs() >= 10.0, "{a:?} and {b:?} run together");
                }
            }
        }
        assert!(close >= 12, "only {close} close pairs: the test shows nothing");
    }

    /// The trimmed contents of every `<text>` element of an SVG.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim().to_string()))
            .collect()
    }

    #[test]
    fn draws_every_bar_whisker_and_missing_value() {
        let svg = spread_bars("test", &[panel_of(vec![spread(-20.0, -30.0, -5.0), None])]).unwrap();
        let t = texts(&svg);
        for want in ["n/a", "-20.0", "down1", "down2", "interquartile range", "Premium"] {
            assert!(t.iter().any(|x| x == want), "no text {want:?} in {t:?}");
        }
        // The whisker and its two caps: three thin ink paths more than the
        // same chart without quartiles (the rest is the zero line).
        let bare = spread_bars(
            "test",
            &[panel_of(vec![Some(Spread { n: 1, median: Some(-20.0), q1: None, q3: None }), None])],
        )
        .unwrap();
        let paths = |s: &str| s.matches(r##"stroke="#333333" stroke-width="1""##).count();
        assert_eq!((paths(&svg), paths(&bare)), (4, 1));
    }
}
