//! The vocabulary shared by every part of plbbench (design.md §1): service
//! classes, replica roles, fault actions and the events that carry them.
//! Pure data, no behaviour beyond parsing and display.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Index of a replica, 0-based; displayed as `r1..rK`.
pub type ReplicaId = usize;

/// Formats a replica index the way users write it (`r1` for index 0).
pub fn replica_name(r: ReplicaId) -> String {
    format!("r{}", r + 1)
}

/// Parses `r1`..`rK` (or a bare 1-based number) into an index below `k`.
pub fn parse_replica(s: &str, k: usize) -> Result<ReplicaId, String> {
    let digits = s.trim().trim_start_matches(['r', 'R']);
    let n: usize = digits
        .parse()
        .map_err(|_| format!("`{s}` is not a replica name (expected r1..r{k})"))?;
    if n == 0 || n > k {
        return Err(format!("replica `{s}` does not exist (expected r1..r{k})"));
    }
    Ok(n - 1)
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

/// What a fault event does to a replica (design.md §1).
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
}

impl Action {
    /// Whether the replica counts among the survivors after this action.
    pub fn leaves_up(self) -> bool {
        matches!(self, Action::Rejoin | Action::Resume)
    }

    /// Prefix of the phase that starts with this action (`down1`, ...).
    pub fn phase_prefix(self) -> &'static str {
        match self {
            Action::Down => "down",
            Action::Rejoin => "rejoin",
            Action::Pause => "pause",
            Action::Resume => "resume",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Down => "Down",
            Action::Rejoin => "Rejoin",
            Action::Pause => "Pause",
            Action::Resume => "Resume",
        })
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
