//! `--metrics-addr` ([admission
//! modes](docs/resilience.md#graceful-degradation-admission-modes) names
//! its gauges): Prometheus metrics served during a real run, so an operator
//! can watch the degradation mode and the router as they change. The text
//! encoding is prometheus-client's (OpenMetrics text); the server is a
//! minimal HTTP/1.1 responder on a tokio listener that answers `GET
//! /metrics` and closes each connection. The driver refreshes the router
//! and gate values once per second; every query that ends is counted per
//! class and outcome, and its latency (from the intended start, as the
//! run's figures) goes into a per-class histogram, so a Prometheus can draw
//! goodput and p95 while the run goes (docs/grafana/plbbench.json).

use crate::core::admission::Gate;
use crate::core::model::{Class, ReplicaId, Role};
use crate::core::router::Router;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabel {
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueryLabel {
    class: String,
    outcome: String,
}

/// Latency buckets: 0.5 ms doubling to 32.8 s (the query deadline is 30 s).
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 17))
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SessionLabel {
    class: String,
    replica: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplicaLabel {
    replica: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SqlstateLabel {
    sqlstate: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConfirmLabel {
    replica: String,
    seen: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplicaClassLabel {
    replica: String,
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplicaRoleLabel {
    replica: String,
    role: String,
}

/// How a proxied session's start ended (`plbbench_proxy_sessions`' label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionOutcome {
    /// On a replica, ready.
    Routed,
    /// The replica refused the proxy's login.
    Failed,
    /// No replica could take it, or admission refused it.
    Rejected,
}

impl SessionOutcome {
    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            SessionOutcome::Routed => "routed",
            SessionOutcome::Failed => "failed",
            SessionOutcome::Rejected => "rejected",
        }
    }
}

/// Every live metric and the registry that encodes them.
pub struct LiveMetrics {
    registry: Registry,
    mode: Gauge,
    transitions: Counter,
    rejections: Family<ClassLabel, Counter>,
    active: Family<ReplicaClassLabel, Gauge>,
    role: Family<ReplicaRoleLabel, Gauge>,
    healthy: Family<ReplicaLabel, Gauge>,
    queries: Family<QueryLabel, Counter>,
    latency: Family<ClassLabel, Histogram, fn() -> Histogram>,
    sessions: Family<SessionLabel, Counter>,
    connect: Family<ClassLabel, Histogram, fn() -> Histogram>,
    renamed: Family<ClassLabel, Counter>,
    server_ended: Family<SqlstateLabel, Counter>,
    confirms: Family<ConfirmLabel, Counter>,
    violation_refusals: Counter,
    seen: (u64, [u64; 2]),
}

impl Default for LiveMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveMetrics {
    /// Registers every metric (all zero until the first refresh).
    pub fn new() -> LiveMetrics {
        let mut registry = Registry::default();
        let m = LiveMetrics {
            mode: Gauge::default(),
            transitions: Counter::default(),
            rejections: Family::default(),
            active: Family::default(),
            role: Family::default(),
            healthy: Family::default(),
            queries: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            sessions: Family::default(),
            connect: Family::new_with_constructor(latency_histogram),
            renamed: Family::default(),
            server_ended: Family::default(),
            confirms: Family::default(),
            violation_refusals: Counter::default(),
            seen: (0, [0; 2]),
            registry: Registry::default(),
        };
        registry.register(
            "plbbench_degradation_mode",
            "Degradation mode (0=Normal, 1=Cautious, 2=Restricted, 3=Survival)",
            m.mode.clone(),
        );
        registry.register("plbbench_degradation_transitions", "Degradation mode transitions", m.transitions.clone());
        registry.register(
            "plbbench_degradation_rejections",
            "Sessions rejected by admission, per class",
            m.rejections.clone(),
        );
        registry.register("plbbench_router_active_sessions", "Active sessions per replica and class", m.active.clone());
        registry.register("plbbench_router_role", "1 for the replica's current PLB role", m.role.clone());
        registry.register(
            "plbbench_router_replica_healthy",
            "1 when the router considers the replica healthy",
            m.healthy.clone(),
        );
        registry.register("plbbench_queries", "Queries ended, per class and outcome (ok or error)", m.queries.clone());
        registry.register(
            "plbbench_query_latency_seconds",
            "Latency of completed queries from their intended start, per class",
            m.latency.clone(),
        );
        registry.register(
            "plbbench_proxy_sessions",
            "plbbench proxy: sessions per class, replica and outcome (routed, failed: the replica refused, rejected: no replica or admission)",
            m.sessions.clone(),
        );
        registry.register(
            "plbbench_proxy_connect_seconds",
            "plbbench proxy: time from a client's login to its session ready on a replica (admission wait and server login)",
            m.connect.clone(),
        );
        registry.register(
            "plbbench_proxy_class_after_routing",
            "plbbench proxy: sessions that named another class (SET application_name) after they were routed, per class routed as; they stay where they are",
            m.renamed.clone(),
        );
        registry.register(
            "plbbench_proxy_server_ended",
            "plbbench proxy: sessions the server ended with its own ErrorResponse, per SQLSTATE (passed on to the client; no evidence against the replica)",
            m.server_ended.clone(),
        );
        registry.register(
            "plbbench_proxy_confirm_probes",
            "plbbench proxy: probes confirming a client's lost connection or refused connect, per replica and what they saw (ok, refused, timeout); only a failed one is evidence",
            m.confirms.clone(),
        );
        registry.register(
            "plbbench_proxy_violation_refusals",
            "plbbench proxy: logins refused (53400) because the client's sessions ended in protocol violations (08P01) faster than its allowance",
            m.violation_refusals.clone(),
        );
        for class in Class::ALL {
            let label = ClassLabel { class: class.long().into() };
            let _ = m.rejections.get_or_create(&label);
            let _ = m.renamed.get_or_create(&label);
            let _ = m.latency.get_or_create(&label);
            for outcome in ["ok", "error"] {
                let _ = m.queries.get_or_create(&QueryLabel { class: class.long().into(), outcome: outcome.into() });
            }
        }
        LiveMetrics { registry, ..m }
    }

    /// Counts a query that ended: its outcome and, when it completed, its
    /// latency from the intended start.
    pub fn observe(&mut self, class: Class, ok: bool, latency_s: f64) {
        let outcome = if ok { "ok" } else { "error" };
        self.queries.get_or_create(&QueryLabel { class: class.long().into(), outcome: outcome.into() }).inc();
        if ok {
            self.latency.get_or_create(&ClassLabel { class: class.long().into() }).observe(latency_s);
        }
    }

    /// `plbbench proxy`: a session's outcome on its replica (`None`: it got
    /// none) and, when routed, the time it took to be ready.
    pub fn proxy_session(&mut self, class: Class, replica: Option<ReplicaId>, outcome: SessionOutcome, took_s: f64) {
        let replica = replica.map(|r| r.to_string()).unwrap_or_default();
        let l = SessionLabel { class: class.long().into(), replica, outcome: outcome.name().into() };
        self.sessions.get_or_create(&l).inc();
        if outcome == SessionOutcome::Routed {
            self.connect.get_or_create(&ClassLabel { class: class.long().into() }).observe(took_s);
        }
    }

    /// `plbbench proxy`: a session routed as `class` named another class
    /// afterwards (counted once per session).
    pub fn proxy_class_after_routing(&mut self, class: Class) {
        self.renamed.get_or_create(&ClassLabel { class: class.long().into() }).inc();
    }

    /// `plbbench proxy`: the server ended a session with its own error.
    pub fn proxy_server_ended(&mut self, sqlstate: &str) {
        self.server_ended.get_or_create(&SqlstateLabel { sqlstate: sqlstate.into() }).inc();
    }

    /// `plbbench proxy`: a confirming probe of `replica` saw `seen`.
    pub fn proxy_confirm(&mut self, replica: ReplicaId, seen: &str) {
        self.confirms.get_or_create(&ConfirmLabel { replica: replica.to_string(), seen: seen.into() }).inc();
    }

    /// `plbbench proxy`: a login refused for protocol violations.
    pub fn proxy_violation_refusal(&mut self) {
        self.violation_refusals.inc();
    }

    /// Copies the router's and the gate's state into the metrics.
    pub fn refresh(&mut self, router: &Router, gate: Option<&Gate>) {
        for r in 0..router.config().replicas {
            let replica = ReplicaId(r).to_string();
            let active = router.active(ReplicaId(r));
            for class in Class::ALL {
                let l = ReplicaClassLabel { replica: replica.clone(), class: class.long().into() };
                self.active.get_or_create(&l).set(i64::from(active[class.idx()]));
            }
            for role in Role::ALL {
                let l = ReplicaRoleLabel { replica: replica.clone(), role: role.to_string() };
                self.role.get_or_create(&l).set(i64::from(router.role(ReplicaId(r)) == role));
            }
            self.healthy.get_or_create(&ReplicaLabel { replica }).set(i64::from(router.is_healthy(ReplicaId(r))));
        }
        let Some(gate) = gate else { return };
        self.mode.set(gate.mode().idx() as i64);
        let transitions = gate.manager().transitions();
        self.transitions.inc_by(transitions - self.seen.0);
        self.seen.0 = transitions;
        for class in Class::ALL {
            let n = gate.rejected(class);
            let c = self.rejections.get_or_create(&ClassLabel { class: class.long().into() });
            c.inc_by(n - self.seen.1[class.idx()]);
            self.seen.1[class.idx()] = n;
        }
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

/// Binds the listener now, so a bad or busy address is refused before the
/// cluster starts.
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Serves `metrics` on `listener` until the task is aborted.
pub async fn serve(listener: std::net::TcpListener, metrics: Arc<Mutex<LiveMetrics>>) {
    let Ok(listener) = TcpListener::from_std(listener) else { return };
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), respond(stream, &metrics)).await;
        });
    }
}

/// Reads one request head (at most 8 KiB) and answers it.
async fn respond(mut stream: TcpStream, metrics: &Mutex<LiveMetrics>) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 8192 {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let target = head.lines().next().unwrap_or("").split_whitespace().take(2).collect::<Vec<_>>();
    let (status, ctype, body) = match target.as_slice() {
        ["GET", "/metrics"] => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.lock().expect("metrics lock").encode(),
        ),
        _ => ("404 Not Found", "text/plain; charset=utf-8", "try GET /metrics\n".to_string()),
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::degradation::{DegradationKnobs, Load};
    use crate::core::router::{RouterConfig, Strategy};

    #[test]
    fn encodes_mode_transitions_rejections_and_router_gauges() {
        let mut router = Router::new(RouterConfig::for_tests(Strategy::Plb, [1, 1, 0]));
        let knobs = DegradationKnobs { queue_capacity: 1, min_mode_duration_s: Some(0.0), ..Default::default() };
        let sizing = crate::core::admission::Sizing { replicas: 2, replica_sessions: 1, service_ms: 1.0 };
        let mut gate = Gate::new(knobs, 1.0, sizing);
        router.admit(Class::P);
        gate.observe(1.0, Load { cpu_pct: Some(99.0), ..Default::default() });
        // Freemium: one on Mixed, one on the Premium replica (one each at
        // Survival's share), one queued, the fourth refused.
        for client in 0..4 {
            gate.request(&mut router, client, Class::F, 1.0);
        }
        let mut m = LiveMetrics::new();
        m.refresh(&router, Some(&gate));
        m.refresh(&router, Some(&gate));
        m.observe(Class::P, true, 0.003);
        m.observe(Class::P, true, 0.0007);
        m.observe(Class::F, false, 2.0);
        let text = m.encode();
        for line in [
            "plbbench_degradation_mode 3",
            "plbbench_degradation_transitions_total 1",
            "plbbench_degradation_rejections_total{class=\"freemium\"} 1",
            "plbbench_degradation_rejections_total{class=\"premium\"} 0",
            "plbbench_router_active_sessions{replica=\"r1\",class=\"premium\"} 1",
            "plbbench_router_role{replica=\"r1\",role=\"P\"} 1",
            "plbbench_router_replica_healthy{replica=\"r2\"} 1",
            "plbbench_queries_total{class=\"premium\",outcome=\"ok\"} 2",
            "plbbench_queries_total{class=\"freemium\",outcome=\"error\"} 1",
            "plbbench_queries_total{class=\"freemium\",outcome=\"ok\"} 0",
            "plbbench_query_latency_seconds_count{class=\"premium\"} 2",
            "plbbench_query_latency_seconds_bucket{le=\"0.001\",class=\"premium\"} 1",
            "plbbench_query_latency_seconds_bucket{le=\"0.004\",class=\"premium\"} 2",
            "plbbench_query_latency_seconds_count{class=\"freemium\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing `{line}` in\n{text}");
        }
    }

    /// Every series the committed Grafana dashboard draws is one this
    /// endpoint serves.
    #[test]
    fn the_grafana_dashboard_asks_only_for_served_metrics() {
        let mut m = LiveMetrics::new();
        m.refresh(&Router::new(RouterConfig::for_tests(Strategy::Plb, [1, 0, 1])), None);
        let text = m.encode();
        let served: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next()).collect();
        let d: serde_json::Value = serde_json::from_str(include_str!("../../docs/grafana/plbbench.json")).unwrap();
        let mut asked = 0;
        for panel in d["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().unwrap() {
                let expr = target["expr"].as_str().unwrap();
                for name in expr
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|w| w.starts_with("plbbench_"))
                {
                    let base = ["_total", "_bucket", "_count", "_sum"]
                        .iter()
                        .fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
                    assert!(served.contains(&base), "{expr}: {name} is not served ({served:?})");
                    asked += 1;
                }
            }
        }
        assert!(asked >= 8, "{asked}");
    }
}
