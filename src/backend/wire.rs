//! A lean PostgreSQL client for `plbbench bench`
//! ([performance](docs/performance.md#the-generator-against-pgbench)): one
//! socket per connection, owned by the task that sends its queries, as
//! libpq's is. tokio-postgres splits a connection into a client and a
//! connection task joined by channels, which costs two task wake-ups and
//! two channel hops per query; on two cores shared with the server that CPU
//! is taken from the server, so the generator measured slower than pgbench.
//! This client speaks the protocol itself (messages encoded and parsed by
//! `postgres-protocol`, the crate tokio-postgres uses), reuses one read and
//! one write buffer per connection, sends Bind/Execute/Sync (or Query) in
//! one write and reads until ReadyForQuery. Authentication: trust,
//! cleartext, MD5 and SCRAM-SHA-256, without TLS. It only runs queries and
//! counts rows; the real driver keeps tokio-postgres for everything else.

use crate::scram;
use bytes::{Buf, BufMut, BytesMut};
use postgres_protocol::authentication::{md5_hash, sasl};
use postgres_protocol::message::{backend, frontend};
use std::io;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio_postgres::config::Host;
use tokio_postgres::Config;

/// Why a connection or a query failed.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed.
    #[error("socket: {0}")]
    Io(#[from] io::Error),
    /// The server answered with an ErrorResponse.
    #[error("server error {code}: {message}")]
    Server {
        /// SQLSTATE.
        code: String,
        /// The message.
        message: String,
        /// FATAL or PANIC: the server closes the connection.
        fatal: bool,
    },
    /// The server closed the connection.
    #[error("the server closed the connection")]
    Closed,
    /// No answer within the deadline.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Something the client cannot do (a setting, an authentication method)
    /// or an answer out of protocol.
    #[error("{0}")]
    Unsupported(String),
}

impl WireError {
    /// Whether the connection can go on after this error (a statement's
    /// own error, as a unique violation or a cancelled statement).
    pub fn recoverable(&self) -> bool {
        matches!(self, WireError::Server { fatal: false, .. })
    }
}

/// A TCP or Unix-domain socket.
enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// One connection: its socket and reused buffers.
pub struct Conn {
    socket: Socket,
    rbuf: BytesMut,
    wbuf: BytesMut,
}

/// The statement name every prepared query uses (one per connection).
const STATEMENT: &str = "plbbench";

impl Conn {
    /// Opens and authenticates a connection as `cfg` says (its first host,
    /// port, user, password, dbname and application_name), within `timeout`.
    pub async fn connect(cfg: &Config, timeout: Duration) -> Result<Conn, WireError> {
        tokio::time::timeout(timeout, Conn::open(cfg)).await.map_err(|_| WireError::Timeout(timeout))?
    }

    async fn open(cfg: &Config) -> Result<Conn, WireError> {
        let port = cfg.get_ports().first().copied().unwrap_or(5432);
        let socket = match cfg.get_hosts().first() {
            Some(Host::Tcp(h)) => {
                let s = TcpStream::connect((h.as_str(), port)).await?;
                s.set_nodelay(true)?;
                Socket::Tcp(s)
            }
            Some(Host::Unix(dir)) => Socket::Unix(UnixStream::connect(dir.join(format!(".s.PGSQL.{port}"))).await?),
            None => return Err(WireError::Unsupported("the connection string names no host".into())),
        };
        let mut conn = Conn { socket, rbuf: BytesMut::with_capacity(4096), wbuf: BytesMut::with_capacity(256) };
        let user =
            cfg.get_user().ok_or_else(|| WireError::Unsupported("the connection string names no user".into()))?;
        let mut params = vec![("user", user), ("client_encoding", "UTF8")];
        if let Some(db) = cfg.get_dbname() {
            params.push(("database", db));
        }
        if let Some(app) = cfg.get_application_name() {
            params.push(("application_name", app));
        }
        frontend::startup_message(params, &mut conn.wbuf)?;
        conn.flush().await?;
        conn.authenticate(user, cfg.get_password()).await?;
        conn.until_ready().await.map(|_| conn)
    }

    /// Logs into the server `cfg` names over TCP as its user, on `database`,
    /// passing `params` (a proxied client's other startup parameters) on;
    /// returns the socket and the bytes already read after
    /// AuthenticationOk (the server's ParameterStatus, BackendKeyData and
    /// ReadyForQuery follow), for `plbbench proxy` to relay.
    pub async fn login(
        cfg: &Config,
        database: &str,
        params: &[(String, String)],
    ) -> Result<(TcpStream, BytesMut), WireError> {
        let port = cfg.get_ports().first().copied().unwrap_or(5432);
        let Some(Host::Tcp(host)) = cfg.get_hosts().first() else {
            return Err(WireError::Unsupported("the proxy reaches replicas over TCP only".into()));
        };
        let s = TcpStream::connect((host.as_str(), port)).await?;
        s.set_nodelay(true)?;
        let mut conn = Conn { socket: Socket::Tcp(s), rbuf: BytesMut::with_capacity(8192), wbuf: BytesMut::new() };
        let user =
            cfg.get_user().ok_or_else(|| WireError::Unsupported("the connection string names no user".into()))?;
        let mut all = vec![("user", user), ("database", database)];
        all.extend(params.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        frontend::startup_message(all, &mut conn.wbuf)?;
        conn.flush().await?;
        conn.authenticate(user, cfg.get_password()).await?;
        let Socket::Tcp(s) = conn.socket else { unreachable!("opened over TCP above") };
        Ok((s, conn.rbuf))
    }

    /// Answers the server's authentication request until AuthenticationOk.
    async fn authenticate(&mut self, user: &str, password: Option<&[u8]>) -> Result<(), WireError> {
        let need = || WireError::Unsupported("the server asks for a password and none is given".into());
        match self.message().await? {
            backend::Message::AuthenticationOk => return Ok(()),
            backend::Message::AuthenticationCleartextPassword => {
                frontend::password_message(password.ok_or_else(need)?, &mut self.wbuf)?;
            }
            backend::Message::AuthenticationMd5Password(body) => {
                let hash = md5_hash(user.as_bytes(), password.ok_or_else(need)?, body.salt());
                frontend::password_message(hash.as_bytes(), &mut self.wbuf)?;
            }
            backend::Message::AuthenticationSasl(_) => return self.scram(password.ok_or_else(need)?).await,
            _ => {
                return Err(WireError::Unsupported(
                    "an authentication method other than trust, password, md5 or scram-sha-256".into(),
                ))
            }
        }
        self.flush().await?;
        self.expect_ok().await
    }

    /// SCRAM-SHA-256 without channel binding, with the salted password
    /// kept per server and role (`crate::scram`): only a process's first
    /// login to a server derives it, off the event loop.
    async fn scram(&mut self, password: &[u8]) -> Result<(), WireError> {
        let (client, first) = scram::Client::start();
        frontend::sasl_initial_response(sasl::SCRAM_SHA_256, first.as_bytes(), &mut self.wbuf)?;
        self.flush().await?;
        let backend::Message::AuthenticationSaslContinue(body) = self.message().await? else {
            return Err(WireError::Unsupported("SCRAM: expected the server's first message".into()));
        };
        let challenge = client.challenge(&String::from_utf8_lossy(body.data())).map_err(scram_failed)?;
        let salted = match challenge.kept(password) {
            Some(s) => s,
            None => derive(password, challenge.clone()).await?,
        };
        let (sent, last) = client.finish_with(password, &challenge, salted);
        frontend::sasl_response(last.as_bytes(), &mut self.wbuf)?;
        self.flush().await?;
        let backend::Message::AuthenticationSaslFinal(body) = self.message().await? else {
            return Err(WireError::Unsupported("SCRAM: expected the server's final message".into()));
        };
        sent.verify(&String::from_utf8_lossy(body.data())).map_err(scram_failed)?;
        self.expect_ok().await
    }

    async fn expect_ok(&mut self) -> Result<(), WireError> {
        match self.message().await? {
            backend::Message::AuthenticationOk => Ok(()),
            _ => Err(WireError::Unsupported("authentication: expected AuthenticationOk".into())),
        }
    }

    /// Prepares `sql` as this connection's statement (parameter types left
    /// to the server, as libpq's PQprepare with no types).
    pub async fn prepare(&mut self, sql: &str) -> Result<(), WireError> {
        frontend::parse(STATEMENT, sql, std::iter::empty(), &mut self.wbuf)?;
        frontend::sync(&mut self.wbuf);
        self.flush().await?;
        self.until_ready().await.map(|_| ())
    }

    /// Runs the prepared statement with `key` bound to `$1` as text (or no
    /// parameter); returns the rows it sent.
    pub async fn execute(&mut self, key: Option<i64>) -> Result<u64, WireError> {
        put_execute(&mut self.wbuf, key)?;
        self.flush().await?;
        self.until_ready().await
    }

    /// Runs `sql` with the simple query protocol, `$1` (if `key` is given)
    /// replaced by the key's digits; returns the rows it sent.
    pub async fn simple(&mut self, sql: &[&str], key: Option<i64>) -> Result<u64, WireError> {
        put_simple(&mut self.wbuf, sql, key);
        self.flush().await?;
        self.until_ready().await
    }

    /// The connection's socket, taken out of tokio (in non-blocking mode),
    /// and the bytes already read from it: for a loop that drives the
    /// socket itself (`commands::bench`'s closed loop).
    pub fn into_std(self) -> io::Result<(StdSocket, BytesMut)> {
        let socket = match self.socket {
            Socket::Tcp(s) => StdSocket::Tcp(s.into_std()?),
            Socket::Unix(s) => StdSocket::Unix(s.into_std()?),
        };
        Ok((socket, self.rbuf))
    }

    async fn flush(&mut self) -> Result<(), WireError> {
        let r = match &mut self.socket {
            Socket::Tcp(s) => s.write_all(&self.wbuf).await,
            Socket::Unix(s) => s.write_all(&self.wbuf).await,
        };
        self.wbuf.clear();
        r.map_err(WireError::from)
    }

    /// Reads more bytes; the server closing the socket is an error.
    async fn fill(&mut self) -> Result<(), WireError> {
        if self.rbuf.capacity() - self.rbuf.len() < 1024 {
            self.rbuf.reserve(4096);
        }
        let n = match &mut self.socket {
            Socket::Tcp(s) => s.read_buf(&mut self.rbuf).await?,
            Socket::Unix(s) => s.read_buf(&mut self.rbuf).await?,
        };
        if n == 0 {
            return Err(WireError::Closed);
        }
        Ok(())
    }

    /// The next whole message, parsed (set-up and authentication only).
    async fn message(&mut self) -> Result<backend::Message, WireError> {
        loop {
            if let Some(m) = backend::Message::parse(&mut self.rbuf)? {
                if let backend::Message::ErrorResponse(body) = m {
                    return Err(server_error(&body));
                }
                return Ok(m);
            }
            self.fill().await?;
        }
    }

    /// Skips to ReadyForQuery, counting DataRows; the first ErrorResponse is
    /// the result once the server is ready again (or at once if fatal).
    async fn until_ready(&mut self) -> Result<u64, WireError> {
        let mut answer = Answer::default();
        loop {
            if let Some(done) = answer.scan(&mut self.rbuf)? {
                return done;
            }
            self.fill().await?;
        }
    }
}

/// A socket taken out of tokio by [`Conn::into_std`].
pub enum StdSocket {
    /// TCP.
    Tcp(std::net::TcpStream),
    /// A Unix-domain socket.
    Unix(std::os::unix::net::UnixStream),
}

/// Appends Bind (of `key` as text to `$1`, or no parameter), Execute and
/// Sync of the connection's prepared statement to `wbuf`.
pub fn put_execute(wbuf: &mut BytesMut, key: Option<i64>) -> Result<(), WireError> {
    let mut digits = itoa::Buffer::new();
    let values = key.map(|k| digits.format(k).as_bytes());
    let text = |v: &[u8], buf: &mut BytesMut| {
        buf.put_slice(v);
        Ok(postgres_protocol::IsNull::No)
    };
    frontend::bind("", STATEMENT, [0i16], values, text, [], wbuf)
        .map_err(|_| WireError::Unsupported("cannot encode the parameter".into()))?;
    frontend::execute("", 0, wbuf)?;
    frontend::sync(wbuf);
    Ok(())
}

/// Appends a Query message of `sql`'s parts joined by `key`'s digits (the
/// parts are the statement split at `$1`) to `wbuf`.
pub fn put_simple(wbuf: &mut BytesMut, sql: &[&str], key: Option<i64>) {
    let mut digits = itoa::Buffer::new();
    let key = key.map(|k| digits.format(k));
    let body: usize = sql.iter().map(|s| s.len()).sum::<usize>() + key.map_or(0, |k| k.len() * (sql.len() - 1));
    wbuf.put_u8(b'Q');
    wbuf.put_i32((body + 5) as i32);
    for (i, part) in sql.iter().enumerate() {
        if i > 0 {
            wbuf.put_slice(key.unwrap_or_default().as_bytes());
        }
        wbuf.put_slice(part.as_bytes());
    }
    wbuf.put_u8(0);
}

/// A statement's answer as it arrives: DataRows counted, the first
/// ErrorResponse kept, until ReadyForQuery.
#[derive(Default)]
pub struct Answer {
    rows: u64,
    error: Option<WireError>,
}

impl Answer {
    /// Consumes the whole messages in `rbuf`: `Some` with the answer (the
    /// rows, or the statement's first error) once ReadyForQuery has been
    /// read, `None` while more bytes are needed; a fatal error at once.
    pub fn scan(&mut self, rbuf: &mut BytesMut) -> Result<Option<Result<u64, WireError>>, WireError> {
        while let Some(h) = backend::Header::parse(rbuf)? {
            let len = h.len() as usize + 1;
            if rbuf.len() < len {
                rbuf.reserve(len - rbuf.len());
                return Ok(None);
            }
            match h.tag() {
                backend::DATA_ROW_TAG => self.rows += 1,
                backend::READY_FOR_QUERY_TAG => {
                    rbuf.advance(len);
                    let answer = std::mem::take(self);
                    return Ok(Some(answer.error.map_or(Ok(answer.rows), Err)));
                }
                backend::ERROR_RESPONSE_TAG => {
                    let mut msg = rbuf.split_to(len);
                    if let Some(backend::Message::ErrorResponse(body)) = backend::Message::parse(&mut msg)? {
                        let e = server_error(&body);
                        if !e.recoverable() {
                            return Err(e);
                        }
                        self.error.get_or_insert(e);
                    }
                    continue;
                }
                _ => {}
            }
            rbuf.advance(len);
        }
        Ok(None)
    }
}

/// The SCRAM client's salted password for a server's salt and iteration
/// count: the key derivation (PBKDF2, 4096 rounds by default, about a
/// millisecond of CPU) runs on tokio's blocking pool, so that it stalls no
/// event loop (the proxy logs clients in on one thread).
async fn derive(password: &[u8], challenge: scram::Challenge) -> Result<[u8; 32], WireError> {
    let password = password.to_vec();
    tokio::task::spawn_blocking(move || challenge.derive(&password))
        .await
        .map_err(|e| WireError::Io(io::Error::other(format!("SCRAM key derivation: {e}"))))
}

/// A SCRAM exchange the server's messages broke, as a [`WireError`].
fn scram_failed(e: scram::ClientError) -> WireError {
    WireError::Unsupported(e.to_string())
}

/// An ErrorResponse as a [`WireError::Server`].
fn server_error(body: &backend::ErrorResponseBody) -> WireError {
    use fallible_iterator::FallibleIterator;
    let (mut code, mut message, mut fatal) = (String::new(), String::new(), false);
    let mut fields = body.fields();
    while let Ok(Some(f)) = fields.next() {
        let text = String::from_utf8_lossy(f.value_bytes());
        match f.type_() {
            b'C' => code = text.into_owned(),
            b'M' => message = text.into_owned(),
            b'V' => fatal = matches!(&*text, "FATAL" | "PANIC"),
            _ => {}
        }
    }
    WireError::Server { code, message, fatal }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_whether_the_connection_goes_on() {
        let e = |fatal| WireError::Server { code: "57014".into(), message: "canceled".into(), fatal };
        assert!(e(false).recoverable());
        assert!(!e(true).recoverable());
        assert!(!WireError::Closed.recoverable());
        assert!(!WireError::Timeout(Duration::from_secs(1)).recoverable());
    }
}
