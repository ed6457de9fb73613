//! The map's heat maps (issue 49): for one finding, a panel per mix whose
//! cells are the grid's first two axes, coloured by the finding's value,
//! outlined where it lies in the paper's band, hatched where a run of the
//! cell failed a validity check, and dotted at the chosen point. Plain SVG:
//! rectangles and text, no script, readable in any browser.

use super::findings::Finding;
use std::fmt::Write as _;

const CELL_W: f64 = 74.0;
const CELL_H: f64 = 34.0;
const LEFT: f64 = 70.0;
const TOP: f64 = 46.0;
const GAP: f64 = 30.0;

/// One cell of a panel.
#[derive(Clone, Debug, PartialEq)]
pub struct Square {
    /// Column (first axis) and row (second axis).
    pub at: (usize, usize),
    /// The finding's value, if the cell has it.
    pub value: Option<f64>,
    /// A run of the cell failed a check.
    pub invalid: bool,
    /// The chosen point (the base workload's own values).
    pub chosen: bool,
}

/// A panel: one mix.
#[derive(Clone, Debug, PartialEq)]
pub struct Panel {
    /// The mix, `P:F`.
    pub mix: String,
    /// Its cells.
    pub squares: Vec<Square>,
}

/// What the axes are called and their values' labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// x axis name and labels.
    pub x: (String, Vec<String>),
    /// y axis name and labels (one empty label with a single axis).
    pub y: (String, Vec<String>),
}

/// Light to dark blue by `t` in [0, 1].
fn colour(t: f64) -> String {
    let lerp = |a: f64, b: f64| (a + (b - a) * t.clamp(0.0, 1.0)).round() as u8;
    format!("#{:02x}{:02x}{:02x}", lerp(247.0, 8.0), lerp(251.0, 48.0), lerp(255.0, 107.0))
}

/// The heat map of `finding` over `panels`; `facet` names the values of
/// the axes past the second (empty with two axes or fewer).
pub fn svg(finding: &Finding, frame: &Frame, panels: &[Panel], facet: &str) -> String {
    let (nx, ny) = (frame.x.1.len().max(1), frame.y.1.len().max(1));
    let panel_w = LEFT + nx as f64 * CELL_W;
    let width = panels.len() as f64 * (panel_w + GAP) + 20.0;
    let height = TOP + ny as f64 * CELL_H + 70.0;
    let values: Vec<f64> = panels.iter().flat_map(|p| p.squares.iter().filter_map(|s| s.value)).collect();
    let (lo, hi) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(v), b.max(v)));
    let mut out = String::new();
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="sans-serif" font-size="12"><defs><pattern id="hatch-{id}" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="8" stroke="#c0392b" stroke-width="2"/></pattern></defs><text x="10" y="18" font-size="14" font-weight="bold">{title}{facet} · paper: {band}</text>"##,
        id = finding.id,
        title = finding.title,
        facet = if facet.is_empty() {
            String::new()
        } else {
            format!(" · {}", facet.replace('_', ", ").replace('-', "="))
        },
        band = finding.band_text()
    );
    for (k, p) in panels.iter().enumerate() {
        let x0 = 10.0 + k as f64 * (panel_w + GAP);
        let _ = write!(out, r#"<text x="{:.0}" y="38" font-weight="bold">{}</text>"#, x0 + LEFT, p.mix);
        for s in &p.squares {
            let (x, y) = (x0 + LEFT + s.at.0 as f64 * CELL_W, TOP + (ny - 1 - s.at.1) as f64 * CELL_H);
            let t = s.value.map(|v| if hi > lo { (v - lo) / (hi - lo) } else { 0.5 });
            let fill = t.map_or("#dddddd".to_string(), colour);
            let _ = write!(
                out,
                r##"<rect x="{x:.0}" y="{y:.0}" width="{CELL_W}" height="{CELL_H}" fill="{fill}" stroke="#ffffff"/>"##
            );
            if s.invalid {
                let _ = write!(
                    out,
                    r#"<rect x="{x:.0}" y="{y:.0}" width="{CELL_W}" height="{CELL_H}" fill="url(#hatch-{})" opacity="0.6"/>"#,
                    finding.id
                );
            }
            if s.value.is_some_and(|v| finding.holds(v)) {
                let _ = write!(
                    out,
                    r##"<rect x="{:.0}" y="{:.0}" width="{:.0}" height="{:.0}" fill="none" stroke="#000000" stroke-width="3"/>"##,
                    x + 1.5,
                    y + 1.5,
                    CELL_W - 3.0,
                    CELL_H - 3.0
                );
            }
            if s.chosen {
                let _ = write!(
                    out,
                    r##"<circle cx="{:.0}" cy="{:.0}" r="4" fill="#e67e22" stroke="#000000"/>"##,
                    x + 8.0,
                    y + 8.0
                );
            }
            let ink = if t.is_some_and(|t| t > 0.55) { "#ffffff" } else { "#000000" };
            let label = s.value.map_or("–".to_string(), |v| format!("{v:.1}"));
            let _ = write!(
                out,
                r#"<text x="{:.0}" y="{:.0}" text-anchor="middle" fill="{ink}">{label}</text>"#,
                x + CELL_W / 2.0,
                y + CELL_H / 2.0 + 4.0
            );
        }
        for (i, l) in frame.x.1.iter().enumerate() {
            let _ = write!(
                out,
                r#"<text x="{:.0}" y="{:.0}" text-anchor="middle">{l}</text>"#,
                x0 + LEFT + (i as f64 + 0.5) * CELL_W,
                TOP + ny as f64 * CELL_H + 16.0
            );
        }
        for (j, l) in frame.y.1.iter().enumerate() {
            let _ = write!(
                out,
                r#"<text x="{:.0}" y="{:.0}" text-anchor="end">{l}</text>"#,
                x0 + LEFT - 6.0,
                TOP + (ny - 1 - j) as f64 * CELL_H + CELL_H / 2.0 + 4.0
            );
        }
        let _ = write!(
            out,
            r#"<text x="{:.0}" y="{:.0}" text-anchor="middle">{}</text>"#,
            x0 + LEFT + nx as f64 * CELL_W / 2.0,
            TOP + ny as f64 * CELL_H + 34.0,
            frame.x.0
        );
        let _ = write!(out, r#"<text x="{:.0}" y="{:.0}" text-anchor="start">{}</text>"#, x0, TOP - 4.0, frame.y.0);
    }
    let _ = write!(
        out,
        r##"<text x="10" y="{:.0}" fill="#333333">black outline: in the paper's band · red hatching: a run of the cell failed a validity check · orange dot: the chosen point · colour: light (lowest) to dark (highest)</text></svg>"##,
        height - 10.0
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::map::findings::FINDINGS;

    #[test]
    fn cells_show_band_hatching_and_the_chosen_point() {
        let frame = Frame {
            x: ("think_ms".into(), vec!["250".into(), "500".into()]),
            y: ("queries".into(), vec!["40".into()]),
        };
        let squares = vec![
            Square { at: (0, 0), value: Some(27.0), invalid: false, chosen: true },
            Square { at: (1, 0), value: Some(10.0), invalid: true, chosen: false },
        ];
        let s = svg(&FINDINGS[0], &frame, &[Panel { mix: "25:75".into(), squares }], "load-closed");
        assert_eq!(s.matches("stroke-width=\"3\"").count(), 1, "one cell in the band");
        assert_eq!(s.matches("url(#hatch-rq1_gain_pp)").count(), 1, "one hatched");
        assert_eq!(s.matches("<circle").count(), 1);
        assert!(s.contains(">27.0<") && s.contains(">10.0<") && s.contains("(pp) · load=closed · paper: 26..28"));
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
    }
}
