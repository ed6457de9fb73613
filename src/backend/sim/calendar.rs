//! The agenda's withdrawable timers (every client's one timer, every
//! replica's completion and quota event) kept in a calendar queue: time is
//! cut into buckets of [`WIDTH_S`], a ring of [`BUCKETS`] of them covers
//! the next few minutes, and only the bucket whose time has come is held
//! in order (a small indexed heap). At fleet scale a million clients'
//! timers in one heap cost about ten cache misses per pop and per move
//! (half the simulator's time at K=5,000, T=1M,
//! [performance](docs/performance.md#fleets)); here a timer is planned or
//! withdrawn in O(1) (a push or a swap-remove in its bucket) and ordered
//! only among the few hundred that fall due together. Timers beyond the
//! ring (a client's long pause between sessions) wait in a heap of their
//! own. The order is exactly the one heap's: by key, and every key is
//! unique.

use super::heap::{IndexedHeap, Positions};

/// `(time as bits, planning order)`: the order of the agenda.
pub type Key = (u64, u64);

/// A bucket's span, seconds: a few hundred timers fall due in one at a
/// million clients, a handful at thousands.
const WIDTH_S: f64 = 0.002;

/// Buckets in the ring: with [`WIDTH_S`] it covers 262 s, past every
/// query deadline and most pauses between sessions.
const BUCKETS: u64 = 1 << 17;

/// [`Slot::at`] of a slot with no timer.
const NONE: u32 = u32::MAX;
/// [`Slot::at`] of a timer in the bucket due now (`i`: its heap position).
const NOW: u32 = u32::MAX - 1;
/// [`Slot::at`] of a timer beyond the ring (`i`: its heap position).
const FAR: u32 = u32::MAX - 2;

/// Everything about one slot's timer, together: a timer's key, where it
/// is and what it does cost one cache miss, not three.
#[derive(Clone, Copy, Debug)]
struct Slot<T> {
    key: Key,
    /// A ring bucket, [`NOW`], [`FAR`] or [`NONE`].
    at: u32,
    /// The index in that bucket or heap.
    i: u32,
    what: T,
}

/// The slots, as the heaps' position table.
struct Table<T>(Vec<Slot<T>>);

impl<T> Positions for Table<T> {
    fn pos_of(&self, slot: usize) -> u32 {
        self.0[slot].i
    }

    fn set_pos(&mut self, slot: usize, pos: u32) {
        self.0[slot].i = pos;
    }
}

/// Timers by key, one per slot, each carrying a `T`, in a calendar queue.
pub struct Calendar<T> {
    slots: Table<T>,
    /// The timers due in bucket `cur` or before, in order.
    now: IndexedHeap<Key>,
    /// The slots whose timers fall in the next buckets, unordered, by
    /// `bucket % BUCKETS`.
    ring: Vec<Vec<u32>>,
    /// Timers in `ring`.
    in_ring: usize,
    /// The timers beyond the ring, in order.
    far: IndexedHeap<Key>,
    /// The bucket due now: every bucket before it has been taken into `now`.
    cur: u64,
}

/// The bucket a key falls in (monotone in time: time order is kept).
fn bucket(key: Key) -> u64 {
    (f64::from_bits(key.0) / WIDTH_S) as u64
}

impl<T: Copy> Calendar<T> {
    /// An empty calendar for `slots` slots (`blank` fills the unused ones).
    pub fn new(slots: usize, blank: T) -> Calendar<T> {
        Calendar {
            slots: Table(vec![Slot { key: (0, 0), at: NONE, i: 0, what: blank }; slots]),
            now: IndexedHeap::default(),
            ring: vec![Vec::new(); BUCKETS as usize],
            in_ring: 0,
            far: IndexedHeap::default(),
            cur: 0,
        }
    }

    /// Timers pending.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.now.len() + self.in_ring + self.far.len()
    }

    /// Puts `slot`'s timer at `key`, doing `what`, in place of the one it had.
    pub fn set(&mut self, slot: usize, key: Key, what: T) {
        self.remove(slot);
        let b = bucket(key);
        let at = if b <= self.cur {
            NOW
        } else if b < self.cur + BUCKETS {
            (b % BUCKETS) as u32
        } else {
            FAR
        };
        self.slots.0[slot] = Slot { key, at, i: 0, what };
        match at {
            NOW => self.now.push(&mut self.slots, slot, key),
            FAR => self.far.push(&mut self.slots, slot, key),
            b => {
                let ring = &mut self.ring[b as usize];
                ring.push(slot as u32);
                self.slots.0[slot].i = (ring.len() - 1) as u32;
                self.in_ring += 1;
            }
        }
    }

    /// Removes `slot`'s timer, if it has one.
    pub fn remove(&mut self, slot: usize) {
        let Slot { at, i, .. } = self.slots.0[slot];
        match at {
            NONE => return,
            NOW => {
                self.now.remove(&mut self.slots, slot);
            }
            FAR => {
                self.far.remove(&mut self.slots, slot);
            }
            b => {
                let ring = &mut self.ring[b as usize];
                ring.swap_remove(i as usize);
                if let Some(&moved) = ring.get(i as usize) {
                    self.slots.0[moved as usize].i = i;
                }
                if ring.capacity() > 64 && ring.len() < ring.capacity() / 4 {
                    // Withdrawn deadlines would otherwise leave every
                    // bucket of the next half minute at its peak size.
                    ring.shrink_to(ring.capacity() / 2);
                }
                self.in_ring -= 1;
            }
        }
        self.slots.0[slot].at = NONE;
    }

    /// The first timer's key.
    pub fn peek(&mut self) -> Option<Key> {
        self.first().map(|(key, _)| key)
    }

    /// Removes the first timer; returns its key and what it does.
    pub fn pop(&mut self) -> Option<(Key, T)> {
        let (key, slot) = self.first()?;
        self.remove(slot);
        Some((key, self.slots.0[slot].what))
    }

    /// The first timer and its slot (the buckets whose time has come are
    /// taken into order on the way).
    fn first(&mut self) -> Option<(Key, usize)> {
        while self.now.len() == 0 {
            self.cur = match self.in_ring {
                0 => bucket(self.far.peek()?.0).max(self.cur + 1),
                _ => self.cur + 1,
            };
            self.take_due();
        }
        self.now.peek()
    }

    /// Moves bucket `cur`'s timers, and those beyond the ring now due, into
    /// `now`.
    fn take_due(&mut self) {
        let b = (self.cur % BUCKETS) as usize;
        let due = std::mem::take(&mut self.ring[b]);
        self.in_ring -= due.len();
        for slot in due {
            let s = &mut self.slots.0[slot as usize];
            s.at = NOW;
            let key = s.key;
            self.now.push(&mut self.slots, slot as usize, key);
        }
        while let Some((key, slot)) = self.far.peek().filter(|&(k, _)| bucket(k) <= self.cur) {
            self.far.remove(&mut self.slots, slot);
            self.slots.0[slot].at = NOW;
            self.now.push(&mut self.slots, slot, key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Calendar, Key, BUCKETS, WIDTH_S};
    use std::collections::BTreeMap;

    fn next(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// Times from just past the last pop to well beyond the ring, so that
    /// every path (due now, in the ring, far, a far timer moved to the
    /// ring's range) is taken; the order must be a sorted map's.
    #[test]
    fn pops_in_key_order_under_random_sets_removes_and_pops() {
        let mut cal = Calendar::new(200, ());
        let mut model: BTreeMap<usize, Key> = BTreeMap::new();
        let (mut x, mut seq, mut clock) = (0x2545_f491_4f6c_dd1d_u64, 0u64, 0.0f64);
        let horizon = WIDTH_S * BUCKETS as f64;
        for _ in 0..200_000 {
            let slot = (next(&mut x) % 200) as usize;
            match next(&mut x) % 8 {
                0..=3 => {
                    let span = [WIDTH_S / 3.0, 0.05, horizon * 1.5][(next(&mut x) % 3) as usize];
                    let t = clock + (next(&mut x) % 1000) as f64 / 1000.0 * span;
                    seq += 1;
                    cal.set(slot, (t.to_bits(), seq), ());
                    model.insert(slot, (t.to_bits(), seq));
                }
                4 => {
                    cal.remove(slot);
                    model.remove(&slot);
                }
                _ => {
                    let want = model.iter().map(|(&s, &k)| (k, s)).min();
                    assert_eq!(cal.pop().map(|(k, ())| k), want.map(|(k, _)| k));
                    if let Some((k, s)) = want {
                        model.remove(&s);
                        clock = f64::from_bits(k.0);
                    }
                }
            }
            assert_eq!(cal.len(), model.len());
        }
        let mut want: Vec<Key> = model.values().copied().collect();
        want.sort();
        let rest: Vec<Key> = std::iter::from_fn(|| cal.pop().map(|(k, ())| k)).collect();
        assert_eq!(rest, want);
    }

    #[test]
    fn a_timer_planned_in_a_past_bucket_still_comes_first() {
        let mut cal = Calendar::new(3, 'x');
        cal.set(0, (10.0f64.to_bits(), 1), 'a');
        assert_eq!(cal.pop().map(|(_, w)| w), Some('a'));
        cal.set(1, (12.0f64.to_bits(), 2), 'b');
        cal.set(2, (9.0f64.to_bits(), 3), 'c'); // before the bucket due now
        assert_eq!(cal.pop().map(|(_, w)| w), Some('c'));
        assert_eq!(cal.pop().map(|(_, w)| w), Some('b'));
        assert_eq!(cal.pop(), None);
    }
}
