//! `plbbench roles`: PLB's target role vector for every survivor count,
//! as CSV, straight from `core::roles` (no cluster, no run).

use super::run::plan::parse_reference_any;
use crate::core::roles;
use crate::error::Error;
use clap::Args;
use std::io::Write;

/// `plbbench roles`.
#[derive(Debug, Args)]
pub struct RolesArgs {
    /// Reference role split P,M,F; K is its sum.
    #[arg(long, default_value = "2,1,2", value_name = "P,M,F")]
    pub reference: String,
}

/// `plbbench roles`: the target role vector for K+ = K..0 as CSV.
pub fn roles(args: RolesArgs) -> Result<(), Error> {
    let reference = parse_reference_any(&args.reference)?;
    let k: usize = reference.iter().sum();
    let mut out = std::io::stdout().lock();
    let mut write = || -> std::io::Result<()> {
        writeln!(out, "survivors,premium,mixed,freemium")?;
        for n in (0..=k).rev() {
            let [p, m, f] = roles::target(n, reference, k);
            writeln!(out, "{n},{p},{m},{f}")?;
        }
        Ok(())
    };
    write().map_err(|e| Error::Run(e.into()))
}
