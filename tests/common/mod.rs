//! Helpers shared by the test binaries that need real PostgreSQL.

use plbbench::cluster::local::pgbin;

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
pub mod proxy;
pub mod run;

/// Connects with `cfg` and runs `sql`, returning the first column as text;
/// `Err("timeout")` when it takes longer than `limit`.
#[allow(dead_code)]
pub async fn query(cfg: &tokio_postgres::Config, sql: &str, limit: std::time::Duration) -> Result<String, String> {
    let work = async {
        let (client, conn) = cfg.connect(tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let rows = client.simple_query(sql).await.map_err(|e| e.to_string())?;
        rows.into_iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or("").to_string()),
                _ => None,
            })
            .ok_or_else(|| "no row".to_string())
    };
    tokio::time::timeout(limit, work).await.map_err(|_| "timeout".to_string())?
}
