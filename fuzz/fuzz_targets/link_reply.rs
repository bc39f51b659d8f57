//! The RESP2 reply reader of a link (`src/backend/reply.rs`, `Replies`), given the bytes
//! of a connection whole, byte by byte, cut once anywhere and in random runs: the same
//! replies and the same end every way, and each reply the value the `redis` crate's parser
//! reads from the same bytes.
//!
//! Checked on every input: no panic (in the parser or in an invariant of
//! `redlatch::fuzzing::check_link`); no loop without end (libFuzzer's `-timeout`); and the
//! allocation bound: one pass over the whole input, each reply dropped as it
//! comes, has at most 32 bytes of heap per input byte plus 16 KiB in use at once: the
//! buffer (4 KiB, doubled as a reply needs, so under twice the input plus 4 KiB) and the
//! values made of the input; an array's header is trusted no further than 1 item per 3
//! bytes that follow it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use redlatch::fuzzing;
use redlatch_fuzz::assert_heap_bound;

/// Heap bytes allowed per input byte, on top of [`FIXED`].
const PER_BYTE: usize = 32;
/// Heap bytes allowed whatever the input.
const FIXED: usize = 16384;

fuzz_target!(|data: &[u8]| {
    assert_heap_bound(data, PER_BYTE, FIXED, || fuzzing::link_once(data));
    fuzzing::check_link(data);
});
