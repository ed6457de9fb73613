//! The router's indexes, so a decision costs O(log K) at fleet scale
//! instead of a scan of every replica: per class and role, the open
//! replicas ordered by (weighted load, id), which answers "the least-loaded
//! replica of this role" with the scan's choice (ties to the lowest id);
//! Premium replicas that may take a Freemium guest ordered by (CPU with one
//! session more, id); the borrowed replicas; and counts of healthy replicas
//! per role (all, unborrowed, at or above the return level tau). The router
//! calls [`Index::update`] after every change to a replica, and the index
//! moves that replica's entries.

use crate::core::model::{Class, Role};
use std::collections::BTreeSet;

/// A total order on `f64` as an integer (`f64::total_cmp`'s order), so a
/// key sorts exactly as the scan compares it.
pub fn ordered(x: f64) -> i64 {
    let bits = x.to_bits() as i64;
    bits ^ (((bits >> 63) as u64) >> 1) as i64
}

/// What the index keeps of one replica: where its entries are.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Entry {
    /// Per class, its role and key in that class's ordered set, if open.
    pub load: [Option<(Role, i64)>; 2],
    /// Its key among the replicas that may take a guest, if it may.
    pub guest: Option<i64>,
    /// Borrowed (its home is another role).
    pub borrowed: bool,
    /// Healthy: its role, whether it is unborrowed, and whether its load is
    /// at or above tau.
    pub healthy: Option<(Role, bool, bool)>,
}

/// The indexes over every replica.
#[derive(Clone, Debug, Default)]
pub struct Index {
    entries: Vec<Entry>,
    /// `[class][role]`: open replicas by (weighted load, id).
    by_load: [[BTreeSet<(i64, u32)>; 3]; 2],
    guests: BTreeSet<(i64, u32)>,
    borrowed: BTreeSet<u32>,
    /// `[role]`: healthy replicas, unborrowed ones, ones at or above tau.
    healthy: [[u32; 3]; 3],
}

impl Index {
    /// An index of `k` replicas with no entries yet.
    pub fn new(k: usize) -> Index {
        Index { entries: vec![Entry::default(); k], ..Index::default() }
    }

    /// Replaces replica `i`'s entries by `now`'s.
    pub fn update(&mut self, i: usize, now: Entry) {
        let was = std::mem::replace(&mut self.entries[i], now);
        if was == now {
            return;
        }
        let id = i as u32;
        for c in 0..2 {
            if was.load[c] != now.load[c] {
                if let Some((role, key)) = was.load[c] {
                    self.by_load[c][role.idx()].remove(&(key, id));
                }
                if let Some((role, key)) = now.load[c] {
                    self.by_load[c][role.idx()].insert((key, id));
                }
            }
        }
        if was.guest != now.guest {
            if let Some(key) = was.guest {
                self.guests.remove(&(key, id));
            }
            if let Some(key) = now.guest {
                self.guests.insert((key, id));
            }
        }
        if was.borrowed != now.borrowed {
            match now.borrowed {
                true => self.borrowed.insert(id),
                false => self.borrowed.remove(&id),
            };
        }
        if was.healthy != now.healthy {
            self.tally(was.healthy, -1);
            self.tally(now.healthy, 1);
        }
    }

    fn tally(&mut self, healthy: Option<(Role, bool, bool)>, by: i32) {
        let Some((role, unborrowed, hot)) = healthy else { return };
        let counts = &mut self.healthy[role.idx()];
        for (n, counted) in counts.iter_mut().zip([true, unborrowed, hot]) {
            if counted {
                *n = n.checked_add_signed(by).expect("counts stay in range");
            }
        }
    }

    /// Replica `i`'s entries.
    pub fn entry(&self, i: usize) -> Entry {
        self.entries[i]
    }

    /// The least-loaded open replica for `class` among `roles` that
    /// satisfies `eligible`, ties to the lowest id.
    pub fn least_loaded(&self, class: Class, roles: &[Role], eligible: impl Fn(usize) -> bool) -> Option<usize> {
        roles
            .iter()
            .filter_map(|&role| self.by_load[class.idx()][role.idx()].iter().find(|&&(_, i)| eligible(i as usize)))
            .min()
            .map(|&(_, i)| i as usize)
    }

    /// The replica that may take a guest with the lowest key, and its key.
    pub fn best_guest(&self) -> Option<(usize, i64)> {
        self.guests.first().map(|&(key, i)| (i as usize, key))
    }

    /// The borrowed replicas, lowest id first.
    pub fn borrowed(&self) -> Vec<usize> {
        self.borrowed.iter().map(|&i| i as usize).collect()
    }

    /// Healthy replicas of `role`.
    pub fn healthy(&self, role: Role) -> usize {
        self.healthy[role.idx()][0] as usize
    }

    /// Healthy unborrowed replicas of `role`.
    pub fn unborrowed(&self, role: Role) -> usize {
        self.healthy[role.idx()][1] as usize
    }

    /// Healthy replicas of `role` at or above tau.
    pub fn hot(&self, role: Role) -> usize {
        self.healthy[role.idx()][2] as usize
    }
}

#[cfg(test)]
mod tests {
    use super::{ordered, Entry, Index};
    use crate::core::model::{Class, Role};

    #[test]
    fn ordered_keys_sort_as_total_cmp() {
        let xs = [-1.5, -0.0, 0.0, 1e-300, 0.5, 1.0, 2.0, f64::INFINITY];
        for w in xs.windows(2) {
            assert!(ordered(w[0]) < ordered(w[1]), "{w:?}");
        }
    }

    fn open(role: Role, load: f64) -> Entry {
        Entry { load: [Some((role, ordered(load))); 2], healthy: Some((role, true, false)), ..Entry::default() }
    }

    #[test]
    fn least_loaded_breaks_ties_to_the_lowest_id_and_follows_updates() {
        let mut x = Index::new(4);
        x.update(3, open(Role::M, 1.0));
        x.update(1, open(Role::M, 1.0));
        x.update(2, open(Role::P, 1.0));
        x.update(0, open(Role::M, 2.0));
        assert_eq!(x.least_loaded(Class::P, &[Role::M], |_| true), Some(1));
        assert_eq!(x.least_loaded(Class::P, &Role::ALL, |_| true), Some(1));
        assert_eq!(x.least_loaded(Class::P, &[Role::M], |i| i != 1), Some(3));
        x.update(1, open(Role::M, 3.0));
        assert_eq!(x.least_loaded(Class::F, &[Role::M], |_| true), Some(3));
        x.update(3, Entry::default());
        assert_eq!(x.least_loaded(Class::F, &Role::ALL, |_| true), Some(2));
        assert_eq!((x.healthy(Role::M), x.healthy(Role::P), x.hot(Role::M)), (2, 1, 0));
    }
}
