//! Fleet-scale outputs. A run's per-replica rows (replicas.csv, one chart
//! line and one role lane per replica) grow with K x run length and stop
//! being readable long before K reaches the thousands, so above
//! [`FLEET_ROWS`] replicas the collector keeps, per sample, each role's
//! distribution instead: how many replicas of the role are up and the
//! p50, p95 and max of their CPU fraction and of their open sessions
//! (roles.csv, [manual](docs/manual.md#rolescsv)). Pure.

use crate::core::model::Role;
use serde::{Deserialize, Serialize};

/// Replicas up to which a run keeps per-replica rows (replicas.csv, a CPU
/// line and a role lane per replica); above it, roles.csv's per-role
/// distributions replace them.
pub const FLEET_ROWS: usize = 50;

/// Whether a run of `replicas` replicas writes per-role rows instead of
/// per-replica ones.
pub fn is_fleet(replicas: usize) -> bool {
    replicas > FLEET_ROWS
}

/// A row of roles.csv: one role's replicas that are up at one sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoleRow {
    /// The sample's time, s.
    pub t_s: f64,
    /// The role.
    pub role: Role,
    /// Replicas of the role that are up.
    pub replicas: u32,
    /// Quantiles of their CPU fraction over the second before (empty on
    /// the first sample, or when no replica of the role is up).
    pub cpu_p50: Option<f64>,
    pub cpu_p95: Option<f64>,
    pub cpu_max: Option<f64>,
    /// Quantiles of their open sessions (both classes).
    pub sessions_p50: Option<u32>,
    pub sessions_p95: Option<u32>,
    pub sessions_max: Option<u32>,
}

/// One replica at a sample, as the per-role distributions read it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Seen {
    /// Its role.
    pub role: Role,
    /// Whether it is up.
    pub up: bool,
    /// Its CPU fraction over the second before, if measured.
    pub cpu: Option<f64>,
    /// Its open sessions.
    pub sessions: u32,
}

/// The nearest-rank quantile `q` of `sorted` (ascending), if any.
fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    let n = sorted.len();
    (n > 0).then(|| sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1])
}

/// Per role (P, M, F), the distribution of the replicas that are up.
pub fn role_rows(t_s: f64, seen: &[Seen]) -> Vec<RoleRow> {
    Role::ALL
        .into_iter()
        .map(|role| {
            let up = || seen.iter().filter(move |s| s.up && s.role == role);
            let mut cpu: Vec<f64> = up().filter_map(|s| s.cpu).collect();
            cpu.sort_by(f64::total_cmp);
            let mut sessions: Vec<u32> = up().map(|s| s.sessions).collect();
            sessions.sort_unstable();
            RoleRow {
                t_s,
                role,
                replicas: sessions.len() as u32,
                cpu_p50: quantile(&cpu, 0.50),
                cpu_p95: quantile(&cpu, 0.95),
                cpu_max: cpu.last().copied(),
                sessions_p50: quantile(&sessions, 0.50),
                sessions_p95: quantile(&sessions, 0.95),
                sessions_max: sessions.last().copied(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{is_fleet, role_rows, Seen, FLEET_ROWS};
    use crate::core::model::Role;

    #[test]
    fn the_threshold_is_inclusive_of_per_replica_rows() {
        assert!(!is_fleet(5));
        assert!(!is_fleet(FLEET_ROWS));
        assert!(is_fleet(FLEET_ROWS + 1));
    }

    #[test]
    fn each_role_gets_nearest_rank_quantiles_of_its_up_replicas() {
        let mut seen: Vec<Seen> =
            (1..=100).map(|i| Seen { role: Role::M, up: true, cpu: Some(f64::from(i) / 100.0), sessions: i }).collect();
        seen.push(Seen { role: Role::M, up: false, cpu: Some(9.0), sessions: 999 });
        seen.push(Seen { role: Role::P, up: true, cpu: None, sessions: 3 });
        let rows = role_rows(7.0, &seen);
        assert_eq!(rows.len(), 3);
        let (p, m, f) = (&rows[0], &rows[1], &rows[2]);
        assert_eq!((m.replicas, m.cpu_p50, m.cpu_p95, m.cpu_max), (100, Some(0.5), Some(0.95), Some(1.0)));
        assert_eq!((m.sessions_p50, m.sessions_p95, m.sessions_max), (Some(50), Some(95), Some(100)));
        assert_eq!((p.replicas, p.cpu_p50, p.sessions_max), (1, None, Some(3)));
        assert_eq!((f.replicas, f.cpu_max, f.sessions_p50), (0, None, None));
        assert!(rows.iter().all(|r| r.t_s == 7.0));
    }
}
