//! The command-line surface: the top-level parser and its subcommands. Each
//! subcommand's flags are declared beside the command that consumes them
//! (`commands::*`), so this module only names them; `main.rs` parses, and
//! `plbbench::run` dispatches.

use crate::commands::agreement::AgreementArgs;
use crate::commands::archive::ArchiveArgs;
use crate::commands::bench::BenchArgs;
use crate::commands::calibrate::CalibrateArgs;
use crate::commands::cluster::{ClusterArgs, ImageArgs};
use crate::commands::compare::CompareArgs;
use crate::commands::experiment::ExperimentArgs;
use crate::commands::proxy::ProxyArgs;
use crate::commands::roles::RolesArgs;
use crate::commands::run::args::RunArgs;
use crate::commands::shell::{CompletionsArgs, ManArgs};
use clap::{Parser, Subcommand};

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
    Experiment(ExperimentArgs),
    /// Map where the paper's findings hold over workload parameters (think time, session length, T, arrival process) on the simulator: a heat map per finding, a panel per mix, with the paper's band outlined.
    Map(crate::commands::map::MapArgs),
    /// Run the same grid on the simulator and on a real backend; write the sim-vs-real table (goodput, p95) and its agreement fractions.
    Agreement(AgreementArgs),
    /// Measure a replica's costs under its CPU quota with the cluster loaded (queries at several concurrencies and at a run's, connection set-up) into a calibration file.
    Calibrate(CalibrateArgs),
    /// Compare run or experiment folders side by side; with --threshold, exit 1 on a regression.
    Compare(CompareArgs),
    /// Rebuild the archive page index.html of every run and experiment under reports/.
    Archive(ArchiveArgs),
    /// Raw generator speed against given servers: closed-loop maximum qps (or open loop at a Poisson rate) and latency percentiles.
    Bench(BenchArgs),
    /// Route PostgreSQL clients (psql, pgbench, applications) through PLB or another strategy: a session-level proxy in front of the cluster.
    Proxy(ProxyArgs),
    /// Build the docker backend's PostgreSQL image from Debian packages (no registry needed).
    Image(ImageArgs),
    /// Print a shell completion script on stdout.
    Completions(CompletionsArgs),
    /// Print the man page (roff) of plbbench or of one subcommand on stdout.
    Man(ManArgs),
}
