//! The vocabulary shared by every part of plbbench (design.md §1): service
//! classes, replica roles, fault actions and the events that carry them,
//! the kinds of events.csv rows, and why queries and sessions fail.
//! Pure data, no behaviour beyond parsing and display.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A replica: its 0-based index, displayed the way users write it (`r1`
/// for index 0). Serialised as the bare index, as before it was a type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ReplicaId(pub usize);

impl ReplicaId {
    /// The index into per-replica vectors.
    pub fn idx(self) -> usize {
        self.0
    }

    /// Every replica of a K-replica cluster, r1 first.
    pub fn all(k: usize) -> impl Iterator<Item = ReplicaId> {
        (0..k).map(ReplicaId)
    }
}

impl fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0 + 1)
    }
}

/// Parses `r1`..`rK` (or a bare 1-based number) into an index below `k`.
pub fn parse_replica(s: &str, k: usize) -> Result<ReplicaId, String> {
    let digits = s.trim().trim_start_matches(['r', 'R']);
    let n: usize = digits.parse().map_err(|_| format!("`{s}` is not a replica name (expected r1..r{k})"))?;
    if n == 0 || n > k {
        return Err(format!("replica `{s}` does not exist (expected r1..r{k})"));
    }
    Ok(ReplicaId(n - 1))
}

/// A session's service class: Premium or Freemium.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Class {
    /// Premium: the class PLB protects.
    P,
    /// Freemium: best effort.
    F,
}

impl Class {
    /// Both classes, Premium first (the order of every per-class table).
    pub const ALL: [Class; 2] = [Class::P, Class::F];

    /// Index into per-class arrays: P = 0, F = 1.
    pub fn idx(self) -> usize {
        match self {
            Class::P => 0,
            Class::F => 1,
        }
    }

    /// Long name used in reports.
    pub fn long(self) -> &'static str {
        match self {
            Class::P => "premium",
            Class::F => "freemium",
        }
    }

    /// The other class.
    pub fn other(self) -> Class {
        match self {
            Class::P => Class::F,
            Class::F => Class::P,
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Class::P => "P",
            Class::F => "F",
        })
    }
}

/// A PLB role of a healthy replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Role {
    /// Premium-preferred capacity.
    P,
    /// Shared capacity.
    M,
    /// Freemium-preferred capacity.
    F,
}

impl Role {
    /// The role a class prefers.
    pub fn of(class: Class) -> Role {
        match class {
            Class::P => Role::P,
            Class::F => Role::F,
        }
    }

    /// Index into role vectors `(P, M, F)`.
    pub fn idx(self) -> usize {
        match self {
            Role::P => 0,
            Role::M => 1,
            Role::F => 2,
        }
    }

    /// All roles in vector order.
    pub const ALL: [Role; 3] = [Role::P, Role::M, Role::F];
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::P => "P",
            Role::M => "M",
            Role::F => "F",
        })
    }
}

/// What a fault event does to a replica (design.md §1). Serialised in
/// lowercase (`"down"`); Slow carries its fraction (`{"slow": 0.25}`).
/// Schedule files name the action and give Slow's fraction as a field of
/// its own (see `core::faults`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Fail-stop: the replica dies and its sessions break.
    Down,
    /// The replica comes back (crash recovery) and rejoins the pool.
    Rejoin,
    /// Gray failure: the replica stays alive but makes no progress.
    Pause,
    /// End of a pause.
    Resume,
    /// Gray failure: the replica keeps this fraction, in (0, 1), of the
    /// run's CPU budget C; it stays reachable and a survivor.
    Slow(f64),
    /// End of a Slow: the replica gets the full budget C again.
    Restore,
    /// Gray failure: the replica is cut off the network; its connections
    /// hang. Not a survivor while it lasts, like a Pause.
    Partition,
    /// End of a partition.
    Heal,
}

impl Action {
    /// The action that ends the fault this one starts (`Down` -> `Rejoin`,
    /// `Pause` -> `Resume`, `Slow` -> `Restore`, `Partition` -> `Heal`);
    /// `None` for the ending actions themselves.
    pub fn ended_by(self) -> Option<Action> {
        match self {
            Action::Down => Some(Action::Rejoin),
            Action::Pause => Some(Action::Resume),
            Action::Slow(_) => Some(Action::Restore),
            Action::Partition => Some(Action::Heal),
            Action::Rejoin | Action::Resume | Action::Restore | Action::Heal => None,
        }
    }

    /// Whether a replica under the fault this action starts still counts
    /// among the survivors: only a Slow one (it is reachable and serves,
    /// more slowly).
    pub fn keeps_survivor(self) -> bool {
        matches!(self, Action::Slow(_))
    }

    /// Prefix of the phase that starts with this action (`down1`, ...).
    pub fn phase_prefix(self) -> &'static str {
        match self {
            Action::Down => "down",
            Action::Rejoin => "rejoin",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Slow(_) => "slow",
            Action::Restore => "restore",
            Action::Partition => "partition",
            Action::Heal => "heal",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Slow(x) => write!(f, "Slow {x}"),
            other => {
                let k = other.phase_prefix();
                write!(f, "{}{}", k[..1].to_ascii_uppercase(), &k[1..])
            }
        }
    }
}

/// One fault event `(t, replica, action)`; `t_s` is already time-scaled.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultEvent {
    /// Seconds from run start.
    pub t_s: f64,
    /// Affected replica.
    pub replica: ReplicaId,
    /// What happens to it.
    pub action: Action,
}

/// What a row of events.csv records. Closed: every producer and every
/// reader (reports, the recovery ledger) matches on these; serialised and
/// displayed as the lowercase names events.csv has always used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// A fault action was applied to a replica (`fault`).
    Fault,
    /// The router's detector marked a replica up or down (`detect`).
    Detect,
    /// A suspicion state machine transition (`health`).
    Health,
    /// A probation ramp began or ended (`recovery`).
    Recovery,
    /// A PLB role change (`role`).
    Role,
    /// A degradation mode change (`mode`).
    Mode,
    /// Free text about the run itself, such as a signal (`note`).
    Note,
    /// A tier of proxies: a member led, followed, lost its leader, or a
    /// proxy fault ended or restarted it (`tier`).
    Tier,
}

impl EventKind {
    /// The name written in events.csv.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Fault => "fault",
            EventKind::Detect => "detect",
            EventKind::Health => "health",
            EventKind::Recovery => "recovery",
            EventKind::Role => "role",
            EventKind::Mode => "mode",
            EventKind::Note => "note",
            EventKind::Tier => "tier",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a query failed (queries.csv `error`, the error counts of summary.json).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryError {
    /// The connection broke (its server died): `connection lost`.
    ConnectionLost,
    /// No answer within the query deadline: `timeout`.
    Timeout,
    /// The server answered with an error: `query error`.
    Failed,
}

impl QueryError {
    /// The name written in files.
    pub fn name(self) -> &'static str {
        match self {
            QueryError::ConnectionLost => "connection lost",
            QueryError::Timeout => "timeout",
            QueryError::Failed => "query error",
        }
    }
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `max_connections` of every replica plbbench starts (local and docker
/// backends) for up to [`MAX_CONNECTIONS`] - [`CONNECTION_HEADROOM`]
/// clients, and the limit the simulator enforces per replica.
pub const MAX_CONNECTIONS: u32 = 300;

/// Connection slots kept beside the clients' own: PostgreSQL's
/// `superuser_reserved_connections` (3; the generator connects as the
/// superuser, so they count), the health probes, the CPU sampler and a
/// tool an operator opens during the run.
pub const CONNECTION_HEADROOM: u32 = 20;

/// `max_connections` for a run of `clients` sessions: every client can
/// hold a session on one replica at once (the last survivor of a cascade)
/// without the connection slots being what turns it away, so a closed
/// population of T=1,000 gets 1,020 (docs/performance.md); at least [`MAX_CONNECTIONS`].
pub fn max_connections_for(clients: u32) -> u32 {
    MAX_CONNECTIONS.max(clients.saturating_add(CONNECTION_HEADROOM))
}

/// Why a session could not connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectError {
    /// The server refused the connection: `connect refused`.
    Refused,
    /// No connection within the connect deadline: `connect timeout`.
    Timeout,
    /// The server is up but at `max_connections` (SQLSTATE 53300, "sorry,
    /// too many clients already"): `too many clients`.
    Full,
}

impl ConnectError {
    /// Why a connect failed, from the server's SQLSTATE if it answered: a
    /// live server at `max_connections` answers 53300 ("too many clients",
    /// or the slots reserved for superusers); anything else (no listener,
    /// a reset, no answer code) is a refusal.
    pub fn of_sqlstate(code: Option<&str>) -> ConnectError {
        if code == Some("53300") {
            ConnectError::Full
        } else {
            ConnectError::Refused
        }
    }

    /// The name written in files.
    pub fn name(self) -> &'static str {
        match self {
            ConnectError::Refused => "connect refused",
            ConnectError::Timeout => "connect timeout",
            ConnectError::Full => "too many clients",
        }
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a session was aborted: it could not connect, or a query failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortReason {
    /// The connection was not made.
    Connect(ConnectError),
    /// A query failed (the session breaks on its first failed query).
    Query(QueryError),
}

impl AbortReason {
    /// Whether the session ended on overload: the client gave up waiting (a
    /// connect or query time-out) or a live server was full, as opposed to
    /// a dead server refusing or breaking the session. The run validity
    /// checks count these (`core::validity`).
    pub fn is_overload(self) -> bool {
        matches!(
            self,
            AbortReason::Connect(ConnectError::Timeout | ConnectError::Full) | AbortReason::Query(QueryError::Timeout)
        )
    }
}

impl fmt::Display for AbortReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AbortReason::Connect(e) => e.fmt(f),
            AbortReason::Query(e) => e.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_connections_fit_every_client_on_one_replica() {
        assert_eq!(max_connections_for(0), MAX_CONNECTIONS);
        assert_eq!(max_connections_for(280), MAX_CONNECTIONS);
        assert_eq!(max_connections_for(281), 301);
        assert_eq!(max_connections_for(1000), 1000 + CONNECTION_HEADROOM);
        assert_eq!(max_connections_for(u32::MAX), u32::MAX);
    }

    #[test]
    fn actions_display_pair_and_round_trip() {
        assert_eq!(Action::Slow(0.25).to_string(), "Slow 0.25");
        assert_eq!(Action::Partition.to_string(), "Partition");
        assert_eq!(Action::Restore.to_string(), "Restore");
        assert_eq!(Action::Slow(0.1).ended_by(), Some(Action::Restore));
        assert_eq!(Action::Partition.ended_by(), Some(Action::Heal));
        assert_eq!(Action::Heal.ended_by(), None);
        assert!(Action::Slow(0.1).keeps_survivor() && !Action::Partition.keeps_survivor());
        for a in [Action::Down, Action::Slow(0.25), Action::Heal] {
            let json = serde_json::to_string(&a).unwrap();
            assert_eq!(serde_json::from_str::<Action>(&json).unwrap(), a, "{json}");
        }
        assert_eq!(serde_json::to_string(&Action::Slow(0.25)).unwrap(), r#"{"slow":0.25}"#);
        assert_eq!(serde_json::to_string(&Action::Down).unwrap(), r#""down""#);
    }

    #[test]
    fn kinds_errors_and_aborts_keep_the_names_files_use() {
        let kinds = [
            (EventKind::Fault, "fault"),
            (EventKind::Detect, "detect"),
            (EventKind::Health, "health"),
            (EventKind::Recovery, "recovery"),
            (EventKind::Role, "role"),
            (EventKind::Mode, "mode"),
            (EventKind::Note, "note"),
            (EventKind::Tier, "tier"),
        ];
        for (k, name) in kinds {
            assert_eq!(k.to_string(), name);
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<EventKind>(&format!("\"{name}\"")).unwrap(), k);
        }
        let reasons = [
            (AbortReason::Query(QueryError::ConnectionLost), "connection lost"),
            (AbortReason::Query(QueryError::Timeout), "timeout"),
            (AbortReason::Query(QueryError::Failed), "query error"),
            (AbortReason::Connect(ConnectError::Refused), "connect refused"),
            (AbortReason::Connect(ConnectError::Timeout), "connect timeout"),
            (AbortReason::Connect(ConnectError::Full), "too many clients"),
        ];
        assert!(AbortReason::Connect(ConnectError::Full).is_overload());
        assert_eq!(ConnectError::of_sqlstate(Some("53300")), ConnectError::Full);
        assert_eq!(ConnectError::of_sqlstate(Some("28P01")), ConnectError::Refused);
        assert_eq!(ConnectError::of_sqlstate(None), ConnectError::Refused);
        assert!(!AbortReason::Connect(ConnectError::Refused).is_overload());
        for (r, name) in reasons {
            assert_eq!(r.to_string(), name);
        }
    }
}
