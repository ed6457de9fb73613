//! The chart of `plbbench compare --html`: per phase, one bar per compared
//! folder for goodput (left) and p95 latency (right) of one class, with the
//! interquartile range of experiment folders as whiskers. Shares the page
//! style of the run charts (legend strip on the right, same fonts and ink).

use super::{builder, legend, pin, render, split, text_style, tick, top, ChartError, DrawErr, Swatch, Area, FONT, INK};
use crate::core::model::Class;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

/// One bar: a value (an experiment's median) and optional quartiles.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bar {
    /// Height; `None` draws "n/a".
    pub value: Option<f64>,
    /// First quartile (whisker bottom).
    pub q1: Option<f64>,
    /// Third quartile (whisker top).
    pub q3: Option<f64>,
}

/// One colour per compared folder (the baseline first, dark grey), cycled
/// beyond eight.
const SERIES: [RGBColor; 8] = [
    RGBColor(0x5f, 0x63, 0x68),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0xd6, 0x27, 0x28),
];

/// The colour of compared folder `i`.
pub fn series_colour(i: usize) -> RGBColor {
    SERIES[i % SERIES.len()]
}

/// Goodput and p95 per phase of `class`, one bar per folder: `goodput[phase][folder]`.
pub fn compare_bars(
    class: Class,
    phases: &[String],
    folders: &[String],
    goodput: &[Vec<Bar>],
    p95: &[Vec<Bar>],
) -> Result<String, ChartError> {
    let chart = match class {
        Class::P => "Premium comparison",
        Class::F => "Freemium comparison",
    };
    render(chart, (super::WIDTH, super::HEIGHT + 20), |root| {
        let (plot, side) = split(root);
        let (left, right) = plot.split_horizontally(plot.dim_in_pixel().0 / 2);
        panel(&left, "goodput (queries/s)", phases, goodput)?;
        panel(&right, "p95 latency (ms)", phases, p95)?;
        let mut entries: Vec<(Swatch, String)> =
            folders.iter().enumerate().map(|(i, f)| (Swatch::Fill(series_colour(i), 1.0), shorten(f))).collect();
        if goodput.iter().chain(p95).flatten().any(|b| b.q1.is_some()) {
            entries.push((Swatch::Line(INK), "interquartile range".into()));
        }
        legend(&side, &entries)
    })
}

/// A legend label that fits the strip: the end of a long folder path.
fn shorten(s: &str) -> String {
    let n = s.chars().count();
    if n <= 18 {
        s.to_string()
    } else {
        let tail: String = s.chars().skip(n - 16).collect();
        format!("{}…{tail}", s.chars().next().unwrap_or(' '))
    }
}

fn panel(area: &Area<'_>, y_desc: &str, phases: &[String], bars: &[Vec<Bar>]) -> Result<(), DrawErr> {
    let n = phases.len().max(1) as f64;
    let ymax = top(bars.iter().flatten().flat_map(|b| [b.value, b.q3]).flatten(), 1.0);
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
    for (i, (name, group)) in phases.iter().zip(bars).enumerate() {
        let x = i as f64;
        let at = chart.backend_coord(&(x + 0.5, 0.0));
        pin(area, at, (0, 8), name.clone(), text_style(12, INK, HPos::Center, VPos::Top))?;
        let w = 0.76 / group.len().max(1) as f64;
        for (j, b) in group.iter().enumerate() {
            let (x0, x1) = (x + 0.12 + j as f64 * w, x + 0.12 + (j as f64 + 0.9) * w);
            let mid = (x0 + x1) / 2.0;
            match b.value {
                Some(v) => {
                    chart.draw_series(std::iter::once(Rectangle::new([(x0, 0.0), (x1, v)], series_colour(j).filled())))?;
                }
                None => {
                    let style = text_style(11, INK, HPos::Center, VPos::Bottom);
                    chart.draw_series(std::iter::once(EmptyElement::at((mid, 0.0)) + Text::new("n/a", (0, -3), style)))?;
                }
            }
            if let (Some(lo), Some(hi)) = (b.q1, b.q3) {
                let cap = w * 0.25;
                for seg in [vec![(mid, lo), (mid, hi)], vec![(mid - cap, lo), (mid + cap, lo)], vec![(mid - cap, hi), (mid + cap, hi)]] {
                    chart.draw_series(std::iter::once(PathElement::new(seg, INK.stroke_width(1))))?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_whiskers_and_missing_values() {
        let phases = vec!["baseline (K+=5)".to_string(), "down1 (K+=4)".to_string()];
        let folders = vec!["A: base".to_string(), "B: a/very/long/folder/name/of/a/run".to_string()];
        let bar = |v: f64| Bar { value: Some(v), q1: Some(v * 0.9), q3: Some(v * 1.1) };
        let g = vec![vec![bar(10.0), bar(12.0)], vec![bar(8.0), Bar::default()]];
        let svg = compare_bars(Class::P, &phases, &folders, &g, &g).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("down1 (K+=4)"));
        assert!(svg.contains("n/a") && svg.contains("interquartile range"));
        assert!(svg.contains("A: base") && svg.contains("…"));
        assert_eq!(shorten("abc"), "abc");
    }
}
