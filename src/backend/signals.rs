//! SIGINT and SIGTERM as one stream, for the two long-running async
//! commands: the real driver (a run stops early and drains) and the proxy
//! (it stops accepting and drains its sessions). One type, so both listen
//! the same way. Listening replaces the signals' default action
//! (termination) for the rest of the process.

use crate::error::Signal;
use tokio::signal::unix::{signal, SignalKind};

/// The two signals, each listened for if it could be.
pub(crate) struct Signals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Listens for both; a signal that cannot be listened for is warned
    /// about on stderr and never arrives (the driver goes on without it).
    pub(crate) fn listen() -> Signals {
        let warn = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("plbbench: warning: cannot listen for {name}: {e}");
                None
            }
        };
        Signals { int: warn(SignalKind::interrupt(), "SIGINT"), term: warn(SignalKind::terminate(), "SIGTERM") }
    }

    /// Listens for both, or fails with the cause (the proxy cannot be
    /// stopped cleanly without them).
    pub(crate) fn require() -> std::io::Result<Signals> {
        Ok(Signals { int: Some(signal(SignalKind::interrupt())?), term: Some(signal(SignalKind::terminate())?) })
    }

    /// The next signal; never returns when none can arrive.
    pub(crate) async fn recv(&mut self) -> Signal {
        async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
            if let Some(s) = s {
                if s.recv().await.is_some() {
                    return;
                }
            }
            std::future::pending::<()>().await
        }
        tokio::select! {
            _ = next(&mut self.int) => Signal::Int,
            _ = next(&mut self.term) => Signal::Term,
        }
    }
}
