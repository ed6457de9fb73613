//! Cluster tier (design.md §8): the local backend against real PostgreSQL.
//! Brings up tiny clusters in temporary state directories and checks
//! provisioning, identical data, every fault primitive, CPU accounting and
//! that nothing (process, cgroup, file) outlives `down` or a dropped
//! cluster. Needs PostgreSQL's server binaries, found like the backend
//! finds them (scripts/install-postgres.sh installs them); set
//! `PLBBENCH_SKIP_PG=1` to skip on a machine without them.

mod common;
use common::have_postgres;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use plbbench::cluster::dataset::CHECKSUM_SQL;
use plbbench::cluster::local::{LocalCluster, LocalError, LocalOptions};

/// A fresh, not yet existing directory under the system temp dir.
fn temp_state_dir(tag: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("plbbench-test-{tag}-{}-{:08x}", std::process::id(), rand::random::<u32>()));
    assert!(!dir.exists());
    dir
}

fn opts(dir: &Path, replicas: usize, scale: f64) -> LocalOptions {
    LocalOptions {
        replicas,
        cpus: 0.5,
        state_dir: dir.to_path_buf(),
        scale,
        seed: 7,
        base_port: 0,
        max_connections: 20,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// [`common::query`] with a DSN.
async fn query(dsn: &str, sql: &str, limit: Duration) -> Result<String, String> {
    common::query(&dsn.parse().map_err(|e: tokio_postgres::Error| e.to_string())?, sql, limit).await
}

/// Processes whose command line mentions `dir`, found independently of
/// the backend's own helpers.
fn processes_mentioning(dir: &Path) -> Vec<(u32, String)> {
    let needle = dir.to_string_lossy().into_owned();
    common::run::processes()
        .into_iter()
        .filter(|(_, cmd, _)| cmd.contains(&needle))
        .map(|(p, cmd, _)| (p, cmd))
        .collect()
}

/// The state file is 0600, replica directories 0700, and no file but the
/// state file holds the password.
fn assert_private(dir: &Path, dsn: &str) {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.join("cluster.json")), 0o600);
    assert_eq!(mode(&dir.join("r1")), 0o700);
    assert_eq!(mode(&dir.join("r1/data")), 0o700);
    let password = dsn.split("password=").nth(1).unwrap().split(' ').next().unwrap();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else if e.file_type().unwrap().is_file() && p != dir.join("cluster.json") {
                let bytes = std::fs::read(&p).unwrap();
                assert!(
                    !bytes.windows(password.len()).any(|w| w == password.as_bytes()),
                    "password in {}",
                    p.display()
                );
            }
        }
    }
}

fn assert_all_gone(dir: &Path, cgroups: &[PathBuf]) {
    assert!(processes_mentioning(dir).is_empty(), "left running: {:?}", processes_mentioning(dir));
    assert!(!dir.exists(), "state dir {} left behind", dir.display());
    for g in cgroups {
        assert!(!g.exists(), "cgroup {} left behind", g.display());
    }
}

#[test]
fn lifecycle_faults_and_cpu_accounting() {
    if !have_postgres() {
        return;
    }
    let dir = temp_state_dir("faults");
    let t = Instant::now();
    let mut c = LocalCluster::up(&opts(&dir, 3, 0.002)).expect("up");
    eprintln!("up (3 replicas, scale 0.002) took {:.1}s; {}", t.elapsed().as_secs_f64(), c.pg_version());
    let cgroups = c.cgroup_dirs();
    assert_eq!(c.replicas(), 3);
    assert!(c.pg_version().starts_with("PostgreSQL "), "{}", c.pg_version());
    assert!(!format!("{c:?}").contains(c.dsn(0).split("password=").nth(1).unwrap().split(' ').next().unwrap()));
    assert_eq!(c.cpu_budget_enforced(), !cgroups.is_empty());
    assert!(cgroups.iter().all(|g| g.is_dir()));
    let st = c.status();
    assert!(st.iter().all(|s| s.healthy && s.pid.is_some() && !s.paused), "{st:?}");
    assert_private(&dir, &c.dsn(0));

    let rt = runtime();
    let long = Duration::from_secs(30);
    let sums: Vec<String> = (0..3).map(|r| rt.block_on(query(&c.dsn(r), CHECKSUM_SQL, long)).unwrap()).collect();
    assert!(sums[0].starts_with("orders=3000:"), "{}", sums[0]);
    assert!(sums.iter().all(|s| *s == sums[0]), "replicas differ: {sums:?}");
    let bad = c.dsn(0).replace("password=", "password=x");
    assert!(rt.block_on(query(&bad, "SELECT 1", long)).is_err(), "wrong password accepted");

    // Down: connections are refused, quickly.
    c.kill(1).expect("kill");
    let t = Instant::now();
    let e = rt.block_on(query(&c.dsn(1), "SELECT 1", Duration::from_secs(2))).unwrap_err();
    assert!(e != "timeout" && t.elapsed() < Duration::from_secs(2), "killed replica: {e}");
    assert!(matches!(c.kill(1), Err(LocalError::NotRunning(_))));
    let st = c.status();
    assert!(!st[1].healthy && st[1].pid.is_none() && st[0].healthy && st[2].healthy, "{st:?}");

    // Rejoin: same port, same data.
    let t = Instant::now();
    c.restart(1).expect("restart");
    eprintln!("restart took {:.2}s", t.elapsed().as_secs_f64());
    assert_eq!(rt.block_on(query(&c.dsn(1), CHECKSUM_SQL, long)).unwrap(), sums[0]);
    assert!(matches!(c.restart(1), Err(LocalError::StillRunning(_))));

    // Pause: new and open sessions stall; Resume: both work again.
    let open = rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&c.dsn(2), tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client
    });
    c.pause(2).expect("pause");
    assert_eq!(rt.block_on(query(&c.dsn(2), "SELECT 1", Duration::from_millis(1500))).unwrap_err(), "timeout");
    let stalled =
        rt.block_on(async { tokio::time::timeout(Duration::from_millis(1500), open.simple_query("SELECT 1")).await });
    assert!(stalled.is_err(), "an open session answered while paused");
    assert!(c.status()[2].paused && !c.status()[2].healthy);
    c.resume(2).expect("resume");
    assert_eq!(rt.block_on(query(&c.dsn(2), "SELECT 1", Duration::from_secs(5))).unwrap(), "1");
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(5), open.simple_query("SELECT 1")).await })
        .unwrap()
        .unwrap();
    drop(open);

    // CPU accounting grows with work; with cgroups the quota holds. Uses
    // the restarted replica: it must be back in its cgroup.
    c.set_cpus(1, 0.25).expect("set_cpus");
    let before = c.cpu_seconds(1).expect("cpu seconds");
    let t = Instant::now();
    let heavy = "SELECT sum(hashint8(i)) FROM generate_series(1, 6000000) AS i";
    rt.block_on(query(&c.dsn(1), heavy, long)).unwrap();
    let wall = t.elapsed().as_secs_f64();
    let used = c.cpu_seconds(1).unwrap() - before;
    eprintln!("heavy query: {used:.2} cpu-s in {wall:.2}s wall (quota 0.25, enforced {})", c.cpu_budget_enforced());
    assert!(used > 0.1, "cpu_seconds grew by {used}");
    if c.cpu_budget_enforced() {
        assert!(used / wall < 0.25 * 1.3 + 0.05, "quota not enforced: {used} cpu-s in {wall}s");
    }
    assert!(c.cpu_seconds(2).is_some() && c.cpu_seconds(9).is_none());
    assert!(matches!(c.kill(9), Err(LocalError::NoSuchReplica { .. })));

    // A paused replica must not block teardown.
    c.pause(0).unwrap();
    let t = Instant::now();
    c.down().expect("down");
    eprintln!("down took {:.2}s", t.elapsed().as_secs_f64());
    assert_all_gone(&dir, &cgroups);
}

#[test]
fn persistent_cluster_is_reloaded_and_dropped_one_is_removed() {
    if !have_postgres() {
        return;
    }
    let dir = temp_state_dir("persist");
    let mut c = LocalCluster::up(&opts(&dir, 1, 0.001)).expect("up");
    c.set_persistent(true).unwrap();
    let (dsn, pid, cgroups) = (c.dsn(0), c.pid(0).unwrap(), c.cgroup_dirs());
    drop(c);
    assert!(Path::new(&format!("/proc/{pid}")).exists(), "persistent cluster stopped on drop");
    assert!(matches!(LocalCluster::up(&opts(&dir, 1, 0.001)), Err(LocalError::AlreadyRunning(_))));
    let c = LocalCluster::load(&dir).unwrap().expect("reloaded");
    assert!(c.is_persistent());
    assert_eq!(c.dsn(0), dsn);
    assert!(c.status()[0].healthy);
    let rt = runtime();
    assert_eq!(rt.block_on(query(&dsn, "SELECT count(*) FROM orders", Duration::from_secs(10))).unwrap(), "1500");
    c.down().expect("down");
    assert_all_gone(&dir, &cgroups);
    assert!(LocalCluster::load(&dir).unwrap().is_none());

    // Not persistent: dropping tears it down.
    let c = LocalCluster::up(&opts(&dir, 1, 0.001)).expect("second up");
    let cgroups = c.cgroup_dirs();
    drop(c);
    assert_all_gone(&dir, &cgroups);
}

#[test]
fn foreign_state_dir_is_refused_and_kept() {
    if !have_postgres() {
        return;
    }
    let dir = temp_state_dir("foreign");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("precious.txt"), "keep me").unwrap();
    let e = LocalCluster::up(&opts(&dir, 1, 0.001)).unwrap_err();
    assert!(matches!(e, LocalError::StateDirNotOurs(_)), "{e}");
    assert_eq!(std::fs::read_to_string(dir.join("precious.txt")).unwrap(), "keep me");
    assert!(matches!(
        LocalCluster::up(&LocalOptions { replicas: 0, ..opts(&dir, 1, 0.001) }),
        Err(LocalError::InvalidOptions(_))
    ));
    std::fs::remove_dir_all(&dir).unwrap();

    // A taken port fails before anything is created.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let e = LocalCluster::up(&LocalOptions { base_port: port, ..opts(&dir, 1, 0.001) }).unwrap_err();
    assert!(matches!(e, LocalError::PortInUse { .. }), "{e}");
    assert!(!dir.exists());
}

/// Run by `orphan_of_a_crashed_run_is_removed` in a child process: brings a
/// cluster up for a "run" and dies without any cleanup.
#[test]
#[ignore = "helper, run by orphan_of_a_crashed_run_is_removed"]
fn orphan_helper() {
    let Some(dir) = std::env::var_os("PLBBENCH_ORPHAN_DIR") else { return };
    let c = LocalCluster::up(&opts(Path::new(&dir), 1, 0.001)).expect("up in helper");
    std::mem::forget(c);
    std::process::abort();
}

#[test]
fn orphan_of_a_crashed_run_is_removed() {
    if !have_postgres() {
        return;
    }
    let dir = temp_state_dir("orphan");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "orphan_helper", "--ignored", "--nocapture", "--test-threads", "1"])
        .env("PLBBENCH_ORPHAN_DIR", &dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "helper should have aborted");
    assert!(!processes_mentioning(&dir).is_empty(), "helper's server should still run");
    assert!(LocalCluster::load(&dir).unwrap().is_none(), "an orphan is not a running cluster");
    // The next `up` in that directory removes it and starts afresh.
    let c = LocalCluster::up(&opts(&dir, 1, 0.001)).expect("up over an orphan");
    let pid = c.pid(0).unwrap();
    assert_eq!(processes_mentioning(&dir).iter().filter(|(p, _)| *p as i32 != pid).count(), 0);
    let cgroups = c.cgroup_dirs();
    c.down().unwrap();
    assert_all_gone(&dir, &cgroups);
}

/// Every plbbench command first looks for orphans; finding a cluster whose
/// owner lives (a run going on beside it) must leave it serving. Before
/// 2026-12-03 the state read for the check tore the cluster down when
/// dropped, so any second plbbench (`cluster status`, a `run --via-proxy`
/// child) killed a running run's replicas.
#[test]
fn a_live_owners_cluster_survives_the_orphan_check() {
    let dir = temp_state_dir("live-owner");
    let c = LocalCluster::up(&opts(&dir, 1, 0.001)).expect("up");
    assert!(!LocalCluster::reap_orphan(&dir).expect("orphan check"), "the owner (this test) lives");
    let cfg: tokio_postgres::Config = c.dsn(0).parse().unwrap();
    let rt = runtime();
    rt.block_on(async {
        let (client, conn) = cfg.connect(tokio_postgres::NoTls).await.expect("the cluster still serves");
        tokio::spawn(conn);
        client.simple_query("SELECT 1").await.expect("a query after the orphan check");
    });
    let cgroups = c.cgroup_dirs();
    c.down().expect("down");
    assert_all_gone(&dir, &cgroups);
}

/// A real server at `max_connections` turns the next client away with
/// SQLSTATE 53300, which the driver classifies as `too many clients` (a
/// full, live server), and a closed port as a refusal.
#[test]
fn a_full_server_answers_too_many_clients_and_a_dead_one_refuses() {
    use plbbench::core::model::ConnectError;
    if !have_postgres() {
        return;
    }
    let dir = temp_state_dir("full");
    let c = LocalCluster::up(&LocalOptions { max_connections: 5, ..opts(&dir, 1, 0.001) }).expect("up");
    let cfg: tokio_postgres::Config = c.dsn(0).parse().unwrap();
    let rt = runtime();
    let why = rt.block_on(async {
        let mut open = Vec::new();
        for _ in 0..10 {
            match cfg.connect(tokio_postgres::NoTls).await {
                Ok((client, conn)) => {
                    tokio::spawn(conn);
                    open.push(client);
                }
                Err(e) => return (open.len(), ConnectError::of_sqlstate(e.code().map(|c| c.code())), e.to_string()),
            }
        }
        panic!("10 connections to a server with max_connections 5");
    });
    assert!((2..=5).contains(&why.0), "turned away after {} connections", why.0);
    assert_eq!(why.1, ConnectError::Full, "{}", why.2);
    let cgroups = c.cgroup_dirs();
    c.down().expect("down");
    assert_all_gone(&dir, &cgroups);
    let gone = rt.block_on(cfg.connect(tokio_postgres::NoTls)).map(|_| ()).unwrap_err();
    assert_eq!(ConnectError::of_sqlstate(gone.code().map(|c| c.code())), ConnectError::Refused, "{gone}");
}
