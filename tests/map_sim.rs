//! `plbbench map` on the simulator (issue 49): a small grid writes its
//! heat maps, CSV and JSON, with the paper's band, the chosen point and the
//! cells whose runs failed a check; a second call resumes without running
//! anything; bad input is refused with one line, exit 2, before any run.

use std::path::PathBuf;
use std::process::{Command, Output};

fn plbbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plbbench")).args(args).output().unwrap()
}

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("plbbench-map-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn a_small_map_writes_every_file_marks_bands_and_resumes() {
    let dir = tmp("small");
    let out = dir.to_str().unwrap();
    // On `paper-closed`, whose point (250 ms, 40 queries, closed) is a cell.
    let args = [
        "map",
        "--workload",
        "paper-closed",
        "--vary",
        "think_ms=250,2000",
        "--vary",
        "queries=40",
        "--mixes",
        "25:75,50:50",
        "--repeat",
        "1",
    ];
    let o = plbbench(&[&args[..], &["-q", "--out", out]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = std::fs::read_to_string(dir.join("map.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("think_ms,queries,mix,rq1_gain_pp,rq2_goodput_ratio,"), "{}", lines[0]);
    assert_eq!(lines.len(), 1 + 2 * 2, "a row per cell and mix");
    let map: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("map.json")).unwrap()).unwrap();
    let cells = map["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2);
    let chosen: Vec<&serde_json::Value> = cells.iter().filter(|c| c["chosen"] == true).collect();
    assert_eq!(chosen.len(), 1, "the workload's own point (250 ms, 40 queries)");
    assert_eq!(chosen[0]["params"]["think_ms"], "250");
    // The chosen point's RQ1 at 25:75 is that regime's (docs/paper.md: about +10 pp).
    let rq1 = chosen[0]["findings"]["25:75"]["rq1_gain_pp"].as_f64().unwrap();
    assert!((0.0..20.0).contains(&rq1), "{rq1}");
    // 2 s thinks over 20-60 queries outlast the phases: the phase-length check fails, the cell is hatched.
    let slow = cells.iter().find(|c| c["params"]["think_ms"] == "2000").unwrap();
    assert!(slow["runs_failing"].as_u64().unwrap() > 0, "{slow}");
    assert!(slow["failed_checks"].as_array().unwrap().iter().any(|c| c == "phase length"), "{slow}");
    let svg = std::fs::read_to_string(dir.join("figures/rq1_gain_pp.svg")).unwrap();
    assert!(svg.contains("paper: 26..28") && svg.contains("url(#hatch-rq1_gain_pp)") && svg.contains("<circle"));
    assert_eq!(svg.matches(">25:75<").count() + svg.matches(">50:50<").count(), 2, "a panel per mix");
    let html = std::fs::read_to_string(dir.join("map.html")).unwrap();
    assert_eq!(html.matches("<img src=\"figures/").count(), 9, "a heat map per finding");
    assert!(dir.join("figures/rq2_goodput_ratio.svg").is_file());
    let again = plbbench(&[&args[..], &["--out", out]].concat());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(again.status.success() && err.contains("2 cells, 16 runs, 0 to do"), "{err}");
    assert!(String::from_utf8_lossy(&again.stdout).contains("RQ1: Premium retention gain"), "the summary table");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_axes_are_refused_in_one_line_before_any_run() {
    let dir = tmp("bad");
    let out = dir.to_str().unwrap();
    for (vary, want) in [
        ("colour=red", "plbbench: error: --vary: unknown parameter `colour` (keys: think_ms, queries, T, load, routers, refresh_ms)"),
        ("think_ms=", "plbbench: error: --vary think_ms: names no value"),
        ("load=open", "plbbench: error: --vary load: `open` must be `closed` or a positive fraction of the CPU budget"),
        (
            "think_ms=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34",
            "more than the 4000 a map may hold",
        ),
    ] {
        let o = plbbench(&["map", "--vary", vary, "--vary", "queries=10,20,30,40,50,60", "--out", out]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{vary}: {err}");
        assert_eq!(err.lines().count(), 1, "{vary}: one line: {err}");
        assert!(err.contains(want), "{vary}: {err}");
    }
    assert!(!dir.exists(), "nothing written");
}
