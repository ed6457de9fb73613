//! One proxied session after its client logged in ([proxy](docs/proxy.md)): the run
//! controller picks the replica (queueing or refusing as `run` would), the
//! proxy logs into it with the cluster's credentials, hands the client the
//! server's AuthenticationOk, parameters and key, then copies bytes both
//! ways without interpreting queries (the start of each is read only to
//! notice a `SET application_name` that names another class, which is
//! logged: the session stays). The server-to-client stream is followed
//! message by message (lengths only), so when the replica's connection
//! breaks, or the proxy stops, the client gets one whole FATAL
//! ErrorResponse at a message boundary and a closed socket, never a hang.

use super::late_class::{self, Said};
use super::login::{send_fatal, Fatal};
use super::startup::Startup;
use super::tls::ClientStream;
use super::Shared;
use crate::backend::live_metrics::SessionOutcome;
use crate::backend::proxy_feed::{failed_on, REPLICA_PARAM};
use crate::backend::wire::{Conn, WireError};
use crate::core::model::{Class, ConnectError, QueryError, ReplicaId};
use bytes::BytesMut;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Runs the session of a logged-in client whose class its startup packet
/// gave to its end.
pub async fn session(shared: &Shared, id: u32, mut client: ClientStream, startup: &Startup, class: Class) {
    let Some((r, server, pending)) = route(shared, id, &mut client, startup, class).await else { return };
    shared.remember_params(&pending);
    let mut to_client = AUTH_OK.to_vec();
    to_client.extend(parameter_status(REPLICA_PARAM, &r.to_string()));
    to_client.extend_from_slice(&pending);
    let start = Start { to_client, to_server: Vec::new(), seen: pending, key: None };
    finish(shared, id, r, class, client, server, start).await;
}

/// Admission and the proxy's login to the chosen replica: the replica, the
/// server's socket and what it sent after its AuthenticationOk; `None`
/// when the client got a FATAL instead (counted as rejected or failed).
pub(super) async fn route(
    shared: &Shared,
    id: u32,
    client: &mut ClientStream,
    startup: &Startup,
    class: Class,
) -> Option<(ReplicaId, TcpStream, BytesMut)> {
    let asked = Instant::now();
    let r = match shared.admit(id, class).await {
        Ok(r) => r,
        Err(f) => {
            shared.count(class, None, SessionOutcome::Rejected, asked.elapsed());
            send_fatal(client, &f).await;
            return None;
        }
    };
    match connect(shared, r, startup).await {
        Ok((server, pending)) => {
            shared.count(class, Some(r), SessionOutcome::Routed, asked.elapsed());
            Some((r, server, pending))
        }
        Err(f) => {
            shared.count(class, Some(r), SessionOutcome::Failed, asked.elapsed());
            shared.ended(r, class);
            send_fatal(client, &f).await;
            None
        }
    }
}

/// How a routed session's relay begins.
pub(super) struct Start {
    /// Sent to the client first.
    pub to_client: Vec<u8>,
    /// Sent to the server first (a late-naming client's first statements).
    pub to_server: Vec<u8>,
    /// Server bytes already received and passed on in `to_client`, followed
    /// for the message framing and the session's cancel key.
    pub seen: BytesMut,
    /// The client's cancel key, already registered (the proxy's own key).
    pub key: Option<(u32, u32)>,
}

/// Relays a routed session to its end, then forgets its cancel key and
/// tells the controller it ended.
pub(super) async fn finish(
    shared: &Shared,
    id: u32,
    r: ReplicaId,
    class: Class,
    client: ClientStream,
    server: TcpStream,
    start: Start,
) {
    let key = relay(shared, Session { id, r, class }, client, server, start).await;
    if let Some(k) = key {
        shared.keys.lock().expect("keys lock").remove(&k);
    }
    shared.ended(r, class);
}

/// Which session a relay carries.
#[derive(Clone, Copy)]
struct Session {
    id: u32,
    r: ReplicaId,
    class: Class,
}

/// The server's startup parameters for a client: its database (or its
/// user name, as PostgreSQL defaults it) and its other parameters.
pub(super) fn server_startup(startup: &Startup) -> (String, Vec<(String, String)>) {
    let database = startup.param("database").or_else(|| startup.param("user")).unwrap_or("postgres").to_string();
    let rest = startup.params().iter().filter(|(k, _)| k != "user" && k != "database").cloned().collect();
    (database, rest)
}

/// Logs into replica `r` for the client: its database (or its user name,
/// as PostgreSQL defaults it) and its other parameters.
async fn connect(shared: &Shared, r: ReplicaId, startup: &Startup) -> Result<(TcpStream, BytesMut), Fatal> {
    let (database, rest) = server_startup(startup);
    let cfg = &shared.replicas[r.idx()];
    let began = shared.now();
    let limit = shared.server_connect_timeout;
    let result = match tokio::time::timeout(limit, Conn::login(cfg, &database, &rest)).await {
        Ok(r) => r,
        Err(_) => Err(WireError::Timeout(limit)),
    };
    result.map_err(|e| {
        let why = match &e {
            WireError::Io(_) | WireError::Closed => Some(ConnectError::Refused),
            WireError::Timeout(_) => Some(ConnectError::Timeout),
            WireError::Server { code, .. } if code == "53300" => Some(ConnectError::Full),
            _ => None,
        };
        if let Some(why) = why {
            shared.control(|ctl, now| {
                let _ = ctl.c.connect_failed(r, why, now.max(began));
            });
        }
        let f = match e {
            WireError::Server { code, message, .. } => Fatal::new(server_code(&code), message),
            other => Fatal::new("08006", format!("could not connect to replica {r}: {other}")),
        };
        Fatal { detail: Some(failed_on(r, why.unwrap_or(ConnectError::Refused))), ..f }
    })
}

/// A server's SQLSTATE as one of the codes the proxy passes on (the
/// common login failures; any other becomes 08006).
fn server_code(code: &str) -> &'static str {
    ["53300", "3D000", "28000", "28P01", "57P03", "57P01", "42501"].into_iter().find(|c| *c == code).unwrap_or("08006")
}

/// Where the server-to-client stream is: inside a message or at its end.
struct Framing {
    /// Header bytes of the current message seen so far (up to 5).
    header: [u8; 5],
    seen: usize,
    /// Body bytes still to come of the current message.
    remaining: usize,
    /// The BackendKeyData seen, if any.
    key: Option<(u32, u32)>,
    /// Body bytes of a BackendKeyData message collected so far.
    key_body: [u8; 8],
    key_seen: usize,
    /// A Terminate (`X`) went by (client to server): the server closing
    /// next is the session's normal end.
    terminated: bool,
    /// Read the start of each Query and Parse (client to server) for `SET
    /// application_name`.
    watch: bool,
    /// How much of the current Query or Parse's body is in `text`, while
    /// watched.
    text_len: Option<usize>,
    /// The start of the current Query or Parse's body: a fixed buffer, so
    /// that following a routed session allocates nothing per message.
    text: [u8; WATCHED],
    /// The last `SET application_name` value seen.
    named: Option<String>,
}

/// How much of a Query or Parse is read for `SET application_name`.
const WATCHED: usize = 256;

impl Framing {
    fn new() -> Framing {
        Framing {
            header: [0; 5],
            seen: 0,
            remaining: 0,
            key: None,
            key_body: [0; 8],
            key_seen: 0,
            terminated: false,
            watch: false,
            text_len: None,
            text: [0; WATCHED],
            named: None,
        }
    }

    /// A framing of the client's stream that reads its `SET
    /// application_name` statements.
    fn watching() -> Framing {
        Framing { watch: true, ..Framing::new() }
    }

    /// The current watched message's body is complete (or long enough):
    /// parsed only when it may be a `SET application_name`
    /// ([`late_class::may_be_set`]), so other statements cost no
    /// allocation.
    fn statement_read(&mut self) {
        let Some(len) = self.text_len.take() else { return };
        let text = &self.text[..len];
        if !late_class::may_be_set(text) {
            return;
        }
        let said = late_class::sql_of(self.header[0], text).map(|sql| late_class::said(&sql));
        if let Some(Said::AppName(v)) = said {
            self.named = Some(v);
        }
    }

    /// Collects the body bytes `bytes` of a BackendKeyData.
    fn key_bytes(&mut self, bytes: &[u8]) {
        let take = bytes.len().min(8 - self.key_seen);
        self.key_body[self.key_seen..self.key_seen + take].copy_from_slice(&bytes[..take]);
        self.key_seen += take;
        if self.key_seen == 8 {
            let [p0, p1, p2, p3, k0, k1, k2, k3] = self.key_body;
            self.key = Some((u32::from_be_bytes([p0, p1, p2, p3]), u32::from_be_bytes([k0, k1, k2, k3])));
        }
    }

    /// Keeps the watched statement's bytes `bytes`, up to [`WATCHED`].
    fn text_bytes(&mut self, bytes: &[u8]) {
        if let Some(len) = &mut self.text_len {
            let take = bytes.len().min(WATCHED - *len);
            self.text[*len..*len + take].copy_from_slice(&bytes[..take]);
            *len += take;
        }
    }

    fn at_boundary(&self) -> bool {
        self.seen == 0 && self.remaining == 0
    }

    /// Follows `bytes` through the message framing.
    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.remaining == 0 && self.seen < 5 {
                let take = (5 - self.seen).min(bytes.len());
                self.header[self.seen..self.seen + take].copy_from_slice(&bytes[..take]);
                self.seen += take;
                bytes = &bytes[take..];
                if self.seen == 5 {
                    let len = u32::from_be_bytes(self.header[1..5].try_into().expect("4 bytes")) as usize;
                    self.remaining = len.saturating_sub(4);
                    self.seen = 0;
                    self.key_seen = 0;
                    self.terminated |= self.header[0] == b'X';
                    if self.watch && matches!(self.header[0], b'Q' | b'P') {
                        self.text_len = Some(0);
                        if self.remaining == 0 {
                            self.statement_read();
                        }
                    }
                }
                continue;
            }
            let take = self.remaining.min(bytes.len());
            if self.header[0] == b'K' {
                self.key_bytes(&bytes[..take]);
            }
            self.text_bytes(&bytes[..take]);
            self.remaining -= take;
            bytes = &bytes[take..];
            if self.remaining == 0 || self.text_len.is_some_and(|n| n >= WATCHED) {
                self.statement_read();
            }
        }
    }
}

/// AuthenticationOk.
pub(super) const AUTH_OK: [u8; 9] = [b'R', 0, 0, 0, 8, 0, 0, 0, 0];
/// A ParameterStatus message: `name` is now `value`.
pub(super) fn parameter_status(name: &str, value: &str) -> Vec<u8> {
    let len = 4 + name.len() + 1 + value.len() + 1;
    let mut m = Vec::with_capacity(1 + len);
    m.push(b'S');
    m.extend((len as u32).to_be_bytes());
    for s in [name, value] {
        m.extend(s.bytes().filter(|&b| b != 0));
        m.push(0);
    }
    m
}

/// Size of each copy's buffer.
const CHUNK: usize = 16 * 1024;

/// How a relay ended.
enum End {
    /// The client left, or the server closed after the client's Terminate.
    Quiet,
    /// The replica's connection broke.
    Lost,
    /// The proxy is stopping.
    Stop,
}

/// Registers the session's cancel key once the server has sent it.
fn register(shared: &Shared, r: ReplicaId, framing: &Framing, registered: &mut Option<(u32, u32)>) {
    if let (None, Some(k)) = (*registered, framing.key) {
        shared.keys.lock().expect("keys lock").insert(k, (r, k));
        *registered = Some(k);
    }
}

/// Copies both ways until one side closes or the proxy stops (then the
/// session's running statement is cancelled on its replica, so it does not
/// outlive the proxy); returns the session's cancel key as its client knows
/// it (registered while it lived). A `SET application_name` naming another
/// class is said once.
async fn relay(
    shared: &Shared,
    s: Session,
    mut client: ClientStream,
    mut server: TcpStream,
    start: Start,
) -> Option<(u32, u32)> {
    let r = s.r;
    let mut framing = Framing::new();
    let mut upstream = if shared.rule.reads_application_name() { Framing::watching() } else { Framing::new() };
    let mut registered = start.key;
    let mut told = false;
    framing.feed(&start.seen);
    register(shared, r, &framing, &mut registered);
    upstream.feed(&start.to_server);
    let (mut cbuf, mut sbuf) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    let mut stop = shared.terminate.clone();
    // One wait for the stop for the whole session: made anew in every turn
    // of the loop, it would register with the shared watch each time.
    let stopped = super::stopping(&mut stop);
    tokio::pin!(stopped);
    let began = shared.now();
    let end = if client.write_all(&start.to_client).await.is_err() {
        End::Quiet
    } else if server.write_all(&start.to_server).await.is_err() {
        End::Lost
    } else {
        loop {
            if let Some(v) = upstream.named.take() {
                told = told || shared.named_after_routing(s.id, r, s.class, &v);
            }
            // The reads first: the stop is polled only when neither side
            // has bytes, not on every message.
            tokio::select! {
                biased;
                n = client.read(&mut cbuf) => match n {
                    Ok(n) if n > 0 => {
                        upstream.feed(&cbuf[..n]);
                        if server.write_all(&cbuf[..n]).await.is_err() {
                            break End::Lost;
                        }
                    }
                    _ => break End::Quiet,
                },
                n = server.read(&mut sbuf) => match n {
                    Ok(n) if n > 0 => {
                        framing.feed(&sbuf[..n]);
                        register(shared, r, &framing, &mut registered);
                        if client.write_all(&sbuf[..n]).await.is_err() {
                            break End::Quiet;
                        }
                    }
                    _ if upstream.terminated => break End::Quiet,
                    _ => {
                        shared.control(|ctl, now| ctl.c.query_answered(r, Err(QueryError::ConnectionLost), began, now));
                        break End::Lost;
                    }
                },
                _ = &mut stopped => break End::Stop,
            }
        }
    };
    let fatal = match end {
        End::Quiet => None,
        End::Lost => Some(lost(r)),
        End::Stop => Some(Fatal::new(
            "57P01",
            "terminating connection due to administrator command (plbbench proxy is stopping)",
        )),
    };
    if let (Some(f), true) = (&fatal, framing.at_boundary()) {
        send_fatal(&mut client, f).await;
    }
    if let (End::Stop, Some((pid, key))) = (end, registered) {
        shared.cancel(pid, key).await;
    }
    let _ = client.shutdown().await;
    registered
}

/// The error a client gets when its replica's connection breaks.
fn lost(r: ReplicaId) -> Fatal {
    Fatal::new(
        "08006",
        format!("the connection to replica {r} was lost; it may have failed (reconnect to be routed to a survivor)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_follows_messages_across_any_split_and_finds_the_key() {
        let mut stream = vec![b'S', 0, 0, 0, 9, b'a', 0, b'b', 0, 0];
        stream.extend([b'K', 0, 0, 0, 12, 0, 0, 0, 42, 0, 0, 1, 0]);
        stream.extend([b'Z', 0, 0, 0, 5, b'I']);
        for cut in 0..stream.len() {
            let mut f = Framing::new();
            f.feed(&stream[..cut]);
            f.feed(&stream[cut..]);
            assert!(f.at_boundary(), "cut {cut}");
            assert_eq!(f.key, Some((42, 256)), "cut {cut}");
        }
        let mut f = Framing::new();
        f.feed(&stream[..12]);
        assert!(!f.at_boundary() && !f.terminated);
        f.feed(&stream[12..]);
        f.feed(&[b'X', 0, 0, 0, 4]);
        assert!(f.at_boundary() && f.terminated);
        let mut f = Framing::new();
        f.feed(&parameter_status(REPLICA_PARAM, "r2"));
        assert!(f.at_boundary());
        assert_eq!(parameter_status("a", "b"), [b'S', 0, 0, 0, 8, b'a', 0, b'b', 0]);
        assert_eq!(server_code("3D000"), "3D000");
        assert_eq!(server_code("XX000"), "08006");
    }

    #[test]
    fn a_watched_stream_finds_set_application_name_across_any_split() {
        let query = |sql: &str| {
            let mut m = vec![b'Q'];
            m.extend(((5 + sql.len()) as u32).to_be_bytes());
            m.extend(sql.as_bytes());
            m.push(0);
            m
        };
        let mut stream = query("SELECT 1");
        stream.extend([b'S', 0, 0, 0, 4]);
        stream.extend(query("set application_name to 'premium-x'; SELECT 2"));
        for cut in 0..stream.len() {
            let mut f = Framing::watching();
            f.feed(&stream[..cut]);
            f.feed(&stream[cut..]);
            assert_eq!(f.named.as_deref(), Some("premium-x"), "cut {cut}");
        }
        let mut plain = Framing::new();
        plain.feed(&stream);
        assert_eq!(plain.named, None, "not watched");
        let mut long = Framing::watching();
        long.feed(&query(&format!("SELECT '{}'", "x".repeat(5000))));
        assert!(long.at_boundary() && long.named.is_none() && long.text_len.is_none());
        let mut late = Framing::watching();
        late.feed(&query(&format!("SELECT '{}'; SET application_name = 'premium-y'", "x".repeat(300))));
        assert_eq!(late.named, None, "only the first {WATCHED} bytes are read");
    }

    /// A session's traffic after routing: Parse/Bind/Execute/Sync batches
    /// and Query messages (none a `SET application_name`), then what the
    /// server answers.
    fn routed_traffic() -> (Vec<u8>, Vec<u8>) {
        let msg = |tag: u8, body: &[u8]| {
            let mut m = vec![tag];
            m.extend(((4 + body.len()) as u32).to_be_bytes());
            m.extend(body);
            m
        };
        let mut up = Vec::new();
        for i in 0..50 {
            up.extend(msg(
                b'P',
                format!("s{i}\0SELECT abalance FROM pgbench_accounts WHERE aid = $1\0\0\0").as_bytes(),
            ));
            up.extend(msg(b'B', b"\0s\0\0\0\0\x01\0\0\0\x0242\0\0"));
            up.extend(msg(b'E', b"\0\0\0\0\0"));
            up.extend(msg(b'S', b""));
            up.extend(msg(b'Q', format!("SELECT {i}; -- settings, not a set").as_bytes()));
            up.extend(msg(b'Q', b"SET search_path = public"));
        }
        let mut down = Vec::new();
        for _ in 0..50 {
            down.extend(msg(b'1', b""));
            down.extend(msg(b'2', b""));
            down.extend(msg(b'D', b"\0\x01\0\0\0\x010"));
            down.extend(msg(b'C', b"SELECT 1\0"));
            down.extend(msg(b'Z', b"I"));
        }
        (up, down)
    }

    #[test]
    fn following_a_routed_session_allocates_nothing_per_message() {
        let (up, down) = routed_traffic();
        let mut upstream = Framing::watching();
        let mut framing = Framing::new();
        for chunk in [1, 7, 64, 4096] {
            let n = counting::allocations(|| {
                for part in up.chunks(chunk) {
                    upstream.feed(part);
                }
                for part in down.chunks(chunk) {
                    framing.feed(part);
                }
            });
            assert_eq!(n, 0, "{n} heap allocations following {} bytes in chunks of {chunk}", up.len() + down.len());
            assert!(upstream.at_boundary() && framing.at_boundary() && upstream.named.is_none());
        }
        let n = counting::allocations(|| upstream.feed(b"Q\0\0\0\x25SET application_name = 'premium'\0"));
        assert!(n > 0 && upstream.named.as_deref() == Some("premium"), "a rename is still read ({n} allocations)");
    }

    /// A global allocator for this crate's unit tests that counts, per
    /// thread, the allocations made while [`counting::allocations`] runs.
    mod counting {
        use std::alloc::{GlobalAlloc, Layout, System};
        use std::cell::Cell;

        thread_local! {
            static COUNT: Cell<Option<u64>> = const { Cell::new(None) };
        }

        struct Counting;

        fn note() {
            let _ = COUNT.try_with(|c| c.set(c.get().map(|n| n + 1)));
        }

        // SAFETY: every call is passed on unchanged to the system
        // allocator; counting touches only a const thread-local Cell, which
        // never allocates.
        unsafe impl GlobalAlloc for Counting {
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                note();
                System.alloc(layout)
            }
            unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
                note();
                System.alloc_zeroed(layout)
            }
            unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
                note();
                System.realloc(ptr, layout, new_size)
            }
            unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
                System.dealloc(ptr, layout)
            }
        }

        #[global_allocator]
        static ALLOCATOR: Counting = Counting;

        /// Heap allocations (and reallocations) made on this thread by `f`.
        pub fn allocations(f: impl FnOnce()) -> u64 {
            COUNT.with(|c| c.set(Some(0)));
            f();
            COUNT.with(|c| c.replace(None)).unwrap_or(0)
        }
    }
}
