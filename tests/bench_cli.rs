//! `plbbench bench` (docs/performance.md) through the real binary against one real local
//! PostgreSQL server (a one-replica cluster of the local backend, tiny
//! dataset, removed at the end): the closed loop completes queries on every
//! connection without errors and reports ordered percentiles; the open loop
//! completes about `rate x duration` queries, not as many as it could; a
//! statement error is counted and the connection goes on; bad
//! flags are refused with one line naming the field and exit status 2
//! before anything connects.
//!
//! Needs PostgreSQL's server binaries; `PLBBENCH_SKIP_PG=1` skips.

mod common;
use common::have_postgres;
use plbbench::cluster::local::{LocalCluster, LocalOptions};
use serde_json::Value;
use std::process::{Command, Output, Stdio};

fn plbbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plbbench")).args(args).stdin(Stdio::null()).output().unwrap()
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "bench failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// `plbbench bench` of `query` on keys 1..=1000 against `dsn` with `extra`
/// flags, as JSON.
fn bench_json(dsn: &str, query: &str, extra: &[&str]) -> Value {
    let mut args = vec!["bench", "--dsn", dsn, "--query", query, "--key-range", "1000", "--format", "json"];
    args.extend_from_slice(extra);
    json(&plbbench(&args))
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {v}"))
}

#[test]
fn bad_flags_exit_2_with_one_line() {
    for (args, field) in [
        (&["--connections", "0"][..], "--connections"),
        (&["--duration", "-1"], "--duration"),
        (&["--rate", "0"], "--rate"),
        (&["--dsn", "port=x"], "--dsn"),
    ] {
        let mut all = vec!["bench", "--dsn", "host=127.0.0.1 port=1 user=u", "--query", "SELECT 1"];
        all.extend_from_slice(args);
        let out = plbbench(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(field), "{args:?}: {err}");
    }
}

#[test]
fn closed_and_open_loop_against_a_real_server() {
    if !have_postgres() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("plbbench-bench-cli-{}", std::process::id()));
    let opts = LocalOptions {
        replicas: 1,
        cpus: 0.0,
        state_dir: dir.clone(),
        scale: 0.001,
        seed: 7,
        base_port: 0,
        max_connections: 20,
    };
    let cluster = LocalCluster::up(&opts).expect("one local server");
    let dsn = cluster.dsn(0);

    let closed = json(&plbbench(&[
        "bench",
        "--dsn",
        &dsn,
        "--query",
        "SELECT $1::int8 + 1",
        "--key-range",
        "1000",
        "--prepared",
        "-c",
        "4",
        "-j",
        "2",
        "-T",
        "2",
        "--format",
        "json",
    ]));
    eprintln!("closed: {closed}");
    assert_eq!(closed["mode"], "closed");
    assert_eq!((f(&closed, "errors"), f(&closed, "connections")), (0.0, 4.0));
    assert_eq!(f(&closed, "rows"), f(&closed, "queries"), "one row per query: {closed}");
    assert!(f(&closed, "queries") >= 100.0 && f(&closed, "qps") > 50.0, "{closed}");
    assert!((1.9..5.0).contains(&f(&closed, "elapsed_s")), "{closed}");
    let p = ["p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms"].map(|k| f(&closed, k));
    assert!(p[0] > 0.0 && p.windows(2).all(|w| w[0] <= w[1]), "{closed}");

    // The closed loop with the simple protocol (the key inlined), 3
    // connections on the default threads.
    let simple = bench_json(&dsn, "SELECT $1 + 1", &["-c", "3", "-T", "1"]);
    assert_eq!((f(&simple, "errors"), f(&simple, "connections")), (0.0, 3.0), "{simple}");
    assert!(f(&simple, "queries") >= 50.0 && f(&simple, "rows") == f(&simple, "queries"), "{simple}");

    // Simple protocol with the key inlined, open loop at 200 qps for 2 s.
    let open = bench_json(&dsn, "SELECT $1 + 1", &["-c", "4", "-T", "2", "--rate", "200"]);
    eprintln!("open: {open}");
    assert_eq!(open["mode"], "open");
    let n = f(&open, "queries");
    assert!((300.0..=500.0).contains(&n), "open loop at 200 qps for 2 s completed {n}: {open}");
    assert_eq!(f(&open, "errors"), 0.0);
    assert!(f(&open, "qps") < f(&closed, "qps"), "the open loop should not run flat out");

    // A statement's own error (division by zero) is counted and the
    // connection goes on: errors pile up for the whole run, none completes.
    for prepared in [true, false] {
        let mut args = vec!["bench", "--dsn", &dsn, "--query", "SELECT 1 / ($1::int - $1::int)", "--key-range", "9"];
        args.extend(["-c", "2", "-T", "1", "--format", "json"]);
        if prepared {
            args.push("--prepared");
        }
        let failing = json(&plbbench(&args));
        assert_eq!(f(&failing, "queries"), 0.0, "{failing}");
        assert!(f(&failing, "errors") >= 50.0, "the connections stopped at the first error: {failing}");
    }
    drop(cluster);
    assert!(!dir.exists(), "{} left behind", dir.display());
}
