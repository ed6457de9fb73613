//! `plbbench calibrate` against real replicas under their CPU quota: a
//! short calibration (two replicas loaded at once, 2 x 1 s per point, 20
//! connections) writes a file whose figures come from the replicas'
//! cgroups (every template's CPU per query with the range of its repeats,
//! the connection's CPU with its close apart), the simulator runs on it,
//! and the replicas are gone afterwards. About 20 s. Needs PostgreSQL's server
//! binaries (scripts/install-postgres.sh); `PLBBENCH_SKIP_PG=1` skips.

mod common;
use common::have_postgres;
use common::run::{processes_in, serial, Sandbox};
use plbbench::core::calibration::Calibration;
use std::process::Command;

#[test]
fn a_calibration_of_a_real_replica_is_a_file_the_simulator_runs_on() {
    if !have_postgres() {
        return;
    }
    let _one = serial();
    let sb = Sandbox::new("calibrate");
    std::fs::create_dir_all(sb.out()).unwrap();
    let file = sb.out().join("calibration.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_plbbench"))
        .args([
            "calibrate",
            "--replicas",
            "2",
            "--repeat",
            "2",
            "--duration",
            "1s",
            "--connections",
            "1,2",
            "--at",
            "2",
        ])
        .args(["--paced", "20", "--connects", "20", "--out"])
        .arg(&file)
        .env("PLBBENCH_STATE_DIR", sb.state_dir())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("ms of it at close"), "{err}");
    let c = Calibration::parse(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(c.cpu_budget_enforced, "the replica ran without its quota");
    assert_eq!((c.cpus, c.connect.connections), (0.3, 20));
    assert_eq!((c.replicas, c.repeats, c.connections, c.paced_load), (2, 2, 20, 0.7));
    assert!(c.postgres_version.starts_with("PostgreSQL "), "{}", c.postgres_version);
    assert!(c.connect.cpu_ms > 1.0 && c.connect.cpu_ms < 200.0, "connection CPU {} ms", c.connect.cpu_ms);
    assert!(
        c.connect.close_cpu_ms > 0.0 && c.connect.close_cpu_ms < c.connect.cpu_ms,
        "close {} ms of {} ms",
        c.connect.close_cpu_ms,
        c.connect.cpu_ms
    );
    // An idle set-up waits for its CPU and more (the client's SCRAM, round
    // trips), and not for seconds. The set-up CPU is the replica's cgroup
    // over the whole connect loop, so at 20 connections the replica's own
    // background work (autovacuum after the load) can read it up to about
    // 1.5x high: the wall must be of its order, not above it (a CI run of
    // 2026-12-04 read 7.05 ms of wall against 8.68 ms of CPU).
    let set_up = c.connect.cpu_ms - c.connect.close_cpu_ms;
    assert!(
        c.connect.idle_wall_ms > 0.5 * set_up && c.connect.idle_wall_ms < 1000.0,
        "idle set-up {} ms against {set_up} ms of CPU",
        c.connect.idle_wall_ms
    );
    assert!(err.contains("on an idle replica"), "{err}");
    assert_eq!(c.template.len(), 2);
    for t in &c.template {
        assert!(t.cpu_ms > 0.1 && t.cpu_ms < 100.0, "{}: {} ms", t.name, t.cpu_ms);
        assert_eq!(t.at.iter().map(|p| p.connections).collect::<Vec<_>>(), [1, 2, 20], "{}", t.name);
        // The paced point is the workload's figure, near the operating point.
        let paced = &t.at[2];
        assert_eq!(t.cpu_ms, paced.cpu_ms, "{}", t.name);
        assert!(paced.rate_qps.is_some() && t.at[..2].iter().all(|p| p.rate_qps.is_none()), "{}", t.name);
        assert!(paced.cpu_fraction > 0.4 && paced.cpu_fraction < 1.0, "{}: paced at {paced:?}", t.name);
        for p in &t.at[..2] {
            assert!(p.cpu_ms_min <= p.cpu_ms && p.cpu_ms <= p.cpu_ms_max && p.cpu_ms_min > 0.0, "{}: {p:?}", t.name);
            // Both replicas were loaded: their CPU together is over one quota.
            assert!(p.cpu_fraction > 0.5 && p.cpu_fraction < 1.2, "{}: {p:?}", t.name);
        }
    }
    let state = sb.state_dir().with_file_name("calibrate");
    assert!(processes_in(&state).is_empty(), "the calibration replica outlived the command");

    let run = sb.out().join("sim");
    let out = Command::new(env!("CARGO_BIN_EXE_plbbench"))
        .args([
            "run",
            "--workload",
            "analytics",
            "--cluster",
            "sim",
            "--T",
            "100",
            "--faults",
            "none",
            "--time-scale",
            "0.1",
            "-q",
            "--calibration",
        ])
        .arg(&file)
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = std::fs::read_to_string(run.join("summary.json")).unwrap();
    assert!(summary.contains("\"cluster\": \"sim\"") || summary.contains("\"cluster\":\"sim\""), "{summary}");
}
