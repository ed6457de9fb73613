//! `--metrics-addr` end to end (docs/resilience.md): a real `plbbench run --cluster
//! local --admission modes --faults cascade` at `--time-scale 0.2` (60 s)
//! is scraped over HTTP every 0.5 s while it runs. Every scrape must carry
//! the degradation and router metrics with plausible values (modes 0..3,
//! 0/1 health, one role per healthy replica, session counts within T,
//! counters that never go back), the health gauges must show the cascade's
//! Downs, and the last scrape must agree with the run folder's own counts.
//! Beside it a real Prometheus (Debian's, scripts/install-prometheus.sh)
//! scrapes the endpoint every second; its HTTP API must give back each
//! class's completed queries (within the last second's of the folder's)
//! and a p95 from the latency histogram in the range of the run's own.
//! Needs PostgreSQL (scripts/install-postgres.sh) and prometheus; bounded
//! by RUN_LIMIT.

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

/// A Prometheus server on a free loopback port scraping `target` every
/// second, with its storage in `dir`; killed on drop.
struct Prometheus {
    child: std::process::Child,
    port: u16,
}

impl Prometheus {
    fn start(dir: &std::path::Path, target: &str) -> Prometheus {
        std::fs::create_dir_all(dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: plbbench\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = std::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("Debian's prometheus is not installed: run scripts/install-prometheus.sh (scripts/setup.sh does)");
        let p = Prometheus { child, port };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while http_get(port, "/-/ready").is_none_or(|(status, _)| !status.contains("200")) {
            assert!(std::time::Instant::now() < deadline, "prometheus not ready after 30 s");
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    /// An instant query's result: label value of `by` -> value.
    fn query(&self, promql: &str, by: &str) -> BTreeMap<String, f64> {
        let path = format!("/api/v1/query?query={}", encode(promql));
        let (status, body) = http_get(self.port, &path).expect("prometheus answers");
        assert!(status.contains("200"), "{status}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["metric"][by].as_str().unwrap().to_string(), r["value"][1].as_str().unwrap().parse().unwrap()))
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET on 127.0.0.1:port: the status line and the body.
fn http_get(port: u16, path: &str) -> Option<(String, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// Percent-encodes a query string value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
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
    let prometheus = Prometheus::start(&sb.root.join("prometheus"), &addr);
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
    // Prometheus kept every class's goodput and latency: its last sample of
    // the counters is at most ~1 s before the end, and the p95 of the whole
    // run's histogram (buckets a factor 2 apart) lies in the range of the
    // folder's per-phase p95s, widened by a bucket each way.
    // The target is gone now and its series are marked stale, so each
    // query takes the last value over the run (max_over_time: the counters
    // only grow).
    let ok = prometheus.query("sum by (class) (max_over_time(plbbench_queries_total{outcome=\"ok\"}[10m]))", "class");
    let p95 = prometheus.query(
        "histogram_quantile(0.95, sum by (le, class) (max_over_time(plbbench_query_latency_seconds_bucket[10m]))) * 1000",
        "class",
    );
    for (class, short) in [("premium", "P"), ("freemium", "F")] {
        let rows: Vec<_> = f.phases.iter().filter(|r| r["class"] == short).collect();
        let completed: f64 = rows.iter().map(|r| num(r, "completed")).sum();
        let got = ok.get(class).copied().unwrap_or(0.0);
        assert!(
            got >= 0.9 * completed && got <= completed * 1.01 + 50.0,
            "{class}: prometheus {got}, folder {completed}"
        );
        let phase_p95: Vec<f64> = rows.iter().filter(|r| r["phase"] != "warmup").map(|r| num(r, "p95_ms")).collect();
        let (lo, hi) = phase_p95.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &p| (lo.min(p), hi.max(p)));
        let got = p95[class];
        assert!(got >= lo / 2.0 && got <= hi * 2.0, "{class}: prometheus p95 {got} ms, the folder's {phase_p95:?}");
        eprintln!("prometheus: {class} {} ok queries (folder {completed}), p95 {got:.1} ms", ok[class]);
    }
    eprintln!(
        "{} scrapes; last: mode {}, transitions {}, rejections {}; folder: {mode_events} mode changes, {rejected} rejected",
        scrapes.len(),
        last["plbbench_degradation_mode"],
        last["plbbench_degradation_transitions_total"],
        sum(last, "plbbench_degradation_rejections_total")
    );
}
