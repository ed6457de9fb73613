//! The simulator on scenarios small enough to follow by hand.

use super::{run, SimInput};
use crate::core::control::Controller;
use crate::core::health::HealthConfig;
use crate::core::metrics::Collector;
use crate::core::phases::Phase;
use crate::core::router::{Router, RouterConfig, Strategy};
use crate::core::schedule;
use crate::core::watch::{Recovery, Watch};
use crate::core::workload::Workload;

/// One Freemium client for 120 s on two replicas of one connection each
/// under round robin, the default workload with short thinks and
/// `close_cpu_ms` of exit work per session: the run's abort reasons.
fn aborts_with_exit_cpu(close_cpu_ms: f64) -> Vec<(String, u64)> {
    let mut w = Workload::parse(include_str!("../../../workloads/analytics.toml")).unwrap();
    w.session.close_cpu_ms = close_cpu_ms;
    (w.session.think_ms, w.session.between_ms) = (10.0, 1000.0);
    let router = Router::new(RouterConfig::for_tests(Strategy::Rr, [1, 0, 1]));
    let watch = Watch::oracle(2, Recovery::None, HealthConfig::default());
    let control = Controller::new(router, watch, None, 1.0, w.client.query_timeout_ms as f64);
    let phases = vec![Phase { name: "baseline".into(), start_s: 0.0, end_s: 120.0, survivors: 2 }];
    let mut col = Collector::new(phases, 2, 1.0, false);
    let input = SimInput {
        workload: &w,
        clients: schedule::clients(1, 0, 0.0, 7),
        control,
        faults: &[],
        cpus: 1.0,
        duration_s: 120.0,
        probe_interval_s: 0.0,
        max_connections: 1,
    };
    let out = run(input, &mut col);
    let metrics = col.finish(&|_, _| true, out.in_flight);
    assert!(metrics.sessions_started[1] >= 3, "three sessions bring the client back to a replica");
    metrics.abort_reasons.into_iter().map(|(_, reason, n)| (reason, n)).collect()
}

/// A PostgreSQL backend keeps its connection slot until its process has
/// exited: the client's third session returns to the first replica while
/// the first session's exit (1,000 s of CPU) still runs there, and finds
/// the server full. An exit that costs nothing frees the slot at once.
#[test]
fn an_exiting_backend_keeps_its_connection_slot_until_its_exit_is_done() {
    let held = aborts_with_exit_cpu(1_000_000.0);
    assert!(held.iter().any(|(reason, n)| reason == "too many clients" && *n > 0), "{held:?}");
    assert_eq!(aborts_with_exit_cpu(0.0), vec![]);
}

/// Twenty Freemium clients log in at once on two replicas of one core,
/// each login 1 s of CPU, under a 5.5 s connect deadline: the connect
/// time-outs by the time the first deadline has passed.
fn login_timeouts(fork_cpu_ms: f64) -> u64 {
    login_timeouts_under(fork_cpu_ms, None)
}

/// [`login_timeouts`] under a login deadline of `login_timeout_ms` (`None`:
/// the connect deadline's).
fn login_timeouts_under(fork_cpu_ms: f64, login_timeout_ms: Option<u64>) -> u64 {
    let mut w = Workload::parse(include_str!("../../../workloads/analytics.toml")).unwrap();
    w.session.connect_cpu_ms = 1000.0;
    w.session.fork_cpu_ms = fork_cpu_ms;
    (w.session.connect_latency_ms, w.session.close_cpu_ms) = (0.0, 0.0);
    (w.session.think_ms, w.session.between_ms) = (1_000_000.0, 0.0);
    w.client.connect_timeout_ms = 5500;
    w.client.login_timeout_ms = login_timeout_ms;
    let router = Router::new(RouterConfig::for_tests(Strategy::Rr, [1, 0, 1]));
    let watch = Watch::oracle(2, Recovery::None, HealthConfig::default());
    let control = Controller::new(router, watch, None, 1.0, w.client.query_timeout_ms as f64);
    let phases = vec![Phase { name: "baseline".into(), start_s: 0.0, end_s: 6.0, survivors: 2 }];
    let mut col = Collector::new(phases, 2, 1.0, false);
    let input = SimInput {
        workload: &w,
        clients: schedule::clients(20, 0, 0.001, 7),
        control,
        faults: &[],
        cpus: 1.0,
        duration_s: 6.0,
        probe_interval_s: 0.0,
        max_connections: 100,
    };
    let out = run(input, &mut col);
    let metrics = col.finish(&|_, _| true, out.in_flight);
    metrics.abort_reasons.iter().filter(|(_, reason, _)| reason == "connect timeout").map(|(_, _, n)| n).sum()
}

/// The postmaster forks one login at a time: of ten logins on a replica,
/// the first five are done within the deadline and the other five wait
/// past it. Shared like queries, the same CPU finishes none of the ten in
/// time.
#[test]
fn logins_queue_for_the_postmaster_one_at_a_time() {
    assert_eq!(login_timeouts(1000.0), 10);
    assert_eq!(login_timeouts(0.0), 20);
    assert!(login_timeouts_under(1000.0, Some(2500)) > 10, "a shorter login deadline of its own governs");
    assert_eq!(login_timeouts_under(1000.0, Some(0)), 0, "a login without a deadline waits");
}
