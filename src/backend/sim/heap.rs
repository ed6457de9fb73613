//! An indexed 4-ary min-heap for the simulator's calendar of timers (the
//! bucket due now, and the timers beyond its ring). Every entry lives in a
//! numbered slot (a client, a replica's completion, a replica's quota
//! event), so a pending entry is moved or removed in O(log n) when its
//! owner's plans change, instead of being left behind as a stale entry that
//! costs memory and a pop when its time comes
//! ([performance](docs/performance.md#the-simulators-cost)). Where each
//! slot's entry sits is kept in a dense array, one per slot.

/// Children per node: a 4-ary heap is half as deep as a binary one and its
/// children share cache lines. (The order of equal keys cannot differ:
/// every key is unique.)
const ARITY: usize = 4;

/// The position of a slot that holds no entry.
const NONE: u32 = u32::MAX;

/// A min-heap of `(key, slot)` with at most one entry per slot.
#[derive(Debug)]
pub struct IndexedHeap<K> {
    heap: Vec<(K, u32)>,
    /// Where each slot's entry is in `heap` ([`NONE`]: nowhere), up to the
    /// highest slot used.
    pos: Vec<u32>,
}

impl<K: Ord + Copy> Default for IndexedHeap<K> {
    fn default() -> Self {
        IndexedHeap { heap: Vec::new(), pos: Vec::new() }
    }
}

impl<K: Ord + Copy> IndexedHeap<K> {
    /// Slot `slot`'s position, or [`NONE`].
    fn get(&self, slot: usize) -> u32 {
        self.pos.get(slot).copied().unwrap_or(NONE)
    }

    /// Sets slot `slot`'s position ([`NONE`]: it has no entry).
    fn put(&mut self, slot: usize, pos: u32) {
        if slot >= self.pos.len() {
            self.pos.resize(slot + 1, NONE);
        }
        self.pos[slot] = pos;
    }

    /// Entries pending.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// The smallest entry, with its slot.
    pub fn peek(&self) -> Option<(K, usize)> {
        self.heap.first().map(|&(k, s)| (k, s as usize))
    }

    /// Removes and returns the smallest entry.
    #[cfg(test)]
    pub fn pop(&mut self) -> Option<(K, usize)> {
        let (_, slot) = *self.heap.first()?;
        self.remove(slot as usize).map(|k| (k, slot as usize))
    }

    /// Puts `slot`'s entry at `key`, replacing the one it had.
    pub fn set(&mut self, slot: usize, key: K) {
        match self.get(slot) {
            NONE => {
                self.heap.push((key, slot as u32));
                self.put(slot, (self.heap.len() - 1) as u32);
                self.up(self.heap.len() - 1);
            }
            i => {
                let i = i as usize;
                let old = std::mem::replace(&mut self.heap[i].0, key);
                if key < old {
                    self.up(i);
                } else {
                    self.down(i);
                }
            }
        }
    }

    /// Removes `slot`'s entry, if it has one, and returns its key.
    pub fn remove(&mut self, slot: usize) -> Option<K> {
        let i = Some(self.get(slot)).filter(|&i| i != NONE)? as usize;
        let last = self.heap.len() - 1;
        self.swap(i, last);
        let (key, _) = self.heap.pop().expect("an entry at i");
        self.put(slot, NONE);
        if i < last {
            self.down(i);
            self.up(i);
        }
        Some(key)
    }

    /// Removes every entry, smallest first.
    #[cfg(test)]
    pub fn drain_sorted(&mut self) -> Vec<(K, usize)> {
        std::iter::from_fn(|| self.pop()).collect()
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.heap.swap(i, j);
        self.put(self.heap[i].1 as usize, i as u32);
        self.put(self.heap[j].1 as usize, j as u32);
    }

    fn up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if self.heap[i].0 >= self.heap[parent].0 {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn down(&mut self, mut i: usize) {
        loop {
            let first = ARITY * i + 1;
            let last = (first + ARITY).min(self.heap.len());
            let mut least = i;
            for c in first..last {
                if self.heap[c].0 < self.heap[least].0 {
                    least = c;
                }
            }
            if least == i {
                return;
            }
            self.swap(i, least);
            i = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::IndexedHeap;
    use std::collections::BTreeMap;

    /// A small deterministic generator (xorshift), so the test needs no crate.
    fn next(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    #[test]
    fn matches_a_sorted_map_under_random_sets_removes_and_pops() {
        let mut heap = IndexedHeap::<u64>::default();
        // The model: slot -> key, and the entries ordered by (key, slot).
        let mut model: BTreeMap<usize, u64> = BTreeMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let slot = (next(&mut x) % 64) as usize;
            match next(&mut x) % 4 {
                0 | 1 => {
                    // Distinct keys per slot keep the order total.
                    let key = (next(&mut x) % 1000) * 64 + slot as u64;
                    heap.set(slot, key);
                    model.insert(slot, key);
                }
                2 => assert_eq!(heap.remove(slot), model.remove(&slot)),
                _ => {
                    let want = model.iter().map(|(&s, &k)| (k, s)).min();
                    assert_eq!(heap.pop(), want);
                    if let Some((_, s)) = want {
                        model.remove(&s);
                    }
                }
            }
            assert_eq!(heap.len(), model.len());
            assert_eq!(heap.peek(), model.iter().map(|(&s, &k)| (k, s)).min());
        }
        let rest = heap.drain_sorted();
        let mut want: Vec<(u64, usize)> = model.iter().map(|(&s, &k)| (k, s)).collect();
        want.sort();
        assert_eq!(rest, want);
        assert_eq!(heap.len(), 0);
    }

    #[test]
    fn a_removed_or_moved_entry_never_comes_back() {
        let mut heap = IndexedHeap::<u64>::default();
        heap.set(3, 30);
        heap.set(1, 10);
        heap.set(2, 20);
        heap.set(1, 40); // moved later
        assert_eq!(heap.remove(2), Some(20));
        assert_eq!(heap.remove(2), None);
        assert_eq!(heap.remove(99), None);
        assert_eq!(heap.drain_sorted(), vec![(30, 3), (40, 1)]);
    }
}
