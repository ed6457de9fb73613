//! Run tier (docs/manual.md, "Run validity checks"): the generator
//! saturation guard in a real local run. Two short runs of `plbbench run
//! --cluster local --faults none` at time scale 0.1 (30 s, T=1000) through
//! the real binary against real PostgreSQL: a normal one, whose
//! summary.json carries a `generator` block that is not saturated and a
//! passing verdict; and one whose generator is starved of CPU on purpose
//! (the test-only `PLBBENCH_TEST_GENERATOR_BURN_MS` busy-spins inside the
//! client loop before every session start and query, as an overloaded
//! generator would), which must be flagged in summary.json, in the verdict
//! list and with a banner in report.html, from what plbbench measured of
//! itself (its CPU and the other clients' schedule lag).
//!
//! Needs PostgreSQL's server binaries; `PLBBENCH_SKIP_PG=1` skips.

mod common;
use common::have_postgres;
use common::run::*;
use serde_json::Value;

/// Runs 30 s of `--faults none` (with `env` added) and returns the summary
/// and report.html after checking the run succeeded and left nothing.
fn run(tag: &str, env: &[(&str, &str)]) -> (Value, String) {
    let _one = serial();
    let sb = Sandbox::new(tag);
    let mut r = Running::start_env(&sb, "none", &["--time-scale", "0.1"], env);
    let status = r.finish(RUN_LIMIT);
    assert!(status.success(), "plbbench run failed ({status}):\n{}", sb.stderr());
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(sb.out().join("summary.json")).unwrap()).unwrap();
    let html = std::fs::read_to_string(sb.out().join("report.html")).unwrap();
    let enforced = summary["environment"]["cpu_budget_enforced"].as_bool().unwrap();
    assert_cleaned_up(&sb, &r.seen, enforced);
    (summary, html)
}

fn verdict<'a>(s: &'a Value, name: &str) -> &'a Value {
    s["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("no verdict {name}: {s}"))
}

fn num(g: &Value, k: &str) -> f64 {
    g[k].as_f64().unwrap_or_else(|| panic!("generator.{k} missing: {g}"))
}

#[test]
fn normal_run_is_not_flagged_and_a_starved_generator_is() {
    if !have_postgres() {
        return;
    }
    let (s, html) = run("guard-normal", &[]);
    let g = &s["generator"];
    eprintln!("normal run: generator {g}");
    assert_eq!(g["saturated"], Value::Bool(false), "normal run flagged: {g}");
    assert!(num(g, "lag_samples") >= 100.0, "too few schedule lags measured: {g}");
    assert!(num(g, "cpu_max_cores") > 0.0 && num(g, "cpu_max_cores") <= 0.8, "{g}");
    assert!(num(g, "lag_p99_ms") <= 10.0 && num(g, "lag_p50_ms") <= num(g, "lag_p99_ms"), "{g}");
    assert!(num(g, "rss_peak_mib") > 1.0 && num(g, "sessions_peak") >= 1.0, "{g}");
    assert_eq!(verdict(&s, "generator not saturated")["ok"], Value::Bool(true));
    assert!(!html.contains("generator-banner") && html.contains("load generator"));

    // 40 ms of CPU per session start and query: at this load (tens of
    // starts and queries a second) more than the 0.8-core limit, and the
    // other clients' timers fire late behind the spinning worker threads.
    let (s, html) = run("guard-starved", &[("PLBBENCH_TEST_GENERATOR_BURN_MS", "40")]);
    let g = &s["generator"];
    eprintln!("starved run: generator {g}");
    assert_eq!(g["saturated"], Value::Bool(true), "starved run not flagged: {g}");
    assert!(num(g, "cpu_max_cores") > 0.8 || num(g, "lag_p99_ms") > 10.0, "{g}");
    let v = verdict(&s, "generator not saturated");
    assert_eq!(v["ok"], Value::Bool(false));
    assert!(v["detail"].as_str().unwrap().contains("measures the generator, not the database"), "{v}");
    let banner = &html[html.find(r#"id="generator-banner""#).expect("no generator banner in report.html")..];
    assert!(banner.contains("GENERATOR SATURATED"));
}
