//! The login-wait figure (issue 48): in a saturated closed population a
//! session's login waits for the gate, a replica and the postmaster's
//! fork, and that wait is the first thing a starved class shows. Per
//! second and class it draws how long the oldest login still waiting had
//! waited, against the login-wait check's limit (dashed).

use super::{
    builder, class_colour, class_series, class_title, draw_runs, legend, mesh, render, runs, shade, split, top,
    window_entries, ChartError, Frame, Swatch, HEIGHT, INK, WIDTH,
};
use crate::core::metrics::SeriesRow;
use crate::core::model::Class;
use crate::core::validity::LOGIN_WAIT_LIMIT_S;
use plotters::prelude::*;

/// Per second, the age of each class's oldest login still waiting at the
/// sample that ends it, s; a second with no login waiting leaves a gap.
pub fn logins(series: &[SeriesRow], frame: &Frame) -> Result<String, ChartError> {
    render("login wait", (WIDTH, HEIGHT), |root| {
        let (plot, side) = split(root);
        let oldest_s = |r: &SeriesRow| r.login_oldest_ms.filter(|_| r.logins_waiting > 0).map(|ms| ms / 1000.0);
        let ymax = top(series.iter().filter_map(oldest_s), 1.0);
        let mut chart = builder(&plot).build_cartesian_2d(0.0..frame.t_end, 0.0..ymax)?;
        mesh(&mut chart, "oldest login waiting (s)")?;
        shade(&mut chart, frame, (0.0, ymax))?;
        let mut entries = Vec::new();
        if LOGIN_WAIT_LIMIT_S < ymax {
            let limit = vec![(0.0, LOGIN_WAIT_LIMIT_S), (frame.t_end, LOGIN_WAIT_LIMIT_S)];
            chart.draw_series(DashedLineSeries::new(limit, 8, 5, INK.stroke_width(1)))?;
            entries.push((Swatch::Dashed(INK), format!("check's limit ({LOGIN_WAIT_LIMIT_S:.0} s)")));
        }
        for class in Class::ALL {
            let pts = class_series(series, class).into_iter().map(|r| (r.t_s as f64 + 1.0, oldest_s(r)));
            draw_runs(&mut chart, &runs(pts), class_colour(class).stroke_width(2))?;
            entries.push((Swatch::Line(class_colour(class)), class_title(class).to_string()));
        }
        entries.extend(window_entries(frame));
        legend(&side, &entries)
    })
}
