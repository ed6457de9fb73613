//! What a backend hands back besides the collector's contents: the
//! sessions still open, how the run ended, and the verdicts it found on the
//! way (the CPU budget, the stop deadline, the saturation guard). It lives
//! in the core so that the simulator, the real driver and the run command
//! all name the same type without any of them importing upward.

use super::saturation::GeneratorReport;
use crate::error::Signal;
use serde::{Deserialize, Serialize};

/// One check on the run, shown in the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// Short name.
    pub name: String,
    /// Whether it holds.
    pub ok: bool,
    /// What was found.
    pub detail: String,
}

/// What a backend reports besides the collector's contents.
#[derive(Debug, Default)]
pub struct BackendOutcome {
    /// Sessions still open at the end, per class.
    pub in_flight: [u64; 2],
    /// True when the run was interrupted.
    pub partial: bool,
    /// PostgreSQL version, for real backends.
    pub postgres_version: Option<String>,
    /// Whether the CPU budget was enforced.
    pub cpu_budget_enforced: bool,
    /// Extra verdicts (detection, saturation, ...).
    pub verdicts: Vec<Verdict>,
    /// The first signal, when interrupted.
    pub interrupted_by: Option<Signal>,
    /// Real backends: how long stopping took past the planned end.
    pub stop_overrun_s: Option<f64>,
    /// Real backends: how hard plbbench itself worked (saturation guard).
    pub generator: Option<GeneratorReport>,
    /// `max_connections` of the replicas, when the backend set it (the
    /// simulator, a cluster the run started); `None` for a cluster it
    /// found running or an external one.
    pub max_connections: Option<u32>,
    /// `--via-proxy`: what routed the sessions (the proxy process).
    pub via_proxy: Option<String>,
    /// The simulator's tier of routers (`--routers`): what stale counts did.
    pub tier: Option<super::tier::TierBooks>,
    /// `--proxies N`: what the run's tier of proxies did.
    pub proxy_tier: Option<super::proxy_tier::TierReport>,
    /// `--admission modes`: what the signals did while a mode was degraded.
    pub modes: Option<super::degradation::ModeBooks>,
}
