//! The proxy's pump threads (`plbbench proxy --threads N`,
//! [proxy](docs/proxy.md#what-it-does)): where a routed plain-TCP
//! session's bytes are copied. Each thread runs one epoll (mio) over the
//! sockets of the sessions handed to it, with one `read` and one `write`
//! per message and no futures, task polls or scheduler between them:
//! tokio's per-message machinery made the proxy spend more CPU per
//! transaction than PgBouncer's event loop ([performance](docs/performance.md#the-proxys-own-cost-cpu-and-system-calls-per-transaction)).
//!
//! Tokio keeps everything else (the login, admission, the proxy's own login
//! to the replica, TLS sessions, and a session's FATAL and cancel at its
//! end). A session crosses to a pump when its relay begins (a channel and
//! the pump's waker) and its task ends there. A quiet end stays on the
//! pump: the client's socket is closed, the session's end told (its
//! follower dropped), and a server connection that may be kept is sent
//! its reset and kept once the answer comes ([`returns`]), so a
//! connection-per-transaction client's session wakes tokio only at its
//! login. Any other end goes back to tokio (the `ends` channel), with the
//! server bytes read but not yet delivered, so a FATAL still arrives at a
//! message boundary.
//!
//! A short read spends a socket's readiness (epoll is edge-triggered, so
//! new bytes bring a new event), unless the peer's close came with it,
//! which is read to its end. A sink that is full holds the rest of the
//! read, and its source is not read again until the rest is out. A
//! direction gets at most [`TURN`] full reads per turn; then its session
//! waits for its next turn, so a large result does not hold up the
//! thread's other sessions.
//!
//! A statement the admission gate holds (`--admission modes`: a lower
//! class's statement on a replica that serves the top class, beyond the
//! mode's share of `statement_slots`) stays in its session's client pipe,
//! unwritten, and the client's socket is not read meanwhile; the thread
//! asks again for its held sessions every [`HELD_RETRY`] (a slot freed or
//! the mode changed), as the real driver's held statement waits on its
//! replica's notification.

use mio::net::TcpStream;
use mio::{event::Event, Events, Interest, Poll, Registry, Token, Waker};
use slab::Slab;
use std::io::{self, ErrorKind, Read, Write};
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::mpsc as ends;

mod returns;
use super::server_pool::Returning;
use returns::Returns;

/// Size of each direction's buffer.
pub(super) const CHUNK: usize = 16 * 1024;

/// Full reads a direction gets per turn before its session yields.
pub(super) const TURN: usize = 16;

/// How often a pump asks again for the statements the gate holds.
const HELD_RETRY: Duration = Duration::from_millis(5);

/// What a direction does with the bytes it just read, as the session's
/// follower says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pass {
    /// Write the first this many (the rest is dropped: a withheld
    /// Terminate).
    Write(usize),
    /// Keep them all unwritten: they begin a statement the gate holds
    /// until [`Follow::resume`] says it may run.
    Hold,
}

/// How a relay ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    /// The client left, or the server closed after the client's Terminate.
    Quiet,
    /// The replica's connection broke with no word from the server.
    Lost,
    /// The server closed after its own ErrorResponse (this SQLSTATE), which
    /// went to the client: the session's end, not the replica's.
    Ended([u8; 5]),
    /// The proxy is stopping.
    Stop,
    /// The client left after a Terminate that was withheld from an idle
    /// server: its connection may serve another session
    /// ([`super::server_pool`]).
    Reusable,
}

/// What follows a session's bytes as a pump copies them (the proxy's
/// `relay::Flow`).
pub(super) trait Follow: Send + 'static {
    /// The client sent `bytes`: how many of them to pass on (all but a
    /// withheld Terminate at their end), or hold them all (a statement the
    /// gate holds).
    fn client_sent(&mut self, bytes: &[u8]) -> Pass;
    /// The held statement asks again: `true` when it may run now.
    fn resume(&mut self) -> bool;
    /// The server sent `bytes`.
    fn server_sent(&mut self, bytes: &[u8]);
    /// The server closed its side, or stopped taking bytes: how the
    /// session ended, from what the server said last.
    fn server_closed(&self) -> End;
    /// The client's Terminate was withheld from an idle server: the
    /// session is over at once, and the proxy closes the client's side.
    fn withheld(&self) -> bool;
    /// The client closed its side, or its Terminate was withheld:
    /// [`End::Reusable`] after a withheld Terminate (the session is over at
    /// once), else [`End::Quiet`].
    fn client_closed(&self) -> End;
    /// The session ended [`End::Reusable`]: its server connection's way
    /// back to be kept, when it may be.
    fn kept(&mut self) -> Option<Returning>;
}

/// The token of a pump's waker (sessions' tokens are `2i` for the client's
/// socket and `2i + 1` for the server's).
const WAKE: Token = Token(usize::MAX);

/// A routed session on its way to a pump.
struct Handed<F> {
    client: TcpStream,
    server: TcpStream,
    flow: F,
}

impl<F> Handed<F> {
    /// The session, unrelayed, as ended by `end`.
    fn back(self, end: End) -> Back<F> {
        Back { end, flow: self.flow, client: self.client.into(), server: self.server.into(), held: Vec::new() }
    }
}

/// A session given back to tokio at an end that is not quiet.
pub(super) struct Back<F> {
    pub end: End,
    pub flow: F,
    pub client: std::net::TcpStream,
    /// Kept open until the client's side is closed (a stopping session's
    /// cancel goes to the replica first).
    pub server: std::net::TcpStream,
    /// Server bytes read but not yet delivered to the client.
    pub held: Vec<u8>,
}

/// The pump threads, and the turn of the next session.
pub(super) struct Pumps<F> {
    pumps: Vec<Pump<F>>,
    turn: AtomicUsize,
    stop: Arc<AtomicBool>,
    /// Where sessions go back to tokio.
    ends: ends::UnboundedSender<Back<F>>,
}

/// One pump thread's way in.
struct Pump<F> {
    queue: mpsc::Sender<Handed<F>>,
    waker: Arc<Waker>,
    /// Set while the thread sleeps in (or is about to enter) its epoll
    /// wait: only then does a handed session need the waker (an eventfd
    /// write and the thread's wake-up); a thread at work takes it from the
    /// queue at its next turn.
    asleep: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl<F: Follow> Pumps<F> {
    /// Starts `threads` pump threads, which send the sessions that end
    /// other than quietly to `ends` and give a server connection's reset
    /// at most `reset_limit`; fails with the cause when an epoll or a
    /// thread cannot be made.
    pub fn start(threads: usize, ends: ends::UnboundedSender<Back<F>>, reset_limit: Duration) -> io::Result<Pumps<F>> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut pumps = Vec::with_capacity(threads);
        for i in 0..threads {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKE)?);
            let (queue, rx) = mpsc::channel();
            let (stop, ends, asleep) = (stop.clone(), ends.clone(), Arc::new(AtomicBool::new(false)));
            let way = Way { queue: rx, asleep: asleep.clone() };
            let thread = std::thread::Builder::new()
                .name(format!("plbbench-pump-{i}"))
                .spawn(move || run(poll, &way, &stop, &ends, reset_limit))?;
            pumps.push(Pump { queue, waker, asleep, thread: Mutex::new(Some(thread)) });
        }
        Ok(Pumps { pumps, turn: AtomicUsize::new(0), stop, ends })
    }

    /// Hands a session to the next pump in turn, which relays it to its
    /// end (given back to `ends` at once when the pump is gone).
    pub fn relay(&self, client: std::net::TcpStream, server: std::net::TcpStream, flow: F) {
        let handed = Handed { client: TcpStream::from_std(client), server: TcpStream::from_std(server), flow };
        let pump = &self.pumps[self.turn.fetch_add(1, Ordering::Relaxed) % self.pumps.len()];
        match pump.queue.send(handed) {
            Ok(()) => {
                // A fence on both sides (between the queue and the flag):
                // either this sees the thread asleep, or the thread sees
                // the session in its queue before it sleeps.
                fence(Ordering::SeqCst);
                if pump.asleep.load(Ordering::SeqCst) {
                    let _ = pump.waker.wake();
                }
            }
            Err(mpsc::SendError(h)) => {
                let _ = self.ends.send(h.back(End::Stop));
            }
        }
    }

    /// Ends every session with [`End::Stop`] (each goes back to tokio)
    /// and waits for the threads; later sessions are given back at once.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for p in &self.pumps {
            let _ = p.waker.wake();
        }
        for p in &self.pumps {
            if let Some(t) = p.thread.lock().expect("pump thread lock").take() {
                let _ = t.join();
            }
        }
    }
}

/// One direction of a session: the buffer, the part of it read but not yet
/// written, and what is known of the source's readiness.
struct Pipe {
    buf: Box<[u8]>,
    from: usize,
    to: usize,
    /// The source may have bytes: its readiness is not spent.
    readable: bool,
    /// The source's peer closed: read until the end, short reads or not.
    closing: bool,
    /// What was read is held ([`Pass::Hold`]): nothing is written or read
    /// until the follower lets it go.
    paused: bool,
}

/// What one direction's copy came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Nothing more to do until an event.
    Idle,
    /// [`TURN`] full reads done; more may be waiting.
    Owed,
    /// The source closed (or failed).
    SourceClosed,
    /// The sink failed.
    SinkGone,
    /// What was read is held for the gate.
    Held,
}

impl Pipe {
    fn new() -> Pipe {
        Pipe { buf: vec![0; CHUNK].into_boxed_slice(), from: 0, to: 0, readable: false, closing: false, paused: false }
    }

    /// Notes an event on the source's socket.
    fn ready(&mut self, ev: &Event) {
        self.readable |= ev.is_readable() || ev.is_read_closed() || ev.is_error();
        self.closing |= ev.is_read_closed() || ev.is_error();
    }

    /// Writes what is held, then reads and writes while the source has
    /// bytes, the sink takes them and the turn lasts; `seen` follows every
    /// read and says how much of it to write, or to hold it all.
    fn copy(&mut self, src: &mut impl Read, dst: &mut impl Write, mut seen: impl FnMut(&[u8]) -> Pass) -> Step {
        let mut reads = 0;
        loop {
            if self.paused {
                return Step::Held;
            }
            while self.from < self.to {
                match dst.write(&self.buf[self.from..self.to]) {
                    Ok(0) => return Step::SinkGone,
                    Ok(n) => self.from += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Step::Idle,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return Step::SinkGone,
                }
            }
            if !self.readable {
                return Step::Idle;
            }
            if reads == TURN {
                return Step::Owed;
            }
            match src.read(&mut self.buf) {
                Ok(0) => return Step::SourceClosed,
                Ok(n) => {
                    reads += 1;
                    self.readable = n == self.buf.len() || self.closing;
                    match seen(&self.buf[..n]) {
                        Pass::Write(keep) => (self.from, self.to) = (0, keep.min(n)),
                        Pass::Hold => (self.from, self.to, self.paused) = (0, n, true),
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => self.readable = false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Step::SourceClosed,
            }
        }
    }

    /// What was read and not yet written.
    fn held(&self) -> Vec<u8> {
        self.buf[self.from..self.to].to_vec()
    }
}

/// A session on a pump: as it was handed, and its two directions.
struct Piped<F> {
    h: Handed<F>,
    /// Client to server.
    up: Pipe,
    /// Server to client.
    down: Pipe,
    /// Whether it is in this turn's list already.
    queued: bool,
}

/// What driving a session came to.
enum Drive {
    Idle,
    Owed,
    /// Its client's statement is held for the gate: ask again soon.
    Held,
    Over(End),
}

impl<F: Follow> Piped<F> {
    /// Copies both ways as far as the sockets allow.
    fn drive(&mut self) -> Drive {
        let Handed { client, server, flow, .. } = &mut self.h;
        if self.up.paused && flow.resume() {
            self.up.paused = false;
        }
        let up = self.up.copy(client, server, |b| flow.client_sent(b));
        if flow.withheld() {
            // A withheld Terminate: the session is over now; the client,
            // which may wait for the server to close (asyncpg does), is
            // closed by the proxy.
            return Drive::Over(End::Reusable);
        }
        match up {
            Step::SourceClosed => return Drive::Over(flow.client_closed()),
            Step::SinkGone => {
                // The server stopped taking bytes: its last words (a FATAL,
                // as a rule) may still be unread. Read them to the end
                // before judging how the session ended.
                (self.down.readable, self.down.closing) = (true, true);
                let _ = self.down.copy(server, client, |b| {
                    flow.server_sent(b);
                    Pass::Write(b.len())
                });
                return Drive::Over(flow.server_closed());
            }
            Step::Idle | Step::Owed | Step::Held => {}
        }
        let down = self.down.copy(server, client, |b| {
            flow.server_sent(b);
            Pass::Write(b.len())
        });
        match down {
            Step::SourceClosed => Drive::Over(flow.server_closed()),
            Step::SinkGone => Drive::Over(End::Quiet),
            _ if up == Step::Owed || down == Step::Owed => Drive::Owed,
            _ if up == Step::Held => Drive::Held,
            _ => Drive::Idle,
        }
    }
}

/// A pump thread's way in: its queue, and whether it sleeps.
struct Way<F> {
    queue: mpsc::Receiver<Handed<F>>,
    asleep: Arc<AtomicBool>,
}

/// A pump thread's loop: takes sessions from its queue, copies their bytes,
/// ends each at its end ([`ended`]); ends when `stop` is set (giving back
/// every session it holds) or its epoll fails.
fn run<F: Follow>(
    mut poll: Poll,
    way: &Way<F>,
    stop: &AtomicBool,
    ends: &ends::UnboundedSender<Back<F>>,
    reset_limit: Duration,
) {
    let mut events = Events::with_capacity(1024);
    let mut sessions: Slab<Piped<F>> = Slab::new();
    let mut returns = Returns::new(reset_limit);
    let (mut due, mut owed, mut held) = (Vec::new(), Vec::new(), Vec::new());
    // Set only with a wake-up ([`Pumps::stop`] wakes every pump).
    let mut stopping = false;
    loop {
        let wait = match (owed.is_empty(), held.is_empty()) {
            (false, _) => Some(Duration::ZERO),
            (true, false) => Some(returns.wait().map_or(HELD_RETRY, |w| w.min(HELD_RETRY))),
            (true, true) => returns.wait(),
        };
        way.asleep.store(wait != Some(Duration::ZERO), Ordering::SeqCst);
        fence(Ordering::SeqCst);
        // Sessions handed while the thread was at work, or just before it
        // said it sleeps (their events come with the first poll).
        while let Ok(h) = way.queue.try_recv() {
            admit(poll.registry(), &mut sessions, h, ends);
        }
        let polled = poll.poll(&mut events, wait);
        way.asleep.store(false, Ordering::SeqCst);
        match polled {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        std::mem::swap(&mut due, &mut owed);
        due.append(&mut held);
        for ev in events.iter() {
            if ev.token() == WAKE {
                stopping = stop.load(Ordering::SeqCst);
                continue;
            }
            if Returns::owns(ev.token()) {
                returns.ready(poll.registry(), ev.token());
                continue;
            }
            let (i, server_side) = (ev.token().0 / 2, ev.token().0 % 2 == 1);
            let Some(p) = sessions.get_mut(i) else { continue };
            if server_side {
                p.down.ready(ev)
            } else {
                p.up.ready(ev)
            }
            if !p.queued {
                p.queued = true;
                due.push(i);
            }
        }
        if stopping {
            break;
        }
        for i in due.drain(..) {
            let p = &mut sessions[i];
            p.queued = false;
            match p.drive() {
                Drive::Idle => {}
                Drive::Owed => {
                    p.queued = true;
                    owed.push(i);
                }
                Drive::Held => {
                    p.queued = true;
                    held.push(i);
                }
                Drive::Over(end) => ended(poll.registry(), sessions.remove(i), end, &mut returns, ends),
            }
        }
        returns.expire(poll.registry());
    }
    for p in sessions.drain() {
        give_back(poll.registry(), p, End::Stop, ends);
    }
    while let Ok(h) = way.queue.try_recv() {
        let _ = ends.send(h.back(End::Stop));
    }
}

/// Registers a handed session's sockets (edge-triggered: bytes already
/// there bring an event at once); a session that cannot be registered is
/// given back as lost.
fn admit<F: Follow>(
    registry: &Registry,
    sessions: &mut Slab<Piped<F>>,
    h: Handed<F>,
    ends: &ends::UnboundedSender<Back<F>>,
) {
    let entry = sessions.vacant_entry();
    let i = entry.key();
    let mut p = Piped { h, up: Pipe::new(), down: Pipe::new(), queued: false };
    let both = Interest::READABLE | Interest::WRITABLE;
    let registered = registry
        .register(&mut p.h.client, Token(2 * i), both)
        .and_then(|()| registry.register(&mut p.h.server, Token(2 * i + 1), both));
    match registered {
        Ok(()) => {
            entry.insert(p);
        }
        Err(_) => give_back(registry, p, End::Lost, ends),
    }
}

/// A session's end on its pump: a quiet one with nothing left for the
/// client is finished here (the client's socket closed, the follower
/// dropped, the server connection reset to be kept when it may be, else
/// closed); any other goes back to tokio.
fn ended<F: Follow>(
    registry: &Registry,
    mut p: Piped<F>,
    end: End,
    returns: &mut Returns,
    ends: &ends::UnboundedSender<Back<F>>,
) {
    if !matches!(end, End::Quiet | End::Reusable) || p.down.from < p.down.to {
        return give_back(registry, p, end, ends);
    }
    // Closing a socket takes it out of the epoll (no other descriptor
    // shares it); only a kept server's is deregistered (by `returns`), as
    // it stays open.
    let _ = p.h.client.shutdown(std::net::Shutdown::Write);
    let kept = if end == End::Reusable { p.h.flow.kept() } else { None };
    let Handed { client, server, flow } = p.h;
    drop((client, flow));
    if let Some(back) = kept {
        returns.begin(registry, server, back);
    }
}

/// Gives a session back to tokio, with the server bytes it holds.
fn give_back<F>(registry: &Registry, mut p: Piped<F>, end: End, ends: &ends::UnboundedSender<Back<F>>) {
    let _ = registry.deregister(&mut p.h.client);
    let _ = registry.deregister(&mut p.h.server);
    let held = p.down.held();
    let _ = ends.send(Back { held, ..p.h.back(end) });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A sink that takes at most `room` bytes, then would block.
    struct Sink {
        got: Vec<u8>,
        room: usize,
    }

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(ErrorKind::WouldBlock.into());
            }
            let n = b.len().min(self.room);
            self.room -= n;
            self.got.extend_from_slice(&b[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A source of `len` bytes that then would block (or end, `eof`).
    struct Source {
        data: Cursor<Vec<u8>>,
        eof: bool,
        reads: usize,
    }

    impl Read for Source {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            self.reads += 1;
            match self.data.read(b)? {
                0 if !self.eof => Err(ErrorKind::WouldBlock.into()),
                n => Ok(n),
            }
        }
    }

    fn source(len: usize, eof: bool) -> Source {
        Source { data: Cursor::new((0..len).map(|i| (i % 251) as u8).collect()), eof, reads: 0 }
    }

    #[test]
    fn a_short_read_spends_the_readiness_unless_the_peer_closed() {
        let mut pipe = Pipe::new();
        pipe.readable = true;
        let (mut src, mut dst) = (source(100, false), Sink { got: Vec::new(), room: usize::MAX });
        assert_eq!(pipe.copy(&mut src, &mut dst, |b| Pass::Write(b.len())), Step::Idle);
        assert_eq!((src.reads, dst.got.len(), pipe.readable), (1, 100, false), "one read, one write");
        let mut pipe = Pipe::new();
        (pipe.readable, pipe.closing) = (true, true);
        let mut src = source(100, true);
        assert_eq!(
            pipe.copy(&mut src, &mut dst, |b| Pass::Write(b.len())),
            Step::SourceClosed,
            "data and a close are both read"
        );
        assert_eq!(src.reads, 2);
    }

    #[test]
    fn a_full_sink_holds_the_rest_and_the_source_waits_for_it() {
        let total = 3 * CHUNK + 17;
        let (mut pipe, mut src) = (Pipe::new(), source(total, false));
        let mut dst = Sink { got: Vec::new(), room: 1000 };
        let mut seen = 0;
        let mut rounds = 0;
        while dst.got.len() < total {
            pipe.readable = true;
            let reads_before = src.reads;
            assert_eq!(
                pipe.copy(&mut src, &mut dst, |b| {
                    seen += b.len();
                    Pass::Write(b.len())
                }),
                Step::Idle
            );
            assert!(pipe.to - pipe.from <= CHUNK, "at most one read held");
            if pipe.from < pipe.to {
                assert!(src.reads - reads_before <= 1, "no read past a full sink");
            }
            dst.room = 5000;
            rounds += 1;
            assert!(rounds < 100);
        }
        assert_eq!(seen, total);
        assert_eq!(dst.got, source(total, false).data.into_inner(), "whole and in order");
    }

    #[test]
    fn a_turn_reads_at_most_turn_buffers_and_is_owed_another() {
        let (mut pipe, mut src) = (Pipe::new(), source(100 * CHUNK, false));
        let mut dst = Sink { got: Vec::new(), room: usize::MAX };
        pipe.readable = true;
        assert_eq!(pipe.copy(&mut src, &mut dst, |b| Pass::Write(b.len())), Step::Owed);
        assert_eq!((src.reads, dst.got.len()), (TURN, TURN * CHUNK));
        assert_eq!(pipe.copy(&mut src, &mut dst, |b| Pass::Write(b.len())), Step::Owed);
        assert_eq!(src.reads, 2 * TURN);
    }

    #[test]
    fn what_the_follower_holds_back_at_the_end_of_a_read_is_not_written() {
        let mut pipe = Pipe::new();
        pipe.readable = true;
        let (mut src, mut dst) = (source(100, false), Sink { got: Vec::new(), room: usize::MAX });
        assert_eq!(pipe.copy(&mut src, &mut dst, |b| Pass::Write(b.len() - 5)), Step::Idle);
        assert_eq!(dst.got, source(95, false).data.into_inner(), "all but the last 5 bytes");
        assert_eq!(pipe.from, pipe.to, "nothing left held");
    }

    /// A statement the gate holds stays in the pipe, unwritten, and the
    /// source is not read past it; let go, it is written whole and in order.
    #[test]
    fn a_held_statement_waits_unwritten_then_goes_whole() {
        let mut pipe = Pipe::new();
        pipe.readable = true;
        let (mut src, mut dst) = (source(300, false), Sink { got: Vec::new(), room: usize::MAX });
        let mut asked = 0;
        let step = pipe.copy(&mut src, &mut dst, |_| {
            asked += 1;
            Pass::Hold
        });
        assert_eq!((step, asked, src.reads), (Step::Held, 1, 1), "one read, held");
        assert!(dst.got.is_empty(), "nothing written while held");
        pipe.readable = true;
        assert_eq!(pipe.copy(&mut src, &mut dst, |b| Pass::Write(b.len())), Step::Held, "still held");
        assert_eq!((src.reads, dst.got.len()), (1, 0), "no read past a held statement");
        pipe.paused = false;
        assert_eq!(pipe.copy(&mut src, &mut dst, |b| Pass::Write(b.len())), Step::Idle);
        assert_eq!(dst.got, source(300, false).data.into_inner(), "whole and in order once let go");
    }

    #[test]
    fn a_failed_sink_or_source_ends_the_direction() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(ErrorKind::ConnectionReset.into())
            }
        }
        let mut pipe = Pipe::new();
        pipe.readable = true;
        assert_eq!(pipe.copy(&mut source(10, false), &mut Broken, |b| Pass::Write(b.len())), Step::SinkGone);
        let mut pipe = Pipe::new();
        pipe.readable = true;
        assert_eq!(
            pipe.copy(&mut Broken, &mut Sink { got: Vec::new(), room: 9 }, |b| Pass::Write(b.len())),
            Step::SourceClosed
        );
    }
}
