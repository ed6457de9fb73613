//! One proxied session after its client logged in ([proxy](docs/proxy.md)): the run
//! controller picks the replica (queueing or refusing as `run` would), the
//! proxy logs into it with the cluster's credentials, hands the client the
//! server's AuthenticationOk, parameters and key, then copies bytes both
//! ways without interpreting queries: a plain-TCP session on a pump thread
//! ([`super::pump`]), a TLS one on its task. What follows the bytes is one
//! [`Flow`] on either: the start of each statement is read only to notice
//! a `SET application_name` that names another class, which is logged
//! (the session stays); the server-to-client stream is followed message by
//! message (lengths only, [`super::framing`]), so when the replica's
//! connection breaks, or the proxy stops, the client gets one whole FATAL
//! ErrorResponse at a message boundary and a closed socket, never a hang.
use super::framing::Framing;
use super::login::{send_fatal, Fatal};
use super::pump::{Back, End, Follow, Pass, CHUNK};
use super::server_pool::{read_greeting, Key, Origin};
use super::startup::Startup;
use super::statements::Statements;
use super::tls::ClientStream;
use super::violations::Who;
use super::{CancelKey, Shared};
use crate::backend::live_metrics::SessionOutcome;
use crate::backend::proxy_feed::failed_on;
use crate::backend::wire::{Conn, WireError};
use crate::core::model::{Class, ConnectError, ReplicaId};
use bytes::BytesMut;
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Runs the session of a logged-in client whose class its startup packet
/// gave to its end.
pub async fn session(
    shared: &Arc<Shared>,
    id: u32,
    mut client: ClientStream,
    startup: &Startup,
    class: Class,
    who: Who,
) {
    let Some(Routed { r, server, pending, origin }) = route(shared, id, &mut client, startup, class).await else {
        return;
    };
    shared.remember_params(&pending);
    let mut to_client = AUTH_OK.to_vec();
    to_client.extend(shared.routed_params(r));
    let greeting = to_client.len();
    to_client.extend_from_slice(&pending);
    let key = shared.tier_key(r, &mut to_client[greeting..]);
    let start = Start { to_client, to_server: Vec::new(), seen: pending, key };
    finish(shared, Session { id, r, class, who, origin }, client, server, start).await;
}

/// A session's replica and its connection there.
pub(super) struct Routed {
    pub r: ReplicaId,
    /// Outside tokio's epoll: a plain-TCP session's is relayed by a pump.
    pub server: std::net::TcpStream,
    /// What the server sent after its AuthenticationOk.
    pub pending: BytesMut,
    /// Where the connection goes back at the session's end, when it may.
    pub origin: Option<Origin>,
}

/// Admission and the proxy's connection to the chosen replica (a kept one
/// or a new login); `None` when the client got a FATAL instead (counted as
/// rejected or failed).
pub(super) async fn route(
    shared: &Shared,
    id: u32,
    client: &mut ClientStream,
    startup: &Startup,
    class: Class,
) -> Option<Routed> {
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
        Ok((server, pending, origin)) => {
            shared.count(class, Some(r), SessionOutcome::Routed, asked.elapsed());
            Some(Routed { r, server, pending, origin })
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
    /// Sent to the server already (a late-naming client's first
    /// statements), followed for the framing.
    pub to_server: Vec<u8>,
    /// Server bytes already received and passed on in `to_client`, followed
    /// for the message framing and the session's cancel key.
    pub seen: BytesMut,
    /// The client's cancel key, already registered (the proxy's own key).
    pub key: Option<(u32, u32)>,
}

/// Relays a routed session to its end: on a pump thread for a plain-TCP
/// client ([`super::pump`]), on this task for a TLS one. Its [`Flow`],
/// dropped at the end, forgets its cancel key and tells the controller the
/// session ended.
pub(super) async fn finish(
    shared: &Arc<Shared>,
    s: Session,
    mut client: ClientStream,
    server: std::net::TcpStream,
    start: Start,
) {
    let mut flow = Flow::new(shared.clone(), s, &start);
    let begun = if client.write_all(&start.to_client).await.is_err() { Err(End::Quiet) } else { Ok(()) };
    match (begun, client) {
        (Err(end), client) => close(&flow, end, client, &[]).await,
        (Ok(()), ClientStream::Plain(tcp)) => {
            if let Ok(client) = tcp.into_std() {
                // Counted open until the flow is dropped, wherever the
                // session ends: this task ends here.
                shared.open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                flow.holds_open = true;
                shared.pumps.relay(client, server, flow);
            }
        }
        (Ok(()), mut client) => {
            let Ok(mut server) = TcpStream::from_std(server) else { return close(&flow, End::Lost, client, &[]).await };
            let end = on_this_task(&mut flow, &mut client, &mut server).await;
            close(&flow, end, client, &[]).await;
            let origin = flow.s.origin.take();
            drop(flow);
            if let (End::Reusable, Some(o)) = (end, origin) {
                shared.pool.release(o, server, shared.server_connect_timeout).await;
            }
        }
    }
}

/// A session a pump gave back at an end that was not quiet (or with
/// server bytes the client has yet to get): the client gets them and its
/// FATAL, as [`close`] says, and a server connection that may serve
/// another session is reset and kept.
pub(super) async fn ended(back: Back<Flow>) {
    let Back { end, mut flow, client, server, held } = back;
    if let Ok(tcp) = TcpStream::from_std(client) {
        close(&flow, end, ClientStream::Plain(tcp), &held).await;
    }
    let (shared, origin) = (flow.shared.clone(), flow.s.origin.take());
    drop(flow);
    if let (End::Reusable, Some(o), Ok(server)) = (end, origin, TcpStream::from_std(server)) {
        shared.pool.release(o, server, shared.server_connect_timeout).await;
    }
}

/// Which session a relay carries, and whose.
pub(super) struct Session {
    pub id: u32,
    pub r: ReplicaId,
    pub class: Class,
    /// The client, for its allowance of protocol violations.
    pub who: Who,
    /// Where its server connection goes back, when it may.
    pub origin: Option<Origin>,
}

/// The server's startup parameters for a client: its database (or its
/// user name, as PostgreSQL defaults it) and its other parameters.
pub(super) fn server_startup(startup: &Startup) -> (String, Vec<(String, String)>) {
    let database = startup.param("database").or_else(|| startup.param("user")).unwrap_or("postgres").to_string();
    let rest = startup.params().iter().filter(|(k, _)| k != "user" && k != "database").cloned().collect();
    (database, rest)
}

/// A connection to replica `r` for the client, on its database (or its
/// user name, as PostgreSQL defaults it) with its other parameters: a kept
/// one ([`super::server_pool`]), else a new login, read through its
/// greeting. A server found full first closes the replica's kept
/// connections, and is asked once more.
async fn connect(
    shared: &Shared,
    r: ReplicaId,
    startup: &Startup,
) -> Result<(std::net::TcpStream, BytesMut, Option<Origin>), Fatal> {
    let (database, params) = server_startup(startup);
    let key = Key { r, database, params };
    if let Some((server, greeting)) = shared.pool.take(&key, shared.server_connect_timeout).await {
        let pending = BytesMut::from(&greeting[..]);
        return Ok((server, pending, Some(Origin { key, greeting })));
    }
    let began = shared.now();
    let mut result = login(shared, &key).await;
    if matches!(&result, Err(WireError::Server { code, .. }) if code == "53300") && shared.pool.purge(r) > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        result = login(shared, &key).await;
    }
    let (server, pending, used) = result.map_err(|e| login_failed(shared, r, began, e))?;
    let server = server.into_std().map_err(|e| Fatal::new("08006", format!("the connection to replica {r}: {e}")))?;
    shared.pool.logins.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let origin = used.filter(|_| shared.pool.on()).map(|n| Origin { key, greeting: pending[..n].to_vec() });
    Ok((server, pending, origin))
}

/// A new login to the replica `key` names, read through its greeting
/// (its length, `None` when the server sent an error first), within the
/// server connect timeout.
async fn login(shared: &Shared, key: &Key) -> Result<(TcpStream, BytesMut, Option<usize>), WireError> {
    let cfg = &shared.replicas[key.r.idx()];
    let limit = shared.server_connect_timeout;
    let login = async {
        let (mut server, mut pending) = Conn::login(cfg, &key.database, &key.params).await?;
        let used = read_greeting(&mut server, &mut pending).await?;
        Ok::<_, WireError>((server, pending, used))
    };
    tokio::time::timeout(limit, login).await.unwrap_or(Err(WireError::Timeout(limit)))
}

/// A login to `r` begun at `began` (proxy time) failed with `e`: evidence
/// for the controller when the replica refused, timed out or was full, and
/// the client's FATAL.
fn login_failed(shared: &Shared, r: ReplicaId, began: f64, e: WireError) -> Fatal {
    let why = match &e {
        WireError::Io(_) | WireError::Closed => Some(ConnectError::Refused),
        WireError::Timeout(_) => Some(ConnectError::Timeout),
        WireError::Server { code, .. } if code == "53300" => Some(ConnectError::Full),
        _ => None,
    };
    if let Some(why) = why {
        let (_, asked) = shared.control(|ctl, now| ctl.c.connect_failed(r, why, now.max(began)));
        shared.confirm(asked);
    }
    let f = match e {
        WireError::Server { code, message, .. } => Fatal::new(server_code(&code), message),
        other => Fatal::new("08006", format!("could not connect to replica {r}: {other}")),
    };
    Fatal { detail: Some(failed_on(r, why.unwrap_or(ConnectError::Refused))), ..f }
}

/// A server's SQLSTATE as one of the codes the proxy passes on (the
/// common login failures; any other becomes 08006).
fn server_code(code: &str) -> &'static str {
    ["53300", "3D000", "28000", "28P01", "57P03", "57P01", "42501"].into_iter().find(|c| *c == code).unwrap_or("08006")
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

/// What follows a routed session's bytes, on whichever thread relays them:
/// both streams' framing, the cancel key's registration, the warning for
/// a class named after routing, and what the server's close means. Dropped
/// when the session is over: its cancel key is forgotten and the
/// controller told the session ended.
pub(super) struct Flow {
    shared: Arc<Shared>,
    s: Session,
    /// Server to client.
    framing: Framing,
    /// Client to server (watched for `SET application_name` when the
    /// class rule reads it).
    upstream: Framing,
    /// The cancel key registered, as the client knows it.
    registered: Option<CancelKey>,
    /// Whether a class named after routing was said.
    told: bool,
    /// When the relay began (proxy time, s).
    began: f64,
    /// ReadyForQuery messages the server sent before the relay began (its
    /// greeting's), which answered none of the client's asks.
    greeted: u64,
    /// The client's Terminate was withheld from an idle server.
    withheld: bool,
    /// Whether the session counts in the proxy's open connections until
    /// this is dropped (it is relayed on a pump, its task gone).
    holds_open: bool,
    /// Its statements under the admission gate.
    statements: Statements,
}

impl Flow {
    fn new(shared: Arc<Shared>, s: Session, start: &Start) -> Flow {
        let upstream = if shared.rule.reads_application_name() { Framing::watching() } else { Framing::new() };
        let began = shared.now();
        let gated = shared.gated;
        let mut flow = Flow {
            shared,
            s,
            framing: Framing::new(),
            upstream,
            registered: start.key,
            told: false,
            began,
            greeted: 0,
            withheld: false,
            holds_open: false,
            // What the proxy already sent for the client (a late class's
            // first statement) ran without the gate.
            statements: Statements::new(false),
        };
        flow.server_sent(&start.seen);
        flow.greeted = flow.framing.readies;
        flow.client_sent(&start.to_server);
        flow.statements = Statements::new(gated);
        flow
    }

    /// Whether the client's Terminate, the whole of what it just sent, may
    /// be withheld: every Query, Sync and FunctionCall it sent is
    /// answered, nothing is sent after them, and the server is idle
    /// outside a transaction, so the connection can serve another session.
    fn may_withhold(&self, bytes: &[u8]) -> bool {
        let (up, down) = (&self.upstream, &self.framing);
        self.s.origin.is_some()
            && bytes.ends_with(&TERMINATE)
            && up.at_boundary()
            && !up.unsynced
            && down.at_boundary()
            && down.status == b'I'
            && down.readies - self.greeted == up.asks
    }

    /// Every ask the client sent is answered and nothing follows them: the
    /// next bytes from the client begin a statement.
    fn idle(&self) -> bool {
        let up = &self.upstream;
        up.at_boundary() && !up.unsynced && self.framing.readies - self.greeted >= up.asks
    }
}

/// A Terminate message.
const TERMINATE: [u8; 5] = [b'X', 0, 0, 0, 4];

impl Follow for Flow {
    /// Follows bytes the client sent; withholds a Terminate at their end
    /// when the server may serve another session ([`Flow::may_withhold`]).
    fn client_sent(&mut self, bytes: &[u8]) -> Pass {
        let begins = self.idle() && bytes.first().is_some_and(|&b| b != TERMINATE[0]);
        let may = !begins || self.statements.begin(&self.shared, self.s.class, self.s.r);
        let terminated = self.upstream.terminated;
        self.upstream.feed(bytes);
        if let Some(v) = self.upstream.named.take() {
            self.told = self.told || self.shared.named_after_routing(self.s.id, self.s.r, self.s.class, &v);
        }
        if !may {
            return Pass::Hold;
        }
        if !terminated && self.upstream.terminated && self.may_withhold(bytes) {
            self.withheld = true;
            return Pass::Write(bytes.len() - TERMINATE.len());
        }
        Pass::Write(bytes.len())
    }

    fn resume(&mut self) -> bool {
        self.statements.begin(&self.shared, self.s.class, self.s.r)
    }

    fn withheld(&self) -> bool {
        self.withheld
    }

    /// The client closed its side, or its Terminate was withheld (then
    /// the session ends at once, the proxy closing the client's side, and
    /// the server's connection may serve another session).
    fn client_closed(&self) -> End {
        if self.withheld {
            End::Reusable
        } else {
            End::Quiet
        }
    }

    /// The connection's way back to the kept ones, when it came from a
    /// login that may be kept and its replica has room.
    fn kept(&mut self) -> Option<super::server_pool::Returning> {
        self.s.origin.take().and_then(|o| self.shared.pool.returning(o))
    }

    /// Follows bytes the server sent; registers the session's cancel key
    /// once it has gone by.
    fn server_sent(&mut self, bytes: &[u8]) {
        self.framing.feed(bytes);
        if self.idle() {
            self.statements.end(&self.shared, self.s.class, self.s.r);
        }
        if let (None, Some(k)) = (self.registered, self.framing.key) {
            self.shared.keys.lock().expect("keys lock").insert(k, (self.s.r, k));
            self.registered = Some(k);
        }
    }

    /// The server closed its side (or stopped taking bytes): the session's
    /// normal end after the client's Terminate; the session's end when the
    /// server's last message was its own ErrorResponse (a FATAL); else the
    /// connection was lost with no word from the server ([`close`] tells
    /// the controller, which has the replica probed).
    fn server_closed(&self) -> End {
        if self.upstream.terminated {
            return End::Quiet;
        }
        self.framing.ended_on_error().map_or(End::Lost, End::Ended)
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.statements.close(&self.shared, self.s.class, self.s.r);
        if let Some(k) = self.registered {
            self.shared.keys.lock().expect("keys lock").remove(&k);
        }
        self.shared.ended(self.s.r, self.s.class);
        if self.holds_open {
            self.shared.open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// Copies both ways on this task (a TLS client's session) until one side
/// closes or the proxy stops.
async fn on_this_task(flow: &mut Flow, client: &mut ClientStream, server: &mut TcpStream) -> End {
    let (mut cbuf, mut sbuf) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    let mut stop = flow.shared.terminate.clone();
    // One wait for the stop for the whole session: made anew in every turn
    // of the loop, it would register with the shared watch each time.
    let stopped = super::stopping(&mut stop);
    tokio::pin!(stopped);
    loop {
        // The reads first: the stop is polled only when neither side has
        // bytes, not on every message.
        tokio::select! {
            biased;
            n = client.read(&mut cbuf) => match n {
                Ok(n) if n > 0 => {
                    let keep = match flow.client_sent(&cbuf[..n]) {
                        Pass::Write(keep) => keep,
                        Pass::Hold => {
                            held(flow).await;
                            n
                        }
                    };
                    if server.write_all(&cbuf[..keep]).await.is_err() {
                        return last_words(flow, client, server, &mut sbuf).await;
                    }
                    if flow.withheld() {
                        return End::Reusable;
                    }
                }
                _ => return flow.client_closed(),
            },
            n = server.read(&mut sbuf) => match n {
                Ok(n) if n > 0 => {
                    flow.server_sent(&sbuf[..n]);
                    if client.write_all(&sbuf[..n]).await.is_err() {
                        return End::Quiet;
                    }
                }
                _ => return flow.server_closed(),
            },
            _ = &mut stopped => return End::Stop,
        }
    }
}

/// Waits, asking again every 5 ms as a pump does, until the gate lets the
/// held statement run (then all the bytes read go on).
async fn held(flow: &mut Flow) {
    while !flow.resume() {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// The server stopped taking the client's bytes: its last words (a FATAL,
/// as a rule) may still be unread. They are passed on, up to [`CHUNK`] a
/// read for at most 100 ms, before the end is judged
/// ([`Follow::server_closed`]).
async fn last_words(flow: &mut Flow, client: &mut ClientStream, server: &mut TcpStream, sbuf: &mut [u8]) -> End {
    let until = tokio::time::Instant::now() + std::time::Duration::from_millis(100);
    while let Ok(Ok(n)) = tokio::time::timeout_at(until, server.read(sbuf)).await {
        if n == 0 {
            break;
        }
        flow.server_sent(&sbuf[..n]);
        if client.write_all(&sbuf[..n]).await.is_err() {
            return End::Quiet;
        }
    }
    flow.server_closed()
}

/// A relay's end on the client's side: the server bytes read but not yet
/// delivered (`held`), then one whole FATAL at a message boundary when the
/// replica's connection was lost with no word from the server and the
/// confirming probe did not find it answering, or when the proxy stops
/// (then the session's running statement is cancelled on its replica, so
/// it does not outlive the proxy); and the client's socket closed. A
/// session the server ended (with its own error, or with none while the
/// replica answers) gets only what the server sent.
async fn close(flow: &Flow, end: End, mut client: ClientStream, held: &[u8]) {
    let shared = &flow.shared;
    let fatal = match end {
        End::Quiet | End::Reusable => None,
        End::Ended(code) => {
            shared.server_ended(&flow.s.who, Some(code));
            None
        }
        End::Lost if shared.lost(flow.s.r, flow.began).await => {
            shared.server_ended(&flow.s.who, None);
            None
        }
        End::Lost => Some(lost(flow.s.r)),
        End::Stop => Some(Fatal::new(
            "57P01",
            "terminating connection due to administrator command (plbbench proxy is stopping)",
        )),
    };
    if !held.is_empty() && client.write_all(held).await.is_err() {
        return;
    }
    if let (Some(f), true) = (&fatal, flow.framing.at_boundary()) {
        send_fatal(&mut client, f).await;
    }
    if let (End::Stop, Some((pid, key))) = (end, flow.registered) {
        shared.cancel(pid, key).await;
    }
    let _ = client.shutdown().await;
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
    fn messages_the_proxy_writes_and_the_codes_it_passes_on() {
        assert_eq!(parameter_status("a", "b"), [b'S', 0, 0, 0, 8, b'a', 0, b'b', 0]);
        assert_eq!(server_code("3D000"), "3D000");
        assert_eq!(server_code("XX000"), "08006");
    }
}
