//! The agenda's withdrawable timers (every client's one timer, every
//! replica's completion and quota event) kept in a calendar queue: time is
//! cut into buckets of [`WIDTH_S`], a ring of [`BUCKETS`] of them covers
//! the next few minutes, and only the buckets whose time has come are put
//! in order (sorted once when taken). At fleet scale a million clients'
//! timers in one heap cost about ten cache misses per pop and per move
//! ([performance](docs/performance.md#fleets)); here a timer is planned in
//! O(1) (a push onto its bucket) and withdrawn by marking its slot: the
//! entry it leaves behind is dropped when its bucket comes due, in a scan
//! whose loads the processor overlaps, rather than through a chain of
//! dependent misses at withdrawal. Timers beyond the ring (a client's long
//! pause between sessions) and timers planned into a bucket already taken
//! wait in heaps of their own, withdrawn the same way. The order is exactly
//! one heap's: by key, and every key is unique.

use super::prefetch::{prefetch, prefetch_line};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// `(time as bits, planning order)`: the order of the agenda.
pub type Key = (u64, u64);

/// A bucket's span, seconds: a few hundred timers fall due in one at a
/// million clients, a handful at thousands.
const WIDTH_S: f64 = 0.002;

/// Buckets in the ring: with [`WIDTH_S`] it covers 262 s, past every
/// query deadline and most pauses between sessions.
const BUCKETS: u64 = 1 << 17;

/// Timers planned for the ring that are put in their buckets together.
const BATCH: usize = 32;

/// [`Slot::at`] of a slot with no timer.
const NONE: u32 = u32::MAX;
/// [`Slot::at`] of a timer in a bucket already taken (in `due` or `late`).
const NOW: u32 = u32::MAX - 1;
/// [`Slot::at`] of a timer beyond the ring.
const FAR: u32 = u32::MAX - 2;

/// One slot's timer: its key, where it is and what it does, together.
/// An entry anywhere else is live only while it matches its slot's `at`
/// and `key` (keys are unique, so a replaced timer's entry never does).
#[derive(Clone, Copy, Debug)]
struct Slot<T> {
    key: Key,
    /// A ring bucket, [`NOW`], [`FAR`] or [`NONE`].
    at: u32,
    what: T,
}

/// A timer's entry in a heap or in `due`.
type Entry = (Key, u32);

/// Timers by key, one per slot, each carrying a `T`, in a calendar queue.
pub struct Calendar<T> {
    slots: Vec<Slot<T>>,
    /// The timers of the buckets taken, latest first (the next one last).
    due: Vec<Entry>,
    /// Timers planned into a bucket already taken, in order.
    late: BinaryHeap<Reverse<Entry>>,
    /// The slots whose timers fall in the next buckets, unordered, by
    /// `bucket % BUCKETS` (with the entries of withdrawn timers).
    ring: Vec<Vec<u32>>,
    /// Timers for the ring planned since the last [`Calendar::flush`]:
    /// `(place, slot)`.
    planned: Vec<(u32, u32)>,
    /// Live timers in `ring` (and `planned`).
    in_ring: usize,
    /// The timers beyond the ring, in order.
    far: BinaryHeap<Reverse<Entry>>,
    /// The bucket due now: every bucket before it has been taken.
    cur: u64,
    /// Live timers.
    pending: usize,
}

/// The bucket a key falls in (monotone in time: time order is kept).
fn bucket(key: Key) -> u64 {
    (f64::from_bits(key.0) / WIDTH_S) as u64
}

impl<T: Copy> Calendar<T> {
    /// An empty calendar for `slots` slots (`blank` fills the unused ones).
    pub fn new(slots: usize, blank: T) -> Calendar<T> {
        Calendar {
            slots: {
                let mut v = super::huge::with_capacity(slots);
                v.resize(slots, Slot { key: (0, 0), at: NONE, what: blank });
                v
            },
            due: Vec::new(),
            late: BinaryHeap::new(),
            ring: vec![Vec::new(); BUCKETS as usize],
            planned: Vec::with_capacity(BATCH),
            in_ring: 0,
            far: BinaryHeap::new(),
            cur: 0,
            pending: 0,
        }
    }

    /// Timers pending.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.pending
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
        self.slots[slot] = Slot { key, at, what };
        self.pending += 1;
        let entry = Reverse((key, slot as u32));
        match at {
            NOW => self.late.push(entry),
            FAR => self.far.push(entry),
            b => {
                self.planned.push((b, slot as u32));
                self.in_ring += 1;
                if self.planned.len() == BATCH {
                    self.flush();
                }
            }
        }
    }

    /// Puts the timers planned for the ring in their buckets, loading every
    /// bucket's end before writing any: a bucket a few seconds ahead is
    /// far from the caches at fleet scale, and a push at a time waited for
    /// each in turn.
    fn flush(&mut self) {
        for &(b, _) in &self.planned {
            prefetch(&self.ring[b as usize]);
        }
        for &(b, _) in &self.planned {
            let bucket = &self.ring[b as usize];
            prefetch_line(bucket.as_ptr().wrapping_add(bucket.len()).cast());
        }
        for (b, slot) in self.planned.drain(..) {
            self.ring[b as usize].push(slot);
        }
    }

    /// Removes `slot`'s timer, if it has one (its entry stays behind, dead).
    pub fn remove(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        match s.at {
            NONE => return,
            NOW | FAR => {}
            _ => self.in_ring -= 1,
        }
        s.at = NONE;
        self.pending -= 1;
    }

    /// The first timer's key.
    pub fn peek(&mut self) -> Option<Key> {
        self.first().map(|(key, _)| key)
    }

    /// Removes the first timer; returns its key and what it does.
    pub fn pop(&mut self) -> Option<(Key, T)> {
        let (key, slot) = self.first()?;
        self.remove(slot);
        Some((key, self.slots[slot].what))
    }

    /// The slot of the timer `d` places ahead among those of the buckets
    /// taken (withdrawn or not).
    pub fn ahead(&self, d: usize) -> Option<usize> {
        let (_, slot) = self.due[..self.due.len().checked_sub(d)?].last()?;
        Some(*slot as usize)
    }

    /// Starts loading `slot`'s record ([`prefetch`]).
    pub fn prefetch_slot(&self, slot: usize) {
        prefetch(&self.slots[slot]);
    }

    /// Whether `entry` is its slot's timer, at `at`.
    fn live(&self, (key, slot): Entry, at: u32) -> bool {
        let s = &self.slots[slot as usize];
        s.at == at && s.key == key
    }

    /// The first timer and its slot (the buckets whose time has come are
    /// taken on the way).
    fn first(&mut self) -> Option<(Key, usize)> {
        loop {
            while self.due.last().is_some_and(|&e| !self.live(e, NOW)) {
                self.due.pop();
            }
            while self.late.peek().is_some_and(|&Reverse(e)| !self.live(e, NOW)) {
                self.late.pop();
            }
            let next = match (self.due.last(), self.late.peek()) {
                (Some(&d), Some(&Reverse(l))) => Some(d.min(l)),
                (d, l) => d.copied().or(l.map(|&Reverse(e)| e)),
            };
            if let Some((key, slot)) = next {
                return Some((key, slot as usize));
            }
            self.cur = match self.in_ring {
                0 => bucket(self.far_first()?.0).max(self.cur + 1),
                _ => self.cur + 1,
            };
            self.take_due();
        }
    }

    /// The first live timer beyond the ring (the dead ones on top dropped).
    fn far_first(&mut self) -> Option<Entry> {
        while let Some(&Reverse(e)) = self.far.peek() {
            if self.live(e, FAR) {
                return Some(e);
            }
            self.far.pop();
        }
        None
    }

    /// Moves bucket `cur`'s live timers, and those beyond the ring now due,
    /// into `due`, in order. A live timer in the ring always falls within
    /// the ring's span after `cur`, so an entry of bucket `cur`'s place is
    /// live exactly when its slot is still there and due now; a slot with
    /// two entries there (withdrawn, then planned again) is taken once.
    fn take_due(&mut self) {
        self.flush();
        let b = (self.cur % BUCKETS) as u32;
        for slot in std::mem::take(&mut self.ring[b as usize]) {
            let s = &mut self.slots[slot as usize];
            if s.at == b && bucket(s.key) == self.cur {
                s.at = NOW;
                self.due.push((s.key, slot));
                self.in_ring -= 1;
            }
        }
        while let Some((key, slot)) = self.far_first().filter(|&(k, _)| bucket(k) <= self.cur) {
            self.far.pop();
            self.slots[slot as usize].at = NOW;
            self.due.push((key, slot));
        }
        self.due.sort_unstable_by(|a, b| b.cmp(a));
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
