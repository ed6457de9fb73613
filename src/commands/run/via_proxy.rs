//! `run --via-proxy` ([proxy](docs/proxy.md#plbbench-run---via-proxy)): the
//! run's clients go through `plbbench proxy` child processes instead of
//! routing themselves, so a run measures PLB as it would be deployed in
//! front of applications (the proxy's routing, its probes, its extra hop).
//! This file starts and stops one child ([`spawn`]); `super::proxies` owns
//! the run's set of them (one, or a tier). A child gets the run's routing
//! flags (so it builds the same plan: `proxy_args::flags`), the run's
//! cluster as an external one in a private config file, and reports back
//! over its stdout (`backend::proxy_feed`). It dies with the run: SIGTERM at
//! the end, and the kernel's parent-death signal if the run is killed.
//!
//! On a loopback address its clients log in without a password (they are
//! the run's own, on this host). Where generator containers on a remote
//! engine must reach it, it listens on an address others may reach too, so
//! the run makes a password for that run alone, hands the proxy a users
//! file with it and its children the password: the proxy asks it
//! (SCRAM-SHA-256) and nobody else gets in.

use crate::backend::proxy_feed::Feed;
use crate::cluster::Cluster;
use crate::core::workload::Workload;
use crate::error::Error;
use anyhow::{anyhow, Context};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The class rule's prefix: the run's Premium clients connect with
/// `application_name=premium`, the others with `freemium`.
pub const PREMIUM_APP: &str = "premium";
/// The application_name of the run's Freemium clients.
pub const FREEMIUM_APP: &str = "freemium";

/// How long the proxy may take to open the cluster and listen.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// A libpq key/value DSN for `cfg` (host, port, user, password, dbname).
pub(crate) fn dsn(cfg: &tokio_postgres::Config) -> String {
    let quote = |v: &str| match v.is_empty() || v.contains([' ', '\'', '\\']) {
        true => format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'")),
        false => v.to_string(),
    };
    let mut parts = Vec::new();
    if let Some(tokio_postgres::config::Host::Tcp(h)) = cfg.get_hosts().first() {
        parts.push(format!("host={}", quote(h)));
    }
    if let Some(p) = cfg.get_ports().first() {
        parts.push(format!("port={p}"));
    }
    if let Some(u) = cfg.get_user() {
        parts.push(format!("user={}", quote(u)));
    }
    if let Some(pw) = cfg.get_password() {
        parts.push(format!("password={}", quote(&String::from_utf8_lossy(pw))));
    }
    if let Some(d) = cfg.get_dbname() {
        parts.push(format!("dbname={}", quote(d)));
    }
    parts.join(" ")
}

/// The proxy config the child reads: where it listens (`at`; port 0: a
/// free one), the cluster's replicas, the class rule on application_name,
/// trust (the clients are the run's own) or the `users` file when there is
/// one, and the workload's login
/// deadline on the replica (the proxy's longest, an hour, when the
/// workload waits without one, as `paper` does), and no kept server
/// connections: every session of the run logs into its replica, as in a
/// run without the proxy, so both measure the same workload.
fn config_text(cluster: &Cluster, w: &Workload, at: std::net::SocketAddr, users: Option<&Path>) -> String {
    let dsns: Vec<String> = (0..cluster.replicas()).map(|r| dsn(&cluster.config(r))).collect();
    let connect_s = w.client.login_deadline_s().unwrap_or(crate::proxy::config::MAX_DEADLINE_S);
    let users = users
        .map_or(String::new(), |u| format!("users_file = {}\n", toml::Value::String(u.to_string_lossy().into_owned())));
    format!(
        "listen = \"{}\"\ndsns = {}\n{users}drain_s = 1\nserver_connect_timeout_s = {connect_s}\nserver_pool = 0\n\n[class]\nparam = \"application_name\"\npremium_prefix = \"{PREMIUM_APP}\"\n",
        at,
        toml_list(&dsns)
    )
}

/// A random password for the run's clients at a proxy off loopback.
fn run_password() -> String {
    use rand::Rng;
    rand::thread_rng().sample_iter(&rand::distributions::Alphanumeric).take(32).map(char::from).collect()
}

/// A users file (PgBouncer's format) naming `user` with `password`.
fn users_text(user: &str, password: &str) -> String {
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    format!("{} {}\n", quote(user), quote(password))
}

fn toml_list(items: &[String]) -> String {
    toml::Value::Array(items.iter().cloned().map(toml::Value::String).collect()).to_string()
}

/// A running proxy child process.
pub struct ProxyChild {
    child: Child,
    /// Its stderr.
    log: PathBuf,
    /// Where it listens.
    pub addr: std::net::SocketAddr,
}

/// What a proxy child's feed lines go to, each on the Unix clock.
pub type Sink = Box<dyn Fn(Feed) + Send>;

/// Starts a proxy with `config` and `flags` (its stderr to `log`), waits
/// until it listens and hands every later feed line to `sink`, its time
/// moved onto the Unix clock.
pub fn spawn(config: &Path, log: &Path, flags: &[String], sink: Sink) -> Result<ProxyChild, Error> {
    let log_file = std::fs::File::create(log).context("creating the proxy log")?;
    let exe = std::env::current_exe().context("finding plbbench's own executable")?;
    let mut cmd = Command::new(exe);
    // The run checked the cluster's dataset: the proxy need not again.
    cmd.arg("proxy").arg("--config").arg(config).arg("--feed").arg("--dataset-checked").args(flags);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log_file);
    // A Ctrl-C at the terminal reaches the run, which drains its clients
    // first and then stops the proxy.
    child_of_run(&mut cmd);
    let mut child = cmd.spawn().context("starting the proxy process")?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines().map_while(Result::ok).filter_map(|l| Feed::parse(&l).ok());
        let first = lines.next();
        let zero = match &first {
            Some(Feed::Listening { start_unix_s, .. }) => *start_unix_s,
            _ => 0.0,
        };
        let _ = first_tx.send(first);
        for msg in lines {
            sink(msg.shifted(zero));
        }
    });
    let Ok(Some(Feed::Listening { addr, .. })) = first_rx.recv_timeout(READY_WITHIN) else {
        let why = stop_child(&mut child);
        return Err(Error::Run(anyhow!("the proxy did not start ({why}); its log: {}", log_tail(log))));
    };
    Ok(ProxyChild { child, log: log.to_path_buf(), addr })
}

/// Writes the proxy config for `cluster` at `path`, listening on `at`
/// (port 0: any free one), with the users file of the run's `password`
/// when it has one; returns the path.
pub fn write_config(
    dir: &Path,
    name: &str,
    cluster: &Cluster,
    w: &Workload,
    at: std::net::SocketAddr,
    users: Option<&Path>,
) -> Result<PathBuf, Error> {
    let path = dir.join(name);
    crate::fsutil::write_atomic(&path, config_text(cluster, w, at, users), 0o600)
        .context("writing the proxy config")?;
    Ok(path)
}

/// The run's users file in `dir` (its `user` with a new password) when
/// the proxies listen on `ip` off loopback; the password and the file.
pub fn users(dir: &Path, user: &str, ip: std::net::IpAddr) -> Result<(Option<String>, Option<PathBuf>), Error> {
    if ip.is_loopback() {
        return Ok((None, None));
    }
    let pw = run_password();
    let path = dir.join("users.txt");
    crate::fsutil::write_atomic(&path, users_text(user, &pw), 0o600).context("writing the proxy's users file")?;
    Ok((Some(pw), Some(path)))
}

/// How the run's clients log in through the proxy at `addr` (with the
/// run's `password` when it asks one), Premium then Freemium (their
/// application_name tells the proxy the class).
pub fn client_configs(
    addr: std::net::SocketAddr,
    user: &str,
    password: Option<&str>,
    dbname: Option<&str>,
) -> [tokio_postgres::Config; 2] {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host(addr.ip().to_string()).port(addr.port());
    cfg.user(user);
    if let Some(pw) = password {
        cfg.password(pw);
    }
    if let Some(d) = dbname {
        cfg.dbname(d);
    }
    let mut premium = cfg.clone();
    premium.application_name(PREMIUM_APP);
    cfg.application_name(FREEMIUM_APP);
    [premium, cfg]
}

impl ProxyChild {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL, waited for.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the proxy (SIGTERM, then SIGKILL after its drain and a
    /// margin): whether it lived until now and stopped cleanly, and how.
    pub fn stop(&mut self) -> (bool, String) {
        let died = self.child.try_wait().ok().flatten();
        let how = stop_child(&mut self.child);
        let ok = died.is_none() && how == "exit status: 0";
        let detail = match died {
            Some(s) => format!("exited during the run ({s}); its log: {}", log_tail(&self.log)),
            None if ok => "served the whole run and stopped cleanly on SIGTERM".into(),
            None => format!("did not stop cleanly ({how}); its log: {}", log_tail(&self.log)),
        };
        (ok, detail)
    }
}

/// SIGTERM to the proxy process, up to 5 s for its drain, then SIGKILL;
/// how it ended.
fn stop_child(child: &mut Child) -> String {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    wait_or_kill(child, Duration::from_secs(5))
}

/// Makes `cmd` a child of the run: in its own process group, so a Ctrl-C
/// at the terminal reaches only the run, which stops its children in its
/// own order; and sent SIGTERM by the kernel if the run dies.
pub(super) fn child_of_run(cmd: &mut Command) {
    std::os::unix::process::CommandExt::process_group(cmd, 0);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM).map_err(std::io::Error::from)
        });
    }
}

/// Up to `within` for a child of the run to exit, then SIGKILL; how it
/// ended.
pub(super) fn wait_or_kill(child: &mut Child, within: Duration) -> String {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(s)) = child.try_wait() {
            return s.to_string();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    child.wait().map_or_else(|e| e.to_string(), |s| format!("killed after {} s ({s})", within.as_secs()))
}

/// The last lines of a proxy's stderr `log`, on one line.
pub fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

impl Drop for ProxyChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::run::args::default_run_args;

    #[test]
    fn the_proxy_takes_its_config_for_every_built_in_workload() {
        let cfg: tokio_postgres::Config = "host=127.0.0.1 port=5433 user=postgres".parse().unwrap();
        let cluster = Cluster::External(crate::cluster::external::ExternalCluster::unchecked(vec![cfg]));
        for name in ["paper", "analytics"] {
            let mut run = default_run_args();
            run.common.workload = Some(name.into());
            let plan = crate::commands::run::plan::Plan::new(run).unwrap();
            let text = config_text(&cluster, &plan.workload, "127.0.0.1:0".parse().unwrap(), None);
            let parsed = crate::proxy::config::ProxyConfig::parse(&text);
            assert!(parsed.is_ok(), "{name}: {parsed:?}\n{text}");
        }
    }

    /// Off loopback (generator containers on a remote engine) the proxy
    /// asks the run's password: its config names the users file, which
    /// holds the run's user, and without that file it would not start.
    #[test]
    fn off_loopback_the_proxy_asks_the_runs_password() {
        use crate::proxy::config::{parse_users, Auth, ProxyConfig};
        let cfg: tokio_postgres::Config = "host=10.0.0.2 port=5433 user=postgres".parse().unwrap();
        let cluster = Cluster::External(crate::cluster::external::ExternalCluster::unchecked(vec![cfg]));
        let plan = crate::commands::run::plan::Plan::new(default_run_args()).unwrap();
        let ip = std::net::IpAddr::from([10, 0, 0, 1]);
        let at = std::net::SocketAddr::new(ip, 6432);
        let open = ProxyConfig::parse(&config_text(&cluster, &plan.workload, at, None)).unwrap();
        assert!(open.auth_on(at).is_err(), "trust off loopback");
        let path = std::path::Path::new("/tmp/plbbench \"users\".txt");
        let text = config_text(&cluster, &plan.workload, at, Some(path));
        let asked = ProxyConfig::parse(&text).unwrap();
        assert_eq!(asked.users_file.as_deref(), Some(path), "{text}");
        assert_eq!(asked.auth_on(at), Ok(Auth::ScramSha256));
        let (a, b) = (run_password(), run_password());
        assert!(a.len() == 32 && a != b, "{a} {b}");
        let users = parse_users(&users_text("po\"stgres", &a)).unwrap();
        assert_eq!(users.keys().collect::<Vec<_>>(), ["po\"stgres"]);
        let [premium, freemium] = client_configs(at, "postgres", Some(&a), None);
        assert_eq!(premium.get_password(), Some(a.as_bytes()));
        assert_eq!(freemium.get_password(), Some(a.as_bytes()));
        assert_eq!(client_configs(at, "postgres", None, None)[0].get_password(), None);
    }

    #[test]
    fn a_dsn_quotes_its_values() {
        let mut c = tokio_postgres::Config::new();
        c.host("127.0.0.1").port(5433).user("o'k").password("p w").dbname("plb");
        let d = dsn(&c);
        assert_eq!(d, "host=127.0.0.1 port=5433 user='o\\'k' password='p w' dbname=plb");
        let list: toml::Value = toml::from_str(&format!("x = {}", toml_list(std::slice::from_ref(&d)))).unwrap();
        assert_eq!(list["x"][0].as_str(), Some(d.as_str()));
        let back: tokio_postgres::Config = d.parse().unwrap();
        assert_eq!(back.get_user(), Some("o'k"));
        assert_eq!(back.get_password(), Some(&b"p w"[..]));
    }
}
