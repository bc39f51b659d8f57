//! The idle client's cost: a client with 1,000 locks held and 100 threads waiting, while
//! nothing is released, should spend next to no CPU in its background threads (subscriber
//! and renewal): a service that holds locks for long pays it all the time.

use std::thread;
use std::time::{Duration, Instant};

use crate::contenders::connection;
use crate::cpu;
use crate::figures::Figures;
use crate::stats::ratio;
use crate::support;

/// A client with 1,000 locks held and 100 threads waiting, nothing released: CPU of its two
/// threads.
pub fn figures(f: &mut Figures, url: &str, span: Duration) {
    let holder = redlatch::Client::open(url).unwrap();
    let before = cpu::tids();
    let client = redlatch::Client::open(url).unwrap();
    let threads: std::collections::HashSet<u32> =
        cpu::tids().difference(&before).copied().collect();
    let guards: Vec<redlatch::LockGuard> = (0..1000)
        .map(|i| client.lock(&format!("idle-held-{i}")).lock().unwrap())
        .collect();
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(0);
    let holder_thread = {
        let holder = holder.clone();
        thread::spawn(move || {
            let held: Vec<_> = (0..100)
                .map(|i| holder.lock(&format!("idle-wait-{i}")).lock().unwrap())
                .collect();
            let _ = release_rx.recv();
            drop(held);
        })
    };
    let mut admin = connection(url);
    assert!(support::eventually(Duration::from_secs(30), || {
        redis::cmd("EXISTS")
            .arg("redlatch:{idle-wait-99}")
            .query::<i64>(&mut admin)
            .unwrap()
            == 1
    }));
    let waiters: Vec<_> = (0..100)
        .map(|i| {
            let lock = client.lock(&format!("idle-wait-{i}"));
            thread::spawn(move || {
                lock.try_lock(Duration::from_secs(120), None)
                    .unwrap()
                    .is_some()
            })
        })
        .collect();
    assert!(support::eventually(Duration::from_secs(30), || {
        support::pubsub_channels(&mut admin, "redlatch:{idle-wait-*}:unlocked").len() == 100
    }));
    let cpu_before = cpu::cpu_of(&threads);
    let t = Instant::now();
    thread::sleep(span);
    let cpu_used = cpu::cpu_of(&threads) - cpu_before;
    f.put(
        "idle_background_cpu_percent",
        100.0 * ratio(cpu_used, t.elapsed()),
        "<= 0.5",
        "subscriber + renewal threads, 1,000 held, 100 waiting",
    );
    let _ = release_tx.send(());
    holder_thread.join().unwrap();
    assert!(waiters.into_iter().all(|w| w.join().unwrap()));
    drop(guards);
}
