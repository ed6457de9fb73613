//! The CLI contract on the simulator backend, through the real binary:
//! complete run folders, byte-identical results for a seed, the `roles`
//! CSV, and one-line errors with exit status 2 for bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn plbbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plbbench")).args(args).output().expect("run plbbench")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("plbbench-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn sim_run(out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["run", "--cluster", "sim", "--quiet", "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    plbbench(&args)
}

#[test]
fn sim_run_writes_every_file_and_is_reproducible() {
    let (a, b, c) = (tmp("a"), tmp("b"), tmp("c"));
    for (dir, seed) in [(&a, "7"), (&b, "7"), (&c, "8")] {
        let out = sim_run(dir, &["--strategy", "plb", "--mix", "25:75", "--T", "1000", "--seed", seed, "--raw"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    for f in [
        "report.html",
        "summary.json",
        "phases.csv",
        "timeseries.csv",
        "replicas.csv",
        "events.csv",
        "queries.csv",
        "config.toml",
    ] {
        assert!(a.join(f).is_file(), "missing {f}");
    }
    let read = |d: &Path| std::fs::read(d.join("phases.csv")).unwrap();
    assert_eq!(read(&a), read(&b), "same seed, same phases.csv");
    assert_ne!(read(&a), read(&c), "another seed, other figures");
    let header = String::from_utf8(read(&a)).unwrap().lines().next().unwrap().to_string();
    assert_eq!(
        header,
        "phase,start_s,end_s,survivors,class,completed,goodput_qps,retention,p50_ms,p95_ms,p99_ms,inflation_p95,sessions_ended,lifetime_mean_s,lifetime_p95_s,errors,aborted_sessions,cpu_mean,cpu_cv,rejected,queued_ms_p95"
    );
    let events = std::fs::read_to_string(a.join("events.csv")).unwrap();
    assert!(events.contains("fault,r1,Down") && events.contains("detect,r1,down"), "{events}");
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(a.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["settings"]["strategy"], "plb");
    assert_eq!(summary["partial"], false);
    for d in [a, b, c] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[test]
fn existing_folder_needs_force() {
    let a = tmp("force");
    assert!(sim_run(&a, &["--T", "50", "--time-scale", "0.1"]).status.success());
    let again = sim_run(&a, &["--T", "50", "--time-scale", "0.1"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert!(sim_run(&a, &["--T", "50", "--time-scale", "0.1", "--force"]).status.success());
    std::fs::remove_dir_all(a).unwrap();
}

#[test]
fn roles_prints_the_target_for_every_survivor_count() {
    let out = plbbench(&["roles", "--reference", "2,1,2"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "survivors,premium,mixed,freemium\n5,2,1,2\n4,2,0,2\n3,2,0,1\n2,1,0,1\n1,0,1,0\n0,0,0,0\n"
    );
}

#[test]
fn bad_input_is_one_line_with_status_2() {
    let dir = tmp("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, body: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p.to_str().unwrap().to_string()
    };
    let empty = write("empty.toml", b"");
    let latin1 = write("latin1.toml", b"name = \"caf\xe9\"\n");
    let unknown_replica = write("r9.toml", b"[[event]]\nt_s = 120\nreplica = \"r9\"\naction = \"down\"\n");
    let late = write("late.toml", b"[[event]]\nt_s = 900\nreplica = \"r1\"\naction = \"down\"\n");
    let early = write("early.toml", b"[[event]]\nt_s = 5\nreplica = \"r1\"\naction = \"down\"\n");
    let rejoin = write("rejoin.toml", b"[[event]]\nt_s = 120\nreplica = \"r1\"\naction = \"rejoin\"\n");
    let bad_time = write("time.toml", b"[[event]]\nt_s = \"noon\"\nreplica = \"r1\"\naction = \"down\"\n");
    let bad_key = write(
        "key.toml",
        plbbench_default_workload().replacen("[session]", "[session]\nqueries_mean = 3", 1).as_bytes(),
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--mix", "25:70"], "--mix"),
        (vec!["--mix", "-5:105"], "negative"),
        (vec!["--mix", "abc"], "--mix"),
        (vec!["--T", "0"], "--T"),
        (vec!["--replicas", "0"], "--replicas"),
        (vec!["--reference", "2,2,2"], "--reference"),
        (vec!["--reference", "2,1"], "--reference"),
        (vec!["--split", "4:2"], "--split"),
        (vec!["--time-scale", "0"], "--time-scale"),
        (vec!["--time-scale", "-1"], "--time-scale"),
        (vec!["--cpus", "0"], "--cpus"),
        (vec!["--strategy", "magic"], "--strategy"),
        (vec!["--faults", "meteor"], "--faults"),
        (vec!["--faults", &unknown_replica], "replica"),
        (vec!["--faults", &late], "end of the run"),
        (vec!["--faults", &early], "before the end of the ramp"),
        (vec!["--faults", &rejoin], "no earlier Down"),
        (vec!["--faults", &bad_time], "line 2"),
        (vec!["--faults", &empty], "empty"),
        (vec!["--workload", &empty], "empty"),
        (vec!["--workload", &latin1], "UTF-8"),
        (vec!["--workload", "/nonexistent/w.toml"], "cannot read"),
        (vec!["--workload", &bad_key], "queries_mean"),
    ];
    for (args, want) in cases {
        let mut full = vec!["run", "--cluster", "sim", "--quiet", "--out", "/nonexistent-never-written"];
        full.extend_from_slice(&args);
        let out = plbbench(&full);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: expected `{want}` in {err}");
        assert!(!err.contains("panicked") && !err.contains("backtrace"), "{args:?}: {err}");
        let lines = err.lines().filter(|l| !l.trim().is_empty()).count();
        assert!(lines <= 2, "{args:?}: one clear line, got {err}");
    }
    assert!(!Path::new("/nonexistent-never-written").exists());
    std::fs::remove_dir_all(dir).unwrap();
}

fn plbbench_default_workload() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/analytics.toml")).unwrap()
}

/// Pins the simulator's figures at a fixed seed: any change to the router,
/// the schedule, the simulator or the metrics shows up here. After an
/// intended change, refresh with `UPDATE_GOLDEN=1 cargo test --release --test cli_sim`
/// and explain the difference in the commit message.
#[test]
fn sim_figures_are_pinned_at_a_fixed_seed() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    for (strategy, faults) in [("plb", "cascade"), ("rr", "cascade"), ("rr-split", "premium-fault")] {
        let dir = tmp(&format!("golden-{strategy}"));
        let out = sim_run(&dir, &["--strategy", strategy, "--faults", faults, "--seed", "1"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let got = std::fs::read_to_string(dir.join("phases.csv")).unwrap();
        let file = golden.join(format!("sim-{strategy}-{faults}-seed1.csv"));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&file, &got).unwrap();
        }
        let want = std::fs::read_to_string(&file).expect("golden file (UPDATE_GOLDEN=1 to create)");
        assert_eq!(got, want, "{strategy} {faults}: simulator figures changed");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
