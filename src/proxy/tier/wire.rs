//! What a tier's leader and followers say to each other over the leader's
//! feed port (docs/proxy.md, "A tier of proxies"): JSON lines, one message
//! a line, both ways on one TCP connection per follower. The leader sends
//! role vectors, each with its generation (one per leadership, for
//! fencing) and a sequence number within it; a follower reports its
//! sessions' starts and ends and asks when it finds no room. [`Fence`] is
//! the follower's rule for which role vectors it applies. Pure.

use crate::core::model::{Class, ReplicaId};
use crate::core::router::restore::Held;
use serde::{Deserialize, Serialize};

/// Leader to follower.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToFollower {
    /// The follower is taken: who leads, at which generation.
    Welcome { leader: u8, generation: u64 },
    /// The leader's router: roles, loans, health and the tier's open
    /// sessions per replica.
    Roles { generation: u64, seq: u64, held: Vec<Held> },
    /// The answer to an [`ToLeader::Ask`]: the replica the leader placed
    /// the session on (counted there), or none.
    Placed { ask: u64, replica: Option<ReplicaId> },
    /// The follower may not join (its identity or its routing flags): it
    /// stops with this line.
    Refused { why: String },
}

/// Follower to leader.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToLeader {
    /// The first line: who the follower is, its routing flags (as
    /// [`super::flags_key`] writes them), the highest generation it has
    /// applied and its open sessions `[P, F]` per replica.
    Hello { peer: u8, flags: String, generation: u64, open: Vec<[u32; 2]> },
    /// A session the follower routed started on `replica`.
    Start { replica: ReplicaId, class: Class },
    /// One of its sessions ended.
    End { replica: ReplicaId, class: Class },
    /// A session found no room within the roles: the leader chooses (and
    /// may borrow).
    Ask { ask: u64, class: Class },
}

/// One line (no newline) for any message.
pub fn line<T: Serialize>(m: &T) -> String {
    serde_json::to_string(m).expect("a tier message serialises")
}

/// Reads a line.
pub fn parse<'a, T: Deserialize<'a>>(line: &'a str) -> Result<T, serde_json::Error> {
    serde_json::from_str(line)
}

/// What a follower does with a role vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Newer than any applied: apply it.
    Apply,
    /// Of the current generation but not newer: ignore it.
    Old,
    /// Of a generation below the one applied: a deposed leader's, refused.
    Fenced,
}

/// The newest role vector a follower applied: generation and sequence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fence {
    seen: (u64, u64),
}

impl Fence {
    /// Whether a vector `(generation, seq)` is applied; an applied one
    /// becomes the newest.
    pub fn check(&mut self, generation: u64, seq: u64) -> Verdict {
        if generation < self.seen.0 {
            Verdict::Fenced
        } else if (generation, seq) <= self.seen {
            Verdict::Old
        } else {
            self.seen = (generation, seq);
            Verdict::Apply
        }
    }

    /// Whether a leader of `generation` may be followed (not below what
    /// was applied).
    pub fn admits(&self, generation: u64) -> bool {
        generation >= self.seen.0
    }

    /// The highest generation applied (0: none).
    pub fn generation(&self) -> u64 {
        self.seen.0
    }

    /// The generation this member leads at if it wins the election: one
    /// above the last it followed, so every follower takes its vectors and
    /// refuses its predecessor's.
    pub fn next(&self) -> u64 {
        self.seen.0 + 1
    }

    /// A leader's own vectors count as applied (it steps down with them).
    pub fn lead(&mut self, generation: u64, seq: u64) {
        self.seen = self.seen.max((generation, seq));
    }
}

/// The generation a leader at `ours` goes on at once a follower says it
/// applied `theirs`: above it (a member that won the lock before it had
/// applied any vector started low), else its own.
pub fn above(ours: u64, theirs: u64) -> u64 {
    if theirs >= ours {
        theirs + 1
    } else {
        ours
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::Role;

    #[test]
    fn every_message_reads_back_as_written() {
        let held = Held { role: Role::P, home: Some(Role::F), healthy: true, active: [2, 3], guests: 1 };
        let down: Vec<ToFollower> = vec![
            ToFollower::Welcome { leader: 3, generation: 7 },
            ToFollower::Roles { generation: 7, seq: 12, held: vec![held; 5] },
            ToFollower::Placed { ask: 4, replica: Some(ReplicaId(2)) },
            ToFollower::Placed { ask: 5, replica: None },
            ToFollower::Refused { why: "peer 2 is already in tier t".into() },
        ];
        for m in down {
            assert_eq!(parse::<ToFollower>(&line(&m)).unwrap(), m);
        }
        let up = vec![
            ToLeader::Hello { peer: 2, flags: "x".into(), generation: 6, open: vec![[1, 0], [0, 4]] },
            ToLeader::Start { replica: ReplicaId(0), class: Class::P },
            ToLeader::End { replica: ReplicaId(4), class: Class::F },
            ToLeader::Ask { ask: 9, class: Class::F },
        ];
        for m in up {
            let l = line(&m);
            assert!(!l.contains('\n'));
            assert_eq!(parse::<ToLeader>(&l).unwrap(), m);
        }
        assert!(parse::<ToLeader>("{\"start\":{}}").is_err());
    }

    /// A follower applies only newer vectors, and never one of a lower
    /// generation than it has applied: a deposed leader that still sends
    /// is fenced off; the next leader starts one generation higher.
    #[test]
    fn generations_fence_off_a_deposed_leader() {
        let mut f = Fence::default();
        assert_eq!(f.next(), 1);
        assert_eq!(f.check(1, 1), Verdict::Apply);
        assert_eq!(f.check(1, 1), Verdict::Old);
        assert_eq!(f.check(1, 3), Verdict::Apply);
        assert_eq!(f.check(1, 2), Verdict::Old, "out of order within a generation");
        assert_eq!(f.next(), 2);
        assert_eq!(f.check(2, 1), Verdict::Apply, "a new leader's first vector beats the old one's last");
        assert_eq!(f.check(1, 99), Verdict::Fenced);
        assert!(!f.admits(1) && f.admits(2) && f.admits(3));
        assert_eq!(f.generation(), 2);
        f.lead(3, 1);
        assert_eq!((f.generation(), f.next()), (3, 4));
        assert_eq!(above(1, 1), 2, "a follower that applied the leader's own generation from its predecessor");
        assert_eq!(above(1, 4), 5);
        assert_eq!(above(5, 4), 5);
    }
}
