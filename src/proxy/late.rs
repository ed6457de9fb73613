//! A session whose startup packet carries no class
//! ([proxy](docs/proxy.md#clients-that-name-themselves-late)): the proxy
//! finishes the client's login itself, as PgBouncer does (its own
//! AuthenticationOk, a server's ParameterStatus values, a cancel key of its
//! own), answers the plain `SET`s the client sends first, and routes the
//! session when a statement names its class (`SET application_name`),
//! when another statement comes, or when `late_class_timeout_ms` passes
//! (the default class). On the chosen replica it replays the answered
//! `SET`s, swallows the server's own login messages, passes the client's
//! statement on and relays from then on ([`relay`]).

use super::late_class::{self, Greeting, Said};
use super::login::{send_fatal, Fatal};
use super::relay::{self, Session, Start, AUTH_OK};
use super::startup::Startup;
use super::tls::ClientStream;
use super::violations::Who;
use super::Shared;
use crate::backend::wire::Conn;
use bytes::BytesMut;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// At most this many `SET`s are answered before the session is routed.
const MAX_ANSWERED: usize = 16;

/// A first message longer than this is not waited for: the session is
/// routed with what is known, and the rest of it is relayed.
const MAX_FIRST: usize = 1 << 20;

/// Runs the session of a logged-in client that did not name its class.
pub async fn session(shared: &Arc<Shared>, id: u32, mut client: ClientStream, startup: &Startup, who: Who) {
    let params = match cluster_params(shared, startup).await {
        Ok(p) => p,
        Err(f) => return send_fatal(&mut client, &f).await,
    };
    let key = (shared.own_pid(), rand::random::<u32>());
    let mut hello = AUTH_OK.to_vec();
    params.iter().for_each(|p| hello.extend(p));
    hello.extend(late_class::key_data(key.0, key.1));
    hello.extend(late_class::ready());
    if client.write_all(&hello).await.is_err() {
        return;
    }
    let Some(heard) = listen(shared, &mut client).await else { return };
    let class = heard.app_name.as_deref().map_or(shared.rule.default, |v| shared.rule.class_of_value(v));
    let Some(relay::Routed { r, server, pending, origin }) =
        relay::route(shared, id, &mut client, startup, class).await
    else {
        return;
    };
    let (replayed, server) = match replay_on(shared, server, pending, &heard.sets, &heard.first).await {
        Ok(done) => done,
        Err(f) => {
            shared.ended(r, class);
            return send_fatal(&mut client, &f).await;
        }
    };
    let registered = replayed.key.map(|k| {
        shared.keys.lock().expect("keys lock").insert(key, (r, k));
        key
    });
    let mut to_client = shared.routed_params(r);
    replayed.params.iter().for_each(|p| to_client.extend(p));
    let start = Start { to_client, to_server: heard.first, seen: BytesMut::new(), key: registered };
    relay::finish(shared, Session { id, r, class, who, origin }, client, server, start).await;
}

/// [`replay`] on a routed connection, then the client's first bytes
/// after it: the connection back out of tokio's epoll, and the replay's
/// greeting.
async fn replay_on(
    shared: &Shared,
    server: std::net::TcpStream,
    pending: BytesMut,
    sets: &[Vec<u8>],
    first: &[u8],
) -> Result<(Replayed, std::net::TcpStream), Fatal> {
    let lost = |e: std::io::Error| Fatal::new("08006", format!("plbbench proxy: the connection to the replica: {e}"));
    let mut server = TcpStream::from_std(server).map_err(lost)?;
    let replayed = replay(shared, &mut server, pending, sets).await?;
    server.write_all(first).await.map_err(lost)?;
    Ok((replayed, server.into_std().map_err(lost)?))
}

/// What a client said before its session was routed.
struct Heard {
    /// The value of its `SET application_name`, if it sent one.
    app_name: Option<String>,
    /// The `SET`s the proxy answered, whole messages (a Query, or an
    /// extended-protocol batch through its Sync), in order.
    sets: Vec<Vec<u8>>,
    /// Its bytes from the first message not answered on: for the server.
    first: Vec<u8>,
}

/// Reads the client's first messages until one decides the class, the
/// wait runs out, or the client leaves (`None`, also when the proxy stops:
/// then the client got 57P01).
async fn listen(shared: &Shared, client: &mut ClientStream) -> Option<Heard> {
    let deadline = tokio::time::Instant::now() + shared.late_class_timeout;
    let mut buf = BytesMut::with_capacity(1024);
    let mut sets = Vec::new();
    let mut stop = shared.terminate.clone();
    loop {
        while let Some((tag, len)) = late_class::message_len(&buf) {
            if tag == b'X' {
                return None;
            }
            if len > MAX_FIRST {
                return Some(Heard { app_name: None, sets, first: buf.to_vec() });
            }
            if buf.len() < len {
                break;
            }
            let said = late_class::sql_of(tag, &buf[5..len]).map(|sql| late_class::said(&sql));
            let answered = match (said, tag) {
                (Some(Said::OtherSet), b'Q') if sets.len() < MAX_ANSWERED => Some((len, late_class::set_answered())),
                (Some(Said::OtherSet), b'P') if sets.len() < MAX_ANSWERED => match late_class::set_batch_answered(&buf)
                {
                    None if buf.len() <= MAX_FIRST => break,
                    Some(Some(batch)) => Some(batch),
                    _ => None,
                },
                (Some(Said::AppName(v)), _) => return Some(Heard { app_name: Some(v), sets, first: buf.to_vec() }),
                _ => None,
            };
            let Some((used, answer)) = answered else {
                return Some(Heard { app_name: None, sets, first: buf.to_vec() });
            };
            sets.push(buf.split_to(used).to_vec());
            client.write_all(&answer).await.ok()?;
        }
        buf.reserve(1024);
        tokio::select! {
            n = client.read_buf(&mut buf) => match n {
                Ok(n) if n > 0 => {}
                _ => return None,
            },
            _ = tokio::time::sleep_until(deadline) => return Some(Heard { app_name: None, sets, first: buf.to_vec() }),
            _ = super::stopping(&mut stop) => {
                let f = Fatal::new("57P01", "terminating connection due to administrator command");
                send_fatal(client, &f).await;
                return None;
            }
        }
    }
}

/// The server's login messages and its answers to the replayed `SET`s.
struct Replayed {
    /// Its cancel key.
    key: Option<(u32, u32)>,
    /// The ParameterStatus messages the replayed `SET`s caused, for the
    /// client.
    params: Vec<Vec<u8>>,
}

/// Swallows the server's login messages (keeping its cancel key), then
/// replays `sets` on it; a refused `SET` is the client's FATAL.
async fn replay(
    shared: &Shared,
    server: &mut TcpStream,
    mut pending: BytesMut,
    sets: &[Vec<u8>],
) -> Result<Replayed, Fatal> {
    let limit = shared.server_connect_timeout;
    let login = next_ready(server, &mut pending, limit).await?;
    let mut out = Replayed { key: login.key, params: Vec::new() };
    for set in sets {
        let lost = |e: std::io::Error| Fatal::new("08006", format!("plbbench proxy: replaying a SET: {e}"));
        server.write_all(set).await.map_err(lost)?;
        out.params.extend(next_ready(server, &mut pending, limit).await?.params);
    }
    Ok(out)
}

/// Reads the server's messages through its next ReadyForQuery, within
/// `limit`; an ErrorResponse among them is the client's FATAL.
async fn next_ready(server: &mut TcpStream, buf: &mut BytesMut, limit: Duration) -> Result<Greeting, Fatal> {
    let read = super::server_pool::read_ready(server, buf, usize::MAX);
    let g = match tokio::time::timeout(limit, read).await {
        Ok(Ok((g, _))) => g,
        Ok(Err(why)) => return Err(Fatal::new("08006", format!("plbbench proxy: the replica's login: {why}"))),
        Err(_) => {
            return Err(Fatal::new("08006", format!("plbbench proxy: the replica did not answer within {limit:?}")))
        }
    };
    match &g.error {
        Some(e) => {
            let (code, message) = late_class::error_of(e);
            Err(Fatal::new(
                "08006",
                format!("plbbench proxy: the replica refused a statement it answered for it ({code}): {message}"),
            ))
        }
        None => Ok(g),
    }
}

/// The ParameterStatus messages the proxy tells a client it logs in
/// itself: a server's (kept from a login, or learnt now from the first
/// replica that answers), with the client's own startup values where it
/// sent them and its `application_name` empty, as it sent none.
async fn cluster_params(shared: &Shared, startup: &Startup) -> Result<Vec<Vec<u8>>, Fatal> {
    let kept = shared.server_params.lock().expect("params lock").clone();
    let params = match kept {
        Some(p) => p,
        None => learn(shared, startup).await?,
    };
    Ok(params
        .iter()
        .filter_map(|m| late_class::param_of(m))
        .map(|(name, value)| for_client(startup, name, value))
        .collect())
}

/// One ParameterStatus for the client: its own value of `name`, if its
/// startup packet set it, else the server's `value`.
fn for_client(startup: &Startup, name: &str, value: &str) -> Vec<u8> {
    let own = startup
        .params()
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name) && !matches!(k.as_str(), "user" | "database" | "options"))
        .map(|(_, v)| v.as_str());
    let value = if name == "application_name" { "" } else { own.unwrap_or(value) };
    relay::parameter_status(name, value)
}

/// Logs into the replicas in turn until one answers, to learn its
/// ParameterStatus values (kept for the next clients).
async fn learn(shared: &Shared, startup: &Startup) -> Result<Vec<Vec<u8>>, Fatal> {
    let (database, rest) = relay::server_startup(startup);
    let limit = shared.server_connect_timeout;
    let mut why = String::from("no replica");
    for (i, cfg) in shared.replicas.iter().enumerate() {
        let (mut server, mut pending) = match tokio::time::timeout(limit, Conn::login(cfg, &database, &rest)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                why = format!("r{}: {e}", i + 1);
                continue;
            }
            Err(_) => {
                why = format!("r{}: no answer within {limit:?}", i + 1);
                continue;
            }
        };
        match next_ready(&mut server, &mut pending, limit).await {
            Ok(g) => {
                let _ = server.write_all(&[b'X', 0, 0, 0, 4]).await;
                *shared.server_params.lock().expect("params lock") = Some(g.params.clone());
                return Ok(g.params);
            }
            Err(f) => why = format!("r{}: {}", i + 1, f.message),
        }
    }
    Err(Fatal::new("08006", format!("plbbench proxy: no replica answered to log the client in ({why})")))
}
