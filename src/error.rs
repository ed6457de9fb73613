//! The ways plbbench stops short, and their exit statuses: bad input (2),
//! caught before anything starts; a run that failed, or that was measured
//! and written but failed its validity checks (1); and a run stopped
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
    /// The run was measured and its folder written, but it failed its
    /// validity checks (design.md §4) under `--checks fail`; one line
    /// saying how many. Exit status 1.
    #[error("{0}")]
    Checks(String),
    /// Stopped by a signal (`SIGINT` or `SIGTERM`) after writing what was
    /// measured. Exit status 128 + the signal number.
    #[error("interrupted by {signal}: {detail}")]
    Interrupted {
        /// The first signal received.
        signal: Signal,
        /// What was kept.
        detail: String,
    },
}

impl Error {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Input(_) => 2,
            Error::Run(_) | Error::Checks(_) => 1,
            Error::Interrupted { signal, .. } => 128 + signal.number(),
        }
    }
}

/// A signal that stops a run early: the first one received decides the
/// exit status and is named in summary.json (`SIGINT`, `SIGTERM`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Signal {
    /// Ctrl-C.
    #[serde(rename = "SIGINT")]
    Int,
    /// A polite kill.
    #[serde(rename = "SIGTERM")]
    Term,
}

impl Signal {
    /// The signal's number (2 or 15).
    pub fn number(self) -> i32 {
        match self {
            Signal::Int => 2,
            Signal::Term => 15,
        }
    }

    /// The signal's name, as shells and summary.json write it.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Int => "SIGINT",
            Signal::Term => "SIGTERM",
        }
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Shorthand for a bad-input error naming `field`.
pub fn input(field: &str, reason: impl std::fmt::Display) -> Error {
    Error::Input(format!("{field}: {reason}"))
}
