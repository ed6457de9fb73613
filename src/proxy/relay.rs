//! One proxied session after its client logged in ([proxy](docs/proxy.md)): the run
//! controller picks the replica (queueing or refusing as `run` would), the
//! proxy logs into it with the cluster's credentials, hands the client the
//! server's AuthenticationOk, parameters and key, then copies bytes both
//! ways without reading queries. The server-to-client stream is followed
//! message by message (lengths only), so when the replica's connection
//! breaks, or the proxy stops, the client gets one whole FATAL
//! ErrorResponse at a message boundary and a closed socket, never a hang.

use super::login::{send_fatal, Fatal};
use super::startup::Startup;
use super::Shared;
use crate::backend::live_metrics::SessionOutcome;
use crate::backend::proxy_feed::{failed_on, REPLICA_PARAM};
use crate::backend::wire::{Conn, WireError};
use crate::core::model::{Class, ConnectError, QueryError, ReplicaId};
use bytes::BytesMut;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Runs the session of a logged-in client to its end.
pub async fn session(shared: &Shared, id: u32, mut client: TcpStream, startup: &Startup, class: Class) {
    let asked = Instant::now();
    let r = match shared.admit(id, class).await {
        Ok(r) => r,
        Err(f) => {
            shared.count(class, None, SessionOutcome::Rejected, asked.elapsed());
            return send_fatal(&mut client, &f).await;
        }
    };
    let server = match connect(shared, r, startup).await {
        Ok(s) => s,
        Err(f) => {
            shared.count(class, Some(r), SessionOutcome::Failed, asked.elapsed());
            shared.ended(r, class);
            return send_fatal(&mut client, &f).await;
        }
    };
    shared.count(class, Some(r), SessionOutcome::Routed, asked.elapsed());
    let key = relay(shared, r, client, server).await;
    if let Some(k) = key {
        shared.keys.lock().expect("keys lock").remove(&k);
    }
    shared.ended(r, class);
}

/// Logs into replica `r` for the client: its database (or its user name,
/// as PostgreSQL defaults it) and its other parameters.
async fn connect(shared: &Shared, r: ReplicaId, startup: &Startup) -> Result<(TcpStream, BytesMut), Fatal> {
    let database = startup.param("database").or_else(|| startup.param("user")).unwrap_or("postgres").to_string();
    let rest: Vec<(String, String)> =
        startup.params().iter().filter(|(k, _)| k != "user" && k != "database").cloned().collect();
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
    key_body: Vec<u8>,
    /// A Terminate (`X`) went by (client to server): the server closing
    /// next is the session's normal end.
    terminated: bool,
}

impl Framing {
    fn new() -> Framing {
        Framing { header: [0; 5], seen: 0, remaining: 0, key: None, key_body: Vec::new(), terminated: false }
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
                    self.key_body.clear();
                    self.terminated |= self.header[0] == b'X';
                }
                continue;
            }
            let take = self.remaining.min(bytes.len());
            if self.header[0] == b'K' {
                self.key_body.extend(&bytes[..take]);
                if let [p0, p1, p2, p3, k0, k1, k2, k3] = self.key_body[..] {
                    self.key = Some((u32::from_be_bytes([p0, p1, p2, p3]), u32::from_be_bytes([k0, k1, k2, k3])));
                }
            }
            self.remaining -= take;
            bytes = &bytes[take..];
        }
    }
}

/// AuthenticationOk.
const AUTH_OK: [u8; 9] = [b'R', 0, 0, 0, 8, 0, 0, 0, 0];
/// A ParameterStatus message: `name` is now `value`.
fn parameter_status(name: &str, value: &str) -> Vec<u8> {
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
        shared.keys.lock().expect("keys lock").insert(k, r);
        *registered = Some(k);
    }
}

/// Copies both ways until one side closes or the proxy stops (then the
/// session's running statement is cancelled on its replica, so it does not
/// outlive the proxy); returns the session's cancel key (registered while
/// it lived).
async fn relay(
    shared: &Shared,
    r: ReplicaId,
    mut client: TcpStream,
    server: (TcpStream, BytesMut),
) -> Option<(u32, u32)> {
    let (mut server, pending) = server;
    let mut framing = Framing::new();
    let mut upstream = Framing::new();
    let mut registered = None;
    framing.feed(&pending);
    register(shared, r, &framing, &mut registered);
    let mut first = AUTH_OK.to_vec();
    first.extend(parameter_status(REPLICA_PARAM, &r.to_string()));
    first.extend_from_slice(&pending);
    let (mut cbuf, mut sbuf) = (vec![0u8; CHUNK], vec![0u8; CHUNK]);
    let mut stop = shared.terminate.clone();
    // One wait for the stop for the whole session: made anew in every turn
    // of the loop, it would register with the shared watch each time.
    let stopped = super::stopping(&mut stop);
    tokio::pin!(stopped);
    let began = shared.now();
    let end = if client.write_all(&first).await.is_err() {
        End::Quiet
    } else {
        loop {
            tokio::select! {
                biased;
                _ = &mut stopped => break End::Stop,
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
}
