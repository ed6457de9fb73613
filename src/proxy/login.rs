//! A client's way in ([proxy](docs/proxy.md)): its startup packets (an SSL
//! request answered `S` when TLS is on, else `N`, as a GSS request always
//! is; a cancel request passed to the replica that owns the key),
//! then SCRAM-SHA-256 against the users file, or trust without one. Each
//! failure gets the FATAL ErrorResponse a PostgreSQL server would send.

use super::scram::{self, Exchange, ScramError};
use super::startup::{self, fatal, Startup};
use super::tls::{ClientStream, Mode};
use super::Shared;
use bytes::{Buf, BytesMut};
use std::collections::HashMap;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsAcceptor;

/// The longest authentication message a client may send (PostgreSQL's
/// `PG_MAX_AUTH_TOKEN_LENGTH`).
const MAX_AUTH_LEN: usize = 65_535;

/// How a client's first packets ended.
pub enum Entry {
    /// A session asks to start with this startup message, authenticated.
    Session(Startup),
    /// The client asked for TLS and was told `S`: the handshake comes next,
    /// then its startup again.
    StartTls(TlsAcceptor),
    /// Nothing more to do (a cancel request, an error already sent, a
    /// client gone).
    Done,
}

/// A FATAL error to send before closing.
pub struct Fatal {
    pub code: &'static str,
    pub message: String,
    /// The DETAIL field, if any.
    pub detail: Option<String>,
}

impl Fatal {
    pub fn new(code: &'static str, message: impl Into<String>) -> Fatal {
        Fatal { code, message: message.into(), detail: None }
    }
}

/// Reads the client's startup and authenticates it.
pub async fn login(shared: &Shared, sock: &mut ClientStream, buf: &mut BytesMut) -> Result<Entry, Fatal> {
    let start = loop {
        let packet = loop {
            match startup::parse(buf) {
                Ok(Some((p, used))) => {
                    buf.advance(used);
                    break p;
                }
                Ok(None) => {
                    if !fill(sock, buf).await {
                        return Ok(Entry::Done);
                    }
                }
                Err(e) => return Err(Fatal::new(e.code(), e.to_string())),
            }
        };
        match packet {
            Startup::SslRequest | Startup::GssEncRequest => {
                if !buf.is_empty() {
                    return Err(Fatal::new("08P01", "received unencrypted data after SSL request"));
                }
                let offer = match (&shared.tls, &packet, sock.is_tls()) {
                    (Some(tls), Startup::SslRequest, false) if tls.mode != Mode::Disable => Some(tls.acceptor.clone()),
                    _ => None,
                };
                let answer: &[u8] = if offer.is_some() { b"S" } else { b"N" };
                if sock.write_all(answer).await.is_err() {
                    return Ok(Entry::Done);
                }
                if let Some(acceptor) = offer {
                    return Ok(Entry::StartTls(acceptor));
                }
            }
            Startup::Cancel { pid, key } => {
                shared.cancel(pid, key).await;
                return Ok(Entry::Done);
            }
            start @ Startup::Start { .. } => break start,
        }
    };
    if shared.tls.as_ref().is_some_and(|t| t.mode == Mode::Require) && !sock.is_tls() {
        return Err(Fatal::new(
            "28000",
            "plbbench proxy accepts TLS connections only ([tls] mode = \"require\"): connect with sslmode=require",
        ));
    }
    match &shared.users {
        None => Ok(Entry::Session(start)),
        Some(users) => match authenticate(users, start.param("user").unwrap_or_default(), sock, buf).await? {
            true => Ok(Entry::Session(start)),
            false => Ok(Entry::Done),
        },
    }
}

/// Reads more bytes; false when the client closed or failed.
async fn fill(sock: &mut ClientStream, buf: &mut BytesMut) -> bool {
    buf.reserve(1024);
    matches!(sock.read_buf(buf).await, Ok(n) if n > 0)
}

/// An Authentication message (`R`) with its code and data.
fn auth_message(code: u32, data: &[u8]) -> Vec<u8> {
    let mut m = vec![b'R'];
    m.extend(((8 + data.len()) as u32).to_be_bytes());
    m.extend(code.to_be_bytes());
    m.extend(data);
    m
}

/// The client's next message of type `p` (a password or SASL response);
/// `Ok(None)` when it hung up or said Terminate.
async fn read_p(sock: &mut ClientStream, buf: &mut BytesMut) -> Result<Option<BytesMut>, Fatal> {
    loop {
        if buf.len() >= 5 {
            let tag = buf[0];
            let len = u32::from_be_bytes(buf[1..5].try_into().expect("4 bytes")) as usize;
            if tag == b'X' {
                return Ok(None);
            }
            if tag != b'p' {
                return Err(Fatal::new("08P01", format!("expected SASL response, got message type {}", tag as char)));
            }
            if !(4..=MAX_AUTH_LEN).contains(&len) {
                return Err(Fatal::new("08P01", format!("invalid message length {len}")));
            }
            if buf.len() > len {
                let mut m = buf.split_to(len + 1);
                m.advance(5);
                return Ok(Some(m));
            }
        }
        if !fill(sock, buf).await {
            return Ok(None);
        }
    }
}

/// SCRAM-SHA-256 with the user's secret: true when the client proved it,
/// false when it left; a wrong proof is 28P01 as PostgreSQL sends it.
async fn authenticate(
    users: &HashMap<String, scram::Secret>,
    user: &str,
    sock: &mut ClientStream,
    buf: &mut BytesMut,
) -> Result<bool, Fatal> {
    let gone = |r: std::io::Result<()>| r.is_err();
    if gone(sock.write_all(&auth_message(10, b"SCRAM-SHA-256\0\0")).await) {
        return Ok(false);
    }
    let Some(first) = read_p(sock, buf).await? else { return Ok(false) };
    let malformed = |why: &str| Fatal::new("08P01", format!("malformed SCRAM message ({why})"));
    let (mech, data) = scram::initial_response(&first).ok_or_else(|| malformed("bad SASLInitialResponse"))?;
    if mech != b"SCRAM-SHA-256" {
        return Err(Fatal::new("08P01", "client selected an invalid SASL authentication mechanism"));
    }
    let failed = || Fatal::new("28P01", format!("password authentication failed for user \"{user}\""));
    let to_fatal = |e: ScramError| match e {
        ScramError::Malformed(why) => malformed(why),
        ScramError::Failed => failed(),
    };
    let (exchange, server_first) = Exchange::start(users.get(user), data, &scram::nonce()).map_err(to_fatal)?;
    if gone(sock.write_all(&auth_message(11, server_first.as_bytes())).await) {
        return Ok(false);
    }
    let Some(last) = read_p(sock, buf).await? else { return Ok(false) };
    let server_final = exchange.finish(&last).map_err(to_fatal)?;
    Ok(!gone(sock.write_all(&auth_message(12, server_final.as_bytes())).await))
}

/// Sends `f` as a FATAL ErrorResponse (best effort: the client may be gone).
pub async fn send_fatal(sock: &mut ClientStream, f: &Fatal) {
    let _ = sock.write_all(&fatal(f.code, &f.message, f.detail.as_deref())).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_authentication_message_is_framed() {
        assert_eq!(auth_message(0, b""), [b'R', 0, 0, 0, 8, 0, 0, 0, 0]);
    }
}
