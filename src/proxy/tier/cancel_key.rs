//! Which member of a tier holds a session, read from its cancel key
//! (docs/proxy.md, "A tier of proxies"). A cancel request comes on a new
//! connection, which a load balancer may hand to any member; as PgBouncer
//! 1.19's `[peers]` do, each member writes its peer id into the keys it
//! hands out, and a member that receives a key naming another peer
//! forwards the request there. The id goes into the high byte of the
//! BackendKeyData's process id: a PostgreSQL pid is below 2^22 (Linux's
//! largest `pid_max`), so the low 24 bits carry it unchanged and the
//! secret key is the server's own. Pure: bytes and numbers in and out.

/// The largest peer id (the sign bit of the process id stays clear, as
/// clients that read it as an `int32` expect).
pub const MAX_PEER: u8 = 127;

/// The bits of a process id a server's pid may use.
const PID_BITS: u32 = 0x00FF_FFFF;

use crate::proxy::late_class::message_len;

/// A BackendKeyData's process id and secret key.
pub type Key = (u32, u32);

/// The process id a client of peer `peer` is given for server pid `pid`;
/// `None` when `pid` does not fit in 24 bits (then the key goes unchanged
/// and only this member can cancel with it).
pub fn encode(peer: u8, pid: u32) -> Option<u32> {
    (pid & !PID_BITS == 0 && (1..=MAX_PEER).contains(&peer)).then_some((u32::from(peer) << 24) | pid)
}

/// Where a cancel request for process id `pid` goes, at member `own`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// This member's own key (or one that names no peer): looked up here.
    Here,
    /// Another member's: forwarded to it.
    Peer(u8),
}

/// The owner of `pid` as member `own` reads it.
pub fn owner(own: u8, pid: u32) -> Owner {
    match (pid >> 24) as u8 {
        0 => Owner::Here,
        p if p == own => Owner::Here,
        p => Owner::Peer(p),
    }
}

/// Rewrites the BackendKeyData in a server's greeting (messages after its
/// AuthenticationOk, through ReadyForQuery) with peer `peer`'s process id:
/// the server's key and the client's, or `None` when the greeting has no
/// whole BackendKeyData or its pid does not fit (left unchanged).
pub fn rewrite(greeting: &mut [u8], peer: u8) -> Option<(Key, Key)> {
    let mut at = 0;
    while let Some((tag, len)) = greeting.get(at..).and_then(message_len) {
        if tag == b'K' && len == 13 && at + 13 <= greeting.len() {
            let field = |i: usize| u32::from_be_bytes(greeting[i..i + 4].try_into().expect("4 bytes"));
            let (pid, secret) = (field(at + 5), field(at + 9));
            let ours = encode(peer, pid)?;
            greeting[at + 5..at + 9].copy_from_slice(&ours.to_be_bytes());
            return Some(((pid, secret), (ours, secret)));
        }
        at += len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend(((4 + body.len()) as u32).to_be_bytes());
        m.extend(body);
        m
    }

    #[test]
    fn a_peer_id_round_trips_through_the_process_id() {
        for peer in [1, 2, 77, MAX_PEER] {
            let pid = encode(peer, 4_194_303).unwrap();
            assert_eq!(pid & PID_BITS, 4_194_303);
            assert!(i32::try_from(pid).is_ok(), "the sign bit stays clear");
            assert_eq!(owner(peer, pid), Owner::Here);
            assert_eq!(owner(if peer == 1 { 2 } else { 1 }, pid), Owner::Peer(peer));
        }
        assert_eq!(encode(0, 5), None, "0 names no peer");
        assert_eq!(encode(128, 5), None);
        assert_eq!(encode(3, 1 << 24), None, "a pid that does not fit");
        assert_eq!(owner(3, 12_345), Owner::Here, "a plain server pid");
    }

    #[test]
    fn the_greetings_key_is_rewritten_in_place() {
        let mut key = 1234u32.to_be_bytes().to_vec();
        key.extend(0xdead_beefu32.to_be_bytes());
        let mut g = message(b'S', b"server_version\x0016\x00");
        g.extend(message(b'K', &key));
        g.extend(message(b'Z', b"I"));
        let before = g.clone();
        let (server, client) = rewrite(&mut g, 5).unwrap();
        assert_eq!(server, (1234, 0xdead_beef));
        assert_eq!(client, ((5 << 24) | 1234, 0xdead_beef));
        assert_eq!(g.len(), before.len());
        let k = g.iter().position(|&b| b == b'K').unwrap();
        assert_eq!(&g[k + 5..k + 9], &client.0.to_be_bytes());
        assert_eq!(&g[..k], &before[..k], "the other messages are untouched");
        let mut none = message(b'Z', b"I");
        assert_eq!(rewrite(&mut none, 5), None);
        let mut cut = message(b'K', &key);
        cut.truncate(10);
        assert_eq!(rewrite(&mut cut, 5), None, "a partial BackendKeyData");
        let mut long = message(b'S', b"x\x00y\x00");
        long[4] = 200;
        assert_eq!(rewrite(&mut long, 5), None, "a message said to run past the greeting's end");
    }
}
