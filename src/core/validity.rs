//! Run validity (design.md §4): every run judges its own health, so a number
//! from an unhealthy run is never shown as if it were fine. The checks are
//! pure functions of the run's per-phase books and per-second p95 series;
//! the run command prints them, writes them to summary.json and report.html,
//! and fails the run (exit 1) unless the user downgrades them to warnings.
//!
//! The rules and their stated principles:
//! - **Baseline steady.** A steady baseline has no queue that grows: its
//!   p95 does not trend, and no session aborts on a time-out (connect or
//!   query). The trend is the Theil-Sen slope of the per-second p95 times
//!   the window, relative to the window's median p95; a rise above
//!   [`Limits::trend`] of the median and above [`Limits::trend_floor_ms`]
//!   (timer and scheduling noise) fails.
//! - **Time-outs per phase.** A fault kills sessions on the failed replica
//!   (`connection lost`, `connect refused`): that is the fault's effect and
//!   is not counted. Time-outs are the clients giving up on an overloaded
//!   replica, or a live replica at `max_connections` turning them away
//!   (`too many clients`): above [`Limits::timeout_share`] of a class's
//!   sessions in a phase, the phase measures client time-out artefacts,
//!   not capacity.
//! - **Phase length.** A phase shorter than a typical session mixes
//!   sessions placed before and after its change.
//! - **Progress** (revised 2026-12-06: checks hold in every regime). A
//!   class that wants service (sessions in a query, thinking, connecting,
//!   waiting at the admission gate, or refused or aborted and retrying) and
//!   completes no query for a window W got no service: every figure of
//!   that stretch is the absence of one. W is the class's own time scale,
//!   `max(10 s, min(30 s, 5 x its baseline p95), 5 x its mean think time)`
//!   ([`window_s`]): a class that is merely slow never fails it, and 30
//!   s with no answer to any of its open queries is no service whatever
//!   its baseline was.
//! - **Login wait** (revised 2026-12-06). In a saturated closed
//!   population a login waits (for the gate, a replica, the postmaster's
//!   fork), and that wait is part of the first query's latency, not a
//!   fault. A wait has a limit all the same: the one the most widely
//!   deployed PostgreSQL pooler keeps by default. PgBouncer disconnects a
//!   client whose query has waited [`LOGIN_WAIT_LIMIT_S`] (120 s, its
//!   `query_wait_timeout`) for a server, so a run whose clients wait longer
//!   measures a queue no such deployment would keep. The longest login
//!   wait of each phase, counting a login still waiting at the phase's end
//!   by its age then, must stay within it. A workload with a login
//!   deadline of its own times such logins out first (the time-outs check).

use crate::core::model::Class;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The thresholds of the checks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// Largest relative p95 rise across the baseline window (default 0.5).
    pub trend: f64,
    /// Smallest absolute rise, ms, that can fail the trend rule (default 50).
    pub trend_floor_ms: f64,
    /// Largest share of a class's sessions in a phase that may end on a
    /// time-out (default 0.01).
    pub timeout_share: f64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { trend: 0.5, trend_floor_ms: 50.0, timeout_share: 0.01 }
    }
}

/// Which check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckKind {
    /// The baseline is steady (no p95 trend, no time-out).
    BaselineSteady,
    /// No phase has more time-outs than the stated share.
    Timeouts,
    /// No phase is shorter than a typical session.
    PhaseLength,
    /// No class that wants service goes a window without a completed query.
    Progress,
    /// No login waits longer than a session of its class lasts.
    LoginWait,
}

impl fmt::Display for CheckKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CheckKind::BaselineSteady => "baseline steady",
            CheckKind::Timeouts => "time-outs",
            CheckKind::PhaseLength => "phase length",
            CheckKind::Progress => "progress",
            CheckKind::LoginWait => "login wait",
        })
    }
}

/// One check's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// Which check.
    pub kind: CheckKind,
    /// Whether it holds.
    pub ok: bool,
    /// What was found, one line.
    pub detail: String,
}

/// The books of one class in one phase, as the checks need them.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseBooks {
    /// Phase name.
    pub phase: String,
    /// Class.
    pub class: Class,
    /// Phase length, seconds.
    pub len_s: f64,
    /// Sessions that ended in the phase (completed or aborted).
    pub sessions: u64,
    /// Of them, sessions aborted on overload: a connect or query time-out,
    /// or a full server (`AbortReason::is_overload`).
    pub timeouts: u64,
}

/// The most points the trend's slopes are taken between (179,700 pairs):
/// a longer window is cut into bins of equal whole seconds, each standing
/// at its middle with its median p95, so the check's work and memory stay
/// bounded however long the run (docs/performance.md, "The simulator's cost": a 2,400 s window took 2.9
/// million slopes, 23 MB).
pub const TREND_POINTS: usize = 600;

/// The relative p95 rise across a window of per-second p95 values: the
/// Theil-Sen slope times the window, over the median. `None` with fewer
/// than 3 values or a zero median. Over [`TREND_POINTS`] seconds, the
/// slopes are those of the bins' medians.
pub fn trend(p95_ms: &[f64]) -> Option<(f64, f64)> {
    let n = p95_ms.len();
    if n < 3 {
        return None;
    }
    let points = bins(p95_ms);
    let mut slopes = Vec::with_capacity(points.len() * (points.len() - 1) / 2);
    for (i, &(xi, yi)) in points.iter().enumerate() {
        for &(xj, yj) in &points[i + 1..] {
            slopes.push((yj - yi) / (xj - xi));
        }
    }
    let rise = median(&mut slopes) * (n - 1) as f64;
    let mut values = p95_ms.to_vec();
    let med = median(&mut values);
    (med > 0.0).then_some((rise, rise / med))
}

/// `(second, p95)` points of the window: every second up to
/// [`TREND_POINTS`] of them, else bins of consecutive seconds at their
/// middle with their median.
fn bins(p95_ms: &[f64]) -> Vec<(f64, f64)> {
    let width = p95_ms.len().div_ceil(TREND_POINTS);
    let point = |(b, bin): (usize, &[f64])| {
        let middle = (b * width) as f64 + (bin.len() - 1) as f64 / 2.0;
        (middle, if bin.len() == 1 { bin[0] } else { median(&mut bin.to_vec()) })
    };
    p95_ms.chunks(width).enumerate().map(point).collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The baseline check of one class: `p95_ms` per second in the window and
/// the class's baseline books.
fn baseline(limits: &Limits, p95_ms: &[f64], books: &PhaseBooks) -> Option<String> {
    if books.timeouts > 0 {
        return Some(format!(
            "{}: {} of {} sessions timed out or found the server full",
            books.class, books.timeouts, books.sessions
        ));
    }
    let (rise, rel) = trend(p95_ms)?;
    (rise > limits.trend_floor_ms && rel > limits.trend).then(|| {
        format!("{}: p95 rose {rise:.0} ms across the window ({:.0}% of its median)", books.class, rel * 100.0)
    })
}

/// Judges a run. `baseline_p95` holds each class's per-second p95 in the
/// baseline window (seconds with no completed query left out), `books`
/// every non-warmup phase and class, `session_s` a typical session's length.
pub fn judge(limits: &Limits, baseline_p95: [&[f64]; 2], books: &[PhaseBooks], session_s: f64) -> Vec<Check> {
    let base = books.iter().filter(|b| b.phase == crate::core::phases::BASELINE);
    let unsteady: Vec<String> = base.filter_map(|b| baseline(limits, baseline_p95[b.class.idx()], b)).collect();
    let timeouts: Vec<String> = books
        .iter()
        .filter(|b| b.sessions > 0 && b.timeouts as f64 > limits.timeout_share * b.sessions as f64)
        .map(|b| format!("{} {}: {} of {} sessions", b.phase, b.class, b.timeouts, b.sessions))
        .collect();
    vec![
        check(CheckKind::BaselineSteady, &unsteady, "no p95 trend and no time-out".into()),
        check(
            CheckKind::Timeouts,
            &timeouts,
            format!("at most {:.0}% of each class's sessions per phase", limits.timeout_share * 100.0),
        ),
        phase_length(books, session_s),
    ]
}

/// The phase-length check: every phase at least `session_s` long.
fn phase_length(books: &[PhaseBooks], session_s: f64) -> Check {
    let mut short: Vec<String> =
        books.iter().filter(|b| b.len_s < session_s).map(|b| format!("{} ({:.1} s)", b.phase, b.len_s)).collect();
    short.dedup();
    let kind = CheckKind::PhaseLength;
    match short.is_empty() {
        true => Check { kind, ok: true, detail: format!("every phase at least a typical session ({session_s:.1} s)") },
        false => Check {
            kind,
            ok: false,
            detail: format!(
                "shorter than a typical session ({session_s:.1} s): {}; their figures mix sessions placed before and after the phase's change",
                short.join(", ")
            ),
        },
    }
}

/// The floor of the progress check's window, s.
pub const PROGRESS_FLOOR_S: f64 = 10.0;

/// The ceiling of the latency part of the progress check's window, s.
pub const PROGRESS_LATENCY_CAP_S: f64 = 30.0;

/// The progress check's window W for a class whose baseline p95 is
/// `baseline_p95_ms` (if it completed any) and whose mean think time is
/// `think_ms`: `max(10 s, min(30 s, 5 x p95), 5 x think)`.
pub fn window_s(baseline_p95_ms: Option<f64>, think_ms: f64) -> f64 {
    let latency = (5.0 * baseline_p95_ms.unwrap_or(0.0) / 1000.0).min(PROGRESS_LATENCY_CAP_S);
    PROGRESS_FLOOR_S.max(latency).max(5.0 * think_ms / 1000.0)
}

/// One class's seconds, as the progress check reads them.
#[derive(Clone, Debug, PartialEq)]
pub struct Seconds {
    /// The class.
    pub class: Class,
    /// Per whole second of the run: queries completed, and whether the
    /// class wanted service (open sessions, waiting, refused or aborted).
    pub completed: Vec<u64>,
    /// See `completed`.
    pub wanting: Vec<bool>,
    /// Its window W, s ([`window_s`]).
    pub window_s: f64,
}

/// The longest stretch `[first, last]` of seconds in which the class
/// completed nothing, counted from the first to the last second in it
/// that the class wanted service (clients backing off between refusals
/// still want it).
pub fn longest_starved(s: &Seconds) -> Option<(usize, usize)> {
    let mut best: Option<(usize, usize)> = None;
    let mut open: Option<(usize, usize)> = None;
    for (t, (&done, &want)) in s.completed.iter().zip(&s.wanting).enumerate() {
        if done > 0 {
            open = None;
            continue;
        }
        if want {
            open = Some(open.map_or((t, t), |(a, _)| (a, t)));
        }
        if let Some((a, b)) = open {
            if best.is_none_or(|(x, y)| b - a > y - x) {
                best = Some((a, b));
            }
        }
    }
    best
}

/// The progress check over every class; `phase_of` names the phases a
/// stretch of seconds covers.
pub fn progress(classes: &[Seconds], phase_of: impl Fn(usize, usize) -> String) -> Check {
    let starved: Vec<String> = classes
        .iter()
        .filter_map(|s| {
            let (a, b) = longest_starved(s)?;
            let len = (b - a + 1) as f64;
            (len >= s.window_s).then(|| {
                format!(
                    "{}: no query completed for {len:.0} s ({a}-{} s: {}) while it wanted service (W {:.0} s)",
                    s.class,
                    b + 1,
                    phase_of(a, b),
                    s.window_s
                )
            })
        })
        .collect();
    let ok = "every class that wanted service completed a query at least once per its window W (max(10 s, min(30 s, 5 x baseline p95), 5 x think))";
    check(CheckKind::Progress, &starved, ok.into())
}

/// The longest a login may wait, s: PgBouncer's `query_wait_timeout`
/// default (1.18's pgbouncer(5): "If the query is not assigned to a server
/// during that time, the client is disconnected. ... Default: 120").
pub const LOGIN_WAIT_LIMIT_S: f64 = 120.0;

/// The logins of one class in one phase, as the login-wait check reads them.
#[derive(Clone, Debug, PartialEq)]
pub struct LoginBooks {
    /// Phase name.
    pub phase: String,
    /// Class.
    pub class: Class,
    /// The longest login wait of the phase, counting those still waiting
    /// at its end by their age then, ms.
    pub max_ms: Option<f64>,
    /// Logins still waiting at the phase's end.
    pub waiting: u64,
}

/// The login-wait check over every non-warmup phase and class.
pub fn login_wait(books: &[LoginBooks]) -> Check {
    let long: Vec<String> = books
        .iter()
        .filter_map(|b| {
            let max_s = b.max_ms? / 1000.0;
            (max_s > LOGIN_WAIT_LIMIT_S).then(|| {
                format!(
                    "{} {}: a login waited {max_s:.1} s (limit {LOGIN_WAIT_LIMIT_S:.0} s), {} still waiting at the phase's end",
                    b.phase, b.class, b.waiting
                )
            })
        })
        .collect();
    let ok = "no login waited longer than 120 s (PgBouncer's query_wait_timeout)";
    check(CheckKind::LoginWait, &long, ok.into())
}

fn check(kind: CheckKind, failures: &[String], ok_detail: String) -> Check {
    match failures {
        [] => Check { kind, ok: true, detail: ok_detail },
        _ => Check { kind, ok: false, detail: failures.join("; ") },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn books(phase: &str, class: Class, sessions: u64, timeouts: u64) -> PhaseBooks {
        PhaseBooks { phase: phase.into(), class, len_s: 30.0, sessions, timeouts }
    }

    #[test]
    fn trend_is_robust_to_one_outlier_and_sees_a_ramp() {
        let flat: Vec<f64> = (0..30).map(|i| if i == 7 { 900.0 } else { 40.0 }).collect();
        assert_eq!(trend(&flat).map(|t| t.0), Some(0.0));
        let ramp: Vec<f64> = (0..30).map(|i| 100.0 + 10.0 * i as f64).collect();
        let (rise, rel) = trend(&ramp).unwrap();
        assert!((rise - 290.0).abs() < 1e-9 && (rel - 290.0 / 245.0).abs() < 1e-9, "{rise} {rel}");
        assert_eq!(trend(&[1.0, 2.0]), None);
    }

    #[test]
    fn a_long_window_is_binned_and_still_sees_a_ramp_and_ignores_outliers() {
        // 2,400 s: bins of 4 s, 600 points.
        let ramp: Vec<f64> = (0..2400).map(|i| 100.0 + 0.5 * i as f64).collect();
        let (rise, _) = trend(&ramp).unwrap();
        assert!((rise - 0.5 * 2399.0).abs() < 1e-6, "{rise}");
        let spiky: Vec<f64> = (0..2400).map(|i| if i % 97 == 0 { 5000.0 } else { 40.0 }).collect();
        assert_eq!(trend(&spiky).map(|t| t.0), Some(0.0));
        // At the limit nothing is binned: the same slopes as one point a second.
        assert_eq!(bins(&ramp[..TREND_POINTS]).len(), TREND_POINTS);
        assert_eq!(bins(&ramp[..TREND_POINTS + 1]).len(), TREND_POINTS.div_ceil(2) + 1);
    }

    /// (P p95, F p95, books, session_s, expected ok per check).
    type Case<'a> = (&'a [f64], &'a [f64], Vec<PhaseBooks>, f64, [bool; 3]);

    #[test]
    fn table() {
        let l = Limits::default();
        let flat = vec![40.0; 30];
        let ramp: Vec<f64> = (0..30).map(|i| 100.0 + 10.0 * i as f64).collect();
        let small_ramp: Vec<f64> = (0..30).map(|i| 10.0 + i as f64).collect();
        let cases: Vec<Case> = vec![
            (
                &flat,
                &flat,
                vec![books("baseline", Class::P, 100, 0), books("baseline", Class::F, 300, 0)],
                10.0,
                [true; 3],
            ),
            // a rising Freemium p95 in the baseline
            (&flat, &ramp, vec![books("baseline", Class::F, 300, 0)], 10.0, [false, true, true]),
            // a rise of 29 ms is under the floor, whatever its share
            (&flat, &small_ramp, vec![books("baseline", Class::F, 300, 0)], 10.0, [true; 3]),
            // one baseline time-out fails the baseline (and 1/50 > 1%)
            (&flat, &flat, vec![books("baseline", Class::F, 50, 1)], 10.0, [false, false, true]),
            // 1% of a fault phase's sessions may time out, not more
            (&flat, &flat, vec![books("down1", Class::F, 200, 2)], 10.0, [true; 3]),
            (&flat, &flat, vec![books("down1", Class::F, 200, 3)], 10.0, [true, false, true]),
            // a phase shorter than a session
            (&flat, &flat, vec![books("down1", Class::P, 10, 0)], 31.0, [true, true, false]),
        ];
        for (i, (p, f, b, s, want)) in cases.into_iter().enumerate() {
            let got: Vec<bool> = judge(&l, [p, f], &b, s).iter().map(|c| c.ok).collect();
            assert_eq!(got, want, "case {i}");
        }
    }

    #[test]
    fn progress_fails_a_class_that_wants_service_and_gets_none_for_its_window() {
        let secs =
            |completed: Vec<u64>, wanting: Vec<bool>| Seconds { class: Class::P, completed, wanting, window_s: 10.0 };
        let mut done = vec![5u64; 60];
        done[20..32].iter_mut().for_each(|d| *d = 0);
        let starving = secs(done.clone(), vec![true; 60]);
        assert_eq!(longest_starved(&starving), Some((20, 31)));
        let c = progress(&[starving], |a, b| format!("{a}..{b}"));
        assert!(!c.ok && c.detail.starts_with("P: no query completed for 12 s (20-32 s: 20..31)"), "{}", c.detail);
        // Nobody wanted service for most of the gap (clients between
        // sessions): 20 and 25 want it, so the stretch is 6 s.
        let mut want = vec![false; 60];
        want[20] = true;
        want[25] = true;
        assert_eq!(longest_starved(&secs(done.clone(), want.clone())), Some((20, 25)));
        assert!(progress(&[secs(done.clone(), want)], |_, _| String::new()).ok);
        // Nine seconds of nothing is within W.
        let mut short = vec![5u64; 60];
        short[10..19].iter_mut().for_each(|d| *d = 0);
        assert!(progress(&[secs(short, vec![true; 60])], |_, _| String::new()).ok);
        assert_eq!(window_s(Some(4000.0), 50.0), 20.0);
        assert_eq!(window_s(None, 50.0), 10.0);
        assert_eq!(window_s(Some(100.0), 3000.0), 15.0);
        assert_eq!(window_s(Some(60_000.0), 50.0), 30.0, "the latency part is capped");
    }

    #[test]
    fn details_name_the_class_phase_and_counts() {
        let b = vec![books("baseline", Class::F, 50, 3), books("down2", Class::P, 40, 5)];
        let c = judge(&Limits::default(), [&[], &[]], &b, 10.0);
        assert_eq!(c[0].detail, "F: 3 of 50 sessions timed out or found the server full");
        assert_eq!(c[1].detail, "baseline F: 3 of 50 sessions; down2 P: 5 of 40 sessions");
        assert_eq!(c[2].kind.to_string(), "phase length");
        let short = vec![books("down1", Class::P, 10, 0), books("down1", Class::F, 10, 0)];
        let c = judge(&Limits::default(), [&[], &[]], &short, 31.0);
        assert!(c[2].detail.starts_with("shorter than a typical session (31.0 s): down1 (30.0 s);"), "{}", c[2].detail);
    }

    #[test]
    fn a_login_longer_than_its_bound_fails_and_one_still_waiting_counts_by_age() {
        let b = |phase: &str, max_ms: Option<f64>, waiting: u64| LoginBooks {
            phase: phase.into(),
            class: Class::F,
            max_ms,
            waiting,
        };
        assert!(login_wait(&[b("baseline", Some(19_295.0), 61), b("down1", Some(120_000.0), 250)]).ok);
        assert!(login_wait(&[b("down2", None, 0)]).ok, "no login, nothing to judge");
        let c = login_wait(&[b("down1", Some(38_911.0), 251), b("down2", Some(150_000.0), 1_250)]);
        assert!(!c.ok);
        assert_eq!(c.kind.to_string(), "login wait");
        assert_eq!(c.detail, "down2 F: a login waited 150.0 s (limit 120 s), 1250 still waiting at the phase's end");
    }
}
