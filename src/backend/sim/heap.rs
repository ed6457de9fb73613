//! An indexed 4-ary min-heap for the simulator's calendar of timers (the
//! bucket due now, and the timers beyond its ring). Every entry lives in a
//! numbered slot (a client, a replica's completion, a replica's quota
//! event), so a pending entry is moved or removed in O(log n) when its
//! owner's plans change, instead of being left behind as a stale entry that
//! costs memory and a pop when its time comes
//! ([performance](docs/performance.md#the-simulators-cost)). Where each
//! slot's entry sits is kept by the caller ([`Positions`]).

/// Children per node: a 4-ary heap is half as deep as a binary one and its
/// children share cache lines. (The order of equal keys cannot differ:
/// every key is unique.)
const ARITY: usize = 4;

/// Where each slot's entry sits in its heap. The heap does not own this
/// table: the calendar keeps a slot's position beside its key and event,
/// one cache line per timer instead of one per array.
pub trait Positions {
    /// Slot `slot`'s position (it has an entry).
    fn pos_of(&self, slot: usize) -> u32;
    /// Sets slot `slot`'s position.
    fn set_pos(&mut self, slot: usize, pos: u32);
}

/// Dense positions, one per slot (tests).
#[cfg(test)]
impl Positions for Vec<u32> {
    fn pos_of(&self, slot: usize) -> u32 {
        self[slot]
    }

    fn set_pos(&mut self, slot: usize, pos: u32) {
        if slot >= self.len() {
            self.resize(slot + 1, u32::MAX);
        }
        self[slot] = pos;
    }
}

/// A min-heap of `(key, slot)` with at most one entry per slot, its
/// positions in a table the caller passes in.
#[derive(Debug)]
pub struct IndexedHeap<K> {
    heap: Vec<(K, u32)>,
}

impl<K: Ord + Copy> Default for IndexedHeap<K> {
    fn default() -> Self {
        IndexedHeap { heap: Vec::new() }
    }
}

impl<K: Ord + Copy> IndexedHeap<K> {
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
    pub fn pop(&mut self, pos: &mut impl Positions) -> Option<(K, usize)> {
        let (_, slot) = *self.heap.first()?;
        Some((self.remove(pos, slot as usize), slot as usize))
    }

    /// Adds `slot`'s entry at `key` (it has none here).
    pub fn push(&mut self, pos: &mut impl Positions, slot: usize, key: K) {
        self.heap.push((key, slot as u32));
        pos.set_pos(slot, (self.heap.len() - 1) as u32);
        self.up(pos, self.heap.len() - 1);
    }

    /// Removes `slot`'s entry (it has one here) and returns its key.
    pub fn remove(&mut self, pos: &mut impl Positions, slot: usize) -> K {
        let i = pos.pos_of(slot) as usize;
        let last = self.heap.len() - 1;
        self.swap(pos, i, last);
        let (key, _) = self.heap.pop().expect("an entry at i");
        if i < last {
            self.down(pos, i);
            self.up(pos, i);
        }
        key
    }

    fn swap(&mut self, pos: &mut impl Positions, i: usize, j: usize) {
        self.heap.swap(i, j);
        pos.set_pos(self.heap[i].1 as usize, i as u32);
        pos.set_pos(self.heap[j].1 as usize, j as u32);
    }

    fn up(&mut self, pos: &mut impl Positions, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if self.heap[i].0 >= self.heap[parent].0 {
                break;
            }
            self.swap(pos, i, parent);
            i = parent;
        }
    }

    fn down(&mut self, pos: &mut impl Positions, mut i: usize) {
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
            self.swap(pos, i, least);
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
    fn matches_a_sorted_map_under_random_pushes_removes_and_pops() {
        let (mut heap, mut pos) = (IndexedHeap::<u64>::default(), Vec::new());
        // The model: slot -> key, and the entries ordered by (key, slot).
        let mut model: BTreeMap<usize, u64> = BTreeMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let slot = (next(&mut x) % 64) as usize;
            match (next(&mut x) % 3, model.contains_key(&slot)) {
                (0 | 1, false) => {
                    // Distinct keys per slot keep the order total.
                    let key = (next(&mut x) % 1000) * 64 + slot as u64;
                    heap.push(&mut pos, slot, key);
                    model.insert(slot, key);
                }
                (0 | 1, true) => assert_eq!(Some(heap.remove(&mut pos, slot)), model.remove(&slot)),
                _ => {
                    let want = model.iter().map(|(&s, &k)| (k, s)).min();
                    assert_eq!(heap.pop(&mut pos), want);
                    if let Some((_, s)) = want {
                        model.remove(&s);
                    }
                }
            }
            assert_eq!(heap.len(), model.len());
            assert_eq!(heap.peek(), model.iter().map(|(&s, &k)| (k, s)).min());
        }
        let rest: Vec<(u64, usize)> = std::iter::from_fn(|| heap.pop(&mut pos)).collect();
        let mut want: Vec<(u64, usize)> = model.iter().map(|(&s, &k)| (k, s)).collect();
        want.sort();
        assert_eq!(rest, want);
    }
}
