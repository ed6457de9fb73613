//! Finding the machine's PostgreSQL server binaries and their version.
//!
//! The local backend, its tests and `scripts/install-postgres.sh` all use the
//! same lookup so that "PostgreSQL is installed" means one thing everywhere:
//! `$PLBBENCH_PG_BIN`, then `initdb` on `PATH` (following symlinks to the
//! directory that also holds `postgres`), then the newest
//! `/usr/lib/postgresql/*/bin` (Debian's layout).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Environment variable that names a directory holding `initdb` and
/// `postgres`; checked first. Unset by default.
pub const BIN_ENV: &str = "PLBBENCH_PG_BIN";

/// Returns the directory that holds both `initdb` and `postgres`, or `None`
/// when PostgreSQL's server binaries are not installed.
pub fn find_bindir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(BIN_ENV) {
        let dir = PathBuf::from(dir);
        if has_server(&dir) {
            return Some(dir);
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let initdb = dir.join("initdb");
            if !initdb.is_file() {
                continue;
            }
            let real = std::fs::canonicalize(&initdb).unwrap_or(initdb);
            if let Some(parent) = real.parent() {
                if has_server(parent) {
                    return Some(parent.to_path_buf());
                }
            }
        }
    }
    debian_bindirs().into_iter().find(|d| has_server(d))
}

/// `/usr/lib/postgresql/*/bin`, newest major version first.
fn debian_bindirs() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") else {
        return Vec::new();
    };
    let mut versions: Vec<(Vec<u32>, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let key = name.split('.').map(|p| p.parse().ok()).collect::<Option<Vec<u32>>>()?;
            Some((key, e.path().join("bin")))
        })
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0));
    versions.into_iter().map(|(_, p)| p).collect()
}

fn has_server(dir: &Path) -> bool {
    dir.join("initdb").is_file() && dir.join("postgres").is_file()
}

/// Runs `postgres --version` and returns e.g. `PostgreSQL 15.18 (Debian ...)`.
pub fn server_version(bindir: &Path) -> std::io::Result<String> {
    let out = Command::new(bindir.join("postgres")).arg("--version").output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!("postgres --version exited with {}", out.status)));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let text = text.trim();
    // "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
    Ok(match text.strip_prefix("postgres (PostgreSQL) ") {
        Some(rest) => format!("PostgreSQL {rest}"),
        None => text.to_string(),
    })
}

/// The major version in a string from [`server_version`] (`15` for
/// `PostgreSQL 15.18`, `9` for `9.6.2`); `None` if it has no number.
pub fn major_version(version: &str) -> Option<u32> {
    let num = version.split_whitespace().find(|w| w.starts_with(|c: char| c.is_ascii_digit()))?;
    num.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn major_versions() {
        for (s, want) in [
            ("PostgreSQL 15.18 (Debian 15.18-0+deb12u1)", Some(15)),
            ("PostgreSQL 9.6.2", Some(9)),
            ("PostgreSQL 17beta1", Some(17)),
            ("nonsense", None),
        ] {
            assert_eq!(major_version(s), want, "{s}");
        }
    }
}
