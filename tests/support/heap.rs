//! A counting allocator for the soak's child processes: the bytes and allocations live now, so
//! that a leak shows as live heap that grows, apart from what the allocator keeps and the
//! resident memory shows (fragmentation, arenas, freed pages not given back).
//!
//! A binary opts in with
//! `#[global_allocator] static HEAP: support::heap::Counting = support::heap::Counting;`
//! (the soak example and `tests/soak.rs`); in any other, [`live`] answers `None`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting.
pub struct Counting;

static BYTES: AtomicU64 = AtomicU64::new(0);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// Safety: every call goes to the system allocator as it came; the counters only watch.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        ALLOCATIONS.fetch_sub(1, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let moved = unsafe { System.realloc(p, layout, new_size) };
        if !moved.is_null() {
            BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
            BYTES.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        }
        moved
    }
}

/// Bytes and allocations live now; `None` where [`Counting`] is not the global allocator
/// (nothing was ever counted).
pub fn live() -> Option<(u64, u64)> {
    let allocations = ALLOCATIONS.load(Ordering::Relaxed);
    (allocations > 0).then(|| (BYTES.load(Ordering::Relaxed), allocations))
}
