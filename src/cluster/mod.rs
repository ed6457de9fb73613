//! Cluster backends: where the replicas that plbbench measures come from and
//! how faults are injected into them (design.md §6).
//!
//! This module owns the `local` backend's provisioning and fault primitives:
//! [`local::LocalCluster`] starts K PostgreSQL servers from the machine's
//! binaries, each on its own loopback port and in its own CPU-limited cgroup,
//! and kills, restarts, pauses, resumes and throttles them. The submodules
//! keep the pieces small and separately testable:
//!
//! - [`local`]: the cluster's lifecycle, state file and fault actions;
//! - [`cgroup`]: CPU quota, CPU accounting and freezing through cgroup v1/v2;
//! - [`pgbin`]: finding the PostgreSQL binaries and their version;
//! - [`procs`]: spawning servers as the right user, signals, process trees;
//! - [`pgconn`]: small synchronous helpers over `tokio-postgres`;
//! - [`dataset`]: the deterministic TPC-H-like dataset and its checksum.

pub mod cgroup;
pub mod dataset;
pub mod local;
mod local_opts;
pub mod pgbin;
pub mod pgconn;
pub mod procs;

pub use local::{LocalCluster, LocalError, LocalOptions, ReplicaStatus};
