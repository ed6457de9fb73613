//! One conversion from raw CLI values into a validated plan holding built
//! objects (design.md §8.2): the workload, the scaled fault schedule, the
//! phases and the router configuration. Every bad input is refused here,
//! before any server starts or any file is written.

use crate::cli::{ClusterKind, Detection, RunArgs};
use crate::core::faults::{self, Timeline};
use crate::core::model::{Action, FaultEvent};
use crate::core::phases::{self, Phase};
use crate::core::roles::RoleVector;
use crate::core::router::RouterConfig;
use crate::core::router::Strategy;
use crate::core::watch::Recovery;
use crate::core::workload::Workload;
use crate::error::{input, Error};
use std::path::{Path, PathBuf};

/// The built-in default workload (`workloads/analytics.toml`).
pub const DEFAULT_WORKLOAD: &str = include_str!("../workloads/analytics.toml");

/// A validated run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The raw arguments, for the summary and config.toml.
    pub args: RunArgs,
    /// Premium percentage of the mix.
    pub premium_pct: u32,
    /// The workload.
    pub workload: Workload,
    /// Fault preset name or file path.
    pub faults_name: String,
    /// Fault schedule, scaled.
    pub faults: Vec<FaultEvent>,
    /// Phases of the run.
    pub phases: Vec<Phase>,
    /// Router settings.
    pub router: RouterConfig,
    /// Scaled ramp and run length.
    pub ramp_s: f64,
    /// Scaled run length.
    pub duration_s: f64,
    /// Where the run folder goes.
    pub out: PathBuf,
}

/// Parses `P:F` percentages summing to 100; returns P.
pub fn parse_mix(s: &str) -> Result<u32, Error> {
    let parts: Vec<&str> = s.split(':').collect();
    let bad = || input("--mix", format!("`{s}` is not P:F with two whole percentages summing to 100 (e.g. 25:75)"));
    if parts.len() != 2 {
        return Err(bad());
    }
    let p: i64 = parts[0].trim().parse().map_err(|_| bad())?;
    let f: i64 = parts[1].trim().parse().map_err(|_| bad())?;
    if p < 0 || f < 0 {
        return Err(input("--mix", format!("`{s}` has a negative part")));
    }
    if p + f != 100 {
        return Err(input("--mix", format!("`{s}` sums to {}, not 100", p + f)));
    }
    Ok(p as u32)
}

/// Parses `n1<sep>n2...` into exactly `count` whole numbers summing to `k`.
fn parse_parts(field: &str, s: &str, sep: char, count: usize, k: usize) -> Result<Vec<usize>, Error> {
    let parts: Result<Vec<usize>, _> = s.split(sep).map(|p| p.trim().parse::<usize>()).collect();
    let parts = parts.map_err(|_| input(field, format!("`{s}` is not {count} whole numbers separated by `{sep}`")))?;
    if parts.len() != count {
        return Err(input(field, format!("`{s}` has {} parts, expected {count}", parts.len())));
    }
    let sum: usize = parts.iter().sum();
    if sum != k {
        return Err(input(field, format!("`{s}` sums to {sum}, but there are {k} replicas")));
    }
    Ok(parts)
}

/// Parses a `P,M,F` reference split whose sum is `k`.
pub fn parse_reference(s: &str, k: usize) -> Result<RoleVector, Error> {
    let v = parse_parts("--reference", s, ',', 3, k)?;
    Ok([v[0], v[1], v[2]])
}

/// Parses a reference split whose sum defines K (for `plbbench roles`).
pub fn parse_reference_any(s: &str) -> Result<RoleVector, Error> {
    let sum = s.split(',').filter_map(|p| p.trim().parse::<usize>().ok()).sum();
    let v = parse_reference(s, sum)?;
    if sum == 0 {
        return Err(input("--reference", "the split must name at least one replica"));
    }
    Ok(v)
}

/// Reads a file as UTF-8 text, naming the field on failure.
pub fn read_text(field: &str, path: &Path) -> Result<String, Error> {
    let bytes = std::fs::read(path).map_err(|e| input(field, format!("cannot read {}: {e}", path.display())))?;
    String::from_utf8(bytes).map_err(|_| input(field, format!("{} is not UTF-8 text", path.display())))
}

/// Loads the workload named by `--workload`, or the built-in default.
pub fn load_workload(path: Option<&Path>) -> Result<Workload, Error> {
    let (name, text) = match path {
        Some(p) => (p.display().to_string(), read_text("--workload", p)?),
        None => ("workloads/analytics.toml".to_string(), DEFAULT_WORKLOAD.to_string()),
    };
    Workload::parse(&text).map_err(|e| input("--workload", format!("{name}: {e}")))
}

impl Plan {
    /// Validates `args` into a plan.
    pub fn new(args: RunArgs) -> Result<Plan, Error> {
        let premium_pct = parse_mix(&args.mix)?;
        if args.common.clients == 0 {
            return Err(input("--T", "must be at least 1 client"));
        }
        if args.common.replicas == 0 {
            return Err(input("--replicas", "must be at least 1"));
        }
        let reference = parse_reference(&args.common.reference, args.common.replicas)?;
        let split = parse_parts("--split", &args.common.split, ':', 2, args.common.replicas)?;
        if !(args.common.time_scale.is_finite() && args.common.time_scale > 0.0) {
            return Err(input("--time-scale", format!("must be a positive number, got {}", args.common.time_scale)));
        }
        if !(args.common.cpus.is_finite() && args.common.cpus > 0.0) {
            return Err(input("--cpus", format!("must be a positive number of cores, got {}", args.common.cpus)));
        }
        if args.recovery != Recovery::None && args.strategy != Strategy::Plb {
            return Err(input(
                "--recovery",
                format!("{} is a plb policy; --strategy is {}", args.recovery.name(), args.strategy),
            ));
        }
        if args.common.detection != Detection::Oracle && args.common.probe_interval_ms == 0 {
            return Err(input("--probe-interval-ms", "must be at least 1"));
        }
        let mut workload = load_workload(args.common.workload.as_deref())?;
        if let Some(theta) = args.common.theta {
            if theta == 0 {
                return Err(input("--theta", "must be at least 1"));
            }
            workload.router.theta = theta;
        }
        workload.router.mixed_bounded |= args.common.mixed_bounded;
        let faults_name = args.faults.clone().unwrap_or_else(|| workload.run.faults.clone());
        let text = match faults::preset(&faults_name) {
            Some(t) => t.to_string(),
            None if Path::new(&faults_name).exists() => read_text("--faults", Path::new(&faults_name))?,
            None => {
                return Err(input(
                    "--faults",
                    format!("`{faults_name}` is neither a preset ({}) nor a file", faults::PRESETS.join(", ")),
                ))
            }
        };
        let timeline = Timeline {
            replicas: args.common.replicas,
            ramp_s: workload.arrival.ramp_s,
            baseline_s: workload.run.baseline_s,
            duration_s: workload.run.duration_s,
        };
        let events = faults::parse(&text, timeline).map_err(|e| input("--faults", format!("{faults_name}: {e}")))?;
        if args.common.cluster == ClusterKind::Local {
            refuse_partition_on_local(&faults_name, &events)?;
        }
        let x = args.common.time_scale;
        let faults = faults::scaled(&events, x);
        let (ramp_s, duration_s) = (workload.arrival.ramp_s * x, workload.run.duration_s * x);
        let phases = phases::cut(&faults, args.common.replicas, ramp_s, workload.run.baseline_s * x, duration_s);
        let router = RouterConfig {
            strategy: args.strategy,
            replicas: args.common.replicas,
            reference,
            split: (split[0], split[1]),
            theta: workload.router.theta,
            alpha: workload.router.alpha,
            mixed_bounded: workload.router.mixed_bounded,
        };
        let out = match &args.out {
            Some(p) => p.clone(),
            None => PathBuf::from("reports").join(format!(
                "{}-{}-{}-{}",
                chrono::Utc::now().format("%Y%m%dT%H%M%SZ"),
                args.strategy,
                args.mix.replace(':', "-"),
                args.common.cluster.name()
            )),
        };
        if out.exists() && !args.force {
            return Err(input("--out", format!("{} already exists (use --force to replace it)", out.display())));
        }
        if args.metrics_addr.is_some() && args.common.cluster == ClusterKind::Sim {
            return Err(input("--metrics-addr", "the simulator runs in virtual time; serve metrics from a real run"));
        }
        let x = &args.external;
        let external = args.common.cluster == ClusterKind::External;
        if external && x.dsns.is_empty() && x.cluster_file.is_none() {
            return Err(input("--dsn", "`--cluster external` needs --dsn (once per replica) or --cluster-file"));
        }
        if !external && (!x.dsns.is_empty() || x.cluster_file.is_some() || x.load_dataset) {
            return Err(input("--dsn", "--dsn, --cluster-file and --load-dataset need `--cluster external`"));
        }
        Ok(Plan { args, premium_pct, workload, faults_name, faults, phases, router, ramp_s, duration_s, out })
    }

    /// Whether replica `r` is up throughout `phase` per the fault schedule
    /// (a slow replica is up; a down, paused or partitioned one is not).
    pub fn up_during(&self, phase: &Phase, r: usize) -> bool {
        let before: Vec<FaultEvent> = self.faults.iter().filter(|e| e.t_s <= phase.start_s).copied().collect();
        faults::replay(&before, self.args.common.replicas).get(r).is_none_or(|o| o.survivor())
    }
}

/// The local backend has no network of its own to cut: a schedule that
/// partitions a replica is refused before anything starts.
fn refuse_partition_on_local(name: &str, events: &[FaultEvent]) -> Result<(), Error> {
    match events.iter().position(|e| matches!(e.action, Action::Partition | Action::Heal)) {
        Some(i) => Err(input(
            "--faults",
            format!("{name}: event[{i}]: the local backend cannot partition a replica (use --cluster docker, external or sim)"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_refuses_a_partition_naming_the_event() {
        let ev = |t_s, action| FaultEvent { t_s, replica: 0, action };
        let ok = [ev(1.0, Action::Slow(0.5)), ev(2.0, Action::Restore), ev(3.0, Action::Pause)];
        assert!(refuse_partition_on_local("x", &ok).is_ok());
        let cut = [ev(1.0, Action::Slow(0.5)), ev(2.0, Action::Partition), ev(3.0, Action::Heal)];
        let e = refuse_partition_on_local("cut.toml", &cut).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let msg = e.to_string();
        assert!(msg.starts_with("--faults: cut.toml: event[1]: the local backend cannot partition"), "{msg}");
    }
}
