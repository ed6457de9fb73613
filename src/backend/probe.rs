//! The cluster's own health checks, for a run's driver and `plbbench proxy`
//! alike (docs/resilience.md, "What counts as failure evidence"): the
//! periodic probe over a persistent connection, and the probe that
//! confirms what a client saw (a lost connection, a refused connect) over
//! a new one. Only these checks' failures remove a replica: a client's own
//! session is never evidence on its own, so no client can forge a
//! replica's death.

use crate::core::control::CONFIRM_TIMEOUT_S;
use crate::core::health::Evidence;
use std::time::{Duration, Instant};
use tokio::time::timeout;
use tokio_postgres::{Config, NoTls};

/// Deadline of one periodic probe: longer than the interval, because a
/// busy, CPU-throttled replica may take a while to accept a connection.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One periodic health probe of the server `cfg` names over `client`
/// (dropped on a failure, so the next probe reconnects): an answer with its
/// time, a refusal, or a timeout after [`PROBE_TIMEOUT`] (or `interval` if
/// longer).
pub async fn periodic(cfg: &Config, client: &mut Option<tokio_postgres::Client>, interval: Duration) -> Evidence {
    judge(cfg, client, PROBE_TIMEOUT.max(interval)).await
}

/// The probe a `core::control::Confirm` asks for: a new connection to the
/// server `cfg` names and `SELECT 1`, within [`CONFIRM_TIMEOUT_S`]. A new
/// connection, not the periodic probe's, because the question is whether
/// the server still accepts sessions.
pub async fn confirm(cfg: &Config) -> Evidence {
    judge(cfg, &mut None, Duration::from_secs_f64(CONFIRM_TIMEOUT_S)).await
}

async fn judge(cfg: &Config, client: &mut Option<tokio_postgres::Client>, limit: Duration) -> Evidence {
    let began = Instant::now();
    match timeout(limit, check(cfg, client)).await {
        Ok(Ok(())) => Evidence::ProbeOk { ms: began.elapsed().as_secs_f64() * 1000.0 },
        Ok(Err(_)) => {
            *client = None;
            Evidence::Refused
        }
        Err(_) => Evidence::ProbeTimeout,
    }
}

/// `SELECT 1` on the probe connection, (re)connecting when there is none.
async fn check(cfg: &Config, client: &mut Option<tokio_postgres::Client>) -> Result<(), tokio_postgres::Error> {
    if client.as_ref().is_none_or(|c| c.is_closed()) {
        let (c, conn) = cfg.connect(NoTls).await?;
        tokio::spawn(conn);
        *client = Some(c);
    }
    client.as_ref().expect("connected above").simple_query("SELECT 1").await.map(|_| ())
}
