//! PLB's role arithmetic (design.md §2): the target role vector for a
//! survivor count, canonicalisation of transient borrowed states, and
//! repair-to-target. Pure functions over plain slices so they can be tested
//! exhaustively and reused by the router, the `roles` subcommand and reports.

use super::model::{ReplicaId, Role};

/// Role sizes `(K_P, K_M, K_F)`.
pub type RoleVector = [usize; 3];

/// Nearest integer of `num / den` with halves rounded away from zero
/// (all operands are non-negative here).
fn round_half_away(num: usize, den: usize) -> usize {
    (2 * num + den) / (2 * den)
}

/// The target role vector `K^I(K+)` for `survivors` healthy replicas out of
/// `k`, given the reference split `(K_P0, K_M0, K_F0)` whose sum is `k`.
pub fn target(survivors: usize, reference: RoleVector, k: usize) -> RoleVector {
    match survivors {
        0 => [0, 0, 0],
        1 => [0, 1, 0],
        2 => [1, 0, 1],
        3 => [2, 0, 1],
        n => {
            let [p0, _, f0] = reference;
            let floor_f = usize::from(f0 > 0);
            let mut kp = round_half_away(n * p0, k).max(1);
            let mut kf = if f0 == 0 { 0 } else { round_half_away(n * f0, k).max(1) };
            while kp + kf > n {
                if kf > floor_f {
                    kf -= 1;
                } else if kp > 1 {
                    kp -= 1;
                } else {
                    break;
                }
            }
            [kp, n - kp - kf, kf]
        }
    }
}

/// What canonicalisation needs to know of one healthy replica.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slot {
    /// Current role (after any borrowing).
    pub role: Role,
    /// Home role while the replica is borrowed, `None` otherwise.
    pub home: Option<Role>,
    /// Active sessions `[P, F]`.
    pub active: [u32; 2],
}

/// The canonical role of a healthy replica: Mixed when it carries both
/// classes, the class's role when it carries one, else its current role (or
/// its home role if it was borrowed).
pub fn canonical(slot: &Slot) -> Role {
    match (slot.active[0] > 0, slot.active[1] > 0) {
        (true, true) => Role::M,
        (true, false) => Role::P,
        (false, true) => Role::F,
        (false, false) => slot.home.unwrap_or(slot.role),
    }
}

/// One role move made by repair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    /// The replica that changes role.
    pub replica: ReplicaId,
    /// Its role before the move.
    pub from: Role,
    /// Its role after the move.
    pub to: Role,
}

/// The lowest size a role may be brought down to by a P/F boundary move.
fn floor_of(role: Role, reference: RoleVector) -> usize {
    match role {
        Role::P => 1,
        Role::F => usize::from(reference[2] > 0),
        Role::M => 0,
    }
}

/// Repairs `roles` (indexed by replica, `None` for unhealthy replicas)
/// toward `goal`: while a role is below its target, move the least-loaded
/// replica of an eligible donor role (Mixed first) into it. `load` gives
/// each replica's active sessions. Returns the moves in order.
pub fn repair(roles: &mut [Option<Role>], load: &[u32], goal: RoleVector, reference: RoleVector) -> Vec<Move> {
    let mut moves = Vec::new();
    loop {
        let counts = count(roles);
        let Some(needy) = Role::ALL.into_iter().find(|r| counts[r.idx()] < goal[r.idx()]) else {
            break;
        };
        // Donors: roles above target, Mixed first; a P/F boundary move only
        // while the donor stays at or above its floor.
        let Some(donor) = [Role::M, Role::P, Role::F].into_iter().find(|&d| {
            let crosses = d != Role::M && needy != Role::M;
            d != needy && counts[d.idx()] > goal[d.idx()] && (!crosses || counts[d.idx()] > floor_of(d, reference))
        }) else {
            break;
        };
        let pick = (0..roles.len())
            .filter(|&r| roles[r] == Some(donor))
            .min_by_key(|&r| (load[r], r))
            .expect("a donor role above its target has a replica");
        roles[pick] = Some(needy);
        moves.push(Move { replica: ReplicaId(pick), from: donor, to: needy });
    }
    moves
}

/// Role sizes over the healthy replicas.
pub fn count(roles: &[Option<Role>]) -> RoleVector {
    let mut c = [0; 3];
    for r in roles.iter().flatten() {
        c[r.idx()] += 1;
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_matches_design_examples() {
        let reference = [2, 1, 2];
        let rows: Vec<_> = (0..=5).rev().map(|n| target(n, reference, 5)).collect();
        assert_eq!(rows, vec![[2, 1, 2], [2, 0, 2], [2, 0, 1], [1, 0, 1], [0, 1, 0], [0, 0, 0]]);
    }

    #[test]
    fn target_lowers_freemium_before_premium() {
        // K=6, reference (3,0,3): K+=4 -> round(2)=2, round(2)=2 -> (2,0,2).
        assert_eq!(target(4, [3, 0, 3], 6), [2, 0, 2]);
        // K=5 reference (4,0,1): K+=4 -> P round(3.2)=3, F max(1, round(0.8)=1)=1.
        assert_eq!(target(4, [4, 0, 1], 5), [3, 0, 1]);
        // Halves round away from zero: K=4 (1,2,1), K+=... only >=4 uses it.
        assert_eq!(target(6, [1, 2, 1], 4), [2, 2, 2]);
        // Sum too large: K=7 reference (3,0,4), K+=5: P round(15/7=2.14)=2, F round(20/7=2.86)=3 -> (2,0,3).
        assert_eq!(target(5, [3, 0, 4], 7), [2, 0, 3]);
        // Freemium role absent from the reference stays absent.
        assert_eq!(target(4, [3, 2, 0], 5), [2, 2, 0]);
    }

    #[test]
    fn repair_moves_least_loaded_mixed_first() {
        // K+=4 after r1 died: P(r2), M(r3), F(r4), F(r5); goal (2,0,2).
        let mut roles = vec![None, Some(Role::P), Some(Role::M), Some(Role::F), Some(Role::F)];
        let moves = repair(&mut roles, &[0, 5, 3, 1, 2], [2, 0, 2], [2, 1, 2]);
        assert_eq!(moves, vec![Move { replica: ReplicaId(2), from: Role::M, to: Role::P }]);
    }

    #[test]
    fn repair_crosses_boundary_from_least_loaded_donor() {
        let mut roles = vec![None, Some(Role::P), Some(Role::F), Some(Role::F), Some(Role::F)];
        let moves = repair(&mut roles, &[0, 5, 9, 1, 4], [2, 0, 2], [2, 1, 2]);
        assert_eq!(moves, vec![Move { replica: ReplicaId(3), from: Role::F, to: Role::P }]);
    }

    #[test]
    fn canonical_follows_sessions_then_home() {
        let s = |role, home, p, f| Slot { role, home, active: [p, f] };
        assert_eq!(canonical(&s(Role::P, None, 1, 1)), Role::M);
        assert_eq!(canonical(&s(Role::M, None, 2, 0)), Role::P);
        assert_eq!(canonical(&s(Role::P, None, 0, 3)), Role::F);
        assert_eq!(canonical(&s(Role::P, Some(Role::F), 0, 0)), Role::F);
        assert_eq!(canonical(&s(Role::M, None, 0, 0)), Role::M);
    }
}
