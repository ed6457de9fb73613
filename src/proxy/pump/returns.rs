//! Server connections on their way back to be kept, reset on the pump
//! that relayed their session ([`super`]): a connection-per-transaction
//! client (`pgbench -C`) ends a session every transaction, and handing
//! each one back to tokio for its `DISCARD ALL` cost the proxy two thread
//! crossings and a wake-up per transaction
//! ([performance](docs/performance.md#the-proxys-own-cost-cpu-and-system-calls-per-transaction)).
//! Here the reset is written on the pump, its answer read in the pump's
//! own loop, and the connection kept ([`Returning::keep`]) or closed,
//! within a deadline (the server connect timeout).

use super::super::server_pool::Returning;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use slab::Slab;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

/// The first token of a connection being reset (below it, sessions').
pub(super) const FIRST: usize = usize::MAX / 2;

/// The most bytes a reset's answer may take.
const MAX_ANSWER: usize = 1 << 16;

/// The connections a pump is resetting, and their deadlines in the order
/// they were begun (one limit for all, so that is the deadlines' order).
pub(super) struct Returns {
    slab: Slab<Ret>,
    deadlines: VecDeque<(Instant, usize, u64)>,
    serial: u64,
    limit: Duration,
}

/// One connection being reset: its socket, its way back, the answer so
/// far, and which reset of its slot it is.
struct Ret {
    server: TcpStream,
    back: Returning,
    answer: Vec<u8>,
    serial: u64,
}

impl Returns {
    pub fn new(limit: Duration) -> Returns {
        Returns { slab: Slab::new(), deadlines: VecDeque::new(), serial: 0, limit }
    }

    /// Whether `token` is a connection being reset.
    pub fn owns(token: Token) -> bool {
        token.0 >= FIRST
    }

    /// Sends `server` (registered with the pump's epoll) its reset and
    /// waits for the answer; a connection that does not take the reset at
    /// once is closed.
    pub fn begin(&mut self, registry: &Registry, mut server: TcpStream, back: Returning) {
        let reset = Returning::reset();
        if !matches!(server.write(&reset), Ok(n) if n == reset.len()) {
            let _ = registry.deregister(&mut server);
            return;
        }
        let entry = self.slab.vacant_entry();
        let j = entry.key();
        if registry.reregister(&mut server, Token(FIRST + j), Interest::READABLE).is_err() {
            let _ = registry.deregister(&mut server);
            return;
        }
        self.serial += 1;
        self.deadlines.push_back((Instant::now() + self.limit, j, self.serial));
        entry.insert(Ret { server, back, answer: Vec::with_capacity(64), serial: self.serial });
    }

    /// Reads what the server behind `token` sent: a whole answer keeps the
    /// connection when it says the server is idle, else closes it, as a
    /// close or a failed read does.
    pub fn ready(&mut self, registry: &Registry, token: Token) {
        let j = token.0 - FIRST;
        let Some(ret) = self.slab.get_mut(j) else { return };
        let mut buf = [0u8; 512];
        let verdict = loop {
            match ret.server.read(&mut buf) {
                Ok(0) => break Some(false),
                Ok(n) if ret.answer.len() + n > MAX_ANSWER => break Some(false),
                Ok(n) => ret.answer.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break Returning::answered(&ret.answer),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break Some(false),
            }
        };
        if let Some(idle) = verdict {
            let mut ret = self.slab.remove(j);
            let _ = registry.deregister(&mut ret.server);
            if idle {
                ret.back.keep(ret.server.into());
            }
        }
    }

    /// How long the pump may sleep before the next deadline (`None`: no
    /// reset is waited for).
    pub fn wait(&self) -> Option<Duration> {
        self.deadlines.front().map(|(at, _, _)| at.saturating_duration_since(Instant::now()))
    }

    /// Closes the connections whose answer did not come by their deadline,
    /// and forgets the deadlines of those already done.
    pub fn expire(&mut self, registry: &Registry) {
        if self.deadlines.is_empty() {
            return;
        }
        let now = Instant::now();
        while let Some(&(at, j, serial)) = self.deadlines.front() {
            let live = self.slab.get(j).is_some_and(|r| r.serial == serial);
            if live && at > now {
                break;
            }
            self.deadlines.pop_front();
            if live {
                let mut ret = self.slab.remove(j);
                let _ = registry.deregister(&mut ret.server);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::ReplicaId;
    use crate::proxy::server_pool::{Key, Origin, ServerPool};
    use mio::{Events, Poll};
    use std::sync::Arc;

    /// A pump's end of a connection (registered as a session's server
    /// would be) and the replica's end.
    fn pair(poll: &Poll) -> (TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ours = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (peer, _) = l.accept().unwrap();
        ours.set_nonblocking(true).unwrap();
        let mut ours = TcpStream::from_std(ours);
        poll.registry().register(&mut ours, Token(1), Interest::READABLE | Interest::WRITABLE).unwrap();
        (ours, peer)
    }

    fn origin() -> Origin {
        Origin { key: Key { r: ReplicaId(0), database: "bench".into(), params: vec![] }, greeting: vec![] }
    }

    /// Polls until `returns` holds no connection, or 5 s pass.
    fn settle(poll: &mut Poll, returns: &mut Returns) {
        let mut events = Events::with_capacity(8);
        let until = Instant::now() + Duration::from_secs(5);
        while !returns.slab.is_empty() && Instant::now() < until {
            poll.poll(&mut events, Some(Duration::from_millis(20))).unwrap();
            for ev in events.iter() {
                assert!(Returns::owns(ev.token()), "re-registered under a return's token");
                returns.ready(poll.registry(), ev.token());
            }
            returns.expire(poll.registry());
        }
    }

    #[test]
    fn a_connection_is_kept_once_its_reset_is_answered_idle_and_closed_otherwise() {
        let ok = b"C\0\0\0\x10DISCARD ALL\0Z\0\0\0\x05I".to_vec();
        for (answer, kept) in [(ok.clone(), true), (b"C\0\0\0\x10DISCARD ALL\0Z\0\0\0\x05T".to_vec(), false)] {
            let mut poll = Poll::new().unwrap();
            let pool = Arc::new(ServerPool::new(4, Duration::from_secs(60)));
            let mut returns = Returns::new(Duration::from_secs(5));
            let (ours, mut peer) = pair(&poll);
            returns.begin(poll.registry(), ours, pool.returning(origin()).unwrap());
            let mut got = vec![0u8; Returning::reset().len()];
            peer.read_exact(&mut got).unwrap();
            assert_eq!(got, Returning::reset(), "the reset, sent by the pump");
            peer.write_all(&answer).unwrap();
            settle(&mut poll, &mut returns);
            assert!(returns.slab.is_empty());
            assert_eq!(pool.kept_for(ReplicaId(0)), usize::from(kept), "{answer:?}");
        }
    }

    #[test]
    fn a_reset_not_answered_by_its_deadline_closes_the_connection() {
        let mut poll = Poll::new().unwrap();
        let pool = Arc::new(ServerPool::new(4, Duration::from_secs(60)));
        let mut returns = Returns::new(Duration::from_millis(100));
        let (ours, mut peer) = pair(&poll);
        returns.begin(poll.registry(), ours, pool.returning(origin()).unwrap());
        assert!(returns.wait().is_some_and(|w| w <= Duration::from_millis(100)), "the pump wakes for the deadline");
        settle(&mut poll, &mut returns);
        assert!(returns.slab.is_empty() && returns.wait().is_none());
        assert_eq!(pool.kept_for(ReplicaId(0)), 0);
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut rest = Vec::new();
        peer.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, Returning::reset(), "the replica saw the reset, then the close");
    }
}
