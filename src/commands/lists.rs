//! The one parser of comma-separated flags (`--strategies plb,rr`,
//! `--mixes`, `--faults`, `--metrics`, ...): clap splits the list, this
//! parses every item and refuses one that repeats an earlier item, with a
//! one-line error naming the flag (exit status 2) — the same rule for every
//! list flag of every command.

use crate::error::{input, Error};
use clap::ValueEnum;

/// Parses every item of `flag`'s list with `parse`; an item equal to an
/// earlier one (after parsing) is refused as listed twice.
pub fn parse_list<T: PartialEq>(
    flag: &str,
    items: &[String],
    mut parse: impl FnMut(&str) -> Result<T, Error>,
) -> Result<Vec<T>, Error> {
    let mut out: Vec<T> = Vec::with_capacity(items.len());
    for s in items {
        let v = parse(s)?;
        if out.contains(&v) {
            return Err(input(flag, format!("`{s}` is listed twice")));
        }
        out.push(v);
    }
    Ok(out)
}

/// One value of a closed set by its command-line name (case-insensitive,
/// trimmed); otherwise an error naming the flag, the `noun` and every name.
pub fn closed<T: ValueEnum>(flag: &str, noun: &str, s: &str) -> Result<T, Error> {
    T::from_str(s.trim(), true).map_err(|_| {
        let names: Vec<String> = T::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value())
            .map(|p| p.get_name().to_string())
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        input(flag, format!("unknown {noun} `{s}`{} (expected {})", did_you_mean(s, &names), names.join(", ")))
    })
}

/// ", did you mean `x`?" for the name closest to `got`, when one is close
/// (Jaro similarity above 0.7, as clap suggests flags); else nothing.
pub fn did_you_mean(got: &str, names: &[&str]) -> String {
    let got = got.trim().to_lowercase();
    let best = names.iter().map(|n| (strsim::jaro(&got, n), *n)).max_by(|a, b| a.0.total_cmp(&b.0));
    match best {
        Some((score, name)) if score > 0.7 => format!(", did you mean `{name}`?"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::router::Strategy;

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn suggests_the_closest_name_only_when_close() {
        let names = ["premium-fault", "cascade", "gray-pause"];
        assert_eq!(did_you_mean("cascde", &names), ", did you mean `cascade`?");
        assert_eq!(did_you_mean(" Gray-Paus ", &names), ", did you mean `gray-pause`?");
        assert_eq!(did_you_mean("xyz", &names), "");
        assert_eq!(did_you_mean("cascade", &[]), "");
    }

    #[test]
    fn repeats_are_refused_naming_the_flag() {
        let parse = |s: &str| closed::<Strategy>("--strategies", "strategy", s);
        assert_eq!(parse_list("--strategies", &list(&["plb", " RR"]), parse).unwrap(), [Strategy::Plb, Strategy::Rr]);
        let e = parse_list("--strategies", &list(&["plb", "Plb"]), parse).unwrap_err();
        assert_eq!(e.to_string(), "--strategies: `Plb` is listed twice");
        assert_eq!(e.exit_code(), 2);
        let e = parse_list("--strategies", &list(&["fastest"]), parse).unwrap_err();
        assert_eq!(e.to_string(), "--strategies: unknown strategy `fastest` (expected plb, rr-split, rr, lc)");
    }
}
