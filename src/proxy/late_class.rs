//! Clients that name themselves late ([proxy](docs/proxy.md#clients-that-name-themselves-late)):
//! pgjdbc without `assumeMinServerVersion=9.0` logs in with no
//! `application_name` and sends `SET application_name = '...'` as a query
//! once logged in, so the class is not in its startup packet. The proxy
//! then finishes the login itself and reads the class from the client's
//! first statements. Pure: what a client's first messages say, and the
//! messages the proxy answers with while no server is chosen yet.

use std::borrow::Cow;

/// What a client's statement says, for routing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Said {
    /// `SET [SESSION] application_name = | TO value`: the class arrives.
    AppName(String),
    /// One other plain `SET name = | TO value` and nothing after it (pgjdbc
    /// sends `SET extra_float_digits = 3` first): the proxy answers it and
    /// replays it on the server once the session is routed.
    OtherSet,
    /// Anything else: the session is routed with what is known.
    Other,
}

/// A client message: its type byte and the whole message's length (type
/// byte included), once its header is in `buf`.
pub fn message_len(buf: &[u8]) -> Option<(u8, usize)> {
    let header = buf.get(..5)?;
    let len = u32::from_be_bytes(header[1..5].try_into().expect("4 bytes")) as usize;
    Some((header[0], 1 + len.max(4)))
}

/// The SQL a Query (`Q`) or Parse (`P`) message carries (up to its first
/// NUL or the end of `body`, which may be a prefix of the message's body);
/// borrowed unless it is not UTF-8.
pub fn sql_of(tag: u8, body: &[u8]) -> Option<Cow<'_, str>> {
    let sql = match tag {
        b'Q' => body,
        b'P' => &body[body.iter().position(|&b| b == 0)? + 1..],
        _ => return None,
    };
    let end = sql.iter().position(|&b| b == 0).unwrap_or(sql.len());
    Some(String::from_utf8_lossy(&sql[..end]))
}

/// Whether `bytes` (a message body, or the start of one) may hold a `SET
/// application_name`: `false` only when [`said`] cannot find one in any SQL
/// they carry, as neither `set` nor `application_name` occurs in them (in
/// any ASCII case; the server folds only ASCII). A cheap test without
/// allocating, so that a routed session's relay parses only the rare
/// statement that may rename it.
pub fn may_be_set(bytes: &[u8]) -> bool {
    contains_ignore_case(bytes, b"set") && contains_ignore_case(bytes, b"application_name")
}

/// Whether `needle` (lower-case ASCII) occurs in `hay` in any ASCII case.
fn contains_ignore_case(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle))
}

/// What `sql` says (see [`Said`]): `SET application_name` in any case,
/// with `=` or `TO`, the value quoted or a bare word, possibly followed by
/// `;` and more SQL.
pub fn said(sql: &str) -> Said {
    let mut s = Scan { rest: sql };
    s.blank();
    if !s.keyword("set") {
        return Said::Other;
    }
    s.blank();
    if s.keyword("session") {
        s.blank();
    }
    let Some(name) = s.name() else { return Said::Other };
    s.blank();
    if !(s.symbol('=') || s.keyword("to")) {
        return Said::Other;
    }
    s.blank();
    if name == "application_name" {
        return match s.value() {
            Some(v) if s.at_end_of_statement() && !v.eq_ignore_ascii_case("default") => Said::AppName(v),
            _ => Said::Other,
        };
    }
    while s.value().is_some() {
        s.blank();
        if !s.symbol(',') {
            break;
        }
        s.blank();
    }
    s.blank();
    let _ = s.symbol(';');
    s.blank();
    if s.rest.is_empty() {
        Said::OtherSet
    } else {
        Said::Other
    }
}

/// A cursor over SQL text.
struct Scan<'a> {
    rest: &'a str,
}

impl Scan<'_> {
    /// Skips white space and comments.
    fn blank(&mut self) {
        loop {
            let before = self.rest.len();
            self.rest = self.rest.trim_start();
            if let Some(after) = self.rest.strip_prefix("--") {
                self.rest = after.find('\n').map_or("", |i| &after[i..]);
            } else if let Some(after) = self.rest.strip_prefix("/*") {
                self.rest = after.find("*/").map_or("", |i| &after[i + 2..]);
            }
            if self.rest.len() == before {
                return;
            }
        }
    }

    /// A keyword (any case) not followed by a word character.
    fn keyword(&mut self, word: &str) -> bool {
        let Some(head) = self.rest.get(..word.len()) else { return false };
        let next = self.rest[word.len()..].chars().next();
        if head.eq_ignore_ascii_case(word) && !next.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            self.rest = &self.rest[word.len()..];
            return true;
        }
        false
    }

    fn symbol(&mut self, c: char) -> bool {
        self.rest.strip_prefix(c).map(|r| self.rest = r).is_some()
    }

    /// A parameter name: a bare word (lower-cased, as the server folds it,
    /// dots allowed) or a double-quoted one.
    fn name(&mut self) -> Option<String> {
        if self.rest.starts_with('"') {
            return self.quoted('"');
        }
        let end = self
            .rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$' || c == '.'))
            .unwrap_or(self.rest.len());
        if end == 0 {
            return None;
        }
        let word = self.rest[..end].to_ascii_lowercase();
        self.rest = &self.rest[end..];
        Some(word)
    }

    /// A value: a single-quoted string (`''` is one quote, an `E` prefix
    /// allowed), a double-quoted word, or a bare word or number.
    fn value(&mut self) -> Option<String> {
        if let Some(after) = self.rest.strip_prefix(['E', 'e']).filter(|r| r.starts_with('\'')) {
            self.rest = after;
        }
        if self.rest.starts_with('\'') {
            return self.quoted('\'');
        }
        if self.rest.starts_with('"') {
            return self.quoted('"');
        }
        let end = self.rest.find(|c: char| c.is_whitespace() || c == ';' || c == ',').unwrap_or(self.rest.len());
        if end == 0 {
            return None;
        }
        let word = self.rest[..end].to_string();
        self.rest = &self.rest[end..];
        Some(word)
    }

    /// A string in `q` quotes, a doubled quote standing for one.
    fn quoted(&mut self, q: char) -> Option<String> {
        let mut out = String::new();
        let mut chars = self.rest[1..].char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if c != q {
                out.push(c);
            } else if chars.peek().is_some_and(|&(_, n)| n == q) {
                out.push(q);
                chars.next();
            } else {
                self.rest = &self.rest[1 + i + 1..];
                return Some(out);
            }
        }
        None
    }

    /// Only blanks, then the end or a `;` (more SQL may follow it).
    fn at_end_of_statement(&mut self) -> bool {
        self.blank();
        self.rest.is_empty() || self.rest.starts_with(';')
    }
}

/// A server message: `tag` with `body`.
fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(5 + body.len());
    m.push(tag);
    m.extend(((4 + body.len()) as u32).to_be_bytes());
    m.extend(body);
    m
}

/// CommandComplete `SET` and ReadyForQuery (idle): the server's answer to
/// a SET outside a transaction, which the proxy gives before routing.
pub fn set_answered() -> Vec<u8> {
    let mut m = message(b'C', b"SET\0");
    m.extend(message(b'Z', b"I"));
    m
}

/// The server's answers to an extended-protocol batch that runs a plain
/// `SET` (pgjdbc's way: Parse, Bind, Describe, Execute, Sync) at the front
/// of `buf`, which starts with that Parse: `None` while the batch is
/// incomplete, `Some(None)` when it holds another message (it is not
/// answered), else the bytes the batch took and the answers.
pub fn set_batch_answered(buf: &[u8]) -> Option<Option<(usize, Vec<u8>)>> {
    let mut at = 0;
    let mut out = Vec::new();
    loop {
        let (tag, len) = message_len(&buf[at..])?;
        let body = buf.get(at + 5..at + len)?;
        at += len;
        match tag {
            b'P' if at == len => out.extend(message(b'1', b"")),
            b'B' => out.extend(message(b'2', b"")),
            b'D' if body.first() == Some(&b'S') => {
                out.extend(message(b't', &[0, 0]));
                out.extend(message(b'n', b""));
            }
            b'D' => out.extend(message(b'n', b"")),
            b'E' => out.extend(message(b'C', b"SET\0")),
            b'S' => {
                out.extend(ready());
                return Some(Some((at, out)));
            }
            _ => return Some(None),
        }
    }
}

/// BackendKeyData with the proxy's own key.
pub fn key_data(pid: u32, key: u32) -> Vec<u8> {
    let mut body = pid.to_be_bytes().to_vec();
    body.extend(key.to_be_bytes());
    message(b'K', &body)
}

/// ReadyForQuery, idle.
pub fn ready() -> Vec<u8> {
    message(b'Z', b"I")
}

/// What a server said from its AuthenticationOk to its first
/// ReadyForQuery, read from the front of its stream.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Greeting {
    /// Its ParameterStatus messages, whole.
    pub params: Vec<Vec<u8>>,
    /// Its BackendKeyData.
    pub key: Option<(u32, u32)>,
    /// An ErrorResponse, whole (the login or a replayed SET failed).
    pub error: Option<Vec<u8>>,
    /// The bytes it took, through the ReadyForQuery.
    pub used: usize,
}

/// Reads `bytes` up to and including the first ReadyForQuery: `None` while
/// it has not come (an ErrorResponse before it is kept, as a server sends
/// ReadyForQuery after an error in a query).
pub fn greeting(bytes: &[u8]) -> Option<Greeting> {
    let mut g = Greeting::default();
    let mut at = 0;
    while let Some((tag, len)) = message_len(&bytes[at..]) {
        let msg = bytes.get(at..at + len)?;
        at += len;
        match tag {
            b'S' => g.params.push(msg.to_vec()),
            b'K' if len == 13 => {
                let word = |i: usize| u32::from_be_bytes(msg[i..i + 4].try_into().expect("4 bytes"));
                g.key = Some((word(5), word(9)));
            }
            b'E' => g.error = Some(msg.to_vec()),
            b'Z' => {
                g.used = at;
                return Some(g);
            }
            _ => {}
        }
    }
    None
}

/// A ParameterStatus message's name and value.
pub fn param_of(msg: &[u8]) -> Option<(&str, &str)> {
    let body = msg.get(5..)?;
    let mut parts = body.split(|&b| b == 0);
    let name = std::str::from_utf8(parts.next()?).ok()?;
    let value = std::str::from_utf8(parts.next()?).ok()?;
    Some((name, value))
}

/// The message and text of an ErrorResponse: (SQLSTATE, message).
pub fn error_of(msg: &[u8]) -> (String, String) {
    let field = |tag: u8| {
        msg.get(5..)
            .unwrap_or_default()
            .split(|&b| b == 0)
            .find(|f| f.first() == Some(&tag))
            .map(|f| String::from_utf8_lossy(&f[1..]).into_owned())
            .unwrap_or_default()
    };
    (field(b'C'), field(b'M'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_application_name_is_read_in_every_spelling() {
        for sql in [
            "SET application_name = 'premium-web'",
            "set APPLICATION_NAME to 'premium-web';",
            "  /* c */ Set Session application_name='premium-web'; SELECT 1",
            "-- hi\nSET application_name TO premium-web",
            "SET \"application_name\" = E'premium-web'",
        ] {
            assert_eq!(said(sql), Said::AppName("premium-web".into()), "{sql}");
        }
        assert_eq!(said("SET application_name = 'it''s'"), Said::AppName("it's".into()));
        assert_eq!(said("SET application_name = DEFAULT"), Said::Other);
        assert_eq!(said("SET application_name = 'a' SELECT"), Said::Other);
        assert_eq!(said("SET application_namex = 'a'"), Said::OtherSet);
        assert_eq!(said("SET application_name 'a'"), Said::Other);
        assert_eq!(said("SELECT 1"), Said::Other);
        assert_eq!(said("SETapplication_name = 'a'"), Said::Other);
    }

    #[test]
    fn may_be_set_lets_through_every_set_application_name_and_little_else() {
        for sql in [
            "SET application_name = 'premium-web'",
            "set APPLICATION_NAME to 'premium-web';",
            "  /* c */ Set Session application_name='premium-web'; SELECT 1",
            "SET \"application_name\" = E'premium-web'",
            "sEt aPPlication_NAME TO x",
        ] {
            assert!(matches!(said(sql), Said::AppName(_)), "{sql}");
            assert!(may_be_set(sql.as_bytes()), "{sql}");
        }
        for sql in ["SELECT 1", "BEGIN", "SET extra_float_digits = 3", "SELECT application_name FROM t", "", "se"] {
            assert!(!may_be_set(sql.as_bytes()), "{sql}");
            assert!(!matches!(said(sql), Said::AppName(_)), "{sql}");
        }
        assert!(may_be_set(b"s1\0SET application_name = 'a'\0\0\0"), "a Parse's body");
    }

    #[test]
    fn a_plain_set_alone_is_answered_and_anything_more_is_not() {
        assert_eq!(said("SET extra_float_digits = 3"), Said::OtherSet);
        assert_eq!(said("set search_path to a, \"B\", 'c';  "), Said::OtherSet);
        assert_eq!(said("SET extra_float_digits = 3; SELECT 1"), Said::Other);
        assert_eq!(said("SET LOCAL x = 1"), Said::Other);
        assert_eq!(said("SET ROLE admin"), Said::Other);
        assert_eq!(said("SET TIME ZONE 'UTC'"), Said::Other);
        assert_eq!(said("SET x = 'unterminated"), Said::Other);
    }

    #[test]
    fn the_sql_of_query_and_parse_messages() {
        assert_eq!(sql_of(b'Q', b"SELECT 1\0"), Some("SELECT 1".into()));
        assert_eq!(sql_of(b'P', b"s1\0SET a = 1\0\0\0"), Some("SET a = 1".into()));
        assert_eq!(sql_of(b'Q', b"SET applic"), Some("SET applic".into()), "a prefix");
        assert_eq!(sql_of(b'S', b""), None);
        assert_eq!(message_len(&[b'Q', 0, 0, 0, 9]), Some((b'Q', 10)));
        assert_eq!(message_len(&[b'Q', 0, 0]), None);
    }

    #[test]
    fn pgjdbcs_set_batch_is_answered_as_a_server_would() {
        let mut batch = message(b'P', b"\0SET extra_float_digits = 3\0\0\0");
        batch.extend(message(b'B', &[0; 8]));
        batch.extend(message(b'D', b"P\0"));
        batch.extend(message(b'E', &[0, 0, 0, 0, 1]));
        batch.extend(message(b'S', b""));
        for cut in 0..batch.len() {
            assert_eq!(set_batch_answered(&batch[..cut]), None, "cut {cut}");
        }
        let mut more = batch.clone();
        more.extend(b"Q...");
        let (used, answer) = set_batch_answered(&more).unwrap().unwrap();
        assert_eq!(used, batch.len());
        let tags: Vec<u8> = std::iter::successors(Some(0usize), |&at| message_len(&answer[at..]).map(|(_, l)| at + l))
            .take_while(|&at| at < answer.len())
            .map(|at| answer[at])
            .collect();
        assert_eq!(tags, b"12nCZ");
        let mut other = message(b'P', b"\0SET a = 1\0\0\0");
        other.extend(message(b'Q', b"SELECT 1\0"));
        assert_eq!(set_batch_answered(&other), Some(None), "a simple query inside the batch");
    }

    #[test]
    fn a_greeting_is_read_through_its_ready_for_query() {
        let mut s = message(b'S', b"server_version\x0016.1\0");
        s.extend(key_data(7, 9));
        s.extend(ready());
        s.extend(b"next");
        for cut in 0..s.len() - 4 {
            assert_eq!(greeting(&s[..cut]), None, "cut {cut}");
        }
        let g = greeting(&s).unwrap();
        assert_eq!((g.key, g.used, g.params.len()), (Some((7, 9)), s.len() - 4, 1));
        assert_eq!(param_of(&g.params[0]), Some(("server_version", "16.1")));
        let err = crate::proxy::startup::fatal("42704", "unrecognized", None);
        let mut e = err.clone();
        e.extend(ready());
        assert_eq!(greeting(&e).unwrap().error, Some(err.clone()));
        assert_eq!(error_of(&err), ("42704".into(), "unrecognized".into()));
        assert_eq!(set_answered(), [b'C', 0, 0, 0, 8, b'S', b'E', b'T', 0, b'Z', 0, 0, 0, 5, b'I']);
    }
}
