//! The calibration file (design.md §3, "Operating point"): what one replica
//! spends, measured inside the cluster under its CPU quota at the
//! concurrency of a run, and where and when it was measured. `plbbench
//! calibrate` writes it; the workload's costs are copied from it (a unit
//! test keeps the default workload and the committed file in step) and
//! `run --calibration FILE` lays another machine's figures over a workload,
//! so the simulator and the workload sizing read the same measurements.

use super::model::Class;
use super::workload::{from_toml, Workload};
use serde::{Deserialize, Serialize};

/// A calibration file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// Format version (1).
    pub schema_version: u32,
    /// When it was measured (UTC, RFC 3339).
    pub measured_utc: String,
    /// plbbench version that measured it.
    pub plbbench_version: String,
    /// The machine it was measured on.
    pub machine: Machine,
    /// `SELECT version()` of the measured replica.
    pub postgres_version: String,
    /// The replica's CPU quota, cores (C).
    pub cpus: f64,
    /// Replicas loaded at once while the templates were measured (the
    /// cluster's own load); 1 in files written before it was a choice.
    #[serde(default = "one")]
    pub replicas: u32,
    /// Measurements of each point (the median is the figure); 1 in older files.
    #[serde(default = "one")]
    pub repeats: u32,
    /// Whether the quota was enforced (cgroups writable).
    pub cpu_budget_enforced: bool,
    /// Workload whose templates were measured.
    pub workload: String,
    /// Dataset scale factor.
    pub dataset_scale: f64,
    /// The concurrency whose costs the workload uses (`cpu_ms` below), per replica.
    pub connections: u32,
    /// When that point is paced: its offered CPU as a fraction of the
    /// quota (open loop at `connections`); 0 when it is closed-loop.
    #[serde(default)]
    pub paced_load: f64,
    /// Connection set-up.
    pub connect: ConnectCost,
    /// One entry per query template.
    pub template: Vec<TemplateCost>,
}

/// The machine a calibration was measured on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// Logical cores.
    pub cores: usize,
    /// Memory, GiB.
    pub memory_gib: f64,
    /// CPU model name.
    pub cpu_model: String,
    /// One-minute load average when the measurement started.
    pub load_average: f64,
}

/// What setting up one connection costs the replica: connect, SCRAM
/// authentication, the first prepare and one query, then close.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectCost {
    /// Connections measured (one after another).
    pub connections: u32,
    /// Replica CPU per connection, ms, set-up and close together.
    pub cpu_ms: f64,
    /// Of `cpu_ms`, the part spent after the client closes (the backend's
    /// exit), off the session's latency path; 0 in files written before
    /// it was measured apart.
    #[serde(default)]
    pub close_cpu_ms: f64,
    /// Wall time per connection as the client sees it, ms (one after
    /// another, so the quota binds).
    pub wall_ms: f64,
    /// Median wall time of a set-up on an idle replica with its quota
    /// unspent (connections spaced apart), ms; what of it is not the
    /// set-up's replica CPU is latency outside the replica (the client's
    /// SCRAM, round trips). 0 in files written before it was measured.
    #[serde(default)]
    pub idle_wall_ms: f64,
    /// Of `cpu_ms`, the postmaster's own CPU per connection (forking the
    /// backend and reaping it), ms: the part no two logins do at once. 0 in
    /// files written before it was measured.
    #[serde(default)]
    pub postmaster_cpu_ms: f64,
}

impl ConnectCost {
    /// Set-up latency outside the replica's CPU, ms: the idle wall time
    /// less the set-up's CPU, never negative (0 when not measured).
    pub fn latency_ms(&self) -> f64 {
        if self.idle_wall_ms <= 0.0 {
            return 0.0;
        }
        let set_up = self.cpu_ms - self.close_cpu_ms;
        ((self.idle_wall_ms - set_up).max(0.0) * 100.0).round() / 100.0
    }
}

/// One template's cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateCost {
    /// Template name in the workload.
    pub name: String,
    /// Its class.
    pub class: Class,
    /// Replica CPU per query at `Calibration::connections`, ms: what the
    /// workload's `cpu_ms` is.
    pub cpu_ms: f64,
    /// The replica's capacity for this template under the quota, queries/s
    /// (C / cpu_ms).
    pub capacity_qps: f64,
    /// The measurements at each concurrency.
    pub at: Vec<Point>,
}

/// One closed-loop measurement of a template under the quota.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    /// Connections per replica driving it.
    pub connections: u32,
    /// Open loop: Poisson arrivals at this rate per replica, queries/s,
    /// taken by whichever connection is free; absent: closed loop, each
    /// connection sending its next query at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_qps: Option<f64>,
    /// Queries completed.
    pub queries: u64,
    /// Completed queries per second.
    pub qps: f64,
    /// Replica CPU per query, ms (cgroup CPU over the window / queries);
    /// the median of the repeats.
    pub cpu_ms: f64,
    /// The lowest and highest of the repeats' `cpu_ms` (0 in older files).
    #[serde(default)]
    pub cpu_ms_min: f64,
    /// See `cpu_ms_min`.
    #[serde(default)]
    pub cpu_ms_max: f64,
    /// The replica's CPU use over the window, fraction of the quota.
    pub cpu_fraction: f64,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
}

fn one() -> u32 {
    1
}

/// Why a calibration file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// Not valid TOML for the format.
    #[error("{0}")]
    Parse(String),
    /// A format version this plbbench does not know.
    #[error("field `schema_version`: {0} is newer than this plbbench reads (1)")]
    Version(u32),
    /// The workload has a template the file does not measure.
    #[error("field `template`: no figure for the workload's template {0:?}")]
    Missing(String),
}

impl Calibration {
    /// Parses and checks a calibration file.
    pub fn parse(text: &str) -> Result<Calibration, CalibrationError> {
        let c: Calibration = from_toml(text).map_err(CalibrationError::Parse)?;
        if c.schema_version > 1 {
            return Err(CalibrationError::Version(c.schema_version));
        }
        Ok(c)
    }

    /// Lays the measured costs over `w`: every template's `cpu_ms`, and the
    /// connection's, split into set-up (before the first query) and close.
    /// Every template of `w` must be measured.
    pub fn apply(&self, w: &mut Workload) -> Result<(), CalibrationError> {
        for q in &mut w.query {
            let t = self.template.iter().find(|t| t.name == q.name).ok_or(CalibrationError::Missing(q.name.clone()))?;
            q.cpu_ms = t.cpu_ms;
        }
        w.session.connect_cpu_ms = self.connect.cpu_ms - self.connect.close_cpu_ms;
        w.session.close_cpu_ms = self.connect.close_cpu_ms;
        w.session.connect_latency_ms = self.connect.latency_ms();
        w.session.fork_cpu_ms = self.connect.postmaster_cpu_ms.min(w.session.connect_cpu_ms);
        Ok(())
    }

    /// The file's text: a header saying what it is, then the figures.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string_pretty(self).expect("a calibration serialises");
        format!(
            "# plbbench calibrate: a replica's costs under its CPU quota (design.md §3).\n\
             # cpu_ms is replica CPU per query at `connections` connections on each of `replicas`\n\
             # replicas loaded at once (open loop at `paced_load` of the quota when it is > 0,\n\
             # else closed loop), the median of `repeats` measurements;\n\
             # connect.cpu_ms is one connection's whole cost (connect, SCRAM, prepare, close),\n\
             # connect.close_cpu_ms the part of it spent after the client closes;\n\
             # connect.idle_wall_ms a set-up's median wall time on an idle replica;\n\
             # connect.postmaster_cpu_ms the postmaster's own part of cpu_ms.\n{body}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = include_str!("../../workloads/calibration-local.toml");
    const DEFAULT: &str = include_str!("../../workloads/analytics.toml");
    const PAPER: &str = include_str!("../../workloads/paper.toml");

    #[test]
    fn the_built_in_workloads_carry_the_committed_calibration() {
        let c = Calibration::parse(FILE).unwrap();
        for (file, text) in [("analytics", DEFAULT), ("paper", PAPER)] {
            let w = Workload::parse(text).unwrap();
            let mut calibrated = w.clone();
            c.apply(&mut calibrated).unwrap();
            assert_eq!(calibrated, w, "workloads/{file}.toml's costs differ from workloads/calibration-local.toml");
            assert_eq!(c.dataset_scale, w.dataset.scale);
        }
        assert_eq!(c.workload, "analytics", "the templates were measured as the analytics workload's");
        for t in &c.template {
            assert!(t.at.iter().any(|p| p.connections == c.connections), "{}: no point at {}", t.name, c.connections);
        }
    }

    /// The set-up's latency outside the replica is its idle wall time less
    /// its CPU (the close is not waited for), never negative.
    #[test]
    fn connect_latency_is_the_idle_wall_less_the_set_up_cpu() {
        let mut c = Calibration::parse(FILE).unwrap();
        c.connect.cpu_ms = 7.0;
        c.connect.close_cpu_ms = 2.0;
        c.connect.idle_wall_ms = 6.61;
        assert_eq!(c.connect.latency_ms(), 1.61);
        let mut w = Workload::parse(DEFAULT).unwrap();
        c.apply(&mut w).unwrap();
        assert_eq!(w.session.connect_latency_ms, 1.61);
        c.connect.idle_wall_ms = 4.0;
        assert_eq!(c.connect.latency_ms(), 0.0, "a set-up faster than its CPU says is clamped");
        assert_eq!(Calibration::parse(&c.to_toml()).unwrap(), c);
    }

    #[test]
    fn round_trips_and_refuses_what_it_cannot_use() {
        let c = Calibration::parse(FILE).unwrap();
        assert_eq!(Calibration::parse(&c.to_toml()).unwrap(), c);
        let newer = FILE.replacen("schema_version = 1", "schema_version = 2", 1);
        assert!(matches!(Calibration::parse(&newer), Err(CalibrationError::Version(2))));
        let mut w = Workload::parse(DEFAULT).unwrap();
        w.query[0].name = "other".into();
        assert_eq!(
            c.apply(&mut w).unwrap_err().to_string(),
            "field `template`: no figure for the workload's template \"other\""
        );
        let mut w = Workload::parse(DEFAULT).unwrap();
        c.apply(&mut w).unwrap();
        assert!(c.connect.close_cpu_ms > 0.0);
        let setup = w.session.connect_cpu_ms;
        assert!((setup + w.session.close_cpu_ms - c.connect.cpu_ms).abs() < 1e-9, "set-up and close apart");
        assert_eq!(w.session.close_cpu_ms, c.connect.close_cpu_ms);
        let close_line = format!("close_cpu_ms = {}\n", c.connect.close_cpu_ms);
        let older = FILE.replacen(&close_line, "", 1).replacen("postmaster_cpu_ms = 0.48\n", "", 1);
        let older = Calibration::parse(&older).unwrap();
        assert_eq!(older.connect.close_cpu_ms, 0.0, "a file from before close was measured apart");
        older.apply(&mut w).unwrap();
        assert_eq!((w.session.connect_cpu_ms, w.session.close_cpu_ms), (c.connect.cpu_ms, 0.0));
        assert_eq!((older.connect.idle_wall_ms, w.session.connect_latency_ms), (0.0, 0.0), "not measured: no latency");
        assert_eq!(w.session.fork_cpu_ms, 0.0, "a file from before the postmaster was measured");
        let mut c = c.clone();
        c.connect.postmaster_cpu_ms = 0.48;
        c.apply(&mut w).unwrap();
        assert_eq!(w.session.fork_cpu_ms, 0.48, "the postmaster's part is the serial part of a login");
        c.connect.postmaster_cpu_ms = 99.0;
        c.apply(&mut w).unwrap();
        assert_eq!(w.session.fork_cpu_ms, w.session.connect_cpu_ms, "never more than the whole set-up");
        let unknown = format!("bogus = 1\n{FILE}");
        assert!(Calibration::parse(&unknown).unwrap_err().to_string().contains("bogus"));
    }
}
