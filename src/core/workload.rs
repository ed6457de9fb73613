//! The workload file (design.md §3): dataset, query templates per class,
//! session shape, arrival ramp, run length and the router's admission knobs.
//! Parsed from `&str` with unknown keys refused, then validated, so every
//! mistake is reported with its file, line and field before anything starts.

use super::model::Class;
use super::operating_point::{Basis, OperatingPoint};
use serde::{Deserialize, Serialize};

/// A whole workload file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Short name shown in reports.
    pub name: String,
    /// One-line description.
    #[serde(default)]
    pub description: String,
    /// The generated dataset.
    pub dataset: Dataset,
    /// Arrival process.
    pub arrival: Arrival,
    /// Run length, baseline window and default fault preset.
    pub run: RunShape,
    /// Session shape.
    pub session: SessionShape,
    /// The load the workload means to offer, against the cluster's budget:
    /// a run that takes its costs from a calibration re-sizes
    /// `session.between_ms` from it (absent: the pause is as written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operating_point: Option<OperatingPoint>,
    /// Client deadlines and backoff.
    #[serde(default)]
    pub client: ClientShape,
    /// PLB admission knobs.
    #[serde(default)]
    pub router: RouterKnobs,
    /// Degradation modes and priority admission (used with `--admission modes`).
    #[serde(default)]
    pub degradation: super::degradation::DegradationKnobs,
    /// The health state machine's thresholds (used with `--detection suspicion`).
    #[serde(default)]
    pub health: super::health::HealthConfig,
    /// Query templates; each class needs at least one.
    pub query: Vec<QueryTemplate>,
}

/// The TPC-H-like dataset generated with SQL.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dataset {
    /// Scale factor: orders = 1.5M x scale rows (default 0.05).
    pub scale: f64,
    /// Seed of the SQL generator (default 42).
    pub seed: u64,
}

/// Poisson ramp of T clients.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arrival {
    /// Seconds over which the T clients arrive (default 60).
    pub ramp_s: f64,
}

/// Run timeline (scaled by `--time-scale`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunShape {
    /// Run length in seconds (default 300).
    pub duration_s: f64,
    /// Baseline window before the first fault (default 30).
    pub baseline_s: f64,
    /// Fault preset or file used when `--faults` is not given.
    pub faults: String,
}

/// What one client session looks like.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionShape {
    /// Fewest queries in a session (uniform between min and max).
    pub queries_min: u32,
    /// Most queries in a session.
    pub queries_max: u32,
    /// Mean think time between queries of a session, exponential (ms).
    pub think_ms: f64,
    /// Mean think time between sessions of a client, exponential (ms); a
    /// client also thinks this long after it arrives. 0 is a closed
    /// population: a client opens its next session as soon as one ends.
    pub between_ms: f64,
    /// CPU a replica spends setting up a session's connection (fork,
    /// authentication, first prepare), ms under the quota, as `plbbench
    /// calibrate` measures it (default 0: connecting is free). The
    /// simulator charges it before a session's first query.
    #[serde(default)]
    pub connect_cpu_ms: f64,
    /// Of `connect_cpu_ms`, the postmaster's part (forking the backend),
    /// ms: one process does it for every login in turn at its fair share
    /// of the quota, so on a replica with hundreds of busy backends logins
    /// queue for it. `plbbench calibrate` measures it from the
    /// postmaster's own CPU (default 0: no queue at the postmaster).
    #[serde(default)]
    pub fork_cpu_ms: f64,
    /// CPU a replica spends after a session's client closes (the backend's
    /// exit), ms (default 0). The simulator charges it as work no client
    /// waits for; sizing counts it as offered CPU.
    #[serde(default)]
    pub close_cpu_ms: f64,
    /// Time a connection's set-up takes beyond the replica's CPU (the
    /// client's side of SCRAM, round trips), ms: a set-up's wall time on an
    /// idle replica less `connect_cpu_ms`, as `plbbench calibrate` measures
    /// it (default 0). The simulator adds it as a wait before a session's
    /// first query; it costs the replica nothing.
    #[serde(default)]
    pub connect_latency_ms: f64,
}

/// Client deadlines and retries, like real drivers and pools (design.md
/// §3): every TCP connect and query has a deadline, and every login one
/// unless the workload waits as pgjdbc's and libpq's defaults do, and a client whose session
/// broke or could not start retries after an exponential backoff with full
/// jitter (a uniform draw below `min(backoff_max_ms, backoff_ms x 2^k)`
/// after the k-th consecutive failure), so a slow replica does not turn
/// its clients into a retry storm.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientShape {
    /// TCP connect deadline in ms (default 10000): pgjdbc's
    /// `connectTimeout`, tokio-postgres's `connect_timeout`, bounding the
    /// socket's connect only.
    pub connect_timeout_ms: u64,
    /// Login deadline in ms: the whole login (TCP, startup, the wait for
    /// the postmaster to fork a backend, SCRAM, the first prepare), as
    /// pgjdbc's `loginTimeout` and libpq's `connect_timeout` bound it.
    /// Absent, the same as `connect_timeout_ms` (what a file written before
    /// this field meant by its connect deadline); `0` waits without a
    /// deadline, the default of pgjdbc (`loginTimeout` 0), libpq and
    /// psycopg, bounded only by the run's end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub login_timeout_ms: Option<u64>,
    /// Query deadline in ms (default 30000).
    pub query_timeout_ms: u64,
    /// Backoff ceiling after the first failure, ms (default 500).
    pub backoff_ms: u64,
    /// Largest backoff ceiling, ms (default 10000).
    pub backoff_max_ms: u64,
    /// How the backoff is drawn below its ceiling (default full jitter).
    pub jitter: Jitter,
}

impl Default for ClientShape {
    fn default() -> Self {
        ClientShape {
            connect_timeout_ms: 10_000,
            login_timeout_ms: None,
            query_timeout_ms: 30_000,
            backoff_ms: 500,
            backoff_max_ms: 10_000,
            jitter: Jitter::Full,
        }
    }
}

/// How a retry's delay is drawn below its ceiling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Jitter {
    /// Uniform in [0, ceiling) ("full jitter": retries spread out).
    Full,
    /// Exactly the ceiling (deterministic; for tests and ablations).
    None,
}

impl ClientShape {
    /// The login deadline, seconds: `None` waits without one.
    pub fn login_deadline_s(&self) -> Option<f64> {
        match self.login_timeout_ms.unwrap_or(self.connect_timeout_ms) {
            0 => None,
            ms => Some(ms as f64 / 1000.0),
        }
    }

    /// The backoff before retry number `failures + 1` (0 after the first
    /// failure), seconds, given a uniform draw `u` in [0, 1).
    pub fn backoff_s(&self, failures: u32, u: f64) -> f64 {
        let ceiling = (self.backoff_ms as f64 * 2f64.powi(failures.min(30) as i32)).min(self.backoff_max_ms as f64);
        let ms = match self.jitter {
            Jitter::Full => ceiling * u,
            Jitter::None => ceiling,
        };
        ms / 1000.0
    }
}

/// PLB admission knobs (design.md §2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouterKnobs {
    /// theta: sessions per replica before a class spills over; absent, it
    /// is derived from the workload ([`Workload::derived_theta`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub theta: Option<u32>,
    /// alpha: return level tau = floor(alpha x theta) (default 0.7).
    pub alpha: f64,
    /// theta bounds admission step 2 (Mixed) too (design.md §2 as revised
    /// 2026-11-30, default true); false is the unbounded ablation.
    pub mixed_bounded: bool,
    /// How far Freemium may borrow a Premium replica (default `pressure`,
    /// design.md's rule as revised 2026-12-03; the others are ablations).
    pub freemium_borrow: super::router::FreemiumBorrow,
}

impl Default for RouterKnobs {
    fn default() -> Self {
        RouterKnobs { theta: None, alpha: 0.7, mixed_bounded: true, freemium_borrow: Default::default() }
    }
}

/// One query template.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryTemplate {
    /// Name shown in raw output.
    pub name: String,
    /// Class that issues it.
    pub class: Class,
    /// Relative weight among the class's templates (default 1).
    #[serde(default = "one")]
    pub weight: f64,
    /// CPU cost in milliseconds of one core: the simulator's service demand
    /// (measured on the local backend, see the workload file's notes).
    pub cpu_ms: f64,
    /// SQL text; `$1` is bound to a random key in `[1, key_range]`.
    pub sql: String,
    /// Range of the random parameter `$1` (default: no parameter).
    #[serde(default)]
    pub key_range: u64,
}

fn one() -> f64 {
    1.0
}

/// A workload problem: the field and why.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The TOML did not parse or had unknown keys or wrong types.
    #[error("{0}")]
    Parse(String),
    /// A value is out of range.
    #[error("field `{field}`: {reason}")]
    Invalid {
        /// The dotted field path.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

fn invalid(field: &str, reason: impl Into<String>) -> WorkloadError {
    WorkloadError::Invalid { field: field.into(), reason: reason.into() }
}

impl Workload {
    /// Parses and validates a workload from TOML text.
    pub fn parse(text: &str) -> Result<Workload, WorkloadError> {
        if text.trim().is_empty() {
            return Err(WorkloadError::Parse("the file is empty".into()));
        }
        let w: Workload = from_toml(text).map_err(WorkloadError::Parse)?;
        w.validate()?;
        Ok(w)
    }

    /// Checks every value's range.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let positive = |field: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(invalid(field, format!("must be a positive number, got {v}")))
            }
        };
        positive("dataset.scale", self.dataset.scale)?;
        positive("arrival.ramp_s", self.arrival.ramp_s)?;
        positive("run.duration_s", self.run.duration_s)?;
        positive("run.baseline_s", self.run.baseline_s)?;
        positive("session.think_ms", self.session.think_ms)?;
        for (field, v) in [
            ("session.between_ms", self.session.between_ms),
            ("session.connect_cpu_ms", self.session.connect_cpu_ms),
            ("session.fork_cpu_ms", self.session.fork_cpu_ms),
            ("session.close_cpu_ms", self.session.close_cpu_ms),
            ("session.connect_latency_ms", self.session.connect_latency_ms),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(invalid(field, "must be a non-negative number"));
            }
        }
        if self.session.fork_cpu_ms > self.session.connect_cpu_ms {
            return Err(invalid("session.fork_cpu_ms", "must be at most session.connect_cpu_ms"));
        }
        if self.session.queries_min == 0 || self.session.queries_min > self.session.queries_max {
            return Err(invalid("session.queries_min", "must be at least 1 and at most queries_max"));
        }
        if let Some(op) = &self.operating_point {
            op.validate().map_err(|(field, reason)| invalid(field, reason))?;
            if self.session.between_ms == 0.0 {
                return Err(invalid(
                    "operating_point",
                    "a closed population (session.between_ms = 0) offers what its T clients can: it has no operating point to size",
                ));
            }
        }
        if self.router.theta == Some(0) {
            return Err(invalid("router.theta", "must be at least 1"));
        }
        if !(self.router.alpha > 0.0 && self.router.alpha <= 1.0) {
            return Err(invalid("router.alpha", "must be in (0, 1]"));
        }
        self.degradation.validate().map_err(|(field, reason)| invalid(&field, reason))?;
        self.health.validate().map_err(|(field, reason)| invalid(&field, reason))?;
        for (field, v) in [
            ("client.connect_timeout_ms", self.client.connect_timeout_ms),
            ("client.query_timeout_ms", self.client.query_timeout_ms),
        ] {
            if v == 0 {
                return Err(invalid(field, "must be at least 1"));
            }
        }
        if self.client.backoff_max_ms < self.client.backoff_ms {
            return Err(invalid("client.backoff_max_ms", "must be at least backoff_ms"));
        }
        for (i, q) in self.query.iter().enumerate() {
            positive(&format!("query[{i}].weight"), q.weight)?;
            positive(&format!("query[{i}].cpu_ms"), q.cpu_ms)?;
            if q.sql.trim().is_empty() {
                return Err(invalid(&format!("query[{i}].sql"), "is empty"));
            }
        }
        for class in Class::ALL {
            if !self.query.iter().any(|q| q.class == class) {
                return Err(invalid("query", format!("no template for class {class}")));
            }
        }
        Ok(())
    }

    /// Indices of the templates of `class`, with their weights.
    pub fn templates(&self, class: Class) -> Vec<(usize, f64)> {
        self.query.iter().enumerate().filter(|(_, q)| q.class == class).map(|(i, q)| (i, q.weight)).collect()
    }

    /// Mean CPU demand (ms) of one query of `class`, weighted.
    pub fn mean_cpu_ms(&self, class: Class) -> f64 {
        let t = self.templates(class);
        let total: f64 = t.iter().map(|(_, w)| w).sum();
        t.iter().map(|(i, w)| self.query[*i].cpu_ms * w).sum::<f64>() / total
    }

    /// The CPU cores each class (P, F) offers with `clients` clients at
    /// `premium_pct`, ignoring queueing: each client cycles through
    /// `between` think, then a session (its connection's set-up, then mean
    /// n queries with n-1 thinks), served at most one core at a time.
    pub fn offered_cores(&self, clients: u32, premium_pct: u32, cpus: f64) -> [f64; 2] {
        let s = &self.session;
        let n = f64::from(s.queries_min + s.queries_max) / 2.0;
        let p = f64::from(premium_pct) / 100.0;
        Class::ALL.map(|class| {
            let share = if class == Class::P { p } else { 1.0 - p };
            let waited_ms = n * self.mean_cpu_ms(class) + s.connect_cpu_ms;
            let cycle_ms = s.between_ms + waited_ms / cpus.min(1.0) + (n - 1.0) * s.think_ms;
            f64::from(clients) * share * (waited_ms + s.close_cpu_ms) / cycle_ms
        })
    }

    /// The fraction of the whole cluster's CPU budget the workload offers.
    pub fn offered_utilisation(&self, clients: u32, premium_pct: u32, replicas: usize, cpus: f64) -> f64 {
        self.offered_cores(clients, premium_pct, cpus).iter().sum::<f64>() / (replicas as f64 * cpus)
    }

    /// Sessions open at once per replica in the baseline, expected from the
    /// load formula (each client is in a session for its set-up, queries
    /// and thinks, out of its whole cycle), over `replicas` replicas.
    pub fn expected_sessions_per_replica(&self, clients: u32, premium_pct: u32, replicas: usize, cpus: f64) -> f64 {
        let s = &self.session;
        let n = f64::from(s.queries_min + s.queries_max) / 2.0;
        let p = f64::from(premium_pct) / 100.0;
        let open: f64 = Class::ALL
            .iter()
            .map(|&class| {
                let share = if class == Class::P { p } else { 1.0 - p };
                let busy_ms = (n * self.mean_cpu_ms(class) + s.connect_cpu_ms) / cpus.min(1.0);
                let in_session_ms = busy_ms + (n - 1.0) * s.think_ms;
                f64::from(clients) * share * in_session_ms / (s.between_ms + in_session_ms)
            })
            .sum();
        open / replicas as f64
    }

    /// theta's default (design.md §2): the expected concurrent sessions per
    /// replica in the baseline, rounded up (at least 1).
    pub fn derived_theta(&self, clients: u32, premium_pct: u32, replicas: usize, cpus: f64) -> u32 {
        let v = self.expected_sessions_per_replica(clients, premium_pct, replicas, cpus).ceil();
        (v as u32).max(1)
    }

    /// The utilisation of the busier partition when each class has its
    /// own replicas, `split` = (Premium, Freemium) as rr-split's: the
    /// most constrained layout of the main comparison, which sizes the
    /// default workload (design.md §3, "Operating point").
    pub fn partition_utilisation(&self, clients: u32, premium_pct: u32, split: (usize, usize), cpus: f64) -> f64 {
        let [p, f] = self.offered_cores(clients, premium_pct, cpus);
        (p / (split.0 as f64 * cpus)).max(f / (split.1 as f64 * cpus))
    }

    /// The `session.between_ms` at which the workload offers its operating
    /// point on `replicas` replicas of `cpus` cores (rr-split's `split`
    /// for the partition basis), at the costs it holds now; `None` without
    /// an operating point. The point's mix and cluster where it names them,
    /// else the run's (`run_pct`, `replicas`, `cpus`). Err: the reference
    /// population cannot offer it even with no pause, with the most it can.
    pub fn between_at_operating_point(
        &self,
        replicas: usize,
        cpus: f64,
        split: (usize, usize),
        run_pct: u32,
    ) -> Option<Result<f64, f64>> {
        let op = self.operating_point?;
        let pct = op.premium_pct.unwrap_or(run_pct);
        let (replicas, cpus) = (op.replicas.unwrap_or(replicas), op.cpus.unwrap_or(cpus));
        let utilisation = |w: &Workload| match op.basis {
            Basis::Cluster => w.offered_utilisation(op.clients, pct, replicas, cpus),
            Basis::Partition => w.partition_utilisation(op.clients, pct, split, cpus),
        };
        Some(self.between_reaching(op.utilisation, utilisation))
    }

    /// The `session.between_ms` at which `utilisation` (as in
    /// [`Self::between_for`]) equals `target`; Err with the most it reaches
    /// with no pause, when that is below `target`.
    pub fn between_reaching(&self, target: f64, utilisation: impl Fn(&Workload) -> f64) -> Result<f64, f64> {
        let mut busiest = self.clone();
        busiest.session.between_ms = 0.0;
        let most = utilisation(&busiest);
        if most < target {
            Err(most)
        } else {
            Ok(self.between_for(target, utilisation))
        }
    }

    /// The `session.between_ms` at which `utilisation` (a function of the
    /// workload that falls as `between_ms` grows) equals `target`.
    pub fn between_for(&self, target: f64, utilisation: impl Fn(&Workload) -> f64) -> f64 {
        let mut w = self.clone();
        let (mut lo, mut hi) = (0.0, 1e9);
        for _ in 0..200 {
            w.session.between_ms = (lo + hi) / 2.0;
            if utilisation(&w) > target {
                lo = w.session.between_ms;
            } else {
                hi = w.session.between_ms;
            }
        }
        (lo + hi) / 2.0
    }
}

/// Deserialises TOML, reporting errors on one line with the line, column
/// and dotted path of the offending field.
pub fn from_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    let de = toml::Deserializer::new(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = one_line(e.inner());
        let text = if path.is_empty() || path == "." { inner } else { format!("{inner} (field `{path}`)") };
        // One line whatever the input: keys and values may hold newlines.
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    })
}

/// Collapses a multi-line TOML error into one line ("line 3, column 1: ...").
pub fn one_line(e: &toml::de::Error) -> String {
    let msg = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    match e.span() {
        Some(_) => {
            let text = e.to_string();
            let head = text.lines().next().unwrap_or("").trim().trim_start_matches("TOML parse error at ").to_string();
            format!("{head}: {msg}")
        }
        None => msg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: &str = include_str!("../../workloads/analytics.toml");

    #[test]
    fn default_workload_puts_the_freemium_partition_at_70_percent() {
        let w = Workload::parse(DEFAULT).unwrap();
        let u = w.partition_utilisation(1000, 25, (3, 2), 0.3);
        assert!((u - 0.70).abs() < 0.01, "busier partition at {u}");
        let [p, f] = w.offered_cores(1000, 25, 0.3);
        assert!(f / 0.6 > p / 0.9, "Freemium is the busier partition");
        let cluster = w.offered_utilisation(1000, 25, 5, 0.3);
        assert!((cluster - (p + f) / 1.5).abs() < 1e-12);
    }

    #[test]
    fn a_login_deadline_defaults_to_the_connect_deadline_and_zero_waits() {
        let mut w = Workload::parse(DEFAULT).unwrap();
        w.client.connect_timeout_ms = 7_000;
        assert_eq!(w.client.login_deadline_s(), Some(7.0), "an earlier file's connect deadline bounds the login");
        w.client.login_timeout_ms = Some(60_000);
        assert_eq!(w.client.login_deadline_s(), Some(60.0));
        w.client.login_timeout_ms = Some(0);
        assert_eq!(w.client.login_deadline_s(), None, "0 waits, as pgjdbc's loginTimeout 0");
        w.validate().expect("a login without a deadline is valid");
        w.client.connect_timeout_ms = 0;
        assert!(w.validate().unwrap_err().to_string().contains("client.connect_timeout_ms"));
    }

    #[test]
    fn theta_is_the_expected_sessions_per_replica_rounded_up() {
        let mut w = Workload::parse(DEFAULT).unwrap();
        assert_eq!(w.router.theta, None, "the default workload derives theta");
        // One class, no CPU time: a client is in a session for (n-1) thinks
        // out of between + (n-1) thinks.
        w.session = SessionShape {
            queries_min: 11,
            queries_max: 11,
            think_ms: 1000.0,
            between_ms: 30_000.0,
            connect_cpu_ms: 0.0,
            fork_cpu_ms: 0.0,
            close_cpu_ms: 0.0,
            connect_latency_ms: 0.0,
        };
        for q in &mut w.query {
            q.cpu_ms = 1e-9;
        }
        let per = w.expected_sessions_per_replica(1000, 25, 5, 0.3);
        assert!((per - 1000.0 * 10.0 / 40.0 / 5.0).abs() < 1e-3, "{per}");
        assert_eq!(w.derived_theta(1000, 25, 5, 0.3), 51);
        assert_eq!(w.derived_theta(1, 25, 5, 0.3), 1);
    }

    #[test]
    fn between_for_inverts_the_load_formulas() {
        let mut w = Workload::parse(DEFAULT).unwrap();
        for target in [0.5, 0.7, 0.9] {
            w.session.between_ms = w.between_for(target, |w| w.offered_utilisation(1000, 25, 5, 0.3));
            assert!((w.offered_utilisation(1000, 25, 5, 0.3) - target).abs() < 1e-9);
            w.session.between_ms = w.between_for(target, |w| w.partition_utilisation(1000, 25, (3, 2), 0.3));
            assert!((w.partition_utilisation(1000, 25, (3, 2), 0.3) - target).abs() < 1e-9);
        }
    }

    #[test]
    fn the_operating_point_sizes_the_pause_from_the_costs() {
        let mut w = Workload::parse(DEFAULT).unwrap();
        let op = w.operating_point.expect("the default workload states its operating point");
        assert_eq!((op.basis, op.clients, op.premium_pct, op.utilisation), (Basis::Partition, 1000, Some(25), 0.70));
        let at_file_costs = w.between_at_operating_point(5, 0.3, (3, 2), 50).unwrap().unwrap();
        let written = w.session.between_ms;
        assert!((at_file_costs / written - 1.0).abs() < 0.01, "between_ms {written} is the point's {at_file_costs}");
        // A host where every query costs twice as much: a longer pause
        // offers the same 70% of the partition.
        for q in &mut w.query {
            q.cpu_ms *= 2.0;
        }
        let slower = w.between_at_operating_point(5, 0.3, (3, 2), 50).unwrap().unwrap();
        assert!(slower > 1.5 * written, "{slower} vs {written}");
        w.session.between_ms = slower;
        assert!((w.partition_utilisation(1000, 25, (3, 2), 0.3) - 0.70).abs() < 1e-6);
        // On the whole cluster's budget instead, and out of reach.
        w.operating_point = Some(OperatingPoint { basis: Basis::Cluster, utilisation: 0.5, ..op });
        let b = w.between_at_operating_point(5, 0.3, (3, 2), 50).unwrap().unwrap();
        w.session.between_ms = b;
        assert!((w.offered_utilisation(1000, 25, 5, 0.3) - 0.5).abs() < 1e-6);
        w.operating_point = Some(OperatingPoint { utilisation: 50.0, ..op });
        let most = w.between_at_operating_point(5, 0.3, (3, 2), 50).unwrap().unwrap_err();
        assert!(most > 0.70 && most < 50.0, "{most}");
        w.operating_point = None;
        assert_eq!(w.between_at_operating_point(5, 0.3, (3, 2), 50), None);
    }

    #[test]
    fn a_point_without_a_mix_offers_the_same_load_at_every_mix() {
        let mut w = Workload::parse(DEFAULT).unwrap();
        let op = w.operating_point.unwrap();
        w.operating_point = Some(OperatingPoint { basis: Basis::Cluster, utilisation: 0.6, premium_pct: None, ..op });
        assert!(w.operating_point.unwrap().per_mix() && !op.per_mix());
        let mut pauses = Vec::new();
        for pct in [25, 50, 75] {
            let b = w.between_at_operating_point(5, 0.3, (3, 2), pct).unwrap().unwrap();
            let mut at = w.clone();
            at.session.between_ms = b;
            assert!((at.offered_utilisation(1000, pct, 5, 0.3) - 0.6).abs() < 1e-6, "{pct}");
            pauses.push(b);
        }
        // Premium's queries cost less: the more Premium, the shorter the pause.
        assert!(pauses[0] > pauses[1] && pauses[1] > pauses[2], "{pauses:?}");
        // A reference cluster: a bigger --cpus keeps the pause (and so is
        // offered less of its budget) instead of being refused.
        w.operating_point = Some(OperatingPoint { cpus: Some(0.3), replicas: Some(5), ..w.operating_point.unwrap() });
        let at_ref = w.between_at_operating_point(5, 0.3, (3, 2), 50).unwrap().unwrap();
        assert_eq!(w.between_at_operating_point(5, 1.0, (3, 2), 50).unwrap().unwrap(), at_ref);
        assert_eq!(w.between_at_operating_point(9, 0.05, (3, 2), 50).unwrap().unwrap(), at_ref);
        let bad = DEFAULT.replace("premium_pct = 25\n", "cpus = 0\n");
        assert!(Workload::parse(&bad).unwrap_err().to_string().contains("operating_point.cpus"));
        let text = DEFAULT.replace("premium_pct = 25\n", "");
        assert!(Workload::parse(&text).unwrap().operating_point.unwrap().per_mix());
    }

    #[test]
    fn an_operating_point_is_checked_and_refused_for_a_closed_population() {
        let bad = DEFAULT.replace("utilisation = 0.70", "utilisation = -1");
        assert!(Workload::parse(&bad).unwrap_err().to_string().contains("operating_point.utilisation"));
        let bad = DEFAULT.replace("basis = \"partition\"", "basis = \"rack\"");
        assert!(Workload::parse(&bad).unwrap_err().to_string().contains("basis"));
        let closed = DEFAULT.replace("between_ms = 88057.0", "between_ms = 0.0");
        assert_ne!(closed, DEFAULT);
        assert!(Workload::parse(&closed).unwrap_err().to_string().contains("closed population"));
    }

    #[test]
    fn backoff_doubles_to_its_cap_and_jitter_stays_below_the_ceiling() {
        let mut c = ClientShape { jitter: Jitter::None, ..ClientShape::default() };
        let ceilings: Vec<f64> = (0..7).map(|k| c.backoff_s(k, 0.3)).collect();
        assert_eq!(ceilings, [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]);
        assert_eq!(c.backoff_s(u32::MAX, 0.0), 10.0, "no overflow after many failures");
        c.jitter = Jitter::Full;
        assert_eq!(c.backoff_s(2, 0.25), 0.5);
        assert!(c.backoff_s(9, 0.999_999) < 10.0);
        let text = DEFAULT.replacen("backoff_max_ms = 10000", "backoff_max_ms = 100", 1);
        assert_eq!(
            Workload::parse(&text).unwrap_err().to_string(),
            "field `client.backoff_max_ms`: must be at least backoff_ms"
        );
    }

    #[test]
    fn unknown_key_is_reported_with_line() {
        let text = DEFAULT.replacen("[arrival]", "[arrival]\nbogus = 1", 1);
        let err = Workload::parse(&text).unwrap_err().to_string();
        assert!(err.contains("line") && err.contains("bogus"), "{err}");
    }

    #[test]
    fn wrong_type_is_reported() {
        let text = DEFAULT.replacen("ramp_s = 60.0", "ramp_s = \"soon\"", 1);
        let err = Workload::parse(&text).unwrap_err().to_string();
        assert!(err.contains("line") && err.contains("ramp_s"), "{err}");
    }

    #[test]
    fn bad_ranges_name_the_field() {
        let text = DEFAULT.replacen("[router]", "[router]\ntheta = 0", 1);
        assert_eq!(Workload::parse(&text).unwrap_err().to_string(), "field `router.theta`: must be at least 1");
    }

    #[test]
    fn degradation_section_is_parsed_and_checked() {
        let w =
            Workload::parse(&format!("{DEFAULT}\n[degradation]\npreset = \"aggressive\"\nfreemium = \"background\"\n"))
                .unwrap();
        assert_eq!(w.degradation.thresholds(1.0).cpu_pct, [85.0, 93.0, 97.0]);
        let err = Workload::parse(&format!("{DEFAULT}\n[degradation]\nbogus = 1\n")).unwrap_err().to_string();
        assert!(err.contains("bogus"), "{err}");
        let err =
            Workload::parse(&format!("{DEFAULT}\n[degradation]\nhysteresis_factor = 2.0\n")).unwrap_err().to_string();
        assert_eq!(err, "field `degradation.hysteresis_factor`: must be in (0, 1]");
        let err =
            Workload::parse(&format!("{DEFAULT}\n[degradation]\npremium = \"urgent\"\n")).unwrap_err().to_string();
        assert!(err.contains("premium"), "{err}");
    }
}
