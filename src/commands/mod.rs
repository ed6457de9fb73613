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
pub mod roles;
pub mod run;
mod signals;
