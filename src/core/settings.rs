//! The closed choices a run is made of besides its strategy and recovery
//! policy: which cluster runs the sessions, how the router learns of faults,
//! what stands in front of the strategy, and what a failed run validity
//! check does. They are domain values, named
//! the same on the command line, in summary.json and in folder names, so
//! they live here with their names, `Display` and `FromStr`; the command
//! layer adds the flags' help on top.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Which cluster runs the sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClusterKind {
    /// PostgreSQL servers started by plbbench on this machine.
    Local,
    /// Containers through the Docker Engine API (DOCKER_HOST is honoured).
    Docker,
    /// An existing cluster given by --dsn or --cluster-file.
    External,
    /// The discrete-event simulator.
    Sim,
}

/// How the router learns of faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Detection {
    /// Health probes and connection errors, as a real middleware.
    Probe,
    /// The router is told at the instant of the fault (ablation).
    Oracle,
    /// Probes, connection errors and query latency through the health state
    /// machine: SUSPECT and DEGRADED replicas get a reduced share of new
    /// sessions, ISOLATED none, RECOVERING a probation share (thresholds:
    /// the workload's `[health]`).
    Suspicion,
}

/// What stands in front of the strategy (docs/resilience.md, "Graceful degradation: admission modes").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Admission {
    /// Every session goes straight to the router.
    None,
    /// Degradation modes with priority admission (the workload's `[degradation]`).
    Modes,
}

/// Where the generator children of `run --generators N` run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GeneratorsOn {
    /// Processes on this host.
    #[default]
    Host,
    /// Containers through the Docker Engine API, on the engine DOCKER_HOST names.
    Docker,
}

/// What a failed run validity check does (design.md §4, `core::validity`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Checks {
    /// The run still writes its folder, then exits with status 1.
    #[default]
    Fail,
    /// The failed checks are printed as warnings; exit status 0.
    Warn,
}

/// A closed set of named values: every value in command-line order, and the
/// name of each (the same on the command line and in files).
pub trait Named: Copy + 'static {
    /// Every value, in the order the command line lists them.
    const ALL: &'static [Self];
    /// The value's name.
    fn name(self) -> &'static str;
}

impl Named for ClusterKind {
    const ALL: &'static [Self] = &[ClusterKind::Local, ClusterKind::Docker, ClusterKind::External, ClusterKind::Sim];
    fn name(self) -> &'static str {
        match self {
            ClusterKind::Local => "local",
            ClusterKind::Docker => "docker",
            ClusterKind::External => "external",
            ClusterKind::Sim => "sim",
        }
    }
}

impl Named for GeneratorsOn {
    const ALL: &'static [Self] = &[GeneratorsOn::Host, GeneratorsOn::Docker];
    fn name(self) -> &'static str {
        match self {
            GeneratorsOn::Host => "host",
            GeneratorsOn::Docker => "docker",
        }
    }
}

impl Named for Detection {
    const ALL: &'static [Self] = &[Detection::Probe, Detection::Oracle, Detection::Suspicion];
    fn name(self) -> &'static str {
        match self {
            Detection::Probe => "probe",
            Detection::Oracle => "oracle",
            Detection::Suspicion => "suspicion",
        }
    }
}

impl Named for Admission {
    const ALL: &'static [Self] = &[Admission::None, Admission::Modes];
    fn name(self) -> &'static str {
        match self {
            Admission::None => "none",
            Admission::Modes => "modes",
        }
    }
}

impl Named for Checks {
    const ALL: &'static [Self] = &[Checks::Fail, Checks::Warn];
    fn name(self) -> &'static str {
        match self {
            Checks::Fail => "fail",
            Checks::Warn => "warn",
        }
    }
}

/// `FromStr` and `Display` through [`Named`]: exact names, as the command
/// line writes them.
macro_rules! named_text {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                parse_named(s)
            }
        }
    )*};
}

named_text!(ClusterKind, GeneratorsOn, Detection, Admission, Checks);

impl Named for super::router::Strategy {
    const ALL: &'static [Self] = &super::router::Strategy::ALL;
    fn name(self) -> &'static str {
        super::router::Strategy::name(self)
    }
}

impl Named for super::router::FreemiumBorrow {
    const ALL: &'static [Self] = &super::router::FreemiumBorrow::ALL;
    fn name(self) -> &'static str {
        super::router::FreemiumBorrow::name(self)
    }
}

impl Named for super::watch::Recovery {
    const ALL: &'static [Self] =
        &[super::watch::Recovery::None, super::watch::Recovery::Probation, super::watch::Recovery::SlowStart];
    fn name(self) -> &'static str {
        super::watch::Recovery::name(self)
    }
}

/// The value of `T` named `s`, or a message listing the names.
pub fn parse_named<T: Named>(s: &str) -> Result<T, String> {
    T::ALL.iter().copied().find(|v| v.name() == s).ok_or_else(|| {
        let names: Vec<&str> = T::ALL.iter().map(|v| v.name()).collect();
        format!("unknown value `{s}` (expected {})", names.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in ClusterKind::ALL {
            assert_eq!(k.to_string().parse::<ClusterKind>(), Ok(*k));
        }
        for d in Detection::ALL {
            assert_eq!(d.to_string().parse::<Detection>(), Ok(*d));
        }
        for a in Admission::ALL {
            assert_eq!(a.to_string().parse::<Admission>(), Ok(*a));
        }
        for c in Checks::ALL {
            assert_eq!(c.to_string().parse::<Checks>(), Ok(*c));
            assert_eq!(serde_json::to_value(c).unwrap(), serde_json::json!(c.name()), "summary.json spells it alike");
        }
        assert_eq!(
            "Sim".parse::<ClusterKind>(),
            Err("unknown value `Sim` (expected local, docker, external, sim)".into())
        );
    }
}
