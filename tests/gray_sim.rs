//! Gray failures on the simulator (docs/resilience.md, "Gray faults"), through the real binary: a
//! Slow replica gets its fraction of the CPU budget and its queries slow
//! down until Restore gives the budget back; a Partitioned one answers
//! nothing until Heal, and is detected like a paused one. Every gray fault
//! gets its phase and its recovery-ledger entry.

mod common;
use common::run::{cpu_mean as cpu, num, Row};
use std::path::{Path, PathBuf};
use std::process::Command;

fn run(name: &str, extra: &[&str]) -> PathBuf {
    let out = std::env::temp_dir().join(format!("plbbench-gray-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    // Not a test of run validity: `--checks warn`. The steady workload, so
    // the faulty replica's slow-down is measured against known headroom.
    let mut args = vec![
        "run",
        "--cluster",
        "sim",
        "--quiet",
        "--raw",
        "--checks",
        "warn",
        "--workload",
        "analytics",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let o = Command::new(env!("CARGO_BIN_EXE_plbbench")).args(&args).output().expect("run plbbench");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

fn rows(dir: &Path, file: &str) -> Vec<Row> {
    csv::Reader::from_path(dir.join(file)).unwrap().deserialize().map(|r| r.unwrap()).collect()
}

/// (count, mean service ms) of successful queries on `replica` started in `[from, to)`.
fn service(queries: &[Row], replica: &str, from: f64, to: f64) -> (usize, f64) {
    let ms: Vec<f64> = queries
        .iter()
        .filter(|q| q["replica"] == replica && q["ok"] == "true" && (from..to).contains(&(num(q, "start_us") / 1e6)))
        .map(|q| (num(q, "end_us") - num(q, "start_us")) / 1000.0)
        .collect();
    let mean = if ms.is_empty() { 0.0 } else { ms.iter().sum::<f64>() / ms.len() as f64 };
    (ms.len(), mean)
}

fn phases(dir: &Path) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for r in rows(dir, "phases.csv") {
        let p = (r["phase"].clone(), r["survivors"].parse().unwrap());
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

fn ledger(dir: &Path) -> Vec<serde_json::Value> {
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    s["recovery"].as_array().expect("recovery ledger").clone()
}

#[test]
fn a_slow_replica_gets_its_fraction_of_the_budget_until_restore() {
    // Round robin gives r1 the same share of sessions throughout, so its
    // CPU use before, during and after the slow window is comparable. At
    // twice the default load r1 uses about 60% of its budget unslowed.
    let dir = run("slow", &["--strategy", "rr", "--faults", "slow-replica", "--T", "2000"]);
    let reps = rows(&dir, "replicas.csv");
    let (before, during, after) =
        (cpu(&reps, "r1", 90.0, 120.0), cpu(&reps, "r1", 121.0, 210.0), cpu(&reps, "r1", 211.0, 300.0));
    assert!(during <= 0.25 + 1e-6, "r1 used {during} of its budget while slowed to 0.25");
    assert!(during > 0.2, "r1 still serves while slow: {during}");
    assert!(before > 0.4 && after > 0.4, "r1 used {before} before and {after} after the slow window");
    let other = cpu(&reps, "r2", 121.0, 210.0);
    assert!(other > 2.0 * during, "r2 used {other}, r1 {during} during the slow window");
    let q = rows(&dir, "queries.csv");
    let (b, d, a) = (service(&q, "r1", 90.0, 120.0), service(&q, "r1", 125.0, 200.0), service(&q, "r1", 240.0, 300.0));
    assert!(b.0 > 0 && d.0 > 0 && a.0 > 0, "{b:?} {d:?} {a:?}");
    assert!(d.1 > 4.0 * b.1, "r1's queries took {} ms before, {} ms while slow", b.1, d.1);
    assert!(a.1 < d.1 / 2.0, "r1's queries took {} ms after restore, {} ms while slow", a.1, d.1);
    let events = std::fs::read_to_string(dir.join("events.csv")).unwrap();
    assert!(events.contains("120.0,fault,r1,Slow 0.25") && events.contains("210.0,fault,r1,Restore"), "{events}");
    let p = phases(&dir);
    assert!(
        p.contains(&("slow1".into(), 5)) && p.contains(&("restore1".into(), 5)),
        "a slow replica is a survivor: {p:?}"
    );
    let l = ledger(&dir);
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!(
        (l[0]["action"].as_str(), l[0]["at_s"].as_f64(), l[0]["ended_s"].as_f64()),
        (Some("Slow 0.25"), Some(120.0), Some(210.0))
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_partitioned_replica_answers_nothing_until_heal() {
    let schedule = std::env::temp_dir().join(format!("plbbench-gray-{}-partition.toml", std::process::id()));
    std::fs::write(
        &schedule,
        "[[event]]\nt_s = 120\nreplica = \"r2\"\naction = \"partition\"\n[[event]]\nt_s = 180\nreplica = \"r2\"\naction = \"heal\"\n",
    )
    .unwrap();
    let dir = run("partition", &["--strategy", "rr", "--faults", schedule.to_str().unwrap()]);
    let q = rows(&dir, "queries.csv");
    assert_eq!(service(&q, "r2", 120.5, 180.0).0, 0, "r2 answered while partitioned");
    assert!(service(&q, "r2", 185.0, 300.0).0 > 0, "r2 answers again after heal");
    let reps = rows(&dir, "replicas.csv");
    assert!(cpu(&reps, "r2", 121.0, 180.0) < 1e-9, "a partitioned replica makes no progress");
    let events = std::fs::read_to_string(dir.join("events.csv")).unwrap();
    assert!(events.contains("120.0,fault,r2,Partition") && events.contains("180.0,fault,r2,Heal"), "{events}");
    let detected = |how: &str| events.lines().any(|l| l.contains(&format!(",detect,r2,{how}")));
    assert!(detected("down") && detected("up"), "the probe saw r2 go and come back: {events}");
    let p = phases(&dir);
    assert!(p.contains(&("partition1".into(), 4)) && p.contains(&("heal1".into(), 5)), "{p:?}");
    let l = ledger(&dir);
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!(
        (l[0]["action"].as_str(), l[0]["replica"].as_str(), l[0]["ended_s"].as_f64()),
        (Some("Partition"), Some("r2"), Some(180.0))
    );
    assert!(l[0]["isolate_s"].as_f64().is_some_and(|s| s < 5.0), "isolated within a few probe timeouts: {}", l[0]);
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_file(schedule);
}
