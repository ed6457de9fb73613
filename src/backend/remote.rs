//! `run --generators N`: the driver's side of its generator children. Each
//! child's lines ([`generator_feed::Line`]) arrive on a channel; here they
//! become the driver's own messages (its session numbers made run-wide), so
//! the one collector counts a child's queries and sessions as it counts its
//! own. What each child said of its clock and its books at the end is kept
//! for the run's accounting: a child whose stream ends without its books
//! died, and its sessions cannot be accounted.

use super::generator_feed::{self, Line};
use tokio::sync::mpsc;

/// A generator child as the driver sees it.
pub struct Remote {
    /// Its index, 0-based, and how many there are.
    pub index: u32,
    /// How many generators share the clients.
    pub of: u32,
    /// What it is, for messages: `pid 1234` or `container NAME`.
    pub who: String,
    /// Asks it to stop (SIGTERM) when the run is interrupted.
    pub stop: Stop,
    /// Its lines after the clock handshake ([`Line::Ready`], [`Line::Pong`]).
    pub lines: mpsc::UnboundedReceiver<Line>,
}

/// How to ask one child to stop.
pub type Stop = std::sync::Arc<dyn Fn() + Send + Sync>;

/// What one child delivered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RemoteEnd {
    /// Its index, 0-based.
    pub index: u32,
    /// What it is: `pid 1234` or `container NAME`.
    pub who: String,
    /// How late it read the start, seconds after time zero.
    pub late_s: Option<f64>,
    /// Its books: sessions open at the end `[P, F]`; `None`: it never sent
    /// them (it died).
    pub in_flight: Option<[u64; 2]>,
    /// It was stopped by a signal.
    pub interrupted: bool,
    /// Its own saturation guard.
    pub generator: Option<crate::core::saturation::GeneratorReport>,
    /// In a tier of proxies: its sessions `[opened, lost]` through each
    /// peer (index peer - 1).
    pub through: Vec<[u64; 2]>,
}

/// A record of a child, for the collector.
pub enum Record {
    /// A finished query.
    Query(crate::core::metrics::QueryRecord),
    /// A placed session: class, replica, time.
    Session(crate::core::model::Class, crate::core::model::ReplicaId, f64),
    /// An ended session.
    Ended(crate::core::metrics::SessionRecord),
    /// A step of a session's login.
    Login(crate::core::metrics::LoginRecord),
    /// Schedule lag, seconds.
    Lag(f64),
}

/// Passes every record of `remote` to `send` until its stream ends;
/// returns what it delivered. A stream that ends without the child's books
/// (it died) is also told on `died`, with its index and what it is, at once.
pub async fn forward(
    mut remote: Remote,
    send: impl Fn(Record),
    died: mpsc::UnboundedSender<(u32, String)>,
) -> RemoteEnd {
    let mut end = RemoteEnd { index: remote.index, who: remote.who.clone(), ..RemoteEnd::default() };
    while let Some(line) = remote.lines.recv().await {
        match line {
            Line::Query(mut q) => {
                q.session = generator_feed::run_session(q.session, remote.index, remote.of);
                send(Record::Query(q));
            }
            Line::Session { class, replica, t_s } => send(Record::Session(class, replica, t_s)),
            Line::Ended(s) => send(Record::Ended(s)),
            Line::Login(l) => send(Record::Login(l)),
            Line::Lag { s } => send(Record::Lag(s)),
            Line::Started { late_s } => end.late_s = Some(late_s),
            Line::Done { in_flight, interrupted, generator, through } => {
                end.in_flight = Some(in_flight);
                end.interrupted = interrupted;
                end.generator = generator;
                end.through = through;
            }
            Line::Ready { .. } | Line::Pong { .. } => {}
        }
    }
    if end.in_flight.is_none() {
        let _ = died.send((end.index, end.who.clone()));
    }
    end
}
