//! Where a [`LocalCluster`] lives and how it goes away: the state
//! directory and its private subdirectories, the 0600 state file, port
//! selection, and the teardown that stops every server, removes the cgroups
//! and deletes the directory (from `down`, `Drop` and stale-cluster
//! cleanup). A child module of `local` so it can use the cluster's private
//! state.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;

use super::*;

impl LocalCluster {
    pub(super) fn empty(state_dir: &Path) -> LocalCluster {
        LocalCluster {
            state_dir: state_dir.to_path_buf(),
            bindir: PathBuf::new(),
            version: String::new(),
            password: Secret(String::new()),
            run_as: None,
            cgroups: None,
            replicas: Vec::new(),
            template_pid: None,
            timings: Vec::new(),
            keep: false,
            owner: None,
            persistent: false,
            torn_down: false,
        }
    }

    /// The cluster saved in `state_dir`, as a persistent value: dropping it
    /// never tears the cluster down (it may be another live plbbench's);
    /// a caller that means to remove it calls [`Self::teardown`].
    pub(super) fn read_state(state_dir: &Path) -> Result<Option<LocalCluster>, LocalError> {
        let path = state_dir.join(STATE_FILE);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(format!("reading {}", path.display()))(e)),
        };
        let mut c: LocalCluster = serde_json::from_str(&text).map_err(|source| LocalError::State { path, source })?;
        c.persistent = true;
        Ok(Some(c))
    }

    /// Writes `cluster.json` atomically with mode 0600.
    pub(super) fn save(&self) -> Result<(), LocalError> {
        let path = self.state_dir.join(STATE_FILE);
        let json =
            serde_json::to_vec_pretty(self).map_err(|source| LocalError::State { path: path.clone(), source })?;
        crate::fsutil::write_atomic(&path, json, 0o600).map_err(io_err(format!("writing {}", path.display())))
    }

    /// SIGKILLs `pid`, its tree and its cgroup's processes, thaws them so
    /// the signal lands, reaps, and waits; `true` when all are gone.
    pub(super) fn kill_tree(&self, r: usize, pid: i32) -> bool {
        let mut pids = procs::tree(pid);
        if let Some(g) = self.cgroups.as_ref().and_then(|c| c.replicas.get(r)) {
            for p in g.pids() {
                if !pids.contains(&p) {
                    pids.push(p);
                }
            }
        }
        let _ = procs::signal(pid, Signal::SIGKILL);
        for &p in &pids {
            let _ = procs::signal(p, Signal::SIGKILL);
        }
        let _ = self.freeze(r, false);
        for &p in &pids {
            let _ = procs::signal(p, Signal::SIGCONT);
        }
        procs::wait_gone(&pids, KILL_TIMEOUT)
    }

    /// Stops everything and removes cgroups and files; idempotent.
    pub(super) fn teardown(&mut self) -> Result<(), LocalError> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        let mut first_err: Option<LocalError> = None;
        let mut note = |e: LocalError| {
            first_err.get_or_insert(e);
        };
        if let Some(t) = self.template_pid.take() {
            let _ = procs::signal(t, Signal::SIGKILL);
        }
        // Fast shutdown of every running server, all at once; a cluster made
        // for one run, whose data is deleted next, gets an immediate one.
        let stop = if self.persistent { Signal::SIGINT } else { Signal::SIGQUIT };
        let running: Vec<(usize, i32)> = (0..self.replicas.len())
            .filter_map(|r| {
                self.replicas[r].pid.filter(|p| procs::is_postmaster_of(*p, &self.data_dir(r))).map(|p| (r, p))
            })
            .collect();
        for &(r, pid) in &running {
            if self.replicas[r].paused {
                let _ = self.freeze(r, false);
                for p in procs::tree(pid) {
                    let _ = procs::signal(p, Signal::SIGCONT);
                }
            }
            let _ = procs::signal(pid, stop);
        }
        let pids: Vec<i32> = running.iter().map(|x| x.1).collect();
        if !procs::wait_gone(&pids, SHUTDOWN_TIMEOUT) {
            for &(r, pid) in &running {
                if !self.kill_tree(r, pid) {
                    note(LocalError::Timeout { what: format!("stopping {}", name(r)), timeout: KILL_TIMEOUT });
                }
            }
        }
        for r in &mut self.replicas {
            r.pid = None;
        }
        // Any other server of this state directory (with its children), and
        // any process left in the cgroups (orphaned backends).
        let mut strays: Vec<i32> =
            procs::postmasters_under(&self.state_dir).into_iter().flat_map(procs::tree).collect();
        if let Some(set) = &self.cgroups {
            set.replicas.iter().for_each(|g| strays.extend(g.pids()));
        }
        for &p in &strays {
            let _ = procs::signal(p, Signal::SIGKILL);
        }
        if let Some(set) = &self.cgroups {
            for g in &set.replicas {
                let _ = g.freeze(false);
            }
        }
        if !procs::wait_gone(&strays, KILL_TIMEOUT) {
            note(LocalError::Timeout { what: "killing stray servers".into(), timeout: KILL_TIMEOUT });
        }
        if let Some(set) = &self.cgroups {
            if let Err(source) = set.remove(Duration::from_secs(5)) {
                note(LocalError::Io { what: "removing cgroups".into(), source });
            }
        }
        if self.state_dir.join(MARKER).exists() {
            if let Err(e) = fs::remove_dir_all(&self.state_dir) {
                note(io_err(format!("removing {}", self.state_dir.display()))(e));
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if self.persistent || self.torn_down {
            return;
        }
        if let Err(e) = self.teardown() {
            eprintln!(
                "plbbench: warning: tearing down the local cluster in {}: {}",
                self.state_dir.display(),
                chain(&e)
            );
        }
    }
}

/// `error: cause: cause...` for messages printed outside `anyhow`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Creates the state directory (0711 when servers run as another user so
/// they can traverse it, else 0700), its marker and `sock/`, and checks
/// that the server account can reach it.
pub(super) fn prepare_state_dir(dir: &Path, run_as: Option<&RunAs>) -> Result<(), LocalError> {
    let ctx = || format!("creating {}", dir.display());
    fs::create_dir_all(dir).map_err(io_err(ctx()))?;
    let mode = if run_as.is_some() { 0o711 } else { 0o700 };
    fs::set_permissions(dir, fs::Permissions::from_mode(mode)).map_err(io_err(ctx()))?;
    fs::write(dir.join(MARKER), "created by plbbench; removed with the cluster\n").map_err(io_err(ctx()))?;
    make_private_dir(&dir.join("sock"), run_as)?;
    let Some(u) = run_as else { return Ok(()) };
    for anc in dir.ancestors().skip(1) {
        use std::os::unix::fs::MetadataExt;
        let Ok(m) = fs::metadata(anc) else { continue };
        let mode = m.mode();
        let ok =
            mode & 0o001 != 0 || (m.uid() == u.uid && mode & 0o100 != 0) || (m.gid() == u.gid && mode & 0o010 != 0);
        if !ok {
            return Err(LocalError::StateDirNotAccessible { path: anc.to_path_buf(), user: u.user.clone() });
        }
    }
    Ok(())
}

/// A 0700 directory owned by the server account.
pub(super) fn make_private_dir(dir: &Path, run_as: Option<&RunAs>) -> Result<(), LocalError> {
    let what = || format!("creating {}", dir.display());
    fs::create_dir_all(dir).map_err(io_err(what()))?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_err(what()))?;
    if let Some(u) = run_as {
        procs::chown_tree(dir, u.uid, u.gid).map_err(io_err(what()))?;
    }
    Ok(())
}

/// `base_port..base_port+K`, checked free; or K distinct free ports.
pub(super) fn pick_ports(opts: &LocalOptions) -> Result<Vec<u16>, LocalError> {
    use std::net::TcpListener;
    if opts.base_port != 0 {
        let ports: Vec<u16> = (0..opts.replicas).map(|i| opts.base_port + i as u16).collect();
        for &port in &ports {
            TcpListener::bind(("127.0.0.1", port)).map_err(|source| LocalError::PortInUse { port, source })?;
        }
        return Ok(ports);
    }
    // Hold every listener until all are chosen so the ports are distinct.
    let listeners = (0..opts.replicas)
        .map(|_| TcpListener::bind(("127.0.0.1", 0)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_err("picking free ports"))?;
    listeners.iter().map(|l| Ok(l.local_addr().map_err(io_err("picking free ports"))?.port())).collect()
}
