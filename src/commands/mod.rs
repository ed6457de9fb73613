//! The command layer: one module per `plbbench` subcommand, each with the
//! flags it reads (clap derive) and the code that turns them into work on
//! the layers below (the core, the backends, the report writers). Nothing
//! below this layer sees clap or imports from here; `cli.rs` above only
//! names the subcommands and `plbbench::run` dispatches to them.

pub mod agreement;
pub mod archive;
pub mod bench;
pub mod calibrate;
pub mod cluster;
pub mod compare;
pub mod experiment;
mod lists;
pub mod reap;
pub mod roles;
pub mod run;
pub mod shell;
mod signals;

/// `--format` of the commands that print one result (`run`, `bench`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned lines for a person.
    Text,
    /// One JSON object on stdout, for scripts (`| jq`).
    Json,
}
