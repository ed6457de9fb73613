//! A follower's link to its leader's feed port (docs/proxy.md, "A tier of
//! proxies"): hello with its open sessions, then the leader's role vectors
//! applied under the generation fence, its answers to asks delivered, and
//! its refusal (identity, routing flags) turned into this member's stop.
//! While the link is down the member routes within the last roles it
//! applied.

use super::wire::{self, ToFollower, ToLeader, Verdict};
use crate::proxy::Shared;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Numbers links, so that a closing one clears only itself.
static LINKS: AtomicU64 = AtomicU64::new(0);

/// Follows the leader at `feed` until the connection ends.
pub(super) async fn follow(shared: Arc<Shared>, feed: SocketAddr) {
    let t = shared.tier.clone().expect("a tier member");
    let Ok(Ok(sock)) = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(feed)).await else { return };
    let _ = sock.set_nodelay(true);
    let (rd, mut wr) = sock.into_split();
    let n = LINKS.fetch_add(1, Ordering::SeqCst);
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    {
        let mut s = t.state();
        if s.link.is_some() || !matches!(s.standing, super::Standing::Follower) {
            return;
        }
        let hello = ToLeader::Hello {
            peer: t.me.peer,
            flags: t.flags.clone(),
            generation: s.view.fence.generation(),
            open: s.view.own().clone(),
        };
        let _ = tx.send(wire::line(&hello));
        s.link = Some((tx, feed, n));
        s.heard = Some(std::time::Instant::now());
    }
    let writer = tokio::spawn(async move {
        while let Some(mut l) = rx.recv().await {
            l.push('\n');
            if wr.write_all(l.as_bytes()).await.is_err() {
                break;
            }
        }
    });
    let mut lines = BufReader::new(rd).lines();
    while let Ok(Some(l)) = lines.next_line().await {
        let Ok(m) = wire::parse::<ToFollower>(&l) else { break };
        let mut s = t.state();
        if s.link.as_ref().is_none_or(|l| l.2 != n) {
            // Let go for a new leader (this one was deposed).
            break;
        }
        s.heard = Some(std::time::Instant::now());
        let (before, mut tell) = (s.view.fence.generation(), false);
        match m {
            ToFollower::Welcome { leader, generation } => {
                if !s.view.fence.admits(generation) {
                    eprintln!(
                        "plbbench proxy: tier {}: peer {leader} leads at generation {generation}, below the {} \
                         this member applied: not followed",
                        t.me.tier,
                        s.view.fence.generation()
                    );
                    break;
                }
                s.leader = Some(leader);
                tell = true;
                eprintln!(
                    "plbbench proxy: tier {}: peer {} follows peer {leader} (generation {generation})",
                    t.me.tier, t.me.peer
                );
            }
            ToFollower::Roles { generation, seq, held } => match s.view.apply(generation, seq, held) {
                Ok(Verdict::Fenced) => {
                    eprintln!(
                        "plbbench proxy: tier {}: roles of generation {generation} refused (fenced: {} applied)",
                        t.me.tier,
                        s.view.fence.generation()
                    );
                    break;
                }
                Ok(_) => {}
                Err(e) => {
                    eprintln!("plbbench proxy: tier {}: roles that do not fit: {e}", t.me.tier);
                    break;
                }
            },
            ToFollower::Placed { ask, replica } => {
                if let Some(tx) = s.asks.remove(&ask) {
                    let _ = tx.send(replica);
                }
            }
            ToFollower::Refused { why } => {
                drop(s);
                t.refuse(why);
                break;
            }
        }
        let tell = tell || s.view.fence.generation() != before;
        drop(s);
        if tell {
            super::say(&shared, &t);
        }
    }
    writer.abort();
    let mut s = t.state();
    if s.link.as_ref().is_some_and(|l| l.2 == n) {
        s.link = None;
        s.leader = None;
        s.asks.clear();
        drop(s);
        super::say(&shared, &t);
        eprintln!("plbbench proxy: tier {}: the link to the leader at {feed} closed", t.me.tier);
    }
}
