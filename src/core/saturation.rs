//! The generator saturation guard (docs/manual.md, "Run validity checks":
//! generator): a benchmark tool must be faster than the system it measures,
//! or it measures itself. Every real run feeds this module plbbench's own
//! cumulative CPU time once per second and the schedule lag of every
//! session start and query (actual start minus the intended start of the
//! client's schedule); at the end it decides whether the generator kept up.
//! Pure: the driver reads the clocks, this only counts.
//!
//! The run is flagged when plbbench used more than [`CPU_LIMIT_CORES`] of a
//! core in any one-second window, or the schedule lag's p99 exceeded
//! [`LAG_P99_LIMIT_MS`]: either means latencies partly measure plbbench.

use super::metrics::r4;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// plbbench's own CPU above this many cores in any one-second window flags the run (80% of a core).
pub const CPU_LIMIT_CORES: f64 = 0.8;
/// A schedule-lag p99 above this many milliseconds flags the run.
pub const LAG_P99_LIMIT_MS: f64 = 10.0;
/// CPU windows shorter than this (seconds) are not rated on their own (a
/// last sample just after the previous one would divide by almost nothing);
/// their time joins the next window.
const MIN_WINDOW_S: f64 = 0.5;

/// How hard the generator worked during a run (summary.json `generator`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GeneratorReport {
    /// Highest CPU use of plbbench's process over a one-second window, in cores.
    pub cpu_max_cores: f64,
    /// Mean CPU use over the whole run, in cores.
    pub cpu_mean_cores: f64,
    /// Median schedule lag (actual minus intended start), milliseconds.
    pub lag_p50_ms: f64,
    /// 99th percentile schedule lag, milliseconds.
    pub lag_p99_ms: f64,
    /// Largest schedule lag, milliseconds.
    pub lag_max_ms: f64,
    /// Session starts and queries whose lag was measured.
    pub lag_samples: u64,
    /// Peak resident memory of plbbench's process (VmHWM), MiB; `None` when unknown.
    #[serde(default)]
    pub rss_peak_mib: Option<f64>,
    /// Most sessions open at once.
    #[serde(default)]
    pub sessions_peak: u64,
    /// True when either limit was exceeded: the run measured the generator, not the database.
    pub saturated: bool,
}

impl GeneratorReport {
    /// One line for the run's verdict list and the report's banner.
    pub fn detail(&self) -> String {
        let head = format!(
            "plbbench used at most {:.2} cores (limit {CPU_LIMIT_CORES}) and its schedule lag p99 was {:.2} ms (limit {LAG_P99_LIMIT_MS} ms, {} samples)",
            self.cpu_max_cores, self.lag_p99_ms, self.lag_samples
        );
        if self.saturated {
            format!("{head}: the load generator was saturated, so this run measures the generator, not the database")
        } else {
            head
        }
    }
}

/// Accumulates CPU samples and schedule lags of one run.
#[derive(Clone, Debug)]
pub struct GeneratorLoad {
    /// The first sample `(t_s, cpu_s)`.
    first: Option<(f64, f64)>,
    /// The start of the current window `(t_s, cpu_s)`.
    last: Option<(f64, f64)>,
    /// The latest sample.
    latest: Option<(f64, f64)>,
    cpu_max_cores: f64,
    lag_us: Histogram<u64>,
    sessions_peak: u64,
}

impl Default for GeneratorLoad {
    fn default() -> Self {
        GeneratorLoad::new()
    }
}

impl GeneratorLoad {
    /// Nothing recorded yet.
    pub fn new() -> GeneratorLoad {
        GeneratorLoad {
            first: None,
            last: None,
            latest: None,
            cpu_max_cores: 0.0,
            lag_us: Histogram::new(3).expect("3 significant digits are valid"),
            sessions_peak: 0,
        }
    }

    /// The process's cumulative CPU seconds `cpu_s` (user + system) at run
    /// time `t_s`; samples come in time order, about once per second.
    pub fn cpu(&mut self, t_s: f64, cpu_s: f64) {
        self.first.get_or_insert((t_s, cpu_s));
        self.latest = Some((t_s, cpu_s));
        match self.last {
            None => self.last = Some((t_s, cpu_s)),
            Some((t0, c0)) if t_s - t0 >= MIN_WINDOW_S => {
                self.cpu_max_cores = self.cpu_max_cores.max((cpu_s - c0).max(0.0) / (t_s - t0));
                self.last = Some((t_s, cpu_s));
            }
            Some(_) => {}
        }
    }

    /// One schedule lag: actual minus intended start, seconds (a negative
    /// value, an early wake-up, counts as 0).
    pub fn lag(&mut self, lag_s: f64) {
        let us = (lag_s * 1e6).round().max(0.0) as u64;
        if self.lag_us.record(us).is_err() {
            self.lag_us.saturating_record(us);
        }
    }

    /// Sessions open now (the peak is kept).
    pub fn sessions(&mut self, open: u64) {
        self.sessions_peak = self.sessions_peak.max(open);
    }

    /// The verdict, with the process's peak RSS in KiB when known.
    pub fn report(&self, rss_peak_kib: Option<u64>) -> GeneratorReport {
        let cpu_mean_cores = match (self.first, self.latest) {
            (Some((t0, c0)), Some((t1, c1))) if t1 > t0 => (c1 - c0).max(0.0) / (t1 - t0),
            _ => 0.0,
        };
        let q = |p: f64| if self.lag_us.is_empty() { 0.0 } else { self.lag_us.value_at_quantile(p) as f64 / 1000.0 };
        let lag_p99_ms = q(0.99);
        GeneratorReport {
            cpu_max_cores: r4(self.cpu_max_cores),
            cpu_mean_cores: r4(cpu_mean_cores),
            lag_p50_ms: r4(q(0.5)),
            lag_p99_ms: r4(lag_p99_ms),
            lag_max_ms: r4(if self.lag_us.is_empty() { 0.0 } else { self.lag_us.max() as f64 / 1000.0 }),
            lag_samples: self.lag_us.len(),
            rss_peak_mib: rss_peak_kib.map(|k| r4(k as f64 / 1024.0)),
            sessions_peak: self.sessions_peak,
            saturated: self.cpu_max_cores > CPU_LIMIT_CORES || lag_p99_ms > LAG_P99_LIMIT_MS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CPU samples once per second with the given cores in each second.
    fn load(cores: &[f64], lags_ms: &[f64]) -> GeneratorLoad {
        let mut g = GeneratorLoad::new();
        let mut cpu = 0.0;
        g.cpu(0.0, 0.0);
        for (i, c) in cores.iter().enumerate() {
            cpu += c;
            g.cpu(i as f64 + 1.0, cpu);
        }
        for l in lags_ms {
            g.lag(l / 1000.0);
        }
        g
    }

    #[test]
    fn verdict_table() {
        let quiet = vec![0.5; 99];
        let one_late = [&quiet[..], &[50.0]].concat();
        let two_late = [&quiet[..98], &[50.0, 50.0]].concat();
        // (cores per second, lags ms, saturated)
        let cases: &[(&[f64], &[f64], bool)] = &[
            (&[0.1, 0.2, 0.3], &quiet, false),
            (&[0.1, 0.79, 0.3], &quiet, false), // just below the limit holds
            (&[0.1, 0.81, 0.3], &quiet, true),  // one second above it does not
            (&[1.9, 0.1], &quiet, true),
            (&[0.2; 5], &one_late, false), // 1 of 100 late: p99 is still quiet
            (&[0.2; 5], &two_late, true),  // 2 of 100 late: p99 is late
            (&[0.2; 5], &[], false),       // no lag samples
            (&[], &[11.0], true),
        ];
        for (i, (cores, lags, want)) in cases.iter().enumerate() {
            let r = load(cores, lags).report(None);
            assert_eq!(r.saturated, *want, "case {i}: {r:?}");
        }
    }

    #[test]
    fn cpu_is_the_busiest_window_and_the_mean() {
        let r = load(&[0.1, 0.6, 0.2, 0.3], &[1.0, 2.0, 3.0]).report(Some(20480));
        assert_eq!(r.cpu_max_cores, 0.6);
        assert_eq!(r.cpu_mean_cores, 0.3);
        assert_eq!(r.lag_samples, 3);
        assert!((r.lag_p50_ms - 2.0).abs() < 0.01 && (r.lag_max_ms - 3.0).abs() < 0.01, "{r:?}");
        assert_eq!(r.rss_peak_mib, Some(20.0));
    }

    #[test]
    fn a_short_last_window_joins_the_next_or_is_not_rated() {
        let mut g = GeneratorLoad::new();
        g.cpu(0.0, 0.0);
        g.cpu(1.0, 0.5);
        // 0.01 s later with 0.005 CPU s: 0.5 cores, but too short to rate alone.
        g.cpu(1.01, 0.6);
        assert_eq!(g.report(None).cpu_max_cores, 0.5);
        g.cpu(2.0, 0.9);
        assert_eq!(g.report(None).cpu_max_cores, 0.5, "0.4 s over 1 s");
    }

    #[test]
    fn early_wakeups_count_as_no_lag_and_peaks_are_kept() {
        let mut g = GeneratorLoad::new();
        g.lag(-0.002);
        g.sessions(3);
        g.sessions(7);
        g.sessions(2);
        let r = g.report(None);
        assert_eq!((r.lag_max_ms, r.sessions_peak, r.saturated), (0.0, 7, false));
        assert!(r.detail().contains("limit 0.8") && !r.detail().contains("saturated"));
        let r = load(&[2.0], &[]).report(None);
        assert!(r.detail().contains("measures the generator, not the database"), "{}", r.detail());
    }
}
