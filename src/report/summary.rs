//! summary.json (design.md §5): the settings, the environment and every
//! per-phase figure of one run in one serialisable model. Reports, `compare`
//! and experiments read runs back through this type.

use crate::core::metrics::{EventRow, PhaseRow, ReplicaCpu};
use crate::core::model::{Class, FaultEvent};
use crate::core::outcome::Verdict;
use crate::error::Signal;
use serde::{Deserialize, Serialize};

/// The resolved settings of a run (enough to rerun it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// `plb`, `rr-split`, `rr` or `lc`.
    pub strategy: String,
    /// Premium:Freemium percentages, e.g. `25:75`.
    pub mix: String,
    /// Clients T.
    pub clients: u32,
    /// Offered load (`--load`: CPU offered / the cluster's K x C), when
    /// the run set it; absent otherwise and in files from before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<f64>,
    /// The CPU the clients offer at zero queueing over the cluster's
    /// budget K x C (design.md §3's load formula), whatever set it; absent
    /// in files from before summary.json version 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offered: Option<f64>,
    /// `--calibration`: the file whose costs the run took, when it was
    /// measured, and the pause the workload's operating point came to;
    /// absent when the run used the workload's own costs and in files from
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<String>,
    /// Replicas K.
    pub replicas: usize,
    /// PLB reference split `P,M,F`.
    pub reference: String,
    /// rr-split partition `R:F`.
    pub split: String,
    /// Fault preset name or schedule file path.
    pub faults: String,
    /// Workload name.
    pub workload: String,
    /// Cluster backend.
    pub cluster: String,
    /// Seed of the schedule.
    pub seed: u64,
    /// Timeline multiplier.
    pub time_scale: f64,
    /// Run length after scaling, seconds.
    pub duration_s: f64,
    /// PLB theta.
    pub theta: u32,
    /// PLB alpha.
    pub alpha: f64,
    /// PLB: whether theta bounds Mixed admission (`bounded`, design.md §2
    /// as revised) or not (`unbounded`, the ablation); absent for other
    /// strategies and in files from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixed: Option<String>,
    /// PLB: how far Freemium may borrow a Premium replica; absent as `mixed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freemium_borrow: Option<crate::core::router::FreemiumBorrow>,
    /// `max_connections` of every replica of a cluster the run started and
    /// the simulator's limit (sized for T: docs/performance.md); absent for an
    /// external cluster or one `plbbench cluster up` left running (they
    /// keep their own) and in files from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// How the router learns of faults: `probe` or `oracle`.
    pub detection: String,
    /// Admission layer in front of the strategy (`none` or `modes`).
    #[serde(default = "admission_none")]
    pub admission: String,
    /// What plb does with a returning replica (`none` or `probation`).
    #[serde(default = "admission_none")]
    pub recovery: String,
    /// What a failed run validity check did: `fail` (exit status 1) or
    /// `warn` (`--checks warn`). `fail` in a summary.json from before it.
    #[serde(default)]
    pub checks: crate::core::settings::Checks,
    /// `--via-proxy`: what routed the sessions (a `plbbench proxy`
    /// process); absent when the run's clients routed themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via_proxy: Option<String>,
}

fn admission_none() -> String {
    "none".into()
}

/// Where the run ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    /// plbbench version.
    pub plbbench_version: String,
    /// Git commit of the source, when known.
    pub git_commit: Option<String>,
    /// PostgreSQL server version (`None` for the simulator).
    pub postgres_version: Option<String>,
    /// Logical cores of the machine.
    pub cores: usize,
    /// Memory of the machine in GiB.
    pub memory_gib: f64,
    /// CPU budget per replica in cores (C).
    pub cpu_budget_cores: f64,
    /// Whether the budget was enforced (cgroups, Docker) or only modelled.
    pub cpu_budget_enforced: bool,
    /// When the run started, UTC, RFC 3339.
    pub started_utc: String,
}

/// Sessions and errors of one class, for the accounting section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Accounting {
    /// Class.
    pub class: Class,
    /// Sessions opened.
    pub sessions_started: u64,
    /// Sessions still open at the end.
    pub sessions_in_flight: u64,
    /// Aborted sessions by reason.
    pub aborts: Vec<(String, u64)>,
    /// Failed queries by error kind.
    pub errors: Vec<(String, u64)>,
    /// Sessions rejected by admission, by reason.
    #[serde(default)]
    pub rejections: Vec<(String, u64)>,
}

/// The whole summary.json.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Format version ([`super::version::SUMMARY`]); 0 in a file from
    /// before versioning.
    #[serde(default)]
    pub schema_version: u32,
    /// True when the run was interrupted and the figures cover part of it.
    pub partial: bool,
    /// Settings.
    pub settings: Settings,
    /// Environment.
    pub environment: Environment,
    /// The fault schedule after time scaling.
    pub faults: Vec<FaultEvent>,
    /// phases.csv rows.
    pub phases: Vec<PhaseRow>,
    /// u_r per phase and replica.
    pub replica_cpu: Vec<ReplicaCpu>,
    /// Fault and detection events (the role changes stay in events.csv).
    pub fault_events: Vec<EventRow>,
    /// Accounting per class.
    pub accounting: Vec<Accounting>,
    /// Checks and warnings.
    pub verdicts: Vec<Verdict>,
    /// Wall-clock seconds the run took.
    pub wall_s: f64,
    /// The signal that stopped the run (`SIGINT`, `SIGTERM`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<Signal>,
    /// Real backends: seconds between the planned end (or the end of the
    /// drain after a signal) and the moment every client, probe and fault
    /// task had stopped. Bounded by the connect and query deadlines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_overrun_s: Option<f64>,
    /// The recovery ledger: one entry per Down or Pause (docs/resilience.md, "The recovery ledger").
    #[serde(default)]
    pub recovery: Vec<crate::core::recovery::Entry>,
    /// How often the detector suspected or removed a replica, and how many
    /// of those had no fault open: false suspicions (docs/resilience.md). `None` in a
    /// summary.json from before this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detector: Option<crate::core::recovery::Suspicions>,
    /// Real backends: plbbench's own CPU, schedule lag and memory, and
    /// whether the generator was saturated (the generator guard of docs/manual.md, "Run validity checks").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<crate::core::saturation::GeneratorReport>,
    /// The simulator's tier of routers (`--routers`, docs/scale.md "Routing
    /// on stale counts"): what routing on stale counts did. `None` with one
    /// router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<crate::core::tier::TierBooks>,
    /// A run through a tier of proxies (`--proxies N`, docs/proxy.md, "A
    /// tier of proxies"): its reigns, failovers and members' books. `None`
    /// with one proxy or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_tier: Option<crate::core::proxy_tier::TierReport>,
    /// `--admission modes`: how long each mode lasted, the signals and
    /// where each threshold came from, the rejections per phase, class
    /// and reason. `None` without modes and in a summary.json from before
    /// version 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modes: Option<ModesReport>,
}

/// `--admission modes` in summary.json (docs/resilience.md, "Graceful
/// degradation").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModesReport {
    /// Seconds in each mode, `normal` to `survival`, over the run.
    pub time_in_mode_s: Vec<(String, f64)>,
    /// Mode changes.
    pub transitions: u64,
    /// The thresholds in force: CPU (also read by the wait signal),
    /// memory and queue depth per level, hysteresis, minimum time in a
    /// mode (seconds, time-scaled).
    pub thresholds: crate::core::degradation::Thresholds,
    /// Each signal, what it measures and where its threshold comes from.
    pub signals: Vec<(String, String)>,
    /// Statements a replica runs at 100 % share (the lower classes get the
    /// mode's share on the replicas the top class uses).
    pub statement_slots: u32,
    /// Sessions a replica holds at 100 % share.
    pub replica_sessions: u32,
    /// A replica's CPU at saturation, fraction of its budget.
    pub saturation: f64,
    /// The top class's query service time, ms, the base of its wait signal.
    pub service_ms: f64,
    /// Where `service_ms` comes from.
    pub service_from: String,
    /// Rejected sessions per phase, class and reason (`queue deadline`,
    /// `queue full`), where any.
    pub rejections: Vec<(String, Class, String, u64)>,
    /// What the signals did while a mode was degraded (the longest stretch
    /// with every signal clear, the time held only by held work); `None`
    /// where the backend did not route (through a proxy).
    #[serde(default)]
    pub books: Option<crate::core::degradation::ModeBooks>,
}

impl Summary {
    /// The phases.csv row of `phase` and `class`, if any.
    pub fn phase(&self, phase: &str, class: Class) -> Option<&PhaseRow> {
        self.phases.iter().find(|r| r.phase == phase && r.class == class)
    }

    /// The verdicts that do not hold: the run's failed checks.
    pub fn failed_checks(&self) -> Vec<&Verdict> {
        self.verdicts.iter().filter(|v| !v.ok).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn summaries(dir: &Path, out: &mut Vec<PathBuf>) {
        files_named(dir, "summary.json", out)
    }

    fn files_named(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                files_named(&p, name, out);
            } else if p.file_name().is_some_and(|n| n == name) {
                out.push(p);
            }
        }
    }

    /// The examples keep a fixture of every format a reader must accept:
    /// summary.json and experiment.json at each version from 0
    /// (unversioned) to the one this plbbench writes, and runs of both the
    /// simulator and a real cluster; a pruning of reports/examples that
    /// dropped the last of one fails here.
    #[test]
    fn the_examples_hold_every_version_and_kind() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/examples");
        let mut seen = std::collections::BTreeSet::new();
        for name in ["summary.json", "experiment.json"] {
            let mut files = Vec::new();
            files_named(&root, name, &mut files);
            for f in files {
                let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
                seen.insert(format!("{name} v{}", v["schema_version"].as_u64().unwrap_or(0)));
                if let Some(cluster) = v["settings"]["cluster"].as_str().filter(|_| name == "summary.json") {
                    seen.insert(format!("{name} {}", if cluster == "sim" { "sim" } else { "real" }));
                }
            }
        }
        let mut want = vec!["summary.json real".to_string(), "summary.json sim".to_string()];
        want.extend((0..=crate::report::version::SUMMARY).map(|v| format!("summary.json v{v}")));
        want.extend((0..=crate::report::version::EXPERIMENT).map(|v| format!("experiment.json v{v}")));
        for w in &want {
            assert!(seen.contains(w), "no example with {w}; found {seen:?}");
        }
    }

    /// Every committed run folder still reads, including those written
    /// before a field was added (`checks` defaults to `fail`).
    #[test]
    fn every_committed_example_summary_still_parses() {
        let mut files = Vec::new();
        summaries(&Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/examples"), &mut files);
        assert!(files.len() >= 10, "found {files:?}");
        let mut bad = Vec::new();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            match serde_json::from_str::<Summary>(&text) {
                Ok(s) if !text.contains("\"checks\"") => {
                    assert_eq!(s.settings.checks, crate::core::settings::Checks::Fail, "{}", f.display())
                }
                Ok(_) => {}
                Err(e) => bad.push(format!("{}: {e}", f.display())),
            }
        }
        assert!(bad.is_empty(), "{} do not parse:\n{}", bad.len(), bad.join("\n"));
    }
}
