//! No client can take PLB's replicas down (docs/resilience.md, "What counts
//! as failure evidence"), on a real five-replica local cluster through
//! `plbbench proxy` (trust on loopback, probes every 500 ms):
//! - 100 sessions that break the protocol after login (an unknown message
//!   type, a 2 GiB, a negative and a too-long declared length, 64 KiB of
//!   random bytes, a second startup packet, a 64 MiB query, a client gone
//!   mid-message, ...), then `pg_terminate_backend` on 10 sessions: no
//!   replica is declared down, the roles stay (2,1,2), each client gets
//!   the server's own FATAL alone (never the proxy's "replica was lost"),
//!   and psql and pgbench through the proxy are served throughout;
//! - the misbehaving client is the well-behaved pgbench's neighbour (the
//!   same address and user): past its allowance of protocol violations it
//!   is logged, and neither it nor pgbench is refused; only a proxy whose
//!   config sets `refuse_protocol_violators` refuses it with 53400,
//!   logged once, counted, and other users are not;
//! - a replica SIGKILLed under load is still detected, within the probe
//!   interval plus the confirming probe.
//!
//! Needs PostgreSQL with psql and pgbench (scripts/install-postgres.sh).

mod common;
use common::have_postgres;
use common::proxy::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

/// A raw client logged in through the proxy as `user` with
/// `application_name` `app`, past its first ReadyForQuery; or the FATAL
/// the proxy answered instead (its SQLSTATE).
fn login(port: u16, user: &str, app: &str) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let body = format!("user\0{user}\0database\0plbbench\0application_name\0{app}\0\0");
    s.write_all(&packet(3 << 16, body.as_bytes())).unwrap();
    loop {
        let mut header = [0u8; 5];
        s.read_exact(&mut header).unwrap();
        let len = u32::from_be_bytes(header[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len - 4];
        s.read_exact(&mut body).unwrap();
        match header[0] {
            b'Z' => return Ok(s),
            b'E' => return Err(fields(&body).code),
            _ => {}
        }
    }
}

/// An ErrorResponse's fields.
struct Error {
    severity: String,
    code: String,
    message: String,
}

fn fields(body: &[u8]) -> Error {
    let field = |tag: u8| body.split(|&b| b == 0).find(|f| f.first() == Some(&tag)).map(|f| text(&f[1..]));
    Error {
        severity: field(b'V').or_else(|| field(b'S')).unwrap_or_default(),
        code: field(b'C').unwrap_or_default(),
        message: field(b'M').unwrap_or_default(),
    }
}

/// Every ErrorResponse in a stream of server messages, in order.
fn errors(mut rest: &[u8]) -> Vec<Error> {
    let mut found = Vec::new();
    while rest.len() >= 5 {
        let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
        if rest.len() < 1 + len {
            break;
        }
        if rest[0] == b'E' {
            found.push(fields(&rest[5..1 + len]));
        }
        rest = &rest[1 + len..];
    }
    found
}

/// Reads until the proxy closes the connection (or 20 s pass).
fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

/// A message of type `tag` with `body`.
fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend(((4 + body.len()) as u32).to_be_bytes());
    m.extend(body);
    m
}

/// How PostgreSQL ends a session for what its client sent.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ends {
    /// With its own FATAL 08P01 (an unknown message type).
    Fatal,
    /// With no word, only a line in its log (a message length it cannot
    /// take: `invalid message length` is a COMMERROR).
    Silently,
    /// It does not: the session goes on, and the client leaves (with a
    /// Terminate, or by closing mid-message).
    ClientLeaves,
}

/// What a misbehaving client sends after login, and how the server ends
/// the session for it.
fn misbehaviours() -> Vec<(&'static str, Vec<u8>, Ends)> {
    let mut random = vec![0u8; 64 * 1024];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in &mut random {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = (x >> 24) as u8;
    }
    random[0] = 0xfe;
    let mut huge_query = message(b'Q', format!("SELECT 1 /* {} */ ~~~ syntax error", "x".repeat(64 << 20)).as_bytes());
    huge_query.pop();
    huge_query.push(0);
    let mut cut = message(b'Q', &vec![b'x'; 1 << 20]);
    cut.truncate(4096);
    vec![
        ("unknown message type 0xfe", vec![0xfe, 0, 0, 0, 8, 0, 0, 0, 0], Ends::Fatal),
        ("2 GiB declared length", vec![b'Q', 0x80, 0, 0, 0], Ends::Silently),
        ("negative declared length", vec![b'Q', 0xff, 0xff, 0xff, 0xf0], Ends::Silently),
        ("length below 4", vec![b'Q', 0, 0, 0, 2], Ends::Silently),
        ("a Sync of 64 KiB", message(b'S', &vec![0u8; 64 * 1024]), Ends::Silently),
        ("64 KiB of random bytes", random, Ends::Fatal),
        ("a second startup packet", packet(3 << 16, b"user\0x\0\0"), Ends::Fatal),
        ("a password message after login", message(b'p', b"secret\0"), Ends::Fatal),
        ("a 64 MiB query with a syntax error", huge_query, Ends::ClientLeaves),
        ("a client gone mid-message", cut, Ends::ClientLeaves),
    ]
}

/// pgbench through the proxy as user plbbench and `app` ([`select1_bench`]).
fn pgbench(c: &Cluster, p: &Proxy, app: &str, secs: u64) -> std::process::Child {
    select1_bench(c, &p.dsn("plbbench"), app, secs)
}

/// The proxy's event lines that declare a replica down.
fn downs(p: &Proxy) -> Vec<String> {
    p.stderr().lines().filter(|l| l.contains(" detect ") && l.contains(" down ")).map(str::to_string).collect()
}

#[test]
fn no_client_can_take_a_replica_down_and_a_killed_one_is_still_detected() {
    if !have_postgres() {
        return;
    }
    for tool in ["psql", "pgbench"] {
        let found = Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
        assert!(found, "{tool} not found: run scripts/install-postgres.sh as root");
    }
    let c = Cluster::up();
    let (_, p) = Proxy::trust(&c, &["--strategy", "plb", "--T", "40", "--theta", "50", "--probe-interval-ms", "500"]);
    let roles = p.roles();
    assert_eq!(roles.iter().filter(|&&r| r == 'P').count(), 2, "the paper's 2,1,2 at start: {roles:?}");
    let load = [pgbench(&c, &p, "premium-bench", 20), pgbench(&c, &p, "free-bench", 20)];

    // 100 misbehaving sessions as the pgbench clients' own address and
    // user, far past the allowance: none is refused, so no neighbour is.
    let cases = misbehaviours();
    let began = Instant::now();
    for i in 0..100 {
        let (what, bytes, ends) = &cases[i % cases.len()];
        let mut s = login(p.port, "plbbench", "free-evil").unwrap_or_else(|c| panic!("session {i} refused with {c}"));
        let _ = s.write_all(bytes);
        if *ends == Ends::ClientLeaves {
            let _ = s.write_all(&message(b'X', b""));
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
        let reply = read_to_close(&mut s);
        let fatals: Vec<Error> = errors(&reply).into_iter().filter(|e| e.severity == "FATAL").collect();
        for e in &fatals {
            assert!(!e.message.contains("was lost"), "{what}: the proxy's own FATAL: {}", e.message);
        }
        if *ends == Ends::Fatal {
            assert_eq!(fatals.len(), 1, "{what}: the server's FATAL alone");
            assert_eq!(fatals[0].code, "08P01", "{what}: {}", fatals[0].message);
        } else {
            assert!(fatals.is_empty(), "{what}: no FATAL, as the server sent none");
        }
        if i % 20 == 19 {
            let (ok, one, err) = p.psql("plbbench", "", "premium-psql", "SELECT 1");
            assert!(ok && one == "1", "psql through the proxy after {} sessions: {err}", i + 1);
        }
    }
    let stderr = p.stderr();
    let said = stderr.matches("user \"plbbench\": more than 10 sessions ended in protocol violations").count();
    let most = began.elapsed().as_secs() as usize + 1;
    assert!((1..=most).contains(&said), "said {said} times, at most one episode a second: {stderr}");
    assert!(stderr.contains("its logins are still served"), "{stderr}");
    let m = p.scrape();
    assert_eq!(m.get("plbbench_proxy_violation_refusals_total").copied().unwrap_or(0.0), 0.0, "{m:?}");
    let ended = |code: &str| m.get(&format!("plbbench_proxy_server_ended_total{{sqlstate=\"{code}\"}}")).copied();
    assert!(ended("08P01").is_some_and(|n| n >= 30.0) && ended("none").is_some_and(|n| n >= 30.0), "{m:?}");

    // pg_terminate_backend on 10 sessions.
    let mut victims: Vec<TcpStream> = (0..10).map(|_| login(p.port, "plbbench", "free-victim").unwrap()).collect();
    let terminated: u32 = (0..5)
        .map(|r| {
            let sql =
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'free-victim'";
            c.psql(r, sql).parse::<u32>().unwrap()
        })
        .sum();
    assert_eq!(terminated, 10);
    for v in &mut victims {
        let fatals: Vec<Error> = errors(&read_to_close(v)).into_iter().filter(|e| e.severity == "FATAL").collect();
        assert_eq!(fatals.len(), 1, "the server's FATAL alone");
        assert_eq!(fatals[0].code, "57P01", "{}", fatals[0].message);
    }

    for mut b in load {
        let status = b.wait().unwrap();
        let (mut out, mut err) = (String::new(), String::new());
        b.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        b.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        assert!(status.success(), "pgbench through the proxy: {out}{err}");
        assert!(out.contains("number of failed transactions: 0"), "{out}");
        assert!(!err.contains("aborted") && !err.contains("53400"), "a neighbour's client refused: {err}");
    }
    let (ok, _, err) = p.psql("plbbench", "", "free-psql", "SELECT 1");
    assert!(ok, "{err}");
    assert!(downs(&p).is_empty(), "a replica declared down: {:?}", downs(&p));
    assert_eq!(p.roles(), roles, "the roles are unchanged");
    let healthy =
        p.scrape().iter().filter(|(k, &v)| k.starts_with("plbbench_router_replica_healthy{") && v == 1.0).count();
    assert_eq!(healthy, 5);

    // Opt-in: a proxy whose config sets refuse_protocol_violators refuses
    // a client past its allowance with 53400 (logged once, counted), and
    // not another user at its address.
    let config = c.root.join("refuse.toml");
    std::fs::write(&config, "refuse_protocol_violators = true\n").unwrap();
    let (_, strict) =
        Proxy::trust(&c, &["--config", config.to_str().unwrap(), "--T", "40", "--probe-interval-ms", "500"]);
    let mut refused = 0;
    for i in 0..15 {
        match login(strict.port, "mallory", "free-evil") {
            Ok(mut s) => {
                let _ = s.write_all(&cases[0].1);
                let _ = read_to_close(&mut s);
            }
            Err(code) => {
                assert!(i >= 10 && code == "53400", "session {i} refused at login with {code}");
                refused += 1;
            }
        }
    }
    assert!(refused >= 1, "the client past its allowance was not refused");
    let (ok, _, err) = strict.psql("plbbench", "", "free-psql", "SELECT 1");
    assert!(ok, "another user at the same address: {err}");
    let said = strict.stderr().matches("user \"mallory\": more than 10 sessions").count();
    assert_eq!(said, 1, "one line per episode: {}", strict.stderr());
    let m = strict.scrape();
    assert_eq!(m.get("plbbench_proxy_violation_refusals_total"), Some(&f64::from(refused)), "{m:?}");
    drop(strict);

    // A real SIGKILL is still detected, with sessions open and without.
    let load = pgbench(&c, &p, "free-bench", 8);
    std::thread::sleep(Duration::from_secs(1));
    let killed = Instant::now();
    c.fault("down", "r3");
    let detected = loop {
        if let Some(line) = downs(&p).into_iter().next() {
            break line;
        }
        assert!(killed.elapsed() < Duration::from_secs(10), "r3 never detected: {}", p.stderr());
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = killed.elapsed();
    assert!(detected.contains("detect r3 down"), "{detected}");
    assert!(took < Duration::from_millis(1500), "detected after {took:?} (probe interval 500 ms): {detected}");
    let mut load = load;
    let _ = load.wait();
    eprintln!("r3 SIGKILLed: {detected} after {took:?}");
}
