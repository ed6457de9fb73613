//! The health state machine (`--detection suspicion`, docs/resilience.md) on a real
//! local cluster: heavy load alone removes no replica, and a SIGSTOPped
//! replica walks SUSPECT -> ISOLATED -> RECOVERING -> HEALTHY with every
//! transition in events.csv, at times the faults allow, with the recovery
//! policy's probation logged too; and a replica slowed to a twentieth of
//! its CPU budget is demoted (SUSPECT -> DEGRADED) while it answers, never
//! removed.
//!
//! Needs PostgreSQL (see tests/common); about 2.5 minutes.

mod common;
use common::have_postgres;
use common::run::*;

/// `(t_s, replica, detail)` of every `health` event.
fn health(f: &Folder) -> Vec<(f64, String, String)> {
    f.events
        .iter()
        .filter(|e| e["kind"] == "health")
        .map(|e| (num(e, "t_s"), e["replica"].clone(), e["detail"].clone()))
        .collect()
}

fn run(sb: &Sandbox, faults: &str, args: &[&str]) -> Folder {
    let mut all = vec!["--detection", "suspicion", "--raw"];
    all.extend_from_slice(args);
    let mut run = Running::start(sb, faults, &all);
    let status = run.finish(RUN_LIMIT);
    assert!(status.success(), "run failed ({status}):\n{}", sb.stderr());
    let f = Folder::read(&sb.out());
    assert_consistent(&f);
    f
}

#[test]
fn heavy_load_without_faults_isolates_no_replica() {
    if !have_postgres() {
        return;
    }
    let _one = serial();
    let sb = Sandbox::new("health-load");
    // 5x the default T under plb, about 1.6x the cluster's CPU budget:
    // the replicas are saturated and Freemium's waits run long.
    let f = run(&sb, "none", &["--T", "5000", "--time-scale", "0.1"]);
    // Heavy: Freemium's p95 in the baseline is over 25 times a Freemium
    // query's time alone (3.3 ms of CPU at 0.3 cores: 11 ms).
    let f_base = f.phases.iter().find(|p| p["phase"] == "baseline" && p["class"] == "F").expect("baseline F");
    let p95 = num(f_base, "p95_ms");
    assert!(p95 > 300.0, "the load should queue Freemium: baseline p95 {p95} ms");
    let removed: Vec<_> = health(&f).into_iter().filter(|(_, _, d)| d.contains("->ISOLATED")).collect();
    assert!(removed.is_empty(), "false removals under load: {removed:?}");
    assert!(
        f.events_of("detect", "r1").is_empty() && f.events.iter().all(|e| e["kind"] != "detect"),
        "no replica left the router's view"
    );
    for r in ["r1", "r2", "r3", "r4", "r5"] {
        assert!(f.queries.iter().any(|q| q.replica == r && q.start > 20.0), "{r} served queries to the end");
    }
}

#[test]
fn a_paused_replica_is_suspected_isolated_and_recovered_on_probation() {
    if !have_postgres() {
        return;
    }
    let _one = serial();
    let sb = Sandbox::new("health-pause");
    // gray-pause at 0.15: SIGSTOP r1 at 18 s, SIGCONT at 31.5 s, run 45 s;
    // the stability window (10 s) scales to 1.5 s.
    let f = run(&sb, "gray-pause", &["--recovery", "probation", "--time-scale", "0.15"]);
    let (pause, resume) = (18.0, 31.5);
    let r1: Vec<(f64, String)> = health(&f).into_iter().filter(|(_, r, _)| r == "r1").map(|(t, _, d)| (t, d)).collect();
    let first =
        |prefix: &str, after: f64| r1.iter().find(|(t, d)| *t >= after && d.starts_with(prefix)).map(|(t, _)| *t);
    let suspected = first("HEALTHY->SUSPECT", pause).unwrap_or_else(|| panic!("never suspected: {r1:?}"));
    let isolated = first("SUSPECT->ISOLATED", suspected).unwrap_or_else(|| panic!("never isolated: {r1:?}"));
    assert!(isolated < resume, "isolated at {isolated}, before the resume at {resume}: {r1:?}");
    assert!(r1.iter().all(|(t, _)| *t >= pause), "nothing suspected r1 before its pause: {r1:?}");
    let recovering =
        first("ISOLATED->RECOVERING", resume).unwrap_or_else(|| panic!("no probation after the resume: {r1:?}"));
    assert!(recovering < resume + 5.0, "answering again {} s after the resume", recovering - resume);
    let healthy = first("RECOVERING->HEALTHY", recovering).unwrap_or_else(|| panic!("never healthy again: {r1:?}"));
    assert!(healthy - recovering >= 1.5 - 1e-6, "the stability window (1.5 s) passed first: {recovering} -> {healthy}");
    // The router followed: removed at the isolation, back at the probation,
    // which the recovery policy logged; and no query started on r1 while it
    // was isolated.
    let detect = f.events_of("detect", "r1");
    assert!(detect.iter().any(|(t, d)| d == "down (health)" && (*t - isolated).abs() < 1e-3), "{detect:?}");
    assert!(detect.iter().any(|(t, d)| d == "up (health)" && (*t - recovering).abs() < 1e-3), "{detect:?}");
    let probation = f.events_of("recovery", "r1");
    assert!(
        probation.iter().any(|(t, d)| d.starts_with("probation") && (*t - recovering).abs() < 1e-3),
        "{probation:?}"
    );
    let ledger = f.summary["recovery"].as_array().expect("recovery ledger");
    let entry = ledger.iter().find(|e| e["replica"] == "r1").expect("a ledger entry for r1");
    let isolate_s = entry["isolate_s"].as_f64().expect("isolate_s");
    assert!(
        (isolate_s - (isolated - pause)).abs() < 0.01,
        "ledger isolate_s {isolate_s} vs events {}",
        isolated - pause
    );
}

#[test]
fn a_slow_replica_is_demoted_not_removed() {
    if !have_postgres() {
        return;
    }
    let _one = serial();
    let sb = Sandbox::new("health-slow");
    // The default workload with a stated deadline budget of 600 ms per
    // query (slow = over half of it, 300 ms). A Premium query costs 6 ms of
    // CPU: 20 ms on r1's 0.3 cores, 400 ms alone on a twentieth of them,
    // seconds once a few sessions share it.
    let workload = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/workloads/analytics.toml")).unwrap();
    let workload_file = sb.root.join("budget.toml");
    std::fs::write(&workload_file, format!("{workload}\n[health]\nbudget_ms = 600\n")).unwrap();
    let faults = sb.root.join("slow.toml");
    std::fs::write(
        &faults,
        "[[event]]\nt_s = 120\nreplica = \"r1\"\naction = \"slow\"\nfraction = 0.05\n\
         [[event]]\nt_s = 210\nreplica = \"r1\"\naction = \"restore\"\n",
    )
    .unwrap();
    // Time scale 0.2: an 18 s slow window (13.5 s at 0.15 once ended 60 ms
    // before the fifth slow answer in a row on a busy machine). Freemium
    // borrowing `surplus`: r1 carries Premium's sessions alone, the load
    // this test was sized for; under the default `pressure` the Freemium
    // guests pinned on r1 before the slow-down triple its CPU demand, and a
    // replica at a twentieth of its quota then times out in a row and is
    // rightly removed (docs/paper.md, the pressure rule).
    let args = ["--workload", workload_file.to_str().unwrap(), "--time-scale", "0.2", "--freemium-borrow", "surplus"];
    let f = run(&sb, faults.to_str().unwrap(), &args);
    let (slow, restore) = (24.0, 42.0);
    let r1: Vec<(f64, String)> = health(&f).into_iter().filter(|(_, r, _)| r == "r1").map(|(t, _, d)| (t, d)).collect();
    let degraded = r1
        .iter()
        .find(|(t, d)| *t >= slow && d.starts_with("SUSPECT->DEGRADED"))
        .map(|(t, _)| *t)
        .unwrap_or_else(|| panic!("r1 was never demoted while slow: {r1:?}"));
    assert!(degraded < restore, "demoted at {degraded}, before the restore at {restore}");
    assert!(r1.iter().all(|(_, d)| !d.contains("->ISOLATED")), "a slow replica that answers is never removed: {r1:?}");
    assert!(
        f.events.iter().all(|e| !(e["kind"] == "detect" && e["replica"] == "r1")),
        "r1 stayed in the router's view"
    );
    let ledger = f.summary["recovery"].as_array().expect("recovery ledger");
    let entry = ledger.iter().find(|e| e["replica"] == "r1").expect("a ledger entry for the Slow");
    assert!(entry["detect_s"].as_f64().is_some_and(|d| d < restore - slow), "detected within the slow window: {entry}");
    assert!(entry["isolate_s"].is_null(), "never isolated: {entry}");
}
