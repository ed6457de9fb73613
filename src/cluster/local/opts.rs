//! Options and errors of the local backend ([`super`]), kept apart so
//! that the lifecycle code stays short: what a user can choose for a local
//! cluster, its documented defaults and validation, and every way a local
//! cluster operation can fail.

use std::path::PathBuf;
use std::time::Duration;

use crate::cluster::pgconn::PgError;

/// How to provision a local cluster; `Default` gives the documented values.
#[derive(Clone, Debug, PartialEq)]
pub struct LocalOptions {
    /// Number of replicas K (default 5).
    pub replicas: usize,
    /// CPU quota per replica, in cores (default 0.3); `0` means unlimited.
    pub cpus: f64,
    /// Where data directories, sockets, logs and `cluster.json` live
    /// (default: [`default_state_dir`]).
    pub state_dir: PathBuf,
    /// Dataset scale factor: `orders` gets 1,500,000 × scale rows (default 0.05).
    pub scale: f64,
    /// Dataset seed (default 42).
    pub seed: u64,
    /// Port of r1, the others follow; `0` picks free ports (default 0).
    pub base_port: u16,
    /// `max_connections` of every server (default 300).
    pub max_connections: u32,
}

impl Default for LocalOptions {
    fn default() -> Self {
        LocalOptions {
            replicas: 5,
            cpus: 0.3,
            state_dir: default_state_dir(),
            scale: 0.05,
            seed: 42,
            base_port: 0,
            max_connections: crate::core::model::MAX_CONNECTIONS,
        }
    }
}

impl LocalOptions {
    /// Checks ranges: 1..=64 replicas, finite `cpus >= 0`, `0 < scale <= 100`,
    /// `max_connections >= 5`, and that the port range fits below 65536.
    pub fn validate(&self) -> Result<(), LocalError> {
        let bad = |m: String| Err(LocalError::InvalidOptions(m));
        if !(1..=64).contains(&self.replicas) {
            return bad(format!("replicas must be between 1 and 64, got {}", self.replicas));
        }
        if !self.cpus.is_finite() || self.cpus < 0.0 {
            return bad(format!("cpus must be a non-negative number of cores, got {}", self.cpus));
        }
        if !self.scale.is_finite() || self.scale <= 0.0 || self.scale > 100.0 {
            return bad(format!("scale must be in (0, 100], got {}", self.scale));
        }
        if self.max_connections < 5 {
            return bad(format!("max_connections must be at least 5, got {}", self.max_connections));
        }
        if self.base_port != 0 && self.base_port as usize + self.replicas > 65536 {
            return bad(format!(
                "ports {}..{} do not fit below 65536",
                self.base_port,
                self.base_port as usize + self.replicas
            ));
        }
        if self.state_dir.as_os_str().is_empty() {
            return bad("state_dir is empty".into());
        }
        Ok(())
    }
}

/// Environment variable that overrides [`default_state_dir`] when set and
/// non-empty (integration tests use it to give each run a private
/// directory so several can run at once).
pub const STATE_DIR_ENV: &str = "PLBBENCH_STATE_DIR";

/// Where local clusters live: `$PLBBENCH_STATE_DIR` as is when it is set and
/// non-empty; else `/var/lib/plbbench/local` when running as root; otherwise
/// `$XDG_STATE_HOME/plbbench/local`, else `~/.local/state/plbbench/local`,
/// else `/tmp/plbbench-<uid>/local`. Other plbbench directories are its
/// siblings (`run` and `calibrate` replace its last component), so with
/// `PLBBENCH_STATE_DIR=/x/local` a run's private cluster lives in `/x/run`.
pub fn default_state_dir() -> PathBuf {
    state_dir_from(nix::unistd::geteuid(), |k| std::env::var_os(k))
}

/// [`default_state_dir`] for user `uid` and environment lookup `var`.
fn state_dir_from(uid: nix::unistd::Uid, var: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    let nonempty = |k: &str| var(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(x) = nonempty(STATE_DIR_ENV) {
        return x;
    }
    if uid.is_root() {
        return PathBuf::from("/var/lib/plbbench/local");
    }
    if let Some(x) = nonempty("XDG_STATE_HOME") {
        return x.join("plbbench/local");
    }
    if let Some(h) = nonempty("HOME") {
        return h.join(".local/state/plbbench/local");
    }
    PathBuf::from(format!("/tmp/plbbench-{uid}/local"))
}

/// Every way a local cluster operation fails. Messages are short and carry
/// their cause as `source`; none ever contains the password.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// `initdb`/`postgres` not found by [`super::pgbin::find_bindir`].
    #[error("postgresql server binaries not found (looked in $PLBBENCH_PG_BIN, PATH and /usr/lib/postgresql/*/bin); run scripts/install-postgres.sh as root")]
    BinariesNotFound,
    /// Options out of range.
    #[error("invalid local cluster options: {0}")]
    InvalidOptions(String),
    /// `up` found a running cluster in the state directory.
    #[error("a local cluster is already running in {0} (use it, or stop it with `cluster down`)")]
    AlreadyRunning(PathBuf),
    /// The state directory holds files that plbbench did not create.
    #[error("state directory {0} is not empty and was not created by plbbench; refusing to use or delete it")]
    StateDirNotOurs(PathBuf),
    /// The server account cannot reach the state directory.
    #[error("user {user} cannot traverse {path}; choose a state directory it can reach")]
    StateDirNotAccessible {
        /// The blocking ancestor directory.
        path: PathBuf,
        /// The server account.
        user: String,
    },
    /// The unprivileged server account could not be set up.
    #[error("postgresql refuses to run as root and the server account could not be set up: {0}")]
    User(String),
    /// A requested port is taken.
    #[error("port {port} on 127.0.0.1 is not free")]
    PortInUse {
        /// The port.
        port: u16,
        /// Why binding failed.
        #[source]
        source: std::io::Error,
    },
    /// A file system or process operation failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `cluster.json` could not be read or written.
    #[error("state file {path}")]
    State {
        /// The state file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// A cgroup file could not be written.
    #[error("cgroup of {replica}")]
    Cgroup {
        /// Replica name (`r1`...).
        replica: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A helper program (initdb) failed.
    #[error("{what} failed ({status}): {output}")]
    Command {
        /// The program.
        what: String,
        /// Its exit status.
        status: String,
        /// The last lines it printed.
        output: String,
    },
    /// A server exited while starting.
    #[error("{replica} exited during startup; last lines of {log}: {tail}")]
    ServerExited {
        /// Replica name, or `template`.
        replica: String,
        /// Its log file.
        log: PathBuf,
        /// The last lines of the log.
        tail: String,
    },
    /// A server did not answer a query in time.
    #[error("{replica} did not answer a query within {}s (see {log})", .timeout.as_secs())]
    NotReady {
        /// Replica name, or `template`.
        replica: String,
        /// How long plbbench waited.
        timeout: Duration,
        /// Its log file.
        log: PathBuf,
        /// The last connection error.
        #[source]
        source: PgError,
    },
    /// Loading the dataset or another provisioning statement failed.
    #[error("{what}")]
    Sql {
        /// What was being run.
        what: String,
        /// The cause.
        #[source]
        source: PgError,
    },
    /// Replica index out of range (indices are 0-based, names 1-based).
    #[error("no replica with index {index} (the cluster has {replicas})")]
    NoSuchReplica {
        /// The index given.
        index: usize,
        /// Number of replicas.
        replicas: usize,
    },
    /// The fault needs a running server and this one is down.
    #[error("{0} is not running")]
    NotRunning(String),
    /// `restart` of a server that is running.
    #[error("{0} is already running")]
    StillRunning(String),
    /// A signal could not be sent.
    #[error("sending {signal} to pid {pid}")]
    Signal {
        /// Target process.
        pid: i32,
        /// The signal.
        signal: nix::sys::signal::Signal,
        /// The cause.
        #[source]
        source: nix::errno::Errno,
    },
    /// Processes did not exit in time.
    #[error("{what} did not finish within {}s", .timeout.as_secs())]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long.
        timeout: Duration,
    },
}

/// Shorthand for an [`LocalError::Io`] with its context.
pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LocalError {
    let what = what.into();
    move |source| LocalError::Io { what, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_documented_values_and_valid() {
        let o = LocalOptions::default();
        assert_eq!((o.replicas, o.cpus, o.scale, o.seed, o.base_port, o.max_connections), (5, 0.3, 0.05, 42, 0, 300));
        assert_eq!(o.state_dir, default_state_dir());
        o.validate().unwrap();
    }

    #[test]
    fn state_dir_honours_the_override_then_the_documented_defaults() {
        use nix::unistd::Uid;
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| std::ffi::OsString::from(p.1))
        };
        let user = Uid::from_raw(1000);
        type Env = &'static [(&'static str, &'static str)];
        let cases: Vec<(Uid, Env, &str)> = vec![
            (Uid::from_raw(0), &[(STATE_DIR_ENV, "/x/local")], "/x/local"),
            (user, &[(STATE_DIR_ENV, "rel/dir"), ("HOME", "/home/u")], "rel/dir"),
            (Uid::from_raw(0), &[(STATE_DIR_ENV, ""), ("HOME", "/root")], "/var/lib/plbbench/local"),
            (user, &[(STATE_DIR_ENV, ""), ("XDG_STATE_HOME", "/s"), ("HOME", "/home/u")], "/s/plbbench/local"),
            (user, &[("HOME", "/home/u")], "/home/u/.local/state/plbbench/local"),
            (user, &[], "/tmp/plbbench-1000/local"),
        ];
        for (uid, vars, want) in cases {
            assert_eq!(state_dir_from(uid, env(vars)), PathBuf::from(want), "{vars:?}");
        }
    }

    #[test]
    fn validation_rejects_out_of_range() {
        let base = LocalOptions::default();
        let cases: Vec<(&str, LocalOptions)> = vec![
            ("replicas", LocalOptions { replicas: 0, ..base.clone() }),
            ("cpus", LocalOptions { cpus: -1.0, ..base.clone() }),
            ("cpus", LocalOptions { cpus: f64::NAN, ..base.clone() }),
            ("scale", LocalOptions { scale: 0.0, ..base.clone() }),
            ("max_connections", LocalOptions { max_connections: 1, ..base.clone() }),
            ("ports", LocalOptions { base_port: 65534, ..base.clone() }),
        ];
        for (word, o) in cases {
            let e = o.validate().unwrap_err().to_string();
            assert!(e.contains(word), "{e}");
        }
    }
}
