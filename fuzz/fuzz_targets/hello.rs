//! What `build()` reads of a `HELLO` reply (`src/backend/hello.rs`: `hello_fields`,
//! `supported`, `Mode::parse`), from the replies a link reads of the input (RESP2) and the
//! one the `redis` crate reads (RESP3's map, as `HELLO 3` answers).
//!
//! Checked on every input: no panic (in the parser or in an invariant of
//! `redlatch::fuzzing::check_hello`); no loop without end (libFuzzer's `-timeout`); and the
//! allocation bound: reading the input as a link does and taking the fields has at most 64
//! bytes of heap per input byte plus 64 KiB in use at once. The `redis` crate's parser (the
//! RESP3 side) is run for panics only: it sizes each array for the count its header claims,
//! up to 4096 values, whatever follows (the fuzzer found 76 KB taken for the 121 bytes
//! `*1212\r\n...`), which is the dependency's bound, not ours.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redlatch::fuzzing;
use redlatch_fuzz::assert_heap_bound;

/// Heap bytes allowed per input byte, on top of [`FIXED`].
const PER_BYTE: usize = 64;
/// Heap bytes allowed whatever the input.
const FIXED: usize = 65536;

fuzz_target!(|data: &[u8]| {
    assert_heap_bound(data, PER_BYTE, FIXED, || fuzzing::hello_once(data));
    fuzzing::check_hello(data);
});
