//! No key left behind: every key the crate writes goes once its object has been idle for the
//! fence retention (and a retry latch's life), whatever the kind and however it was used:
//! taken at once, handed over, waited for in vain, shared, counted down. The one exception is
//! a semaphore's total, which its owner sets and only its owner removes.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use redlatch::Client;
use support::{RedisServer, eventually};

/// Short timeouts make short retry latches (the longest a retried call can take), and a short
/// watchdog short leases, so that everything expires within seconds.
fn client(server: &RedisServer) -> Client {
    Client::builder(&server.url())
        .fence_retention(Duration::from_secs(1))
        .watchdog_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300))
        .build()
        .unwrap()
}

fn dbsize(admin: &mut redis::Connection) -> u64 {
    redis::cmd("DBSIZE").query(admin).unwrap()
}

#[test]
fn ten_thousand_names_and_every_kind_leave_nothing_after_the_retention() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));

    // 10,000 lock names, each taken and released once, by four threads.
    thread::scope(|s| {
        for t in 0..4 {
            let a = &a;
            s.spawn(move || {
                for i in (t..10_000).step_by(4) {
                    a.lock(&format!("entity:{i}"))
                        .lock()
                        .unwrap()
                        .unlock()
                        .unwrap();
                }
            });
        }
    });
    // The first names' fences may already be gone on a slow machine (the loop can outlast the
    // 1 s retention); the last ones, released a moment ago, live.
    let fences: Vec<String> = (9_960..10_000)
        .map(|i| format!("redlatch:{{entity:{i}}}:fence"))
        .collect();
    let live: u64 = redis::cmd("EXISTS").arg(&fences).query(&mut admin).unwrap();
    assert_eq!(live, 40, "the fences are there while they live");

    // Locks handed back and forth between two clients (queue, hand-over mark, grant
    // channels), and a waiter that gives up (its withdrawal).
    thread::scope(|s| {
        for client in [&a, &b] {
            s.spawn(move || {
                for i in 0..20 {
                    let lock = client.lock(&format!("contended:{}", i % 5));
                    let guard = lock.try_lock(Duration::from_secs(10), None).unwrap();
                    thread::sleep(Duration::from_millis(2));
                    drop(guard.expect("handed over in time"));
                }
            });
        }
    });
    let held = a.lock("given-up").lock().unwrap();
    assert!(
        b.lock("given-up")
            .try_lock(Duration::from_millis(50), None)
            .unwrap()
            .is_none()
    );
    held.unlock().unwrap();
    // One hand-over for certain (the threads above may happen never to meet): b waits while
    // a holds.
    let held = a.lock("handed").lock().unwrap();
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            b.lock("handed")
                .try_lock(Duration::from_secs(10), None)
                .unwrap()
                .map(drop)
        });
        assert!(eventually(Duration::from_secs(5), || {
            support::queued_owners(&mut admin, "handed").len() == 1
        }));
        held.unlock().unwrap();
        assert!(waiter.join().unwrap().is_some());
    });
    let lock_stats = (a.stats(), b.stats());
    assert!(
        lock_stats.0.handed_over + lock_stats.1.handed_over > 0,
        "no hand-over happened: the queue and the mark were never written"
    );
    assert_eq!(lock_stats.1.timeouts, 1, "the waiter that gave up");

    // Read-write locks and semaphores, contended too (their queue, waiters' terms, leases and
    // release latches), and latches counted down to zero.
    thread::scope(|s| {
        for client in [&a, &b] {
            s.spawn(move || {
                for i in 0..20 {
                    let rw = client.read_write_lock(&format!("rw:{}", i % 5));
                    drop(rw.write().unwrap());
                    drop(rw.read().unwrap());
                    let sem = client.semaphore(&format!("sem:{}", i % 5));
                    sem.set_permits(1).unwrap();
                    let permits = sem.acquire(1).unwrap();
                    thread::sleep(Duration::from_millis(2));
                    permits.release().unwrap();
                }
            });
        }
    });
    // One wait for certain on a semaphore, as for the lock above.
    let sem = a.semaphore("sem:waited");
    sem.set_permits(1).unwrap();
    let permits = sem.acquire(1).unwrap();
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            b.semaphore("sem:waited")
                .try_acquire(1, Duration::from_secs(10), None)
                .unwrap()
                .map(|p| p.release().unwrap())
        });
        let queue = "redlatch:{sem:waited}:semaphore:queue";
        assert!(eventually(Duration::from_secs(5), || {
            redis::cmd("ZCARD")
                .arg(queue)
                .query::<u64>(&mut admin)
                .unwrap()
                == 1
        }));
        permits.release().unwrap();
        assert!(waiter.join().unwrap().is_some());
    });
    // A waiter served by a hand-over counts as handed over, one that woke and took its permits
    // as acquired after a wait: either means the queue was written.
    let waited = |s: &redlatch::Stats| s.acquired_after_wait + s.handed_over;
    assert!(
        waited(&a.stats()) + waited(&b.stats()) > waited(&lock_stats.0) + waited(&lock_stats.1),
        "no read-write lock or semaphore was waited for: their queues were never written"
    );
    for i in 0..5 {
        let latch = a.count_down_latch(&format!("latch:{i}"));
        assert!(latch.try_set_count(2).unwrap());
        latch.count_down().unwrap();
        b.count_down_latch(&format!("latch:{i}"))
            .count_down()
            .unwrap();
    }
    drop((a, b));

    // What stays is the six semaphores' totals; everything else expires within the longest
    // of: a lease (1 s) plus the retention (1 s), a retry latch (about 4 s with these
    // timeouts), a queue (twice a wait's place, about 6 s).
    let started = Instant::now();
    eventually(Duration::from_secs(30), || dbsize(&mut admin) <= 6);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut admin).unwrap();
    let mut expected: Vec<String> = (0..5)
        .map(|i| format!("redlatch:{{sem:{i}}}:semaphore:permits"))
        .chain(["redlatch:{sem:waited}:semaphore:permits".to_string()])
        .collect();
    let mut keys_sorted = keys.clone();
    keys_sorted.sort();
    expected.sort();
    // Not assert_eq!: a failure would print every key left (10,000 of them, say).
    assert!(
        keys_sorted == expected,
        "left after {:?}: {} keys, the first {:?}",
        started.elapsed(),
        keys.len(),
        &keys[..keys.len().min(10)]
    );
}
