//! The router's indexes, so a decision costs little at fleet scale
//! instead of a scan of every replica: per class and role, the open
//! replicas ordered by (weighted load, id) ([`Levels`]), which answers "the least-loaded
//! replica of this role" with the scan's choice (ties to the lowest id);
//! Premium replicas that may take a Freemium guest ordered by (CPU with one
//! session more, id); the borrowed replicas; and counts of healthy replicas
//! per role (all, unborrowed, at or above the return level tau). The router
//! calls [`Index::update`] after every change to a replica, and the index
//! moves that replica's entries.

use crate::core::model::{Class, Role};
use std::collections::{btree_map, BTreeMap, BTreeSet};

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
    by_load: [[Levels; 3]; 2],
    guests: BTreeSet<(i64, u32)>,
    borrowed: BTreeSet<u32>,
    /// `[role]`: healthy replicas, unborrowed ones, ones at or above tau.
    healthy: [[u32; 3]; 3],
}

/// Replicas by (weighted load, id): each load level present and the set of
/// its replicas as a bitset. Weighted loads take few values (whole numbers
/// while shares are whole), so the levels are a small map that stays in the
/// cache, and moving a replica between levels flips two bits, where an
/// ordered set of (load, id) walked a B-tree of thousands of entries twice
/// ([performance](docs/performance.md#fleets)). A level that empties is
/// dropped, so shares that make many loads cost no memory.
#[derive(Clone, Debug, Default)]
struct Levels(BTreeMap<i64, Level>);

/// One load level: how many replicas it holds, and which.
#[derive(Clone, Debug)]
struct Level {
    count: u32,
    bits: Vec<u64>,
}

impl Levels {
    fn insert(&mut self, key: i64, id: u32, words: usize) {
        let level = self.0.entry(key).or_insert_with(|| Level { count: 0, bits: vec![0; words] });
        level.bits[id as usize / 64] |= 1 << (id % 64);
        level.count += 1;
    }

    fn remove(&mut self, key: i64, id: u32) {
        if let btree_map::Entry::Occupied(mut e) = self.0.entry(key) {
            let level = e.get_mut();
            level.bits[id as usize / 64] &= !(1 << (id % 64));
            level.count -= 1;
            if level.count == 0 {
                e.remove();
            }
        }
    }

    /// Every (key, id), in order.
    fn iter(&self) -> impl Iterator<Item = (i64, u32)> + '_ {
        self.0.iter().flat_map(|(&key, level)| {
            level.bits.iter().enumerate().flat_map(move |(w, &bits)| {
                let mut rest = bits;
                std::iter::from_fn(move || {
                    (rest != 0).then(|| {
                        let bit = rest.trailing_zeros();
                        rest &= rest - 1;
                        (key, (w * 64) as u32 + bit)
                    })
                })
            })
        })
    }
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
        let (id, words) = (i as u32, self.entries.len().div_ceil(64));
        for c in 0..2 {
            if was.load[c] != now.load[c] {
                if let Some((role, key)) = was.load[c] {
                    self.by_load[c][role.idx()].remove(key, id);
                }
                if let Some((role, key)) = now.load[c] {
                    self.by_load[c][role.idx()].insert(key, id, words);
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
            .filter_map(|&role| self.by_load[class.idx()][role.idx()].iter().find(|&(_, i)| eligible(i as usize)))
            .min()
            .map(|(_, i)| i as usize)
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
    use super::{ordered, Entry, Index, Levels};
    use crate::core::model::{Class, Role};

    #[test]
    fn ordered_keys_sort_as_total_cmp() {
        let xs = [-1.5, -0.0, 0.0, 1e-300, 0.5, 1.0, 2.0, f64::INFINITY];
        for w in xs.windows(2) {
            assert!(ordered(w[0]) < ordered(w[1]), "{w:?}");
        }
    }

    #[test]
    fn levels_list_by_load_then_id_across_words_and_drop_what_empties() {
        let mut l = Levels::default();
        for (key, id) in [(5, 130), (2, 70), (5, 3), (2, 1), (-1, 129)] {
            l.insert(key, id, 3);
        }
        assert_eq!(l.iter().collect::<Vec<_>>(), [(-1, 129), (2, 1), (2, 70), (5, 3), (5, 130)]);
        l.remove(-1, 129);
        l.remove(2, 70);
        assert_eq!(l.iter().collect::<Vec<_>>(), [(2, 1), (5, 3), (5, 130)]);
        assert_eq!(l.0.len(), 2, "an emptied level is dropped");
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
