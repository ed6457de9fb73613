//! The memory a simulated run will need, estimated before it starts, so a
//! run that cannot fit is refused with one line (exit status 2) instead of
//! being killed by the kernel part-way through. The figures are the
//! simulator's own data structures, measured on this build
//! ([performance](docs/performance.md#fleets)): per client (its script's
//! generator, its state, its agenda slot), per replica (server, router
//! entry and indexes, health state), per replica and simulated second (the
//! CPU series kept for the per-phase means, the session flow; with
//! per-replica rows up to [`FLEET_ROWS`](crate::core::metrics::FLEET_ROWS) replicas) and a fixed part. Real
//! clusters are not estimated: their memory is the server's.

use super::plan::{ClusterSpec, Plan};
use crate::core::metrics::is_fleet;
use crate::core::model::Class;
use crate::core::workload::Workload;
use crate::error::{input, Error};

/// Bytes per client at the peak (the scripts and the clients' state are
/// both alive while the simulator starts): an upper bound, over twice the
/// 250 bytes measured beyond the other terms at T=1M, K=5,000 (366 MiB at
/// the peak, since the clients' generators hold one block).
const PER_CLIENT: f64 = 600.0;
/// Bytes per replica.
const PER_REPLICA: f64 = 4_096.0;
/// Bytes per replica and simulated second: the CPU series and the flow.
const PER_REPLICA_SECOND: f64 = 32.0;
/// Bytes per replica and simulated second of replicas.csv's rows, up to
/// `FLEET_ROWS` replicas.
const PER_ROW: f64 = 112.0;
/// Bytes per raw query row (`--raw`).
const PER_RAW_ROW: f64 = 96.0;
/// The process's fixed part: code, the workload, histograms, the report.
const FIXED: f64 = 64.0 * 1024.0 * 1024.0;

/// A run's estimated peak, bytes.
pub fn estimate(clients: u32, replicas: usize, seconds: f64, raw_queries: Option<f64>) -> f64 {
    let (t, k) = (f64::from(clients), replicas as f64);
    let rows = if is_fleet(replicas) { 0.0 } else { PER_ROW * k * seconds };
    FIXED
        + PER_CLIENT * t
        + PER_REPLICA * k
        + PER_REPLICA_SECOND * k * seconds
        + rows
        + raw_queries.map_or(0.0, |q| q * PER_RAW_ROW)
}

/// Queries a client sends per second at most: a session's mean queries
/// over its cycle with no queueing (think before it, thinks between).
fn queries_per_client_s(w: &Workload) -> f64 {
    let s = &w.session;
    let n = f64::from(s.queries_min + s.queries_max) / 2.0;
    let cpu_ms = w.mean_cpu_ms(Class::P).min(w.mean_cpu_ms(Class::F));
    let cycle_ms = s.between_ms + (n - 1.0) * s.think_ms + n * cpu_ms;
    n * 1000.0 / cycle_ms.max(1.0)
}

/// Refuses a simulated run whose estimate exceeds `available` bytes.
pub fn check(plan: &Plan, available: u64) -> Result<(), Error> {
    if plan.cluster != ClusterSpec::Sim {
        return Ok(());
    }
    let seconds = plan.phases.last().map_or(0.0, |p| p.end_s);
    let raw = plan.raw.then(|| f64::from(plan.clients) * seconds * queries_per_client_s(&plan.workload));
    let need = estimate(plan.clients, plan.replicas, seconds, raw);
    refuse_over(need, available, plan.clients, plan.replicas, seconds)
}

/// The refusal itself: one line naming the estimate, what it is made of
/// and the memory available.
fn refuse_over(need: f64, available: u64, clients: u32, replicas: usize, seconds: f64) -> Result<(), Error> {
    if need <= available as f64 {
        return Ok(());
    }
    let gib = |b: f64| b / f64::from(1u32 << 30);
    Err(input(
        "memory",
        format!(
            "this run would need about {:.1} GiB (T={clients} clients, K={replicas} replicas, {seconds:.0} s \
             simulated) and {:.1} GiB is available; lower --T, --replicas or --duration",
            gib(need),
            gib(available as f64)
        ),
    ))
}

/// Memory available to this process now, bytes: the system's available
/// memory, or the cgroup's limit if lower.
pub fn available() -> u64 {
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    let system = sys.available_memory();
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok().and_then(|s| s.trim().parse::<u64>().ok());
    cgroup.map_or(system, |c| c.min(system))
}

#[cfg(test)]
mod tests {
    use super::{estimate, refuse_over};
    use crate::core::metrics::FLEET_ROWS;

    #[test]
    fn the_estimate_grows_with_clients_replicas_and_length() {
        let base = estimate(1000, 5, 300.0, None);
        assert!(estimate(2000, 5, 300.0, None) > base);
        assert!(estimate(1000, 10, 300.0, None) > base);
        assert!(estimate(1000, 5, 600.0, None) > base);
        assert!(estimate(1000, 5, 300.0, Some(1e6)) > base);
        // Above the threshold replicas.csv's rows are not kept.
        let (at, above) = (estimate(0, FLEET_ROWS, 300.0, None), estimate(0, FLEET_ROWS + 1, 300.0, None));
        assert!(above < at, "{above} {at}");
    }

    #[test]
    fn the_goal_fits_in_four_gib_and_a_refusal_is_one_line_naming_the_estimate() {
        assert!(estimate(1_000_000, 5000, 300.0, None) < 4.0 * f64::from(1u32 << 30));
        assert!(refuse_over(1e9, 2_000_000_000, 10, 5, 300.0).is_ok());
        let e = refuse_over(3.0 * f64::from(1u32 << 30), 1 << 30, 10, 5, 300.0).unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
        assert!(e.contains("about 3.0 GiB") && e.contains("1.0 GiB is available"), "{e}");
    }
}
