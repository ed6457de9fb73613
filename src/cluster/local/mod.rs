//! The `local` cluster backend (design.md §6): K PostgreSQL servers started
//! from the machine's binaries, each on its own 127.0.0.1 port and in its
//! own CPU-limited cgroup, and the fault primitives plbbench injects into
//! them (Down = SIGKILL, Rejoin = restart with crash recovery, Pause =
//! freeze or SIGSTOP, Slow = quota cut).
//!
//! [`LocalCluster::up`] runs `initdb` once into a template directory, loads
//! the dataset ([`super::dataset`]) there over the private unix socket,
//! stops it cleanly and copies it to `r1..rK`, so every replica holds
//! byte-identical data. The cluster's state (ports, pids, cgroups, the
//! generated password) is saved to `<state_dir>/cluster.json` (mode 0600)
//! after every change, so `cluster status`/`down` and later runs find it
//! with [`LocalCluster::load`].
//!
//! Lifetime: a cluster from `up` is torn down when dropped (error paths,
//! runs, panics); call [`LocalCluster::set_persistent`] to keep it running
//! after plbbench exits (`cluster up`). A cluster from `load` is persistent.
//! If plbbench dies without unwinding (SIGKILL, abort), the servers of a
//! non-persistent cluster survive as an orphan: `load` ignores it and the
//! next `up` in the same state directory (or [`LocalCluster::cleanup_stale`])
//! removes it. Servers run in their own process group, so a terminal's
//! Ctrl-C reaches only plbbench, whose handler should drop the cluster.
//!
//! Layout of the state directory: `cluster.json`, `.plbbench-local` (marker:
//! only a directory holding it is ever deleted), `sock/` (unix sockets),
//! `template.log`, `rN/data` and `rN/postgres.log`; `template/` exists only
//! during `up`.

use crate::core::model::ReplicaId;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

use super::{dataset, pgconn};
use cgroup::CgroupSet;
use opts::io_err;
pub use opts::{default_state_dir, LocalError, LocalOptions};
use procs::RunAs;

pub mod cgroup;
mod opts;
pub mod pgbin;
pub mod procs;

/// Database and role that clients use (created by `initdb -U`).
pub const DB_NAME: &str = "plbbench";
/// Role name of the generated superuser.
pub const DB_USER: &str = "plbbench";
/// How long `up` and `restart` wait for a server to answer a query.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a fast shutdown may take before `down` sends SIGKILL.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `kill` waits for a replica's processes to disappear.
pub const KILL_TIMEOUT: Duration = Duration::from_secs(10);
/// Deadline of one health check in [`LocalCluster::status`].
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest time the dataset load may take.
pub const LOAD_TIMEOUT: Duration = Duration::from_secs(1800);

const STATE_FILE: &str = "cluster.json";
const MARKER: &str = ".plbbench-local";

/// The generated password: never shown by `Debug`.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// One replica's saved state.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Replica {
    port: u16,
    pid: Option<i32>,
    cpus: f64,
    paused: bool,
    /// CPU seconds of earlier incarnations (process-tree accounting only).
    #[serde(default)]
    cpu_offset: f64,
}

/// Health of one replica as reported by [`LocalCluster::status`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplicaStatus {
    /// 0-based index.
    pub replica: usize,
    /// `r1`...
    pub name: String,
    /// TCP port on 127.0.0.1.
    pub port: u16,
    /// Postmaster pid, when running.
    pub pid: Option<i32>,
    /// Whether it is paused (frozen or stopped).
    pub paused: bool,
    /// Whether it answered `SELECT 1` within [`HEALTH_TIMEOUT`].
    pub healthy: bool,
    /// Its CPU quota in cores (`0` = unlimited).
    pub cpus: f64,
}

/// A running local cluster. `Debug` redacts the password.
#[derive(Debug, Serialize, Deserialize)]
pub struct LocalCluster {
    state_dir: PathBuf,
    bindir: PathBuf,
    version: String,
    password: Secret,
    run_as: Option<RunAs>,
    cgroups: Option<CgroupSet>,
    replicas: Vec<Replica>,
    /// Pid of the template server while `up` loads the dataset.
    #[serde(default)]
    template_pid: Option<i32>,
    /// Seconds spent in each phase of `up`.
    #[serde(default)]
    timings: Vec<(String, f64)>,
    /// Saved persistence: `false` for a cluster that lives only as long as
    /// its owner process.
    #[serde(default)]
    keep: bool,
    /// Pid and start time of the process that owns a non-persistent cluster.
    #[serde(default)]
    owner: Option<(i32, u64)>,
    #[serde(skip)]
    persistent: bool,
    #[serde(skip)]
    torn_down: bool,
}

static CGROUP_WARNED: AtomicBool = AtomicBool::new(false);

fn name(r: usize) -> String {
    ReplicaId(r).to_string()
}

impl LocalCluster {
    /// Provisions and starts a cluster as described in the module doc and
    /// returns once every replica answers a query. Not persistent: dropping
    /// the result tears it down. Fails if a cluster already runs in
    /// `opts.state_dir`; leftovers of a dead one are cleaned first.
    pub fn up(opts: &LocalOptions) -> Result<LocalCluster, LocalError> {
        opts.validate()?;
        let bindir = pgbin::find_bindir().ok_or(LocalError::BinariesNotFound)?;
        let version = pgbin::server_version(&bindir).map_err(io_err("running postgres --version"))?;
        let state_dir = std::path::absolute(&opts.state_dir).map_err(io_err("resolving the state directory"))?;
        if Self::load(&state_dir)?.is_some() {
            return Err(LocalError::AlreadyRunning(state_dir));
        }
        Self::cleanup_stale(&state_dir)?;
        let run_as = procs::service_user().map_err(LocalError::User)?;
        let ports = pick_ports(opts)?;
        if let Err(e) = prepare_state_dir(&state_dir, run_as.as_ref()) {
            if state_dir.join(MARKER).exists() {
                let _ = fs::remove_dir_all(&state_dir);
            }
            return Err(e);
        }
        let password: String = {
            use rand::Rng;
            rand::thread_rng().sample_iter(&rand::distributions::Alphanumeric).take(32).map(char::from).collect()
        };
        let replicas = ports
            .iter()
            .map(|&port| Replica { port, pid: None, cpus: opts.cpus, paused: false, cpu_offset: 0.0 })
            .collect();
        // From here on, dropping `c` (on any error) tears everything down.
        let mut c = Self::empty(&state_dir);
        (c.bindir, c.version, c.password, c.run_as, c.replicas) = (bindir, version, Secret(password), run_as, replicas);
        c.owner = procs::own_identity();
        c.save()?;
        c.cgroups = match CgroupSet::create(&format!("{:08x}", rand::random::<u32>()), opts.replicas) {
            Ok(set) => Some(set),
            Err(reason) => {
                if !CGROUP_WARNED.swap(true, Ordering::Relaxed) {
                    eprintln!("plbbench: warning: running replicas without CPU quotas: {reason}");
                }
                None
            }
        };
        c.save()?;
        for r in 0..c.replicas.len() {
            c.apply_quota(r, opts.cpus)?;
        }
        c.build_template(opts)?;
        c.clone_replicas()?;
        c.start_replicas()?;
        Ok(c)
    }

    /// Copies the template to r2..rK (one thread per core: copying is
    /// kernel memcpy, CPU-bound), then moves it to r1.
    fn clone_replicas(&mut self) -> Result<(), LocalError> {
        let t0 = Instant::now();
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        let chunks: Vec<Vec<usize>> =
            (0..threads).map(|i| (1 + i..self.replicas.len()).step_by(threads).collect()).collect();
        let this = &*self;
        std::thread::scope(|s| {
            let handles: Vec<_> =
                chunks.iter().map(|rs| s.spawn(|| rs.iter().try_for_each(|&r| this.clone_template(r)))).collect();
            handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        })?;
        make_private_dir(&self.state_dir.join(name(0)), self.run_as.as_ref())?;
        fs::rename(self.template_dir(), self.data_dir(0)).map_err(io_err("moving the template to r1"))?;
        self.timings.push(("copy".into(), t0.elapsed().as_secs_f64()));
        Ok(())
    }

    /// Starts every replica, then waits until each answers.
    fn start_replicas(&mut self) -> Result<(), LocalError> {
        let t0 = Instant::now();
        for r in 0..self.replicas.len() {
            self.spawn_server(r)?;
        }
        self.save()?;
        for r in 0..self.replicas.len() {
            self.wait_ready(r, READY_TIMEOUT)?;
        }
        self.timings.push(("start".into(), t0.elapsed().as_secs_f64()));
        self.save()
    }

    /// The cluster saved in `state_dir` if at least one of its servers is
    /// still running (its pids are checked against their command lines);
    /// `None` when there is no state file or nothing runs, and also for the
    /// orphan of a run that died without tearing its cluster down (not
    /// persistent, owner process gone): [`Self::cleanup_stale`] removes
    /// those. The returned value is persistent (dropping it keeps the
    /// cluster running).
    pub fn load(state_dir: &Path) -> Result<Option<LocalCluster>, LocalError> {
        let Some(mut c) = Self::read_state(state_dir)? else { return Ok(None) };
        if !c.keep && c.owner.is_none_or(procs::owner_gone) {
            return Ok(None);
        }
        for r in 0..c.replicas.len() {
            let data = c.data_dir(r);
            let rep = &mut c.replicas[r];
            if rep.pid.is_some_and(|p| !procs::is_postmaster_of(p, &data)) {
                rep.pid = None;
                rep.paused = false;
            }
        }
        Ok(c.replicas.iter().any(|r| r.pid.is_some()).then_some(c))
    }

    /// Removes what a dead cluster left in `state_dir` (stray servers,
    /// cgroups, files). `Ok(false)` when there was nothing; an error when the
    /// directory is not plbbench's or a cluster still runs there.
    pub fn cleanup_stale(state_dir: &Path) -> Result<bool, LocalError> {
        if !state_dir.exists() {
            return Ok(false);
        }
        if !state_dir.join(MARKER).exists() {
            let empty =
                fs::read_dir(state_dir).map_err(io_err(format!("reading {}", state_dir.display())))?.next().is_none();
            return if empty { Ok(false) } else { Err(LocalError::StateDirNotOurs(state_dir.to_path_buf())) };
        }
        if Self::load(state_dir)?.is_some() {
            return Err(LocalError::AlreadyRunning(state_dir.to_path_buf()));
        }
        let mut c = match Self::read_state(state_dir) {
            Ok(Some(c)) => c,
            _ => LocalCluster::empty(state_dir),
        };
        c.persistent = false;
        c.teardown()?;
        Ok(true)
    }

    /// Removes the cluster saved in `state_dir` when it is an orphan: not
    /// kept (`cluster up`), and its recorded owner process is gone (killed
    /// with SIGKILL, say). `Ok(false)` when there is none, or the owner
    /// lives, or no owner is recorded yet (a cluster still starting).
    pub fn reap_orphan(state_dir: &Path) -> Result<bool, LocalError> {
        let Some(mut c) = Self::read_state(state_dir)? else { return Ok(false) };
        match c.owner {
            Some(o) if !c.keep && procs::owner_gone(o) => {
                c.persistent = false;
                c.teardown()?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Stops every server (fast shutdown, SIGKILL after
    /// [`SHUTDOWN_TIMEOUT`]), removes the cgroups and the state directory.
    pub fn down(mut self) -> Result<(), LocalError> {
        self.teardown()
    }

    /// Whether the cluster outlives this value and this process (default
    /// `false` after `up`: dropped = torn down, and a crash leaves an orphan
    /// that the next `up` removes; `true` after `load`). `cluster up` sets
    /// it; the choice is saved in the state file.
    pub fn set_persistent(&mut self, persistent: bool) -> Result<(), LocalError> {
        self.persistent = persistent;
        self.keep = persistent;
        self.owner = if persistent { None } else { procs::own_identity() };
        self.save()
    }

    /// Whether dropping this value leaves the cluster running.
    pub fn is_persistent(&self) -> bool {
        self.persistent
    }

    /// libpq key=value DSN of replica `r` (0-based), for tokio-postgres.
    /// Panics when `r >= replicas()`.
    pub fn dsn(&self, r: usize) -> String {
        format!(
            "host=127.0.0.1 port={} user={DB_USER} password={} dbname={DB_NAME}",
            self.replicas[r].port, self.password.0
        )
    }

    /// Connection config of replica `r`, equivalent to [`Self::dsn`].
    /// Panics when `r >= replicas()`.
    pub fn config(&self, r: usize) -> tokio_postgres::Config {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host("127.0.0.1").port(self.replicas[r].port).user(DB_USER).password(&self.password.0).dbname(DB_NAME);
        cfg
    }

    /// Number of replicas K.
    pub fn replicas(&self) -> usize {
        self.replicas.len()
    }

    /// Postmaster pid of replica `r` while it runs.
    pub fn pid(&self, r: usize) -> Option<i32> {
        self.replicas.get(r).and_then(|x| x.pid)
    }

    /// Every cgroup directory of the cluster (replica groups, then their
    /// parents); empty when quotas are not enforced.
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        let Some(set) = &self.cgroups else { return Vec::new() };
        let mut dirs: Vec<PathBuf> = set.replicas.iter().flat_map(|g| g.dirs()).collect();
        dirs.extend(set.parents.iter().cloned());
        dirs
    }

    /// Server log of replica `r`.
    pub fn log_path(&self, r: usize) -> PathBuf {
        self.state_dir.join(name(r)).join("postgres.log")
    }

    /// Down: SIGKILL of replica `r`'s postmaster and every process of its
    /// tree (and cgroup), then waits up to [`KILL_TIMEOUT`] for them to go.
    pub fn kill(&mut self, r: usize) -> Result<(), LocalError> {
        let pid = self.running_pid(r)?;
        if self.cgroups.is_none() {
            self.replicas[r].cpu_offset += procs::tree_cpu_seconds(pid).unwrap_or(0.0);
        }
        let gone = self.kill_tree(r, pid);
        self.replicas[r].pid = None;
        self.replicas[r].paused = false;
        self.save()?;
        if gone {
            Ok(())
        } else {
            Err(LocalError::Timeout { what: format!("killing {}", name(r)), timeout: KILL_TIMEOUT })
        }
    }

    /// Rejoin: starts replica `r` again on its port and in its cgroup (crash
    /// recovery) and returns once it answers a query ([`READY_TIMEOUT`]).
    pub fn restart(&mut self, r: usize) -> Result<(), LocalError> {
        self.check(r)?;
        if let Some(pid) = self.replicas[r].pid {
            if procs::is_postmaster_of(pid, &self.data_dir(r)) {
                return Err(LocalError::StillRunning(name(r)));
            }
        }
        // The old postmaster is dead (and so are its children): a stale lock
        // whose pid has been reused would stop the server from starting.
        let _ = fs::remove_file(self.data_dir(r).join("postmaster.pid"));
        self.spawn_server(r)?;
        self.save()?;
        self.wait_ready(r, READY_TIMEOUT)
    }

    /// Pause: freezes replica `r`'s cgroup, or without a freezer sends
    /// SIGSTOP to its postmaster and then to every child.
    pub fn pause(&mut self, r: usize) -> Result<(), LocalError> {
        let pid = self.running_pid(r)?;
        if !self.freeze(r, true)? {
            send(pid, Signal::SIGSTOP)?;
            for p in procs::tree(pid).into_iter().skip(1) {
                send(p, Signal::SIGSTOP)?;
            }
        }
        self.replicas[r].paused = true;
        self.save()
    }

    /// Resume: thaws replica `r` (or sends SIGCONT to its whole tree).
    pub fn resume(&mut self, r: usize) -> Result<(), LocalError> {
        let pid = self.running_pid(r)?;
        if !self.freeze(r, false)? {
            for p in procs::tree(pid).into_iter().rev() {
                send(p, Signal::SIGCONT)?;
            }
        }
        self.replicas[r].paused = false;
        self.save()
    }

    /// Slow: sets replica `r`'s quota to `cpus` cores (`0` = unlimited).
    /// Only recorded when quotas are not enforced.
    pub fn set_cpus(&mut self, r: usize, cpus: f64) -> Result<(), LocalError> {
        self.check(r)?;
        if !cpus.is_finite() || cpus < 0.0 {
            return Err(LocalError::InvalidOptions(format!("cpus must be a non-negative number of cores, got {cpus}")));
        }
        self.apply_quota(r, cpus)?;
        self.replicas[r].cpus = cpus;
        self.save()
    }

    /// Cumulative CPU seconds of replica `r`: the cgroup's accounting when
    /// there is one (it spans restarts), else the process tree's user+system
    /// time plus that of its reaped children and earlier incarnations.
    pub fn cpu_seconds(&self, r: usize) -> Option<f64> {
        let rep = self.replicas.get(r)?;
        if let Some(s) = self.cgroups.as_ref().and_then(|c| c.replicas.get(r)).and_then(|g| g.cpu_seconds()) {
            return Some(s);
        }
        let live = rep.pid.and_then(procs::tree_cpu_seconds).unwrap_or(0.0);
        Some(rep.cpu_offset + live)
    }

    /// Replica `r`'s memory in use as a fraction of its limit, when its
    /// cgroup says (see `ReplicaCgroup::memory_fraction`).
    pub fn memory_fraction(&self, r: usize) -> Option<f64> {
        self.cgroups.as_ref()?.replicas.get(r)?.memory_fraction()
    }

    /// Whether the CPU quotas are enforced by cgroups.
    pub fn cpu_budget_enforced(&self) -> bool {
        self.cgroups.is_some()
    }

    /// Port, pid, pause state, health and quota of every replica; the health
    /// checks run concurrently, each bounded by [`HEALTH_TIMEOUT`].
    pub fn status(&self) -> Vec<ReplicaStatus> {
        let cfgs: Vec<_> = (0..self.replicas.len()).map(|r| self.config(r)).collect();
        let health = pgconn::ping_all(&cfgs, HEALTH_TIMEOUT);
        self.replicas
            .iter()
            .zip(health)
            .enumerate()
            .map(|(r, (rep, h))| ReplicaStatus {
                replica: r,
                name: name(r),
                port: rep.port,
                pid: rep.pid.filter(|p| procs::alive(*p)),
                paused: rep.paused,
                healthy: h.is_ok(),
                cpus: rep.cpus,
            })
            .collect()
    }

    /// Seconds spent in each phase of `up`, in order: `initdb`, `load`
    /// (dataset), `copy` (template to replicas), `start` (until every
    /// replica answers). Empty for a cluster that failed before them.
    pub fn up_timings(&self) -> &[(String, f64)] {
        &self.timings
    }

    /// Server version, e.g. `PostgreSQL 15.18 (Debian 15.18-0+deb12u1)`.
    pub fn pg_version(&self) -> String {
        self.version.clone()
    }

    // ----- internals -----

    fn check(&self, r: usize) -> Result<(), LocalError> {
        if r < self.replicas.len() {
            Ok(())
        } else {
            Err(LocalError::NoSuchReplica { index: r, replicas: self.replicas.len() })
        }
    }

    fn running_pid(&self, r: usize) -> Result<i32, LocalError> {
        self.check(r)?;
        self.replicas[r].pid.filter(|p| procs::alive(*p)).ok_or_else(|| LocalError::NotRunning(name(r)))
    }

    fn data_dir(&self, r: usize) -> PathBuf {
        self.state_dir.join(name(r)).join("data")
    }

    fn template_dir(&self) -> PathBuf {
        self.state_dir.join("template")
    }

    fn sock_dir(&self) -> PathBuf {
        self.state_dir.join("sock")
    }

    fn apply_quota(&self, r: usize, cpus: f64) -> Result<(), LocalError> {
        match self.cgroups.as_ref().and_then(|c| c.replicas.get(r)) {
            Some(g) => g.set_cpus(cpus).map_err(|source| LocalError::Cgroup { replica: name(r), source }),
            None => Ok(()),
        }
    }

    /// Freezes or thaws through the cgroup; `Ok(false)` without a freezer.
    fn freeze(&self, r: usize, frozen: bool) -> Result<bool, LocalError> {
        match self.cgroups.as_ref().and_then(|c| c.replicas.get(r)) {
            Some(g) => g.freeze(frozen).map_err(|source| LocalError::Cgroup { replica: name(r), source }),
            None => Ok(false),
        }
    }
}

fn send(pid: i32, signal: Signal) -> Result<(), LocalError> {
    procs::signal(pid, signal).map_err(|source| LocalError::Signal { pid, signal, source })
}

/// The last `n` lines of a text file (empty when unreadable).
fn tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

mod server;
mod state;
pub(crate) use server::server_conf;
use state::{make_private_dir, pick_ports, prepare_state_dir};
