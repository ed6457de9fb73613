//! Property tests of the simulator as a whole, through the binary (design.md
//! §4, revised 2026-12-06: checks hold in every regime, and the simulator
//! always advances). Over random configurations (T, `--cpus`, mix,
//! strategy, admission, detection, workload, faults, time scale):
//! - every run ends, in time, with exit 0 or 1 (never the simulator's
//!   loop error: its clock always advances);
//! - no run in which a class is starved passes every check: a starved class
//!   is read from timeseries.csv alone, independently of the check's code,
//!   as 31 seconds in a row or more in which it had sessions open and
//!   completed no query (the progress check's window is at most 30 s
//!   unless the workload thinks for longer, which neither built-in does);
//! - no run in which a login waited past the login-wait check's 120 s
//!   after the warm-up passes every check: the wait is read from
//!   timeseries.csv's `login_oldest_ms`, the per-second series, not from
//!   the phase rows the check reads.

use proptest::prelude::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The longest run of seconds in which `class` had sessions open and
/// completed nothing, from timeseries.csv.
fn longest_starved(dir: &Path, class: &str) -> u32 {
    let mut r = csv::Reader::from_path(dir.join("timeseries.csv")).unwrap();
    let h = r.headers().unwrap().clone();
    let col = |name: &str| h.iter().position(|c| c == name).unwrap();
    let (c, done, active) = (col("class"), col("completed"), col("active_sessions"));
    let (mut best, mut run) = (0, 0);
    for rec in r.records() {
        let rec = rec.unwrap();
        if &rec[c] != class {
            continue;
        }
        let starving = rec[done].parse::<u64>().unwrap() == 0 && rec[active].parse::<u64>().unwrap() > 0;
        run = if starving { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

/// The longest a login of either class had waited at any sample after the
/// warm-up, ms, from timeseries.csv (the second ending at `t_s + 1`).
fn oldest_login_after_warmup(dir: &Path) -> f64 {
    let phases = csv::Reader::from_path(dir.join("phases.csv")).unwrap().into_records().next().unwrap().unwrap();
    let warm_end: f64 = phases[2].parse().unwrap();
    let mut r = csv::Reader::from_path(dir.join("timeseries.csv")).unwrap();
    let h = r.headers().unwrap().clone();
    let col = |name: &str| h.iter().position(|c| c == name).unwrap();
    let (t, oldest) = (col("t_s"), col("login_oldest_ms"));
    r.records()
        .map(|rec| rec.unwrap())
        .filter(|rec| rec[t].parse::<f64>().unwrap() >= warm_end)
        .filter_map(|rec| rec[oldest].parse::<f64>().ok())
        .fold(0.0, f64::max)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_run_ends_and_no_starved_run_passes(
        t in prop::sample::select(vec![20u32, 200, 1000, 3000]),
        cpus in prop::sample::select(vec!["0.02", "0.05", "0.3", "1"]),
        mix in prop::sample::select(vec!["25:75", "50:50", "90:10"]),
        strategy in prop::sample::select(vec!["plb", "rr-split", "rr", "lc"]),
        admission in prop::sample::select(vec!["none", "modes"]),
        detection in prop::sample::select(vec!["probe", "oracle", "suspicion"]),
        workload in prop::sample::select(vec!["paper", "analytics"]),
        faults in prop::sample::select(vec!["none", "premium-fault", "cascade"]),
        time_scale in prop::sample::select(vec!["0.3", "1"]),
        seed in 1u32..1000,
    ) {
        let dir = std::env::temp_dir().join(format!("plbbench-props-{}-{seed}-{t}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let args = [
            "run", "--cluster", "sim", "-q", "--T", &t.to_string(), "--cpus", cpus, "--mix", mix, "--strategy",
            strategy, "--admission", admission, "--detection", detection, "--workload", workload, "--faults", faults,
            "--time-scale", time_scale, "--seed", &seed.to_string(), "--out", dir.to_str().unwrap(),
        ];
        let began = Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_plbbench"))
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if began.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                panic!("{args:?} did not end within 120 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        prop_assert!(matches!(status.code(), Some(0) | Some(1)), "{:?}: {}", args, err);
        prop_assert!(!err.contains("simulator looped"), "{:?}: {}", args, err);
        let starved = ["P", "F"].map(|c| longest_starved(&dir, c));
        if starved.iter().any(|&s| s >= 31) {
            prop_assert_eq!(status.code(), Some(1), "{:?}: starved {:?} s yet every check passed", args, starved);
            prop_assert!(err.contains("check failed: progress: "), "{:?}: {}", args, err);
        }
        let oldest = oldest_login_after_warmup(&dir);
        if oldest > 120_000.0 {
            prop_assert_eq!(status.code(), Some(1), "{:?}: a login waited {} ms yet every check passed", args, oldest);
            prop_assert!(err.contains("check failed: login wait: "), "{:?}: {}", args, err);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
