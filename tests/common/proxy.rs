//! The proxy tier's harness: a local cluster from `plbbench cluster up` in
//! a private state directory, `plbbench proxy` in front of it, psql and
//! pgbench through it, its metrics scraped, and raw protocol bytes for
//! what no well-behaved client sends.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_plbbench");
pub const PASSWORD: &str = "wonderland";

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Runs `cmd` to its end or kills it after `limit` (then fails).
pub fn run_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let began = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if began.elapsed() > limit {
            let _ = child.kill();
            panic!("{cmd:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A cluster from `plbbench cluster up` in a private state directory,
/// taken down on drop.
pub struct Cluster {
    pub root: PathBuf,
    pub ports: Vec<u16>,
    pub password: String,
}

impl Cluster {
    pub fn up() -> Cluster {
        Cluster::up_with(5)
    }

    pub fn up_with(k: usize) -> Cluster {
        let root =
            std::env::temp_dir().join(format!("plbbench-proxy-{}-{:08x}", std::process::id(), rand::random::<u32>()));
        std::fs::create_dir_all(&root).unwrap();
        let mut c = Cluster { root, ports: Vec::new(), password: String::new() };
        let out = run_within(c.plbbench(&["cluster", "up", "--replicas", &k.to_string()]), Duration::from_secs(180));
        assert!(out.status.success(), "cluster up: {}", text(&out.stderr));
        for line in text(&out.stdout).lines() {
            let field = |k: &str| line.split_whitespace().find_map(|w| w.strip_prefix(k)).map(str::to_string);
            if let (Some(p), Some(pw)) = (field("port="), field("password=")) {
                c.ports.push(p.parse().unwrap());
                c.password = pw;
            }
        }
        assert_eq!(c.ports.len(), k, "{k} DSNs printed: {}", text(&out.stdout));
        c
    }

    pub fn plbbench(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args).env("PLBBENCH_STATE_DIR", self.root.join("local"));
        cmd
    }

    pub fn fault(&self, fault: &str, replica: &str) {
        let out = run_within(self.plbbench(&["cluster", "fault", fault, replica]), Duration::from_secs(60));
        assert!(out.status.success(), "cluster fault {fault} {replica}: {}", text(&out.stderr));
    }

    /// psql straight to replica `r` (0-based) as the cluster's user.
    pub fn psql(&self, r: usize, sql: &str) -> String {
        let mut cmd = Command::new("psql");
        cmd.args(["-XAtq", "-h", "127.0.0.1", "-p", &self.ports[r].to_string(), "-U", "plbbench", "-d", "plbbench"])
            .args(["-c", sql])
            .env("PGPASSWORD", &self.password)
            .env("PGCONNECT_TIMEOUT", "5");
        let out = run_within(cmd, Duration::from_secs(30));
        assert!(out.status.success(), "psql on r{}: {sql}: {}", r + 1, text(&out.stderr));
        text(&out.stdout).trim().to_string()
    }

    /// Per replica (r1..r5, None when down): its sessions whose
    /// application_name starts with premium / free (not the proxy's kept
    /// connections, idle since their `DISCARD ALL`).
    pub fn classes_seen(&self, up: &[bool]) -> Vec<Option<(u32, u32)>> {
        (0..5)
            .map(|r| {
                up[r].then(|| {
                    let count = |p: &str| {
                        self.psql(
                            r,
                            &format!(
                                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE '{p}%' \
                                 AND query IS DISTINCT FROM 'DISCARD ALL'"
                            ),
                        )
                        .parse()
                        .unwrap()
                    };
                    (count("premium"), count("free"))
                })
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = run_within(self.plbbench(&["cluster", "down"]), Duration::from_secs(60));
        if std::thread::panicking() {
            eprintln!("kept for inspection: {}", self.root.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// pgbench through the proxy at `dsn` as `app`: a new connection per
/// transaction (-C, the login path PLB routes on), `SELECT 1` at 20 a
/// second over 2 clients, for `secs` seconds; its output piped.
pub fn select1_bench(c: &Cluster, dsn: &str, app: &str, secs: u64) -> Child {
    let script = c.root.join("select1.sql");
    std::fs::write(&script, "SELECT 1;\n").unwrap();
    Command::new("pgbench")
        .args(["-n", "-C", "-c", "2", "-R", "20", "-T", &secs.to_string(), "-f", script.to_str().unwrap()])
        .arg(dsn)
        .env("PGAPPNAME", app)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The proxy process, killed on drop if still running.
pub struct Proxy {
    pub child: Child,
    /// Its stdout, kept open.
    pub _out: BufReader<std::process::ChildStdout>,
    pub port: u16,
    pub metrics: u16,
    pub stderr: PathBuf,
}

impl Proxy {
    /// The proxy with the config file `config` (users with passwords),
    /// `--T 40 --theta 50`, probes every 500 ms.
    pub fn start(c: &Cluster, config: &Path) -> Proxy {
        let args = ["--config", config.to_str().unwrap(), "--T", "40", "--theta", "50", "--probe-interval-ms", "500"];
        Proxy::spawn(c, &args).1
    }

    /// The proxy with no config file (trust on loopback, the class from
    /// application_name) and `args`; also the first line it printed.
    pub fn trust(c: &Cluster, args: &[&str]) -> (String, Proxy) {
        Proxy::spawn(c, args)
    }

    fn spawn(c: &Cluster, args: &[&str]) -> (String, Proxy) {
        let (port, metrics) = (free_port(), free_port());
        let stderr = c.root.join(format!("proxy-{port}.stderr"));
        let mut cmd = c.plbbench(&["proxy"]);
        cmd.args(args)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let mut child = cmd.spawn().unwrap();
        let mut first = String::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        out.read_line(&mut first).unwrap();
        assert!(first.contains(&format!("listening on 127.0.0.1:{port}")), "proxy said {first:?}");
        (first, Proxy { child, _out: out, port, metrics, stderr })
    }

    pub fn dsn(&self, user: &str) -> String {
        format!("host=127.0.0.1 port={} user={user} dbname=plbbench connect_timeout=10", self.port)
    }

    /// psql through the proxy; (success, stdout, stderr).
    pub fn psql(&self, user: &str, password: &str, app: &str, sql: &str) -> (bool, String, String) {
        let mut cmd = Command::new("psql");
        cmd.args(["-XAtq", &self.dsn(user), "-c", sql]).env("PGPASSWORD", password).env("PGAPPNAME", app);
        let out = run_within(cmd, Duration::from_secs(60));
        (out.status.success(), text(&out.stdout).trim().to_string(), text(&out.stderr))
    }

    pub fn pgbench(&self, app: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("pgbench");
        cmd.args(args).arg(self.dsn("alice")).env("PGPASSWORD", PASSWORD).env("PGAPPNAME", app);
        cmd
    }

    /// The metrics endpoint: metric line (name with labels) -> value.
    pub fn scrape(&self) -> BTreeMap<String, f64> {
        scrape(self.metrics)
    }

    /// Each replica's role (P, M, F) per the proxy's metrics.
    pub fn roles(&self) -> Vec<char> {
        roles_in(&self.scrape())
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `bytes` on a fresh connection to the proxy and reads everything
/// it answers until it closes (failing after 15 s).
pub fn exchange(port: u16, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("the proxy closes the connection after its answer");
    out
}

/// The SQLSTATE of the ErrorResponse in `reply` (walked message by
/// message), checked to be FATAL and to be the last message.
pub fn sqlstate(reply: &[u8]) -> String {
    let mut rest = reply;
    while rest.len() >= 5 {
        let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
        let (msg, next) = rest.split_at(1 + len);
        if msg[0] == b'E' {
            assert!(next.is_empty(), "messages after the error: {reply:?}");
            let field = |tag: u8| {
                msg[5..].split(|&b| b == 0).find(|f| f.first() == Some(&tag)).map(|f| text(&f[1..])).unwrap_or_default()
            };
            assert_eq!(field(b'S'), "FATAL", "{reply:?}");
            return field(b'C');
        }
        rest = next;
    }
    panic!("no ErrorResponse in {reply:?}")
}

pub fn packet(code: u32, body: &[u8]) -> Vec<u8> {
    let mut p = ((8 + body.len()) as u32).to_be_bytes().to_vec();
    p.extend(code.to_be_bytes());
    p.extend(body);
    p
}

/// A proxy's metrics endpoint on `port`: metric line (name with labels)
/// -> value.
pub fn scrape(port: u16) -> BTreeMap<String, f64> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body.lines()
        .filter(|l| l.starts_with("plbbench_"))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(k, v)| Some((k.to_string(), v.parse().ok()?))))
        .collect()
}

/// Each replica's role (P, M, F; `-` for none) in scraped metrics.
pub fn roles_in(m: &BTreeMap<String, f64>) -> Vec<char> {
    (1..=5)
        .map(|r| {
            ['P', 'M', 'F']
                .into_iter()
                .find(|role| m.get(&format!("plbbench_router_role{{replica=\"r{r}\",role=\"{role}\"}}")) == Some(&1.0))
                .unwrap_or('-')
        })
        .collect()
}

/// Starts a proxy command with its stdout piped and its stderr to
/// `stderr`: the child, its stdout, and the first line it said.
pub fn spawn_proxy(mut cmd: Command, stderr: &Path) -> (Child, BufReader<ChildStdout>, String) {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(std::fs::File::create(stderr).unwrap());
    let mut child = cmd.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    (child, out, first)
}
