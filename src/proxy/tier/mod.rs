//! A tier of `plbbench proxy` processes that share one cluster and one set
//! of roles (docs/proxy.md, "A tier of proxies"; docs/scale.md, "Agreeing
//! on roles"). Every member routes its own clients; one, elected through
//! an advisory lock on the cluster ([`member`], [`election`]), runs the
//! controller as a lone proxy does and serves its role vectors on its feed
//! port ([`feed`], [`wire`]); the others route within those roles and
//! report their sessions to it ([`link`], [`follow`]), so its counts are
//! the tier's. Borrowing and returns stay with the leader. A cancel
//! request reaches the member that holds its session ([`cancel_key`]).
//! Leadership is a lease: the leader leads only while its last round that
//! confirmed a majority of its locks began less than `lease` ago on its
//! own monotonic clock, so a leader that was stopped (SIGSTOP, a long
//! pause) finds it lost the lease before it sends a vector or routes as
//! leader; a follower that hears nothing from its leader for `lease` may
//! end the silent leader's lock-holding backends and take the locks
//! ([`member`]). Lock order: a member's [`State`], then the controller.

pub mod cancel_key;
pub mod election;
mod feed;
pub mod follow;
mod link;
mod member;
pub mod wire;

use super::login::Fatal;
use super::Shared;
use crate::backend::proxy_feed::{Feed, TierLine};
use crate::core::model::{Class, ReplicaId};
use crate::core::router::RouterConfig;
use election::{Member, Standing};
use follow::{Books, View};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, Notify};
use wire::ToLeader;

pub use member::{join, JoinError, Joined};

/// How long a follower waits for the leader's answer to an ask.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// What the command resolved for a member.
pub struct TierInput {
    /// Its identity and addresses, as the directory shows them.
    pub me: Member,
    /// Its feed port, bound.
    pub feed: std::net::TcpListener,
    /// How often it tries the lock (a follower) or checks it still holds
    /// its connection (the leader).
    pub retry: Duration,
    /// The leader's lease (`[tier] lease_ms`).
    pub lease: Duration,
    /// Its routing flags, written one way on every member; a follower's
    /// must equal the leader's.
    pub flags: String,
    /// Its control connection, opened and checked by [`join`].
    pub joined: Joined,
}

/// A member's tier state, shared by its connection tasks.
pub(crate) struct Tier {
    pub me: Member,
    retry: Duration,
    lease: Duration,
    flags: String,
    /// Whether it leads now (read without the lock: the controller's
    /// events are printed only by the leader), while its lease lasts.
    leading: AtomicBool,
    /// The lease's end, ns after `born` (read without the lock).
    lease_until_ns: AtomicU64,
    born: Instant,
    state: Mutex<State>,
    /// Peer ids and client addresses, from the directory: where cancel
    /// requests for other members' sessions go.
    peers: Mutex<HashMap<u8, SocketAddr>>,
    /// While it leads: a line sender per follower, with its connection's
    /// number.
    followers: Mutex<HashMap<u8, (u64, mpsc::UnboundedSender<String>)>>,
    /// Set when the leader refused this member: it stops with this line.
    pub refused: Mutex<Option<String>>,
    /// Wakes the accept loop when `refused` is set.
    pub stop: Notify,
}

/// What changes with the election.
struct State {
    standing: Standing,
    view: View,
    /// While it follows: the line sender to the leader, its feed address
    /// and the link's number.
    link: Option<(mpsc::UnboundedSender<String>, SocketAddr, u64)>,
    /// Asks waiting for the leader's answer.
    asks: HashMap<u64, oneshot::Sender<Option<ReplicaId>>>,
    next: u64,
    /// While it leads: its followers' sessions.
    books: Books,
    /// While it leads: the sequence number of its last role vector.
    seq: u64,
    /// While it follows over a live link: its leader's peer id.
    leader: Option<u8>,
    /// Routing decisions so far, and those made on stale roles (see
    /// [`TierLine::stale`]).
    routed: u64,
    stale: u64,
    /// While it follows over a link: when the leader last spoke.
    heard: Option<Instant>,
}

impl Tier {
    fn new(input: &TierInput, cfg: RouterConfig) -> Tier {
        Tier {
            me: input.me.clone(),
            retry: input.retry,
            lease: input.lease,
            flags: input.flags.clone(),
            leading: AtomicBool::new(false),
            lease_until_ns: AtomicU64::new(0),
            born: Instant::now(),
            state: Mutex::new(State {
                standing: Standing::Follower,
                view: View::new(cfg),
                link: None,
                asks: HashMap::new(),
                next: 0,
                books: Books::default(),
                seq: 0,
                leader: None,
                routed: 0,
                stale: 0,
                heard: None,
            }),
            peers: Mutex::new(HashMap::new()),
            followers: Mutex::new(HashMap::new()),
            refused: Mutex::new(None),
            stop: Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("tier lock")
    }

    /// Whether this member leads now: it won the locks and its lease lasts.
    pub fn leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst) && self.lease_lasts()
    }

    /// Whether the lease, last renewed by a round that confirmed a majority
    /// of the locks, has not run out on this member's monotonic clock.
    pub fn lease_lasts(&self) -> bool {
        (self.born.elapsed().as_nanos() as u64) < self.lease_until_ns.load(Ordering::SeqCst)
    }

    /// A round that began at `began` confirmed a majority of the locks: the
    /// lease runs from then.
    fn renew(&self, began: Instant) {
        let until = began.saturating_duration_since(self.born) + self.lease;
        self.lease_until_ns.store(until.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Whether a follower has heard nothing from a leader for the lease
    /// (or has no link to one).
    fn leader_silent(&self, s: &State) -> bool {
        s.link.is_none() || s.heard.is_none_or(|h| h.elapsed() >= self.lease)
    }

    /// Stops the member with `why` (the leader refused it).
    fn refuse(&self, why: String) {
        *self.refused.lock().expect("refused lock") = Some(why);
        self.stop.notify_one();
    }

    /// Its standing for the feed at proxy time `t_s`.
    pub fn line(&self, t_s: f64) -> TierLine {
        let s = self.state();
        // A leader whose lease ran out is not one, even before it notices.
        let leading = matches!(s.standing, Standing::Leader { .. }) && self.lease_lasts();
        TierLine {
            t_s,
            peer: self.me.peer,
            leading,
            leader: if leading { Some(self.me.peer) } else { s.leader.filter(|_| s.link.is_some()) },
            generation: s.view.fence.generation(),
            open: s.view.own().iter().map(|c| c[0] + c[1]).sum(),
            routed: s.routed,
            stale: s.stale,
        }
    }

    /// Client address of peer `peer`, per the directory.
    pub fn peer(&self, peer: u8) -> Option<SocketAddr> {
        self.peers.lock().expect("peers lock").get(&peer).copied()
    }
}

/// The member's tier state, for [`Shared`].
pub(crate) fn tier(input: &TierInput, cfg: RouterConfig) -> Arc<Tier> {
    Arc::new(Tier::new(input, cfg))
}

/// Starts the member's election loop and feed port; their tasks go into
/// `background`.
pub(crate) fn start(
    shared: &Arc<Shared>,
    input: TierInput,
    background: &mut Vec<tokio::task::JoinHandle<()>>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(input.feed)?;
    background.push(tokio::spawn(feed::serve(shared.clone(), listener)));
    background.push(tokio::spawn(feed::publish(shared.clone())));
    background.push(tokio::spawn(member::elect(shared.clone(), input.joined)));
    Ok(())
}

/// The replica for a new session of `class` at a member: the controller's
/// choice while it leads; while it follows, one within the leader's roles,
/// reported to the leader, or the leader's answer when there is no room.
/// A follower never picks, nor takes from the leader, a replica its own
/// probes confirmed down ([`View::own_health`]).
pub(super) async fn admit(shared: &Shared, t: &Tier, id: u32, class: Class) -> Result<ReplicaId, Fatal> {
    let answer = {
        let mut s = t.state();
        s.routed += 1;
        member::fence_expired(shared, t, &mut s);
        if let Standing::Leader { .. } = s.standing {
            let r = shared.control(|c, now| c.c.request(id, class, now));
            return match r {
                crate::core::control::Admission::Route(r) => {
                    s.view.started(r, class);
                    Ok(r)
                }
                _ => Err(super::full(class, "no replica can take it now")),
            };
        }
        let healthy = shared.control(|c, _| {
            (0..c.c.router().config().replicas).map(|i| c.c.router().is_healthy(ReplicaId(i))).collect::<Vec<_>>()
        });
        let leaderless = t.leader_silent(&s);
        for (r, up) in s.view.own_health(&healthy, leaderless) {
            let what = if up { "answering again" } else { "down: no session goes there" };
            eprintln!("plbbench proxy: tier {}: peer {}'s own probes found {r} {what}", t.me.tier, t.me.peer);
        }
        if let Some(r) = s.view.choose(class) {
            if let Some((tx, ..)) = &s.link {
                let _ = tx.send(wire::line(&ToLeader::Start { replica: r, class }));
            }
            if leaderless {
                s.stale += 1;
            }
            return Ok(r);
        }
        if !s.view.has_roles() {
            return Err(Fatal::new("57P03", "plbbench proxy: the tier has no leader yet; retry in a moment"));
        }
        let Some((tx, ..)) = s.link.clone() else {
            return Err(super::full(class, "has no room within the tier's last roles, and no leader to ask"));
        };
        let (ask, rx) = (s.next, oneshot::channel());
        s.next += 1;
        s.asks.insert(ask, rx.0);
        let _ = tx.send(wire::line(&ToLeader::Ask { ask, class }));
        rx.1
    };
    match tokio::time::timeout(ASK_TIMEOUT, answer).await {
        Ok(Ok(Some(r))) => {
            let mut s = t.state();
            if s.view.known_down(r) {
                // The leader counted it started there: told it ended.
                if let Some((tx, ..)) = &s.link {
                    let _ = tx.send(wire::line(&ToLeader::End { replica: r, class }));
                }
                return Err(super::full(class, "has no room within the tier's roles (the leader's pick is down here)"));
            }
            s.view.started(r, class);
            Ok(r)
        }
        _ => Err(super::full(class, "has no room within the tier's roles (the leader found none)")),
    }
}

/// Says the member's standing on the feed, when the proxy has one (at
/// every change and once a second).
pub(crate) fn say(shared: &Shared, t: &Tier) {
    if shared.feed {
        println!("{}", Feed::Tier(t.line(shared.now())).line());
    }
}

/// A session of `class` on `r` at a member ended: the controller releases
/// it while the member leads; while it follows, the leader is told.
pub(super) fn ended(shared: &Shared, t: &Tier, r: ReplicaId, class: Class) {
    let mut s = t.state();
    s.view.ended(r, class);
    match s.standing {
        Standing::Leader { .. } => shared.control(|c, now| c.ended(r, class, now)),
        Standing::Follower => {
            if let Some((tx, ..)) = &s.link {
                let _ = tx.send(wire::line(&ToLeader::End { replica: r, class }));
            }
        }
    }
}
