//! Room on a replica for one choice ([`super::Router::admit_within`]): the
//! admission gate's per-replica session limits, read by every strategy's
//! choice so that a replica at its limit is passed over and the next one
//! eligible is tried, instead of queueing a session the cluster has room
//! for (issue 64: a Premium session waited for r3 while r5 had room).

use super::super::model::{Class, Role};

/// How many sessions a replica of each role may hold for one choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    /// Per role `(P, M, F)`: the most sessions of the `counted` classes a
    /// replica of that role may hold (`None`: no limit).
    pub max: [Option<u32>; 3],
    /// The classes `[P, F]` whose sessions count against `max`.
    pub counted: [bool; 2],
    /// Least-loaded choices weigh only the `counted` classes' sessions (a
    /// degraded mode holds the others to a statement slot, so they are
    /// no load for the top class); `false`: every session, as without a
    /// gate.
    pub weigh_counted: bool,
}

impl Room {
    /// Whether a replica of `role` holding `active` sessions `[P, F]` may
    /// take one more.
    pub fn fits(&self, role: Role, active: [u32; 2]) -> bool {
        self.max[role.idx()].is_none_or(|m| self.held(active) < m)
    }

    /// The sessions of the `counted` classes among `active`.
    pub fn held(&self, active: [u32; 2]) -> u32 {
        Class::ALL.iter().filter(|c| self.counted[c.idx()]).map(|c| active[c.idx()]).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_the_counted_classes_against_the_role_limit() {
        let room = Room { max: [Some(2), Some(2), None], counted: [true, false], weigh_counted: false };
        assert!(room.fits(Role::P, [1, 50]), "Freemium sessions do not count");
        assert!(!room.fits(Role::M, [2, 0]));
        assert!(room.fits(Role::F, [500, 500]), "no limit on F");
        assert_eq!(room.held([3, 9]), 3);
    }
}
