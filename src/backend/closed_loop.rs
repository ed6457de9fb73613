//! `plbbench bench`'s closed loop (each connection sends its next query as
//! soon as the last is answered, as pgbench does) on an epoll of its own
//! per thread ([performance](docs/performance.md#the-generator-against-pgbench)):
//! one `write` per query, reads until the answer's ReadyForQuery, and no
//! task, waker or scheduler in between. On tokio, even with one
//! current-thread runtime per thread and the lean client of [`super::wire`],
//! the generator spent as much CPU per query as pgbench; the proxy's pump
//! threads left tokio for mio for the same reason. The connections are
//! opened (and prepared) on tokio and handed over here; the open loop
//! (`--rate`), which needs timers, stays on tokio.

use super::wire::{put_execute, put_simple, Answer, Conn, StdSocket, WireError};
use bytes::BytesMut;
use hdrhistogram::Histogram;
use mio::net::{TcpStream, UnixStream};
use mio::{Events, Interest, Poll, Token};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::{self, ErrorKind, Read, Write};
use std::time::{Duration, Instant};

/// How long queries still in flight at the deadline may take to answer
/// before the loop gives up on them (a stalled server must not hang it).
const GRACE: Duration = Duration::from_secs(60);

/// One connection's tally.
pub struct Tally {
    /// Latency of each completed query, microseconds.
    pub latency_us: Histogram<u64>,
    /// Queries completed.
    pub ok: u64,
    /// Rows they returned.
    pub rows: u64,
    /// Queries that failed (a statement's error, or the connection's end).
    pub errors: u64,
}

impl Tally {
    /// An empty tally (3 significant digits, as every histogram of plbbench).
    pub fn new() -> Tally {
        Tally { latency_us: Histogram::new(3).expect("valid precision"), ok: 0, rows: 0, errors: 0 }
    }

    /// A completed query of `rows` rows that took `us` microseconds.
    pub fn completed(&mut self, rows: u64, us: u64) {
        self.ok += 1;
        self.rows += rows;
        if self.latency_us.record(us).is_err() {
            self.latency_us.saturating_record(us);
        }
    }
}

impl Default for Tally {
    fn default() -> Tally {
        Tally::new()
    }
}

/// What every connection sends: the prepared statement (`parts` unused)
/// or the statement's text split at `$1`, with a key drawn uniformly from
/// 1..=`key_range` (none when 0).
pub struct Statement<'a> {
    /// Bind/Execute of the statement each connection prepared, else Query.
    pub prepared: bool,
    /// The statement's text split at `$1` (the simple protocol).
    pub parts: Vec<&'a str>,
    /// Keys are drawn from 1..=key_range; 0: no parameter.
    pub key_range: u64,
}

/// A connection's socket, as mio drives it.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn from_std(s: StdSocket) -> Stream {
        match s {
            StdSocket::Tcp(s) => Stream::Tcp(TcpStream::from_std(s)),
            StdSocket::Unix(s) => Stream::Unix(UnixStream::from_std(s)),
        }
    }

    fn register(&mut self, poll: &Poll, token: Token) -> io::Result<()> {
        let interest = Interest::READABLE | Interest::WRITABLE;
        match self {
            Stream::Tcp(s) => poll.registry().register(s, token, interest),
            Stream::Unix(s) => poll.registry().register(s, token, interest),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
}

/// One connection in the loop.
struct Looped {
    stream: Stream,
    rbuf: BytesMut,
    wbuf: BytesMut,
    /// Bytes of `wbuf` already written.
    written: usize,
    rng: ChaCha8Rng,
    answer: Answer,
    /// When the query in flight was sent: its latency runs from here.
    sent: Instant,
    tally: Tally,
}

/// Whether a connection goes on after an event.
enum Next {
    Wait,
    Done,
}

impl Looped {
    /// Sends the next query (the clock starts now).
    fn send(&mut self, st: &Statement) -> Next {
        let key = (st.key_range > 0).then(|| self.rng.gen_range(1..=st.key_range as i64));
        self.wbuf.clear();
        self.written = 0;
        if st.prepared {
            if put_execute(&mut self.wbuf, key).is_err() {
                self.tally.errors += 1;
                return Next::Done;
            }
        } else {
            put_simple(&mut self.wbuf, &st.parts, key);
        }
        self.sent = Instant::now();
        self.flush()
    }

    /// Writes what is left of the query; the rest waits for writability.
    fn flush(&mut self) -> Next {
        while self.written < self.wbuf.len() {
            match self.stream.write(&self.wbuf[self.written..]) {
                Ok(0) => return self.broken(),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Next::Wait,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return self.broken(),
            }
        }
        Next::Wait
    }

    /// The connection broke: the query in flight failed.
    fn broken(&mut self) -> Next {
        self.tally.errors += 1;
        Next::Done
    }

    /// Reads what the server sent (until a short read: epoll is
    /// edge-triggered, so new bytes bring a new event); on the answer's
    /// ReadyForQuery, tallies it and sends the next query unless the
    /// deadline has passed.
    fn readable(&mut self, st: &Statement, deadline: Instant, scratch: &mut [u8]) -> Next {
        loop {
            match self.stream.read(scratch) {
                Ok(0) => return self.broken(),
                Ok(n) => {
                    self.rbuf.extend_from_slice(&scratch[..n]);
                    if n < scratch.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return self.broken(),
            }
        }
        match self.answer.scan(&mut self.rbuf) {
            Ok(None) => Next::Wait,
            Ok(Some(answer)) => {
                match answer {
                    Ok(rows) => self.tally.completed(rows, self.sent.elapsed().as_micros() as u64),
                    Err(_) => self.tally.errors += 1,
                }
                if Instant::now() >= deadline {
                    Next::Done
                } else {
                    self.send(st)
                }
            }
            Err(_) => self.broken(),
        }
    }
}

/// Runs `conns` (each with its key generator's seed) in a closed loop
/// until `deadline`, then lets the queries in flight finish (for at most a
/// minute); returns each connection's tally. A statement's error is
/// counted and its connection goes on; a broken connection stops.
pub fn run(conns: Vec<(Conn, u64)>, st: &Statement, deadline: Instant) -> Result<Vec<Tally>, WireError> {
    let mut poll = Poll::new()?;
    let mut looped = Vec::with_capacity(conns.len());
    for (i, (conn, seed)) in conns.into_iter().enumerate() {
        let (socket, rbuf) = conn.into_std()?;
        let mut stream = Stream::from_std(socket);
        stream.register(&poll, Token(i))?;
        let rng = ChaCha8Rng::seed_from_u64(seed);
        let wbuf = BytesMut::with_capacity(256);
        let (answer, sent, tally) = (Answer::default(), Instant::now(), Tally::new());
        looped.push(Looped { stream, rbuf, wbuf, written: 0, rng, answer, sent, tally });
    }
    let mut open = vec![true; looped.len()];
    let mut left = looped.len();
    for (l, o) in looped.iter_mut().zip(&mut open) {
        if let Next::Done = l.send(st) {
            *o = false;
            left -= 1;
        }
    }
    let (mut events, mut scratch) = (Events::with_capacity(1024), vec![0u8; 16 * 1024]);
    let stop = deadline + GRACE;
    while left > 0 {
        let now = Instant::now();
        if now >= stop {
            break;
        }
        match poll.poll(&mut events, Some(stop - now)) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            r => r?,
        }
        for ev in events.iter() {
            let i = ev.token().0;
            if !open[i] {
                continue;
            }
            let l = &mut looped[i];
            let mut next = Next::Wait;
            if ev.is_writable() && l.written < l.wbuf.len() {
                next = l.flush();
            }
            if matches!(next, Next::Wait) && (ev.is_readable() || ev.is_read_closed() || ev.is_error()) {
                next = l.readable(st, deadline, &mut scratch);
            }
            if let Next::Done = next {
                open[i] = false;
                left -= 1;
            }
        }
    }
    Ok(looped.into_iter().map(|l| l.tally).collect())
}
