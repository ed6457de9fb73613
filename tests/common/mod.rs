//! Helpers shared by the test binaries that need real PostgreSQL.

use plbbench::cluster::pgbin;

#[allow(dead_code)]
/// `false` (skip) only when PostgreSQL is missing and skipping was asked
/// with `PLBBENCH_SKIP_PG=1`; otherwise a missing server fails the test
/// with a pointer to the install script.
pub fn have_postgres() -> bool {
    if pgbin::find_bindir().is_some() {
        return true;
    }
    if std::env::var_os("PLBBENCH_SKIP_PG").is_some() {
        eprintln!("skipping: PostgreSQL not installed and PLBBENCH_SKIP_PG is set");
        return false;
    }
    panic!("PostgreSQL server binaries not found: run scripts/install-postgres.sh as root, or set PLBBENCH_SKIP_PG=1");
}
pub mod run;
