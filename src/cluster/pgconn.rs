//! Small synchronous helpers over `tokio-postgres` for provisioning and
//! health checks: connect with a deadline, ping, run a script.
//!
//! The local backend's API is synchronous (it is called from setup code and
//! from the fault injector's blocking tasks), so each call runs its future
//! on a private current-thread runtime in a scoped thread. That works both
//! from plain threads and from inside another tokio runtime, where a nested
//! `block_on` would panic.

use std::future::Future;
use std::time::Duration;

use tokio_postgres::{Client, Config, NoTls};

/// Why a connection or query did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// No answer within the deadline (connect plus query).
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The server or the connection reported an error.
    #[error("postgres error")]
    Pg(#[from] tokio_postgres::Error),
    /// The private runtime could not be started.
    #[error("cannot start a tokio runtime")]
    Runtime(#[source] std::io::Error),
}

/// Runs `fut` to completion on a private current-thread runtime in a scoped
/// thread.
pub fn block_on<F>(fut: F) -> Result<F::Output, PgError>
where
    F: Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(PgError::Runtime)?;
            Ok(rt.block_on(fut))
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Connects with `cfg` (no TLS) and drives the connection in a task of the
/// current runtime; fails after `timeout`.
pub async fn connect(cfg: &Config, timeout: Duration) -> Result<Client, PgError> {
    let (client, conn) =
        tokio::time::timeout(timeout, cfg.connect(NoTls)).await.map_err(|_| PgError::Timeout(timeout))??;
    tokio::spawn(async move {
        // The connection ends when the client is dropped or the server goes;
        // errors surface through the client's calls.
        let _ = conn.await;
    });
    Ok(client)
}

/// Connects and runs `SELECT 1`, all within `timeout`.
pub async fn ping_async(cfg: &Config, timeout: Duration) -> Result<(), PgError> {
    let work = async {
        let client = connect(cfg, timeout).await?;
        client.simple_query("SELECT 1").await?;
        Ok(())
    };
    tokio::time::timeout(timeout, work).await.map_err(|_| PgError::Timeout(timeout))?
}

/// Pings every config concurrently; one result per config, in order.
pub fn ping_all(cfgs: &[Config], timeout: Duration) -> Vec<Result<(), PgError>> {
    let fut = futures_util::future::join_all(cfgs.iter().map(|c| ping_async(c, timeout)));
    block_on(fut)
        .unwrap_or_else(|e| cfgs.iter().map(|_| Err(PgError::Runtime(std::io::Error::other(e.to_string())))).collect())
}

/// Runs each statement in turn in its own implicit transaction (so that
/// `VACUUM` and `CREATE DATABASE` work), on one connection.
pub fn run_statements(cfg: &Config, statements: &[String], timeout: Duration) -> Result<(), PgError> {
    block_on(async {
        let client = connect(cfg, Duration::from_secs(10)).await?;
        let work = async {
            for s in statements {
                client.batch_execute(s).await?;
            }
            Ok::<_, PgError>(())
        };
        tokio::time::timeout(timeout, work).await.map_err(|_| PgError::Timeout(timeout))?
    })?
}

/// Runs `sql` and returns the first column of the first row as text.
pub fn query_text(cfg: &Config, sql: &str, timeout: Duration) -> Result<Option<String>, PgError> {
    block_on(async {
        let work = async {
            let client = connect(cfg, timeout).await?;
            let msgs = client.simple_query(sql).await?;
            Ok::<_, PgError>(msgs.into_iter().find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).map(str::to_string)),
                _ => None,
            }))
        };
        tokio::time::timeout(timeout, work).await.map_err(|_| PgError::Timeout(timeout))?
    })?
    .map(Option::flatten)
}
