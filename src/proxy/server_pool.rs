//! Server connections kept for later sessions
//! ([proxy](docs/proxy.md#server-connections-reused)): a login to a
//! replica costs it a new backend process and the proxy a SCRAM key
//! derivation, which made a connection-per-transaction client (`pgbench
//! -C`) cost the proxy several times PgBouncer's CPU. PLB still picks the
//! replica at every session's start; what is reused is only the
//! connection to the replica it picked.
//!
//! A session's server connection comes back here when its client said
//! Terminate with the server idle (`relay` withholds that Terminate, see
//! [`super::framing::Framing::asks`]); it is reset with `DISCARD ALL`, as
//! PgBouncer's `server_reset_query` does ([`RELEASE`]: its settings go back
//! to its login's, `application_name` among them), and kept under the
//! replica, the database and the client's other startup parameters (the
//! server's session defaults), with the greeting its login sent
//! (ParameterStatus, BackendKeyData, ReadyForQuery), replayed to the next
//! client as if it had logged in. It is handed out at once (a peer that
//! closed or spoke is dropped first); one kept longer than [`CHECK_DELAY`]
//! is first asked [`CHECK`], as PgBouncer's `server_check_query` after its
//! `server_check_delay`. It is closed after the idle timeout, and every
//! one of a replica is closed when the controller stops holding the
//! replica healthy, when its role changes (its kept connections were for
//! the classes the old role served), or when a login to it finds the
//! server full.

use super::late_class;
use crate::core::model::{ReplicaId, Role};
use bytes::BytesMut;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What a kept connection must match: the replica, the database and the
/// other startup parameters of the login that opened it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub r: ReplicaId,
    pub database: String,
    pub params: Vec<(String, String)>,
}

/// Where a session's server connection came from: what it is kept under,
/// and the greeting its login sent.
#[derive(Clone, Debug)]
pub(super) struct Origin {
    pub key: Key,
    pub greeting: Vec<u8>,
}

/// One connection kept idle.
struct Idle {
    stream: std::net::TcpStream,
    greeting: Vec<u8>,
    since: Instant,
}

/// The kept connections, and how many logins they saved.
pub(super) struct ServerPool {
    /// Connections kept per replica at most; 0 keeps none.
    per_replica: usize,
    /// A connection idle this long is closed.
    idle_timeout: Duration,
    idle: Mutex<HashMap<Key, Vec<Idle>>>,
    /// Connections being reset on their way back, by key.
    releasing: Mutex<HashMap<Key, usize>>,
    /// Told whenever a reset ends (kept or not).
    released: tokio::sync::Notify,
    /// Each replica's role when [`ServerPool::expire`] last looked.
    roles: Mutex<Vec<Role>>,
    /// Sessions given a kept connection, and logins made.
    pub reused: AtomicU64,
    pub logins: AtomicU64,
}

/// What a connection that comes back is told: PgBouncer's
/// `server_reset_query`, which also gives `application_name` back its
/// login's value (a kept connection waits on its replica, idle, under the
/// name of the sessions it serves).
const RELEASE: [&str; 1] = ["DISCARD ALL"];

/// A kept connection idle longer than this is checked before it is handed
/// out (PgBouncer's `server_check_delay`); a younger one is handed out at
/// once, so a connection-per-transaction client's login costs no round
/// trip to the replica.
const CHECK_DELAY: Duration = Duration::from_secs(30);

/// The check (PgBouncer's `server_check_query`).
const CHECK: [&str; 1] = ["SELECT 1"];

impl ServerPool {
    pub fn new(per_replica: usize, idle_timeout: Duration) -> ServerPool {
        ServerPool {
            per_replica,
            idle_timeout,
            idle: Mutex::new(HashMap::new()),
            releasing: Mutex::new(HashMap::new()),
            released: tokio::sync::Notify::new(),
            roles: Mutex::new(Vec::new()),
            reused: AtomicU64::new(0),
            logins: AtomicU64::new(0),
        }
    }

    /// Whether connections are kept at all.
    pub fn on(&self) -> bool {
        self.per_replica > 0
    }

    /// The newest kept connection for `key` that is still open and silent
    /// (and, when kept longer than [`CHECK_DELAY`], answers [`CHECK`] within
    /// `limit`), with its greeting; older or broken ones met on the way are
    /// closed. When none is idle but one
    /// of `key` is being reset on its way back, the session waits for it
    /// (within `limit`), as a PgBouncer client waits for a server of its
    /// pool: a connection-per-transaction client logs in again while its
    /// last session's connection is still being reset, and a new login
    /// would cost the replica a backend each time.
    pub async fn take(&self, key: &Key, limit: Duration) -> Option<(std::net::TcpStream, Vec<u8>)> {
        let until = tokio::time::Instant::now() + limit;
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            match self.pop(key) {
                Some(c) if c.since.elapsed() < CHECK_DELAY => {
                    // Left out of tokio's epoll: a pump relays it.
                    self.reused.fetch_add(1, Ordering::Relaxed);
                    return Some((c.stream, c.greeting));
                }
                Some(c) => {
                    let Ok(mut stream) = TcpStream::from_std(c.stream) else { continue };
                    if let Ok(true) = tokio::time::timeout(limit, ask(&mut stream, &CHECK)).await {
                        let Ok(stream) = stream.into_std() else { continue };
                        self.reused.fetch_add(1, Ordering::Relaxed);
                        return Some((stream, c.greeting));
                    }
                }
                None if self.releasing.lock().expect("server pool lock").contains_key(key) => {
                    tokio::time::timeout_at(until, released).await.ok()?;
                }
                None => return None,
            }
        }
    }

    /// The newest kept connection for `key` not past its idle time whose
    /// peer is open and silent; the others met on the way are closed.
    fn pop(&self, key: &Key) -> Option<Idle> {
        let mut idle = self.idle.lock().expect("server pool lock");
        let kept = idle.get_mut(key)?;
        while let Some(c) = kept.pop() {
            if c.since.elapsed() < self.idle_timeout && silent(&c.stream) {
                return Some(c);
            }
        }
        None
    }

    /// Closes every kept connection of `r`; how many there were.
    pub fn purge(&self, r: ReplicaId) -> usize {
        let mut idle = self.idle.lock().expect("server pool lock");
        let mut closed = 0;
        idle.retain(|k, v| {
            let of_r = k.r == r;
            closed += if of_r { v.len() } else { 0 };
            !of_r
        });
        closed
    }

    /// Closes connections past the idle timeout, and every one of a
    /// replica that `now` (each replica's health and role) says is no
    /// longer healthy or has changed role since the last call.
    pub fn expire(&self, now: &[(bool, Role)]) {
        let mut roles = self.roles.lock().expect("server pool lock");
        let changed =
            |r: ReplicaId| roles.get(r.idx()).is_some_and(|&was| now.get(r.idx()).is_some_and(|n| n.1 != was));
        let keeps = |r: ReplicaId| now.get(r.idx()).is_some_and(|n| n.0) && !changed(r);
        let mut idle = self.idle.lock().expect("server pool lock");
        idle.retain(|k, v| {
            v.retain(|c| c.since.elapsed() < self.idle_timeout);
            keeps(k.r) && !v.is_empty()
        });
        *roles = now.iter().map(|n| n.1).collect();
    }

    /// How many connections replica `r` keeps.
    pub fn kept_for(&self, r: ReplicaId) -> usize {
        kept_in(&self.idle.lock().expect("server pool lock"), r)
    }

    /// Whether replica `r` keeps fewer connections than its share.
    fn room(&self, r: ReplicaId) -> bool {
        self.kept_for(r) < self.per_replica
    }

    /// A session's connection coming back from a client that left with
    /// the server idle, when its replica has room for another: counted as
    /// being reset under its key until it is kept or dropped.
    pub fn returning(self: &Arc<Self>, origin: Origin) -> Option<Returning> {
        if !self.room(origin.key.r) {
            return None;
        }
        *self.releasing.lock().expect("server pool lock").entry(origin.key.clone()).or_default() += 1;
        Some(Returning { pool: self.clone(), origin })
    }

    /// A session's connection back from a client that left with the
    /// server idle, on a task (a TLS session's, or one a pump gave back):
    /// told [`RELEASE`] within `limit` and kept, unless the replica already
    /// keeps its share or that fails (then it is closed). A pump resets its
    /// sessions' connections itself ([`super::pump`]).
    pub async fn release(self: &Arc<Self>, origin: Origin, mut server: TcpStream, limit: Duration) {
        let Some(back) = self.returning(origin) else { return };
        if let Ok(true) = tokio::time::timeout(limit, ask(&mut server, &RELEASE)).await {
            if let Ok(stream) = server.into_std() {
                back.keep(stream);
            }
        }
    }
}

/// A connection on its way back to be kept ([`ServerPool::returning`]):
/// sent [`Returning::reset`], then kept once [`Returning::answered`] says
/// the server answered it idle. Dropped unkept, the connection is closed;
/// either way the sessions waiting for one of its key are told.
pub(super) struct Returning {
    pool: Arc<ServerPool>,
    origin: Origin,
}

impl Returning {
    /// What the server is sent: [`RELEASE`], as Query messages.
    pub fn reset() -> Vec<u8> {
        RELEASE.iter().flat_map(|s| query(s)).collect()
    }

    /// Whether the server's answer to [`Returning::reset`], as far as
    /// `buf` holds it, is whole: `Some(true)` when it succeeded and left
    /// the server idle with nothing after, `Some(false)` when it failed,
    /// `None` while more is to come.
    pub fn answered(buf: &[u8]) -> Option<bool> {
        answered(RELEASE.len(), buf)
    }

    /// Keeps `stream`, its reset answered idle (closed instead when the
    /// replica's share filled meanwhile).
    pub fn keep(mut self, stream: std::net::TcpStream) {
        let key = &self.origin.key;
        let mut idle = self.pool.idle.lock().expect("server pool lock");
        if kept_in(&idle, key.r) < self.pool.per_replica {
            // The greeting moves; the key stays for `drop`, and is copied
            // only for a key that keeps nothing yet.
            let c = Idle { stream, greeting: std::mem::take(&mut self.origin.greeting), since: Instant::now() };
            match idle.get_mut(key) {
                Some(kept) => kept.push(c),
                None => {
                    idle.insert(key.clone(), vec![c]);
                }
            }
        }
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        let mut releasing = self.pool.releasing.lock().expect("server pool lock");
        if let Some(n) = releasing.get_mut(&self.origin.key) {
            *n -= 1;
            if *n == 0 {
                releasing.remove(&self.origin.key);
            }
        }
        drop(releasing);
        self.pool.released.notify_waiters();
    }
}

/// How many connections `idle` keeps for replica `r`.
fn kept_in(idle: &HashMap<Key, Vec<Idle>>, r: ReplicaId) -> usize {
    idle.iter().filter(|(k, _)| k.r == r).map(|(_, v)| v.len()).sum()
}

/// Whether a kept connection's peer has neither closed nor said anything
/// (a server that is shutting down, or closed an idle session, speaks
/// first).
fn silent(stream: &std::net::TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(stream.peek(&mut b), Err(e) if e.kind() == ErrorKind::WouldBlock)
}

/// A Query message of `sql`.
fn query(sql: &str) -> Vec<u8> {
    let mut m = vec![b'Q'];
    m.extend(((4 + sql.len() + 1) as u32).to_be_bytes());
    m.extend(sql.as_bytes());
    m.push(0);
    m
}

/// The most bytes an answer to the proxy's own queries may take.
const MAX_ANSWER: usize = 1 << 16;

/// Whether the answers to `asked` Queries, as far as `buf` holds them, are
/// whole: `Some(true)` when none failed and the last left the server idle
/// outside a transaction with nothing after it, `Some(false)` when one
/// failed (or they passed [`MAX_ANSWER`] bytes), `None` while more is to
/// come.
fn answered(asked: usize, buf: &[u8]) -> Option<bool> {
    let (mut at, mut status) = (0, 0);
    for _ in 0..asked {
        let Some(g) = late_class::greeting(&buf[at..]) else {
            return (buf.len() > MAX_ANSWER).then_some(false);
        };
        if g.error.is_some() {
            return Some(false);
        }
        at += g.used;
        status = buf[at - 1];
    }
    Some(at == buf.len() && status == b'I')
}

/// Sends each of `sqls` as a Query at once and reads their answers:
/// [`answered`]'s verdict (false when the connection fails first).
async fn ask(server: &mut TcpStream, sqls: &[&str]) -> bool {
    let sent: Vec<u8> = sqls.iter().flat_map(|s| query(s)).collect();
    if server.write_all(&sent).await.is_err() {
        return false;
    }
    let mut buf = BytesMut::with_capacity(256);
    loop {
        if let Some(verdict) = answered(sqls.len(), &buf) {
            return verdict;
        }
        buf.reserve(1024);
        if !matches!(server.read_buf(&mut buf).await, Ok(n) if n > 0) {
            return false;
        }
    }
}

/// Reads the server's messages through its next ReadyForQuery into `buf`
/// (which may hold part of them; at most `max` bytes are buffered) and
/// takes them off: the messages, and the transaction status their
/// ReadyForQuery carried.
pub(super) async fn read_ready(
    server: &mut TcpStream,
    buf: &mut BytesMut,
    max: usize,
) -> Result<(late_class::Greeting, u8), String> {
    loop {
        if let Some(g) = late_class::greeting(buf) {
            let status = buf[g.used - 1];
            let _ = buf.split_to(g.used);
            return Ok((g, status));
        }
        if buf.len() > max {
            return Err(format!("the replica's answer passed {max} bytes"));
        }
        buf.reserve(1024);
        match server.read_buf(buf).await {
            Ok(n) if n > 0 => {}
            Ok(_) => return Err("the replica closed the connection".to_string()),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Reads the server's greeting after AuthenticationOk into `buf` (which
/// may hold part of it): its length through its ReadyForQuery, or `None`
/// when the server sent an ErrorResponse first (its FATAL on a database
/// that does not exist, say, which the client is to get as it is).
pub(super) async fn read_greeting(server: &mut TcpStream, buf: &mut BytesMut) -> std::io::Result<Option<usize>> {
    loop {
        let mut at = 0;
        while let Some((tag, len)) = late_class::message_len(&buf[at..]) {
            if buf.len() < at + len {
                break;
            }
            at += len;
            match tag {
                b'Z' => return Ok(Some(at)),
                b'E' => return Ok(None),
                _ => {}
            }
        }
        buf.reserve(1024);
        if server.read_buf(buf).await? == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn key(r: usize) -> Key {
        Key { r: ReplicaId(r), database: "bench".into(), params: vec![("application_name".into(), "premium".into())] }
    }

    /// A connected pair of sockets on 127.0.0.1: (ours, the peer's).
    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let ours = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (peer, _) = l.accept().expect("accept");
        ours.set_nonblocking(true).expect("nonblocking");
        (ours, peer)
    }

    fn keep(pool: &ServerPool, k: Key, stream: std::net::TcpStream) {
        let c = Idle { stream, greeting: b"Z\0\0\0\x05I".to_vec(), since: Instant::now() };
        pool.idle.lock().unwrap().entry(k).or_default().push(c);
    }

    /// A server's answer to one Query: CommandComplete `tag`, then
    /// ReadyForQuery with `status`.
    fn done(tag: &str, status: u8) -> Vec<u8> {
        let mut m = vec![b'C'];
        m.extend(((4 + tag.len() + 1) as u32).to_be_bytes());
        m.extend(tag.as_bytes());
        m.extend([0, b'Z', 0, 0, 0, 5, status]);
        m
    }

    /// A peer that reads exactly the Queries `sqls` and then says `answer`.
    fn answers(
        mut peer: std::net::TcpStream,
        sqls: &'static [&'static str],
        answer: Vec<u8>,
    ) -> std::thread::JoinHandle<std::net::TcpStream> {
        std::thread::spawn(move || {
            let want: Vec<u8> = sqls.iter().flat_map(|s| query(s)).collect();
            let mut got = vec![0u8; want.len()];
            peer.read_exact(&mut got).unwrap();
            assert_eq!(got, want, "the Queries, framed");
            peer.write_all(&answer).unwrap();
            peer
        })
    }

    #[test]
    fn only_an_open_silent_connection_within_its_idle_time_is_taken() {
        let pool = ServerPool::new(4, Duration::from_secs(60));
        let (a, _a_peer) = pair();
        let (b, b_peer) = pair();
        let (c, mut c_peer) = pair();
        keep(&pool, key(0), a);
        keep(&pool, key(0), b);
        keep(&pool, key(0), c);
        drop(b_peer);
        c_peer.write_all(b"E").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(pool.pop(&key(0)).is_some(), "the open, silent one");
        assert!(pool.pop(&key(0)).is_none(), "the closed and the speaking ones were dropped");
        let (d, _d_peer) = pair();
        keep(&pool, key(1), d);
        assert!(pool.pop(&Key { database: "other".into(), ..key(1) }).is_none(), "another database");
        let short = ServerPool::new(4, Duration::from_millis(30));
        let (e, _e_peer) = pair();
        keep(&short, key(0), e);
        std::thread::sleep(Duration::from_millis(40));
        assert!(short.pop(&key(0)).is_none(), "idle past the timeout");
    }

    #[test]
    fn a_replica_no_longer_healthy_or_purged_keeps_nothing() {
        let pool = ServerPool::new(4, Duration::from_secs(60));
        let peers: Vec<_> = (0..3)
            .map(|r| {
                let (s, peer) = pair();
                keep(&pool, key(r), s);
                peer
            })
            .collect();
        let (p, f) = (Role::P, Role::F);
        pool.expire(&[(true, p), (false, p), (true, f), (true, f)]);
        assert!(pool.pop(&key(1)).is_none(), "r2 is not healthy");
        assert_eq!(pool.purge(ReplicaId(2)), 1);
        assert!(pool.pop(&key(2)).is_none(), "r3 purged");
        let (s, _peer) = pair();
        keep(&pool, key(3), s);
        pool.expire(&[(true, p), (true, p), (true, f), (true, p)]);
        assert!(pool.pop(&key(3)).is_none(), "r4 changed role");
        assert!(pool.pop(&key(0)).is_some(), "r1 kept");
        drop(peers);
    }

    /// Whether `peer` has been sent nothing (within 50 ms).
    fn told_nothing(peer: &mut std::net::TcpStream) -> bool {
        peer.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut b = [0u8; 1];
        matches!(peer.read(&mut b), Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
    }

    #[tokio::test]
    async fn a_connection_is_kept_only_when_its_reset_succeeds_and_is_handed_out_unasked() {
        let kept_ok = done("DISCARD ALL", b'I');
        for (answer, kept) in [
            (kept_ok.clone(), true),
            (b"E\0\0\0\x05\0Z\0\0\0\x05I".to_vec(), false),
            (done("DISCARD ALL", b'T'), false),
            ([kept_ok.clone(), b"N".to_vec()].concat(), false),
        ] {
            let pool = Arc::new(ServerPool::new(1, Duration::from_secs(60)));
            let (ours, peer) = pair();
            let answering = answers(peer, &RELEASE, answer);
            let origin = Origin { key: key(0), greeting: b"greeting".to_vec() };
            pool.release(origin, TcpStream::from_std(ours).unwrap(), Duration::from_secs(5)).await;
            let mut peer = answering.join().unwrap();
            let idle = pool.idle.lock().unwrap().get(&key(0)).map_or(0, Vec::len);
            assert_eq!(idle, usize::from(kept));
            if kept {
                let (_server, greeting) = pool.take(&key(0), Duration::from_secs(5)).await.expect("taken");
                assert_eq!(greeting, b"greeting");
                assert_eq!(pool.reused.load(Ordering::Relaxed), 1);
                assert!(told_nothing(&mut peer), "a connection kept for less than CHECK_DELAY is not asked anything");
            }
        }
        let pool = Arc::new(ServerPool::new(1, Duration::from_secs(60)));
        let (ours, peer) = pair();
        let answering = answers(peer, &RELEASE, kept_ok);
        pool.release(
            Origin { key: key(0), greeting: vec![] },
            TcpStream::from_std(ours).unwrap(),
            Duration::from_secs(5),
        )
        .await;
        let _peer = answering.join().unwrap();
        let (ours, _peer) = pair();
        pool.release(
            Origin { key: key(0), greeting: vec![] },
            TcpStream::from_std(ours).unwrap(),
            Duration::from_millis(200),
        )
        .await;
        assert_eq!(pool.idle.lock().unwrap().get(&key(0)).map_or(0, Vec::len), 1, "one per replica at most");
    }

    #[tokio::test]
    async fn a_session_waits_for_a_connection_of_its_key_being_reset_rather_than_log_in() {
        let pool = Arc::new(ServerPool::new(4, Duration::from_secs(60)));
        assert!(pool.take(&key(0), Duration::from_secs(5)).await.is_none(), "none idle, none being reset");
        let origin = |k: Key| Origin { key: k, greeting: vec![] };
        let resetting = pool.returning(origin(key(0))).expect("room");
        let (ours, _peer) = pair();
        let back = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            keep(&pool, key(0), ours);
            drop(resetting);
        };
        let k = key(0);
        let (taken, ()) = tokio::join!(pool.take(&k, Duration::from_secs(5)), back);
        assert!(taken.is_some(), "the connection that came back, not a new login");
        assert!(pool.releasing.lock().unwrap().is_empty());
        let _other = pool.returning(origin(key(1))).expect("room");
        let asked = Instant::now();
        assert!(pool.take(&key(0), Duration::from_secs(30)).await.is_none());
        assert!(asked.elapsed() < Duration::from_secs(10), "another key's reset is not waited for");
    }

    #[test]
    fn an_answer_is_whole_at_its_ready_for_query_and_good_only_idle_with_nothing_after() {
        let ok = done("DISCARD ALL", b'I');
        assert_eq!(answered(1, &ok), Some(true));
        assert_eq!(answered(1, &ok[..ok.len() - 1]), None, "ReadyForQuery not whole yet");
        assert_eq!(answered(2, &ok), None, "the second answer is to come");
        assert_eq!(answered(2, &[ok.clone(), ok.clone()].concat()), Some(true));
        assert_eq!(answered(1, &done("DISCARD ALL", b'T')), Some(false), "in a transaction");
        assert_eq!(answered(1, &[ok.clone(), b"N".to_vec()].concat()), Some(false), "something after");
        assert_eq!(answered(1, b"E\0\0\0\x05\0Z\0\0\0\x05I"), Some(false), "an error");
        let endless = [b"N\0\x01\0\x04".to_vec(), vec![b'x'; MAX_ANSWER + 8]].concat();
        assert_eq!(answered(1, &endless), Some(false), "past the bound with no ReadyForQuery");
        assert_eq!(Returning::reset(), query("DISCARD ALL"));
    }

    #[tokio::test]
    async fn a_connection_kept_longer_than_the_check_delay_is_checked_first() {
        let old = Instant::now().checked_sub(CHECK_DELAY + Duration::from_secs(1)).expect("uptime past the delay");
        let select1 = b"T\0\0\0\x21\0\x01?column?\0\0\0\0\0\0\0\0\0\0\x17\0\x04\xff\xff\xff\xff\0\0";
        for (answer, handed) in [
            ([&select1[..], b"D\0\0\0\x0b\0\x01\0\0\0\x011", &done("SELECT 1", b'I')].concat(), true),
            (b"E\0\0\0\x05\0Z\0\0\0\x05I".to_vec(), false),
        ] {
            let pool = ServerPool::new(4, Duration::from_secs(3600));
            let (ours, peer) = pair();
            pool.idle.lock().unwrap().entry(key(0)).or_default().push(Idle {
                stream: ours,
                greeting: vec![],
                since: old,
            });
            let checking = answers(peer, &CHECK, answer);
            let taken = pool.take(&key(0), Duration::from_secs(5)).await;
            drop(checking.join().unwrap());
            assert_eq!(taken.is_some(), handed, "handed out only when the check is answered idle");
        }
    }
}
