//! `plbbench agreement` on a small grid against the real local cluster:
//! one strategy, one repeat, premium-fault at `--time-scale 0.1` (30 s).
//! It runs the simulator's experiment and the real one, and writes the
//! sim-vs-real table: one row per (phase, class) of the real side, with
//! both medians and their ratio, and the summary fractions that count them.
//! The real side is real: its run folder names the local backend and a
//! PostgreSQL version. About a minute. Needs PostgreSQL's server binaries
//! (scripts/install-postgres.sh); `PLBBENCH_SKIP_PG=1` skips.

mod common;
use common::have_postgres;
use common::run::{serial, Row, Sandbox};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn agreement_on_a_small_grid_writes_the_sim_vs_real_table() {
    if !have_postgres() {
        return;
    }
    let _one = serial();
    let sb = Sandbox::new("agreement");
    let file = |n: &str| Stdio::from(std::fs::File::create(sb.root.join(n)).unwrap());
    let mut child = Command::new(env!("CARGO_BIN_EXE_plbbench"))
        .args(["agreement", "--strategies", "plb", "--faults", "premium-fault", "--repeat", "1"])
        .args(["--time-scale", "0.1", "--checks", "warn", "--workload", "analytics", "-q", "--out"])
        .arg(sb.out())
        .env("PLBBENCH_STATE_DIR", sb.state_dir())
        .stdin(Stdio::null())
        .stdout(file("stdout.txt"))
        .stderr(file("stderr.txt"))
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if started.elapsed() > Duration::from_secs(240) {
            let _ = child.kill();
            panic!("agreement did not finish in 240 s:\n{}", sb.stderr());
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(status.success(), "agreement failed ({status}):\n{}", sb.stderr());

    let real = sb.out().join("real/runs/premium-fault-25-75-plb-r1/summary.json");
    let real: Value = serde_json::from_str(&std::fs::read_to_string(real).unwrap()).unwrap();
    assert_eq!(real["settings"]["cluster"], "local");
    assert!(real["environment"]["postgres_version"].is_string(), "{}", real["environment"]);
    assert!(sb.out().join("sim/runs/premium-fault-25-75-plb-r1/summary.json").is_file());

    let mut csv = csv::Reader::from_path(sb.out().join("agreement.csv")).unwrap();
    let rows: Vec<Row> = csv.deserialize().map(|r| r.unwrap()).collect();
    let cells: Vec<(String, String)> = rows.iter().map(|r| (r["phase"].clone(), r["class"].clone())).collect();
    let want: Vec<(String, String)> = ["baseline", "down1", "rejoin1"]
        .iter()
        .flat_map(|p| ["P", "F"].map(|c| (p.to_string(), c.to_string())))
        .collect();
    assert_eq!(cells, want);
    for r in &rows {
        let n = |c: &str| r[c].parse::<f64>().unwrap_or_else(|_| panic!("{c} in {r:?}"));
        assert!(n("real_goodput_qps") > 0.0 && n("sim_goodput_qps") > 0.0, "{r:?}");
        let ratio = n("sim_goodput_qps") / n("real_goodput_qps");
        assert!((ratio - n("goodput_ratio")).abs() < 1e-4, "{r:?}");
        // Same workload and seed on both sides: goodput is set by the
        // arrivals, not by the backend, unless the simulator is broken.
        assert!((0.5..2.0).contains(&ratio), "sim/real goodput {ratio} in {r:?}");
    }
    let file: Value = serde_json::from_str(&std::fs::read_to_string(sb.out().join("agreement.json")).unwrap()).unwrap();
    assert_eq!(file["schema_version"], 1);
    assert_eq!(file["fractions"]["goodput_cells"], 6);
    let within = file["fractions"]["goodput_within"].as_u64().unwrap();
    let md = std::fs::read_to_string(sb.out().join("agreement.md")).unwrap();
    assert!(md.contains(&format!("in {within} of 6 cells")), "{md}");
    let stdout = std::fs::read_to_string(sb.root.join("stdout.txt")).unwrap();
    assert!(stdout.starts_with("goodput: simulated within 25% of real in "), "{stdout}");
    assert!(sb.out().join("real/report.html").is_file() && sb.out().join("sim/report.html").is_file());
}
