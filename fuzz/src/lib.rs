//! What the fuzz targets share: a global allocator that counts the heap in use, so that a
//! target can bound what a parser takes for its input.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, keeping count of the bytes in use and their peak.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        q
    }
}

fn grew(size: usize) {
    let now = IN_USE.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most heap `f` had in use at once beyond what was in use before it (libFuzzer runs
/// one input at a time on one thread, so nothing else allocates meanwhile).
pub fn peak_heap(f: impl FnOnce()) -> usize {
    let before = IN_USE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed) - before
}

/// Panics (a crash to the fuzzer) when `f` has more than `per_byte` bytes of heap per byte
/// of `data` plus `fixed` in use at once: the target's stated allocation bound.
pub fn assert_heap_bound(data: &[u8], per_byte: usize, fixed: usize, f: impl FnOnce()) {
    let peak = peak_heap(f);
    let bound = per_byte * data.len() + fixed;
    assert!(
        peak <= bound,
        "{peak} bytes of heap for {} bytes of input (bound {per_byte} x {} + {fixed} = {bound})",
        data.len(),
        data.len()
    );
}
