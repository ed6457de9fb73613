//! The command-line surface (clap derive). Parsing only: `plan.rs` turns
//! these raw values into a validated plan, so every flag's default and help
//! live here and every cross-field rule lives there.

use crate::core::router::Strategy;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

/// plbbench: how a replicated PostgreSQL service degrades when replicas fail,
/// and whether a service-class-aware router (PLB) protects Premium users.
#[derive(Debug, Parser)]
#[command(name = "plbbench", version, about, max_term_width = 100)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one experiment: T client sessions through a strategy, with faults, and write a run folder.
    Run(RunArgs),
    /// Print PLB's target role vector for every survivor count K+ from K down to 0, as CSV.
    Roles(RolesArgs),
    /// Bring a cluster up, show its status, or take it down.
    Cluster(ClusterArgs),
    /// Run a grid of strategies x mixes x fault presets x repeats; write medians, quartiles and the paper's figures.
    Experiment(crate::experiment::ExperimentArgs),
    /// Measure each query template's CPU cost on one local replica (calibrates the simulator and the workload).
    Calibrate(CalibrateArgs),
    /// Compare run or experiment folders side by side; with --threshold, exit 1 on a regression.
    Compare(crate::compare::CompareArgs),
    /// Rebuild the archive page index.html of every run and experiment under reports/.
    Archive(crate::archive::ArchiveArgs),
    /// Raw generator speed against given servers: closed-loop maximum qps (or open loop at a Poisson rate) and latency percentiles.
    Bench(crate::bench::BenchArgs),
    /// Build the docker backend's PostgreSQL image from Debian packages (no registry needed).
    Image(ImageArgs),
}

/// `plbbench image`.
#[derive(Debug, Args)]
pub struct ImageArgs {
    /// What to do with the image.
    #[command(subcommand)]
    pub action: ImageAction,
}

/// Image actions.
#[derive(Debug, Subcommand)]
pub enum ImageAction {
    /// Build plbbench/postgres:15 (debootstrap + import through the Engine API) unless it is current.
    Build {
        /// Rebuild even when a current image exists.
        #[arg(long)]
        force: bool,
    },
}

/// `plbbench calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Workload whose templates to measure [default: built-in analytics].
    #[arg(long, value_name = "FILE")]
    pub workload: Option<PathBuf>,
    /// Queries per template.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub queries: u32,
    /// CPU quota (cores) under which throughput is also measured with `bench` machinery (0 skips that part).
    #[arg(long, default_value_t = 0.3, value_name = "C")]
    pub cpus: f64,
    /// Connections of each throughput measurement under the quota.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub connections: u32,
    /// Seconds of each throughput measurement under the quota.
    #[arg(long, default_value_t = 5.0, value_name = "S")]
    pub seconds: f64,
}

/// Which cluster runs the sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
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

impl ClusterKind {
    /// The name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            ClusterKind::Local => "local",
            ClusterKind::Docker => "docker",
            ClusterKind::External => "external",
            ClusterKind::Sim => "sim",
        }
    }
}

/// How the router learns of faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Detection {
    /// Health probes and connection errors, as a real middleware.
    Probe,
    /// The router is told at the instant of the fault (ablation).
    Oracle,
    /// Probes, connection errors and query latency through the health state
    /// machine: SUSPECT and DEGRADED replicas get a reduced share of new
    /// sessions, ISOLATED none, RECOVERING a probation share (thresholds: the
    /// workload's `[health]`).
    Suspicion,
}

/// What stands in front of the strategy (issue 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Admission {
    /// Every session goes straight to the router.
    None,
    /// Degradation modes with priority admission (the workload's `[degradation]`).
    Modes,
}

impl Admission {
    /// The name used on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            Admission::None => "none",
            Admission::Modes => "modes",
        }
    }
}

/// `plbbench run`.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Routing strategy.
    #[arg(long, value_enum, default_value = "plb")]
    pub strategy: Strategy,
    /// Premium:Freemium client mix in percent, summing to 100.
    #[arg(long, default_value = "25:75", value_name = "P:F", allow_hyphen_values = true)]
    pub mix: String,
    /// Fault preset (premium-fault, cascade, none) or a fault schedule file [default: the workload's, premium-fault].
    #[arg(long, value_name = "PRESET|FILE")]
    pub faults: Option<String>,
    /// Run folder [default: reports/<utc-timestamp>-<strategy>-<mix>-<cluster>].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Overwrite an existing run folder.
    #[arg(long)]
    pub force: bool,
    /// Admission layer in front of the strategy.
    #[arg(long, value_enum, default_value = "none")]
    pub admission: Admission,
    /// What plb does with a replica that comes back: none (the paper: full share at once) or probation (Premium at once, Freemium ramped in over the workload's health.stability_window_s).
    #[arg(long, value_enum, default_value = "none")]
    pub recovery: crate::core::watch::Recovery,
    /// Serve Prometheus metrics at this address during a real run (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
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
    /// Cluster file (TOML): `dsns` and per-action fault commands (see the README).
    #[arg(long, value_name = "FILE")]
    pub cluster_file: Option<PathBuf>,
    /// Load the dataset on every external replica instead of only checking it.
    #[arg(long)]
    pub load_dataset: bool,
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
    /// PLB reference role split P,M,F (sum K).
    #[arg(long, default_value = "2,1,2", value_name = "P,M,F")]
    pub reference: String,
    /// rr-split partition sizes Premium:Freemium (sum K).
    #[arg(long, default_value = "3:2", value_name = "R:F")]
    pub split: String,
    /// Workload file [default: workloads/analytics.toml, built in].
    #[arg(long, value_name = "FILE")]
    pub workload: Option<PathBuf>,
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
    /// PLB admission threshold theta in sessions per replica [default: the workload's, 10].
    #[arg(long, value_name = "N")]
    pub theta: Option<u32>,
    /// PLB ablation: Mixed admits only below theta too [default: the workload's, off].
    #[arg(long)]
    pub mixed_bounded: bool,
    /// Also write queries.csv, one row per query.
    #[arg(long)]
    pub raw: bool,
    /// No progress bar.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `plbbench roles`.
#[derive(Debug, Args)]
pub struct RolesArgs {
    /// Reference role split P,M,F; K is its sum.
    #[arg(long, default_value = "2,1,2", value_name = "P,M,F")]
    pub reference: String,
}

/// `plbbench cluster`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// up, status or down.
    #[command(subcommand)]
    pub action: ClusterAction,
}

/// Cluster actions.
#[derive(Debug, Subcommand)]
pub enum ClusterAction {
    /// Start K replicas, load the dataset, print one DSN per line, and leave them running.
    Up(ClusterUpArgs),
    /// Show each replica's port, pid, health and CPU budget.
    Status(ClusterSelect),
    /// Stop and remove everything the cluster used.
    Down(ClusterDownArgs),
    /// Apply one fault to one replica of the running cluster (down, rejoin, pause, resume, slow=C, partition, heal).
    Fault(ClusterFaultArgs),
    /// Print one replica's cumulative CPU seconds (a sampler for external cluster files).
    Cpu(ClusterReplicaArgs),
}

/// `plbbench cluster down`.
#[derive(Debug, Args)]
pub struct ClusterDownArgs {
    /// Backend.
    #[arg(long, value_enum, default_value = "local")]
    pub backend: ClusterKind,
    /// docker: remove every container, network, volume and data image with plbbench's labels, not only this cluster's.
    #[arg(long)]
    pub all: bool,
}

/// `plbbench cluster fault`.
#[derive(Debug, Args)]
pub struct ClusterFaultArgs {
    /// The fault: down, rejoin, pause, resume, slow=CORES, partition, heal.
    #[arg(value_name = "FAULT")]
    pub fault: String,
    /// Replica r1..rK.
    #[arg(value_name = "REPLICA")]
    pub replica: String,
    /// Backend.
    #[arg(long, value_enum, default_value = "local")]
    pub backend: ClusterKind,
}

/// `plbbench cluster cpu`.
#[derive(Debug, Args)]
pub struct ClusterReplicaArgs {
    /// Replica r1..rK.
    #[arg(value_name = "REPLICA")]
    pub replica: String,
    /// Backend.
    #[arg(long, value_enum, default_value = "local")]
    pub backend: ClusterKind,
}

/// `plbbench cluster up`.
#[derive(Debug, Args)]
pub struct ClusterUpArgs {
    /// Backend.
    #[arg(long, value_enum, default_value = "local")]
    pub backend: ClusterKind,
    /// Number of replicas K.
    #[arg(long, default_value_t = 5, value_name = "K")]
    pub replicas: usize,
    /// CPU budget per replica in cores.
    #[arg(long, default_value_t = 0.3, value_name = "C")]
    pub cpus: f64,
    /// docker: memory limit per container in MiB.
    #[arg(long, default_value_t = 1024, value_name = "MIB")]
    pub memory_mib: u64,
    /// Workload whose dataset to load [default: built-in analytics].
    #[arg(long, value_name = "FILE")]
    pub workload: Option<PathBuf>,
}

/// Which cluster `status`/`down` act on.
#[derive(Debug, Args)]
pub struct ClusterSelect {
    /// Backend.
    #[arg(long, value_enum, default_value = "local")]
    pub backend: ClusterKind,
}
