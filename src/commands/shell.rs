//! `plbbench completions SHELL` and `plbbench man [SUBCOMMAND]`: the shell
//! completion script (clap_complete) and the roff man page (clap_mangen),
//! both generated from the same clap definition as `--help`, so they never
//! drift from the flags. The caller passes that definition in: the command
//! line sits above this layer.

use crate::error::{input, Error};
use anyhow::Context;
use clap::Args;
use std::io::Write;

/// `plbbench completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell (bash: `source <(plbbench completions bash)`; zsh: write `_plbbench` into a folder of $fpath).
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// `plbbench man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The subcommand whose page to print [default: plbbench's own, which lists them all]
    /// (`plbbench man run | man -l -`).
    #[arg(value_name = "SUBCOMMAND")]
    pub subcommand: Option<String>,
}

/// Writes the completion script of `cmd` for `args.shell` on stdout.
pub fn completions(args: CompletionsArgs, mut cmd: clap::Command) -> Result<(), Error> {
    clap_complete::generate(args.shell, &mut cmd, "plbbench", &mut std::io::stdout());
    Ok(())
}

/// Writes the man page of `cmd` or of its subcommand on stdout.
pub fn man(args: ManArgs, cmd: clap::Command) -> Result<(), Error> {
    let page = match &args.subcommand {
        None => cmd,
        Some(name) => {
            let sub = cmd.find_subcommand(name).cloned().ok_or_else(|| {
                let names: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
                input("SUBCOMMAND", format!("`{name}` is not one of {}", names.join(", ")))
            })?;
            sub.name(format!("plbbench-{name}"))
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out).context("rendering the man page")?;
    std::io::stdout().write_all(&out).context("writing the man page")?;
    Ok(())
}
