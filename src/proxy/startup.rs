//! The first bytes a PostgreSQL client sends (`plbbench proxy`, docs/proxy.md),
//! read as the server reads them (`ProcessStartupPacket` in PostgreSQL's
//! `backend_startup.c`): a length-prefixed packet that is an SSL or GSS
//! encryption request, a cancel request, or a startup message with the
//! protocol version and `name\0value\0` parameters. Pure: bytes in, a typed
//! packet or the error a real server would answer with out, so the parser
//! is fuzzed without a socket. Also the ErrorResponse the proxy sends.

use std::fmt;

/// The most a startup packet may hold, length word included (PostgreSQL's
/// `MAX_STARTUP_PACKET_LENGTH`).
pub const MAX_STARTUP_LEN: usize = 10_000;
/// The request codes PostgreSQL reserves in the version word.
const CANCEL_CODE: u32 = (1234 << 16) | 5678;
const SSL_CODE: u32 = (1234 << 16) | 5679;
const GSSENC_CODE: u32 = (1234 << 16) | 5680;

/// One packet from a client that has not started a session yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Startup {
    /// SSLRequest: answer `S` or `N`, then read the next packet.
    SslRequest,
    /// GSSENCRequest: answer `N`, then read the next packet.
    GssEncRequest,
    /// CancelRequest for the backend `pid` with `key`: no answer.
    Cancel { pid: u32, key: u32 },
    /// StartupMessage: protocol 3.`minor` and its parameters in order.
    Start { minor: u16, params: Vec<(String, String)> },
}

impl Startup {
    /// A startup parameter (`user`, `database`, `application_name`, ...).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params().iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Every startup parameter in order (none for a request).
    pub fn params(&self) -> &[(String, String)] {
        match self {
            Startup::Start { params, .. } => params,
            _ => &[],
        }
    }
}

/// Why a packet was refused: the SQLSTATE and message a PostgreSQL server
/// gives for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartupError {
    /// The length word is below 8 or above [`MAX_STARTUP_LEN`].
    InvalidLength(u32),
    /// A protocol other than 3.x.
    UnsupportedVersion { major: u16, minor: u16 },
    /// A cancel request that is not exactly 16 bytes.
    BadCancel,
    /// Parameters not made of NUL-terminated names and values, or no final NUL.
    BadLayout,
    /// Parameters that are not UTF-8.
    NotUtf8,
    /// No `user` parameter, or an empty one.
    NoUser,
}

impl StartupError {
    /// The SQLSTATE a server sends with it.
    pub fn code(&self) -> &'static str {
        match self {
            StartupError::UnsupportedVersion { .. } => "0A000",
            StartupError::NoUser => "28000",
            StartupError::NotUtf8 => "22021",
            _ => "08P01",
        }
    }
}

impl fmt::Display for StartupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartupError::InvalidLength(n) => write!(f, "invalid length of startup packet: {n}"),
            StartupError::UnsupportedVersion { major, minor } => {
                write!(f, "unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.0")
            }
            StartupError::BadCancel => write!(f, "invalid length of cancel request packet"),
            StartupError::BadLayout => write!(f, "invalid startup packet layout: expected terminator as last byte"),
            StartupError::NotUtf8 => write!(f, "invalid byte sequence for encoding \"UTF8\" in startup packet"),
            StartupError::NoUser => write!(f, "no PostgreSQL user name specified in startup packet"),
        }
    }
}

impl std::error::Error for StartupError {}

/// Reads one packet from the front of `buf`: `Ok(None)` while it is
/// incomplete, else the packet and the bytes it took. Never reads past its
/// length word, so a client's next packet stays in the buffer.
pub fn parse(buf: &[u8]) -> Result<Option<(Startup, usize)>, StartupError> {
    let Some(word) = buf.get(..4) else { return Ok(None) };
    let len = u32::from_be_bytes(word.try_into().expect("4 bytes"));
    if !(8..=MAX_STARTUP_LEN as u32).contains(&len) {
        return Err(StartupError::InvalidLength(len));
    }
    let Some(packet) = buf.get(4..len as usize) else { return Ok(None) };
    let code = u32::from_be_bytes(packet[..4].try_into().expect("4 bytes"));
    let body = &packet[4..];
    let startup = match code {
        SSL_CODE if body.is_empty() => Startup::SslRequest,
        GSSENC_CODE if body.is_empty() => Startup::GssEncRequest,
        CANCEL_CODE => match body {
            [p0, p1, p2, p3, k0, k1, k2, k3] => Startup::Cancel {
                pid: u32::from_be_bytes([*p0, *p1, *p2, *p3]),
                key: u32::from_be_bytes([*k0, *k1, *k2, *k3]),
            },
            _ => return Err(StartupError::BadCancel),
        },
        _ => {
            let (major, minor) = ((code >> 16) as u16, code as u16);
            if major != 3 {
                return Err(StartupError::UnsupportedVersion { major, minor });
            }
            let params = params(body)?;
            if !params.iter().any(|(k, v)| k == "user" && !v.is_empty()) {
                return Err(StartupError::NoUser);
            }
            Startup::Start { minor, params }
        }
    };
    Ok(Some((startup, len as usize)))
}

/// `name\0value\0 ... \0` as pairs.
fn params(body: &[u8]) -> Result<Vec<(String, String)>, StartupError> {
    let Some((&0, fields)) = body.split_last() else { return Err(StartupError::BadLayout) };
    if fields.is_empty() {
        return Ok(Vec::new());
    }
    let Some((&0, fields)) = fields.split_last() else { return Err(StartupError::BadLayout) };
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| StartupError::NotUtf8);
    let parts: Vec<&[u8]> = fields.split(|&b| b == 0).collect();
    if parts.len() % 2 != 0 || parts.iter().step_by(2).any(|name| name.is_empty()) {
        return Err(StartupError::BadLayout);
    }
    parts.chunks(2).map(|kv| Ok((text(kv[0])?, text(kv[1])?))).collect()
}

/// A FATAL ErrorResponse message with `code`, `message` and an optional
/// DETAIL, as a server sends it before closing the connection.
pub fn fatal(code: &str, message: &str, detail: Option<&str>) -> Vec<u8> {
    let mut body = Vec::with_capacity(32 + message.len());
    let fields = [(b'S', "FATAL"), (b'V', "FATAL"), (b'C', code), (b'M', message)];
    for (field, value) in fields.into_iter().chain(detail.map(|d| (b'D', d))) {
        body.push(field);
        body.extend(value.bytes().filter(|&b| b != 0));
        body.push(0);
    }
    body.push(0);
    let mut out = Vec::with_capacity(5 + body.len());
    out.push(b'E');
    out.extend(((body.len() + 4) as u32).to_be_bytes());
    out.extend(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet: the length word, then `code`, then `body`.
    fn packet(code: u32, body: &[u8]) -> Vec<u8> {
        let mut p = ((8 + body.len()) as u32).to_be_bytes().to_vec();
        p.extend(code.to_be_bytes());
        p.extend(body);
        p
    }

    #[test]
    fn a_startup_message_gives_its_version_and_parameters() {
        let p = packet(3 << 16, b"user\0alice\0database\0db\0application_name\0premium-web\0\0");
        let (s, used) = parse(&p).unwrap().unwrap();
        assert_eq!(used, p.len());
        assert_eq!(s.param("user"), Some("alice"));
        assert_eq!(s.param("application_name"), Some("premium-web"));
        assert_eq!(s.param("options"), None);
        assert!(matches!(s, Startup::Start { minor: 0, .. }));
    }

    #[test]
    fn requests_are_recognised_and_the_next_packet_stays_in_the_buffer() {
        let mut two = packet(SSL_CODE, b"");
        two.extend(packet(3 << 16, b"user\0u\0\0"));
        assert_eq!(parse(&two).unwrap(), Some((Startup::SslRequest, 8)));
        assert!(matches!(parse(&two[8..]).unwrap(), Some((Startup::Start { .. }, _))));
        assert_eq!(parse(&packet(GSSENC_CODE, b"")).unwrap(), Some((Startup::GssEncRequest, 8)));
        let cancel = packet(CANCEL_CODE, &[0, 0, 0, 7, 0, 0, 1, 0]);
        assert_eq!(parse(&cancel).unwrap(), Some((Startup::Cancel { pid: 7, key: 256 }, 16)));
    }

    #[test]
    fn an_incomplete_packet_waits_for_more() {
        let p = packet(3 << 16, b"user\0u\0\0");
        for cut in 0..p.len() {
            assert_eq!(parse(&p[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn bad_packets_get_the_servers_errors() {
        let mut long = packet(3 << 16, b"");
        long[..4].copy_from_slice(&10_001u32.to_be_bytes());
        assert_eq!(parse(&long), Err(StartupError::InvalidLength(10_001)));
        assert_eq!(parse(&4u32.to_be_bytes()), Err(StartupError::InvalidLength(4)));
        let v2 = parse(&packet(2 << 16, b"user\0u\0\0")).unwrap_err();
        assert_eq!(
            (v2.code(), v2.to_string().as_str()),
            ("0A000", "unsupported frontend protocol 2.0: server supports 3.0 to 3.0")
        );
        assert_eq!(parse(&packet(CANCEL_CODE, &[0; 4])), Err(StartupError::BadCancel));
        assert_eq!(parse(&packet(3 << 16, b"user\0u")), Err(StartupError::BadLayout));
        assert_eq!(parse(&packet(3 << 16, b"user\0u\0")), Err(StartupError::BadLayout));
        assert_eq!(parse(&packet(3 << 16, b"user\0\0")), Err(StartupError::BadLayout));
        assert_eq!(parse(&packet(3 << 16, b"\0u\0\0")), Err(StartupError::BadLayout));
        assert_eq!(parse(&packet(3 << 16, b"user\0\xff\0\0")), Err(StartupError::NotUtf8));
        let none = parse(&packet(3 << 16, b"database\0d\0\0")).unwrap_err();
        assert_eq!((none.code(), none), ("28000", StartupError::NoUser));
        assert_eq!(parse(&packet(3 << 16, b"\0")), Err(StartupError::NoUser));
        assert_eq!(parse(&packet(3 << 16, b"user\0\0\0")), Err(StartupError::NoUser));
    }

    #[test]
    fn a_fatal_error_is_a_well_formed_error_response() {
        let m = fatal("08P01", "bad\0input", None);
        assert_eq!(m[0], b'E');
        let len = u32::from_be_bytes(m[1..5].try_into().unwrap()) as usize;
        assert_eq!(len + 1, m.len());
        let fields: Vec<&[u8]> = m[5..m.len() - 2].split(|&b| b == 0).collect();
        assert_eq!(fields, [&b"SFATAL"[..], b"VFATAL", b"C08P01", b"Mbadinput"]);
        assert_eq!(&m[m.len() - 2..], &[0, 0]);
        let d = fatal("08006", "m", Some("d"));
        assert_eq!(&d[d.len() - 4..], b"Dd\0\0");
    }
}
