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
pub mod map;
pub mod proxy;
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

/// A length of time as every subcommand spells it: plain seconds (`10`,
/// `0.5`, as pgbench's `-T`) or a unit (`150s`, `2m30s`, `5m`, as k6's
/// `--duration`). The number is returned as given; each flag checks its range.
pub fn seconds(s: &str) -> Result<f64, String> {
    if let Ok(x) = s.trim().parse::<f64>() {
        return Ok(x);
    }
    humantime::parse_duration(s.trim())
        .map(|d| d.as_secs_f64())
        .map_err(|e| format!("`{s}` is neither seconds nor a duration like 90s or 2m30s ({e})"))
}

/// [`seconds`] as a `Duration`, for flags that need one.
pub fn duration(s: &str) -> Result<std::time::Duration, String> {
    let x = seconds(s)?;
    std::time::Duration::try_from_secs_f64(x).map_err(|_| format!("`{s}` is not a length of time"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn lengths_of_time_read_as_seconds_or_with_a_unit() {
        assert_eq!(super::seconds("10"), Ok(10.0));
        assert_eq!(super::seconds("2m30s"), Ok(150.0));
        assert_eq!(super::seconds("0.5"), Ok(0.5));
        assert_eq!(super::seconds("-1"), Ok(-1.0), "the flag, not the parser, judges the range");
        assert!(super::seconds("soon").unwrap_err().contains("`soon`"));
        assert_eq!(super::duration("1m"), Ok(std::time::Duration::from_secs(60)));
        assert!(super::duration("-1").is_err());
    }
}
