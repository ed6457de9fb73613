//! The format versions of summary.json and experiment.json (design.md §5).
//! Each file carries a `schema_version`; a file from before versioning has
//! none and reads as version 0. Every reader accepts every version up to
//! the one this plbbench writes (fields added later carry defaults) and
//! refuses a newer one with one line naming the field, so a folder written
//! once stays comparable and a newer one is never misread.

use serde::Deserialize;

/// The summary.json version this plbbench writes: 1 added `schema_version`;
/// 2 added the login waits (phases' `login_*_ms` and `logins_waiting`,
/// and timeseries.csv's `logins_waiting` and `login_oldest_ms`); 3 added
/// `modes` (admission modes' time in each mode, signals and rejections by
/// phase and reason) and the phases' `rejected_full`.
pub const SUMMARY: u32 = 3;
/// The experiment.json version this plbbench writes: 1 added `schema_version`.
pub const EXPERIMENT: u32 = 1;
/// The `run --stream` file's version (its `run` line): 1 is the first.
pub const STREAM: u32 = 1;

#[derive(Deserialize)]
struct Versioned {
    #[serde(default)]
    schema_version: u32,
}

/// Checks a file's version against `current` (`SUMMARY` or `EXPERIMENT`);
/// a file that is not a JSON object is left for the real parse to report.
pub fn check(text: &str, current: u32) -> Result<(), String> {
    match serde_json::from_str::<Versioned>(text) {
        Ok(v) if v.schema_version > current => Err(format!(
            "field `schema_version`: {} is newer than this plbbench reads ({current}); use a newer plbbench",
            v.schema_version
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unversioned_and_current_files_pass_and_newer_ones_are_refused() {
        assert_eq!(check(r#"{"phases": []}"#, SUMMARY), Ok(()));
        assert_eq!(check(r#"{"schema_version": 1}"#, SUMMARY), Ok(()));
        assert_eq!(check(r#"{"schema_version": 2}"#, SUMMARY), Ok(()));
        let err = check(r#"{"schema_version": 2, "x": 1}"#, EXPERIMENT).unwrap_err();
        assert_eq!(err, "field `schema_version`: 2 is newer than this plbbench reads (1); use a newer plbbench");
        assert_eq!(check("not json", SUMMARY), Ok(()), "the parse itself reports it");
    }
}
