//! (d) The PLB role timeline: one lane per replica (r1 on top), coloured by
//! the role the router gave it at each sample (P, M, F), hatched grey where
//! the replica was really down, with a dashed marker at every fault event.
//! Consecutive samples in the same state are merged into one rectangle so
//! that a long run stays a small SVG.

use super::{hatch, legend, pin, render, split, text_style, tick, Area, ChartError, DrawErr, Frame, Swatch, FONT, INK};
use super::{FAULT, FREEMIUM, MIXED, PREMIUM, WIDTH};
use crate::core::metrics::ReplicaRow;
use crate::core::model::Role;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

/// What a lane shows over an interval.
#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    Down,
    Up(Role),
}

/// The colour of a role.
pub fn role_colour(r: Role) -> RGBColor {
    match r {
        Role::P => PREMIUM,
        Role::M => MIXED,
        Role::F => FREEMIUM,
    }
}

/// Merges one replica's samples (any order) into `(from, to, state)`
/// intervals; a sample holds until the next one, the last until `t_end`.
fn intervals(rows: &[&ReplicaRow], t_end: f64) -> Vec<(f64, f64, State)> {
    let mut rows = rows.to_vec();
    rows.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    let mut out: Vec<(f64, f64, State)> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let to = rows.get(i + 1).map_or(t_end, |n| n.t_s).min(t_end);
        let state = if r.up { State::Up(r.role) } else { State::Down };
        match out.last_mut() {
            Some(last) if last.2 == state && (last.1 - r.t_s).abs() < 1e-9 => last.1 = to,
            _ if to > r.t_s => out.push((r.t_s, to, state)),
            _ => {}
        }
    }
    out
}

/// (d) The role timeline of `names` (r1..rK) from the replicas.csv rows.
pub fn roles(replicas: &[ReplicaRow], names: &[String], frame: &Frame) -> Result<String, ChartError> {
    let k = names.len().max(1);
    let height = 110 + 40 * k as u32;
    render("role timeline", (WIDTH, height), |root| {
        let (plot, side) = split(root);
        lanes(root, &plot, replicas, names, frame)?;
        let mut entries: Vec<(Swatch, String)> =
            [(Role::P, "role P (Premium)"), (Role::M, "role M (Mixed)"), (Role::F, "role F (Freemium)")]
                .into_iter()
                .map(|(r, l)| (Swatch::Fill(role_colour(r), 1.0), l.to_string()))
                .collect();
        entries.push((Swatch::Hatch, "down".to_string()));
        entries.push((Swatch::Dashed(FAULT), "fault event".to_string()));
        legend(&side, &entries)
    })
}

fn lanes(
    root: &Area<'_>,
    plot: &Area<'_>,
    replicas: &[ReplicaRow],
    names: &[String],
    frame: &Frame,
) -> Result<(), DrawErr> {
    let k = names.len().max(1) as f64;
    let mut chart = super::builder(plot).build_cartesian_2d(0.0..frame.t_end, 0.0..k)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_label_formatter(&|v| tick(*v))
        .x_desc("time since run start (s)")
        .y_desc("replica")
        .axis_desc_style((FONT, 15))
        .label_style((FONT, 13))
        .bold_line_style(RGBColor(0xe2, 0xe2, 0xe2))
        .light_line_style(RGBColor(0xf4, 0xf4, 0xf4))
        .draw()?;
    for (i, name) in names.iter().enumerate() {
        // r1 on top: lane i spans [k - 1 - i, k - i] on the y axis.
        let y = k - 1.0 - i as f64;
        pin(
            root,
            chart.backend_coord(&(0.0, y + 0.5)),
            (-8, 0),
            name.clone(),
            text_style(13, INK, HPos::Right, VPos::Center),
        )?;
        let rows: Vec<&ReplicaRow> = replicas.iter().filter(|r| &r.replica == name).collect();
        for (from, to, state) in intervals(&rows, frame.t_end) {
            let (a, b) = (chart.backend_coord(&(from, y + 1.0)), chart.backend_coord(&(to, y)));
            let (top, bottom) = (a.1 + 6, b.1 - 6);
            match state {
                State::Up(role) => {
                    root.draw(&Rectangle::new([(a.0, top), (b.0, bottom)], role_colour(role).filled()))?
                }
                State::Down => hatch(root, (a.0, top), (b.0.max(a.0 + 1), bottom))?,
            }
        }
    }
    for &t in frame.fault_times.iter().filter(|t| **t <= frame.t_end) {
        chart.draw_series(DashedLineSeries::new(vec![(t, 0.0), (t, k)], 6, 4, FAULT.stroke_width(2)))?;
    }
    if replicas.is_empty() {
        let at = chart.backend_coord(&(frame.t_end / 2.0, k / 2.0));
        pin(root, at, (0, 0), "no replica samples".into(), text_style(15, INK, HPos::Center, VPos::Center))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(t: f64, up: bool, role: Role) -> ReplicaRow {
        ReplicaRow { t_s: t, replica: "r1".into(), up, role, cpu_fraction: None, active_p: 0, active_f: 0 }
    }

    #[test]
    fn samples_merge_into_intervals() {
        let rows = [
            row(2.0, true, Role::M),
            row(0.0, true, Role::P),
            row(1.0, true, Role::P),
            row(3.0, false, Role::M),
            row(4.0, true, Role::M),
        ];
        let refs: Vec<&ReplicaRow> = rows.iter().collect();
        assert_eq!(
            intervals(&refs, 6.0),
            vec![
                (0.0, 2.0, State::Up(Role::P)),
                (2.0, 3.0, State::Up(Role::M)),
                (3.0, 4.0, State::Down),
                (4.0, 6.0, State::Up(Role::M))
            ]
        );
    }
}
