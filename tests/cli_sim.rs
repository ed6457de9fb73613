//! The CLI contract on the simulator backend, through the real binary:
//! complete run folders, byte-identical results for a seed, the `roles`
//! CSV, one-line errors with exit status 2 for bad input, and the run
//! validity checks: an overloaded run (or one whose phases are shorter than
//! a session) writes its folder and exits 1 naming each failed check, on
//! stderr, in summary.json and at the top of report.html; `--checks warn`
//! makes the same run exit 0 with warnings; a healthy run passes them all.

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
        "phase,start_s,end_s,survivors,class,completed,goodput_qps,retention,p50_ms,p95_ms,p99_ms,inflation_p95,sessions_ended,lifetime_mean_s,lifetime_p95_s,errors,aborted_sessions,cpu_mean,cpu_cv,rejected,queued_ms_p95,login_p50_ms,login_p95_ms,login_p99_ms,login_max_ms,logins_waiting,rejected_full"
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

/// `run --format json`: one JSON object on stdout naming the folder, its
/// report and the failed checks, with the whole summary.json (versioned);
/// the text table is not printed.
#[test]
fn format_json_prints_one_object_for_scripts() {
    let dir = tmp("json");
    let out = sim_run(&dir, &["--T", "200", "--faults", "cascade", "--time-scale", "0.2", "--format", "json"]);
    assert_eq!(out.status.code(), Some(1), "time-scaled phases fail the phase-length check: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    assert_eq!(v["out"], dir.to_str().unwrap());
    assert_eq!(v["report"], dir.join("report.html").to_str().unwrap());
    assert_eq!(v["summary"], summary_of(&dir), "the summary is summary.json's");
    assert_eq!(v["summary"]["schema_version"], 3);
    let failed: Vec<&str> = v["failed_checks"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert!(failed.contains(&"phase length"), "{failed:?}");
    assert!(!text(&out.stdout).contains("goodput_qps  retention"), "no text table");
}

/// `--stream FILE`: a `run` line, then one line per second of the run whose
/// completed queries sum to phases.csv's totals (the same rule decides which
/// queries count), with every replica's state at the second's end.
#[test]
fn stream_writes_a_line_per_second_that_sums_to_the_totals() {
    let dir = tmp("stream");
    let file = std::env::temp_dir().join(format!("plbbench-cli-stream-{}.ndjson", std::process::id()));
    let out = sim_run(
        &dir,
        &["--T", "200", "--faults", "cascade", "--duration", "60s", "--checks", "warn", "--stream"]
            .into_iter()
            .chain([file.to_str().unwrap()])
            .collect::<Vec<_>>(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines[0]["type"], "run");
    assert_eq!(lines[0]["strategy"], "plb");
    assert_eq!(lines[0]["schema_version"], 1);
    let seconds = &lines[1..];
    assert_eq!(seconds.len(), 60, "one line per second of a 60 s run");
    for (i, l) in seconds.iter().enumerate() {
        assert_eq!((l["type"].as_str(), l["t_s"].as_u64()), (Some("second"), Some(i as u64)));
        assert_eq!(l["replicas"].as_array().unwrap().len(), 5, "second {i}");
    }
    let down = |l: &serde_json::Value| l["replicas"].as_array().unwrap().iter().filter(|r| r["up"] == false).count();
    assert_eq!(down(&seconds[5]), 0);
    assert_eq!(down(&seconds[35]), 2, "the cascade, time-scaled: r1 down 24-42 s, r2 30-48 s");
    assert_eq!(down(&seconds[59]), 0);
    let phases: Vec<Row> = csv_rows(&dir.join("phases.csv"));
    for class in ["P", "F"] {
        let streamed: u64 = seconds
            .iter()
            .flat_map(|l| l["classes"].as_array().unwrap().iter().filter(|c| c["class"] == class))
            .map(|c| c["completed"].as_u64().unwrap())
            .sum();
        let total: u64 =
            phases.iter().filter(|r| r["class"] == class).map(|r| r["completed"].parse::<u64>().unwrap()).sum();
        assert!(total > 0);
        assert_eq!(streamed, total, "class {class}");
    }
    let bad = plbbench(&[
        "run",
        "--cluster",
        "sim",
        "--stream",
        "/nonexistent/x.ndjson",
        "--out",
        tmp("stream-bad").to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("--stream"), "{}", text(&bad.stderr));
    std::fs::remove_file(file).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

/// `--duration` scales the whole timeline to the asked length (k6's
/// spelling); zero and a --time-scale beside it are refused.
#[test]
fn duration_sets_the_time_scale() {
    let dir = tmp("duration");
    let out = sim_run(&dir, &["--T", "200", "--faults", "cascade", "--duration", "1m", "--checks", "warn"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = summary_of(&dir);
    assert_eq!(s["settings"]["time_scale"], 0.2, "60 s of the workload's 300 s");
    let phases = s["phases"].as_array().unwrap();
    let end = phases.iter().map(|p| p["end_s"].as_f64().unwrap()).fold(0.0, f64::max);
    assert!((end - 60.0).abs() < 1e-6, "the run ends at {end} s");
    for (args, field) in
        [(&["--duration", "0s"][..], "--duration"), (&["--duration", "1m", "--time-scale", "0.5"], "--time-scale")]
    {
        let out = sim_run(&tmp("duration-bad"), args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.trim().lines().count() == 1 && err.contains(field), "{args:?}: {err}");
    }
}

/// `--generators N` needs real servers (the children go through a proxy)
/// and a client each: refused with one line naming the flag, exit 2.
#[test]
fn generators_are_refused_where_they_cannot_run() {
    for args in [&["--generators", "2"][..], &["--generators", "0"], &["--generators", "65"]] {
        let out = sim_run(&tmp("generators-bad"), args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.trim().lines().count() == 1 && err.contains("--generators"), "{args:?}: {err}");
    }
}

/// `run --dry-run` prints the resolved plan, as text or JSON, starts
/// nothing and writes nothing, even for a local cluster.
#[test]
fn dry_run_prints_the_plan_and_starts_nothing() {
    let dir = tmp("dry");
    let out =
        plbbench(&["run", "--dry-run", "--cluster", "local", "--faults", "cascade", "--out", dir.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.starts_with("plb · mix 25:75 · T=1000 · faults cascade · local cluster · K=5 · C=0.3 · 300 s"),
        "{stdout}"
    );
    for want in ["offered CPU: ", "theta ", "  baseline ", "  down2 ", "r1  Down", "would write "] {
        assert!(stdout.contains(want), "no `{want}`:\n{stdout}");
    }
    assert!(!dir.exists(), "a dry run wrote its folder");
    let out = plbbench(&["run", "--dry-run", "--cluster", "sim", "--format", "json", "--duration", "150s"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["settings"]["time_scale"], 0.5);
    assert_eq!(v["faults"].as_array().unwrap().len(), 2, "premium-fault: a Down and a Rejoin: {v}");
    let u = v["offered_utilisation"].as_f64().unwrap();
    assert!(u > 2.0, "the default, the paper's regime, saturates the cluster: {u}");
    let out = plbbench(&["run", "--dry-run", "--cluster", "sim", "--format", "json", "--load", "0.4"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["settings"]["workload"], "analytics", "--load alone runs the steady workload: {v}");
    let u = v["offered_utilisation"].as_f64().unwrap();
    assert!((u - 0.4).abs() < 1e-3, "{u}");
}

/// Completions and man pages come from the same definition as --help.
#[test]
fn completions_and_man_pages_name_every_flag() {
    let out = plbbench(&["completions", "bash"]);
    let bash = text(&out.stdout);
    assert!(out.status.success() && bash.contains("_plbbench()") && bash.contains("--time-scale"), "{bash}");
    let out = plbbench(&["man", "run"]);
    let page = text(&out.stdout);
    assert!(out.status.success() && page.contains(".TH plbbench"), "{page}");
    for flag in ["strategy", "progress", "duration", "dry\\-run", "format"] {
        assert!(page.contains(&format!("\\-\\-{flag}")), "no --{flag} in:\n{page}");
    }
    let out = plbbench(&["man", "runn"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("SUBCOMMAND"), "{}", text(&out.stderr));
}

#[test]
fn existing_folder_needs_force() {
    let a = tmp("force");
    // 3 s phases fail the phase-length check; that is not under test here.
    let fast = ["--T", "50", "--time-scale", "0.1", "--checks", "warn"];
    assert!(sim_run(&a, &fast).status.success());
    let again = sim_run(&a, &fast);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    assert!(sim_run(&a, &[&fast[..], &["--force"]].concat()).status.success());
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
        (vec!["--strategy", "rr-split", "--split", "4:2"], "--split"),
        (vec!["--strategy", "rr-split", "--split", "0:5"], "leaves Premium no replica"),
        (vec!["--strategy", "rr-split", "--replicas", "1"], "leaves Freemium no replica"),
        (vec!["--time-scale", "0"], "--time-scale"),
        (vec!["--time-scale", "-1"], "--time-scale"),
        (vec!["--cpus", "0"], "--cpus"),
        (vec!["--strategy", "magic"], "--strategy"),
        (vec!["--faults", "meteor"], "--faults"),
        (vec!["--faults", "cascde"], "did you mean `cascade`?"),
        (vec!["--strateg", "plb"], "did you mean `--strategy`?"),
        (vec!["--strategy", "plbb"], "did you mean `plb`?"),
        (vec!["--freemium-borrow", "sometimes"], "--freemium-borrow"),
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

/// The reference and the rr-split partitions follow K unless given: K=7
/// runs with either strategy and its own flag.
#[test]
fn k_derives_the_splits() {
    let cases: [(&[&str], &str, &str); 4] = [
        (&["--strategy", "plb"], "3,1,3", "4:3"),
        (&["--strategy", "plb", "--reference", "2,3,2"], "2,3,2", "4:3"),
        (&["--strategy", "rr-split"], "3,1,3", "4:3"),
        (&["--strategy", "rr-split", "--split", "5:2"], "3,1,3", "5:2"),
    ];
    for (extra, reference, split) in cases {
        let dir = tmp("k7");
        let mut args =
            vec!["--replicas", "7", "--T", "200", "--faults", "none", "--time-scale", "0.1", "--checks", "warn"];
        args.extend_from_slice(extra);
        let out = sim_run(&dir, &args);
        assert!(out.status.success(), "{extra:?}: {}", text(&out.stderr));
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
        assert_eq!(summary["settings"]["reference"], reference, "{extra:?}");
        assert_eq!(summary["settings"]["split"], split, "{extra:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// One stderr line and exit status 2, containing `want`.
fn refused(args: &[&str], want: &str) {
    let out = plbbench(args);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().filter(|l| !l.trim().is_empty()).count(), 1, "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: expected `{want}` in {err}");
}

/// Every strategy-specific value is checked against K whatever the
/// strategy, and a flag the strategy does not read is refused naming the
/// strategy that reads it (a default is never "given": the plain runs of
/// `k_derives_the_splits` pass).
#[test]
fn strategy_flags_are_checked_whatever_the_strategy() {
    let run = ["run", "--cluster", "sim", "--quiet", "--out", "/nonexistent-never-written", "--faults", "none"];
    let cases: [(&[&str], &str); 8] = [
        (&["--strategy", "plb", "--split", "3:3"], "--split: `3:3` sums to 6, but there are 5 replicas"),
        (&["--strategy", "plb", "--split", "3:2"], "--split: read only by --strategy rr-split; --strategy is plb"),
        (&["--strategy", "rr", "--reference", "2,1,2"], "--reference: read only by --strategy plb; --strategy is rr"),
        (&["--strategy", "rr", "--reference", "2,2,2"], "--reference: `2,2,2` sums to 6"),
        (&["--strategy", "rr-split", "--theta", "9"], "--theta: read only by --strategy plb; --strategy is rr-split"),
        (&["--strategy", "lc", "--theta", "0"], "--theta: must be at least 1"),
        (&["--strategy", "lc", "--mixed-unbounded"], "--mixed-unbounded: read only by --strategy plb"),
        (&["--strategy", "rr", "--freemium-borrow", "idle"], "--freemium-borrow: read only by --strategy plb"),
    ];
    for (extra, want) in cases {
        refused(&[&run[..], extra].concat(), want);
    }
    let exp = ["experiment", "--cluster", "sim", "--quiet", "--out", "/nonexistent-never-written", "--faults", "none"];
    refused(
        &[&exp[..], &["--strategies", "rr,lc", "--theta", "9"]].concat(),
        "--theta: read only by strategy plb, which --strategies does not list",
    );
    refused(&[&exp[..], &["--strategies", "plb,rr", "--split", "4:2"]].concat(), "--split: `4:2` sums to 6");
    assert!(!Path::new("/nonexistent-never-written").exists());
}

/// A grid that varies the strategy applies a strategy's flags to its runs
/// only: plb's runs get `--theta` and `--freemium-borrow`, rr-split's the
/// `--split`, and rr's runs none of them.
#[test]
fn a_grid_gives_each_strategy_its_own_flags() {
    let dir = tmp("grid-flags");
    let out = plbbench(&[
        "experiment",
        "--cluster",
        "sim",
        "--quiet",
        "--out",
        dir.to_str().unwrap(),
        "--strategies",
        "plb,rr-split,rr",
        "--mixes",
        "25:75",
        "--faults",
        "none",
        "--repeat",
        "1",
        "--T",
        "200",
        "--time-scale",
        "0.1",
        "--checks",
        "warn",
        "--theta",
        "5",
        "--split",
        "4:1",
        "--freemium-borrow",
        "never",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let settings = |s: &str| summary_of(&dir.join("runs").join(format!("none-25-75-{s}-r1")))["settings"].clone();
    let (plb, split, rr) = (settings("plb"), settings("rr-split"), settings("rr"));
    assert_eq!((plb["theta"].as_u64(), plb["freemium_borrow"].as_str()), (Some(5), Some("never")));
    assert_eq!(plb["split"], "3:2", "plb's runs do not take --split");
    assert_eq!(split["split"], "4:1");
    assert_ne!(split["theta"].as_u64(), Some(5), "rr-split's runs do not take --theta");
    assert_eq!(rr["split"], "3:2");
    assert!(rr.get("freemium_borrow").is_none());
    std::fs::remove_dir_all(dir).unwrap();
}

/// `--freemium-borrow`: each rule is recorded in the settings, and on a
/// saturated cascade the rules that let Freemium into Premium's replicas do
/// borrow (events.csv logs `P->F borrow`) while `never`, `surplus` (the
/// Premium role is never above its target here) and the pressure rules
/// (which place guests without a role change) do not.
#[test]
fn freemium_borrowing_rules_are_recorded_and_change_the_routing() {
    for (rule, borrows) in [
        ("pressure", false),
        ("pressure-fallback", false),
        ("surplus", false),
        ("idle", true),
        ("mirror", true),
        ("never", false),
    ] {
        let dir = tmp(&format!("borrow-{rule}"));
        let args =
            ["--T", "1000", "--workload", "analytics", "--load", "1.2", "--faults", "cascade", "--time-scale", "0.3"];
        let args = [&args[..], &["--checks", "warn"]].concat();
        let out = sim_run(&dir, &[&args[..], &["--freemium-borrow", rule]].concat());
        assert!(out.status.success(), "{rule}: {}", text(&out.stderr));
        let s = summary_of(&dir);
        assert_eq!(
            (s["settings"]["freemium_borrow"].as_str(), s["settings"]["mixed"].as_str()),
            (Some(rule), Some("bounded"))
        );
        let events = std::fs::read_to_string(dir.join("events.csv")).unwrap();
        assert_eq!(events.contains("P->F borrow"), borrows, "{rule}");
        std::fs::remove_dir_all(dir).unwrap();
    }
    let rr = tmp("borrow-rr");
    assert!(sim_run(&rr, &["--strategy", "rr", "--T", "200", "--time-scale", "0.1", "--faults", "none"])
        .status
        .success());
    assert!(summary_of(&rr)["settings"].get("freemium_borrow").is_none(), "a plb knob only");
    std::fs::remove_dir_all(rr).unwrap();
}

/// The default Freemium borrowing (`pressure`, design.md §2 as revised
/// 2026-12-03) lends Freemium the CPU the Premium role leaves idle: on the
/// steady workload's cascade, late in the two-down phase a replica in
/// the Premium role holds Freemium sessions (its guests: no role change is
/// logged), and Freemium's p95 there is a small fraction of `never`'s,
/// which leaves it one replica, while Premium's goodput is the same.
#[test]
fn pressure_lends_idle_premium_cpu_to_freemium() {
    type Row = std::collections::HashMap<String, String>;
    let rows = |dir: &Path, name: &str| -> Vec<Row> {
        csv::Reader::from_path(dir.join(name)).unwrap().deserialize().map(Result::unwrap).collect()
    };
    let num = |row: &Row, col: &str| row[col].parse::<f64>().unwrap();
    let mut down2 = Vec::new();
    for rule in ["pressure", "never"] {
        let dir = tmp(&format!("pressure-{rule}"));
        let mut args = vec!["--faults", "cascade", "--workload", "analytics"];
        if rule != "pressure" {
            args.extend(["--freemium-borrow", rule]);
        }
        let out = sim_run(&dir, &args);
        assert!(out.status.success(), "{rule}: {}", text(&out.stderr));
        assert_eq!(summary_of(&dir)["settings"]["freemium_borrow"].as_str(), Some(rule), "the default is pressure");
        let phases = rows(&dir, "phases.csv");
        let row = |class: &str| phases.iter().find(|r| r["phase"] == "down2" && r["class"] == class).unwrap().clone();
        let (p, f) = (row("P"), row("F"));
        // The last 20 s of the phase: a replica that a repair moved into
        // the Premium role has no Freemium session left from before by then
        // (sessions last 10-30 s).
        let (from, to) = (num(&p, "end_s") - 20.0, num(&p, "end_s"));
        let guests = rows(&dir, "replicas.csv")
            .iter()
            .filter(|r| (from..to).contains(&num(r, "t_s")) && r["up"] == "true" && r["role"] == "P")
            .filter(|r| num(r, "active_f") > 0.0)
            .count();
        assert_eq!(guests > 0, rule == "pressure", "{rule}: {guests} samples of a P replica with Freemium sessions");
        assert!(!std::fs::read_to_string(dir.join("events.csv")).unwrap().contains("P->F borrow"), "{rule}");
        down2.push((num(&p, "goodput_qps"), num(&f, "p95_ms")));
        std::fs::remove_dir_all(dir).unwrap();
    }
    let [(p_pressure, f_pressure), (p_never, f_never)] = down2[..] else { unreachable!() };
    assert!(f_pressure * 10.0 < f_never, "Freemium p95 in two-down: {f_pressure} ms vs never's {f_never} ms");
    assert!((p_pressure / p_never - 1.0).abs() < 0.05, "Premium goodput {p_pressure} vs {p_never}");
}

/// theta comes from the workload (design.md §2): the expected concurrent
/// sessions per replica in the baseline, rounded up, so it follows T; a
/// number overrides it. 36 is the steady workload's at T=1000 (the
/// workload's unit test pins the formula); the closed population of
/// `paper-closed` keeps every client in a session, 200 a replica; the
/// paper's open clients at twice the budget are in one 57% of the time.
#[test]
fn theta_is_derived_from_the_workload_unless_given() {
    let settings = |extra: &[&str]| {
        let dir = tmp("theta");
        let base = ["--time-scale", "0.1", "--faults", "none", "--checks", "warn"];
        let workload: &[&str] = if extra.contains(&"--workload") { &[] } else { &["--workload", "analytics"] };
        let out = sim_run(&dir, &[&base[..], workload, extra].concat());
        assert!(out.status.success(), "{extra:?}: {}", text(&out.stderr));
        let s = summary_of(&dir)["settings"].clone();
        std::fs::remove_dir_all(dir).unwrap();
        s
    };
    let theta = |extra: &[&str]| settings(extra)["theta"].as_u64().unwrap();
    assert_eq!(theta(&[]), 36);
    assert_eq!(theta(&["--T", "500"]), 18, "half the clients, half the sessions per replica");
    assert_eq!(theta(&["--theta", "7"]), 7);
    assert_eq!(theta(&["--workload", "paper-closed"]), 200, "a closed population: every client in a session");
    assert_eq!(theta(&["--workload", "paper"]), 114, "open, 2x the budget");
    // max_connections is sized for every client on one replica (docs/performance.md).
    let max_conn = |extra: &[&str]| settings(extra)["max_connections"].as_u64().unwrap();
    assert_eq!(max_conn(&[]), 1020);
    assert_eq!(max_conn(&["--T", "100"]), 300, "never below PostgreSQL-like 300");
    assert_eq!(max_conn(&["--max-connections", "50"]), 50);
}

fn plbbench_default_workload() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/analytics.toml")).unwrap()
}

/// Pins the simulator's figures at a fixed seed: any change to the router,
/// the schedule, the simulator or the metrics shows up here. After an
/// intended change, refresh with `UPDATE_GOLDEN=1 cargo test --release --test cli_sim`
/// and explain the difference in the commit message. Each run must pass
/// every validity check (on the paper's regime, `sim-paper-*`, Freemium
/// logins wait for the postmaster of a saturated replica without a login
/// deadline, as pgjdbc's defaults do, so PLB's cascade passes too;
/// docs/paper.md).
#[test]
fn sim_figures_are_pinned_at_a_fixed_seed() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let runs = [
        ("analytics", "plb", "cascade"),
        ("analytics", "rr", "cascade"),
        ("analytics", "rr-split", "premium-fault"),
        ("paper", "plb", "cascade"),
        ("paper", "rr", "cascade"),
        ("paper", "rr-split", "premium-fault"),
        ("paper-closed", "plb", "cascade"),
        ("paper-closed", "rr", "cascade"),
    ];
    for (workload, strategy, faults) in runs {
        let dir = tmp(&format!("golden-{workload}-{strategy}"));
        let args =
            ["--workload", workload, "--strategy", strategy, "--faults", faults, "--seed", "1", "--checks", "warn"];
        let out = sim_run(&dir, &args);
        assert!(out.status.success(), "{workload} {strategy}: {}", String::from_utf8_lossy(&out.stderr));
        let failed: Vec<String> =
            verdicts(&summary_of(&dir)).into_iter().filter(|(_, ok)| !ok).map(|(name, _)| name).collect();
        assert_eq!(failed, Vec::<String>::new(), "{workload} {strategy} {faults}: failed checks");
        let got = std::fs::read_to_string(dir.join("phases.csv")).unwrap();
        let prefix = if workload == "analytics" { "sim".to_string() } else { format!("sim-{workload}") };
        let file = golden.join(format!("{prefix}-{strategy}-{faults}-seed1.csv"));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&file, &got).unwrap();
        }
        let want = std::fs::read_to_string(&file).expect("golden file (UPDATE_GOLDEN=1 to create)");
        assert_eq!(got, want, "{workload} {strategy} {faults}: simulator figures changed");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn summary_of(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

/// The verdicts of a summary.json as `(name, ok)`.
fn verdicts(s: &serde_json::Value) -> Vec<(String, bool)> {
    let v = s["verdicts"].as_array().unwrap();
    v.iter().map(|v| (v["name"].as_str().unwrap().to_string(), v["ok"].as_bool().unwrap())).collect()
}

/// The failed-checks banner of report.html, asserted to be the first thing
/// in the page's `<main>`, above the title and the settings.
fn top_banner(dir: &Path) -> String {
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    let main = html.find("<main>").unwrap() + "<main>".len();
    let banner = html.find(r#"<div class="banner checks" id="failing-verdicts">"#).expect("failed-checks banner");
    assert_eq!(html[main..banner].trim(), "", "the banner is the top of the page");
    assert!(banner < html.find("<h1>").unwrap() && banner < html.find(r#"id="setup""#).unwrap());
    html[banner..banner + html[banner..].find("</div>").unwrap()].to_string()
}

/// T=5000 on the simulator: the Freemium replicas cannot keep up, fill to
/// `max_connections` in the baseline already and turn sessions away with
/// "too many clients", which the checks count as overload.
#[test]
fn an_overloaded_run_fails_its_checks_loudly_and_warn_downgrades_them() {
    let (fail, warn) = (tmp("overload-fail"), tmp("overload-warn"));
    let out = sim_run(&fail, &["--T", "5000", "--max-connections", "300"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("plbbench: check failed: baseline steady: ")
            && err.contains(" sessions timed out or found the server full"),
        "{err}"
    );
    assert!(err.contains("plbbench: check failed: time-outs: baseline "), "{err}");
    assert!(err.contains("plbbench: error: the run failed 2 of 6 checks"), "{err}");
    let checks = err.lines().filter(|l| l.starts_with("plbbench: check failed: ")).count();
    assert_eq!(checks, 2, "one line per failed check: {err}");
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("plb · mix 25:75 · T=5000 · faults premium-fault · sim cluster\n"), "{stdout}");
    assert!(stdout.contains("\naborted sessions: P ") && stdout.contains("too many clients"), "{stdout}");
    assert!(stdout.contains("\nchecks: 2 of 6 FAILED (baseline steady, time-outs)\n"), "{stdout}");
    let s = summary_of(&fail);
    assert_eq!(s["settings"]["checks"], "fail");
    let want = [
        ("accounting", true),
        ("baseline steady", false),
        ("time-outs", false),
        ("phase length", true),
        ("progress", true),
        ("login wait", true),
    ];
    assert_eq!(verdicts(&s), want.map(|(n, ok)| (n.to_string(), ok)));
    let banner = top_banner(&fail);
    assert!(banner.contains("FAILED 2 OF 6 CHECKS") && banner.contains("do not measure what they claim"), "{banner}");
    assert!(banner.contains("<b>baseline steady</b>") && banner.contains("<b>time-outs</b>"), "{banner}");
    assert!(!banner.contains("downgraded"), "{banner}");

    let out = sim_run(&warn, &["--T", "5000", "--max-connections", "300", "--checks", "warn"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let warned = err.lines().filter(|l| l.starts_with("plbbench: warning: check failed: ")).count();
    assert_eq!(warned, 2, "{err}");
    assert!(!err.contains("error"), "{err}");
    let s = summary_of(&warn);
    assert_eq!(s["settings"]["checks"], "warn");
    assert_eq!(verdicts(&s), want.map(|(n, ok)| (n.to_string(), ok)), "the same checks fail");
    assert!(top_banner(&warn).contains("downgraded to warnings"));
    for d in [fail, warn] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

/// At `--time-scale 0.1` the 30 s baseline lasts 3 s, less than a typical
/// session (the think times between its mean number of queries): the
/// phase-length check fails.
#[test]
fn phases_shorter_than_a_session_fail_the_phase_length_check() {
    let dir = tmp("short");
    let out = sim_run(&dir, &["--T", "50", "--time-scale", "0.1"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let line = err.lines().find(|l| l.starts_with("plbbench: check failed: phase length: ")).expect(&err);
    assert!(line.contains(": shorter than a typical session (") && line.contains("s): baseline (3.0 s)"), "{err}");
    assert!(dir.join("report.html").is_file() && dir.join("phases.csv").is_file(), "the folder is written");
    assert!(top_banner(&dir).contains("<b>phase length</b>"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// T=200 loads the replicas lightly: no time-out, a flat baseline p95, and
/// at full time scale every phase outlasts a session.
#[test]
fn a_healthy_run_passes_every_check() {
    let dir = tmp("healthy");
    let out = sim_run(&dir, &["--T", "200", "--faults", "cascade"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("check failed"), "{err}");
    assert!(text(&out.stdout).contains("\nchecks: all 6 passed\n"), "{}", text(&out.stdout));
    let s = summary_of(&dir);
    let names: Vec<String> = verdicts(&s).into_iter().filter(|v| v.1).map(|v| v.0).collect();
    assert_eq!(names, ["accounting", "baseline steady", "time-outs", "phase length", "progress", "login wait"]);
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(!html.contains("failing-verdicts"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// T=3000 at twice the cluster's capacity and no faults: sessions pile up
/// past the 300 connections a replica accepts (its `max_connections`) and
/// the extra ones are turned away with "too many clients", as PostgreSQL
/// does (53300). A full server is alive: the router never takes it as down.
#[test]
fn a_full_replica_turns_away_connections_beyond_max_connections() {
    let out = tmp("maxconn");
    let args = [
        "--T",
        "3000",
        "--workload",
        "analytics",
        "--load",
        "2",
        "--faults",
        "none",
        "--time-scale",
        "0.2",
        "--checks",
        "warn",
        "--strategy",
        "rr",
        "--max-connections",
        "300",
    ];
    let o = sim_run(&out, &args);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(stdout.contains("too many clients"), "{stdout}");
    assert!(!stdout.contains("connect refused"), "a full server is not a refusal: {stdout}");
    let events = std::fs::read_to_string(out.join("events.csv")).unwrap();
    assert!(!events.contains("down ("), "a full replica was taken as down: {events}");
    let open = |row: &Row| row["active_p"].parse::<u32>().unwrap() + row["active_f"].parse::<u32>().unwrap();
    let most = csv_rows(&out.join("replicas.csv")).iter().map(open).max().unwrap();
    assert!((250..=300).contains(&most), "at most {most} sessions open on a replica");
    std::fs::remove_dir_all(&out).unwrap();
}

/// One CSV row by column name.
type Row = std::collections::HashMap<String, String>;

/// Every row of a CSV file of a run folder.
fn csv_rows(path: &Path) -> Vec<Row> {
    csv::Reader::from_path(path).unwrap().deserialize().map(|x| x.unwrap()).collect()
}

/// Baseline Premium p95 (ms) and mean replica CPU of a run folder.
fn baseline_p_p95_and_cpu(dir: &Path) -> (f64, f64) {
    let rows = csv_rows(&dir.join("phases.csv"));
    let row = rows.iter().find(|r| r["phase"] == "baseline" && r["class"] == "P").unwrap();
    (row["p95_ms"].parse().unwrap(), row["cpu_mean"].parse().unwrap())
}

/// A sim run (T=300, no faults, time scale 0.2) of the default workload
/// with its `[session]` connection figures replaced by `costs` (TOML
/// lines): the baseline's Premium p95 and mean replica CPU.
fn baseline_with_connection(name: &str, costs: &str) -> (f64, f64) {
    let default =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/analytics.toml")).unwrap();
    let dir = tmp(name);
    let figure = |l: &str| {
        ["connect_cpu_ms", "fork_cpu_ms", "close_cpu_ms", "connect_latency_ms"].iter().any(|k| l.starts_with(k))
    };
    let lines = default.lines().filter(|l| !figure(l));
    let workload = lines.map(|l| if l == "[session]" { format!("{l}\n{costs}") } else { l.to_string() });
    let workload = workload.collect::<Vec<_>>().join("\n");
    assert_ne!(workload, default);
    let file = dir.with_extension("toml");
    std::fs::write(&file, workload).unwrap();
    let args = ["--workload", file.to_str().unwrap(), "--T", "300", "--faults", "none", "--time-scale", "0.2"];
    let out = sim_run(&dir, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got = baseline_p_p95_and_cpu(&dir);
    std::fs::remove_file(file).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
    got
}

/// A backend's exit (`session.close_cpu_ms`) costs the replica CPU but no
/// client waits for it: moving 20 ms of a connection's CPU from set-up to
/// close keeps the replicas' CPU and takes it off the first query's latency.
#[test]
fn close_cpu_is_spent_off_the_latency_path() {
    let (p95_setup, cpu_setup) = baseline_with_connection("close-setup", "connect_cpu_ms = 20.4\nclose_cpu_ms = 0.0");
    let (p95_exit, cpu_exit) = baseline_with_connection("close-exit", "connect_cpu_ms = 0.4\nclose_cpu_ms = 20.0");
    assert!(p95_exit < p95_setup - 10.0, "p95 {p95_exit} ms with close CPU against {p95_setup} ms with set-up CPU");
    assert!((cpu_exit - cpu_setup).abs() < 0.1 * cpu_setup, "CPU {cpu_exit} against {cpu_setup}");
}

/// A set-up's latency outside the replica (`session.connect_latency_ms`)
/// delays the session's first query, which is measured from the session's
/// intended start, and costs the replica nothing.
#[test]
fn connect_latency_delays_the_first_query_and_costs_no_cpu() {
    let costs = |wait: &str| format!("connect_cpu_ms = 5.0\nclose_cpu_ms = 2.0\nconnect_latency_ms = {wait}");
    let (p95_none, cpu_none) = baseline_with_connection("latency-none", &costs("0.0"));
    let (p95_wait, cpu_wait) = baseline_with_connection("latency-wait", &costs("40.0"));
    assert!(p95_wait > p95_none + 30.0, "p95 {p95_wait} ms with a 40 ms wait against {p95_none} ms without");
    assert!((cpu_wait - cpu_none).abs() < 0.05 * cpu_none, "CPU {cpu_wait} against {cpu_none}");
}

/// A calibration from a host where every query costs twice the committed
/// figure: the default workload's pause grows so that it offers the same
/// 70% of rr-split's Freemium pair there (its operating point), the run
/// records which costs it took, and a calibration that no pause can bring
/// to the point is refused with one line naming the flag.
#[test]
fn a_calibration_resizes_the_pause_to_the_workloads_operating_point() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let committed = std::fs::read_to_string(root.join("workloads/calibration-local.toml")).unwrap();
    let doubled = committed.replace("cpu_ms = 1.14\n", "cpu_ms = 2.28\n").replace("cpu_ms = 2.64\n", "cpu_ms = 5.28\n");
    assert_ne!(doubled, committed);
    let dir = tmp("op-point");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("slow-host.toml");
    std::fs::write(&file, &doubled).unwrap();
    let run = dir.join("run");
    let args = ["--workload", "analytics", "--T", "200", "--faults", "none", "--time-scale", "0.1"];
    let out = sim_run(&run, &[&args[..], &["--calibration", file.to_str().unwrap()]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let config: toml::Value = toml::from_str(&std::fs::read_to_string(run.join("config.toml")).unwrap()).unwrap();
    let between = config["workload"]["session"]["between_ms"].as_float().unwrap();
    assert!(between > 1.5 * 88057.0, "the pause grows with the costs: {between}");
    let settings = &summary_of(&run)["settings"];
    let line = settings["calibration"].as_str().unwrap();
    assert!(line.contains("slow-host.toml") && line.contains("operating point 0.70 of the partition budget"), "{line}");
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(html.contains("slow-host.toml"), "the report names the costs it used");
    // Queries so cheap that 1,000 clients without a pause offer less than
    // 70% of the partition.
    let cheap = committed.replace("cpu_ms = 1.14\n", "cpu_ms = 0.01\n").replace("cpu_ms = 2.64\n", "cpu_ms = 0.02\n");
    let cheap =
        cheap.replace("cpu_ms = 7.26\n", "cpu_ms = 0.05\n").replace("close_cpu_ms = 2.11\n", "close_cpu_ms = 0.01\n");
    let cheap = cheap.replace("postmaster_cpu_ms = 0.48\n", "postmaster_cpu_ms = 0.01\n");
    std::fs::write(&file, cheap).unwrap();
    let out = sim_run(&dir.join("refused"), &[&args[..], &["--calibration", file.to_str().unwrap()]].concat());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--calibration") && err.contains("operating point 0.70"), "{err}");
    assert!(!dir.join("refused").exists(), "nothing written for a refused run");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A run whose estimated memory exceeds what the machine has is refused
/// before it starts, in one line naming the estimate, with status 2, and
/// writes nothing.
#[test]
fn a_run_that_cannot_fit_in_memory_is_refused_before_it_starts() {
    let dir = tmp("too-big");
    let out = dir.to_str().unwrap();
    refused(
        &["run", "--cluster", "sim", "--quiet", "--out", out, "--T", "4000000000"],
        "memory: this run would need about",
    );
    assert!(!dir.exists());
}

/// Above 50 replicas a run writes roles.csv (per role and sample, the
/// replicas up and the p50, p95 and max of their CPU and sessions) in
/// place of replicas.csv, and its report says so; at 50 it keeps
/// per-replica rows.
#[test]
fn a_fleet_writes_per_role_distributions_instead_of_per_replica_rows() {
    let (fleet, small) = (tmp("fleet"), tmp("fleet-50"));
    let common = ["--workload", "analytics", "--T", "2000", "--duration", "60s", "--checks", "warn"];
    for (dir, k) in [(&fleet, "51"), (&small, "50")] {
        let out = sim_run(dir, &[&common[..], &["--replicas", k]].concat());
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    assert!(small.join("replicas.csv").is_file() && !small.join("roles.csv").exists());
    assert!(fleet.join("roles.csv").is_file() && !fleet.join("replicas.csv").exists());
    let roles = std::fs::read_to_string(fleet.join("roles.csv")).unwrap();
    let mut lines = roles.lines();
    assert_eq!(lines.next(), Some("t_s,role,replicas,cpu_p50,cpu_p95,cpu_max,sessions_p50,sessions_p95,sessions_max"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(rows.len() >= 3 * 60, "a row per role and sample: {}", rows.len());
    for sample in rows.chunks(3) {
        assert_eq!(sample.iter().map(|r| r[1]).collect::<Vec<_>>(), ["P", "M", "F"]);
        let up: u32 = sample.iter().map(|r| r[2].parse::<u32>().unwrap()).sum();
        assert!(up <= 51, "{sample:?}");
        for r in sample.iter().filter(|r| !r[4].is_empty()) {
            let q: Vec<f64> = r[3..6].iter().map(|v| v.parse().unwrap()).collect();
            assert!(q[0] <= q[1] && q[1] <= q[2], "p50 <= p95 <= max: {r:?}");
        }
    }
    let html = std::fs::read_to_string(fleet.join("report.html")).unwrap();
    assert!(
        html.contains("This run has 51 replicas, more than the 50"),
        "the report says why its CPU chart is per role"
    );
    for d in [fleet, small] {
        std::fs::remove_dir_all(d).unwrap();
    }
}
