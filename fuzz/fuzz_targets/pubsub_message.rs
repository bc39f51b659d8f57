//! The payloads of pub/sub messages as the waiters read them: our scripts' messages
//! (`src/scripts/message.rs`: grant, unlock, force, open, free) with every grant's pairs,
//! Redisson's integer wake-ups for each family (`src/scripts/redisson/mod.rs`), and a lock's
//! queue member with its score (`Place::parse`, `src/scripts/lock.rs`).
//!
//! Checked on every input: no panic (in the parser or in an invariant of
//! `redlatch::fuzzing::check_message`); no loop without end (libFuzzer's `-timeout`); and the
//! allocation bound: the whole check has at most 8 bytes of heap per input
//! byte plus 4 KiB in use at once (the parsers borrow the payload).
#![no_main]

use libfuzzer_sys::fuzz_target;
use redlatch::fuzzing;
use redlatch_fuzz::assert_heap_bound;

/// Heap bytes allowed per input byte, on top of [`FIXED`].
const PER_BYTE: usize = 8;
/// Heap bytes allowed whatever the input.
const FIXED: usize = 4096;

fuzz_target!(|data: &[u8]| {
    assert_heap_bound(data, PER_BYTE, FIXED, || fuzzing::check_message(data));
});
