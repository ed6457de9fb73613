//! Following a routed session's two byte streams without interpreting
//! them ([proxy](docs/proxy.md)): message lengths, so the proxy knows when
//! it is at a message boundary (a FATAL can only go there); the server's
//! cancel key (BackendKeyData); the SQLSTATE of the server's last message
//! when it is an ErrorResponse (a server that closes after its own FATAL
//! ended the session: that is no evidence against the replica); the
//! client's Terminate (after which the server's close is the session's
//! normal end); and, when watched, the
//! start of each Query and Parse, read for `SET application_name`. Both
//! relays (tokio's for TLS, [`super::pump`] for plain TCP) follow a
//! session with it, and it allocates nothing per message.

use super::late_class::{self, Said};

/// Where the server-to-client stream is: inside a message or at its end.
pub(super) struct Framing {
    /// Header bytes of the current message seen so far (up to 5).
    header: [u8; 5],
    seen: usize,
    /// Body bytes still to come of the current message.
    remaining: usize,
    /// The BackendKeyData seen, if any.
    pub key: Option<(u32, u32)>,
    /// Body bytes of a BackendKeyData message collected so far.
    key_body: [u8; 8],
    key_seen: usize,
    /// The start of the current ErrorResponse's body (its first fields:
    /// severity, then the SQLSTATE), while one is read.
    error_head: [u8; ERROR_HEAD],
    error_seen: usize,
    /// The type of the last whole message, and its SQLSTATE when it was an
    /// ErrorResponse that carried one.
    last: u8,
    last_code: Option<[u8; 5]>,
    /// A Terminate (`X`) went by (client to server): the server closing
    /// next is the session's normal end.
    pub terminated: bool,
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
    pub named: Option<String>,
    /// On the client's stream: Query, Sync and FunctionCall messages, each
    /// answered by one ReadyForQuery.
    pub asks: u64,
    /// On the client's stream: a message other than those (or COPY data,
    /// or Terminate) went by since the last of them.
    pub unsynced: bool,
    /// On the server's stream: ReadyForQuery messages, and the transaction
    /// status of the last (`I` idle, `T` in a transaction, `E` failed one).
    pub readies: u64,
    pub status: u8,
}

/// How much of a Query or Parse is read for `SET application_name`.
const WATCHED: usize = 256;

/// How much of an ErrorResponse is read for its SQLSTATE: PostgreSQL
/// sends the severity (localized, then not) before the code.
const ERROR_HEAD: usize = 96;

impl Framing {
    pub fn new() -> Framing {
        Framing {
            header: [0; 5],
            seen: 0,
            remaining: 0,
            key: None,
            key_body: [0; 8],
            key_seen: 0,
            error_head: [0; ERROR_HEAD],
            error_seen: 0,
            last: 0,
            last_code: None,
            terminated: false,
            watch: false,
            text_len: None,
            text: [0; WATCHED],
            named: None,
            asks: 0,
            unsynced: false,
            readies: 0,
            status: 0,
        }
    }

    /// A framing of the client's stream that reads its `SET
    /// application_name` statements.
    pub fn watching() -> Framing {
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

    pub fn at_boundary(&self) -> bool {
        self.seen == 0 && self.remaining == 0
    }

    /// The SQLSTATE of the ErrorResponse this stream stopped on, when its
    /// last whole message is one (`*b"?????"` when it carried none): the
    /// server's own word on why it closes.
    pub fn ended_on_error(&self) -> Option<[u8; 5]> {
        (self.at_boundary() && self.last == b'E').then(|| self.last_code.unwrap_or(*b"?????"))
    }

    /// Keeps the body bytes `bytes` of an ErrorResponse, up to [`ERROR_HEAD`].
    fn error_bytes(&mut self, bytes: &[u8]) {
        let take = bytes.len().min(ERROR_HEAD - self.error_seen);
        self.error_head[self.error_seen..self.error_seen + take].copy_from_slice(&bytes[..take]);
        self.error_seen += take;
    }

    /// The current message is whole: notes its type and, for an
    /// ErrorResponse, its SQLSTATE (the `C` field).
    fn message_done(&mut self) {
        self.last = self.header[0];
        self.readies += u64::from(self.last == b'Z');
        if self.last != b'E' {
            return;
        }
        self.last_code = None;
        let mut fields = self.error_head[..self.error_seen].split(|&b| b == 0);
        for f in fields.by_ref() {
            if let [b'C', code @ ..] = f {
                self.last_code = code.try_into().ok();
                break;
            }
        }
        self.error_seen = 0;
    }

    /// Follows `bytes` through the message framing.
    pub fn feed(&mut self, mut bytes: &[u8]) {
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
                    self.error_seen = 0;
                    self.terminated |= self.header[0] == b'X';
                    match self.header[0] {
                        b'Q' | b'S' | b'F' => (self.asks, self.unsynced) = (self.asks + 1, false),
                        b'X' | b'd' | b'c' | b'f' => {}
                        _ => self.unsynced = true,
                    }
                    if self.watch && matches!(self.header[0], b'Q' | b'P') {
                        self.text_len = Some(0);
                        if self.remaining == 0 {
                            self.statement_read();
                        }
                    }
                    if self.remaining == 0 {
                        self.message_done();
                    }
                }
                continue;
            }
            let take = self.remaining.min(bytes.len());
            match self.header[0] {
                b'K' => self.key_bytes(&bytes[..take]),
                b'E' => self.error_bytes(&bytes[..take]),
                b'Z' if take > 0 => self.status = bytes[0],
                _ => {}
            }
            self.text_bytes(&bytes[..take]);
            self.remaining -= take;
            bytes = &bytes[take..];
            if self.remaining == 0 || self.text_len.is_some_and(|n| n >= WATCHED) {
                self.statement_read();
            }
            if self.remaining == 0 {
                self.message_done();
            }
        }
    }
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
        let body = b"plbbench.replica\0r2\0";
        f.feed(&[b'S'].into_iter().chain((4 + body.len() as u32).to_be_bytes()).chain(*body).collect::<Vec<u8>>());
        assert!(f.at_boundary());
    }

    #[test]
    fn framing_counts_asks_and_their_answers_and_the_last_status() {
        let (up, down) = routed_traffic();
        for chunk in [1, 3, 4096] {
            let (mut client, mut server) = (Framing::new(), Framing::new());
            up.chunks(chunk).for_each(|p| client.feed(p));
            down.chunks(chunk).for_each(|p| server.feed(p));
            assert_eq!((client.asks, client.unsynced), (150, false), "a Sync and two Queries per round");
            assert_eq!((server.readies, server.status), (50, b'I'));
            client.feed(&[b'P', 0, 0, 0, 4]);
            assert!(client.unsynced, "a Parse with no Sync yet");
            client.feed(&[b'X', 0, 0, 0, 4]);
            assert!(client.unsynced && client.terminated && client.asks == 150);
            server.feed(&[b'Z', 0, 0, 0, 5, b'T']);
            assert_eq!((server.readies, server.status), (51, b'T'));
        }
    }

    /// An ErrorResponse as PostgreSQL sends it: severity (localized, then
    /// not), SQLSTATE, message.
    fn error_response(code: &str, message: &str) -> Vec<u8> {
        let body = format!("SFATAL\0VFATAL\0C{code}\0M{message}\0\0");
        let mut m = vec![b'E'];
        m.extend((4 + body.len() as u32).to_be_bytes());
        m.extend(body.as_bytes());
        m
    }

    #[test]
    fn framing_knows_when_the_server_stopped_on_its_own_error() {
        let mut stream = vec![b'Z', 0, 0, 0, 5, b'I'];
        stream.extend(error_response("08P01", "invalid frontend message type 254"));
        for cut in 0..stream.len() {
            let mut f = Framing::new();
            f.feed(&stream[..cut]);
            assert_eq!(f.ended_on_error(), None, "cut {cut}: the error is not whole yet");
            f.feed(&stream[cut..]);
            assert_eq!(f.ended_on_error(), Some(*b"08P01"), "cut {cut}");
        }
        let mut f = Framing::new();
        f.feed(&stream);
        f.feed(&[b'Z', 0, 0, 0, 5, b'I']);
        assert_eq!(f.ended_on_error(), None, "a later message: the error did not end the stream");
        let mut f = Framing::new();
        f.feed(&error_response("57P01", &"x".repeat(500)));
        assert_eq!(f.ended_on_error(), Some(*b"57P01"), "a long message after the code");
        let mut f = Framing::new();
        f.feed(&[b'E', 0, 0, 0, 5, 0]);
        assert_eq!(f.ended_on_error(), Some(*b"?????"), "no code");
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
