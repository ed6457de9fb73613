//! The `external` cluster backend (design.md §6): an existing cluster that
//! plbbench neither starts nor stops (Patroni, CloudNativePG, cloud read
//! replicas, or one started by hand), given as DSNs on the command line or
//! in a cluster file. Faults run user-given commands per action, as argv
//! (never through a shell), with `{replica}` (`r1`...), `{index}` (0-based)
//! and `{cpus}` (Slow) substituted in each argument; their exit status and
//! output end up in events.csv. CPU comes from an optional sampler command
//! that prints the replica's cumulative CPU seconds, run for every replica
//! once per second on a background thread; without one, CPU is reported as
//! unavailable.
//!
//! A cluster file (TOML):
//!
//! ```toml
//! dsns = ["host=10.0.0.1 port=5432 user=bench password=... dbname=plbbench", "..."]
//! [commands]
//! down = ["ssh", "db-{index}", "sudo", "systemctl", "kill", "-s", "KILL", "patroni"]
//! rejoin = ["ssh", "db-{index}", "sudo", "systemctl", "start", "patroni"]
//! # also: pause, resume, slow, partition, heal; and optionally
//! cpu = ["ssh", "db-{index}", "cpu-seconds"]  # prints cumulative CPU seconds
//! ```

use crate::core::model::ReplicaId;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::{dataset, pgconn, Fault};

/// Longest a fault command may run before it is killed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the CPU sampler runs for each replica.
pub const CPU_INTERVAL: Duration = Duration::from_secs(1);
/// Deadline of the dataset checksum on one replica.
const CHECK_TIMEOUT: Duration = Duration::from_secs(300);

/// Every way the external backend fails.
#[derive(Debug, thiserror::Error)]
pub enum ExternalError {
    /// The cluster file or DSNs are wrong.
    #[error("{0}")]
    Input(String),
    /// The cluster file could not be read.
    #[error("reading {0}")]
    Read(PathBuf, #[source] std::io::Error),
    /// A fault command could not run, failed or timed out.
    #[error("{what}: {detail}")]
    Command {
        /// The fault and replica.
        what: String,
        /// Exit status and output.
        detail: String,
    },
    /// A replica did not answer, or its dataset differs.
    #[error("{what}")]
    Sql {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: pgconn::PgError,
    },
    /// The replicas do not hold the same dataset.
    #[error("the replicas do not hold the expected dataset ({0}); pass --load-dataset to load it")]
    Dataset(String),
}

/// The cluster file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// libpq key=value DSNs, one per replica.
    #[serde(default)]
    pub dsns: Vec<String>,
    /// argv per action (`down`, `rejoin`, `pause`, `resume`, `slow`,
    /// `partition`, `heal`) and the optional `cpu` sampler.
    #[serde(default)]
    pub commands: BTreeMap<String, Vec<String>>,
}

const KEYS: [&str; 8] = ["down", "rejoin", "pause", "resume", "slow", "partition", "heal", "cpu"];

impl ClusterFile {
    /// Parses and validates a cluster file's text.
    pub fn parse(text: &str) -> Result<ClusterFile, ExternalError> {
        let f: ClusterFile =
            toml::from_str(text).map_err(|e| ExternalError::Input(format!("cluster file: {}", e.message())))?;
        f.validate()?;
        Ok(f)
    }

    /// Reads a cluster file.
    pub fn read(path: &Path) -> Result<ClusterFile, ExternalError> {
        let text = std::fs::read_to_string(path).map_err(|e| ExternalError::Read(path.to_path_buf(), e))?;
        Self::parse(&text)
    }

    fn validate(&self) -> Result<(), ExternalError> {
        for (k, argv) in &self.commands {
            if !KEYS.contains(&k.as_str()) {
                return Err(ExternalError::Input(format!(
                    "commands.{k}: unknown action (expected one of {})",
                    KEYS.join(", ")
                )));
            }
            if argv.first().is_none_or(|p| p.is_empty()) {
                return Err(ExternalError::Input(format!("commands.{k}: needs a program and its arguments")));
            }
        }
        Ok(())
    }
}

/// An existing cluster. `Debug` shows no DSN (they hold passwords).
/// What opening an external cluster does with its dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatasetStep {
    /// Checks that every replica holds the workload's dataset (the
    /// default).
    Check,
    /// Loads it on every replica, then checks it (`--load-dataset`).
    Load,
    /// Neither: the run that started this process (its proxy) checked it.
    Trust,
}

pub struct ExternalCluster {
    configs: Vec<tokio_postgres::Config>,
    commands: BTreeMap<String, Vec<String>>,
    version: String,
    cpu: Arc<Mutex<Vec<Option<f64>>>>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for ExternalCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalCluster")
            .field("replicas", &self.configs.len())
            .field("commands", &self.commands)
            .finish()
    }
}

impl ExternalCluster {
    /// Connects to every replica, checks (or with `load_dataset` first
    /// loads) the dataset of `scale` and `seed` on each, and starts the CPU
    /// sampler when the file has one. `dsns` from the command line come
    /// before the file's.
    pub fn open(
        dsns: &[String],
        file: Option<ClusterFile>,
        scale: f64,
        seed: u64,
        step: DatasetStep,
    ) -> Result<ExternalCluster, ExternalError> {
        let file = file.unwrap_or_default();
        let all: Vec<String> = dsns.iter().chain(file.dsns.iter()).cloned().collect();
        if all.is_empty() {
            return Err(ExternalError::Input(
                "--dsn: the external backend needs at least one DSN (--dsn or --cluster-file)".into(),
            ));
        }
        let configs = all
            .iter()
            .enumerate()
            .map(|(i, d)| {
                d.parse::<tokio_postgres::Config>().map_err(|e| {
                    ExternalError::Input(format!("--dsn: DSN of {} is not a valid libpq DSN: {e}", ReplicaId(i)))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let sql = |what: String| move |source| ExternalError::Sql { what, source };
        if step == DatasetStep::Load {
            for (i, cfg) in configs.iter().enumerate() {
                pgconn::run_statements(cfg, &dataset::render(scale, seed), super::local::LOAD_TIMEOUT)
                    .map_err(sql(format!("loading the dataset on {}", ReplicaId(i))))?;
            }
        }
        let mut sums = Vec::new();
        // Checked unless the run that started this process checked it.
        let checked = if step == DatasetStep::Trust { &configs[..0] } else { &configs[..] };
        for (i, cfg) in checked.iter().enumerate() {
            let s = pgconn::query_text(cfg, dataset::CHECKSUM_SQL, CHECK_TIMEOUT);
            sums.push(
                s.map_err(|e| match e {
                    pgconn::PgError::Pg(ref p) if p.code().is_some() => ExternalError::Dataset(format!(
                        "{}: {}",
                        ReplicaId(i),
                        p.as_db_error().map_or("error".into(), |d| d.message().to_string())
                    )),
                    other => {
                        ExternalError::Sql { what: format!("checking the dataset on {}", ReplicaId(i)), source: other }
                    }
                })?
                .unwrap_or_default(),
            );
        }
        let want = format!("orders={}:", dataset::orders_rows(scale));
        if let Some(i) = sums.iter().position(|s| !s.starts_with(&want) || *s != sums[0]) {
            return Err(ExternalError::Dataset(format!(
                "{} holds `{}`, expected {} orders and the same data as r1",
                ReplicaId(i),
                sums[i],
                dataset::orders_rows(scale)
            )));
        }
        let version = pgconn::query_text(&configs[0], "SELECT version()", Duration::from_secs(10))
            .map_err(sql("reading the server version".into()))?
            .unwrap_or_default();
        let k = configs.len();
        let c = ExternalCluster {
            configs,
            commands: file.commands,
            version,
            cpu: Arc::new(Mutex::new(vec![None; k])),
            stop: Arc::new(AtomicBool::new(false)),
        };
        c.start_sampler();
        Ok(c)
    }

    /// The replicas of a cluster another plbbench process opened and
    /// checked (a `run --generators` child): no dataset check, no CPU
    /// sampler, no fault commands.
    pub fn unchecked(configs: Vec<tokio_postgres::Config>) -> ExternalCluster {
        let k = configs.len();
        ExternalCluster {
            configs,
            commands: BTreeMap::new(),
            version: String::new(),
            cpu: Arc::new(Mutex::new(vec![None; k])),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Number of replicas K.
    pub fn replicas(&self) -> usize {
        self.configs.len()
    }

    /// Connection config of replica `r`. Panics when out of range.
    pub fn config(&self, r: usize) -> tokio_postgres::Config {
        self.configs[r].clone()
    }

    /// `SELECT version()` of r1.
    pub fn pg_version(&self) -> String {
        self.version.clone()
    }

    /// Whether the cluster file gives a CPU sampler.
    pub fn has_sampler(&self) -> bool {
        self.commands.contains_key("cpu")
    }

    /// The sampler's last reading for replica `r`.
    pub fn cpu_seconds(&self, r: usize) -> Option<f64> {
        *self.cpu.lock().expect("cpu lock").get(r)?
    }

    /// Runs the fault's command for replica `r`; returns `exit 0: <output>`.
    pub fn apply(&mut self, r: usize, fault: Fault) -> Result<String, ExternalError> {
        let what = format!("{fault} of {}", ReplicaId(r));
        let Some(argv) = self.commands.get(fault.key()) else {
            return Err(ExternalError::Command {
                what,
                detail: format!("the cluster file has no commands.{}", fault.key()),
            });
        };
        let argv = expand(argv, r, fault);
        let (ok, detail) = run_argv(&argv, COMMAND_TIMEOUT);
        if ok {
            Ok(detail)
        } else {
            Err(ExternalError::Command { what, detail })
        }
    }

    fn start_sampler(&self) {
        let Some(argv) = self.commands.get("cpu").cloned() else { return };
        let (cpu, stop, k) = (self.cpu.clone(), self.stop.clone(), self.configs.len());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let next = Instant::now() + CPU_INTERVAL;
                for r in 0..k {
                    let (ok, out) = run_argv(&expand(&argv, r, Fault::Down), CPU_INTERVAL * 5);
                    if let Some(v) = ok.then(|| parse_cpu(&out)).flatten() {
                        cpu.lock().expect("cpu lock")[r] = Some(v);
                    }
                }
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
    }
}

impl Drop for ExternalCluster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Substitutes `{replica}`, `{index}` and `{cpus}` in every argument.
pub fn expand(argv: &[String], r: usize, fault: Fault) -> Vec<String> {
    let cpus = match fault {
        Fault::Slow(c) => c.to_string(),
        _ => String::new(),
    };
    argv.iter()
        .map(|a| {
            a.replace("{replica}", &ReplicaId(r).to_string())
                .replace("{index}", &r.to_string())
                .replace("{cpus}", &cpus)
        })
        .collect()
}

/// The sampler's output: the last number on its output (cumulative CPU seconds).
fn parse_cpu(out: &str) -> Option<f64> {
    let text = out.split_once(": ").map_or(out, |x| x.1);
    text.split_whitespace().rev().find_map(|w| w.parse::<f64>().ok()).filter(|v| v.is_finite() && *v >= 0.0)
}

/// Runs argv (no shell) with a deadline; `(success, "exit N: output")`
/// with stdout and stderr on one line, cut to 300 characters.
pub fn run_argv(argv: &[String], timeout: Duration) -> (bool, String) {
    let mut child = match Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return (false, format!("cannot run {}: {e}", argv[0])),
    };
    let (mut out, mut err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        let mut e = String::new();
        let _ = err.read_to_string(&mut e);
        format!("{s} {e}")
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let text = reader.join().unwrap_or_default();
    let mut one: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() > 300 {
        one = one.chars().take(300).collect::<String>() + "...";
    }
    match status {
        Some(s) => (s.success(), format!("exit {}: {one}", s.code().map_or("signal".into(), |c| c.to_string()))),
        None => (false, format!("timed out after {} s: {one}", timeout.as_secs())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_file_parses_and_rejects() {
        let f =
            ClusterFile::parse("dsns = [\"host=a\"]\n[commands]\ndown = [\"kill\", \"{replica}\"]\ncpu = [\"x\"]\n")
                .unwrap();
        assert_eq!(f.dsns, vec!["host=a"]);
        assert_eq!(f.commands["down"], vec!["kill", "{replica}"]);
        for bad in ["[commands]\nexplode = [\"x\"]\n", "[commands]\ndown = []\n", "dsn = [\"x\"]\n"] {
            assert!(ClusterFile::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn placeholders_expand_per_argument() {
        let argv: Vec<String> = ["ctl", "{replica}", "--i={index}", "{cpus}"].iter().map(|s| s.to_string()).collect();
        assert_eq!(expand(&argv, 1, Fault::Slow(0.1)), vec!["ctl", "r2", "--i=1", "0.1"]);
        assert_eq!(expand(&argv, 0, Fault::Down), vec!["ctl", "r1", "--i=0", ""]);
    }

    #[test]
    fn commands_run_without_a_shell() {
        let (ok, out) = run_argv(&["echo".into(), "a;b".into(), "$HOME".into()], Duration::from_secs(5));
        assert!(ok);
        assert_eq!(out, "exit 0: a;b $HOME");
        let (ok, out) = run_argv(&["false".into()], Duration::from_secs(5));
        assert!(!ok && out.starts_with("exit 1"), "{out}");
        let (ok, out) = run_argv(&["sleep".into(), "5".into()], Duration::from_millis(200));
        assert!(!ok && out.starts_with("timed out"), "{out}");
        assert!(!run_argv(&["/no/such/program".into()], Duration::from_secs(1)).0);
        assert_eq!(parse_cpu("exit 0: 12.5"), Some(12.5));
        assert_eq!(parse_cpu("exit 0: nothing"), None);
    }
}
