//! A tier of `plbbench proxy` processes (docs/proxy.md, "A tier of
//! proxies") on a real five-replica local cluster: three members elect
//! one leader through the cluster's advisory lock; sessions through every
//! member land on the leader's roles, and the followers' open sessions are
//! counted in the leader's router; a cancel request sent to one member
//! reaches the session another holds; bad membership is refused with one
//! line (exit 2); the leader SIGKILLed, a follower leads within seconds at
//! the next generation, with the roles it followed and the surviving
//! follower's sessions counted, and sessions open through the followers
//! live on. Needs PostgreSQL (scripts/install-postgres.sh).

mod common;
use common::have_postgres;
use common::proxy::{self, free_port, run_within, text, Cluster};
use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The two tests each run a cluster and three members: one at a time, so
/// that neither's timings are the other's load.
static SERIAL: Mutex<()> = Mutex::new(());

/// One member: `plbbench proxy --tier t1 --peer-id N`, trust on loopback,
/// killed on drop.
struct Member {
    child: Child,
    _out: BufReader<std::process::ChildStdout>,
    peer: u8,
    port: u16,
    metrics: u16,
    stderr: PathBuf,
}

/// The routing flags every member shares (a member with others is refused).
const FLAGS: [&str; 6] = ["--T", "40", "--theta", "4", "--probe-interval-ms", "500"];

impl Member {
    fn start(c: &Cluster, peer: u8, extra: &[&str]) -> Member {
        let (port, metrics) = (free_port(), free_port());
        let stderr = c.root.join(format!("member{peer}.stderr"));
        let mut cmd = c.plbbench(&["proxy", "--tier", "t1", "--peer-id", &peer.to_string()]);
        cmd.args(FLAGS).args(extra).args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--metrics-addr",
            &format!("127.0.0.1:{metrics}"),
        ]);
        let (child, out, first) = proxy::spawn_proxy(cmd, &stderr);
        assert!(first.contains(&format!("listening on 127.0.0.1:{port}")), "member {peer} said {first:?}");
        Member { child, _out: out, peer, port, metrics, stderr }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits up to `limit` for `what` in its stderr.
    fn wait_for(&self, what: &str, limit: Duration) -> bool {
        let began = Instant::now();
        while began.elapsed() < limit {
            if self.stderr().contains(what) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn leads(&self, generation: u64) -> String {
        format!("tier t1: peer {} leads, generation {generation} ", self.peer)
    }

    fn dsn(&self, app: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user=plbbench dbname=plbbench application_name={app} connect_timeout=10",
            self.port
        )
    }

    /// The metrics endpoint: metric line -> value.
    fn scrape(&self) -> BTreeMap<String, f64> {
        proxy::scrape(self.metrics)
    }

    /// Each replica's role in its router.
    fn roles(&self) -> Vec<char> {
        proxy::roles_in(&self.scrape())
    }

    /// Open sessions `[premium, freemium]` summed over the replicas in its router.
    fn active(&self) -> [f64; 2] {
        let m = self.scrape();
        let sum = |class: &str| {
            (1..=5)
                .filter_map(|r| {
                    m.get(&format!("plbbench_router_active_sessions{{replica=\"r{r}\",class=\"{class}\"}}"))
                })
                .sum()
        };
        [sum("premium"), sum("freemium")]
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A session through `m` as `app`, kept open; and the port of the replica
/// it landed on.
fn open(rt: &tokio::runtime::Runtime, m: &Member, app: &str) -> (tokio_postgres::Client, u16) {
    let cfg: tokio_postgres::Config = m.dsn(app).parse().unwrap();
    let (client, conn) =
        rt.block_on(cfg.connect(tokio_postgres::NoTls)).unwrap_or_else(|e| panic!("{app} via {}: {e}", m.peer));
    rt.spawn(conn);
    let port = server_port(rt, &client);
    (client, port)
}

fn server_port(rt: &tokio::runtime::Runtime, client: &tokio_postgres::Client) -> u16 {
    let rows = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), client.simple_query("SELECT inet_server_port()")).await
    });
    let rows = rows.expect("an answer within 20 s").expect("the query");
    rows.iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(|v| v.parse().unwrap()),
            _ => None,
        })
        .expect("a row")
}

/// The role of the replica on `port`.
fn role_of(c: &Cluster, roles: &[char], port: u16) -> char {
    roles[c.ports.iter().position(|&p| p == port).expect("a replica's port")]
}

/// Waits until `cond` holds (checked every 100 ms), up to `limit`.
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let began = Instant::now();
    while began.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Every "leads, generation N" line of every member: no generation led twice.
fn generations(members: &[&Member]) -> Vec<u64> {
    let mut gens: Vec<u64> = members
        .iter()
        .flat_map(|m| {
            m.stderr()
                .lines()
                .filter_map(|l| l.split("leads, generation ").nth(1)?.split(' ').next()?.parse().ok())
                .collect::<Vec<u64>>()
        })
        .collect();
    gens.sort();
    gens
}

#[test]
fn a_tier_of_three_proxies() {
    if !have_postgres() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::up();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let a = Member::start(&c, 1, &[]);
    assert!(a.wait_for(&a.leads(1), Duration::from_secs(20)), "the first member leads: {}", a.stderr());
    let b = Member::start(&c, 2, &[]);
    let d = Member::start(&c, 3, &[]);
    for m in [&b, &d] {
        let follows = format!("peer {} follows peer 1 (generation 1)", m.peer);
        assert!(m.wait_for(&follows, Duration::from_secs(20)), "member {}: {}", m.peer, m.stderr());
    }
    assert_eq!(generations(&[&a, &b, &d]), [1], "one leader");

    // Sessions through every member land on the leader's roles (theta 4:
    // two Premium sessions per member fit r1 and r2).
    let roles = a.roles();
    assert_eq!(roles, ['P', 'P', 'M', 'F', 'F'], "the reference split");
    let mut held = Vec::new();
    for m in [&a, &b, &d] {
        for (app, want) in [("premium-1", 'P'), ("premium-2", 'P'), ("free-1", 'F')] {
            let (client, port) = open(&rt, m, app);
            assert_eq!(role_of(&c, &roles, port), want, "{app} via member {} on port {port}", m.peer);
            held.push((m.peer, client));
        }
    }
    assert!(
        eventually(Duration::from_secs(5), || a.active() == [6.0, 3.0]),
        "the leader counts every member's sessions: {:?}",
        a.active()
    );

    cancel_through_another_member(&rt, &b, &d);
    refusals(&c);

    // The leader dies: a follower leads within seconds, at generation 2,
    // from the roles it followed, with the other follower's sessions and
    // its own counted; sessions open through the followers live on.
    let killed = Instant::now();
    let mut a = a;
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    held.retain(|(peer, _)| *peer != 1);
    let new =
        eventually(Duration::from_secs(10), || b.stderr().contains(&b.leads(2)) || d.stderr().contains(&d.leads(2)));
    let took = killed.elapsed();
    assert!(new, "a new leader: {}\n{}", b.stderr(), d.stderr());
    let (leader, other) = if b.stderr().contains(&b.leads(2)) { (&b, &d) } else { (&d, &b) };
    eprintln!("new leader: peer {} after {:.0} ms", leader.peer, took.as_secs_f64() * 1e3);
    assert!(took < Duration::from_secs(5), "failover took {took:?}");
    let follows = format!("peer {} follows peer {} (generation 2)", other.peer, leader.peer);
    assert!(other.wait_for(&follows, Duration::from_secs(10)), "{}", other.stderr());
    assert_eq!(generations(&[&a, &b, &d]), [1, 2], "never two leaders of one generation");
    assert_eq!(leader.roles(), roles, "the roles it followed, not a fresh split");
    assert!(
        eventually(Duration::from_secs(10), || leader.active() == [4.0, 2.0]),
        "the new leader counts both survivors' sessions: {:?}",
        leader.active()
    );
    for (peer, client) in &held {
        assert!(server_port(&rt, client) > 0, "a session through member {peer} lives on");
    }
    for m in [leader, other] {
        let (_, port) = open(&rt, m, "free-after");
        assert_eq!(role_of(&c, &roles, port), 'F', "via member {} after the failover", m.peer);
    }
}

/// A long query through `holder`, cancelled by a cancel request sent to
/// `other`: the request is forwarded to the member whose peer id is in the
/// key.
fn cancel_through_another_member(rt: &tokio::runtime::Runtime, holder: &Member, other: &Member) {
    let (client, _) = open(rt, holder, "free-cancel");
    let token = client.cancel_token();
    let began = Instant::now();
    let sleeping = rt.spawn(async move {
        let r = client.simple_query("SELECT pg_sleep(30)").await;
        r.map(|_| ()).map_err(|e| e.code().map(|c| c.code().to_string()).unwrap_or_default())
    });
    rt.block_on(async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let sock = tokio::net::TcpStream::connect(("127.0.0.1", other.port)).await.unwrap();
        token.cancel_query_raw(sock, tokio_postgres::NoTls).await.unwrap();
    });
    let ended = rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), sleeping).await });
    let ended = ended.expect("the query ends within 20 s").unwrap();
    assert_eq!(ended, Err("57014".to_string()), "cancelled (query_canceled)");
    assert!(began.elapsed() < Duration::from_secs(10), "{:?}", began.elapsed());
    // The client is gone with its task: let its connection say Terminate
    // (the runtime runs only inside block_on).
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(500)).await });
}

/// Bad membership: one line, exit 2, naming the flag.
fn refusals(c: &Cluster) {
    let refused = |args: &[&str], flag: &str, says: &str| {
        let mut cmd = c.plbbench(&["proxy", "--tier", "t1"]);
        cmd.args(args).args(["--listen", &format!("127.0.0.1:{}", free_port())]);
        let out = run_within(cmd, Duration::from_secs(60));
        let err = text(&out.stderr);
        let last = err.lines().last().unwrap_or_default().to_string();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(last.starts_with(&format!("plbbench: error: {flag}: ")) && last.contains(says), "{args:?}: {err}");
    };
    let mut same = vec!["--peer-id", "2"];
    same.extend(FLAGS);
    refused(&same, "--peer-id", "peer 2 is already in tier t1");
    let mut other_theta = vec!["--peer-id", "9"];
    other_theta.extend(["--T", "40", "--theta", "5", "--probe-interval-ms", "500"]);
    refused(&other_theta, "--tier", "routing flags differ from the leader's (peer 1 of tier t1)");
    let mut nowhere = vec!["--peer-id", "9", "--cluster", "external", "--dsn", "host=127.0.0.1 port=1 user=x dbname=x"];
    nowhere.extend(FLAGS);
    nowhere.extend(["--replicas", "1"]);
    refused(&nowhere, "--tier", "tier t1: no reachable cluster");
    refused(&["--peer-id", "0"], "--peer-id", "must be 1 to 127");
    refused(&["--peer-id", "3", "--admission", "modes"], "--admission", "--admission none");
}

/// The tier's lease (`[tier] lease_ms`, 5000 by default) and round
/// (`retry_ms`, 500).
const LEASE: Duration = Duration::from_millis(5000);
const RETRY: Duration = Duration::from_millis(500);

/// pgbench through `m` as `app` ([`proxy::select1_bench`]).
fn pgbench(c: &Cluster, m: &Member, app: &str, secs: u64) -> Child {
    proxy::select1_bench(c, &m.dsn(app), app, secs)
}

/// pgbench's end: (its stdout, its stderr), after asserting it exited 0
/// with no failed transaction and no client aborted.
fn bench_ok(b: Child, what: &str) {
    let out = b.wait_with_output().unwrap();
    let (so, se) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success() && !se.contains("aborted"), "{what}: {so}{se}");
    assert!(so.contains("number of failed transactions: 0"), "{what}: {so}");
}

/// Samples, every 100 ms on a connection of its own to each replica, which
/// member holds the tier's lock there, until `stop`; returns the samples
/// taken and every sample in which two members held a majority each.
fn watch_locks(c: &Cluster, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(usize, Vec<String>)> {
    let (ports, password) = (c.ports.clone(), c.password.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let sql = "SELECT split_part(a.application_name, ' ', 3) FROM pg_locks l JOIN pg_stat_activity a \
                   ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted \
                   AND a.application_name LIKE 'plbtier t1 %'";
        let mut conns: Vec<Option<tokio_postgres::Client>> = ports
            .iter()
            .map(|p| {
                let dsn = format!("host=127.0.0.1 port={p} user=plbbench password={password} dbname=plbbench");
                let (client, conn) = rt.block_on(tokio_postgres::connect(&dsn, tokio_postgres::NoTls)).ok()?;
                rt.spawn(conn);
                Some(client)
            })
            .collect();
        let (mut samples, mut double) = (0, Vec::new());
        while !stop.load(Ordering::SeqCst) {
            let mut held: BTreeMap<String, usize> = BTreeMap::new();
            for conn in &mut conns {
                let Some(client) = conn else { continue };
                // The timeout is made inside the runtime (its timer needs one).
                let asked =
                    rt.block_on(async { tokio::time::timeout(Duration::from_secs(2), client.simple_query(sql)).await });
                let Ok(Ok(rows)) = asked else {
                    *conn = None;
                    continue;
                };
                for row in rows {
                    if let tokio_postgres::SimpleQueryMessage::Row(r) = row {
                        *held.entry(r.get(0).unwrap_or_default().to_string()).or_default() += 1;
                    }
                }
            }
            samples += 1;
            if held.values().filter(|&&n| n >= 3).count() > 1 {
                double.push(format!("{held:?}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        (samples, double)
    })
}

/// Sends `signal` (STOP, CONT) to member `m`'s process.
fn signal(m: &Member, signal: &str) {
    let ok = std::process::Command::new("kill").args([&format!("-{signal}"), &m.child.id().to_string()]).status();
    assert!(ok.is_ok_and(|s| s.success()), "kill -{signal} member {}", m.peer);
}

/// The member among `members` whose stderr says it leads at `generation`.
fn leader_at<'a>(members: &[&'a Member], generation: u64) -> Option<&'a Member> {
    members.iter().copied().find(|m| m.stderr().contains(&m.leads(generation)))
}

/// A leader that hangs (SIGSTOP) keeps its connections and its locks: a
/// follower that hears nothing from it for the lease ends its idle
/// lock-holding backends and leads within the lease plus a round (and the
/// time the round's queries take); a replica killed during the hang is
/// routed around by every live member once its own probes confirm it, so
/// pgbench through the followers completes with no client aborted; the
/// hung member, resumed, finds its lease gone at once and follows; and a
/// sampler of `pg_locks` every 100 ms never sees two members holding a
/// majority. Three hangs in a row, each of the current leader.
#[test]
fn a_hung_leader_is_replaced_within_its_lease() {
    if !have_postgres() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::up();
    let members = [Member::start(&c, 1, &[]), Member::start(&c, 2, &[]), Member::start(&c, 3, &[])];
    let all: Vec<&Member> = members.iter().collect();
    assert!(eventually(Duration::from_secs(20), || leader_at(&all, 1).is_some()), "a first leader");
    let stop = Arc::new(AtomicBool::new(false));
    let locks = watch_locks(&c, stop.clone());
    let mut taken = Vec::new();
    for round in 0..3u64 {
        let generation = round + 1;
        let hung = leader_at(&all, generation).expect("the leader");
        let others: Vec<&Member> = all.iter().copied().filter(|m| m.peer != hung.peer).collect();
        for m in &others {
            let follows = format!("follows peer {} (generation {generation})", hung.peer);
            assert!(m.wait_for(&follows, Duration::from_secs(20)), "member {}: {}", m.peer, m.stderr());
        }
        std::thread::sleep(Duration::from_secs(2));
        signal(hung, "STOP");
        let stopped = Instant::now();
        let next = eventually(Duration::from_secs(15), || leader_at(&others, generation + 1).is_some());
        let took = stopped.elapsed();
        assert!(next, "no new leader while peer {} hung: {}", hung.peer, others[0].stderr());
        eprintln!("hang {}: peer {} hung, a new leader after {:.0} ms", round + 1, hung.peer, took.as_secs_f64() * 1e3);
        assert!(took < LEASE + RETRY + Duration::from_millis(1500), "took {took:?}");
        taken.push(took);
        let followed = |m: &Member| m.stderr().matches(&format!("follows peer {} ", hung.peer)).count();
        let before: Vec<usize> = others.iter().map(|m| followed(m)).collect();

        // r1 killed during the hang: once each live member's own probes
        // found it, no session through them goes there.
        let found = |m: &Member| format!("peer {}'s own probes found r1 down", m.peer);
        let found_before: Vec<usize> = others.iter().map(|m| m.stderr().matches(&found(m)).count()).collect();
        c.fault("down", "r1");
        for (m, &was) in others.iter().zip(&found_before) {
            let seen = eventually(Duration::from_secs(10), || {
                let _ = pgbench(&c, m, "free-probe", 1).wait();
                let st = m.stderr();
                let led = st.find(&m.leads(generation + 1));
                st.matches(&found(m)).count() > was || led.is_some_and(|i| st[i..].contains("detect r1 down"))
            });
            assert!(seen, "member {} never routed around r1: {}", m.peer, m.stderr());
        }
        let benches: Vec<(String, Child)> = others
            .iter()
            .flat_map(|m| {
                ["premium-hang", "free-hang"].map(|app| (format!("{app} via {}", m.peer), pgbench(&c, m, app, 4)))
            })
            .collect();
        for (what, b) in benches {
            bench_ok(b, &what);
        }

        // Resumed, the old leader finds its lease gone before anything
        // else, and follows the new one.
        signal(hung, "CONT");
        let lost = format!("peer {} lost its lease", hung.peer);
        assert!(hung.wait_for(&lost, Duration::from_secs(1)), "{}", hung.stderr());
        let new = leader_at(&others, generation + 1).unwrap();
        let follows = format!("peer {} follows peer {} (generation {})", hung.peer, new.peer, generation + 1);
        assert!(hung.wait_for(&follows, Duration::from_secs(10)), "{}", hung.stderr());
        let after: Vec<usize> = others.iter().map(|m| followed(m)).collect();
        assert_eq!(after, before, "a member followed the deposed peer {} again", hung.peer);
        c.fault("rejoin", "r1");
    }
    stop.store(true, Ordering::SeqCst);
    let (samples, double) = locks.join().unwrap();
    assert!(samples > 100, "{samples} samples");
    assert!(double.is_empty(), "two members held a majority at once: {double:?}");
    let mut gens = generations(&all);
    gens.dedup();
    assert_eq!(gens, [1, 2, 3, 4], "each generation led once, rising");
    eprintln!("takeovers: {taken:?} (lease {LEASE:?}, retry {RETRY:?}); {samples} lock samples");
}
