//! What the cluster and Sentinel code read of the topology (`src/backend/cluster.rs`:
//! `master_ranges` of a `CLUSTER SLOTS` reply and the slot map made of it;
//! `src/backend/sentinel.rs`: `GET-MASTER-ADDR-BY-NAME` and `ROLE`, through the `redis`
//! crate's conversions), from the replies a link reads of the input.
//!
//! Checked on every input: no panic (in the parser or in an invariant of
//! `redlatch::fuzzing::check_topology`); no loop without end (libFuzzer's `-timeout`); and the
//! allocation bound: the whole check has at most 64 bytes of heap per input
//! byte plus 64 KiB in use at once (the slot map is 32 KiB whatever the input).
#![no_main]

use libfuzzer_sys::fuzz_target;
use redlatch::fuzzing;
use redlatch_fuzz::assert_heap_bound;

/// Heap bytes allowed per input byte, on top of [`FIXED`].
const PER_BYTE: usize = 64;
/// Heap bytes allowed whatever the input.
const FIXED: usize = 65536;

fuzz_target!(|data: &[u8]| {
    assert_heap_bound(data, PER_BYTE, FIXED, || fuzzing::check_topology(data));
});
