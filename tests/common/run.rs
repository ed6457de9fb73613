//! The run tier's harness: a sandbox per real `plbbench run --cluster
//! local`, the child process and what the test sees of it (cgroups, replica
//! postmasters), cleanup checks against the process and cgroup tables, and a
//! reader of the run folder that checks the file contract and the
//! accounting independently of the crate's own types.
#![allow(dead_code)]

use nix::unistd::Pid;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use plbbench::cluster::local::LocalCluster;
use serde_json::Value;

/// Replicas of every run here (the default K).
pub const K: usize = 5;
/// The driver's drain after a first signal (`driver::DRAIN` in the crate).
pub const DRAIN_S: f64 = 2.0;
/// How long a run may take before the test kills it and fails: cluster up
/// (initdb, dataset scale 0.05, copy: ~5-20 s here) + at most 60 s of run +
/// teardown, with ample room for a slow, shared 2-core machine.
pub const RUN_LIMIT: Duration = Duration::from_secs(300);
/// A signalled run must be gone this soon (the task's promise).
pub const EXIT_AFTER_SIGNAL: Duration = Duration::from_secs(10);

/// One real run at a time: each drives five replicas with 0.3 cores of
/// quota each (1.5 cores) plus T=1000 clients; on a 2-core machine two at
/// once would starve each other and distort the timings under test.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

// ----- sandbox, child process, observation -----

/// A private directory tree for one run: `local` (PLBBENCH_STATE_DIR, never
/// created: no shared cluster there), `run` (the run's own cluster), `out`
/// (the run folder) and the child's stdout/stderr. On drop, whatever cluster
/// a failed run left is torn down; the tree is removed unless the test
/// failed (then it is kept for inspection and its path printed).
pub struct Sandbox {
    pub root: PathBuf,
}

impl Sandbox {
    pub fn new(tag: &str) -> Sandbox {
        let root = std::env::temp_dir().join(format!(
            "plbbench-run-{tag}-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&root).unwrap();
        Sandbox { root }
    }
    pub fn state_dir(&self) -> PathBuf {
        self.root.join("local")
    }
    pub fn run_dir(&self) -> PathBuf {
        self.root.join("run")
    }
    pub fn out(&self) -> PathBuf {
        self.root.join("out")
    }
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.root.join("stderr.txt")).unwrap_or_default()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if let Err(e) = LocalCluster::cleanup_stale(&self.run_dir()) {
            eprintln!("sandbox {}: cleanup: {e}", self.root.display());
        }
        if std::thread::panicking() {
            eprintln!("kept {} for inspection", self.root.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// What the test saw while the run was going.
#[derive(Debug, Default)]
pub struct Observed {
    /// Every cgroup directory the cluster's state file named.
    pub cgroups: BTreeSet<PathBuf>,
    /// When all K replica postmasters were first seen running.
    pub replicas_up: Option<Instant>,
    /// The cluster's generated password, read from its 0600 state file.
    pub password: Option<String>,
    /// The replicas' ports, from the same file.
    pub ports: Vec<u16>,
}

/// A `plbbench run` child and what was seen of it.
pub struct Running<'a> {
    pub sb: &'a Sandbox,
    pub child: Child,
    pub started: Instant,
    pub seen: Observed,
}

impl<'a> Running<'a> {
    /// Starts `plbbench run --cluster local --faults FAULTS` in `sb` with
    /// `args` added.
    pub fn start(sb: &'a Sandbox, faults: &str, args: &[&str]) -> Running<'a> {
        Running::start_on(sb, "local", faults, args)
    }

    /// [`Running::start`] with extra environment variables.
    pub fn start_env(sb: &'a Sandbox, faults: &str, args: &[&str], env: &[(&str, &str)]) -> Running<'a> {
        Running::start_with(sb, "local", faults, args, env)
    }

    /// [`Running::start`] on another backend (`docker`, `external`).
    pub fn start_on(sb: &'a Sandbox, cluster: &str, faults: &str, args: &[&str]) -> Running<'a> {
        Running::start_with(sb, cluster, faults, args, &[])
    }

    /// [`Running::start_on`] with extra environment variables (a remote
    /// engine's `DOCKER_HOST`, say).
    pub fn start_on_env(
        sb: &'a Sandbox,
        cluster: &str,
        faults: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Running<'a> {
        Running::start_with(sb, cluster, faults, args, env)
    }

    /// Runs get `--checks warn` unless `args` name `--checks`: most tests
    /// here are not about run validity, and their time-scaled or loaded
    /// runs fail the phase-length or time-out checks. They run the steady
    /// workload (`analytics`) with PLB unless `args` name `--workload` or
    /// `--strategy`: they test
    /// the machinery (faults, clean-up, CPU accounting) with CPU headroom
    /// known, not the paper's saturated regime.
    fn start_with(sb: &'a Sandbox, cluster: &str, faults: &str, args: &[&str], env: &[(&str, &str)]) -> Running<'a> {
        let file = |n: &str| Stdio::from(std::fs::File::create(sb.root.join(n)).unwrap());
        let checks: &[&str] = if args.contains(&"--checks") { &[] } else { &["--checks", "warn"] };
        let workload: &[&str] = if args.contains(&"--workload") { &[] } else { &["--workload", "analytics"] };
        let strategy: &[&str] = if args.contains(&"--strategy") { &[] } else { &["--strategy", "plb"] };
        let child = Command::new(env!("CARGO_BIN_EXE_plbbench"))
            .args(["run", "--cluster", cluster, "-q", "--faults"])
            .arg(faults)
            .arg("--out")
            .arg(sb.out())
            .args(checks)
            .args(workload)
            .args(strategy)
            .args(args)
            .env("PLBBENCH_STATE_DIR", sb.state_dir())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(file("stdout.txt"))
            .stderr(file("stderr.txt"))
            .spawn()
            .unwrap();
        Running { sb, child, started: Instant::now(), seen: Observed::default() }
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    /// Records the cgroups named in the state file and whether every
    /// replica's postmaster runs.
    pub fn observe(&mut self) {
        let run = self.sb.run_dir();
        if let Ok(text) = std::fs::read_to_string(run.join("cluster.json")) {
            if let Ok(v) = serde_json::from_str::<Value>(&text) {
                self.seen.cgroups.extend(cgroup_dirs(&v));
                if let Some(p) = v["password"].as_str() {
                    self.seen.password = Some(p.to_string());
                }
                let ports = v["replicas"].as_array().into_iter().flatten().filter_map(|r| r["port"].as_u64());
                self.seen.ports = ports.map(|p| p as u16).collect();
            }
        }
        if self.seen.replicas_up.is_none() {
            let datas: Vec<String> = (1..=K).map(|r| run.join(format!("r{r}/data")).display().to_string()).collect();
            let cmds: Vec<String> = processes().into_iter().map(|p| p.1).collect();
            if datas.iter().all(|d| cmds.iter().any(|c| c.contains(&format!("-D {d} ")))) {
                self.seen.replicas_up = Some(Instant::now());
            }
        }
    }

    /// Polls until `until` holds (`None`) or the child exits (its status);
    /// kills the child and fails once `limit` has passed since its start.
    pub fn poll(&mut self, limit: Duration, until: impl Fn(&Observed) -> bool) -> Option<ExitStatus> {
        loop {
            self.observe();
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            if until(&self.seen) {
                return None;
            }
            if self.started.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("plbbench run still going after {limit:?}; killed. stderr:\n{}", self.sb.stderr());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for the child to exit (bounded by `limit` from its start).
    pub fn finish(&mut self, limit: Duration) -> ExitStatus {
        self.poll(limit, |_| false).expect("exited")
    }
}

/// Cgroup directories in a `cluster.json` (`cgroups.parents` and every
/// replica's `cpu`, `cpuacct`, `freezer`).
pub fn cgroup_dirs(state: &Value) -> Vec<PathBuf> {
    let cg = &state["cgroups"];
    let mut out: Vec<PathBuf> = Vec::new();
    let mut push = |v: &Value| {
        if let Some(s) = v.as_str() {
            out.push(PathBuf::from(s));
        }
    };
    cg["parents"].as_array().into_iter().flatten().for_each(&mut push);
    for r in cg["replicas"].as_array().into_iter().flatten() {
        ["cpu", "cpuacct", "freezer"].iter().for_each(|k| push(&r[*k]));
    }
    out
}

/// `(pid, command line, working directory)` of every process but this one.
pub fn processes() -> Vec<(u32, String, PathBuf)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            let cwd = std::fs::read_link(e.path().join("cwd")).unwrap_or_default();
            (pid != std::process::id()).then_some((pid, cmd, cwd))
        })
        .collect()
}

/// Processes whose command line mentions `dir` or that run inside it (a
/// PostgreSQL backend's command line is `postgres: ...`, but its working
/// directory is its data directory).
pub fn processes_in(dir: &Path) -> Vec<(u32, String)> {
    let needle = dir.display().to_string();
    processes()
        .into_iter()
        .filter(|(_, cmd, cwd)| cmd.contains(&needle) || cwd.starts_with(dir))
        .map(|(p, c, _)| (p, c))
        .collect()
}

/// Directories named like `name` anywhere below `/sys/fs/cgroup/<hierarchy>/`
/// (plbbench creates `plbbench-<id>` below its own cgroup, so not only at
/// the top), down to a few levels.
pub fn cgroups_named(name: &str) -> Vec<PathBuf> {
    pub fn walk(dir: &Path, name: &str, depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                if e.file_name().to_string_lossy() == name {
                    out.push(e.path());
                } else if depth > 0 {
                    walk(&e.path(), name, depth - 1, out);
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(Path::new("/sys/fs/cgroup"), name, 4, &mut out);
    out
}

/// Check (c): no process in the sandbox, no cluster directory, and none of
/// the cgroups the run created, by path or by name in any hierarchy.
pub fn assert_cleaned_up(sb: &Sandbox, seen: &Observed, budget_enforced: bool) {
    let left = processes_in(&sb.root);
    assert!(left.is_empty(), "processes left running: {left:?}");
    assert!(!sb.run_dir().exists(), "{} left behind", sb.run_dir().display());
    assert!(!sb.state_dir().exists(), "{} was created", sb.state_dir().display());
    assert_eq!(!seen.cgroups.is_empty(), budget_enforced, "cgroups seen {:?} vs cpu_budget_enforced", seen.cgroups);
    let ids: BTreeSet<String> = seen
        .cgroups
        .iter()
        .flat_map(|p| p.iter().map(|c| c.to_string_lossy().into_owned()))
        .filter(|c| c.starts_with("plbbench-"))
        .collect();
    assert_eq!(ids.is_empty(), seen.cgroups.is_empty(), "cgroups not named plbbench-<id>: {:?}", seen.cgroups);
    for g in &seen.cgroups {
        assert!(!g.exists(), "cgroup {} left behind", g.display());
    }
    for id in &ids {
        assert!(cgroups_named(id).is_empty(), "cgroup {id} left behind: {:?}", cgroups_named(id));
    }
}

// ----- reading a run folder -----

pub type Row = HashMap<String, String>;

/// The run folder's files, parsed without the crate's own types.
pub struct Folder {
    pub summary: Value,
    pub phases: Vec<Row>,
    pub series: Vec<Row>,
    pub replicas: Vec<Row>,
    pub events: Vec<Row>,
    pub queries: Vec<Query>,
}

/// A row of queries.csv, times in seconds.
#[derive(Clone, Debug)]
pub struct Query {
    pub session: u64,
    pub class: String,
    pub replica: String,
    pub intended: f64,
    pub start: f64,
    pub end: f64,
    pub ok: bool,
    pub error: String,
}

/// Column lists of design.md §5 (a public contract: columns may only be
/// added at the end).
pub const CONTRACT: &[(&str, &[&str])] = &[
    (
        "phases.csv",
        &[
            "phase",
            "start_s",
            "end_s",
            "survivors",
            "class",
            "completed",
            "goodput_qps",
            "retention",
            "p50_ms",
            "p95_ms",
            "p99_ms",
            "inflation_p95",
            "sessions_ended",
            "lifetime_mean_s",
            "lifetime_p95_s",
            "errors",
            "aborted_sessions",
            "cpu_mean",
            "cpu_cv",
            "rejected",
            "queued_ms_p95",
            "login_p50_ms",
            "login_p95_ms",
            "login_p99_ms",
            "login_max_ms",
            "logins_waiting",
        ],
    ),
    (
        "timeseries.csv",
        &["t_s", "class", "completed", "goodput_qps", "p95_ms", "active_sessions", "logins_waiting", "login_oldest_ms"],
    ),
    ("replicas.csv", &["t_s", "replica", "up", "role", "cpu_fraction", "active_p", "active_f"]),
    ("events.csv", &["t_s", "kind", "replica", "detail"]),
    ("queries.csv", &["session", "class", "replica", "intended_us", "start_us", "end_us", "ok", "error"]),
];

pub fn read_csv(dir: &Path, name: &str) -> Vec<Row> {
    let path = dir.join(name);
    let mut r = csv::Reader::from_path(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    let want = CONTRACT.iter().find(|c| c.0 == name).expect("contract").1;
    assert!(header.len() >= want.len() && header[..want.len()] == *want, "{name} columns: {header:?}");
    r.deserialize().map(|row| row.unwrap()).collect()
}

/// Mean `cpu_fraction` of `replica` over the seconds in `[from, to)`.
pub fn cpu_mean(replicas: &[Row], replica: &str, from: f64, to: f64) -> f64 {
    let v = cpu_samples(replicas, replica, from, to);
    v.iter().sum::<f64>() / v.len() as f64
}

/// Median `cpu_fraction` of `replica` over the seconds in `[from, to)`.
pub fn cpu_median(replicas: &[Row], replica: &str, from: f64, to: f64) -> f64 {
    let mut v = cpu_samples(replicas, replica, from, to);
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn cpu_samples(replicas: &[Row], replica: &str, from: f64, to: f64) -> Vec<f64> {
    let v: Vec<f64> = replicas
        .iter()
        .filter(|r| r["replica"] == replica && (from..to).contains(&num(r, "t_s")) && !r["cpu_fraction"].is_empty())
        .map(|r| num(r, "cpu_fraction"))
        .collect();
    assert!(!v.is_empty(), "no CPU samples of {replica} in [{from}, {to})");
    v
}

pub fn num(row: &Row, col: &str) -> f64 {
    row[col].parse().unwrap_or_else(|_| panic!("{col}={:?} in {row:?}", row[col]))
}

impl Folder {
    /// Reads the folder; every file of the contract must be there and
    /// non-empty (`queries.csv` because every run here uses `--raw`).
    pub fn read(dir: &Path) -> Folder {
        for f in ["report.html", "summary.json", "config.toml", "phases.csv", "timeseries.csv", "replicas.csv"] {
            let len = std::fs::metadata(dir.join(f)).map(|m| m.len()).unwrap_or(0);
            assert!(len > 0, "{f} missing or empty in {}", dir.display());
        }
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        assert!(html.contains("<svg") && html.trim_end().ends_with("</html>"), "report.html is not a whole page");
        toml::from_str::<toml::Value>(&std::fs::read_to_string(dir.join("config.toml")).unwrap()).expect("config.toml");
        let summary: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
        let us = |r: &Row, c: &str| num(r, c) / 1e6;
        let queries = read_csv(dir, "queries.csv")
            .iter()
            .map(|r| Query {
                session: r["session"].parse().unwrap(),
                class: r["class"].clone(),
                replica: r["replica"].clone(),
                intended: us(r, "intended_us"),
                start: us(r, "start_us"),
                end: us(r, "end_us"),
                ok: r["ok"].parse().unwrap(),
                error: r["error"].clone(),
            })
            .collect();
        Folder {
            summary,
            phases: read_csv(dir, "phases.csv"),
            series: read_csv(dir, "timeseries.csv"),
            replicas: read_csv(dir, "replicas.csv"),
            events: read_csv(dir, "events.csv"),
            queries,
        }
    }

    pub fn account(&self, class: &str) -> &Value {
        let a = self.summary["accounting"].as_array().expect("accounting");
        a.iter().find(|x| x["class"] == class).unwrap_or_else(|| panic!("no accounting for {class}"))
    }

    /// `(t_s, detail)` of events of `kind` on `replica` (`""` for none).
    pub fn events_of(&self, kind: &str, replica: &str) -> Vec<(f64, String)> {
        self.events
            .iter()
            .filter(|e| e["kind"] == kind && e["replica"] == replica)
            .map(|e| (num(e, "t_s"), e["detail"].clone()))
            .collect()
    }
}

/// Figures that must agree across files, per class: completed queries in
/// phases.csv = timeseries.csv = ok rows of queries.csv, errors = failed
/// rows, and sessions started = completed + aborted + in flight.
pub fn assert_consistent(f: &Folder) {
    for class in ["P", "F"] {
        let sum = |rows: &[Row], col: &str| -> u64 {
            rows.iter().filter(|r| r["class"] == class).map(|r| r[col].parse::<u64>().unwrap()).sum()
        };
        let completed = sum(&f.phases, "completed");
        assert_eq!(completed, sum(&f.series, "completed"), "class {class}: phases.csv vs timeseries.csv");
        let ok = f.queries.iter().filter(|q| q.class == class && q.ok).count() as u64;
        let failed = f.queries.iter().filter(|q| q.class == class && !q.ok).count() as u64;
        assert_eq!((completed, sum(&f.phases, "errors")), (ok, failed), "class {class}: phases.csv vs queries.csv");
        let a = f.account(class);
        let started = a["sessions_started"].as_u64().unwrap();
        let in_flight = a["sessions_in_flight"].as_u64().unwrap();
        let (ended, aborted) = (sum(&f.phases, "sessions_ended"), sum(&f.phases, "aborted_sessions"));
        assert_eq!(started, ended + aborted + in_flight, "class {class}: started vs ended + aborted + in flight");
        let abort_total: u64 = a["aborts"].as_array().unwrap().iter().map(|x| x[1].as_u64().unwrap()).sum();
        assert_eq!(abort_total, aborted, "class {class}: summary aborts vs phases.csv");
    }
}

/// Per session: one class, one replica (routing is non-migratory), queries
/// one after another (a query recorded twice would overlap itself), each
/// sent no earlier than it was due, and `ok` exactly when `error` is empty.
pub fn assert_sessions_well_formed(queries: &[Query]) {
    let mut by_session: BTreeMap<u64, Vec<&Query>> = BTreeMap::new();
    for q in queries {
        by_session.entry(q.session).or_default().push(q);
        assert_eq!(q.ok, q.error.is_empty(), "{q:?}");
        assert!(q.intended <= q.start + 1e-6 && q.start <= q.end, "times out of order: {q:?}");
    }
    for (s, mut qs) in by_session {
        qs.sort_by(|a, b| a.start.total_cmp(&b.start));
        assert!(qs.iter().all(|q| q.class == qs[0].class && q.replica == qs[0].replica), "session {s} moved: {qs:?}");
        for w in qs.windows(2) {
            assert!(w[1].start >= w[0].end - 1e-6, "session {s}: overlapping or repeated queries {:?}", w);
        }
        assert!(qs[..qs.len() - 1].iter().all(|q| q.ok), "session {s} went on after a failed query: {qs:?}");
    }
}

/// Local addresses (`ip:port`, hex as the kernel writes them) of the
/// listening TCP sockets on `port`, from /proc/net/tcp and tcp6.
pub fn listeners(port: u16) -> Vec<String> {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    // st 0A = LISTEN
                    (cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A").then(|| cols[1].to_string())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}
