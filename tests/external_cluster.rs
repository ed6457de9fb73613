//! Run tier, external backend (docs/backends.md, "External clusters"): a
//! cluster that plbbench did not start for the run. The test starts one
//! itself (`plbbench cluster up --backend local`), then drives it as an
//! external cluster through a cluster file whose fault commands really stop
//! and start its servers (`plbbench cluster fault down r1`, run as argv)
//! and whose CPU sampler is `plbbench cluster cpu r1`. A time-scaled
//! `cascade` run must write a complete, consistent folder, record each
//! command's exit status and output in events.csv, see the Downs and route
//! around them; a run without a sampler must say CPU is unavailable; a
//! replica without the dataset is refused. Needs PostgreSQL (see
//! tests/common); about 1.5 minutes.

mod common;
use common::have_postgres;
use common::run::*;
use std::process::{Command, Output};

/// Takes the test's local cluster down however the test ends.
struct Up<'a>(&'a Sandbox);

impl Up<'_> {
    fn plbbench(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_plbbench"))
            .args(args)
            .env("PLBBENCH_STATE_DIR", self.0.state_dir())
            .output()
            .unwrap()
    }
}

impl Drop for Up<'_> {
    fn drop(&mut self) {
        let out = self.plbbench(&["cluster", "down"]);
        if !out.status.success() {
            eprintln!("cluster down: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}

fn cluster_file(dsns: &[String], sampler: bool) -> String {
    let bin = env!("CARGO_BIN_EXE_plbbench");
    let list = |v: &[&str]| format!("[{}]", v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", "));
    let dsns: Vec<&str> = dsns.iter().map(String::as_str).collect();
    let mut text = format!("dsns = {}\n[commands]\n", list(&dsns));
    for action in ["down", "rejoin", "pause", "resume"] {
        text += &format!("{action} = {}\n", list(&[bin, "cluster", "fault", action, "{replica}"]));
    }
    if sampler {
        text += &format!("cpu = {}\n", list(&[bin, "cluster", "cpu", "{replica}"]));
    }
    text
}

#[test]
fn cascade_on_an_external_cluster_with_real_fault_commands() {
    if !have_postgres() {
        return;
    }
    let _one = serial();
    let sb = Sandbox::new("external");
    let up = Up(&sb);
    let out = up.plbbench(&["cluster", "up", "--backend", "local"]);
    assert!(out.status.success(), "cluster up: {}", String::from_utf8_lossy(&out.stderr));
    let dsns: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect();
    assert_eq!(dsns.len(), 5);

    // A replica without the dataset is refused (exit 1), naming it.
    let wrong = dsns[0].replace("dbname=plbbench", "dbname=postgres");
    let bad =
        up.plbbench(&["run", "--cluster", "external", "--replicas", "1", "--dsn", &wrong, "--faults", "none", "-q"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(1), "{err}");
    assert!(err.contains("dataset") && err.contains("r1"), "{err}");
    assert!(
        !err.contains(dsns[0].split("password=").nth(1).unwrap().split(' ').next().unwrap()),
        "password in an error"
    );
    let none = up.plbbench(&["run", "--cluster", "external", "--faults", "none", "-q"]);
    assert_eq!(none.status.code(), Some(2), "{}", String::from_utf8_lossy(&none.stderr));

    let file = sb.root.join("cluster.toml");
    std::fs::write(&file, cluster_file(&dsns, true)).unwrap();
    let mut run = Running::start_on(
        &sb,
        "external",
        "cascade",
        &["--time-scale", "0.1", "--raw", "--cluster-file", file.to_str().unwrap()],
    );
    let st = run.finish(RUN_LIMIT);
    assert!(st.success(), "run failed ({st}):\n{}", sb.stderr());
    let f = Folder::read(&sb.out());
    assert_consistent(&f);
    assert_eq!(f.summary["settings"]["cluster"], "external");
    for (replica, down_at, rejoin_at) in [("r1", 12.0, 21.0), ("r2", 15.0, 24.0)] {
        let faults = f.events_of("fault", replica);
        assert_eq!(faults.len(), 2, "{replica}: {faults:?}");
        assert!(faults[0].1.starts_with("Down (exit 0: "), "{replica}: {faults:?}");
        assert!(
            faults[1].1.starts_with("Rejoin (exit 0: ") && faults[1].1.contains("applied"),
            "{replica}: {faults:?}"
        );
        let down = f.events_of("detect", replica).into_iter().find(|e| e.1.starts_with("down"));
        let down = down.unwrap_or_else(|| panic!("{replica}'s Down was never detected: the command did not stop it"));
        assert!(down.0 >= down_at - 0.01 && down.0 < down_at + 3.0, "{replica} detected down at {}", down.0);
        let served = f
            .queries
            .iter()
            .filter(|q| q.replica == replica && q.ok && q.start > down.0 + 0.1 && q.end < rejoin_at)
            .count();
        assert_eq!(served, 0, "{replica} served queries while its server was stopped");
        assert!(
            f.queries.iter().any(|q| q.replica == replica && q.ok && q.start > rejoin_at),
            "{replica} never served after Rejoin"
        );
    }
    let cpu: Vec<f64> = f.replicas.iter().filter_map(|r| r["cpu_fraction"].parse().ok()).collect();
    assert!(cpu.iter().any(|&u| u > 0.05), "the sampler command gave no CPU");
    // Every server runs again (busy, throttled replicas may take a moment
    // to answer the 1 s health check after the run's load).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let status = String::from_utf8_lossy(&up.plbbench(&["cluster", "status"]).stdout).into_owned();
        if status.matches(" healthy ").count() == 5 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not every replica came back:\n{status}");
        std::thread::sleep(std::time::Duration::from_secs(1));
    }

    // Without a sampler: DSNs on the command line, CPU reported unavailable.
    let out2 = sb.root.join("out2");
    // Not a test of run validity (its 6 s run fails the phase-length check,
    // and CPU is unavailable): `--checks warn`.
    let mut args = vec![
        "run",
        "--checks",
        "warn",
        "--workload",
        "analytics",
        "--cluster",
        "external",
        "--faults",
        "none",
        "--time-scale",
        "0.02",
        "-q",
        "--T",
        "100",
        "--out",
        out2.to_str().unwrap(),
    ];
    for d in &dsns {
        args.extend(["--dsn", d.as_str()]);
    }
    let quick = up.plbbench(&args);
    assert!(quick.status.success(), "{}", String::from_utf8_lossy(&quick.stderr));
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out2.join("summary.json")).unwrap()).unwrap();
    let v = s["verdicts"].as_array().unwrap().iter().find(|v| v["name"] == "replica cpu").expect("cpu verdict");
    assert!(v["ok"] == false && v["detail"].as_str().unwrap().contains("unavailable"), "{v}");
}
