//! A workload's operating point: the load it means to offer, stated against
//! the cluster's CPU budget instead of in milliseconds of pause. A pause
//! sized from one host's costs offers another host a different share of its
//! capacity; stated this way, the run re-sizes the pause from the costs of
//! the calibration it uses, so the same file means the same regime on any
//! host (docs/measurement.md, "An operating point that travels").

use serde::{Deserialize, Serialize};

/// What the operating point's utilisation is a fraction of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// The whole cluster's budget, K x C (as `--load`).
    Cluster,
    /// The busier partition's budget when each class has its own replicas
    /// (rr-split's `--split`): the most constrained layout of the main
    /// comparison.
    Partition,
}

impl Basis {
    /// The name used in files and messages.
    pub fn name(self) -> &'static str {
        match self {
            Basis::Cluster => "cluster",
            Basis::Partition => "partition",
        }
    }
}

/// The load a workload offers at a reference population, as a fraction of
/// a budget; `--T` and `--mix` then move the load from there, as they do
/// for a pause given in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatingPoint {
    /// Offered CPU over the budget of `basis`, at zero queueing.
    pub utilisation: f64,
    /// What `utilisation` is a fraction of.
    pub basis: Basis,
    /// The reference population T.
    pub clients: u32,
    /// The reference mix's Premium percentage; absent, the run's own mix:
    /// the pause is re-sized for every mix so that each offers the same
    /// load (the findings map's open cells, `--load`, do the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub premium_pct: Option<u32>,
    /// The reference cluster's replicas K; absent, the run's. With a
    /// reference cluster, `--replicas` and `--cpus` move the load from the
    /// point as `--T` does, instead of re-sizing the pause to keep it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<usize>,
    /// The reference cluster's cores per replica C; absent, the run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
}

impl OperatingPoint {
    /// True when the point holds at every mix (no reference mix): the run
    /// re-sizes the pause for its own mix even without a calibration.
    pub fn per_mix(&self) -> bool {
        self.premium_pct.is_none()
    }

    /// The field and reason of the first value out of range.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !(self.utilisation.is_finite() && self.utilisation > 0.0) {
            return Err((
                "operating_point.utilisation",
                format!("must be a positive fraction, got {}", self.utilisation),
            ));
        }
        if self.clients == 0 {
            return Err(("operating_point.clients", "must be at least 1".into()));
        }
        if self.replicas == Some(0) {
            return Err(("operating_point.replicas", "must be at least 1".into()));
        }
        if let Some(c) = self.cpus.filter(|c| !(c.is_finite() && *c > 0.0)) {
            return Err(("operating_point.cpus", format!("must be a positive number of cores, got {c}")));
        }
        if let Some(pct) = self.premium_pct.filter(|p| *p > 100) {
            return Err(("operating_point.premium_pct", format!("must be at most 100, got {pct}")));
        }
        Ok(())
    }
}
