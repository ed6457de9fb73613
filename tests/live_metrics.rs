//! `--metrics-addr` end to end (issue 8): a real `plbbench run --cluster
//! local --admission modes --faults cascade` at `--time-scale 0.2` (60 s)
//! is scraped over HTTP every 0.5 s while it runs. Every scrape must carry
//! the degradation and router metrics with plausible values (modes 0..3,
//! 0/1 health, one role per healthy replica, session counts within T,
//! counters that never go back), the health gauges must show the cascade's
//! Downs, and the last scrape must agree with the run folder's own counts.
//! Needs PostgreSQL (scripts/install-postgres.sh); bounded by RUN_LIMIT.

mod common;
use common::have_postgres;
use common::run::*;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One scrape: metric line (name with labels) -> value.
type Scrape = BTreeMap<String, f64>;

fn scrape(port: u16) -> Option<(String, Scrape)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.lines().next()?.to_string();
    let values = body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' ').and_then(|(k, v)| Some((k.to_string(), v.parse().ok()?))))
        .collect();
    Some((status, values))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn sum(s: &Scrape, prefix: &str) -> f64 {
    s.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, v)| v).sum()
}

#[test]
fn metrics_endpoint_serves_plausible_values_during_a_real_run() {
    if !have_postgres() {
        return;
    }
    let _one = serial();
    let sb = Sandbox::new("metrics");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut run = Running::start(
        &sb,
        "cascade",
        &["--time-scale", "0.2", "--raw", "--admission", "modes", "--metrics-addr", &addr],
    );
    let mut scrapes: Vec<Scrape> = Vec::new();
    let status = loop {
        if let Some(st) = run.poll(RUN_LIMIT, |_| true) {
            break st;
        }
        if let Some((status, values)) = scrape(port) {
            assert_eq!(status, "HTTP/1.1 200 OK");
            scrapes.push(values);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(status.success(), "run failed ({status}):\n{}", sb.stderr());
    assert!(scrapes.len() >= 60, "only {} scrapes of a 60 s run", scrapes.len());
    for (i, s) in scrapes.iter().enumerate() {
        let mode = s["plbbench_degradation_mode"];
        assert!((0.0..=3.0).contains(&mode) && mode.fract() == 0.0, "mode {mode}");
        assert!(s.contains_key("plbbench_degradation_transitions_total"));
        for class in ["premium", "freemium"] {
            assert!(s.contains_key(&format!("plbbench_degradation_rejections_total{{class=\"{class}\"}}")), "{s:?}");
        }
        let active = sum(s, "plbbench_router_active_sessions");
        assert!((0.0..=1000.0).contains(&active), "{active} active sessions with T=1000");
        for r in 1..=K {
            let healthy = s[&format!("plbbench_router_replica_healthy{{replica=\"r{r}\"}}")];
            assert!(healthy == 0.0 || healthy == 1.0);
            let roles = sum(s, &format!("plbbench_router_role{{replica=\"r{r}\""));
            assert!(healthy == 0.0 || roles == 1.0, "healthy r{r} has {roles} roles");
        }
        if i > 0 {
            let p = &scrapes[i - 1];
            for k in p.keys().filter(|k| k.contains("_total")) {
                assert!(s[k] >= p[k], "counter {k} went back");
            }
        }
    }
    let healthy = |s: &Scrape| sum(s, "plbbench_router_replica_healthy");
    assert!(scrapes.iter().any(|s| healthy(s) == K as f64), "never all replicas healthy");
    assert!(scrapes.iter().any(|s| healthy(s) == (K - 2) as f64), "cascade's two Downs never seen");
    assert!(scrapes.iter().any(|s| sum(s, "plbbench_router_active_sessions") > 0.0), "never an active session");
    // The last scrape lags the end by at most a second or so: its counters
    // are bounded by the folder's, which counted everything.
    let f = Folder::read(&sb.out());
    assert_consistent(&f);
    let last = scrapes.last().unwrap();
    let mode_events = f.events.iter().filter(|e| e["kind"] == "mode").count() as f64;
    assert!(last["plbbench_degradation_transitions_total"] <= mode_events);
    let rejected: f64 = f.phases.iter().map(|r| num(r, "rejected")).sum();
    assert!(sum(last, "plbbench_degradation_rejections_total") <= rejected);
    eprintln!(
        "{} scrapes; last: mode {}, transitions {}, rejections {}; folder: {mode_events} mode changes, {rejected} rejected",
        scrapes.len(),
        last["plbbench_degradation_mode"],
        last["plbbench_degradation_transitions_total"],
        sum(last, "plbbench_degradation_rejections_total")
    );
}
