//! A run whose books do not balance fails with exit status 1 and writes
//! nothing (docs/manual.md, "Bad input, failed runs and signals"): the
//! accounting check sits between the backend and the writer, so a backend
//! that loses track of a session can never ship a report that does not add
//! up.

use plbbench::commands::run::args::default_run_args;
use plbbench::commands::run::launch;
use plbbench::commands::run::plan::Plan;
use plbbench::core::metrics::Collector;
use plbbench::Error;
use std::time::Instant;

/// A fresh empty directory of this test process.
fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("plbbench-accounting-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn plan(out: &std::path::Path, raw: bool) -> Plan {
    let mut a = default_run_args();
    a.common.cluster = plbbench::core::settings::ClusterKind::Sim;
    a.common.clients = 200;
    a.common.time_scale = 0.2;
    a.common.raw = raw;
    a.common.quiet = true;
    a.faults = Some("cascade".into());
    a.out = Some(out.to_path_buf());
    Plan::new(a).expect("valid plan")
}

fn collector(p: &Plan) -> Collector {
    Collector::new(p.phases.clone(), p.replicas, p.cpus, p.raw)
}

/// Entries of `dir`'s parent whose names start with `dir`'s name: the run
/// folder itself or a temporary sibling left behind.
fn leftovers(dir: &std::path::Path) -> Vec<String> {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::read_dir(dir.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.contains(&name))
        .collect()
}

#[test]
fn a_session_the_backend_lost_fails_the_run_and_writes_nothing() {
    let tmp = tmp("lost");
    for (raw, class) in [(false, 0), (true, 1)] {
        let out = tmp.join(format!("run-{raw}"));
        let p = plan(&out, raw);
        let (col, mut outcome) = launch::run_sim(&p, collector(&p));
        // One session more in flight than the backend really had open.
        outcome.in_flight[class] += 1;
        let err = match plbbench::commands::run::conclude(&p, col, outcome, chrono::Utc::now(), Instant::now()) {
            Ok(_) => panic!("an unbalanced run was written"),
            Err(e) => e,
        };
        assert!(matches!(err, Error::Run(_)), "not a run failure: {err:?}");
        assert_eq!(err.exit_code(), 1);
        let msg = format!("{err:#}");
        assert!(msg.contains("sessions started") && msg.contains("in flight"), "message: {msg}");
        assert!(leftovers(&out).is_empty(), "files left behind: {:?}", leftovers(&out));
    }
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn the_same_run_with_honest_books_is_written() {
    let tmp = tmp("honest");
    let out = tmp.join("run");
    let p = plan(&out, true);
    let (col, outcome) = launch::run_sim(&p, collector(&p));
    plbbench::commands::run::conclude(&p, col, outcome, chrono::Utc::now(), Instant::now()).expect("balanced run");
    for f in ["summary.json", "phases.csv", "timeseries.csv", "queries.csv", "report.html"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    assert_eq!(leftovers(&out), vec!["run".to_string()]);
    let _ = std::fs::remove_dir_all(&tmp);
}
