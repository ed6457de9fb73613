//! The two ways plbbench fails, and their exit statuses: bad input (2),
//! caught before anything starts, and a run that failed (1).

/// A failure of the whole program.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The user's input is wrong; one line naming the field. Exit status 2.
    #[error("{0}")]
    Input(String),
    /// Something failed while running. Exit status 1.
    #[error(transparent)]
    Run(#[from] anyhow::Error),
}

impl Error {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Input(_) => 2,
            Error::Run(_) => 1,
        }
    }
}

/// Shorthand for a bad-input error naming `field`.
pub fn input(field: &str, reason: impl std::fmt::Display) -> Error {
    Error::Input(format!("{field}: {reason}"))
}
