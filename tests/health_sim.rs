//! The health state machine (`--detection suspicion`, issue 9) on the
//! simulator, through the real binary: heavy load alone isolates nothing,
//! and a paused replica walks SUSPECT -> ISOLATED -> RECOVERING -> HEALTHY
//! with every transition in events.csv, at the times the faults allow.

use std::path::{Path, PathBuf};
use std::process::Command;

fn run(name: &str, extra: &[&str]) -> PathBuf {
    let out = std::env::temp_dir().join(format!("plbbench-health-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut args = vec!["run", "--cluster", "sim", "--quiet", "--detection", "suspicion", "--out", out.to_str().unwrap()];
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
    // T=3000 under 5RR overloads every replica (p95 of 6-19 s against a
    // 30 s deadline), so slow answers abound; slowness may demote a
    // replica, never remove it.
    let dir = run("load", &["--strategy", "rr", "--T", "3000", "--faults", "none"]);
    let ev = health_events(&dir);
    assert!(ev.iter().any(|(_, _, d)| d.starts_with("HEALTHY->SUSPECT")), "the load should raise suspicion at least once: {ev:?}");
    let removed: Vec<_> = ev.iter().filter(|(_, _, d)| d.contains("->ISOLATED")).collect();
    assert!(removed.is_empty(), "false removals: {removed:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_paused_replica_is_suspected_isolated_and_recovered() {
    let dir = run("pause", &["--strategy", "plb", "--faults", "gray-pause"]);
    let r1: Vec<(f64, String)> = health_events(&dir).into_iter().filter(|(_, r, _)| r == "r1").map(|(t, _, d)| (t, d)).collect();
    let first = |prefix: &str, after: f64| r1.iter().find(|(t, d)| *t >= after && d.starts_with(prefix)).map(|(t, _)| *t);
    let isolated = first("SUSPECT->ISOLATED", 120.0).expect("isolated after the pause");
    let suspected = first("HEALTHY->SUSPECT", 120.0).expect("suspected first");
    assert!(suspected < isolated && isolated < 125.0, "suspected at {suspected}, isolated at {isolated}: three 1 s probe timeouts");
    let recovering = first("ISOLATED->RECOVERING", isolated).expect("probation after the resume");
    assert!((210.0..212.0).contains(&recovering), "recovering at {recovering}, resume at 210");
    let healthy = first("RECOVERING->HEALTHY", recovering).expect("healthy after the stability window");
    assert!(healthy - recovering >= 10.0 && healthy - recovering < 12.0, "stability window 10 s: {recovering} -> {healthy}");
    let events = std::fs::read_to_string(dir.join("events.csv")).unwrap();
    assert!(events.contains("r1,down (health)") && events.contains("r1,up (health)"), "router view changes logged");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn every_fault_gets_a_recovery_ledger_entry() {
    let dir = run("ledger", &["--strategy", "plb", "--faults", "cascade"]);
    let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let ledger = summary["recovery"].as_array().expect("recovery ledger in summary.json");
    assert_eq!(ledger.len(), 2, "two Downs in the cascade: {ledger:?}");
    for (e, (replica, at, end)) in ledger.iter().zip([("r1", 120.0, 210.0), ("r2", 150.0, 240.0)]) {
        assert_eq!(e["replica"], replica);
        assert_eq!(e["action"], "Down");
        assert_eq!(e["at_s"].as_f64(), Some(at));
        let d = |k: &str| e[k].as_f64().unwrap_or_else(|| panic!("{k} missing in {e}"));
        assert!(d("detect_s") < 1.0 && d("isolate_s") >= d("detect_s"), "{e}");
        let back = d("accepts_again_s");
        assert!(back >= end - at && back <= end - at + 1.0, "answering again within a probe interval of the rejoin: {e}");
        assert!(d("premium_p95_back_s") >= end - at, "service recovery is looked for from the rejoin on: {e}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
