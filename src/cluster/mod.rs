//! Cluster backends: where the replicas that plbbench measures come from and
//! how faults are injected into them (design.md §6).
//!
//! [`Cluster`] is the seam the run driver, `plbbench run` and `plbbench
//! cluster` talk to: a closed enum over the three real backends, each with
//! the same small surface (connection config, fault actions, cumulative CPU
//! seconds). The submodules keep the pieces small and separately testable:
//!
//! - [`local`]: K servers from the machine's binaries, cgroup CPU quotas
//!   (with its own `cgroup`, `pgbin` and `procs` helpers);
//! - [`docker`]: K containers through the Docker Engine API (bollard), from
//!   the image that [`docker::image`] builds from Debian packages;
//! - [`external`]: an existing cluster given by DSNs, faults by user commands;
//! - [`pgconn`]: small synchronous helpers over `tokio-postgres`;
//! - [`dataset`]: the deterministic TPC-H-like dataset and its checksum.

pub mod dataset;
pub mod docker;
pub mod external;
pub mod local;
pub mod pgconn;

pub use docker::{DockerCluster, DockerError, DockerOptions};
pub use external::{ExternalCluster, ExternalError};
pub use local::{LocalCluster, LocalError};

use crate::core::model::Action;
use crate::core::settings::ClusterKind;
use anyhow::Context;
use std::fmt;

/// A fault that a backend can apply to one replica: what a schedule's
/// actions become ([`Fault::of`]) and what `plbbench cluster fault` issues.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    /// Fail-stop (local: SIGKILL; docker: kill).
    Down,
    /// Start again after a Down.
    Rejoin,
    /// Freeze (local: cgroup freezer or SIGSTOP; docker: pause).
    Pause,
    /// Thaw after a Pause.
    Resume,
    /// Set the CPU budget to this many cores.
    Slow(f64),
    /// Cut the replica off the network (docker: network disconnect).
    Partition,
    /// Reconnect after a Partition.
    Heal,
}

impl Fault {
    /// The backend fault for a schedule action in a run whose CPU budget is
    /// `cpus` cores per replica: `Slow(f)` cuts the budget to `f * cpus`,
    /// `Restore` gives back exactly `cpus`.
    pub fn of(a: Action, cpus: f64) -> Fault {
        match a {
            Action::Down => Fault::Down,
            Action::Rejoin => Fault::Rejoin,
            Action::Pause => Fault::Pause,
            Action::Resume => Fault::Resume,
            Action::Slow(f) => Fault::Slow(f * cpus),
            Action::Restore => Fault::Slow(cpus),
            Action::Partition => Fault::Partition,
            Action::Heal => Fault::Heal,
        }
    }
}

impl Fault {
    /// Parses `down|rejoin|pause|resume|partition|heal|slow=CORES`.
    pub fn parse(s: &str) -> Result<Fault, String> {
        let lower = s.trim().to_ascii_lowercase();
        if let Some(c) = lower.strip_prefix("slow=") {
            return match c.parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => Ok(Fault::Slow(v)),
                _ => Err(format!("`{s}`: slow needs a positive number of cores, e.g. slow=0.1")),
            };
        }
        Ok(match lower.as_str() {
            "down" => Fault::Down,
            "rejoin" => Fault::Rejoin,
            "pause" => Fault::Pause,
            "resume" => Fault::Resume,
            "partition" => Fault::Partition,
            "heal" => Fault::Heal,
            _ => {
                return Err(format!("`{s}` is not a fault (down, rejoin, pause, resume, slow=CORES, partition, heal)"))
            }
        })
    }

    /// Lowercase name used in cluster files (`down`, `slow`, ...).
    pub fn key(self) -> &'static str {
        match self {
            Fault::Down => "down",
            Fault::Rejoin => "rejoin",
            Fault::Pause => "pause",
            Fault::Resume => "resume",
            Fault::Slow(_) => "slow",
            Fault::Partition => "partition",
            Fault::Heal => "heal",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Slow(c) => write!(f, "Slow {c} cores"),
            other => {
                let k = other.key();
                write!(f, "{}{}", k[..1].to_ascii_uppercase(), &k[1..])
            }
        }
    }
}

/// A backend operation failed; carries the backend's own error.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// From the local backend.
    #[error(transparent)]
    Local(#[from] LocalError),
    /// From the docker backend.
    #[error(transparent)]
    Docker(#[from] DockerError),
    /// From the external backend.
    #[error(transparent)]
    External(#[from] ExternalError),
    /// The backend has no way to apply this fault.
    #[error("the {backend} backend cannot apply {fault}")]
    Unsupported {
        /// Backend name.
        backend: &'static str,
        /// The fault.
        fault: String,
    },
}

/// A running cluster of any real backend.
#[derive(Debug)]
pub enum Cluster {
    /// Servers on this machine.
    Local(LocalCluster),
    /// Containers through the Docker Engine API.
    Docker(DockerCluster),
    /// An existing cluster given by DSNs.
    External(ExternalCluster),
}

impl Cluster {
    /// Number of replicas K.
    pub fn replicas(&self) -> usize {
        match self {
            Cluster::Local(c) => c.replicas(),
            Cluster::Docker(c) => c.replicas(),
            Cluster::External(c) => c.replicas(),
        }
    }

    /// Connection config of replica `r` (0-based). Panics when out of range.
    pub fn config(&self, r: usize) -> tokio_postgres::Config {
        match self {
            Cluster::Local(c) => c.config(r),
            Cluster::Docker(c) => c.config(r),
            Cluster::External(c) => c.config(r),
        }
    }

    /// Applies `fault` to replica `r`; returns a note for events.csv (the
    /// external backend's command output), empty when there is nothing to add.
    pub fn apply(&mut self, r: usize, fault: Fault) -> Result<String, ClusterError> {
        let unsupported = |b: &'static str| ClusterError::Unsupported { backend: b, fault: fault.to_string() };
        match self {
            Cluster::Local(c) => {
                match fault {
                    Fault::Down => c.kill(r)?,
                    Fault::Rejoin => c.restart(r)?,
                    Fault::Pause => c.pause(r)?,
                    Fault::Resume => c.resume(r)?,
                    Fault::Slow(cpus) => c.set_cpus(r, cpus)?,
                    Fault::Partition | Fault::Heal => return Err(unsupported("local")),
                }
                Ok(String::new())
            }
            Cluster::Docker(c) => {
                c.apply(r, fault)?;
                Ok(String::new())
            }
            Cluster::External(c) => Ok(c.apply(r, fault)?),
        }
    }

    /// Cumulative CPU seconds of replica `r`, when the backend measures it.
    /// Never blocks on the network (the docker backend answers from its
    /// stats poller), so the driver may call it from an async task.
    pub fn cpu_seconds(&self, r: usize) -> Option<f64> {
        match self {
            Cluster::Local(c) => c.cpu_seconds(r),
            Cluster::Docker(c) => c.cpu_seconds(r),
            Cluster::External(c) => c.cpu_seconds(r),
        }
    }

    /// Replica `r`'s memory in use as a fraction of its limit, where the
    /// backend measures it (local replicas in a v2 cgroup with the memory
    /// controller; the docker and external backends do not yet).
    pub fn memory_fraction(&self, r: usize) -> Option<f64> {
        match self {
            Cluster::Local(c) => c.memory_fraction(r),
            Cluster::Docker(_) | Cluster::External(_) => None,
        }
    }

    /// The highest replica memory utilisation, percent, where measured.
    pub fn memory_pct(&self) -> Option<f64> {
        (0..self.replicas()).filter_map(|r| self.memory_fraction(r)).map(|m| 100.0 * m).reduce(f64::max)
    }

    /// Cumulative CPU seconds of every replica, one reading each (what the
    /// run's sampler and the proxy's feed the controller once a second).
    pub fn cpu_readings(&self) -> Vec<Option<f64>> {
        (0..self.replicas()).map(|r| self.cpu_seconds(r)).collect()
    }

    /// Server version of the replicas.
    pub fn pg_version(&self) -> String {
        match self {
            Cluster::Local(c) => c.pg_version(),
            Cluster::Docker(c) => c.pg_version(),
            Cluster::External(c) => c.pg_version(),
        }
    }

    /// Whether the CPU budget C is enforced (cgroups, Docker NanoCPUs).
    pub fn cpu_budget_enforced(&self) -> bool {
        match self {
            Cluster::Local(c) => c.cpu_budget_enforced(),
            Cluster::Docker(_) => true,
            Cluster::External(_) => false,
        }
    }

    /// Whether dropping this value leaves the cluster running.
    pub fn is_persistent(&self) -> bool {
        match self {
            Cluster::Local(c) => c.is_persistent(),
            Cluster::Docker(c) => c.is_persistent(),
            Cluster::External(_) => true,
        }
    }

    /// Keeps the cluster running after plbbench exits (`cluster up`), or
    /// not; saved in its state. The external backend never stops anything.
    pub fn set_persistent(&mut self, persistent: bool) -> Result<(), ClusterError> {
        match self {
            Cluster::Local(c) => Ok(c.set_persistent(persistent)?),
            Cluster::Docker(c) => Ok(c.set_persistent(persistent)?),
            Cluster::External(_) => Ok(()),
        }
    }

    /// Whether the backend samples CPU at all (external: only with a sampler).
    pub fn cpu_available(&self) -> bool {
        match self {
            Cluster::External(c) => c.has_sampler(),
            _ => true,
        }
    }
}

/// The cluster that `plbbench cluster up --backend KIND` left running, if
/// any: its state is read back from the backend's fixed state directory.
/// Only local and docker clusters are ever left running (`None` otherwise).
pub fn left_running(kind: ClusterKind) -> anyhow::Result<Option<Cluster>> {
    Ok(match kind {
        ClusterKind::Docker => DockerCluster::load(&docker::default_state_dir())
            .context("reading the docker cluster state")?
            .map(Cluster::Docker),
        ClusterKind::Local => {
            LocalCluster::load(&local::default_state_dir()).context("reading the cluster state")?.map(Cluster::Local)
        }
        ClusterKind::External | ClusterKind::Sim => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_display() {
        for (s, want) in [
            ("down", Fault::Down),
            ("Rejoin", Fault::Rejoin),
            ("pause", Fault::Pause),
            ("resume", Fault::Resume),
            ("slow=0.1", Fault::Slow(0.1)),
            ("partition", Fault::Partition),
            ("heal", Fault::Heal),
        ] {
            assert_eq!(Fault::parse(s).unwrap(), want, "{s}");
        }
        for bad in ["", "slow", "slow=0", "slow=-1", "slow=x", "kill"] {
            assert!(Fault::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Fault::Down.to_string(), "Down");
        assert_eq!(Fault::Slow(0.1).to_string(), "Slow 0.1 cores");
        assert_eq!(Fault::of(Action::Resume, 0.3), Fault::Resume);
        assert_eq!(Fault::of(Action::Slow(0.25), 0.4), Fault::Slow(0.1));
        assert_eq!(Fault::of(Action::Restore, 0.3), Fault::Slow(0.3), "restore gives back exactly C");
        assert_eq!(Fault::of(Action::Heal, 0.3), Fault::Heal);
    }
}
