//! Server processes of a [`LocalCluster`]: `initdb` and the dataset load
//! into the template, cloning it into replicas, the server configuration,
//! starting a postmaster in its cgroup and waiting until it answers.
//! A child module of `local` so it can use the cluster's private state.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::*;

/// Settings appended to every server's `postgresql.conf`: small and fast
/// for a benchmark whose data is read-only and disposable. One query uses
/// one core, as in the simulator.
pub(crate) fn server_conf(max_connections: u32, password_encryption: &str) -> String {
    format!(
        "\n# --- plbbench local backend ---\n\
         listen_addresses = '127.0.0.1'\n\
         max_connections = {max_connections}\n\
         shared_buffers = 64MB\n\
         huge_pages = off\n\
         fsync = off\n\
         synchronous_commit = off\n\
         full_page_writes = off\n\
         jit = off\n\
         max_parallel_workers_per_gather = 0\n\
         max_parallel_maintenance_workers = 0\n\
         autovacuum = off\n\
         wal_level = minimal\n\
         max_wal_senders = 0\n\
         min_wal_size = 32MB\n\
         max_wal_size = 64MB\n\
         password_encryption = '{password_encryption}'\n\
         unix_socket_permissions = 0700\n\
         logging_collector = off\n\
         log_destination = 'stderr'\n\
         log_line_prefix = '%m [%p] '\n\
         lc_messages = 'C'\n"
    )
}

/// Trust only on the unix socket inside the private state directory;
/// passwords (`method`) over TCP on loopback.
fn hba_conf(method: &str) -> String {
    format!(
        "# written by plbbench\n\
         local all all              trust\n\
         host  all all 127.0.0.1/32 {method}\n"
    )
}

impl LocalCluster {
    /// `initdb` into `template/`, configure, start on the unix socket only,
    /// create the database, load the dataset, stop cleanly.
    pub(super) fn build_template(&mut self, opts: &LocalOptions) -> Result<(), LocalError> {
        let t = self.template_dir();
        make_private_dir(&t, self.run_as.as_ref())?;
        let major = pgbin::major_version(&self.version).unwrap_or(0);
        // scram-sha-256 is the default password_encryption from 14 on.
        let method = if major == 0 || major >= 14 { "scram-sha-256" } else { "md5" };
        let t0 = Instant::now();
        self.initdb(&t, method)?;
        self.timings.push(("initdb".into(), t0.elapsed().as_secs_f64()));
        let append = |file: &str, text: &str, truncate: bool| -> Result<(), LocalError> {
            let path = t.join(file);
            // Opening the existing file keeps its owner (the server account).
            let mut f = fs::OpenOptions::new()
                .write(true)
                .append(!truncate)
                .truncate(truncate)
                .open(&path)
                .map_err(io_err(format!("writing {}", path.display())))?;
            f.write_all(text.as_bytes()).map_err(io_err(format!("writing {}", path.display())))
        };
        append("postgresql.conf", &server_conf(opts.max_connections, method), false)?;
        append("pg_hba.conf", &hba_conf(method), true)?;

        let log = self.state_dir.join("template.log");
        let port = self.replicas[0].port;
        let pid = self.start_postgres(&t, port, "", &log, &[])?;
        self.template_pid = Some(pid);
        self.save()?;
        let mut cfg = tokio_postgres::Config::new();
        cfg.host_path(self.sock_dir()).port(port).user(DB_USER).dbname("postgres");
        self.wait_answer("template", pid, &cfg, &log, READY_TIMEOUT)?;
        let sql = |what: &str| {
            let what = what.to_string();
            move |source| LocalError::Sql { what, source }
        };
        pgconn::run_statements(&cfg, &[format!("CREATE DATABASE {DB_NAME}")], Duration::from_secs(60))
            .map_err(sql("creating the database"))?;
        cfg.dbname(DB_NAME);
        let t0 = Instant::now();
        pgconn::run_statements(&cfg, &dataset::render(opts.scale, opts.seed), LOAD_TIMEOUT)
            .map_err(sql(&format!("loading the dataset (scale {}, seed {})", opts.scale, opts.seed)))?;
        self.timings.push(("load".into(), t0.elapsed().as_secs_f64()));
        // Fast shutdown writes a shutdown checkpoint: the copies start clean.
        let _ = procs::signal(pid, Signal::SIGINT);
        let stopped = procs::wait_gone(&[pid], SHUTDOWN_TIMEOUT * 3);
        if !stopped {
            let _ = procs::signal(pid, Signal::SIGKILL);
            return Err(LocalError::Timeout {
                what: "stopping the template server".into(),
                timeout: SHUTDOWN_TIMEOUT * 3,
            });
        }
        self.template_pid = None;
        self.prune_wal(&t);
        self.save()
    }

    /// Deletes the WAL segments that a cleanly stopped server keeps only for
    /// recycling (those after the one holding its last checkpoint), so that
    /// each replica copies one segment instead of a few dozen megabytes.
    /// Best effort: skipped when `pg_controldata` cannot tell.
    fn prune_wal(&self, data: &Path) {
        let Ok(out) = Command::new(self.bindir.join("pg_controldata")).arg("-D").arg(data).env("LC_ALL", "C").output()
        else {
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)).map(str::trim);
        let (Some("shut down"), Some(redo)) =
            (field("Database cluster state:"), field("Latest checkpoint's REDO WAL file:"))
        else {
            return;
        };
        let Ok(entries) = fs::read_dir(data.join("pg_wal")) else { return };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.len() == 24 && name.chars().all(|c| c.is_ascii_hexdigit()) && name.as_str() > redo {
                let _ = fs::remove_file(e.path());
            }
        }
    }

    /// Runs `initdb` as the server account with a password file that exists
    /// only for that call, inside the private socket directory.
    fn initdb(&self, dir: &Path, method: &str) -> Result<(), LocalError> {
        let pwfile = self.sock_dir().join("pwfile");
        let write_pw = || -> std::io::Result<()> {
            let _ = fs::remove_file(&pwfile);
            let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&pwfile)?;
            f.write_all(self.password.0.as_bytes())?;
            if let Some(u) = &self.run_as {
                std::os::unix::fs::chown(&pwfile, Some(u.uid), Some(u.gid))?;
            }
            Ok(())
        };
        write_pw().map_err(io_err("writing the initdb password file"))?;
        let mut cmd = Command::new(self.bindir.join("initdb"));
        cmd.arg("-D").arg(dir).args(["-U", DB_USER]).arg(format!("--pwfile={}", pwfile.display()));
        cmd.args(["-E", "UTF8", "--locale=C", "--auth-local=trust", &format!("--auth-host={method}"), "--no-sync"]);
        cmd.env("LC_ALL", "C").env_remove("PGDATA").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let out = procs::spawn(&mut cmd, self.run_as.as_ref(), &[]).and_then(|c| c.wait_with_output());
        let _ = fs::remove_file(&pwfile);
        let out = out.map_err(io_err("running initdb"))?;
        if out.status.success() {
            return Ok(());
        }
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        Err(LocalError::Command {
            what: "initdb".into(),
            status: out.status.to_string(),
            output: lines[lines.len().saturating_sub(5)..].join(" | "),
        })
    }

    /// Copies the template's data directory to `rN/data`.
    pub(super) fn clone_template(&self, r: usize) -> Result<(), LocalError> {
        let dir = self.state_dir.join(name(r));
        make_private_dir(&dir, self.run_as.as_ref())?;
        let data = self.data_dir(r);
        let what = || format!("copying the template to {}", data.display());
        procs::copy_tree(&self.template_dir(), &data).map_err(io_err(what()))?;
        if let Some(u) = &self.run_as {
            procs::chown_tree(&data, u.uid, u.gid).map_err(io_err(what()))?;
        }
        Ok(())
    }

    /// Starts replica `r`'s postmaster in its cgroup and records its pid.
    pub(super) fn spawn_server(&mut self, r: usize) -> Result<(), LocalError> {
        let join = self.cgroups.as_ref().and_then(|c| c.replicas.get(r)).map(|g| g.procs_files()).unwrap_or_default();
        let pid =
            self.start_postgres(&self.data_dir(r), self.replicas[r].port, "127.0.0.1", &self.log_path(r), &join)?;
        self.replicas[r].pid = Some(pid);
        self.replicas[r].paused = false;
        Ok(())
    }

    /// Spawns `postgres` on `data` with its output appended to `log`.
    fn start_postgres(
        &self,
        data: &Path,
        port: u16,
        listen: &str,
        log: &Path,
        join: &[PathBuf],
    ) -> Result<i32, LocalError> {
        let what = || format!("starting postgres on {}", data.display());
        let out = fs::OpenOptions::new().create(true).append(true).mode(0o600).open(log).map_err(io_err(what()))?;
        let err = out.try_clone().map_err(io_err(what()))?;
        let mut cmd = Command::new(self.bindir.join("postgres"));
        cmd.arg("-D").arg(data).arg("-p").arg(port.to_string()).arg("-k").arg(self.sock_dir()).arg("-h").arg(listen);
        cmd.env("LC_ALL", "C").env_remove("PGDATA").stdin(Stdio::null()).stdout(out).stderr(err);
        let child = procs::spawn(&mut cmd, self.run_as.as_ref(), join).map_err(io_err(what()))?;
        Ok(child.id() as i32)
    }

    /// Waits until replica `r` answers a query over TCP with the password.
    pub(super) fn wait_ready(&self, r: usize, timeout: Duration) -> Result<(), LocalError> {
        let pid = self.replicas[r].pid.ok_or_else(|| LocalError::NotRunning(name(r)))?;
        self.wait_answer(&name(r), pid, &self.config(r), &self.log_path(r), timeout)
    }

    /// Polls `SELECT 1` until it succeeds, the server exits or `timeout`.
    fn wait_answer(
        &self,
        label: &str,
        pid: i32,
        cfg: &tokio_postgres::Config,
        log: &Path,
        timeout: Duration,
    ) -> Result<(), LocalError> {
        let deadline = Instant::now() + timeout;
        loop {
            if !procs::alive(pid) {
                return Err(LocalError::ServerExited { replica: label.into(), log: log.into(), tail: tail(log, 5) });
            }
            let err = match pgconn::block_on(pgconn::ping_async(cfg, Duration::from_secs(1))) {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) | Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(LocalError::NotReady { replica: label.into(), timeout, log: log.into(), source: err });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_has_the_benchmark_settings() {
        let c = server_conf(300, "scram-sha-256");
        for line in [
            "max_connections = 300",
            "shared_buffers = 64MB",
            "fsync = off",
            "jit = off",
            "max_parallel_workers_per_gather = 0",
        ] {
            assert!(c.contains(line), "missing {line}");
        }
        let h = hba_conf("scram-sha-256");
        assert!(h.contains("local all all              trust"));
        assert!(h.contains("127.0.0.1/32 scram-sha-256"));
        assert!(!h.contains("0.0.0.0"));
    }

    #[test]
    fn debug_redacts_the_password() {
        let mut c = LocalCluster::empty(Path::new("/nonexistent"));
        c.password = Secret("hunter2hunter2".into());
        c.replicas.push(Replica { port: 5, pid: None, cpus: 0.3, paused: false, cpu_offset: 0.0 });
        c.persistent = true;
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("hunter2"), "{dbg}");
        assert!(dbg.contains("<redacted>"));
        assert!(c.dsn(0).contains("password=hunter2hunter2"));
    }
}
