//! The flags of `plbbench run`, shared with `plbbench experiment` (clap
//! derive), and the clap side of the domain's closed sets: the core's
//! enums carry their names, this module adds each value's help text, so the
//! core never depends on clap. Parsing only: [`super::plan`] turns these raw
//! values into a validated plan, so every flag's default and help live here
//! and every cross-field rule lives there.

use crate::core::router::{FreemiumBorrow, Strategy};
use crate::core::settings::{Admission, Checks, ClusterKind, Detection, GeneratorsOn, Named};
use crate::core::watch::Recovery;
use crate::progress::Shown;
use clap::builder::PossibleValue;
use clap::{Args, Parser, ValueEnum};
use std::path::PathBuf;

/// `plbbench run`.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Routing strategy.
    #[arg(long, value_enum, default_value = "plb")]
    pub strategy: Strategy,
    /// Premium:Freemium client mix in percent, summing to 100.
    #[arg(long, default_value = "25:75", value_name = "P:F", allow_hyphen_values = true)]
    pub mix: String,
    /// Fault preset (premium-fault, cascade, gray-pause, slow-replica, flapping, none) or a fault schedule file [default: the workload's, premium-fault].
    #[arg(long, value_name = "PRESET|FILE")]
    pub faults: Option<String>,
    /// Run folder [default: reports/<utc-timestamp>-<strategy>-<mix>-<cluster>].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Run length, as 150s, 2m30s or 5m (k6's spelling) or plain seconds: sets --time-scale to it over the workload's run length
    /// (300 s), so the whole timeline (ramp, faults, baseline) keeps its shape; not with --time-scale.
    #[arg(long, value_name = "D", value_parser = crate::commands::duration, conflicts_with = "time_scale")]
    pub duration: Option<std::time::Duration>,
    /// Print the resolved plan (timeline, phases, fault schedule, routing parameters, offered CPU) in --format and
    /// exit without starting anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Overwrite an existing run folder.
    #[arg(long)]
    pub force: bool,
    /// Admission layer in front of the strategy.
    #[arg(long, value_enum, default_value = "none")]
    pub admission: Admission,
    /// What plb does with a replica that comes back: none (the paper: full share at once), probation (Premium at once, Freemium ramped in over the workload's health.stability_window_s) or slow-start (probation, and the same Freemium ramp on a replica a repair moves from the Premium role to one that takes Freemium).
    #[arg(long, value_enum, default_value = "none")]
    pub recovery: Recovery,
    /// Serve Prometheus metrics at this address during a real run (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Also write the run second by second to FILE while it runs (k6's --out json): a `run` line, then one JSON
    /// line per second (each class's completed queries, p95 and active sessions, every replica's state, role and
    /// CPU), each written a second after it ends; the `completed` fields sum to the summary's totals.
    #[arg(long, value_name = "FILE")]
    pub stream: Option<PathBuf>,
    /// Output on stdout: text (what ran, a line per phase and class, aborted sessions, checks) or json (one object:
    /// the run folder, its report, the failed checks and the whole summary.json; for jq).
    #[arg(long, value_enum, default_value = "text")]
    pub format: crate::commands::Format,
    /// Send the clients through a `plbbench proxy` process started for the run (same routing flags; the proxy
    /// routes, probes and keeps the roles, and serves --metrics-addr; the report says so). Real clusters only; not
    /// with --detection oracle or --admission modes.
    #[arg(long)]
    pub via_proxy: bool,
    /// Route through a tier of N `plbbench proxy` processes (docs/proxy.md, "A tier of proxies"): they elect a
    /// leader through an advisory lock on the cluster and follow its roles; each client goes first to proxy (its
    /// index mod N) and, when that one does not answer, to the next, as libpq does with several hosts. Implies
    /// --via-proxy; 1 to 8.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub proxies: u32,
    /// Proxy faults for a tier (--proxies 2 or more): `failover` (the leader SIGKILLed at 180 s, a follower stopped
    /// at 225 s and started again at 260 s), `none`, or `ACTION@SECONDS,...` with kill-leader, stop-follower and
    /// restart, on the unscaled timeline (scaled by --time-scale as --faults are).
    #[arg(long, default_value = "none", value_name = "SPEC")]
    pub proxy_faults: String,
    /// Drive the clients from N generator processes (see --generators-on), each with its share of --T (every Nth
    /// client, with its own seed stream), all through one `plbbench proxy` (implies --via-proxy); the run collects
    /// their records into one run folder. Real clusters only.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub generators: u32,
    /// Where the --generators run.
    #[arg(long, value_enum, default_value = "host")]
    pub generators_on: GeneratorsOn,
    /// Internal: this process is generator I (0-based) of a `--generators N` run, started by it.
    #[arg(long, hide = true, value_name = "I")]
    pub generator_child: Option<u32>,
    /// Where an external cluster is.
    #[command(flatten)]
    pub external: ExternalArgs,
    /// Settings shared with `plbbench experiment`.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// `--cluster external`: where the replicas are and how to fault them.
#[derive(Debug, Args, Clone, Default)]
pub struct ExternalArgs {
    /// libpq DSN of one replica, in order r1, r2, ... (repeat the flag; before the cluster file's).
    #[arg(long = "dsn", value_name = "DSN")]
    pub dsns: Vec<String>,
    /// Cluster file (TOML): `dsns` and per-action fault commands (see docs/backends.md).
    #[arg(long, value_name = "FILE")]
    pub cluster_file: Option<PathBuf>,
    /// Load the dataset on every external replica instead of only checking it.
    #[arg(long)]
    pub load_dataset: bool,
    /// Internal, set by `run --via-proxy` for its proxy processes: the run checked the dataset already.
    #[arg(long, hide = true)]
    pub dataset_checked: bool,
}

/// Settings shared by `run` and `experiment`.
#[derive(Debug, Args, Clone)]
pub struct CommonArgs {
    /// Number of clients T.
    #[arg(long = "T", visible_alias = "clients", default_value_t = 1000, value_name = "N")]
    pub clients: u32,
    /// Number of replicas K.
    #[arg(long, default_value_t = 5, value_name = "K")]
    pub replicas: usize,
    /// max_connections of every replica of a cluster the run starts, and the simulator's limit; a cluster `plbbench cluster up` left running or an external one keeps its own [default: every client at once on one replica: max(300, T + 20)].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<u32>,
    /// PLB reference role split P,M,F (sum K; read only by plb) [default: the paper's 2,1,2 at K=5, scaled to K by the target-vector formula: 3,1,3 at K=7].
    #[arg(long, value_name = "P,M,F")]
    pub reference: Option<String>,
    /// rr-split partition sizes Premium:Freemium (sum K, each at least 1; read only by rr-split) [default: 3:2 at K=5, the same proportion at K: 4:3 at K=7].
    #[arg(long, value_name = "R:F")]
    pub split: Option<String>,
    /// Workload: a file, or a built-in by name: paper (the paper's regime, a saturated closed population fitted on RQ1 and RQ2), analytics (the steady open workload, the home of --load), closed-population, held-sessions [default: paper; analytics when --load is given].
    #[arg(long, value_name = "FILE|NAME")]
    pub workload: Option<PathBuf>,
    /// Calibration file (`plbbench calibrate`) whose measured costs replace the workload's: each template's cpu_ms and the connection set-up; a workload with an [operating_point] then re-sizes its pause to offer that point at these costs [default: the workload's own figures; scripts/main.sh passes this host's, measured once].
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,
    /// Cluster backend.
    #[arg(long, value_enum, default_value = "local")]
    pub cluster: ClusterKind,
    /// Seed of the client schedule (an experiment's repeat k uses seed + k - 1).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Multiplies the timeline (ramp, fault times, run length, baseline window); 0.1 runs ten times faster.
    #[arg(long, default_value_t = 1.0, value_name = "X", allow_hyphen_values = true)]
    pub time_scale: f64,
    /// CPU budget per replica in cores (C).
    #[arg(long, default_value_t = 0.3, value_name = "C", allow_hyphen_values = true)]
    pub cpus: f64,
    /// How the router learns of faults.
    #[arg(long, value_enum, default_value = "probe")]
    pub detection: Detection,
    /// Health probe interval in milliseconds.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub probe_interval_ms: u64,
    /// Offered load: the CPU the workload offers, as a fraction of the cluster's calibrated capacity (K x C); sets the think time between sessions (session.between_ms) for --T clients [default: the workload's between_ms].
    #[arg(long, value_name = "X", allow_hyphen_values = true)]
    pub load: Option<f64>,
    /// PLB admission threshold theta in sessions per replica [default: the workload's, else the expected concurrent sessions per replica in the baseline, rounded up].
    #[arg(long, value_name = "N")]
    pub theta: Option<u32>,
    /// PLB ablation: Mixed admits whatever its load (design.md §2 before 2026-11-30) [default: bounded by theta].
    #[arg(long)]
    pub mixed_unbounded: bool,
    /// PLB: how Freemium may borrow a Premium replica (admission step 3) [default: pressure, or the workload's router.freemium_borrow].
    #[arg(long, value_enum, value_name = "RULE")]
    pub freemium_borrow: Option<FreemiumBorrow>,
    /// Kept for old command lines: theta bounds Mixed by default now.
    #[arg(long, hide = true, conflicts_with = "mixed_unbounded")]
    pub mixed_bounded: bool,
    /// Simulator only: route through a tier of N routers, as N proxies would (docs/scale.md, "Routing on stale
    /// counts"): router 0 leads with fresh counts (repairs, borrowing, returns); the others route client c (c mod N)
    /// from a snapshot of the leader's roles and counts refreshed every --refresh-ms plus their own sessions since,
    /// and ask the leader when no replica of the class's role or Mixed is below theta; summary.json's `tier` counts
    /// what the stale counts did [default: 1, one router].
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub routers: u32,
    /// With --routers: how often a follower's snapshot of the leader is refreshed, in milliseconds [default: 1000].
    #[arg(long, default_value_t = 1000, hide_default_value = true, value_name = "MS")]
    pub refresh_ms: u64,
    /// With --routers: each follower admits at most floor(theta / N) of its own sessions per replica (the leader's
    /// quotas) instead of testing the snapshot's counts against theta.
    #[arg(long)]
    pub quotas: bool,
    /// Also write queries.csv, one row per query.
    #[arg(long)]
    pub raw: bool,
    /// No progress on stderr unless --progress names a mode.
    #[arg(long, short)]
    pub quiet: bool,
    /// Progress on stderr: auto (a bar on a terminal, else a status line every 5 s of a run with elapsed time,
    /// per-class goodput and p95, replicas up and aborted sessions, or a line per run of an experiment), bar, lines
    /// or none.
    #[arg(long, value_enum, default_value = "auto", value_name = "MODE")]
    pub progress: Progress,
    /// What a failed run validity check (baseline steady, time-outs, phase length, stop deadline, generator) does: fail writes the run folder, prints each failed check and exits with status 1; warn prints them as warnings and exits 0.
    #[arg(long, value_enum, default_value = "fail")]
    pub checks: Checks,
}

/// `--progress`: how long work shows its progress on stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Progress {
    /// A bar on a terminal, status lines elsewhere.
    #[default]
    Auto,
    /// Always the bar.
    Bar,
    /// Status lines every few seconds (a run) or per run (an experiment).
    Lines,
    /// Nothing (as --quiet).
    None,
}

impl Progress {
    /// What to show: `auto` is nothing with `quiet`, else chosen by whether
    /// stderr is a terminal; a mode asked for by name holds even with `quiet`.
    pub fn resolve(self, quiet: bool) -> Shown {
        match self {
            Progress::Auto if quiet => Shown::Nothing,
            Progress::Auto if std::io::IsTerminal::is_terminal(&std::io::stderr()) => Shown::Bar,
            Progress::Auto | Progress::Lines => Shown::Lines,
            Progress::Bar => Shown::Bar,
            Progress::None => Shown::Nothing,
        }
    }
}

/// `plbbench run`'s defaults, from its own clap definition (so fields added
/// to RunArgs later get their defaults here too).
pub fn default_run_args() -> RunArgs {
    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        run: RunArgs,
    }
    Wrap::try_parse_from(["plbbench"]).expect("run's flags all have defaults").run
}

/// The help of each value of a closed set, as `--help` lists it.
trait Help: Named {
    fn help(self) -> &'static str;
}

/// `ValueEnum` for the core's closed sets: their names and [`Help`].
macro_rules! value_enum {
    ($($t:ty),*) => {$(
        impl ValueEnum for $t {
            fn value_variants<'a>() -> &'a [Self] {
                <$t as Named>::ALL
            }
            fn to_possible_value(&self) -> Option<PossibleValue> {
                Some(PossibleValue::new(self.name()).help(self.help()))
            }
        }
    )*};
}

value_enum!(Strategy, Recovery, ClusterKind, GeneratorsOn, Detection, Admission, Checks, FreemiumBorrow);

impl Help for FreemiumBorrow {
    fn help(self) -> &'static str {
        match self {
            FreemiumBorrow::Pressure => "design.md (default): a Freemium session may use a Premium replica while its CPU, with one session more, stays under half its budget and no Premium session fell back since the last CPU reading (no CPU measured: no borrowing)",
            FreemiumBorrow::PressureFallback => "Ablation: pressure, and no borrowing either while a Premium session went past its role and Mixed since the last CPU reading",
            FreemiumBorrow::Surplus => "design.md's first reading: a Premium replica idle of Premium sessions, only while the Premium role is above its target",
            FreemiumBorrow::Idle => "A Premium replica idle of Premium sessions, while the Premium role keeps another unborrowed replica",
            FreemiumBorrow::Mirror => "Premium's rule mirrored: the least-loaded Premium replica, if Premium keeps another unborrowed one and it is less loaded than Freemium's best",
            FreemiumBorrow::Never => "Freemium never borrows",
        }
    }
}

impl Help for Strategy {
    fn help(self) -> &'static str {
        match self {
            Strategy::Plb => "The paper's policy: P/M/F roles, load-aware admission, repair-to-target",
            Strategy::RrSplit => "Static per-class partitions (default 3RR+2RR), round robin inside each",
            Strategy::Rr => "Shared round robin over all healthy replicas (5RR)",
            Strategy::Lc => "Least active sessions over all healthy replicas (ablation)",
        }
    }
}

impl Help for Recovery {
    fn help(self) -> &'static str {
        match self {
            Recovery::None => {
                "The paper's behaviour: full share at once (after the health machine's probation, under `--detection suspicion`)"
            }
            Recovery::Probation => {
                "Premium first: Premium may use the returning replica at once; its Freemium share ramps from 0 to 1 over the stability window"
            }
            Recovery::SlowStart => {
                "Probation, and a slow start: a replica a repair moves from the Premium role to one that takes Freemium ramps Freemium in over the same window"
            }
        }
    }
}

impl Help for ClusterKind {
    fn help(self) -> &'static str {
        match self {
            ClusterKind::Local => "PostgreSQL servers started by plbbench on this machine",
            ClusterKind::Docker => "Containers through the Docker Engine API (DOCKER_HOST is honoured)",
            ClusterKind::External => "An existing cluster given by --dsn or --cluster-file",
            ClusterKind::Sim => "The discrete-event simulator",
        }
    }
}

impl Help for Detection {
    fn help(self) -> &'static str {
        match self {
            Detection::Probe => "Health probes and connection errors, as a real middleware",
            Detection::Oracle => "The router is told at the instant of the fault (ablation)",
            Detection::Suspicion => {
                "Probes, connection errors and query latency through the health state machine: SUSPECT and DEGRADED replicas get a reduced share of new sessions, ISOLATED none, RECOVERING a probation share (thresholds: the workload's `[health]`)"
            }
        }
    }
}

impl Help for Admission {
    fn help(self) -> &'static str {
        match self {
            Admission::None => "Every session goes straight to the router",
            Admission::Modes => "Degradation modes with priority admission (the workload's `[degradation]`)",
        }
    }
}

impl Help for GeneratorsOn {
    fn help(self) -> &'static str {
        match self {
            GeneratorsOn::Host => "Processes on this host",
            GeneratorsOn::Docker => "Containers of plbbench's image through the Docker Engine API (DOCKER_HOST is honoured; on this host they share its network, on a remote engine they reach the proxy at this host's address towards it)",
        }
    }
}

impl Help for Checks {
    fn help(self) -> &'static str {
        match self {
            Checks::Fail => "Write the run folder, print each failed check, exit with status 1",
            Checks::Warn => "Print each failed check as a warning, exit 0 (the report still shows them)",
        }
    }
}
