//! plbbench: measures how a replicated PostgreSQL service degrades when
//! replicas fail, and whether a service-class-aware router (PLB) protects
//! Premium users. `run(cli)` is the whole program; `main.rs` only calls it,
//! so integration tests drive it in-process.

pub mod archive;
pub mod backend;
pub mod bench;
pub mod cli;
pub mod cluster;
pub mod cluster_cmd;
pub mod compare;
pub mod core;
pub mod driver;
pub mod error;
pub mod experiment;
pub mod live_metrics;
pub mod plan;
pub mod report;
pub mod run;
pub mod sim;
pub mod stats;

use cli::{Cli, Command};
pub use error::Error;
use std::io::Write;

/// Runs one command; output goes to stdout, progress and notes to stderr.
pub fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Run(args) => {
            let plan = plan::Plan::new(args)?;
            let out = run::execute(&plan)?;
            eprintln!("wrote {}", plan.out.display());
            archive::refresh_after(&plan.out);
            print_headline(&out.summary);
            match out.summary.interrupted_by {
                Some(signal) => Err(Error::Interrupted {
                    signal,
                    detail: format!("partial run folder written to {}", plan.out.display()),
                }),
                None => Ok(()),
            }
        }
        Command::Roles(args) => roles(&args.reference),
        Command::Experiment(args) => experiment::experiment(args),
        Command::Cluster(args) => cluster_cmd::cluster(args),
        Command::Calibrate(args) => cluster_cmd::calibrate(args),
        Command::Compare(args) => compare::compare(args),
        Command::Archive(args) => archive::archive(args),
        Command::Bench(args) => bench::bench(args),
        Command::Image(args) => cluster_cmd::image(args),
    }
}

/// `plbbench roles`: the target role vector for K+ = K..0 as CSV.
fn roles(reference: &str) -> Result<(), Error> {
    let reference = plan::parse_reference_any(reference)?;
    let k: usize = reference.iter().sum();
    let mut out = std::io::stdout().lock();
    let mut write = || -> std::io::Result<()> {
        writeln!(out, "survivors,premium,mixed,freemium")?;
        for n in (0..=k).rev() {
            let [p, m, f] = core::roles::target(n, reference, k);
            writeln!(out, "{n},{p},{m},{f}")?;
        }
        Ok(())
    };
    write().map_err(|e| Error::Run(e.into()))
}

/// One line per non-warmup phase and class on stdout.
fn print_headline(s: &report::summary::Summary) {
    println!("phase     class  goodput_qps  retention  p95_ms");
    for r in s.phases.iter().filter(|r| r.phase != core::phases::WARMUP) {
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
        println!(
            "{:<9} {:<6} {:>11.2}  {:>9}  {:>6}",
            r.phase,
            r.class.to_string(),
            r.goodput_qps,
            f(r.retention),
            f(r.p95_ms)
        );
    }
}
