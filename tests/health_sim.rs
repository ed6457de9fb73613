//! The health state machine (`--detection suspicion`, docs/resilience.md) on the
//! simulator, through the real binary: heavy load alone isolates nothing,
//! and a paused replica walks SUSPECT -> ISOLATED -> RECOVERING -> HEALTHY
//! with every transition in events.csv, at the times the faults allow; the
//! recovery ledger counts the sessions a fault shifted and the retries it
//! created, and summary.json the run's false suspicions.

use std::path::{Path, PathBuf};
use std::process::Command;

fn run(name: &str, extra: &[&str]) -> PathBuf {
    run_as("suspicion", name, extra)
}

fn run_as(detection: &str, name: &str, extra: &[&str]) -> PathBuf {
    let out = std::env::temp_dir().join(format!("plbbench-health-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    // Not a test of run validity (heavy loads fail its time-out check): `--checks warn`.
    let mut args = vec!["run", "--cluster", "sim", "--quiet", "--checks", "warn", "--detection", detection];
    args.extend(["--out", out.to_str().unwrap()]);
    args.extend_from_slice(extra);
    let o = Command::new(env!("CARGO_BIN_EXE_plbbench")).args(&args).output().expect("run plbbench");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// `(t_s, replica, detail)` of every `health` event.
fn health_events(dir: &Path) -> Vec<(f64, String, String)> {
    let text = std::fs::read_to_string(dir.join("events.csv")).unwrap();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.splitn(4, ',').collect();
            (f[1] == "health").then(|| (f[0].parse().unwrap(), f[2].to_string(), f[3].to_string()))
        })
        .collect()
}

#[test]
fn heavy_load_without_faults_isolates_no_replica() {
    // T=5000 under 5RR overloads every replica (about 1.6x the cluster's
    // budget: baseline p95 2-5 s against a 30 s deadline) and, with
    // max_connections held at 300 instead of T + 20, fills every server, so
    // slow and refused connects abound; they may demote a replica, never
    // remove it.
    let dir = run("load", &["--strategy", "rr", "--T", "5000", "--faults", "none", "--max-connections", "300"]);
    let ev = health_events(&dir);
    assert!(
        ev.iter().any(|(_, _, d)| d.starts_with("HEALTHY->SUSPECT")),
        "the load should raise suspicion at least once: {ev:?}"
    );
    let removed: Vec<_> = ev.iter().filter(|(_, _, d)| d.contains("->ISOLATED")).collect();
    assert!(removed.is_empty(), "false removals: {removed:?}");
    // Without faults every suspicion is false, and summary.json counts them.
    let suspected = ev.iter().filter(|(_, _, d)| d.contains("->SUSPECT")).count() as u64;
    let detector = &summary(&dir)["detector"];
    assert_eq!(detector["false_suspicions"].as_u64(), Some(suspected), "{detector}");
    assert_eq!(detector["suspicions"].as_u64(), Some(suspected), "{detector}");
    assert_eq!(detector["false_removals"].as_u64(), Some(0), "{detector}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_paused_replica_is_suspected_isolated_and_recovered() {
    let dir = run("pause", &["--strategy", "plb", "--faults", "gray-pause"]);
    let r1: Vec<(f64, String)> =
        health_events(&dir).into_iter().filter(|(_, r, _)| r == "r1").map(|(t, _, d)| (t, d)).collect();
    let first =
        |prefix: &str, after: f64| r1.iter().find(|(t, d)| *t >= after && d.starts_with(prefix)).map(|(t, _)| *t);
    let isolated = first("SUSPECT->ISOLATED", 120.0).expect("isolated after the pause");
    let suspected = first("HEALTHY->SUSPECT", 120.0).expect("suspected first");
    assert!(
        suspected < isolated && isolated < 125.0,
        "suspected at {suspected}, isolated at {isolated}: three 1 s probe timeouts"
    );
    let recovering = first("ISOLATED->RECOVERING", isolated).expect("probation after the resume");
    assert!((210.0..212.0).contains(&recovering), "recovering at {recovering}, resume at 210");
    let healthy = first("RECOVERING->HEALTHY", recovering).expect("healthy after the stability window");
    assert!(
        healthy - recovering >= 10.0 && healthy - recovering < 12.0,
        "stability window 10 s: {recovering} -> {healthy}"
    );
    let events = std::fs::read_to_string(dir.join("events.csv")).unwrap();
    assert!(events.contains("r1,down (health)") && events.contains("r1,up (health)"), "router view changes logged");
    let _ = std::fs::remove_dir_all(dir);
}

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn a_quiet_run_without_faults_has_no_false_suspicions() {
    // T=600 keeps Freemium's baseline p95 near 1 s; at the default T=1000
    // it is ~15 s, and slow answers (over half the 30 s deadline) make r3
    // flap HEALTHY <-> SUSPECT some 200 times: suspicions by load, counted
    // as false (and reported so), though none removes the replica.
    let dir = run("quiet", &["--strategy", "plb", "--faults", "none", "--T", "600"]);
    let s = summary(&dir);
    assert_eq!(s["detector"]["false_suspicions"].as_u64(), Some(0), "{}", s["detector"]);
    assert_eq!(s["recovery"].as_array().map(Vec::len), Some(0));
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("False suspicions: 0</strong>"), "the report shows the count");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_down_shifts_sessions_and_creates_retries_under_either_detector() {
    for detection in ["suspicion", "probe"] {
        let dir = run_as(detection, &format!("shift-{detection}"), &["--strategy", "plb", "--faults", "premium-fault"]);
        let s = summary(&dir);
        let e = &s["recovery"][0];
        assert_eq!(e["replica"], "r1", "{e}");
        let n = |k: &str| e[k].as_u64().unwrap_or_else(|| panic!("{detection}: {k} missing in {e}"));
        let started: u64 = (0..2).map(|c| s["accounting"][c]["sessions_started"].as_u64().unwrap()).sum();
        // r1 takes a fifth of the starts or more; down for 90 s of a 300 s run.
        assert!(
            n("sessions_shifted") > 0 && n("sessions_shifted") < started / 3,
            "{detection}: {e}, {started} started"
        );
        assert!(n("retries") > 0, "the Down broke the sessions open on r1: {e}");
        let full = e["full_service_s"].as_f64().expect("back in full service within the run");
        let back = e["accepts_again_s"].as_f64().unwrap();
        if detection == "suspicion" {
            assert!((10.0..12.0).contains(&(full - back)), "full service after the 10 s probation: {e}");
        } else {
            assert!(full >= 90.0 && full <= back + 1e-9, "the probe's `up` is full service: {e}");
        }
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(html.contains(&format!("<td class=\"num\">{}</td>", n("sessions_shifted"))), "the report shows it");
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn every_fault_gets_a_recovery_ledger_entry() {
    let dir = run("ledger", &["--strategy", "plb", "--faults", "cascade"]);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let ledger = summary["recovery"].as_array().expect("recovery ledger in summary.json");
    assert_eq!(ledger.len(), 2, "two Downs in the cascade: {ledger:?}");
    for (e, (replica, at, end)) in ledger.iter().zip([("r1", 120.0, 210.0), ("r2", 150.0, 240.0)]) {
        assert_eq!(e["replica"], replica);
        assert_eq!(e["action"], "Down");
        assert_eq!(e["at_s"].as_f64(), Some(at));
        let d = |k: &str| e[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {e}"));
        assert!(d("detect_s") < 1.0 && d("isolate_s") >= d("detect_s"), "{e}");
        let back = d("accepts_again_s");
        assert!(
            back >= end - at && back <= end - at + 1.0,
            "answering again within a probe interval of the rejoin: {e}"
        );
        assert!(d("premium_p95_back_s") >= end - at, "service recovery is looked for from the rejoin on: {e}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
