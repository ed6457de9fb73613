//! `plbbench proxy` end to end (docs/proxy.md) with clients plbbench did not
//! write: Debian's psql and pgbench against a real five-replica local
//! cluster (`plbbench cluster up` in a private state directory) through
//! the proxy. One test, in stages, because the cluster and the proxy are
//! shared and the stages fault the cluster in turn:
//! - psql logs in with SCRAM-SHA-256 (a password in the users file, and a
//!   secret PostgreSQL itself stored in pg_authid), a wrong password gets
//!   28P01, and the session lands on a replica of its class's role;
//! - bad input gets the error a server would send, and the proxy lives on;
//! - pgbench -i and pgbench runs complete, Premium and Freemium in
//!   parallel, each class only on its own role's replicas (pg_stat_activity
//!   on the replicas, roles from the proxy's metrics);
//! - a replica killed under pgbench gives its clients a clean FATAL and
//!   new sessions go to survivors; after a cascade (both Premium replicas
//!   down) the repaired roles still keep the classes apart;
//! - a session gets a kept server connection with nothing of the session
//!   before it left, and one left in a transaction is not kept;
//! - SIGTERM drains: no new connections, a session past the drain time is
//!   closed with 57P01, the proxy exits 0.
//!
//! A second, small test starts the proxy with no config file in front of
//! a one-replica cluster: psql is served on loopback (trust, the class from
//! application_name), and a listen address beyond loopback is refused.
//!
//! Needs PostgreSQL with psql and pgbench (scripts/install-postgres.sh).

mod common;
use common::have_postgres;
use common::proxy::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// psql and raw sockets: authentication, routing by class, bad input.
fn logins_and_bad_input(c: &Cluster, p: &Proxy) {
    let roles = p.roles();
    assert_eq!(roles.iter().filter(|&&r| r == 'P').count(), 2, "the paper's 2,1,2 at start: {roles:?}");
    for (user, password, app, role) in [("alice", PASSWORD, "premium-psql", 'P'), ("bob", "builder", "free-psql", 'F')]
    {
        let (ok, port, err) = p.psql(user, password, app, "SELECT inet_server_port()");
        assert!(ok, "{user} logs in: {err}");
        let r = c.ports.iter().position(|&x| x.to_string() == port).expect("a replica's port");
        assert_eq!(roles[r], role, "{app} ran on r{} whose role is {}", r + 1, roles[r]);
    }
    let (ok, _, err) = p.psql("alice", "wrong", "premium-psql", "SELECT 1");
    assert!(!ok && err.contains("FATAL:  password authentication failed for user \"alice\""), "{err}");
    let (ok, _, err) = p.psql("nobody", PASSWORD, "x", "SELECT 1");
    assert!(!ok && err.contains("password authentication failed for user \"nobody\""), "{err}");
    assert!(!p.stderr().contains(PASSWORD), "a secret in the proxy's log");

    let startup = |body: &[u8]| packet(3 << 16, body);
    assert_eq!(sqlstate(&exchange(p.port, &4u32.to_be_bytes())), "08P01", "length below 8");
    assert_eq!(sqlstate(&exchange(p.port, &20_000u32.to_be_bytes())), "08P01", "oversized startup packet");
    assert_eq!(sqlstate(&exchange(p.port, &packet(2 << 16, b"user\0u\0\0"))), "0A000", "protocol 2.0");
    assert_eq!(sqlstate(&exchange(p.port, &startup(b"user\0u"))), "08P01", "no terminator");
    assert_eq!(sqlstate(&exchange(p.port, &startup(b"database\0d\0\0"))), "28000", "no user");
    let mut ssl = TcpStream::connect(("127.0.0.1", p.port)).unwrap();
    ssl.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    ssl.write_all(&packet((1234 << 16) | 5679, b"")).unwrap();
    let mut answer = [0u8; 1];
    ssl.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"N", "an SSL request is answered N (no TLS)");
    ssl.write_all(&startup(b"user\0alice\0\0")).unwrap();
    ssl.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"R", "after N the client goes on in plain text");
    drop(ssl);
    let cancel = exchange(p.port, &packet((1234 << 16) | 5678, &[0, 0, 0, 1, 0, 0, 0, 2]));
    assert!(cancel.is_empty(), "a cancel request gets no answer: {cancel:?}");
    let mut big = startup(b"user\0alice\0\0");
    big.extend([b'p', 0x00, 0x10, 0x00, 0x00]);
    let reply = exchange(p.port, &big);
    assert_eq!(reply[0], b'R', "asked for SASL first");
    assert_eq!(sqlstate(&reply), "08P01", "an oversized authentication message");
    let mut bad_sasl = startup(b"user\0alice\0\0");
    let mut body = b"SCRAM-SHA-256\0".to_vec();
    body.extend(5i32.to_be_bytes());
    body.extend(b"junk!");
    bad_sasl.push(b'p');
    bad_sasl.extend(((4 + body.len()) as u32).to_be_bytes());
    bad_sasl.extend(body);
    assert_eq!(sqlstate(&exchange(p.port, &bad_sasl)), "08P01", "a malformed SCRAM message");
    let silent = Instant::now();
    let reply = exchange(p.port, b"");
    assert_eq!(sqlstate(&reply), "08P01", "a client that says nothing");
    assert!(silent.elapsed() >= Duration::from_secs(2), "closed at the login deadline (3 s), not before");
    let (ok, _, err) = p.psql("alice", PASSWORD, "premium-psql", "SELECT 1");
    assert!(ok, "the proxy still serves after all that: {err}");
}

/// A client that sends no application_name in its startup packet
/// (pgjdbc's default), through the proxy as alice with SCRAM
/// (tokio-postgres sends none unless told).
fn late_client(rt: &tokio::runtime::Runtime, p: &Proxy) -> tokio_postgres::Client {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host("127.0.0.1").port(p.port).user("alice").password(PASSWORD).dbname("plbbench");
    cfg.connect_timeout(Duration::from_secs(10));
    let (client, conn) = rt.block_on(cfg.connect(tokio_postgres::NoTls)).expect("a late-naming client logs in");
    rt.spawn(conn);
    client
}

/// The first column of every row `sql` returns (simple protocol), within 30 s.
fn first_column(rt: &tokio::runtime::Runtime, client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let msgs = rt.block_on(async { tokio::time::timeout(Duration::from_secs(30), client.simple_query(sql)).await });
    let msgs = msgs.expect("an answer within 30 s").unwrap_or_else(|e| panic!("{sql}: {e}"));
    msgs.iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(row.get(0).unwrap_or_default().to_string()),
            _ => None,
        })
        .collect()
}

/// The role of the replica listening on `port`.
fn role_of_port(c: &Cluster, roles: &[char], port: &str) -> char {
    let r = c.ports.iter().position(|&x| x.to_string() == port).unwrap_or_else(|| panic!("{port}: not a replica"));
    roles[r]
}

/// Freemium sessions the proxy has routed so far, on any replica.
fn routed_freemium(p: &Proxy) -> f64 {
    p.scrape()
        .iter()
        .filter(|(k, _)| k.starts_with("plbbench_proxy_sessions_total{class=\"freemium\"") && k.contains("routed"))
        .map(|(_, v)| v)
        .sum()
}

/// Clients that name themselves after login: the class from their first
/// statement (Premium and Freemium names, pgjdbc's SET extra_float_digits
/// first and replayed), a cancel through the proxy's own key, a client
/// that says nothing before the wait (1.5 s here) routed with the default
/// class, a later SET naming another class logged and counted once, and
/// pgjdbc itself when a JDK and Debian's pgjdbc are installed.
fn late_naming(c: &Cluster, p: &Proxy) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let roles = p.roles();
    for (app, role) in [("premium-late", 'P'), ("free-late", 'F')] {
        let client = late_client(&rt, p);
        let said = format!("SET application_name = '{app}'; SELECT inet_server_port()");
        let port = first_column(&rt, &client, &said).pop().unwrap();
        assert_eq!(role_of_port(c, &roles, &port), role, "{app} named late ran on port {port}");
    }
    let client = late_client(&rt, p);
    assert!(first_column(&rt, &client, "SET extra_float_digits = 3").is_empty());
    assert!(first_column(&rt, &client, "set Application_Name TO 'premium-jdbc-like'").is_empty());
    let port = first_column(&rt, &client, "SELECT inet_server_port()").pop().unwrap();
    assert_eq!(role_of_port(c, &roles, &port), 'P', "named after an answered SET");
    assert_eq!(first_column(&rt, &client, "SHOW extra_float_digits"), ["3"], "the answered SET was replayed");
    drop(client);

    let client = late_client(&rt, p);
    assert!(first_column(&rt, &client, "SET application_name TO 'premium-cancel'").is_empty());
    let token = client.cancel_token();
    let sleeper = rt.spawn(async move { client.simple_query("SELECT pg_sleep(30)").await.map(|_| ()) });
    std::thread::sleep(Duration::from_secs(1));
    rt.block_on(token.cancel_query(tokio_postgres::NoTls)).expect("the cancel request is sent");
    let cancelled = rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), sleeper).await });
    let cancelled = cancelled.expect("cancelled within 10 s");
    let err = cancelled.unwrap().expect_err("pg_sleep(30) was cancelled");
    assert_eq!(err.code(), Some(&tokio_postgres::error::SqlState::QUERY_CANCELED), "{err}");

    let before = routed_freemium(p);
    let silent = late_client(&rt, p);
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(routed_freemium(p), before + 1.0, "routed with the default class when the wait ran out");
    let port = first_column(&rt, &silent, "SELECT inet_server_port()").pop().unwrap();
    assert_eq!(role_of_port(c, &roles, &port), 'F', "the default class");
    for _ in 0..2 {
        assert!(first_column(&rt, &silent, "SET application_name = 'premium-too-late'").is_empty());
    }
    let counted = p.scrape().get("plbbench_proxy_class_after_routing_total{class=\"freemium\"}").copied();
    assert_eq!(counted, Some(1.0), "counted once per session");
    let log = p.stderr();
    assert_eq!(log.matches("\"premium-too-late\" (premium) after it was routed as freemium").count(), 1, "{log}");
    drop(silent);
    pgjdbc(c, p, &roles);
}

/// Compiles tests/java/*.java against Debian's pgjdbc into the cluster's
/// folder: the class path to run them with. The setup installs javac and
/// pgjdbc (scripts/install-jdbc.sh), so their absence fails the test,
/// unless PLBBENCH_JDBC=0 said to go without them (then `None`).
fn java_classes(c: &Cluster) -> Option<String> {
    let jar = Path::new("/usr/share/java/postgresql.jar");
    let javac = Command::new("javac").arg("-version").output().is_ok_and(|o| o.status.success());
    if !javac || !jar.exists() {
        let why = format!("no javac or {} (run scripts/install-jdbc.sh)", jar.display());
        if std::env::var("PLBBENCH_JDBC").as_deref() == Ok("0") {
            eprintln!("SKIPPING the pgjdbc check: {why}, and PLBBENCH_JDBC=0 is set");
            return None;
        }
        panic!("pgjdbc check: {why}, or set PLBBENCH_JDBC=0");
    }
    let classes = c.root.join("java");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java");
    let mut compile = Command::new("javac");
    compile.arg("-cp").arg(jar).arg("-d").arg(&classes).arg(src.join("LateName.java")).arg(src.join("KillCheck.java"));
    let out = run_within(compile, Duration::from_secs(120));
    assert!(out.status.success(), "javac: {}", text(&out.stderr));
    Some(format!("{}:{}", jar.display(), classes.display()))
}

/// Runs a class of tests/java/ with `args`; its stdout, after checking it
/// succeeded within 60 s.
fn java(classpath: &str, class: &str, args: &[&str]) -> String {
    let mut java = Command::new("java");
    java.args(["-cp", classpath, class]).args(args);
    let out = run_within(java, Duration::from_secs(60));
    assert!(out.status.success(), "{class} through the proxy: {}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

/// pgjdbc with its default settings and ApplicationName=premium-web lands
/// on a Premium replica (tests/java/LateName.java, compiled now).
fn pgjdbc(c: &Cluster, p: &Proxy, roles: &[char]) {
    let Some(classpath) = java_classes(c) else { return };
    let url = format!("jdbc:postgresql://127.0.0.1:{}/plbbench", p.port);
    let said = java(&classpath, "LateName", &[&url, "alice", PASSWORD, "premium-web"]);
    let fields: Vec<&str> = said.split_whitespace().collect();
    assert_eq!(fields.get(1..), Some(&["premium-web", "3"][..]), "{said}");
    assert_eq!(role_of_port(c, roles, fields[0]), 'P', "pgjdbc named premium-web landed on port {}", fields[0]);
}

/// pgbench -i through the proxy, then Premium and Freemium pgbench runs in
/// parallel, each class only on its role's replicas.
fn pgbench_by_class(c: &Cluster, p: &Proxy) {
    let init = run_within(p.pgbench("premium-init", &["-i", "-q", "-s", "1"]), Duration::from_secs(120));
    assert!(init.status.success(), "pgbench -i through the proxy: {}", text(&init.stderr));
    let mut prem = p
        .pgbench("premium-bench", &["-n", "-S", "-c", "4", "-j", "2", "-T", "15"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut free = p
        .pgbench("free-bench", &["-n", "-S", "-c", "8", "-j", "2", "-T", "15"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let mut all_seen = false;
    let mut last = String::new();
    // Polled for up to ~12 s of the runs' 15: on a busy CI machine the
    // sessions may take seconds to be up through the proxy, and each poll
    // (ten psql calls) takes its own time.
    let polls_until = std::time::Instant::now() + Duration::from_secs(12);
    while std::time::Instant::now() < polls_until {
        let roles = p.roles();
        let seen = c.classes_seen(&[true; 5]);
        all_seen |= check_apart(&roles, &seen) == (4, 8);
        if all_seen {
            break;
        }
        let active: Vec<String> = p
            .scrape()
            .into_iter()
            .filter(|(k, v)| k.contains("active_sessions") && *v > 0.0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        last = format!("seen {seen:?} roles {roles:?} router {active:?}");
        std::thread::sleep(Duration::from_millis(400));
    }
    assert!(all_seen, "never saw all 4 + 8 sessions at once: {last}; proxy log: {}", p.stderr());
    for (name, child) in [("premium", &mut prem), ("free", &mut free)] {
        let status = child.wait().unwrap();
        let mut out = String::new();
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        assert!(status.success() && out.contains("number of failed transactions: 0"), "{name} pgbench: {out}");
    }
}

/// Every Premium session is on a P replica and every Freemium one on an F
/// replica; returns how many of each there are.
fn check_apart(roles: &[char], seen: &[Option<(u32, u32)>]) -> (u32, u32) {
    let mut totals = (0, 0);
    for (r, s) in seen.iter().enumerate() {
        let Some((p, f)) = *s else { continue };
        assert!(p == 0 || roles[r] == 'P', "Premium sessions on r{} ({}): {seen:?} roles {roles:?}", r + 1, roles[r]);
        assert!(f == 0 || roles[r] == 'F', "Freemium sessions on r{} ({}): {seen:?} roles {roles:?}", r + 1, roles[r]);
        totals = (totals.0 + p, totals.1 + f);
    }
    totals
}

/// Server connections kept between sessions (the default `server_pool`):
/// a session after another of the same user parameters on the same
/// replica gets its backend, with nothing of the earlier session left (a
/// setting, a temporary table) and its own application_name; a kept
/// connection waits on its replica, idle, under its sessions' name (reset
/// to its login's by `DISCARD ALL`, its last query), after every client
/// has left; a client
/// that leaves inside a transaction does not leave its connection kept.
fn kept_server_connections(c: &Cluster, p: &Proxy) {
    let default_work_mem = c.psql(0, "SHOW work_mem");
    let app = "premium-keep";
    let (ok, first, err) = p.psql(
        "alice",
        PASSWORD,
        app,
        "SET work_mem = '77MB'; CREATE TEMP TABLE kept_t (x int); SELECT pg_backend_pid() || ' ' || inet_server_port()",
    );
    assert!(ok, "{err}");
    let probe = "SELECT pg_backend_pid() || ' ' || inet_server_port() || ' ' || current_setting('work_mem') || ' ' \
                 || coalesce(to_regclass('pg_temp.kept_t')::text, 'none') || ' ' || current_setting('application_name')";
    let mut same = 0;
    for i in 0..6 {
        let (ok, out, err) = p.psql("alice", PASSWORD, app, probe);
        assert!(ok, "session {i}: {err}");
        let words: Vec<&str> = out.split(' ').collect();
        assert_eq!(words.len(), 5, "{out}");
        if words[..2].join(" ") == first {
            same += 1;
            assert_eq!(words[2..], [default_work_mem.as_str(), "none", app], "the earlier session left state behind");
        }
    }
    assert!(same >= 1, "no session got the first one's backend {first} again");
    let kept = || -> u32 {
        let sql = format!(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = '{app}' AND state = 'idle' \
             AND query = 'DISCARD ALL'"
        );
        (0..5).map(|r| c.psql(r, &sql).parse::<u32>().unwrap()).sum()
    };
    let until = Instant::now() + Duration::from_secs(5);
    while kept() == 0 {
        assert!(Instant::now() < until, "no kept connection waits on a replica");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ok, open, err) = p.psql("alice", PASSWORD, app, "BEGIN; SELECT pg_backend_pid() || ' ' || inet_server_port()");
    assert!(ok, "{err}");
    for i in 0..6 {
        let (ok, out, err) = p.psql("alice", PASSWORD, app, "SELECT pg_backend_pid() || ' ' || inet_server_port()");
        assert!(ok && out != open, "session {i} got the backend a client left in a transaction: {err}");
    }
}

/// A replica killed under pgbench: its clients get a clean FATAL, new
/// sessions go to the survivors.
fn kill_under_pgbench(c: &Cluster, p: &Proxy) {
    let roles = p.roles();
    let victim = roles.iter().position(|&r| r == 'F').expect("an F replica");
    let name = format!("r{}", victim + 1);
    let bench = p
        .pgbench("free-kill", &["-n", "-S", "-c", "6", "-j", "2", "-T", "6"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    c.fault("down", &name);
    let began = Instant::now();
    let out = bench.wait_with_output().unwrap();
    assert!(began.elapsed() < Duration::from_secs(10), "pgbench's clients were not left hanging");
    let err = text(&out.stderr);
    // The proxy's own FATAL when the connection broke with no word, or the
    // server's, passed on whole, when its backend said why it was ending
    // (PostgreSQL's backends may see the postmaster's death first).
    let lost = format!("FATAL:  the connection to replica {name} was lost");
    let said = "FATAL:  terminating connection due to unexpected postmaster exit";
    assert!(
        (err.contains(&lost) || err.contains(said)) && err.contains("aborted"),
        "pgbench's clients on {name} get a clean error: {err}"
    );
    std::thread::sleep(Duration::from_secs(1));
    for i in 0..6 {
        let (ok, port, e) = p.psql("alice", PASSWORD, "free-after", "SELECT inet_server_port()");
        assert!(ok, "new session {i} after the kill: {e}");
        assert_ne!(port, c.ports[victim].to_string(), "a new session went to the dead {name}");
    }
    let healthy = p.scrape()[&format!("plbbench_router_replica_healthy{{replica=\"{name}\"}}")];
    assert_eq!(healthy, 0.0, "the router took {name} out");
    c.fault("rejoin", &name);
}

/// Both Premium replicas down in turn under Freemium load; then Premium
/// and Freemium runs in parallel keep apart on the repaired roles.
fn cascade(c: &Cluster, p: &Proxy) {
    std::thread::sleep(Duration::from_secs(2));
    let roles = p.roles();
    let pr: Vec<usize> = (0..5).filter(|&r| roles[r] == 'P').collect();
    assert_eq!(pr.len(), 2, "two P replicas before the cascade: {roles:?}");
    let free = p
        .pgbench("free-cascade", &["-n", "-S", "-C", "-c", "4", "-j", "2", "-T", "14"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    c.fault("down", &format!("r{}", pr[0] + 1));
    std::thread::sleep(Duration::from_secs(2));
    c.fault("down", &format!("r{}", pr[1] + 1));
    std::thread::sleep(Duration::from_secs(2));
    let mut prem = p.pgbench("premium-cascade", &["-n", "-S", "-c", "3", "-j", "1", "-T", "8"]);
    let prem = prem.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let roles = p.roles();
    let up: Vec<bool> = (0..5).map(|r| !pr.contains(&r)).collect();
    let kept: Vec<char> = (0..5).filter(|&r| up[r]).map(|r| roles[r]).collect();
    assert_eq!(kept.iter().filter(|&&x| x == 'P').count(), 2, "3 survivors: 2 P, 0 M, 1 F: {roles:?}");
    assert!(kept.contains(&'F'), "3 survivors: 2 P, 0 M, 1 F: {roles:?}");
    // pgbench opens its three connections one after the other: look until
    // all three are there (or 4 s more have passed).
    let began = Instant::now();
    let seen = loop {
        let seen = c.classes_seen(&up);
        let premium: u32 = seen.iter().flatten().map(|s| s.0).sum();
        if premium == 3 || began.elapsed() > Duration::from_secs(4) {
            break seen;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let premium: u32 = seen.iter().flatten().map(|s| s.0).sum();
    assert_eq!(premium, 3, "Premium's 3 sessions on the survivors: {seen:?}");
    for (r, s) in seen.iter().enumerate() {
        if let Some((pn, f)) = s {
            assert!(
                *pn == 0 || roles[r] == 'P',
                "Premium on r{} ({}) after the cascade: {seen:?} {roles:?}",
                r + 1,
                roles[r]
            );
            assert!(*f == 0 || roles[r] != 'P', "Freemium on the P replica r{}: {seen:?} {roles:?}", r + 1);
        }
    }
    let out = prem.wait_with_output().unwrap();
    assert!(
        out.status.success() && text(&out.stdout).contains("number of failed transactions: 0"),
        "Premium after the cascade: {}",
        text(&out.stderr)
    );
    let _ = free.wait_with_output().unwrap();
    for r in pr {
        c.fault("rejoin", &format!("r{}", r + 1));
    }
}

/// SIGTERM: no new connections, a long session is cut at the drain time
/// with 57P01, and the proxy exits 0.
fn drain(p: &mut Proxy) {
    let mut long = Command::new("psql");
    long.args(["-XAtq", &p.dsn("alice"), "-c", "SELECT pg_sleep(30)"])
        .env("PGPASSWORD", PASSWORD)
        .env("PGAPPNAME", "premium-long");
    let long = long.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let pid = nix::unistd::Pid::from_raw(p.child.id() as i32);
    let sent = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(TcpStream::connect(("127.0.0.1", p.port)).is_err(), "still accepting while draining");
    let out = long.wait_with_output().unwrap();
    let cut = sent.elapsed();
    assert!(text(&out.stderr).contains("terminating connection due to administrator command"), "{}", text(&out.stderr));
    assert!(
        cut >= Duration::from_millis(2500) && cut < Duration::from_secs(8),
        "cut at the 3 s drain time, not at {cut:?}"
    );
    let limit = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = p.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < limit, "the proxy did not exit after the drain");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit status {status:?}: {}", p.stderr());
    assert!(p.stderr().contains("1 closed at the drain deadline"), "{}", p.stderr());
}

/// The two tests take turns: each runs a five-replica cluster and loads
/// it, and on two cores one would slow the other's timed checks.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn real_clients_through_the_proxy() {
    if !have_postgres() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for tool in ["psql", "pgbench"] {
        let found = Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
        assert!(found, "{tool} not found: run scripts/install-postgres.sh as root");
    }
    let c = Cluster::up();
    for r in 0..5 {
        let mut init = Command::new("pgbench");
        init.args([
            "-i",
            "-q",
            "-s",
            "1",
            "-h",
            "127.0.0.1",
            "-p",
            &c.ports[r].to_string(),
            "-U",
            "plbbench",
            "plbbench",
        ])
        .env("PGPASSWORD", &c.password);
        let out = run_within(init, Duration::from_secs(120));
        assert!(out.status.success(), "pgbench -i on r{}: {}", r + 1, text(&out.stderr));
    }
    let secret = c.psql(
        0,
        "SET password_encryption = 'scram-sha-256'; CREATE ROLE bob LOGIN PASSWORD 'builder'; \
         SELECT rolpassword FROM pg_authid WHERE rolname = 'bob'",
    );
    assert!(secret.starts_with("SCRAM-SHA-256$4096:"), "{secret}");
    std::fs::write(c.root.join("users.txt"), format!("; test users\n\"alice\" \"{PASSWORD}\"\n\"bob\" \"{secret}\"\n"))
        .unwrap();
    let config = c.root.join("proxy.toml");
    std::fs::write(
        &config,
        "users_file = \"users.txt\"\nlogin_timeout_s = 3\ndrain_s = 3\nlate_class_timeout_ms = 1500\n\n[class]\nparam = \"application_name\"\npremium_prefix = \"premium\"\n",
    )
    .unwrap();
    let mut p = Proxy::start(&c, &config);
    logins_and_bad_input(&c, &p);
    kept_server_connections(&c, &p);
    late_naming(&c, &p);
    pgbench_by_class(&c, &p);
    kill_under_pgbench(&c, &p);
    cascade(&c, &p);
    drain(&mut p);
    let log = p.stderr();
    assert!(log.contains("detect") && log.contains("down"), "the controller's events are logged: {log}");
    let reused = log.split("sessions served (").nth(1).and_then(|t| t.split(' ').next()).and_then(|n| n.parse().ok());
    assert!(reused.is_some_and(|n: u32| n >= 1), "sessions on kept server connections: {log}");
}

/// The pid a `run --via-proxy` printed for its proxy child.
fn proxy_pid(stderr: &str) -> i32 {
    let line =
        stderr.lines().find(|l| l.contains("clients go through a plbbench proxy process")).unwrap_or_else(|| {
            panic!("the run names its proxy: {stderr}");
        });
    line.rsplit_once("(pid ").and_then(|(_, p)| p.trim_end_matches(')').parse().ok()).unwrap()
}

/// Whether `pid` is still a running plbbench proxy.
fn proxy_alive(pid: i32) -> bool {
    running(pid, "proxy")
}

/// Whether `pid` is still a running generator child.
fn generator_alive(pid: i32) -> bool {
    running(pid, "--generator-child")
}

/// Whether process `pid` runs with `marker` in its command line.
fn running(pid: i32, marker: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| text(&c).contains(marker))
}

/// Rows of a CSV file as maps from its header.
fn csv_rows(path: &Path) -> Vec<BTreeMap<String, String>> {
    let body = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = body.lines();
    let head: Vec<String> = lines.next().unwrap().split(',').map(str::to_string).collect();
    lines.map(|l| head.iter().cloned().zip(l.split(',').map(str::to_string)).collect()).collect()
}

/// Every phase after the warm-up has its login waits (issue 48): the
/// clients logged in through the proxy, and a generator child's logins
/// reach its parent's books.
fn assert_logins_measured(summary: &serde_json::Value) {
    for r in summary["phases"].as_array().unwrap().iter().filter(|r| r["phase"] != "warmup") {
        let (p50, max) = (r["login_p50_ms"].as_f64(), r["login_max_ms"].as_f64());
        assert!(p50.is_some_and(|ms| ms > 0.0) && max >= p50, "login waits through the proxy: {r}");
    }
}

/// `run --via-proxy`: the run's own clients through a proxy child it
/// starts with its routing flags. The proxy routes (each class on its own
/// role's replicas in the baseline, per the replica the proxy named for
/// each session), its events and roles reach the run's files, the report
/// says the sessions went through it, and it stops with the run, also
/// when the run is killed (the parent-death signal).
#[test]
fn a_run_through_its_own_proxy() {
    if !have_postgres() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::up();
    let out_dir = c.root.join("run");
    let mut cmd = c.plbbench(&[
        "run",
        "--workload",
        "analytics",
        "--strategy",
        "plb",
        "--mix",
        "25:75",
        "--T",
        "200",
        "--duration",
        "40s",
    ]);
    cmd.args(["--via-proxy", "--raw", "--checks", "warn", "--progress", "lines", "--out", out_dir.to_str().unwrap()]);
    let out = run_within(cmd, Duration::from_secs(180));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "run --via-proxy: {stderr}");
    assert!(stdout.contains("via a plbbench proxy process"), "{stdout}");
    let pid = proxy_pid(&stderr);
    assert!(!proxy_alive(pid), "the proxy child {pid} outlived the run");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap()).unwrap();
    let via = summary["settings"]["via_proxy"].as_str().unwrap_or_default();
    assert!(via.starts_with("plbbench proxy process at 127.0.0.1:"), "{via}");
    let proxy = summary["verdicts"].as_array().unwrap().iter().find(|v| v["name"] == "proxy").expect("a proxy verdict");
    assert_eq!(proxy["ok"], true, "{proxy}");
    assert_logins_measured(&summary);
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(html.contains("routed by") && html.contains("plbbench proxy process at"), "the report says so");
    // The proxy's own events: r1 goes down at the premium fault and its
    // probes see it; the roles are repaired.
    let events = csv_rows(&out_dir.join("events.csv"));
    let first_fault: f64 = events.iter().find(|e| e["kind"] == "fault").expect("a fault row")["t_s"].parse().unwrap();
    assert!(events.iter().any(|e| e["kind"] == "detect" && e["replica"] == "r1"), "{events:?}");
    assert!(events.iter().any(|e| e["kind"] == "role"), "{events:?}");
    // Before the fault the roles are the reference (r1 r2 P, r3 M, r4 r5
    // F): Premium only on P or M, Freemium never on P, and Premium on P.
    let queries = csv_rows(&out_dir.join("queries.csv"));
    let before: Vec<_> = queries
        .iter()
        .filter(|q| q["start_us"].parse::<f64>().unwrap() / 1e6 < first_fault && q["ok"] == "true")
        .collect();
    let on = |class: &str, replicas: &[&str]| {
        before.iter().filter(|q| q["class"] == class && replicas.contains(&q["replica"].as_str())).count()
    };
    assert!(on("P", &["r1", "r2"]) > 0 && on("F", &["r4", "r5"]) > 0, "both classes ran: {}", before.len());
    assert_eq!(on("P", &["r4", "r5"]), 0, "Premium on an F replica before the fault");
    assert_eq!(on("F", &["r1", "r2"]), 0, "Freemium on a P replica before the fault");
    // Killed with SIGKILL, the run cannot stop its proxy or its generator
    // children: the kernel does (their parent-death signal).
    let mut cmd = c.plbbench(&[
        "run",
        "--workload",
        "analytics",
        "--T",
        "20",
        "--duration",
        "60s",
        "--generators",
        "2",
        "--progress",
        "lines",
    ]);
    cmd.args(["--out", c.root.join("killed").to_str().unwrap()]);
    let log = c.root.join("killed.stderr");
    let mut run =
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
    let began = Instant::now();
    let pid = loop {
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        if said.contains("clients go through a plbbench proxy process") {
            break proxy_pid(&said);
        }
        assert!(began.elapsed() < Duration::from_secs(120) && run.try_wait().unwrap().is_none(), "{said}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(proxy_alive(pid));
    let children = two_generators(&mut run);
    run.kill().unwrap();
    run.wait().unwrap();
    let gone = Instant::now();
    while proxy_alive(pid) {
        assert!(gone.elapsed() < Duration::from_secs(10), "the proxy child {pid} outlived a killed run");
        std::thread::sleep(Duration::from_millis(50));
    }
    for child in children {
        while generator_alive(child) {
            assert!(gone.elapsed() < Duration::from_secs(30), "generator {child} outlived a killed run");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `run --generators 2` (docs/scale.md): two generator processes through
/// one proxy write one run folder whose books balance, each query once,
/// Premium on Premium's replicas before the fault; the `generators` check
/// states both children, and neither outlives the run.
#[test]
fn a_run_with_two_generators_through_one_proxy() {
    if !have_postgres() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::up();
    let out_dir = c.root.join("generators");
    let mut cmd =
        c.plbbench(&["run", "--workload", "analytics", "--T", "40", "--duration", "20s", "--generators", "2"]);
    cmd.args(["--raw", "--checks", "warn", "--progress", "none", "--out", out_dir.to_str().unwrap()]);
    let out = run_within(cmd, Duration::from_secs(180));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "run --generators 2: {stderr}");
    assert!(stdout.contains("via a plbbench proxy process"), "{stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap()).unwrap();
    assert_logins_measured(&summary);
    let verdict =
        |name: &str| summary["verdicts"].as_array().unwrap().iter().find(|v| v["name"] == name).cloned().expect(name);
    assert_eq!(verdict("accounting")["ok"], true);
    assert_eq!(verdict("proxy")["ok"], true, "{}", verdict("proxy"));
    let g = verdict("generators");
    let detail = g["detail"].as_str().unwrap().to_string();
    assert!(
        detail.starts_with("2 generator processes") && detail.contains("g0 pid") && detail.contains("g1 pid"),
        "{g}"
    );
    for pid in detail.split(" pid ").skip(1).map(|s| s.split(':').next().unwrap().parse::<i32>().unwrap()) {
        assert!(!generator_alive(pid), "generator {pid} outlived the run");
    }
    let queries = csv_rows(&out_dir.join("queries.csv"));
    assert!(!queries.is_empty());
    let mut seen = std::collections::BTreeSet::new();
    for q in &queries {
        assert!(seen.insert((q["session"].clone(), q["intended_us"].clone())), "a query counted twice: {q:?}");
    }
    let sessions: std::collections::BTreeSet<u64> = queries.iter().map(|q| q["session"].parse().unwrap()).collect();
    assert!(sessions.iter().any(|s| s % 2 == 0) && sessions.iter().any(|s| s % 2 == 1), "both generators ran");
    let events = csv_rows(&out_dir.join("events.csv"));
    let first_fault: f64 = events.iter().find(|e| e["kind"] == "fault").expect("a fault row")["t_s"].parse().unwrap();
    let before = |class: &str, replicas: &[&str]| {
        queries
            .iter()
            .filter(|q| q["start_us"].parse::<f64>().unwrap() / 1e6 < first_fault && q["class"] == class)
            .filter(|q| replicas.contains(&q["replica"].as_str()))
            .count()
    };
    assert_eq!(before("F", &["r1", "r2"]), 0, "Freemium on a P replica before the fault");
    assert_eq!(before("P", &["r4", "r5"]), 0, "Premium on an F replica before the fault");
}

/// The pids of `run`'s two generator children, once both are up (within
/// 60 s, while the run goes on).
fn two_generators(run: &mut std::process::Child) -> Vec<i32> {
    let began = Instant::now();
    loop {
        let pids = generator_children(run.id());
        if pids.len() == 2 {
            return pids;
        }
        assert!(began.elapsed() < Duration::from_secs(60), "two generator children never appeared");
        assert!(run.try_wait().unwrap().is_none(), "the run ended before its generators started");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The children of `parent` whose command line holds `--generator-child`.
fn generator_children(parent: u32) -> Vec<i32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // ppid is the second field after the command name's closing parenthesis.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(parent) && generator_alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// A generator child killed in the middle of a run stops the run at once
/// (not at its planned end), says so on stderr, fails the accounting check
/// and writes nothing; no other child outlives the run.
#[test]
fn a_generator_that_dies_stops_the_run_and_fails_its_accounting() {
    if !have_postgres() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::up();
    let out_dir = c.root.join("generator-dies");
    let mut cmd =
        c.plbbench(&["run", "--workload", "analytics", "--T", "40", "--duration", "120s", "--generators", "2"]);
    cmd.args(["--checks", "warn", "--progress", "none", "--out", out_dir.to_str().unwrap()]);
    let mut run = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let children = two_generators(&mut run);
    // Let the run get under way, then kill one child outright.
    std::thread::sleep(Duration::from_secs(8));
    let killed_at = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(children[1]), nix::sys::signal::Signal::SIGKILL).unwrap();
    while run.try_wait().unwrap().is_none() {
        if killed_at.elapsed() > Duration::from_secs(60) {
            let _ = run.kill();
            panic!("the run went on for 60 s after generator pid {} died", children[1]);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let stopped_after = killed_at.elapsed();
    let out = run.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "a run with a dead generator succeeded: {stderr}");
    assert!(stopped_after < Duration::from_secs(30), "stopped {stopped_after:?} after the kill: {stderr}");
    assert!(stderr.contains(&format!("generator 1 (pid {}) died", children[1])), "{stderr}");
    assert!(stderr.contains("accounting check failed"), "{stderr}");
    assert!(!out_dir.exists(), "a run folder was written");
    assert!(!generator_alive(children[0]), "the surviving generator outlived the run");
}

/// No config file: `--listen 0.0.0.0:P` is refused before anything starts
/// (exit 2, one line); on 127.0.0.1 the documented defaults serve psql
/// (trust; `application_name` starting with `premium` is Premium, any
/// other session Freemium, as the proxy's metrics count them).
#[test]
fn a_proxy_without_config_serves_loopback_only() {
    if !have_postgres() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    assert!(Command::new("psql").arg("--version").output().is_ok_and(|o| o.status.success()), "psql not found");
    let c = Cluster::up_with(1);
    let open = run_within(
        c.plbbench(&["proxy", "--replicas", "1", "--strategy", "rr", "--listen", &format!("0.0.0.0:{}", free_port())]),
        Duration::from_secs(30),
    );
    let err = text(&open.stderr);
    assert_eq!(open.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--listen") && err.contains("not a loopback address"), "{err}");
    let (first, p) = Proxy::trust(&c, &["--replicas", "1", "--strategy", "rr", "--T", "10"]);
    assert!(first.contains("auth trust"), "{first}");
    for app in ["premium-try", "free-try", ""] {
        let (ok, rows, err) = p.psql("plbbench", "", app, "SELECT 40 + 2");
        assert!(ok && rows == "42", "{app:?}: {rows} {err}");
    }
    let m = p.scrape();
    let routed = |class: &str| {
        m.get(&format!("plbbench_proxy_sessions_total{{class=\"{class}\",replica=\"r1\",outcome=\"routed\"}}")).copied()
    };
    assert_eq!((routed("premium"), routed("freemium")), (Some(1.0), Some(2.0)), "{m:?}");
    drop(p);
    relay_threads(&c);
}

/// `--threads`: 0 is refused with one line naming it (exit 2); with 3
/// pump threads, sessions handed to each in turn, some at once, are
/// served, and SIGINT stops the proxy cleanly.
fn relay_threads(c: &Cluster) {
    let zero = run_within(
        c.plbbench(&["proxy", "--replicas", "1", "--strategy", "rr", "--threads", "0"]),
        Duration::from_secs(30),
    );
    let err = text(&zero.stderr);
    assert_eq!(zero.status.code(), Some(2), "{err}");
    assert!(err.lines().count() == 1 && err.contains("--threads"), "{err}");
    let port = free_port();
    let stderr = c.root.join("threads.stderr");
    let mut cmd = c.plbbench(&["proxy", "--replicas", "1", "--strategy", "rr", "--T", "10", "--threads", "3"]);
    cmd.args(["--listen", &format!("127.0.0.1:{port}")]);
    let (child, out, first) = spawn_proxy(cmd, &stderr);
    assert!(first.contains("3 pump threads"), "{first}");
    let mut p = Proxy { child, _out: out, port, metrics: 0, stderr };
    let together: Vec<_> = (0..4)
        .map(|_| {
            let mut cmd = Command::new("psql");
            cmd.args(["-XAtq", &p.dsn("plbbench"), "-c", "SELECT pg_sleep(0.5), 40 + 2"]).env("PGAPPNAME", "free-t");
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
        })
        .collect();
    for s in together {
        let out = s.wait_with_output().unwrap();
        assert!(out.status.success() && text(&out.stdout).trim() == "|42", "{}", text(&out.stderr));
    }
    for app in ["premium-t", "free-t"] {
        let (ok, rows, err) = p.psql("plbbench", "", app, "SELECT 40 + 2");
        assert!(ok && rows == "42", "{app:?}: {rows} {err}");
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(p.child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let limit = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = p.child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < limit, "the proxy did not stop after SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success() && p.stderr().contains("stopped: 6 sessions served"), "{status:?}: {}", p.stderr());
}

/// The Python environment scripts/install-pyclients.sh makes (psycopg 3,
/// psycopg-pool, asyncpg): its interpreter, or `None` when it is missing
/// and PLBBENCH_PYCLIENTS=0 said to go without it (a missing environment
/// fails the test otherwise).
fn pyclients() -> Option<PathBuf> {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pyclients/bin/python");
    let found = Command::new(&python)
        .args(["-c", "import psycopg, psycopg_pool, asyncpg"])
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(python);
    }
    let why = format!("{} cannot import psycopg, psycopg_pool and asyncpg", python.display());
    if std::env::var("PLBBENCH_PYCLIENTS").as_deref() == Ok("0") {
        eprintln!("SKIPPING the Python clients check: {why}, and PLBBENCH_PYCLIENTS=0 is set");
        return None;
    }
    panic!("Python clients check: {why}: run scripts/install-pyclients.sh, or set PLBBENCH_PYCLIENTS=0");
}

/// psycopg 3 and asyncpg through the proxy against a five-replica cluster,
/// logging in with SCRAM from the users file (tests/python/clients.py, whose
/// checks are listed in its header): named prepared statements, COPY in and
/// out, server-side cursors, cancels (statement_timeout and CancelRequests
/// through the proxy), LISTEN/NOTIFY, asyncpg naming itself late, a
/// Premium and a Freemium pool at once with every query on its class's role
/// (roles from the proxy's metrics, each query's replica from
/// inet_server_port()), and a Freemium replica killed under both drivers
/// (08006 within seconds, reconnects on survivors).
#[test]
fn python_clients_through_the_proxy() {
    if !have_postgres() {
        return;
    }
    let Some(python) = pyclients() else { return };
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::up();
    std::fs::write(c.root.join("users.txt"), format!("\"alice\" \"{PASSWORD}\"\n")).unwrap();
    let config = c.root.join("proxy.toml");
    std::fs::write(&config, "users_file = \"users.txt\"\n[class]\nparam = \"application_name\"\n").unwrap();
    let p = Proxy::start(&c, &config);
    let ports: Vec<String> = c.ports.iter().map(u16::to_string).collect();
    let mut cmd = Command::new(python);
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/clients.py"))
        .args(["--port", &p.port.to_string(), "--metrics-port", &p.metrics.to_string()])
        .args(["--user", "alice", "--password", PASSWORD, "--replicas", &ports.join(",")])
        .args(["--cluster-password", &c.password, "--plbbench", BIN])
        .env("PLBBENCH_STATE_DIR", c.root.join("local"));
    let out = run_within(cmd, Duration::from_secs(180));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    eprintln!("{stdout}");
    assert!(out.status.success() && stdout.contains("all checks passed"), "clients.py: {stdout}\n{stderr}");
    assert!(!p.stderr().contains(PASSWORD), "a secret in the proxy's log");
}

/// Makes a test CA and a certificate for 127.0.0.1 signed by it in `dir`
/// with openssl: ca.pem, server.pem, server.key.
fn test_ca(dir: &Path) {
    let openssl = |args: &[&str]| {
        let mut cmd = Command::new("openssl");
        cmd.args(args).current_dir(dir);
        let out = run_within(cmd, Duration::from_secs(60));
        assert!(out.status.success(), "openssl {args:?}: {}", text(&out.stderr));
    };
    let subject = |cn: &str| format!("/CN={cn}");
    let ca_subject = subject("plbbench test CA");
    openssl(
        &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2"]
            .into_iter()
            .chain(["-subj", ca_subject.as_str()])
            .collect::<Vec<_>>(),
    );
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    let server_subject = subject("127.0.0.1");
    openssl(
        &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj"]
            .into_iter()
            .chain([server_subject.as_str()])
            .collect::<Vec<_>>(),
    );
    let sign = ["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial"];
    openssl(&[&sign[..], &["-days", "2", "-extfile", "ext.cnf", "-out", "server.pem"]].concat());
}

/// `[tls] mode = "require"` over two replicas: psql with
/// `sslmode=verify-full` and the test CA is served (so the proxy spoke TLS
/// with a certificate for 127.0.0.1), a plain-text login gets a FATAL that
/// says why, and a key file that cannot be read stops the proxy with one
/// line, exit 2. pgjdbc with `ssl=true&sslmode=verify-full` and the test
/// CA: with its default settings (its class arrives late, over TLS) it is
/// served, and a replica killed under its session gives SQLSTATE 08006
/// within seconds while a reconnect lands on the survivor
/// (tests/java/KillCheck.java).
#[test]
fn tls_to_clients() {
    if !have_postgres() {
        return;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let openssl = Command::new("openssl").arg("version").output().is_ok_and(|o| o.status.success());
    assert!(openssl, "openssl not found");
    let c = Cluster::up_with(2);
    test_ca(&c.root);
    let config = c.root.join("tls.toml");
    let write = |key: &str| {
        let tls = format!("[tls]\nmode = \"require\"\ncert_file = \"server.pem\"\nkey_file = \"{key}\"\n");
        std::fs::write(&config, tls).unwrap();
    };
    let args = |port: u16| {
        let mut cmd = c.plbbench(&["proxy", "--config", config.to_str().unwrap(), "--replicas", "2"]);
        cmd.args([
            "--strategy",
            "rr",
            "--T",
            "10",
            "--probe-interval-ms",
            "500",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ]);
        cmd
    };
    write("missing.key");
    let out = run_within(args(free_port()), Duration::from_secs(30));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("tls.key_file") && err.contains("missing.key"), "{err}");
    write("server.key");
    let port = free_port();
    let mut cmd = args(port);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(std::fs::File::create(c.root.join("proxy.stderr")).unwrap());
    let mut child = cmd.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let p = Proxy { child, _out: out, port, metrics: free_port(), stderr: c.root.join("proxy.stderr") };
    assert!(first.contains("tls require"), "{first}");
    let psql = |sslmode: &str| {
        let ca = c.root.join("ca.pem");
        let dsn = format!("{} sslmode={sslmode} sslrootcert={}", p.dsn("plbbench"), ca.display());
        let mut cmd = Command::new("psql");
        cmd.args(["-XAtq", &dsn, "-c", "SELECT 40 + 2"]).env("PGAPPNAME", "premium-tls");
        let out = run_within(cmd, Duration::from_secs(60));
        (out.status.success(), text(&out.stdout).trim().to_string(), text(&out.stderr))
    };
    let (ok, rows, err) = psql("verify-full");
    assert!(ok && rows == "42", "TLS login: {rows} {err}");
    let (ok, _, err) = psql("disable");
    assert!(!ok && err.contains("accepts TLS connections only"), "{err}");
    pgjdbc_tls(&c, &p);
    drop(p);
}

/// pgjdbc through the TLS proxy with `sslmode=verify-full` against the
/// test CA: LateName (class named late, over TLS), then KillCheck (a
/// replica killed under the session: 08006, a reconnect on the survivor).
fn pgjdbc_tls(c: &Cluster, p: &Proxy) {
    let Some(classpath) = java_classes(c) else { return };
    let ca = c.root.join("ca.pem");
    let url = format!(
        "jdbc:postgresql://127.0.0.1:{}/plbbench?ssl=true&sslmode=verify-full&sslrootcert={}",
        p.port,
        ca.display()
    );
    let said = java(&classpath, "LateName", &[&url, "plbbench", "", "premium-jdbc-tls"]);
    let fields: Vec<&str> = said.split_whitespace().collect();
    assert_eq!(fields.get(1..), Some(&["premium-jdbc-tls", "3"][..]), "{said}");
    let ports: Vec<String> = c.ports.iter().map(u16::to_string).collect();
    assert!(ports.iter().any(|x| x == fields[0]), "pgjdbc over TLS on port {}: {said}", fields[0]);
    let mut kill = Command::new("java");
    kill.args(["-cp", &classpath, "KillCheck", &url, "plbbench", "", "free-jdbc-kill", BIN, &ports.join(",")])
        .env("PLBBENCH_STATE_DIR", c.root.join("local"));
    let out = run_within(kill, Duration::from_secs(60));
    let (said, err) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "KillCheck: {said}{err}");
    let words: Vec<&str> = said.split_whitespace().collect();
    let (victim, state, ms) = (words[1], words[3], words[5].parse::<u64>().unwrap());
    assert_eq!(state, "08006", "pgjdbc's SQLSTATE when {victim} was killed: {said}{err}");
    assert!(err.contains(&format!("the connection to replica {victim} was lost")), "{err}");
    assert!(ms < 10_000, "pgjdbc's error came {ms} ms after the kill");
    let survivor = &ports[if victim == "r1" { 1 } else { 0 }];
    assert_eq!(words.get(7..), Some(&["reconnected", survivor.as_str()][..]), "{said}");
}
