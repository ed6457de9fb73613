//! Per-replica cgroups: the CPU quota that bounds each replica to `C` cores,
//! the CPU accounting that plbbench samples, and the freezer used for Pause.
//!
//! Both cgroup layouts are supported. With v2 (a `cgroup2` mount whose `cpu`
//! controller can be enabled below plbbench's own cgroup) a replica uses
//! `cpu.max`, `cpu.stat` and `cgroup.freeze`. With v1 (per-controller mounts
//! such as `/sys/fs/cgroup/cpu` and `/sys/fs/cgroup/cpuacct`, co-mounted or
//! not) it uses `cpu.cfs_quota_us`/`cpu.cfs_period_us`, `cpuacct.usage` and
//! `freezer.state`. Groups are created as `plbbench-<random>/rN` below the
//! calling process's own cgroup in each hierarchy. A server joins its group
//! by writing `0` to each `cgroup.procs` between fork and exec (see
//! [`super::procs`]), so every process it forks inherits the group.
//! Removal never moves processes: the caller kills them, then
//! [`CgroupSet::remove`] retries `rmdir` while they drain.

use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// CFS period written with every quota, in microseconds (100 ms, the kernel's
/// default).
pub const PERIOD_US: u64 = 100_000;

/// Smallest quota the kernel accepts, in microseconds.
const MIN_QUOTA_US: u64 = 1_000;

/// Which cgroup interface a [`CgroupSet`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupKind {
    /// Per-controller hierarchies (`cpu`, `cpuacct`, `freezer`).
    V1,
    /// The unified hierarchy.
    V2,
}

/// One replica's cgroup: its directory in each hierarchy it uses.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplicaCgroup {
    /// Interface in use.
    pub kind: CgroupKind,
    /// Directory holding the CPU quota files (v1 `cpu`, or the v2 group).
    pub cpu: PathBuf,
    /// v1 `cpuacct` directory (equal to `cpu` when co-mounted); `None` for
    /// v2 (usage is in `cpu.stat`) or when the controller is missing.
    pub cpuacct: Option<PathBuf>,
    /// v1 `freezer` directory; `None` for v2 (`cgroup.freeze` lives in
    /// `cpu`) or when the controller is missing.
    pub freezer: Option<PathBuf>,
}

/// The cgroups of one cluster: a parent group per hierarchy and one child
/// group per replica.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CgroupSet {
    /// Interface in use.
    pub kind: CgroupKind,
    /// Parent directories (`.../plbbench-<id>`), one per hierarchy.
    pub parents: Vec<PathBuf>,
    /// Replica groups, index 0 = `r1`.
    pub replicas: Vec<ReplicaCgroup>,
}

/// Mount points of the hierarchies plbbench can use, already joined with
/// the calling process's own cgroup path.
#[derive(Debug)]
struct Layout {
    kind: CgroupKind,
    cpu: PathBuf,
    cpuacct: Option<PathBuf>,
    freezer: Option<PathBuf>,
}

/// The host's memory in bytes (`MemTotal` of `/proc/meminfo`).
fn host_memory_bytes() -> Option<f64> {
    let info = fs::read_to_string("/proc/meminfo").ok()?;
    let kb: f64 =
        info.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb * 1024.0)
}

/// One line of `/proc/self/mountinfo` that mounts a cgroup filesystem.
#[derive(Debug, PartialEq)]
struct CgMount {
    root: String,
    mountpoint: PathBuf,
    v2: bool,
    controllers: Vec<String>,
}

fn parse_mountinfo(text: &str) -> Vec<CgMount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 5 || r.len() < 3 {
            continue;
        }
        let v2 = r[0] == "cgroup2";
        if !v2 && r[0] != "cgroup" {
            continue;
        }
        let controllers = r[2].split(',').map(str::to_string).collect();
        out.push(CgMount {
            root: unescape_mount(l[3]),
            mountpoint: PathBuf::from(unescape_mount(l[4])),
            v2,
            controllers,
        });
    }
    out
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mount(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

/// The calling process's path in the hierarchy with `controller` (v1) or in
/// the unified hierarchy (`controller == None`), from `/proc/self/cgroup`.
fn own_path(proc_cgroup: &str, controller: Option<&str>) -> Option<String> {
    proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_id, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = match controller {
            None => ctrls.is_empty(),
            Some(c) => ctrls.split(',').any(|x| x == c),
        };
        hit.then(|| path.to_string())
    })
}

/// `mountpoint` plus the part of `own` below the mount's root.
fn join_own(m: &CgMount, own: Option<&str>) -> PathBuf {
    let own = own.unwrap_or("/");
    let rel = own.strip_prefix(m.root.as_str()).unwrap_or("");
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        m.mountpoint.clone()
    } else {
        m.mountpoint.join(rel)
    }
}

fn has_word(path: &Path, word: &str) -> bool {
    fs::read_to_string(path).map(|s| s.split_whitespace().any(|w| w == word)).unwrap_or(false)
}

fn detect() -> Result<Layout, String> {
    let mountinfo =
        fs::read_to_string("/proc/self/mountinfo").map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    let proc_cgroup = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mounts = parse_mountinfo(&mountinfo);
    if let Some(m) = mounts.iter().find(|m| m.v2) {
        let base = join_own(m, own_path(&proc_cgroup, None).as_deref());
        let ctl = base.join("cgroup.subtree_control");
        if has_word(&base.join("cgroup.controllers"), "cpu")
            && (has_word(&ctl, "cpu") || fs::write(&ctl, "+cpu").is_ok())
        {
            return Ok(Layout { kind: CgroupKind::V2, cpu: base, cpuacct: None, freezer: None });
        }
    }
    let v1 = |c: &str| {
        mounts
            .iter()
            .find(|m| !m.v2 && m.controllers.iter().any(|x| x == c))
            .map(|m| join_own(m, own_path(&proc_cgroup, Some(c)).as_deref()))
    };
    match v1("cpu") {
        Some(cpu) => Ok(Layout { kind: CgroupKind::V1, cpu, cpuacct: v1("cpuacct"), freezer: v1("freezer") }),
        None => Err("no cgroup hierarchy with the cpu controller is mounted".into()),
    }
}

fn mkdir(path: &Path) -> io::Result<()> {
    match fs::create_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        r => r,
    }
}

impl CgroupSet {
    /// Creates `plbbench-<id>/r1..rN` in every usable hierarchy. Fails with
    /// a short reason (to be shown as a warning) when cgroups are missing or
    /// not writable; nothing is left behind in that case.
    pub fn create(id: &str, n: usize) -> Result<CgroupSet, String> {
        let layout = detect()?;
        let name = format!("plbbench-{id}");
        let mut set = CgroupSet { kind: layout.kind, parents: Vec::new(), replicas: Vec::new() };
        let cpu_parent = layout.cpu.join(&name);
        mkdir(&cpu_parent).map_err(|e| format!("cannot create {}: {e}", cpu_parent.display()))?;
        set.parents.push(cpu_parent.clone());
        if layout.kind == CgroupKind::V2 {
            if let Err(e) = fs::write(cpu_parent.join("cgroup.subtree_control"), "+cpu") {
                let _ = set.remove(Duration::from_millis(100));
                return Err(format!("cannot enable the cpu controller in {}: {e}", cpu_parent.display()));
            }
        }
        // Optional v1 hierarchies: used when they exist and are writable.
        let mut extra = |root: &Option<PathBuf>| -> Option<PathBuf> {
            let root = root.as_ref()?;
            let dir = root.join(&name);
            if dir == cpu_parent {
                return Some(dir);
            }
            mkdir(&dir).ok()?;
            set.parents.push(dir.clone());
            Some(dir)
        };
        let acct_parent = extra(&layout.cpuacct);
        let freezer_parent = extra(&layout.freezer);
        for i in 1..=n {
            let leaf = format!("r{i}");
            let make = |p: &Option<PathBuf>| -> Result<Option<PathBuf>, String> {
                match p {
                    None => Ok(None),
                    Some(p) => {
                        let d = p.join(&leaf);
                        mkdir(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
                        Ok(Some(d))
                    }
                }
            };
            let made = (|| {
                Ok::<_, String>(ReplicaCgroup {
                    kind: layout.kind,
                    cpu: make(&Some(cpu_parent.clone()))?.expect("cpu parent"),
                    cpuacct: make(&acct_parent)?,
                    freezer: make(&freezer_parent)?,
                })
            })();
            match made {
                Ok(rg) => set.replicas.push(rg),
                Err(e) => {
                    let _ = set.remove(Duration::from_millis(100));
                    return Err(e);
                }
            }
        }
        Ok(set)
    }

    /// Removes every replica group, then the parents, retrying for up to
    /// `drain` while killed processes leave. Missing directories are fine.
    pub fn remove(&self, drain: Duration) -> io::Result<()> {
        let deadline = Instant::now() + drain;
        let mut dirs: Vec<PathBuf> = Vec::new();
        for r in &self.replicas {
            dirs.extend(r.dirs());
        }
        dirs.extend(self.parents.iter().cloned());
        dirs.dedup();
        for d in dirs {
            loop {
                match fs::remove_dir(&d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if Instant::now() >= deadline => {
                        return Err(io::Error::new(e.kind(), format!("rmdir {}: {e}", d.display())))
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        }
        Ok(())
    }
}

impl ReplicaCgroup {
    /// Every directory of this group (deduplicated when co-mounted).
    pub fn dirs(&self) -> Vec<PathBuf> {
        let mut v = vec![self.cpu.clone()];
        for d in [&self.cpuacct, &self.freezer].into_iter().flatten() {
            if !v.contains(d) {
                v.push(d.clone());
            }
        }
        v
    }

    /// The `cgroup.procs` files a process writes `0` to in order to join.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs().into_iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Sets the quota to `cpus` cores; `cpus <= 0` removes the limit.
    pub fn set_cpus(&self, cpus: f64) -> io::Result<()> {
        let quota = (cpus > 0.0).then(|| ((cpus * PERIOD_US as f64).round() as u64).max(MIN_QUOTA_US));
        match self.kind {
            CgroupKind::V2 => {
                let q = quota.map_or("max".to_string(), |q| q.to_string());
                write(&self.cpu.join("cpu.max"), &format!("{q} {PERIOD_US}"))
            }
            CgroupKind::V1 => {
                // The period goes first so that the quota is read against it.
                write(&self.cpu.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
                let q = quota.map_or("-1".to_string(), |q| q.to_string());
                write(&self.cpu.join("cpu.cfs_quota_us"), &q)
            }
        }
    }

    /// Cumulative CPU time of every process that has been in the group, in
    /// seconds; `None` when the group has no accounting.
    pub fn cpu_seconds(&self) -> Option<f64> {
        match self.kind {
            CgroupKind::V2 => {
                let stat = fs::read_to_string(self.cpu.join("cpu.stat")).ok()?;
                let usec: u64 = stat.lines().find_map(|l| l.strip_prefix("usage_usec "))?.trim().parse().ok()?;
                Some(usec as f64 / 1e6)
            }
            CgroupKind::V1 => {
                let dir = self.cpuacct.as_ref()?;
                let ns: u64 = fs::read_to_string(dir.join("cpuacct.usage")).ok()?.trim().parse().ok()?;
                Some(ns as f64 / 1e9)
            }
        }
    }

    /// Memory in use by the group as a fraction of its limit (`memory.max`,
    /// or the host's memory where the group has none): the seed's memory
    /// utilisation signal. A v2 group with the memory controller reads
    /// `memory.current`; elsewhere (v1, where plbbench makes no memory
    /// group) its processes' resident memory from `/proc/<pid>/statm`,
    /// each one's private pages plus the largest shared set once (every
    /// backend maps the same shared buffers).
    pub fn memory_fraction(&self) -> Option<f64> {
        let current = fs::read_to_string(self.cpu.join("memory.current")).ok();
        let used = match current.and_then(|c| c.trim().parse::<f64>().ok()) {
            Some(bytes) => bytes,
            None => self.resident_bytes()?,
        };
        let limit = fs::read_to_string(self.cpu.join("memory.max")).ok().and_then(|m| m.trim().parse::<f64>().ok());
        let limit = limit.or_else(host_memory_bytes)?;
        (limit > 0.0).then(|| used / limit)
    }

    /// The group's processes' resident memory, bytes (see
    /// [`Self::memory_fraction`]); `None` when it has no process.
    fn resident_bytes(&self) -> Option<f64> {
        let page = 4096.0;
        let (mut private, mut shared) = (0.0, 0.0f64);
        for pid in self.pids() {
            let Ok(statm) = fs::read_to_string(format!("/proc/{pid}/statm")) else { continue };
            let f: Vec<f64> = statm.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            if let [_, resident, share, ..] = f[..] {
                private += (resident - share).max(0.0) * page;
                shared = shared.max(share * page);
            }
        }
        (private + shared > 0.0).then_some(private + shared)
    }

    /// Removes this group's directories (best effort, retrying for up to
    /// `drain` while processes leave).
    pub fn remove_self(&self, drain: Duration) {
        let set = CgroupSet { kind: self.kind, parents: Vec::new(), replicas: vec![self.clone()] };
        let _ = set.remove(drain);
    }

    /// Pids currently in the group.
    pub fn pids(&self) -> Vec<i32> {
        fs::read_to_string(self.cpu.join("cgroup.procs"))
            .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Freezes (`true`) or thaws the group and waits up to 2 s for the state
    /// to settle. Returns `Ok(false)` when the group has no freezer, so the
    /// caller falls back to SIGSTOP/SIGCONT.
    pub fn freeze(&self, frozen: bool) -> io::Result<bool> {
        let (file, value, done): (PathBuf, &str, Box<dyn Fn() -> bool>) = match (self.kind, &self.freezer) {
            (CgroupKind::V2, _) => {
                let file = self.cpu.join("cgroup.freeze");
                if !file.exists() {
                    return Ok(false);
                }
                let events = self.cpu.join("cgroup.events");
                let want = if frozen { "frozen 1" } else { "frozen 0" };
                let done = move || fs::read_to_string(&events).map(|s| s.lines().any(|l| l == want)).unwrap_or(false);
                (file, if frozen { "1" } else { "0" }, Box::new(done))
            }
            (CgroupKind::V1, Some(dir)) => {
                let state = dir.join("freezer.state");
                let want = if frozen { "FROZEN" } else { "THAWED" };
                let st = state.clone();
                let done = move || fs::read_to_string(&st).map(|s| s.trim() == want).unwrap_or(false);
                (state, want, Box::new(done))
            }
            (CgroupKind::V1, None) => return Ok(false),
        };
        write(&file, value)?;
        let deadline = Instant::now() + Duration::from_secs(2);
        while !done() {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} did not reach {value}", file.display()),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
            if !frozen {
                // v1 may need the THAWED write repeated if a task was mid-freeze.
                let _ = fs::write(&file, value);
            }
        }
        Ok(true)
    }
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value)
        .map_err(|e| io::Error::new(e.kind(), format!("writing {value:?} to {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
30 25 0:26 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:28 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
33 30 0:29 /docker/abc /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
34 30 0:30 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
35 30 0:31 / /mnt/with\\040space rw - ext4 /dev/x rw";

    #[test]
    fn mountinfo_lists_cgroup_mounts() {
        let m = parse_mountinfo(MOUNTINFO);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].mountpoint, PathBuf::from("/sys/fs/cgroup/cpu"));
        assert_eq!(m[0].controllers, vec!["rw", "cpu"]);
        assert!(m[3].v2);
        assert_eq!(m[2].root, "/docker/abc");
    }

    #[test]
    fn own_paths_join_below_mount_root() {
        let pc = "9:name=systemd:/\n6:freezer:/docker/abc/inner\n1:cpu:/\n2:cpuacct,cpu:/x\n0::/user.slice\n";
        assert_eq!(own_path(pc, Some("freezer")).as_deref(), Some("/docker/abc/inner"));
        assert_eq!(own_path(pc, Some("cpu")).as_deref(), Some("/"));
        assert_eq!(own_path(pc, None).as_deref(), Some("/user.slice"));
        let m = parse_mountinfo(MOUNTINFO);
        assert_eq!(join_own(&m[2], Some("/docker/abc/inner")), PathBuf::from("/sys/fs/cgroup/freezer/inner"));
        assert_eq!(join_own(&m[0], Some("/")), PathBuf::from("/sys/fs/cgroup/cpu"));
        assert_eq!(join_own(&m[0], None), PathBuf::from("/sys/fs/cgroup/cpu"));
    }

    #[test]
    fn comounted_dirs_are_deduplicated() {
        let g = ReplicaCgroup {
            kind: CgroupKind::V1,
            cpu: "/c/p/r1".into(),
            cpuacct: Some("/c/p/r1".into()),
            freezer: Some("/f/p/r1".into()),
        };
        assert_eq!(g.dirs(), vec![PathBuf::from("/c/p/r1"), PathBuf::from("/f/p/r1")]);
        assert_eq!(g.procs_files()[1], PathBuf::from("/f/p/r1/cgroup.procs"));
    }

    fn scratch_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "plbbench-cgtest-{tag}-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn quota_and_usage_file_formats() {
        let d = scratch_dir("fmt");
        let v2 = ReplicaCgroup { kind: CgroupKind::V2, cpu: d.clone(), cpuacct: None, freezer: None };
        v2.set_cpus(0.3).unwrap();
        assert_eq!(fs::read_to_string(d.join("cpu.max")).unwrap(), "30000 100000");
        v2.set_cpus(0.0).unwrap();
        assert_eq!(fs::read_to_string(d.join("cpu.max")).unwrap(), "max 100000");
        v2.set_cpus(0.001).unwrap();
        assert_eq!(fs::read_to_string(d.join("cpu.max")).unwrap(), "1000 100000", "kernel minimum");
        fs::write(d.join("cpu.stat"), "usage_usec 2500000\nuser_usec 2000000\n").unwrap();
        assert_eq!(v2.cpu_seconds(), Some(2.5));
        let v1 = ReplicaCgroup { kind: CgroupKind::V1, cpu: d.clone(), cpuacct: Some(d.clone()), freezer: None };
        v1.set_cpus(1.5).unwrap();
        assert_eq!(fs::read_to_string(d.join("cpu.cfs_quota_us")).unwrap(), "150000");
        assert_eq!(fs::read_to_string(d.join("cpu.cfs_period_us")).unwrap(), "100000");
        v1.set_cpus(0.0).unwrap();
        assert_eq!(fs::read_to_string(d.join("cpu.cfs_quota_us")).unwrap(), "-1");
        fs::write(d.join("cpuacct.usage"), "1250000000\n").unwrap();
        assert_eq!(v1.cpu_seconds(), Some(1.25));
        assert!(!v1.freeze(true).unwrap(), "no freezer: caller falls back to signals");
        fs::remove_dir_all(&d).unwrap();
    }

    /// Accounting and freezing through a real cgroup2 group, where the
    /// machine has a writable unified hierarchy (they need no controller).
    #[test]
    fn v2_accounting_and_freeze_on_a_real_hierarchy() {
        let mounts = parse_mountinfo(&fs::read_to_string("/proc/self/mountinfo").unwrap());
        let Some(m) = mounts.iter().find(|m| m.v2) else { return };
        let own = own_path(&fs::read_to_string("/proc/self/cgroup").unwrap_or_default(), None);
        let dir = join_own(m, own.as_deref()).join(format!("plbbench-test-{:08x}", rand::random::<u32>()));
        if fs::create_dir(&dir).is_err() || !dir.join("cgroup.freeze").exists() {
            let _ = fs::remove_dir(&dir);
            eprintln!("skipping: no writable cgroup2 hierarchy with cgroup.freeze");
            return;
        }
        let g = ReplicaCgroup { kind: CgroupKind::V2, cpu: dir.clone(), cpuacct: None, freezer: None };
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "while :; do :; done"]);
        // Kills the busy loop and removes the group even when an assert fails.
        struct Guard(std::process::Child, ReplicaCgroup);
        impl Drop for Guard {
            fn drop(&mut self) {
                let _ = self.1.freeze(false);
                let _ = self.0.kill();
                let _ = self.0.wait();
                self.1.remove_self(Duration::from_secs(2));
            }
        }
        let child = super::super::procs::spawn(&mut cmd, None, &g.procs_files()).unwrap();
        let guard = Guard(child, g.clone());
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(g.pids(), vec![guard.0.id() as i32]);
        let busy = g.cpu_seconds().unwrap();
        assert!(busy > 0.05, "busy loop used {busy} s");
        assert!(g.freeze(true).unwrap());
        let a = g.cpu_seconds().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let frozen_use = g.cpu_seconds().unwrap() - a;
        assert!(g.freeze(false).unwrap());
        assert!(frozen_use < 0.02, "frozen group used {frozen_use} s");
        drop(guard);
        assert!(!dir.exists());
    }
}
