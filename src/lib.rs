//! plbbench: measures how a replicated PostgreSQL service degrades when
//! replicas fail, and whether a service-class-aware router (PLB) protects
//! Premium users. `run(cli)` is the whole program; `main.rs` only calls it,
//! so integration tests drive it in-process.
//!
//! The layers, each importing only from those before it (`tests/layers.rs`
//! checks this): the pure [`core`] with `error`, `stats` and the leaf
//! helpers `fsutil` and `progress`; the backends that execute sessions
//! (`backend`: the simulator and the real driver) and provision clusters
//! ([`cluster`]), and the [`proxy`] (`plbbench proxy`);
//! the `report` writers;
//! the [`commands`]; and the command line ([`cli`]) with this dispatch.

pub(crate) mod backend;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod core;
pub mod error;
pub(crate) mod fsutil;
pub(crate) mod progress;
pub mod proxy;
pub(crate) mod report;
pub(crate) mod scram;
pub(crate) mod stats;

use cli::{Cli, Command};
use commands::{archive, bench, cluster as cluster_cmd, compare, experiment, roles, run as run_cmd, shell};
pub use error::Error;

/// Runs one command; output goes to stdout, progress and notes to stderr.
pub fn run(cli: Cli) -> Result<(), Error> {
    commands::reap::orphans();
    match cli.command {
        Command::Run(args) => run_cmd::run(args),
        Command::Roles(args) => roles::roles(args),
        Command::Experiment(args) => experiment::experiment(args),
        Command::Map(args) => crate::commands::map::map(args),
        Command::Cluster(args) => cluster_cmd::cluster(args),
        Command::Agreement(args) => crate::commands::agreement::agreement(args),
        Command::Calibrate(args) => crate::commands::calibrate::calibrate(args),
        Command::Compare(args) => compare::compare(args),
        Command::Archive(args) => archive::archive(args),
        Command::Bench(args) => bench::bench(args),
        Command::Proxy(args) => crate::commands::proxy::proxy(args),
        Command::Image(args) => cluster_cmd::image(args),
        Command::Completions(args) => shell::completions(args, <Cli as clap::CommandFactory>::command()),
        Command::Man(args) => shell::man(args, <Cli as clap::CommandFactory>::command()),
    }
}
