//! The Engine API vocabulary every part of the docker backend shares: the
//! labels on what plbbench creates, the error type, and the connection to
//! the engine. A leaf of `cluster::docker`, so the cluster, the image
//! builder and the state file all import it and none imports another.

use std::path::PathBuf;

use bollard::Docker;

use crate::cluster::pgconn;

/// Label on everything plbbench creates in the engine.
pub const LABEL_MANAGED: &str = "org.plbbench.managed";
/// What an object is: `image`, `data`, `network`, `template`, `replica`.
pub const LABEL_KIND: &str = "org.plbbench.kind";
/// The cluster id an object belongs to.
pub const LABEL_CLUSTER: &str = "org.plbbench.cluster";
/// The replica a container is (`r1`...).
pub const LABEL_REPLICA: &str = "org.plbbench.replica";
/// Every way a docker operation fails; none carries the password.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// No engine answered.
    #[error("no Docker engine reachable at {host} (set DOCKER_HOST, or start dockerd)")]
    NoEngine {
        /// DOCKER_HOST or the default socket.
        host: String,
        /// The cause.
        #[source]
        source: bollard::errors::Error,
    },
    /// An Engine API call failed.
    #[error("{what}")]
    Api {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: bollard::errors::Error,
    },
    /// Building the image failed.
    #[error("image build: {0}")]
    Image(String),
    /// A file operation failed.
    #[error("{0}")]
    Io(String, #[source] std::io::Error),
    /// The state file is unreadable.
    #[error("state file {0}")]
    State(PathBuf, #[source] serde_json::Error),
    /// Options out of range.
    #[error("invalid docker cluster options: {0}")]
    Invalid(String),
    /// `up` found a running cluster.
    #[error(
        "a docker cluster is already running (state in {0}); use it or run `plbbench cluster down --backend docker`"
    )]
    AlreadyRunning(PathBuf),
    /// Replica index out of range.
    #[error("no replica with index {index} (the cluster has {replicas})")]
    NoSuchReplica {
        /// The index.
        index: usize,
        /// K.
        replicas: usize,
    },
    /// A server did not answer or a provisioning statement failed.
    #[error("{what}")]
    Sql {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: pgconn::PgError,
    },
    /// Waiting for a container state timed out.
    #[error("{0}")]
    Timeout(String),
}

impl DockerError {
    /// An API error with its context.
    pub fn api(what: impl Into<String>, source: bollard::errors::Error) -> DockerError {
        DockerError::Api { what: what.into(), source }
    }
}

/// Connects to the engine named by the environment and negotiates the API
/// version (this machine's engine speaks 1.41).
pub async fn engine() -> Result<Docker, DockerError> {
    let host = std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    let no_engine = |source| DockerError::NoEngine { host: host.clone(), source };
    let docker = Docker::connect_with_defaults().map_err(no_engine)?;
    let docker = docker.negotiate_version().await.map_err(no_engine)?;
    docker.ping().await.map_err(no_engine)?;
    Ok(docker)
}
