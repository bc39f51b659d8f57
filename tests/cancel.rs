//! Cancellable waits against a real redis-server, in both layouts: a cancelled wait returns at
//! once, leaves the queue and holds nothing; every kind's wait can be cancelled; the client
//! ends every wait under way for shutdown; and a cancel racing a hand-over either holds the
//! lock or hands it on, never strands it.

mod support;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Cancel, Client, Error, Layout, ObjectKind};
use support::{RedisServer, eventually, join_all, unique};

const LAYOUTS: [Layout; 2] = [Layout::Redlatch, Layout::Redisson];

fn client(server: &RedisServer, layout: Layout) -> Client {
    Client::builder(&server.url())
        .layout(layout)
        .build()
        .unwrap()
}

/// Waits (at most 5 s) until `client` has `n` threads waiting on the subscriber.
fn await_waiting(client: &Client, n: u64) {
    assert!(
        eventually(Duration::from_secs(5), || client.stats().waiting_threads
            == n),
        "expected {n} waiting threads, saw {}",
        client.stats().waiting_threads
    );
}

fn is_cancelled<T>(r: &redlatch::Result<T>) -> bool {
    matches!(r, Err(Error::Cancelled { .. }))
}

/// The owners queued for lock `name` in Redis, as the operator's view reads them (our layout's
/// queue, Redisson's fair lock's list).
fn queued(client: &Client, name: &str) -> Vec<String> {
    let report = client.inspect(ObjectKind::Lock, name).unwrap();
    report.queue.iter().map(|w| w.owner.clone()).collect()
}

#[test]
fn a_cancelled_wait_returns_at_once_leaves_the_queue_and_the_next_waiter_is_served() {
    let server = RedisServer::start();
    for layout in LAYOUTS {
        let name = unique("cancel-one");
        let (holder, waiting, behind) = (
            client(&server, layout),
            client(&server, layout),
            client(&server, layout),
        );
        // Redisson's plain lock has no queue; its fair lock has.
        let lock_of = |c: &Client| match layout {
            Layout::Redisson => c.fair_lock(&name),
            _ => c.lock(&name),
        };
        let held = lock_of(&holder).lock().unwrap();
        let cancel = Cancel::new();
        let waiter = {
            let lock = lock_of(&waiting).cancel_on(&cancel);
            thread::spawn(move || {
                let owner = lock.name().to_string();
                let r = lock.lock();
                (owner, is_cancelled(&r), r.is_err(), Instant::now())
            })
        };
        await_waiting(&waiting, 1);
        let second = {
            let lock = lock_of(&behind);
            thread::spawn(move || {
                let r = lock.try_lock(Duration::from_secs(20), None).unwrap();
                (r.is_some(), Instant::now())
            })
        };
        await_waiting(&behind, 1);
        assert!(eventually(Duration::from_secs(5), || queued(
            &holder, &name
        )
        .len()
            == 2));
        let cancelled_at = Instant::now();
        cancel.cancel();
        let (_, was_cancelled, failed, returned) = waiter.join().unwrap();
        let took = returned - cancelled_at;
        println!("{layout:?}: the cancelled wait returned {took:?} after the cancel");
        assert!(was_cancelled && failed, "{layout:?}: not Err(Cancelled)");
        assert!(took < Duration::from_secs(1), "{layout:?}: took {took:?}");
        let left = queued(&holder, &name);
        assert_eq!(
            left.len(),
            1,
            "{layout:?}: the cancelled waiter stayed queued: {left:?}"
        );
        assert!(
            left[0].starts_with(behind.id()),
            "{layout:?}: {left:?} is not the waiter behind"
        );
        assert_eq!(waiting.stats().cancelled, 1);
        assert_eq!(waiting.stats().timeouts, 0);
        let released = Instant::now();
        drop(held);
        let (got, at) = second.join().unwrap();
        assert!(got, "{layout:?}: the waiter behind did not get the lock");
        let served = at - released;
        println!("{layout:?}: the waiter behind was served {served:?} after the release");
        assert!(served < Duration::from_secs(2), "{layout:?}: {served:?}");
    }
}

#[test]
fn every_kind_of_wait_ends_at_its_cancel_holding_nothing() {
    let server = RedisServer::start();
    for layout in LAYOUTS {
        let name = unique("cancel-kinds");
        let (holder, waiting) = (client(&server, layout), client(&server, layout));
        // Make every kind busy.
        let lock = holder.lock(&format!("{name}-lock")).lock().unwrap();
        let fair = holder.fair_lock(&format!("{name}-fair")).lock().unwrap();
        let write = holder
            .read_write_lock(&format!("{name}-rw"))
            .write()
            .unwrap();
        let read = holder
            .read_write_lock(&format!("{name}-rr"))
            .read()
            .unwrap();
        let semaphore = holder.semaphore(&format!("{name}-sem"));
        semaphore.set_permits(1).unwrap();
        let permit = semaphore.acquire(1).unwrap();
        let latch = holder.count_down_latch(&format!("{name}-latch"));
        assert!(latch.try_set_count(1).unwrap());
        let spun = holder.lock(&format!("{name}-spin")).lock().unwrap();
        let member = holder.lock(&format!("{name}-m2")).lock().unwrap();

        let cancel = Cancel::new();
        type Wait = Box<dyn FnOnce() -> redlatch::Result<()> + Send>;
        let c = &waiting;
        let waits: Vec<(&str, Wait)> = vec![
            ("lock", {
                let h = c.lock(&format!("{name}-lock")).cancel_on(&cancel);
                Box::new(move || h.lock().map(drop))
            }),
            ("fair lock", {
                let h = c.fair_lock(&format!("{name}-fair")).cancel_on(&cancel);
                Box::new(move || h.lock().map(drop))
            }),
            ("read behind a write", {
                let h = c.read_write_lock(&format!("{name}-rw")).cancel_on(&cancel);
                Box::new(move || h.read().map(drop))
            }),
            ("write behind a read", {
                let h = c.read_write_lock(&format!("{name}-rr")).cancel_on(&cancel);
                Box::new(move || h.write().map(drop))
            }),
            ("semaphore", {
                let h = c.semaphore(&format!("{name}-sem")).cancel_on(&cancel);
                Box::new(move || h.acquire(1).map(drop))
            }),
            ("latch", {
                let h = c
                    .count_down_latch(&format!("{name}-latch"))
                    .cancel_on(&cancel);
                Box::new(move || h.wait(Duration::from_secs(60)).map(drop))
            }),
            ("spin lock", {
                let h = c.spin_lock(&format!("{name}-spin")).cancel_on(&cancel);
                Box::new(move || h.lock().map(drop))
            }),
            ("multi-lock", {
                let h = c
                    .multi_lock(&[&format!("{name}-m1"), &format!("{name}-m2")])
                    .cancel_on(&cancel);
                Box::new(move || h.lock().map(drop))
            }),
        ];
        let kinds: Vec<&str> = waits.iter().map(|(k, _)| *k).collect();
        let threads: Vec<_> = waits
            .into_iter()
            .map(|(_, wait)| thread::spawn(move || (wait(), Instant::now())))
            .collect();
        // Every kind but the spin lock waits on the subscriber.
        await_waiting(&waiting, kinds.len() as u64 - 1);
        thread::sleep(Duration::from_millis(50)); // the spin lock into its backoff
        let cancelled_at = Instant::now();
        cancel.cancel();
        let ended = join_all(threads, Duration::from_secs(10), "a cancelled wait");
        for (kind, (result, at)) in kinds.iter().zip(ended) {
            let took = at - cancelled_at;
            assert!(is_cancelled(&result), "{layout:?} {kind}: {result:?}");
            assert!(took < Duration::from_secs(2), "{layout:?} {kind}: {took:?}");
        }
        // Nothing was left held by the cancelled waits: once the holder lets go, each is free.
        drop((lock, fair, write, read, permit, spun, member));
        assert!(!waiting.lock(&format!("{name}-lock")).is_locked().unwrap());
        assert!(!waiting.lock(&format!("{name}-m1")).is_locked().unwrap());
        let rw = waiting.read_write_lock(&format!("{name}-rw"));
        assert!(
            !rw.is_locked().unwrap(),
            "{layout:?}: a cancelled read holds"
        );
        let rr = waiting.read_write_lock(&format!("{name}-rr"));
        assert!(
            !rr.is_locked().unwrap(),
            "{layout:?}: a cancelled write holds"
        );
        assert_eq!(
            semaphore.available().unwrap(),
            1,
            "{layout:?}: permits held"
        );
        assert_eq!(
            latch.count().unwrap(),
            1,
            "a cancelled wait changes no count"
        );
        // The handle stays cancelled: a later wait ends at once, and takes nothing even free.
        let free = waiting.lock(&format!("{name}-lock")).cancel_on(&cancel);
        assert!(is_cancelled(&free.try_lock(Duration::ZERO, None)));
        assert!(!free.is_locked().unwrap());
    }
}

#[test]
fn cancel_all_waits_ends_the_waits_under_way_and_spares_later_ones() {
    let server = RedisServer::start();
    for layout in LAYOUTS {
        let name = unique("cancel-all");
        let (holder, waiting) = (client(&server, layout), client(&server, layout));
        let held = holder.lock(&name).lock().unwrap();
        let write = holder
            .read_write_lock(&format!("{name}-rw"))
            .write()
            .unwrap();
        let threads: Vec<_> = (0..3)
            .map(|i| {
                let (lock, rw) = (
                    waiting.lock(&name),
                    waiting.read_write_lock(&format!("{name}-rw")),
                );
                thread::spawn(move || match i {
                    0 => lock.lock().map(drop),
                    1 => lock.try_lock(Duration::from_secs(60), None).map(drop),
                    _ => rw.read().map(drop),
                })
            })
            .collect();
        await_waiting(&waiting, 3);
        waiting.cancel_all_waits();
        for result in join_all(threads, Duration::from_secs(10), "a wait of the client") {
            assert!(is_cancelled(&result), "{layout:?}: {result:?}");
        }
        assert_eq!(waiting.stats().cancelled, 3);
        // A wait that starts afterwards waits as usual, and gets the lock when it is free.
        let later = {
            let lock = waiting.lock(&name);
            thread::spawn(move || {
                lock.try_lock(Duration::from_secs(20), None)
                    .map(|g| g.is_some())
            })
        };
        await_waiting(&waiting, 1);
        drop(held);
        assert!(later.join().unwrap().unwrap(), "{layout:?}: the later wait");
        drop(write);
    }
}

/// A release hands the lock to a waiter just as that waiter's wait is cancelled: the waiter
/// either holds it (and returns it) or hands it on; either way the next one gets it at once,
/// not after the hand-over's lease (the 30 s watchdog here).
#[test]
fn a_cancel_racing_a_hand_over_holds_or_hands_on_and_never_strands_the_lock() {
    let server = RedisServer::start();
    const ROUNDS: usize = 24;
    for layout in LAYOUTS {
        let (a, b, checker) = (
            client(&server, layout),
            client(&server, layout),
            client(&server, layout),
        );
        let (mut held_by_waiter, mut cancelled) = (0, 0);
        for round in 0..ROUNDS {
            let name = unique("cancel-race");
            // Every other round the holder and the waiter share a client: in Redisson's
            // layout that release hands over inside the client.
            let waiter_client = if round % 2 == 0 { &a } else { &b };
            let guard = a.lock(&name).lock_owned().unwrap();
            let cancel = Cancel::new();
            let start = Arc::new(Barrier::new(2));
            let waiter = {
                let lock = waiter_client.lock(&name).cancel_on(&cancel);
                thread::spawn(move || lock.lock().map(|g| g.is_lost()))
            };
            await_waiting(waiter_client, 1);
            let releaser = {
                let start = start.clone();
                thread::spawn(move || {
                    start.wait();
                    drop(guard);
                })
            };
            start.wait();
            // Spread the cancel over the release's round trip.
            thread::sleep(Duration::from_micros((round as u64 % 6) * 50));
            cancel.cancel();
            releaser.join().unwrap();
            match waiter.join().unwrap() {
                Ok(lost) => {
                    assert!(!lost, "{layout:?} round {round}: handed a lost hold");
                    held_by_waiter += 1;
                }
                Err(Error::Cancelled { .. }) => cancelled += 1,
                Err(e) => panic!("{layout:?} round {round}: {e}"),
            }
            let asked = Instant::now();
            let next = checker.lock(&name).try_lock(Duration::from_secs(10), None);
            let took = asked.elapsed();
            assert!(
                matches!(next, Ok(Some(_))),
                "{layout:?} round {round}: the lock was stranded ({next:?} after {took:?})"
            );
            assert!(
                took < Duration::from_secs(2),
                "{layout:?} round {round}: the next waiter waited {took:?}"
            );
        }
        println!(
            "{layout:?}: of {ROUNDS} races, the waiter held the lock {held_by_waiter} times and \
             was cancelled {cancelled} times"
        );
    }
}

/// The same race for a semaphore's permits and a read-write lock's write: a grant that meets
/// a cancel is either taken or given back, and the next asker gets it at once.
#[test]
fn a_cancel_racing_a_grant_of_permits_or_a_write_never_strands_it() {
    let server = RedisServer::start();
    const ROUNDS: usize = 12;
    for layout in LAYOUTS {
        let (a, b, checker) = (
            client(&server, layout),
            client(&server, layout),
            client(&server, layout),
        );
        let mut outcomes = [0usize; 2];
        for round in 0..ROUNDS {
            let name = unique("cancel-grant");
            let semaphore = round % 2 == 0;
            // The holder's hold, released on its own thread as the cancel comes.
            let held: Box<dyn FnOnce() + Send> = if semaphore {
                a.semaphore(&name).set_permits(1).unwrap();
                let permits = a.semaphore(&name).acquire(1).unwrap();
                Box::new(move || permits.release().unwrap())
            } else {
                let (tx, rx) = std::sync::mpsc::channel::<()>();
                let (ready_tx, ready_rx) = std::sync::mpsc::channel();
                let rw = a.read_write_lock(&name);
                // A write guard is not Send: hold it on a thread of its own.
                let holder = thread::spawn(move || {
                    let write = rw.write().unwrap();
                    ready_tx.send(()).unwrap();
                    rx.recv().unwrap();
                    drop(write);
                });
                ready_rx.recv().unwrap();
                Box::new(move || {
                    tx.send(()).unwrap();
                    holder.join().unwrap();
                })
            };
            let cancel = Cancel::new();
            let waiter = {
                let (semaphore_handle, rw) = (
                    b.semaphore(&name).cancel_on(&cancel),
                    b.read_write_lock(&name).cancel_on(&cancel),
                );
                thread::spawn(move || {
                    if semaphore {
                        semaphore_handle.acquire(1).map(drop)
                    } else {
                        rw.write().map(drop)
                    }
                })
            };
            await_waiting(&b, 1);
            let start = Arc::new(Barrier::new(2));
            let releaser = {
                let start = start.clone();
                thread::spawn(move || {
                    start.wait();
                    held();
                })
            };
            start.wait();
            thread::sleep(Duration::from_micros((round as u64 % 6) * 50));
            cancel.cancel();
            releaser.join().unwrap();
            match waiter.join().unwrap() {
                Ok(()) => outcomes[0] += 1,
                Err(Error::Cancelled { .. }) => outcomes[1] += 1,
                Err(e) => panic!("{layout:?} round {round}: {e}"),
            }
            let asked = Instant::now();
            let next = if semaphore {
                checker
                    .semaphore(&name)
                    .try_acquire(1, Duration::from_secs(10), None)
                    .map(|p| p.is_some())
            } else {
                checker
                    .read_write_lock(&name)
                    .try_write(Duration::from_secs(10), None)
                    .map(|w| w.is_some())
            };
            let took = asked.elapsed();
            let what = if semaphore { "the permit" } else { "the write" };
            assert!(
                matches!(next, Ok(true)),
                "{layout:?} round {round}: {what} was stranded ({next:?} after {took:?})"
            );
            assert!(
                took < Duration::from_secs(2),
                "{layout:?} round {round}: {what} came after {took:?}"
            );
        }
        println!(
            "{layout:?}: of {ROUNDS} races, the waiter took the grant {} times and was cancelled {} times",
            outcomes[0], outcomes[1]
        );
    }
}

#[test]
fn every_kind_of_wait_cancelled_by_cancel_all_waits_counts_once_in_stats() {
    let server = RedisServer::start();
    for layout in LAYOUTS {
        let name = unique("cancel-count");
        let (holder, waiting) = (client(&server, layout), client(&server, layout));
        let lock = holder.lock(&format!("{name}-lock")).lock().unwrap();
        let write = holder
            .read_write_lock(&format!("{name}-rw"))
            .write()
            .unwrap();
        let semaphore = holder.semaphore(&format!("{name}-sem"));
        semaphore.set_permits(1).unwrap();
        let permit = semaphore.acquire(1).unwrap();
        let latch = holder.count_down_latch(&format!("{name}-latch"));
        assert!(latch.try_set_count(1).unwrap());
        let spun = holder.lock(&format!("{name}-spin")).lock().unwrap();
        // The multi-lock's second and third members are busy: it waits for one member at a
        // time, and its cancel must count as one wait, not one per member.
        let m2 = holder.lock(&format!("{name}-m2")).lock().unwrap();
        let m3 = holder.lock(&format!("{name}-m3")).lock().unwrap();

        type Wait = Box<dyn FnOnce() -> redlatch::Result<()> + Send>;
        let c = &waiting;
        let waits: Vec<(&str, Wait)> = vec![
            ("lock", {
                let h = c.lock(&format!("{name}-lock"));
                Box::new(move || h.lock().map(drop))
            }),
            ("read", {
                let h = c.read_write_lock(&format!("{name}-rw"));
                Box::new(move || h.read().map(drop))
            }),
            ("semaphore", {
                let h = c.semaphore(&format!("{name}-sem"));
                Box::new(move || h.acquire(1).map(drop))
            }),
            ("latch", {
                let h = c.count_down_latch(&format!("{name}-latch"));
                Box::new(move || h.wait(Duration::from_secs(60)).map(drop))
            }),
            ("counting semaphore", {
                // No permits at all: the wait has nothing to take.
                let h = c.counting_semaphore(&format!("{name}-counting"));
                Box::new(move || h.acquire(1))
            }),
            ("multi-lock", {
                let h = c.multi_lock(&[
                    &format!("{name}-m1"),
                    &format!("{name}-m2"),
                    &format!("{name}-m3"),
                ]);
                Box::new(move || h.lock().map(drop))
            }),
            ("spin lock", {
                let h = c.spin_lock(&format!("{name}-spin"));
                Box::new(move || h.lock().map(drop))
            }),
        ];
        let kinds: Vec<&str> = waits.iter().map(|(k, _)| *k).collect();
        let threads: Vec<_> = waits
            .into_iter()
            .map(|(_, wait)| thread::spawn(wait))
            .collect();
        // Every kind but the spin lock waits on the subscriber.
        await_waiting(&waiting, kinds.len() as u64 - 1);
        thread::sleep(Duration::from_millis(50)); // the spin lock into its backoff
        waiting.cancel_all_waits();
        let ended = join_all(threads, Duration::from_secs(10), "a cancelled wait");
        for (kind, result) in kinds.iter().zip(ended) {
            assert!(is_cancelled(&result), "{layout:?} {kind}: {result:?}");
        }
        let stats = waiting.stats();
        assert_eq!(
            stats.cancelled,
            kinds.len() as u64,
            "{layout:?}: one cancelled wait of each of {kinds:?}: {stats}"
        );
        assert_eq!(stats.timeouts, 0, "{layout:?}: {stats}");
        drop((lock, write, permit, spun, m2, m3));
    }
}

#[test]
fn a_wait_on_a_handle_cancelled_beforehand_counts_as_cancelled() {
    let server = RedisServer::start();
    for layout in LAYOUTS {
        let name = unique("cancel-before");
        let c = client(&server, layout);
        let cancel = Cancel::new();
        cancel.cancel();
        let results = [
            c.lock(&name).cancel_on(&cancel).lock().map(drop),
            c.spin_lock(&name).cancel_on(&cancel).lock().map(drop),
            c.count_down_latch(&name)
                .cancel_on(&cancel)
                .wait(Duration::from_secs(1))
                .map(drop),
            c.counting_semaphore(&name).cancel_on(&cancel).acquire(1),
            c.multi_lock(&[&format!("{name}-a"), &format!("{name}-b")])
                .cancel_on(&cancel)
                .lock()
                .map(drop),
        ];
        for (i, result) in results.iter().enumerate() {
            assert!(is_cancelled(result), "{layout:?} #{i}: {result:?}");
        }
        assert_eq!(c.stats().cancelled, results.len() as u64, "{layout:?}");
    }
}
