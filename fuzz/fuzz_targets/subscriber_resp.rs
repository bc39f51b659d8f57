//! The subscriber's RESP reader (`src/subscriber/resp.rs`), fed the bytes of a pub/sub
//! connection whole, byte by byte, cut once anywhere and in random runs: the same frames
//! and the same end (an error or none) every way.
//!
//! Checked on every input: no panic (in the parser or in an invariant of
//! `redlatch::fuzzing::check_subscriber`); no loop without end (libFuzzer's `-timeout`); and the
//! allocation bound: one pass over the whole input, each frame dropped as it
//! comes, has at most 32 bytes of heap per input byte plus 4 KiB in use at once: the reader
//! keeps the input's bytes and the frames made of them, never what a header claims (a bulk
//! string over 1 MiB is skipped as it is fed, an array of more than 16 items keeps 16).
#![no_main]

use libfuzzer_sys::fuzz_target;
use redlatch::fuzzing;
use redlatch_fuzz::assert_heap_bound;

/// Heap bytes allowed per input byte, on top of [`FIXED`].
const PER_BYTE: usize = 32;
/// Heap bytes allowed whatever the input.
const FIXED: usize = 4096;

fuzz_target!(|data: &[u8]| {
    assert_heap_bound(data, PER_BYTE, FIXED, || fuzzing::subscriber_once(data));
    fuzzing::check_subscriber(data);
});
