//! A hint to the processor: start loading a value's cache lines now. At
//! fleet scale a million clients' state and timers are far beyond the
//! caches and each event touches one client chosen at random; loading the
//! clients of the next few events while this one is handled overlaps those
//! misses instead of taking them one after another. What an event touches
//! is found by following pointers (its slot, then its client, then the
//! client's replica, then that replica's jobs), so each is loaded a stage
//! later than the one it is read from
//! ([performance](docs/performance.md#fleets)). Nothing changes if a hint
//! is wrong or absent.

/// Events ahead whose replica is loaded when the event is that replica's
/// completion: the client it ends is found from the replica's job heap,
/// so the replica ...
pub const DONE_REPLICA: usize = 7;
/// ... and then its job heap are loaded before [`CLIENT`] reads them.
pub const DONE_JOBS: usize = 6;
/// Events ahead whose timer slot and client are loaded: far enough for a
/// miss to be over when the next stage reads them, near enough to stay in
/// the cache.
pub const CLIENT: usize = 5;
/// Events ahead whose client's replica is loaded (its state, its timers),
/// read from the client loaded at [`CLIENT`].
pub const REPLICA: usize = 3;
/// Events ahead whose replica's job heap is loaded, read from the replica
/// loaded at [`REPLICA`].
pub const JOBS: usize = 1;

/// Starts loading every cache line of `x`.
#[inline]
pub fn prefetch<T>(x: &T) {
    let p = (x as *const T).cast::<u8>();
    for offset in (0..std::mem::size_of::<T>()).step_by(64) {
        prefetch_line(p.wrapping_add(offset));
    }
}

/// Starts loading the cache line at `p`, which may point anywhere (past
/// a vector's end, for one).
#[inline]
pub fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch never faults and never reads or writes memory
        // as the program sees it; any address is allowed.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
