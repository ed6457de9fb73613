//! `--admission modes` on the simulator, through the real binary (docs/resilience.md):
//! with thresholds low enough to reach Survival, Premium is held to its
//! whole per-replica limit and never rejected, summary.json says how long
//! each mode lasted, the books balance (the run exits 0 only if they do),
//! and a bad `[degradation]` value is refused with exit status 2. The
//! experiment axis `--admission none,modes` yields both cells. Under every
//! strategy, in the saturated default regime and beyond, every mode is
//! left once its signals clear (issue 64).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn plbbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plbbench")).args(args).args(checks_warn(args)).output().expect("run plbbench")
}

/// `--checks warn` for a run or an experiment that names no `--checks`:
/// these tests are not about run validity, and their short (time-scaled)
/// runs fail the phase-length check.
fn checks_warn(args: &[&str]) -> &'static [&'static str] {
    match args.first() {
        Some(&"run") | Some(&"experiment") if !args.contains(&"--checks") => &["--checks", "warn"],
        _ => &[],
    }
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("plbbench-adm-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn workload(dir: &Path, section: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let base = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/analytics.toml")).unwrap();
    let path = dir.join("w.toml");
    std::fs::write(&path, format!("{base}\n[degradation]\n{section}\n")).unwrap();
    path
}

fn csv(dir: &Path, name: &str) -> Vec<std::collections::HashMap<String, String>> {
    let mut r = csv::Reader::from_path(dir.join(name)).unwrap();
    let h = r.headers().unwrap().clone();
    r.records()
        .map(|x| h.iter().zip(x.unwrap().iter()).map(|(a, b)| (a.to_string(), b.to_string())).collect())
        .collect()
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

/// The most sessions of `class` ("p" or "f") any replica held in a second.
fn most(dir: &Path, class: &str) -> u32 {
    csv(dir, "replicas.csv").iter().map(|r| r[&format!("active_{class}")].parse::<u32>().unwrap()).max().unwrap()
}

#[test]
fn survival_holds_premium_to_its_whole_limit_and_never_rejects_it() {
    let dir = tmp("survival");
    let w = workload(
        &dir,
        "cpu_pct = [3.0, 6.0, 9.0]\nmin_mode_duration_s = 10.0\nreplica_sessions = 20\nqueue_deadline_ms = 2000",
    );
    let run = |out: &Path, admission: &str| {
        let o = plbbench(&[
            "run",
            "--cluster",
            "sim",
            "-q",
            "--faults",
            "cascade",
            "--admission",
            admission,
            "--workload",
            w.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let out = dir.join("run");
    run(&out, "modes");
    let events = csv(&out, "events.csv");
    assert!(
        events.iter().any(|e| e["kind"] == "mode" && e["detail"].ends_with("->survival")),
        "never reached Survival"
    );
    // Premium never holds more than its whole limit of 20 sessions on a
    // replica (without admission a replica holds ~37 here), in any mode.
    let p = most(&out, "p");
    assert!(p <= 20 && p > 0, "{p} Premium sessions on one replica");
    let rejected = |class: &str| {
        csv(&out, "phases.csv")
            .iter()
            .filter(|r| r["class"] == class)
            .map(|r| r["rejected"].parse::<u64>().unwrap())
            .sum::<u64>()
    };
    assert_eq!(rejected("P"), 0, "the top class is never rejected while the lower one is served");
    let s = summary(&out);
    assert_eq!(
        (s["settings"]["strategy"].as_str(), s["settings"]["admission"].as_str()),
        (Some("plb+modes"), Some("modes"))
    );
    assert_eq!(s["schema_version"], 3);
    let time: f64 = s["modes"]["time_in_mode_s"].as_array().unwrap().iter().map(|m| m[1].as_f64().unwrap()).sum();
    assert!((time - 300.0).abs() < 0.5, "the modes' times add up to the run: {time}");
    assert!(s["modes"]["time_in_mode_s"][3][1].as_f64().unwrap() > 0.0, "Survival lasted");
    assert!(s["modes"]["books"]["longest_clear_s"].as_f64().is_some());
    let reasons: u64 =
        s["accounting"][1]["rejections"].as_array().unwrap().iter().map(|r| r[1].as_u64().unwrap()).sum();
    assert_eq!(reasons, rejected("F"));
    // Same run without admission: no limit, no modes section.
    let none = dir.join("none");
    run(&none, "none");
    assert!(most(&none, "p") > 20, "the limit above came from admission: {}", most(&none, "p"));
    assert!(summary(&none).get("modes").is_none());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_degradation_values_exit_2_naming_the_field() {
    let dir = tmp("bad");
    let w = workload(&dir, "queue = [500.0, 100.0, 1000.0]");
    let o = plbbench(&[
        "run",
        "--cluster",
        "sim",
        "-q",
        "--admission",
        "modes",
        "--workload",
        w.to_str().unwrap(),
        "--out",
        dir.join("x").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("degradation.queue") && err.trim().lines().count() == 1, "{err}");
    let o = plbbench(&["run", "--cluster", "sim", "-q", "--admission", "sometimes"]);
    assert_eq!(o.status.code(), Some(2));
    let o = plbbench(&["run", "--cluster", "sim", "-q", "--metrics-addr", "127.0.0.1:1"]);
    assert_eq!(o.status.code(), Some(2));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn experiment_takes_admission_as_an_axis() {
    let dir = tmp("exp");
    let o = plbbench(&[
        "experiment",
        "--cluster",
        "sim",
        "-q",
        "--strategies",
        "plb",
        "--admission",
        "none,modes",
        "--mixes",
        "25:75",
        "--faults",
        "cascade",
        "--repeat",
        "1",
        "--time-scale",
        "0.2",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let e: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("experiment.json")).unwrap()).unwrap();
    assert_eq!(e["strategies"], serde_json::json!(["plb", "plb+modes"]));
    assert!(dir.join("runs/cascade-25-75-plb-r1").is_dir() && dir.join("runs/cascade-25-75-plb+modes-r1").is_dir());
    let o = plbbench(&[
        "experiment",
        "--cluster",
        "sim",
        "-q",
        "--admission",
        "none,none",
        "--out",
        dir.join("y").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    std::fs::remove_dir_all(dir).unwrap();
}

/// Admission modes shed load without shutting the service (design.md §4,
/// revised 2026-12-06) and are left once their signals clear (revised
/// 2026-12-07): on the default `paper` workload under every strategy, and
/// on `paper-closed` and `analytics` under PLB, cascade at T=1000 and
/// T=3000 (6x the clients the budget serves), 25:75 and 50:50, every
/// class completes queries in every phase, and no degraded mode lasts
/// longer than its minimum time (30 s) and a sample's second with every
/// signal clear (summary.json `modes.books.longest_clear_s`): a run that
/// ends degraded ends so because a signal still holds it.
#[test]
fn modes_shed_without_shutting_the_service_and_are_left_once_their_signals_clear() {
    let mut cases = Vec::new();
    for strategy in ["plb", "rr-split", "rr", "lc"] {
        cases.push(("paper", strategy));
    }
    cases.extend([("paper-closed", "plb"), ("analytics", "plb")]);
    for (workload, strategy) in cases {
        for t in ["1000", "3000"] {
            for mix in ["25:75", "50:50"] {
                let case = format!("{workload} {strategy} T={t} {mix}");
                let out = tmp(&format!("shed-{workload}-{strategy}-{t}-{}", mix.replace(':', "-")));
                let o = plbbench(&[
                    "run",
                    "--cluster",
                    "sim",
                    "-q",
                    "--workload",
                    workload,
                    "--strategy",
                    strategy,
                    "--admission",
                    "modes",
                    "--faults",
                    "cascade",
                    "--mix",
                    mix,
                    "--T",
                    t,
                    "--out",
                    out.to_str().unwrap(),
                ]);
                assert!(o.status.success(), "{case}: {}", String::from_utf8_lossy(&o.stderr));
                for r in csv(&out, "phases.csv") {
                    let done: u64 = r["completed"].parse().unwrap();
                    assert!(done > 0, "{case}: {} completed nothing in {}", r["class"], r["phase"]);
                }
                let s = summary(&out);
                let clear = s["modes"]["books"]["longest_clear_s"].as_f64().unwrap();
                assert!(clear <= 31.0, "{case}: a degraded mode outlived its signals by {clear} s");
                std::fs::remove_dir_all(out).unwrap();
            }
        }
    }
}
