//! The ways plbbench stops short, and their exit statuses: bad input (2),
//! caught before anything starts; a run that failed (1); and a run stopped
//! by SIGINT or SIGTERM (128 + the signal's number, as shells report it:
//! 130 or 143), whose partial folder was still written and cleaned up after.

/// A failure of the whole program.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The user's input is wrong; one line naming the field. Exit status 2.
    #[error("{0}")]
    Input(String),
    /// Something failed while running. Exit status 1.
    #[error(transparent)]
    Run(#[from] anyhow::Error),
    /// Stopped by a signal (`SIGINT` or `SIGTERM`) after writing what was
    /// measured. Exit status 128 + the signal number.
    #[error("interrupted by {signal}: {detail}")]
    Interrupted {
        /// The first signal received, e.g. `SIGINT`.
        signal: String,
        /// What was kept.
        detail: String,
    },
}

impl Error {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Input(_) => 2,
            Error::Run(_) => 1,
            Error::Interrupted { signal, .. } => match signal.as_str() {
                "SIGINT" => 130,
                "SIGTERM" => 143,
                _ => 1,
            },
        }
    }
}

/// Shorthand for a bad-input error naming `field`.
pub fn input(field: &str, reason: impl std::fmt::Display) -> Error {
    Error::Input(format!("{field}: {reason}"))
}
