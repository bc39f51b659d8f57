//! The watchdog's renewal: one client holding many locks without a lease, whose renewal thread
//! must keep them all alive in a few batched script calls per period rather than one per lock,
//! at a small share of a core.

use std::thread;
use std::time::{Duration, Instant};

use crate::contenders::connection;
use crate::cpu;
use crate::figures::Figures;
use crate::scenario;
use crate::stats::ratio;

/// One client holding many watchdog locks: round trips per renewal period, and the renewal
/// thread's CPU.
pub fn figures(f: &mut Figures, url: &str, locks: usize) {
    let watchdog = Duration::from_secs(3);
    let period = watchdog / 3;
    let before = cpu::tids();
    let client = redlatch::Client::builder(url)
        .watchdog_timeout(watchdog)
        .build()
        .unwrap();
    let threads: std::collections::HashSet<u32> =
        cpu::tids().difference(&before).copied().collect();
    let guards: Vec<redlatch::LockGuard> = (0..locks)
        .map(|i| client.lock(&format!("renew-{i}")).lock().unwrap())
        .collect();
    let mut admin = connection(url);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut admin)
        .unwrap();
    let periods = 3;
    let cpu_before = cpu::cpu_of(&threads);
    let t = Instant::now();
    thread::sleep(period * periods);
    let cpu_used = cpu::cpu_of(&threads) - cpu_before;
    let wall = t.elapsed();
    let calls = scenario::command_stats(&mut admin)
        .get("evalsha")
        .copied()
        .unwrap_or(0);
    assert!(guards.iter().all(|g| !g.is_lost()), "renewal lost locks");
    let key = if locks == 10_000 {
        "10k".to_string()
    } else {
        locks.to_string()
    };
    f.put(
        &format!("renewal_round_trips_per_period_{key}"),
        calls as f64 / periods as f64,
        "<= 100",
        "script calls the renewal thread makes per period",
    );
    f.put(
        &format!("renewal_cpu_percent_{key}"),
        100.0 * ratio(cpu_used, wall),
        "<= 5",
        "client threads' CPU, % of one core",
    );
    drop(guards);
}
