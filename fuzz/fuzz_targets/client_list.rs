//! The reader of a `CLIENT LIST` reply's text (`src/inspect/mod.rs`,
//! `parse_client_list`): every redlatch client it finds is named `<name>:<uuid>` with its
//! address on one line of the text.
//!
//! Checked on every input: no panic (in the parser or in an invariant of
//! `redlatch::fuzzing::check_client_list`); no loop without end (libFuzzer's `-timeout`); and the
//! allocation bound: the whole check has at most 8 bytes of heap per input
//! byte plus 4 KiB in use at once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redlatch::fuzzing;
use redlatch_fuzz::assert_heap_bound;

/// Heap bytes allowed per input byte, on top of [`FIXED`].
const PER_BYTE: usize = 8;
/// Heap bytes allowed whatever the input.
const FIXED: usize = 4096;

fuzz_target!(|data: &[u8]| {
    assert_heap_bound(data, PER_BYTE, FIXED, || fuzzing::check_client_list(data));
});
