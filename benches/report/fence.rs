//! The fence's retention: a lock keeps a fencing token per name, which must not outlive the
//! retention it was given, or a service locking many names once each (an entity id apiece)
//! would fill Redis with them. Counts the keys 1,000 such names leave behind.

use std::thread;
use std::time::Duration;

use crate::contenders::connection;
use crate::figures::Figures;

/// Keys left behind by 1,000 names each locked and released once, by a client whose fence
/// retention is 1 s, once that second (and the release latches' life) has passed.
pub fn figures(f: &mut Figures, url: &str) {
    let client = redlatch::Client::builder(url)
        .key_prefix("retention")
        .fence_retention(Duration::from_secs(1))
        .build()
        .unwrap();
    for i in 0..1000 {
        let guard = client
            .lock(&format!("entity:{i}"))
            .lock_with_lease(Duration::from_millis(100))
            .unwrap();
        guard.unlock().unwrap();
    }
    thread::sleep(Duration::from_millis(1500));
    let mut con = connection(url);
    let count = |con: &mut redis::Connection, pattern: &str| -> usize {
        let mut cursor = 0u64;
        let mut n = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query(con)
                .unwrap();
            n += keys.len();
            if next == 0 {
                return n;
            }
            cursor = next;
        }
    };
    f.put(
        "fence_keys_left_after_retention",
        count(&mut con, "retention:{*}:fence") as f64,
        "0",
        "fence keys of 1,000 names used once, 1.5 s after their release (retention 1 s)",
    );
    f.put(
        "other_keys_left_after_retention",
        count(&mut con, "retention:*") as f64,
        "0",
        "any key of those names still there (a release writes no latch outside a Cluster)",
    );
}
