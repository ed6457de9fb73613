//! `run --via-proxy` ([proxy](docs/proxy.md#plbbench-run---via-proxy)):
//! what a `plbbench proxy` child process tells the run that started it. The
//! proxy makes every routing decision, so the run learns them from the
//! proxy itself rather than deciding twice: one JSON line per message on
//! the proxy's stdout (its address and clock, the controller's event rows,
//! a once-per-second view of roles and open sessions), the replica of each
//! session in a ParameterStatus the proxy sends after login, and the
//! replica of a failed login in the FATAL's DETAIL. Both ends use the types
//! and functions here, so the format has one definition.

use crate::core::model::{ConnectError, EventKind, ReplicaId, Role};
pub use crate::core::proxy_tier::TierLine;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// The ParameterStatus naming the replica a proxied session landed on
/// (value `r1`..`rK`). Clients that do not know it ignore it, as they
/// ignore any parameter they did not ask about.
pub const REPLICA_PARAM: &str = "plbbench.replica";

/// In a tier of proxies, the ParameterStatus naming the member that holds
/// the session (its peer id): the run counts each member's sessions.
pub const PROXY_PARAM: &str = "plbbench.proxy";

/// The start of the DETAIL of a FATAL the proxy sends when it could not
/// log a client into the replica it chose.
const DETAIL_PREFIX: &str = "plbbench proxy routed this session to ";

/// One line of the feed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Feed {
    /// The first line: where the proxy accepts clients and when its clock
    /// (every `t_s` after this) started, as Unix seconds.
    Listening {
        /// The bound address.
        addr: SocketAddr,
        /// The proxy's time zero.
        start_unix_s: f64,
    },
    /// A row of events.csv from the proxy's controller.
    Event {
        /// Proxy time, seconds.
        t_s: f64,
        /// What happened.
        kind: EventKind,
        /// To which replica.
        replica: Option<ReplicaId>,
        /// Free text.
        detail: String,
    },
    /// Once a second: every replica's role and open sessions `[P, F]` in
    /// the proxy's router.
    State {
        /// Proxy time, seconds.
        t_s: f64,
        /// Role per replica, r1 first.
        roles: Vec<Role>,
        /// Open sessions per replica and class.
        active: Vec<[u32; 2]>,
    },
    /// In a tier of proxies: once a second, and at once when it changes,
    /// where this member stands (only the leader sends `State` and
    /// `Event` lines: its router's are the tier's).
    Tier(TierLine),
}

impl Feed {
    /// The line written for this message (no newline).
    pub fn line(&self) -> String {
        serde_json::to_string(self).expect("a feed message serialises")
    }

    /// Reads one line.
    pub fn parse(line: &str) -> Result<Feed, serde_json::Error> {
        serde_json::from_str(line)
    }

    /// The message with its time moved by `by` seconds (onto another clock).
    pub fn shifted(mut self, by: f64) -> Feed {
        match &mut self {
            Feed::Listening { .. } => {}
            Feed::Event { t_s, .. } | Feed::State { t_s, .. } | Feed::Tier(TierLine { t_s, .. }) => *t_s += by,
        }
        self
    }
}

/// Now, as Unix seconds: the clock both ends of the feed share (the
/// proxy's [`Feed::Listening`] start, the run's own start).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// The DETAIL of a failed login on replica `r`: why, as the run's
/// accounting names it.
pub fn failed_on(r: ReplicaId, why: ConnectError) -> String {
    format!("{DETAIL_PREFIX}{r}: {why}")
}

/// The replica and the reason a FATAL's DETAIL names, if the proxy wrote it.
pub fn failure_of_detail(detail: &str) -> Option<(ReplicaId, ConnectError)> {
    let (r, why) = detail.strip_prefix(DETAIL_PREFIX)?.split_once(": ")?;
    let why =
        [ConnectError::Refused, ConnectError::Timeout, ConnectError::Full].into_iter().find(|e| e.name() == why)?;
    Some((replica_of_param(r)?, why))
}

/// The replica a ParameterStatus value names (`r3`).
pub fn replica_of_param(value: &str) -> Option<ReplicaId> {
    let n: usize = value.strip_prefix('r')?.parse().ok()?;
    n.checked_sub(1).map(ReplicaId)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_reads_back_as_written() {
        let msgs = [
            Feed::Listening { addr: "127.0.0.1:40000".parse().unwrap(), start_unix_s: 1.7e9 },
            Feed::Event { t_s: 2.5, kind: EventKind::Role, replica: Some(ReplicaId(2)), detail: "P -> M".into() },
            Feed::State { t_s: 3.0, roles: vec![Role::P, Role::M, Role::F], active: vec![[1, 2], [0, 0], [0, 7]] },
            Feed::Tier(TierLine {
                t_s: 4.0,
                peer: 2,
                leading: false,
                leader: None,
                generation: 3,
                open: 5,
                routed: 40,
                stale: 2,
            }),
        ];
        for m in msgs {
            assert_eq!(Feed::parse(&m.line()).unwrap(), m);
        }
        assert!(Feed::parse("{\"state\":{}}").is_err());
    }

    #[test]
    fn the_replica_reads_back_from_detail_and_parameter() {
        for why in [ConnectError::Refused, ConnectError::Timeout, ConnectError::Full] {
            assert_eq!(failure_of_detail(&failed_on(ReplicaId(4), why)), Some((ReplicaId(4), why)));
        }
        assert_eq!(failure_of_detail("some other detail r3: connect refused"), None);
        assert_eq!(failure_of_detail(&format!("{DETAIL_PREFIX}r0: connect refused")), None);
        assert_eq!(failure_of_detail(&format!("{DETAIL_PREFIX}r2: gone")), None);
        assert_eq!(replica_of_param(&ReplicaId(0).to_string()), Some(ReplicaId(0)));
        assert_eq!(replica_of_param("x1"), None);
    }
}
