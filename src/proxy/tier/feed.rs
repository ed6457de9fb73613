//! The leader's side of the tier (docs/proxy.md, "A tier of proxies"): its
//! feed port, where each follower says hello (its identity, its routing
//! flags, its open sessions) and then reports its sessions and asks for
//! room; and the role vectors it sends every follower, at once when its
//! roles or health change (checked every 100 ms) and every second with
//! the counts. A connection that reaches a member that does not lead is
//! closed.

use super::follow::Change;
use super::wire::{self, ToFollower, ToLeader};
use super::Tier;
use crate::core::control::{Admission, Controller};
use crate::core::model::{Class, ReplicaId};
use crate::proxy::Shared;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// How long a follower may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts followers for the life of the proxy.
pub(super) async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    let mut n = 0u64;
    loop {
        let Ok((sock, _)) = listener.accept().await else { continue };
        n += 1;
        tokio::spawn(follower(shared.clone(), sock, n));
    }
}

/// Places and unplaces what `change` says on the leader's router.
pub(super) fn apply(c: &mut Controller, change: &Change) {
    for (list, place) in [(&change.place, true), (&change.unplace, false)] {
        for (r, n) in list.iter().enumerate() {
            for (class, &count) in [Class::P, Class::F].into_iter().zip(n) {
                for _ in 0..count {
                    if place {
                        c.place(ReplicaId(r), class);
                    } else {
                        c.unplace(ReplicaId(r), class);
                    }
                }
            }
        }
    }
}

/// Why a follower's hello is refused, if it is.
fn refusal(t: &Tier, peer: u8, flags: &str) -> Option<String> {
    if peer == t.me.peer {
        return Some(format!("peer id {peer} is the leader's own in tier {}: give each member its own", t.me.tier));
    }
    (flags != t.flags).then(|| {
        format!(
            "peer {peer}'s routing flags differ from the leader's (peer {} of tier {}): every member needs the same \
             strategy, mix, --T, theta, detection, recovery, probe interval and class rule",
            t.me.peer, t.me.tier
        )
    })
}

/// One follower's connection, number `n`.
async fn follower(shared: Arc<Shared>, sock: TcpStream, n: u64) {
    let t = shared.tier.clone().expect("a tier member");
    let _ = sock.set_nodelay(true);
    let (rd, mut wr) = sock.into_split();
    let mut lines = BufReader::new(rd).lines();
    let Ok(Ok(Some(first))) = tokio::time::timeout(HELLO_TIMEOUT, lines.next_line()).await else { return };
    let Ok(ToLeader::Hello { peer, flags, generation, open }) = wire::parse(&first) else { return };
    if let Some(why) = refusal(&t, peer, &flags) {
        eprintln!("plbbench proxy: tier {}: refused peer {peer}: {why}", t.me.tier);
        let _ = wr.write_all(format!("{}\n", wire::line(&ToFollower::Refused { why })).as_bytes()).await;
        return;
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    {
        let mut s = t.state();
        let super::Standing::Leader { generation: was } = s.standing else { return };
        let ours = wire::above(was, generation);
        if ours != was {
            s.standing = super::Standing::Leader { generation: ours };
            s.seq = 0;
            s.view.fence.lead(ours, 0);
            eprintln!(
                "plbbench proxy: tier {}: peer {} leads, generation {ours} (peer {peer} had applied {generation})",
                t.me.tier, t.me.peer
            );
        }
        if s.books.has(peer) {
            // The same member again (its old connection not yet seen
            // closed): the new connection replaces it.
            let change = s.books.leave(peer);
            shared.control(|c, _| apply(&mut c.c, &change));
        }
        let change = s.books.join(peer, open);
        shared.control(|c, _| apply(&mut c.c, &change));
        t.followers.lock().expect("followers lock").insert(peer, (n, tx.clone()));
        let _ = tx.send(wire::line(&ToFollower::Welcome { leader: t.me.peer, generation: ours }));
        s.seq += 1;
        let held = shared.control(|c, _| c.c.router().held());
        let _ = tx.send(wire::line(&ToFollower::Roles { generation: ours, seq: s.seq, held }));
        eprintln!("plbbench proxy: tier {}: peer {peer} follows (generation {ours})", t.me.tier);
    }
    let writer = tokio::spawn(async move {
        while let Some(mut l) = rx.recv().await {
            l.push('\n');
            if wr.write_all(l.as_bytes()).await.is_err() {
                break;
            }
        }
    });
    while let Ok(Some(l)) = lines.next_line().await {
        let Ok(m) = wire::parse::<ToLeader>(&l) else { break };
        let mut s = t.state();
        if !matches!(s.standing, super::Standing::Leader { .. }) || super::member::fence_expired(&shared, &t, &mut s) {
            break;
        }
        match m {
            ToLeader::Start { replica, class } if replica.idx() < shared.replicas.len() => {
                s.books.session(peer, replica, class, true);
                shared.control(|c, _| c.c.place(replica, class));
            }
            ToLeader::End { replica, class } if replica.idx() < shared.replicas.len() => {
                s.books.session(peer, replica, class, false);
                shared.control(|c, now| c.ended(replica, class, now));
            }
            ToLeader::Ask { ask, class } => {
                let chosen = match shared.control(|c, now| c.c.request(u32::MAX, class, now)) {
                    Admission::Route(r) => Some(r),
                    _ => None,
                };
                if let Some(r) = chosen {
                    s.books.session(peer, r, class, true);
                }
                let _ = tx.send(wire::line(&ToFollower::Placed { ask, replica: chosen }));
            }
            _ => break,
        }
    }
    writer.abort();
    let mut s = t.state();
    let mut followers = t.followers.lock().expect("followers lock");
    if followers.get(&peer).is_some_and(|(m, _)| *m == n) {
        followers.remove(&peer);
        let change = s.books.leave(peer);
        if matches!(s.standing, super::Standing::Leader { .. }) {
            shared.control(|c, _| apply(&mut c.c, &change));
        }
        eprintln!("plbbench proxy: tier {}: peer {peer} left", t.me.tier);
    }
}

/// While this member leads: a role vector to every follower when roles,
/// loans or health change, and every second.
pub(super) async fn publish(shared: Arc<Shared>) {
    let t = shared.tier.clone().expect("a tier member");
    let mut every = tokio::time::interval(Duration::from_millis(100));
    let (mut last, mut sent) = (Vec::new(), Instant::now());
    loop {
        every.tick().await;
        let mut s = t.state();
        let super::Standing::Leader { generation } = s.standing else { continue };
        if super::member::fence_expired(&shared, &t, &mut s) {
            continue;
        }
        let held = shared.control(|c, _| c.c.router().held());
        let shape: Vec<_> = held.iter().map(|h| (h.role, h.home, h.healthy)).collect();
        if shape == last && sent.elapsed() < Duration::from_secs(1) {
            continue;
        }
        s.seq += 1;
        let seq = s.seq;
        s.view.fence.lead(generation, seq);
        let line = wire::line(&ToFollower::Roles { generation, seq, held });
        for (_, tx) in t.followers.lock().expect("followers lock").values() {
            let _ = tx.send(line.clone());
        }
        if shape != last && !last.is_empty() {
            let roles: String = shape.iter().map(|(r, ..)| format!("{r:?}")).collect();
            eprintln!("plbbench proxy: tier {}: generation {generation} seq {} roles {roles}", t.me.tier, s.seq);
        }
        (last, sent) = (shape, Instant::now());
    }
}
