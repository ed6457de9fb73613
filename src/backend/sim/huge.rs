//! Large pages for the simulator's per-client arrays. At fleet scale each
//! event reads one client, and its timer slot, chosen at random among a
//! million: hundreds of megabytes that 4 KiB pages cut into tens of
//! thousands, so nearly every such read also missed the address
//! translation cache and walked the page tables first, a cost the loads
//! ahead ([`super::prefetch`]) cannot hide, as a prefetch must translate
//! its address before it can start. The kernel is asked to back these
//! arrays with 2 MiB pages (`madvise(MADV_HUGEPAGE)`, honoured when
//! transparent huge pages are `madvise` or `always`; ignored otherwise).
//! Nothing changes but where the memory lies.

/// An empty vector with room for `n` values, its memory advised huge
/// before anything is written to it.
pub fn with_capacity<T>(n: usize) -> Vec<T> {
    let v: Vec<T> = Vec::with_capacity(n);
    advise(v.as_ptr().cast(), n.saturating_mul(std::mem::size_of::<T>()));
    v
}

/// Asks for huge pages over the whole pages within `len` bytes from `p`.
fn advise(p: *const u8, len: usize) {
    const PAGE: usize = 4096;
    let start = (p as usize).next_multiple_of(PAGE);
    let end = (p as usize).saturating_add(len) & !(PAGE - 1);
    if end <= start {
        return;
    }
    let Some(addr) = std::ptr::NonNull::new(start as *mut std::ffi::c_void) else { return };
    // SAFETY: the range lies within one live allocation of ours, page
    // aligned; MADV_HUGEPAGE changes how pages are backed, never their
    // contents, and a refusal (no THP in this kernel) is ignored.
    let _ = unsafe { nix::sys::mman::madvise(addr, end - start, nix::sys::mman::MmapAdvise::MADV_HUGEPAGE) };
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_huge_vector_is_an_ordinary_vector() {
        let mut v: Vec<u64> = super::with_capacity(1 << 20);
        assert!(v.is_empty() && v.capacity() >= 1 << 20);
        v.extend(0..1 << 20);
        assert_eq!(v.iter().sum::<u64>(), (1u64 << 20) * ((1 << 20) - 1) / 2);
        let empty: Vec<u8> = super::with_capacity(0);
        assert!(empty.is_empty());
    }
}
