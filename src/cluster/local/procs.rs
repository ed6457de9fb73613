//! Processes of the local backend: the unprivileged account PostgreSQL runs
//! as, spawning a server straight into its cgroup, signals, process trees
//! and their CPU time, all read from `/proc` (Linux only).
//!
//! PostgreSQL refuses to run as root, so when plbbench is root the servers
//! run as the system user [`SERVICE_USER`], created on first use. A server
//! is spawned in its own process group (so a terminal's Ctrl-C reaches only
//! plbbench, which then tears the cluster down itself) and joins its cgroup
//! between fork and exec, before dropping privileges, so that it and every
//! backend it forks are under the CPU quota from their first instruction.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// System account the servers run as when plbbench runs as root.
pub const SERVICE_USER: &str = "plbbench";

/// An account to run servers as (only set when plbbench is root).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAs {
    /// Account name (default [`SERVICE_USER`]).
    pub user: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
}

/// `None` when not root (servers run as the current user); otherwise the
/// [`SERVICE_USER`] account, created with `useradd --system` if missing.
pub fn service_user() -> Result<Option<RunAs>, String> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let lookup =
        || nix::unistd::User::from_name(SERVICE_USER).map_err(|e| format!("looking up user {SERVICE_USER}: {e}"));
    let user = match lookup()? {
        Some(u) => u,
        None => {
            let out = Command::new("useradd")
                .args(["--system", "--no-create-home", "--user-group", "--home-dir", "/nonexistent"])
                .args(["--shell", "/usr/sbin/nologin", SERVICE_USER])
                .output()
                .map_err(|e| format!("running useradd to create user {SERVICE_USER}: {e}"))?;
            // A concurrent plbbench may have created it meanwhile.
            match lookup()? {
                Some(u) => u,
                None => {
                    return Err(format!(
                        "useradd {SERVICE_USER} failed ({}): {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    ))
                }
            }
        }
    };
    Ok(Some(RunAs { user: user.name, uid: user.uid.as_raw(), gid: user.gid.as_raw() }))
}

/// Spawns `cmd` in a new process group, first joining every cgroup whose
/// `cgroup.procs` file is in `join`, then switching to `run_as` if given.
pub fn spawn(cmd: &mut Command, run_as: Option<&RunAs>, join: &[PathBuf]) -> io::Result<Child> {
    let files: Vec<CString> = join
        .iter()
        .map(|p| CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::other("nul byte in cgroup path")))
        .collect::<io::Result<_>>()?;
    let ids = run_as.map(|r| (r.uid, r.gid));
    cmd.process_group(0);
    // SAFETY: the closure runs between fork and exec and only makes
    // async-signal-safe system calls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            use nix::libc;
            for f in &files {
                let fd = libc::open(f.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = io::Error::last_os_error();
                libc::close(fd);
                if n != 1 {
                    return Err(err);
                }
            }
            if let Some((uid, gid)) = ids {
                if libc::setgroups(1, &gid) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Sends `sig`; a process that is already gone is not an error.
pub fn signal(pid: i32, sig: Signal) -> Result<(), Errno> {
    match kill(Pid::from_raw(pid), sig) {
        Err(Errno::ESRCH) => Ok(()),
        r => r,
    }
}

/// Fields of `/proc/<pid>/stat` after the command name, so index 0 is the
/// state, 1 the parent pid, 11..=14 utime, stime, cutime, cstime.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Whether `pid` is a live (not zombie) process. Reaps it first when it is
/// an exited child of this process.
pub fn alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) => return false,
        _ => {}
    }
    match stat_fields(pid) {
        Some(f) => f.first().map(String::as_str) != Some("Z") && f.first().map(String::as_str) != Some("X"),
        None => false,
    }
}

/// Every live process id with its parent id.
fn process_table() -> Vec<(i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let f = stat_fields(pid)?;
            let ppid = f.get(1)?.parse().ok()?;
            (f.first()? != "Z").then_some((pid, ppid))
        })
        .collect()
}

/// `pid` followed by all its live descendants (empty when `pid` is gone).
pub fn tree(pid: i32) -> Vec<i32> {
    if !alive(pid) {
        return Vec::new();
    }
    let table = process_table();
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(table.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    out
}

/// This process's identity, recorded as the owner of a cluster it starts.
pub fn own_identity() -> Option<(i32, u64)> {
    identity(std::process::id() as i32)
}

/// Whether the process recorded as `owner` is gone (exited, or its pid
/// now belongs to another process).
pub fn owner_gone(owner: (i32, u64)) -> bool {
    identity(owner.0) != Some(owner)
}

/// `(pid, start time in clock ticks since boot)` of a live process: with
/// the start time, a recorded pid cannot be mistaken for a reused one.
pub fn identity(pid: i32) -> Option<(i32, u64)> {
    if !alive(pid) {
        return None;
    }
    let start = stat_fields(pid)?.get(19)?.parse().ok()?;
    Some((pid, start))
}

/// The command line of `pid`, split into arguments.
pub fn cmdline(pid: i32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect())
}

/// Whether `pid` is a live postmaster started with `-D data_dir`.
pub fn is_postmaster_of(pid: i32, data_dir: &Path) -> bool {
    alive(pid) && cmdline(pid).is_some_and(|args| args.windows(2).any(|w| w[0] == "-D" && Path::new(&w[1]) == data_dir))
}

/// Live postmasters started with `-D <path below dir>` (the servers of a
/// cluster in that state directory), excluding this process.
pub fn postmasters_under(dir: &Path) -> Vec<i32> {
    let me = std::process::id() as i32;
    process_table()
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| *p != me)
        .filter(|p| {
            cmdline(*p).is_some_and(|args| args.windows(2).any(|w| w[0] == "-D" && Path::new(&w[1]).starts_with(dir)))
        })
        .collect()
}

/// Waits until none of `pids` is alive; `false` if some remain at `timeout`.
pub fn wait_gone(pids: &[i32], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if pids.iter().all(|p| !alive(*p)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// CPU seconds of a process tree: user+system time of every live process,
/// plus the time of the children the root has reaped (its `cutime` and
/// `cstime`), which covers the postmaster's exited backends.
pub fn tree_cpu_seconds(root: i32) -> Option<f64> {
    let pids = tree(root);
    if pids.is_empty() {
        return None;
    }
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().unwrap_or(100) as f64;
    let mut ticks = 0u64;
    for (i, pid) in pids.iter().enumerate() {
        let Some(f) = stat_fields(*pid) else { continue };
        let field = |k: usize| f.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        ticks += field(11) + field(12);
        if i == 0 {
            ticks += field(13) + field(14);
        }
    }
    Some(ticks as f64 / hz)
}

/// Changes the owner of `path` and everything below it (without following
/// symlinks).
pub fn chown_tree(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    if std::fs::symlink_metadata(path)?.is_dir() {
        for entry in std::fs::read_dir(path)? {
            chown_tree(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// Copies the directory `from` to the new directory `to`, keeping file
/// modes and symlinks (a PostgreSQL data directory: no hard links, no
/// special files).
pub fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(from)?;
    std::fs::create_dir(to)?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(meta.permissions().mode() & 0o7777))?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let ft = entry.file_type()?;
        if ft.is_dir() {
            copy_tree(&src, &dst)?;
        } else if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_in_its_tree() {
        let me = std::process::id() as i32;
        assert!(alive(me));
        assert_eq!(tree(me).first(), Some(&me));
        assert!(tree_cpu_seconds(me).is_some());
        assert!(!alive(-1));
        let id = identity(me).unwrap();
        assert_eq!(identity(me), Some(id));
        assert!(id.1 > 0);
    }

    #[test]
    #[allow(clippy::zombie_processes)] // reaping is what `alive` is tested for
    fn reaps_and_detects_exited_child() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let child = spawn(&mut cmd, None, &[]).expect("spawn sleep");
        let pid = child.id() as i32;
        assert!(alive(pid));
        assert!(cmdline(pid).unwrap().contains(&"30".to_string()));
        signal(pid, Signal::SIGKILL).unwrap();
        assert!(wait_gone(&[pid], Duration::from_secs(5)));
        assert!(signal(pid, Signal::SIGKILL).is_ok(), "ESRCH is not an error");
    }
}
