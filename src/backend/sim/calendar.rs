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

use super::heap::IndexedHeap;

/// `(time as bits, planning order)`: the order of the agenda.
pub type Key = (u64, u64);

/// A bucket's span, seconds: a few hundred timers fall due in one at a
/// million clients, a handful at thousands.
const WIDTH_S: f64 = 0.002;

/// Buckets in the ring: with [`WIDTH_S`] it covers 262 s, past every
/// query deadline and most pauses between sessions.
const BUCKETS: u64 = 1 << 17;

/// Where a slot's timer is: in ring bucket `b` at index `i`, in the
/// bucket due now, beyond the ring, or nowhere.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Loc {
    None,
    Now,
    Far,
    Ring { b: u32, i: u32 },
}

/// Timers by key, one per slot, in a calendar queue.
pub struct Calendar {
    /// The timers due in bucket `cur` or before, in order.
    now: IndexedHeap<Key>,
    /// The slots whose timers fall in the next buckets, unordered, by
    /// `bucket % BUCKETS` (their keys are in `key`).
    ring: Vec<Vec<u32>>,
    /// Timers in `ring`.
    in_ring: usize,
    /// The timers beyond the ring, in order.
    far: IndexedHeap<Key>,
    /// The bucket due now: every bucket before it has been taken into `now`.
    cur: u64,
    loc: Vec<Loc>,
    /// Each slot's key while it is in `ring`.
    key: Vec<Key>,
}

/// The bucket a key falls in (monotone in time: time order is kept).
fn bucket(key: Key) -> u64 {
    (f64::from_bits(key.0) / WIDTH_S) as u64
}

impl Calendar {
    /// An empty calendar for `slots` slots.
    pub fn new(slots: usize) -> Calendar {
        Calendar {
            now: IndexedHeap::default(),
            ring: vec![Vec::new(); BUCKETS as usize],
            in_ring: 0,
            far: IndexedHeap::default(),
            cur: 0,
            loc: vec![Loc::None; slots],
            key: vec![(0, 0); slots],
        }
    }

    /// Timers pending.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.now.len() + self.in_ring + self.far.len()
    }

    /// Puts `slot`'s timer at `key`, replacing the one it had.
    pub fn set(&mut self, slot: usize, key: Key) {
        self.remove(slot);
        let b = bucket(key);
        self.loc[slot] = if b <= self.cur {
            self.now.set(slot, key);
            Loc::Now
        } else if b < self.cur + BUCKETS {
            let ring = &mut self.ring[(b % BUCKETS) as usize];
            ring.push(slot as u32);
            self.key[slot] = key;
            self.in_ring += 1;
            Loc::Ring { b: (b % BUCKETS) as u32, i: (ring.len() - 1) as u32 }
        } else {
            self.far.set(slot, key);
            Loc::Far
        };
    }

    /// Removes `slot`'s timer, if it has one.
    pub fn remove(&mut self, slot: usize) {
        match std::mem::replace(&mut self.loc[slot], Loc::None) {
            Loc::None => {}
            Loc::Now => drop(self.now.remove(slot)),
            Loc::Far => drop(self.far.remove(slot)),
            Loc::Ring { b, i } => {
                let ring = &mut self.ring[b as usize];
                ring.swap_remove(i as usize);
                if let Some(&moved) = ring.get(i as usize) {
                    self.loc[moved as usize] = Loc::Ring { b, i };
                }
                if ring.capacity() > 64 && ring.len() < ring.capacity() / 4 {
                    // Withdrawn deadlines would otherwise leave every
                    // bucket of the next half minute at its peak size.
                    ring.shrink_to(ring.capacity() / 2);
                }
                self.in_ring -= 1;
            }
        }
    }

    /// The first timer, with its slot (the buckets whose time has come
    /// are taken into order on the way).
    pub fn peek(&mut self) -> Option<(Key, usize)> {
        while self.now.len() == 0 {
            self.cur = match self.in_ring {
                0 => bucket(self.far.peek()?.0).max(self.cur + 1),
                _ => self.cur + 1,
            };
            self.take_due();
        }
        self.now.peek()
    }

    /// Removes and returns the first timer.
    pub fn pop(&mut self) -> Option<(Key, usize)> {
        let (key, slot) = self.peek()?;
        self.remove(slot);
        Some((key, slot))
    }

    /// Moves bucket `cur`'s timers, and those beyond the ring now due, into
    /// `now`.
    fn take_due(&mut self) {
        let b = (self.cur % BUCKETS) as usize;
        let due = std::mem::take(&mut self.ring[b]);
        self.in_ring -= due.len();
        for slot in due {
            self.now.set(slot as usize, self.key[slot as usize]);
            self.loc[slot as usize] = Loc::Now;
        }
        while let Some((key, slot)) = self.far.peek().filter(|&(k, _)| bucket(k) <= self.cur) {
            self.far.remove(slot);
            self.now.set(slot, key);
            self.loc[slot] = Loc::Now;
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
        let mut cal = Calendar::new(200);
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
                    cal.set(slot, (t.to_bits(), seq));
                    model.insert(slot, (t.to_bits(), seq));
                }
                4 => {
                    cal.remove(slot);
                    model.remove(&slot);
                }
                _ => {
                    let want = model.iter().map(|(&s, &k)| (k, s)).min();
                    assert_eq!(cal.pop(), want);
                    if let Some((k, s)) = want {
                        model.remove(&s);
                        clock = f64::from_bits(k.0);
                    }
                }
            }
            assert_eq!(cal.len(), model.len());
        }
        let mut want: Vec<(Key, usize)> = model.iter().map(|(&s, &k)| (k, s)).collect();
        want.sort();
        let rest: Vec<(Key, usize)> = std::iter::from_fn(|| cal.pop()).collect();
        assert_eq!(rest, want);
    }

    #[test]
    fn a_timer_planned_in_a_past_bucket_still_comes_first() {
        let mut cal = Calendar::new(3);
        cal.set(0, (10.0f64.to_bits(), 1));
        assert_eq!(cal.pop().map(|(_, s)| s), Some(0));
        cal.set(1, (12.0f64.to_bits(), 2));
        cal.set(2, (9.0f64.to_bits(), 3)); // before the bucket due now
        assert_eq!(cal.pop().map(|(_, s)| s), Some(2));
        assert_eq!(cal.pop().map(|(_, s)| s), Some(1));
        assert_eq!(cal.pop(), None);
    }
}
