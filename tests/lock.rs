//! The lock's behaviour against a real redis-server: exclusion, re-entry, fencing, waiting,
//! leases, the watchdog, release on panic.

mod support;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Client, Error};
use support::{
    RedisServer, WITHDRAW_LUA, attempt_on_lock, command_calls, eventually, pttl, queued_owners,
    run_on_lock, unique,
};

fn client(server: &RedisServer) -> Client {
    Client::open(&server.url()).unwrap()
}

fn client_with_watchdog(server: &RedisServer, watchdog: Duration) -> Client {
    Client::builder(&server.url())
        .watchdog_timeout(watchdog)
        .build()
        .unwrap()
}

#[test]
fn mutual_exclusion_across_clients_and_threads_with_increasing_tokens() {
    let server = RedisServer::start();
    let name = unique("exclusion");
    const CLIENTS: usize = 3;
    const THREADS: usize = 3;
    const ROUNDS: usize = 15;
    let mut handles = Vec::new();
    for _ in 0..CLIENTS {
        let client = client(&server);
        for _ in 0..THREADS {
            let lock = client.lock(&name);
            let url = server.url();
            handles.push(thread::spawn(move || {
                let mut data = redis::Client::open(url).unwrap().get_connection().unwrap();
                for _ in 0..ROUNDS {
                    let guard = lock
                        .try_lock(Duration::from_secs(60), None)
                        .unwrap()
                        .expect("acquired");
                    // An unprotected read-modify-write: exact only under mutual exclusion.
                    let n: i64 = redis::cmd("GET")
                        .arg("counter")
                        .query::<Option<i64>>(&mut data)
                        .unwrap()
                        .unwrap_or(0);
                    thread::sleep(Duration::from_micros(300));
                    let _: () = redis::cmd("SET")
                        .arg("counter")
                        .arg(n + 1)
                        .query(&mut data)
                        .unwrap();
                    let _: () = redis::cmd("RPUSH")
                        .arg("tokens")
                        .arg(guard.fencing_token())
                        .query(&mut data)
                        .unwrap();
                    guard.unlock().unwrap();
                }
            }));
        }
    }
    for h in handles {
        h.join().unwrap();
    }
    let mut admin = server.admin();
    let counter: i64 = redis::cmd("GET").arg("counter").query(&mut admin).unwrap();
    assert_eq!(counter, (CLIENTS * THREADS * ROUNDS) as i64);
    let tokens: Vec<u64> = redis::cmd("LRANGE")
        .arg("tokens")
        .arg(0)
        .arg(-1)
        .query(&mut admin)
        .unwrap();
    assert_eq!(tokens.len(), CLIENTS * THREADS * ROUNDS);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens in acquisition order must increase: {tokens:?}"
    );
}

#[test]
fn reentry_counts_holds_and_keeps_the_token() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.lock(&unique("reentry"));
    let outer = lock.lock().unwrap();
    let first_token = outer.fencing_token();
    let inner = lock
        .try_lock(Duration::ZERO, Some(Duration::from_secs(5)))
        .unwrap()
        .unwrap();
    let innermost = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 3);
    assert!(lock.is_held_by_current_thread().unwrap());
    assert_eq!(outer.fencing_token(), inner.fencing_token());
    assert_eq!(outer.fencing_token(), innermost.fencing_token());

    // Another thread of the same client is another owner.
    let other = lock.clone();
    let seen = thread::spawn(move || {
        (
            other.hold_count().unwrap(),
            other.is_held_by_current_thread().unwrap(),
            other.try_lock(Duration::ZERO, None).unwrap().is_none(),
        )
    })
    .join()
    .unwrap();
    assert_eq!(seen, (0, false, true));

    drop(innermost);
    assert_eq!(lock.hold_count().unwrap(), 2);
    inner.unlock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(lock.is_locked().unwrap());
    outer.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
    assert_eq!(lock.hold_count().unwrap(), 0);

    // The next first acquisition gets a new token.
    let again = lock.lock().unwrap();
    assert!(again.fencing_token() > first_token);
}

#[test]
fn tokens_keep_increasing_after_the_lock_key_expired() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.lock(&unique("fence"));
    let first = lock.lock_with_lease(Duration::from_millis(50)).unwrap();
    let first_token = first.fencing_token();
    assert!(eventually(Duration::from_secs(5), || !lock
        .is_locked()
        .unwrap()));
    assert!(first.is_lost());
    let other_client = Client::open(&server.url()).unwrap();
    let second = other_client.lock(lock.name()).lock().unwrap();
    assert!(second.fencing_token() > first_token);
    assert!(matches!(first.unlock(), Err(Error::LockLost { .. })));
    assert!(
        lock.is_locked().unwrap(),
        "a stale guard must not release the new holder's lock"
    );
}

/// The scripts compare the fence with the clock as text when they can: a fence of fewer
/// digits is behind the clock, of more digits ahead of it, and one of as many digits compares
/// in digit order; leading zeros (never ours) fall back to comparing numbers. (A fence of
/// more digits than the clock is past 2^53, where Lua's numbers are no longer exact; the
/// clock gets there in the year 2255.)
#[test]
fn a_token_is_above_the_fence_and_the_clock_whatever_digits_the_fence_has() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = client(&server);
    let clock_us = |admin: &mut redis::Connection| -> u64 {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(admin).unwrap();
        s * 1_000_000 + us
    };
    let now = clock_us(&mut admin);
    let ahead = now + 1_000_000_000_000; // as many digits as the clock, larger
    // A lock's, a write's and permits' first acquisitions take the next token alike.
    for (kind, suffix) in [
        ("lock", ""),
        ("write", ":rwlock"),
        ("permits", ":semaphore"),
    ] {
        let name = unique("digits");
        let fence = format!("redlatch:{{{name}}}{suffix}:fence");
        if kind == "permits" {
            client.semaphore(&name).set_permits(1).unwrap();
        }
        let take = || -> (u64, Box<dyn FnOnce()>) {
            match kind {
                "lock" => {
                    let guard = client.lock(&name).lock().unwrap();
                    (
                        guard.fencing_token(),
                        Box::new(move || guard.unlock().unwrap()),
                    )
                }
                "write" => {
                    let guard = client.read_write_lock(&name).write().unwrap();
                    (
                        guard.fencing_token(),
                        Box::new(move || guard.unlock().unwrap()),
                    )
                }
                _ => {
                    let permits = client.semaphore(&name).acquire(1).unwrap();
                    (
                        permits.fencing_token(),
                        Box::new(move || permits.release().unwrap()),
                    )
                }
            }
        };
        for (fence_value, expect_fence_plus_one) in [
            (ahead.to_string(), true),
            ((now - 1_000_000).to_string(), false), // as many digits, smaller
            ((now / 10).to_string(), false),        // fewer digits
            (format!("000{}", now - 1_000_000), false), // leading zeros: smaller as a number
            (format!("000{ahead}"), true),          // leading zeros: larger as a number
        ] {
            let _: () = redis::cmd("SET")
                .arg(&fence)
                .arg(&fence_value)
                .query(&mut admin)
                .unwrap();
            let before = clock_us(&mut admin);
            let (token, release) = take();
            let value: u64 = fence_value.parse().unwrap();
            if expect_fence_plus_one {
                assert_eq!(token, value + 1, "{kind}: fence {fence_value}");
            } else {
                assert!(
                    token >= before && token > value,
                    "{kind}: fence {fence_value}: token {token} is not the clock",
                );
            }
            let stored: String = redis::cmd("GET").arg(&fence).query(&mut admin).unwrap();
            assert_eq!(stored, token.to_string(), "{kind}");
            release();
        }
    }
}

#[test]
fn try_lock_waits_about_as_long_as_asked() {
    let server = RedisServer::start();
    let holder_client = client(&server);
    let waiter_client = client(&server);
    let name = unique("wait");
    let _held = holder_client.lock(&name).lock().unwrap();
    let lock = waiter_client.lock(&name);
    for wait in [
        Duration::ZERO,
        Duration::from_millis(200),
        Duration::from_millis(700),
    ] {
        let start = Instant::now();
        assert!(lock.try_lock(wait, None).unwrap().is_none());
        let took = start.elapsed();
        assert!(
            took >= wait,
            "returned after {took:?}, before the {wait:?} wait was over"
        );
        assert!(
            took < wait + Duration::from_millis(500),
            "waited {took:?} for a {wait:?} wait"
        );
    }
}

#[test]
fn a_release_wakes_the_waiter_promptly_and_waiting_costs_few_commands() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let holder_client = client(&server);
    let waiter_client = client(&server);
    let name = unique("wake");
    let holder = holder_client.lock(&name).lock().unwrap(); // 30 s watchdog lease
    let lock = waiter_client.lock(&name);
    let waiter = thread::spawn(move || {
        let start = Instant::now();
        let guard = lock
            .try_lock(Duration::from_secs(20), None)
            .unwrap()
            .expect("acquired");
        (start.elapsed(), guard.fencing_token())
    });
    // Let the waiter subscribe and settle, then count what it does during a long wait.
    support::await_waiting(&mut admin, &name);
    let before = command_calls(&mut admin, "evalsha");
    thread::sleep(Duration::from_secs(2));
    let during = command_calls(&mut admin, "evalsha") - before;
    assert!(
        during <= 1,
        "a waiter polled: {during} script calls in 2 s of waiting"
    );

    let released = Instant::now();
    holder.unlock().unwrap();
    let (waited, _) = waiter.join().unwrap();
    let handoff = released.elapsed();
    assert!(
        handoff < Duration::from_secs(2),
        "the waiter took {handoff:?} to notice a release"
    );
    assert!(waited >= Duration::from_secs(2));
}

#[test]
fn a_fixed_lease_expires_and_its_stale_guard_changes_nothing() {
    let server = RedisServer::start();
    let a = client(&server);
    let b = client(&server);
    let name = unique("lease");
    let stale = a
        .lock(&name)
        .lock_with_lease(Duration::from_millis(300))
        .unwrap();
    assert!(!stale.is_lost());
    // (None if this thread stalled past the lease: a loaded machine must not fail the test.)
    let ttl = a.lock(&name).remaining_ttl().unwrap();
    assert!(ttl.is_none_or(|ttl| ttl <= Duration::from_millis(300)));

    // A waiter gets it once the lease ran out, with no release message at all.
    let start = Instant::now();
    let fresh = b
        .lock(&name)
        .try_lock(Duration::from_secs(5), None)
        .unwrap()
        .expect("acquired after expiry");
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(stale.is_lost());
    assert!(matches!(stale.check(), Err(Error::LockLost { .. })));
    assert!(fresh.fencing_token() > stale.fencing_token());
    assert!(matches!(stale.unlock(), Err(Error::LockLost { .. })));
    assert!(b.lock(&name).is_locked().unwrap());
    assert!(!fresh.is_lost());
}

#[test]
fn the_watchdog_renews_and_reports_a_force_unlocked_lock_lost() {
    let server = RedisServer::start();
    let client = client_with_watchdog(&server, Duration::from_millis(600));
    let lock = client.lock(&unique("watchdog"));
    let guard = lock.lock().unwrap();
    // Four leases long: only renewal keeps it.
    thread::sleep(Duration::from_millis(2400));
    assert!(lock.is_locked().unwrap());
    assert!(!guard.is_lost());
    assert!(lock.remaining_ttl().unwrap().unwrap() > Duration::from_millis(100));

    let other = Client::open(&server.url()).unwrap();
    assert!(other.lock(lock.name()).force_unlock().unwrap());
    assert!(
        eventually(Duration::from_secs(3), || guard.is_lost()),
        "renewal did not notice"
    );
    assert!(matches!(guard.check(), Err(Error::LockLost { .. })));
    // Re-entering a lost hold is refused, and the stale guard releases nothing.
    assert!(matches!(lock.lock(), Err(Error::LockLost { .. })));
    let taken = other.lock(lock.name()).lock().unwrap();
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
    assert!(other.lock(lock.name()).is_locked().unwrap());
    drop(taken);
    // Once the lost hold is gone, the thread may lock again.
    assert!(
        lock.try_lock(Duration::from_secs(1), None)
            .unwrap()
            .is_some()
    );
}

#[test]
fn renewal_never_shortens_a_longer_lease_taken_by_a_reentry() {
    let server = RedisServer::start();
    let client = client_with_watchdog(&server, Duration::from_millis(300));
    let lock = client.lock(&unique("long-reentry"));
    let _outer = lock.lock().unwrap();
    let _inner = lock.lock_with_lease(Duration::from_secs(3600)).unwrap();
    thread::sleep(Duration::from_millis(500)); // renewals ran
    let ttl = lock.remaining_ttl().unwrap().unwrap();
    assert!(
        ttl > Duration::from_secs(3000),
        "renewal shortened the lease to {ttl:?}"
    );
}

#[test]
fn force_unlock_wakes_every_waiter() {
    let server = RedisServer::start();
    let holder_client = client(&server);
    let waiters_client = client(&server);
    let name = unique("force");
    let _holder = holder_client.lock(&name).lock().unwrap();
    let waiters: Vec<_> = (0..3)
        .map(|_| support::spawn_waiter(waiters_client.lock(&name), Duration::from_secs(20)))
        .collect();
    let mut admin = server.admin();
    support::await_waiting(&mut admin, &name);
    let forced = Instant::now();
    assert!(holder_client.lock(&name).force_unlock().unwrap());
    for waiter in waiters {
        assert!(waiter.join().unwrap());
    }
    // Each waiter took it in turn (100 ms leases), long before the holder's 30 s lease.
    assert!(forced.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_panicking_holder_releases() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.lock(&unique("panic"));
    let in_thread = lock.clone();
    let result = thread::spawn(move || {
        let _guard = in_thread.lock().unwrap();
        panic!("boom");
    })
    .join();
    assert!(result.is_err());
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn script_flush_does_not_break_a_running_client() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = client(&server);
    let lock = client.lock(&unique("flush"));
    let guard = lock.lock().unwrap();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
    guard.unlock().unwrap();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
    let again = lock.try_lock(Duration::ZERO, None).unwrap();
    assert!(again.is_some());
}

/// How many waiters are queued in Redis for lock `name`.
fn queued(admin: &mut redis::Connection, name: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(format!("redlatch:{{{name}}}:queue"))
        .query(admin)
        .unwrap()
}

/// A waiter's work: wait up to 20 s for `lock` with `lease` (it expects a hand-over), hold it
/// for `hold`, release it.
fn handed_over_then_released(
    lock: redlatch::Lock,
    lease: Duration,
    hold: Duration,
) -> impl FnOnce() + Send + 'static {
    move || {
        let guard = lock
            .try_lock(Duration::from_secs(20), Some(lease))
            .unwrap()
            .expect("handed over");
        thread::sleep(hold);
        guard.unlock().unwrap();
    }
}

/// Starts one thread per `wait`, in order, each only once the one before it is in lock
/// `name`'s queue, so that they queue in that order.
fn queue_in_turn<F: FnOnce() + Send + 'static>(
    admin: &mut redis::Connection,
    name: &str,
    waits: impl IntoIterator<Item = F>,
) -> Vec<thread::JoinHandle<()>> {
    let mut waiters = Vec::new();
    for (i, wait) in waits.into_iter().enumerate() {
        waiters.push(thread::spawn(wait));
        assert!(eventually(Duration::from_secs(5), || queued(admin, name) == i + 1));
    }
    waiters
}

#[test]
fn waiters_in_different_clients_get_the_lock_in_arrival_order() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("fifo");
    let holder = client(&server);
    let held = holder.lock(&name).lock().unwrap();
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let waiters = queue_in_turn(
        &mut admin,
        &name,
        (0..4).map(|i| {
            let lock = client(&server).lock(&name);
            let order = order.clone();
            move || {
                let guard = lock
                    .try_lock(Duration::from_secs(20), None)
                    .unwrap()
                    .expect("acquired");
                order.lock().push(i);
                thread::sleep(Duration::from_millis(20));
                drop(guard);
            }
        }),
    );
    support::await_waiting(&mut admin, &name);
    held.unlock().unwrap();
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(
        *order.lock(),
        vec![0, 1, 2, 3],
        "hand-overs must follow arrival"
    );
    assert_eq!(queued(&mut admin, &name), 0, "the queue empties itself");
}

#[test]
fn a_hand_over_costs_the_new_holder_no_command() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("handover");
    let holder = client(&server);
    // Load the scripts first: a NOSCRIPT reply would count as a call too.
    holder
        .lock(&unique("warm"))
        .lock()
        .unwrap()
        .unlock()
        .unwrap();
    let held = holder.lock(&name).lock().unwrap();
    let base = command_calls(&mut admin, "evalsha");
    let lock = client(&server).lock(&name);
    let url = server.url();
    let waiter = thread::spawn(move || {
        let guard = lock.try_lock(Duration::from_secs(20), None).unwrap();
        // Count before this guard's own release runs.
        let mut admin = redis::Client::open(url).unwrap().get_connection().unwrap();
        let calls = command_calls(&mut admin, "evalsha");
        (guard.is_some(), calls)
    });
    // The waiter parks after two attempts: the one that queued it, and the one after its
    // (new) subscription was confirmed.
    let before = base + 2;
    assert!(eventually(Duration::from_secs(5), || command_calls(
        &mut admin, "evalsha"
    ) == before));
    held.unlock().unwrap();
    let (got, after) = waiter.join().unwrap();
    assert!(got);
    assert_eq!(
        after - before,
        1,
        "only the release ran: the waiter was handed the lock"
    );
    // The hand-over's mark lives no longer than the lease it handed over (the watchdog's
    // 30 s here), and its place left the queue.
    let mark_ttl: i64 = redis::cmd("PTTL")
        .arg(format!("redlatch:{{{name}}}:granted"))
        .query(&mut admin)
        .unwrap();
    assert!(
        (0..=30_000).contains(&mark_ttl),
        "the hand-over's mark lives {mark_ttl} ms"
    );
    assert_eq!(queued(&mut admin, &name), 0);
}

/// A release hands the lock over with a mark ("<owner> <token>") that lives the hand-over's
/// lease: it is what tells a hand-over nobody took up (given back) from one taken up. The
/// waiter queued for a short wait, far shorter than the lease, and a waiter queueing
/// afterwards with a shorter wait must not cut the mark short.
#[test]
fn a_hand_overs_grant_outlives_a_later_waiter_with_a_shorter_wait() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("grant-outlives-queue");
    let mark_key = format!("redlatch:{{{name}}}:granted");
    let held = client(&server).lock(&name).lock().unwrap(); // 30 s watchdog lease
    let lock = client(&server).lock(&name);
    let base = command_calls(&mut admin, "evalsha");
    let (token_tx, token_rx) = crossbeam_channel::bounded(1);
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
    let handed = thread::spawn(move || {
        // A place valid about 3.5 s (the wait plus the slack), handed over with the
        // watchdog's 30 s lease.
        let guard = lock
            .try_lock(Duration::from_millis(1500), None)
            .unwrap()
            .expect("handed over");
        token_tx.send(guard.fencing_token()).unwrap();
        let _ = done_rx.recv_timeout(Duration::from_secs(30));
    });
    let queue_key = format!("redlatch:{{{name}}}:queue");
    assert!(eventually(Duration::from_secs(5), || redis::cmd("ZCARD")
        .arg(&queue_key)
        .query::<usize>(&mut admin)
        .unwrap()
        == 1));
    // And parked: released before, the waiter takes the lock up with a round trip, which
    // deletes the mark.
    support::await_parked(&mut admin, base);
    held.unlock().unwrap();
    let token = token_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let owner = queued_owners(&mut admin, &name);
    assert!(
        owner.is_empty(),
        "the hand-over took its place out of the queue"
    );
    let mark = |admin: &mut redis::Connection| -> Option<String> {
        redis::cmd("GET").arg(&mark_key).query(admin).unwrap()
    };
    let pttl = |admin: &mut redis::Connection| -> i64 {
        redis::cmd("PTTL").arg(&mark_key).query(admin).unwrap()
    };
    let granted = mark(&mut admin).expect("a hand-over's mark");
    assert!(granted.ends_with(&format!(" {token}")), "{granted}");
    assert!(pttl(&mut admin) > 25_000);

    // Another waiter queues, for a place valid about 2.3 s (its wait plus the slack), and
    // gives up.
    let queued_at = Instant::now();
    let other = client(&server).lock(&name);
    assert!(
        other
            .try_lock(Duration::from_millis(300), None)
            .unwrap()
            .is_none()
    );
    let left = pttl(&mut admin);
    assert!(left > 20_000, "the grant's terms now expire in {left} ms");
    // Past that place's expiry, the mark is still there.
    thread::sleep(Duration::from_secs(3).saturating_sub(queued_at.elapsed()));
    assert_eq!(mark(&mut admin), Some(granted));

    done_tx.send(()).unwrap();
    handed.join().unwrap();
}

#[test]
fn an_uncontended_release_publishes_nothing() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let lock = client(&server).lock(&unique("quiet"));
    let before = command_calls(&mut admin, "publish");
    for _ in 0..5 {
        lock.lock().unwrap().unlock().unwrap();
    }
    assert_eq!(
        command_calls(&mut admin, "publish"),
        before,
        "nobody waited, yet a release published"
    );
}

#[test]
fn a_waiter_that_gives_up_leaves_the_queue_and_the_next_one_is_served() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("give-up");
    let holder = client(&server);
    let held = holder.lock(&name).lock().unwrap();
    let impatient = client(&server).lock(&name);
    let quitter = thread::spawn(move || {
        impatient
            .try_lock(Duration::from_millis(300), None)
            .unwrap()
            .is_none()
    });
    assert!(eventually(Duration::from_secs(5), || queued(
        &mut admin, &name
    ) == 1));
    let patient = client(&server).lock(&name);
    let stayer = support::spawn_waiter(patient, Duration::from_secs(20));
    assert!(eventually(Duration::from_secs(5), || queued(
        &mut admin, &name
    ) == 2));
    assert!(quitter.join().unwrap(), "its time ran out");
    assert_eq!(queued(&mut admin, &name), 1, "it withdrew its place");
    let released = Instant::now();
    held.unlock().unwrap();
    assert!(stayer.join().unwrap());
    assert!(released.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_stale_or_forged_hand_over_is_not_believed() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("forged");
    let holder = client(&server);
    let held = holder.lock(&name).lock().unwrap();
    let lock = client(&server).lock(&name);
    let waiter = thread::spawn(move || {
        let guard = lock.try_lock(Duration::from_secs(20), None).unwrap();
        guard.map(|g| g.fencing_token())
    });
    assert!(eventually(Duration::from_secs(5), || queued(
        &mut admin, &name
    ) == 1));
    support::await_waiting(&mut admin, &name);
    let owner = queued_owners(&mut admin, &name).pop().unwrap();
    // A hand-over carrying the token the holder has: it cannot be news to the waiter.
    let _: i64 = redis::cmd("PUBLISH")
        .arg(support::channel_of(&name))
        .arg(format!("grant {} 30000 {owner}", held.fencing_token()))
        .query(&mut admin)
        .unwrap();
    // Give a wrong return the time to happen: something not happening takes a window.
    thread::sleep(Duration::from_millis(300));
    assert!(
        !waiter.is_finished(),
        "the waiter believed a stale hand-over"
    );
    let holder_token = held.fencing_token();
    held.unlock().unwrap();
    let token = waiter.join().unwrap().expect("acquired for real");
    assert!(token > holder_token);
}

#[test]
fn a_release_never_hands_the_lock_to_its_own_leftover_place() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("self-grant");
    let holder = client(&server);
    let held = holder.lock(&name).lock().unwrap();
    let lock = client(&server).lock(&name);
    let (to_main, from_thread) = crossbeam_channel::bounded::<()>(0);
    let (to_thread, from_main) = crossbeam_channel::bounded::<()>(0);
    let worker = thread::spawn(move || {
        assert!(
            lock.try_lock(Duration::from_millis(300), None)
                .unwrap()
                .is_none()
        );
        to_main.send(()).unwrap();
        from_main.recv().unwrap(); // its place is back in the queue, as if never withdrawn
        let guard = lock.lock_with_lease(Duration::from_secs(60)).unwrap();
        guard.unlock().unwrap();
        lock.is_locked().unwrap()
    });
    assert!(eventually(Duration::from_secs(5), || queued(
        &mut admin, &name
    ) == 1));
    let owner = queued_owners(&mut admin, &name).pop().unwrap();
    from_thread.recv().unwrap();
    held.unlock().unwrap();
    let queue = format!("redlatch:{{{name}}}:queue");
    // The oldest place, valid for centuries, with a ten-minute hand-over lease.
    let _: () = redis::cmd("ZADD")
        .arg(&queue)
        .arg(1)
        .arg(format!("{owner} 600000 {}", 1u64 << 45))
        .query(&mut admin)
        .unwrap();
    to_thread.send(()).unwrap();
    assert!(
        !worker.join().unwrap(),
        "its own release handed the lock back to it"
    );
}

#[test]
fn a_hand_over_repeated_after_it_was_taken_up_frees_nothing() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("repeat-grant");
    let holder = client(&server);
    let held = holder.lock(&name).lock().unwrap();
    let lock = client(&server).lock(&name);
    let (got_it, main_knows) = crossbeam_channel::bounded::<u64>(0);
    let (checked_tx, check) = crossbeam_channel::bounded::<()>(0);
    let waiter = thread::spawn(move || {
        let guard = lock
            .try_lock(Duration::from_secs(20), None)
            .unwrap()
            .unwrap();
        got_it.send(guard.fencing_token()).unwrap();
        check.recv().unwrap(); // holds the lock until the repeat has had its chance
        (guard.is_lost(), lock.is_held_by_current_thread().unwrap())
    });
    assert!(eventually(Duration::from_secs(5), || queued(
        &mut admin, &name
    ) == 1));
    support::await_waiting(&mut admin, &name);
    let owner = queued_owners(&mut admin, &name).pop().unwrap();
    held.unlock().unwrap();
    let token = main_knows.recv().unwrap();
    // The same hand-over again (a duplicate, or forged): its thread is no longer waiting,
    // but it holds the lock with that token, so nothing may be given back.
    let _: i64 = redis::cmd("PUBLISH")
        .arg(support::channel_of(&name))
        .arg(format!("grant {token} 30000 {owner}"))
        .query(&mut admin)
        .unwrap();
    // Give a wrong give-back the time to happen: something not happening takes a window.
    thread::sleep(Duration::from_millis(300));
    checked_tx.send(()).unwrap();
    let (lost, still_held) = waiter.join().unwrap();
    assert!(!lost);
    assert!(still_held, "a repeated hand-over freed a lock in use");
}

#[test]
fn exclusion_holds_with_short_waits_leases_and_give_ups() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let server = RedisServer::start();
    let name = unique("churn");
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let acquisitions = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + Duration::from_secs(3);
    let mut threads = Vec::new();
    for c in 0..4 {
        let client = client_with_watchdog(&server, Duration::from_millis(600));
        for t in 0..4usize {
            let (lock, inside, overlaps, acquisitions) = (
                client.lock(&name),
                inside.clone(),
                overlaps.clone(),
                acquisitions.clone(),
            );
            threads.push(thread::spawn(move || {
                // Waits from "one attempt" to "plenty", so hand-overs race give-ups.
                let waits = [0u64, 1, 5, 20, 2000];
                let mut i = c * 4 + t;
                for _ in 0..10_000 {
                    if Instant::now() >= end {
                        break;
                    }
                    i += 1;
                    let lease = (i % 2 == 0).then(|| Duration::from_millis(300));
                    let wait = Duration::from_millis(waits[i % waits.len()]);
                    if let Some(guard) = lock.try_lock(wait, lease).unwrap() {
                        if inside.fetch_add(1, Ordering::SeqCst) != 0 && !guard.is_lost() {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        acquisitions.fetch_add(1, Ordering::SeqCst);
                        thread::sleep(Duration::from_micros(200));
                        inside.fetch_sub(1, Ordering::SeqCst);
                        let _ = guard.unlock();
                    }
                }
            }));
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    assert!(acquisitions.load(Ordering::SeqCst) > 100);
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two holders at once, neither told"
    );
}

#[test]
fn a_fence_outlives_its_last_lease_by_the_retention_then_goes_and_tokens_still_rise() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::builder(&server.url())
        .fence_retention(Duration::from_secs(1))
        .build()
        .unwrap();
    let name = unique("fence-retention");
    let fence = format!("redlatch:{{{name}}}:fence");
    let lock = client.lock(&name);
    let first = lock.lock_with_lease(Duration::from_millis(500)).unwrap();
    let token = first.fencing_token();
    let ttl = pttl(&mut admin, &fence);
    assert!(
        ttl > 1000 && ttl <= 1500,
        "fence PTTL {ttl} for a 500 ms lease"
    );
    first.unlock().unwrap();
    assert!(eventually(Duration::from_secs(3), || pttl(
        &mut admin, &fence
    ) == -2));
    let again = lock.lock().unwrap();
    assert!(
        again.fencing_token() > token,
        "tokens went back after the fence expired"
    );
    drop(again);
    // The kinds with shares keep theirs the same way.
    let rw = client.read_write_lock(&name);
    drop(rw.write().unwrap());
    let ttl = pttl(&mut admin, &format!("redlatch:{{{name}}}:rwlock:fence"));
    assert!(ttl > 0, "a read-write lock's fence without expiry ({ttl})");
}

#[test]
fn a_hold_longer_than_the_retention_keeps_its_fence() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_millis(600))
        .fence_retention(Duration::from_secs(1))
        .build()
        .unwrap();
    // Renewed by the watchdog for three retentions.
    let name = unique("fence-long-hold");
    let guard = client.lock(&name).lock().unwrap();
    thread::sleep(Duration::from_secs(3));
    assert!(!guard.is_lost());
    assert!(pttl(&mut admin, &format!("redlatch:{{{name}}}:fence")) > 0);
    guard.unlock().unwrap();
    // A re-entry with a lease longer than the first one's plus the retention.
    let name = unique("fence-long-reentry");
    let lock = client.lock(&name);
    let outer = lock.lock_with_lease(Duration::from_millis(200)).unwrap();
    let inner = lock.lock_with_lease(Duration::from_secs(4)).unwrap();
    thread::sleep(Duration::from_millis(2500));
    assert!(!inner.is_lost());
    inner.unlock().unwrap();
    outer
        .unlock()
        .expect("the fence went before the lease it fences");
}

#[test]
fn a_thread_that_queues_again_soon_finds_the_channel_subscribed_and_attempts_once() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let holder = client(&server);
    let waiting = client(&server);
    let name = unique("linger");
    let (to_main, from_waiter) = crossbeam_channel::unbounded();
    let (to_waiter, from_main) = crossbeam_channel::unbounded::<()>();
    let held = holder.lock(&name).lock().unwrap();
    let lock = waiting.lock(&name);
    let waiter = thread::spawn(move || {
        let first = lock.try_lock(Duration::from_secs(10), None).unwrap();
        assert!(first.is_some());
        drop(first);
        to_main.send(()).unwrap();
        from_main.recv().unwrap();
        lock.try_lock(Duration::from_secs(10), None)
            .unwrap()
            .is_some()
    });
    support::await_waiting(&mut admin, &name);
    held.unlock().unwrap();
    from_waiter
        .recv_timeout(Duration::from_secs(5))
        .expect("the first wait ended");
    let held = holder.lock(&name).lock().unwrap();
    let before = command_calls(&mut admin, "evalsha");
    to_waiter.send(()).unwrap();
    assert!(eventually(Duration::from_secs(5), || queued(
        &mut admin, &name
    ) == 1));
    thread::sleep(Duration::from_millis(200)); // a confirmation would have come by now
    let attempts = command_calls(&mut admin, "evalsha") - before;
    assert_eq!(
        attempts, 1,
        "the channel was still subscribed: one attempt, no second after a confirmation"
    );
    held.unlock().unwrap();
    assert!(waiter.join().unwrap());
    // With nobody waiting any more, the subscription goes after the linger.
    assert!(eventually(Duration::from_secs(5), || {
        support::pubsub_channels(&mut admin, &support::channel_of(&name)).is_empty()
    }));
}

/// Grants (channel, payload) seen by `pubsub`, subscribed to lock `name`'s channels, until
/// `n` came or 5 s passed.
fn grants_seen(pubsub: &mut redis::PubSub<'_>, n: usize) -> Vec<(String, String)> {
    let mut grants = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while grants.len() < n && Instant::now() < deadline {
        match pubsub.get_message() {
            Ok(message) => {
                let payload: String = message.get_payload().unwrap();
                if payload.starts_with("grant ") {
                    grants.push((message.get_channel_name().to_string(), payload));
                }
            }
            Err(e) if e.is_timeout() => {}
            Err(e) => panic!("watching the channels: {e}"),
        }
    }
    grants
}

/// A hand-over is published to the new holder's client alone, on its grant channel
/// (`<channel>:<client id>`), so that no other client's subscriber wakes for it. One for a
/// shorter lease than the released hold's goes on the lock's channel instead, so that every
/// waiter learns when it ends.
#[test]
fn a_hand_over_is_published_to_the_new_holders_client_alone_unless_its_lease_is_shorter() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("grant-channel");
    let channel = support::channel_of(&name);
    let mut watcher = server.admin();
    let mut pubsub = watcher.as_pubsub();
    pubsub.psubscribe(format!("{channel}*")).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();

    let holder = client(&server);
    let held = holder
        .lock(&name)
        .lock_with_lease(Duration::from_secs(10))
        .unwrap();
    // `a` asks for the holder's lease, `b` for a shorter one, and queues second.
    let (a, b) = (client(&server), client(&server));
    let waiters = queue_in_turn(
        &mut admin,
        &name,
        [(&a, 10), (&b, 1)].map(|(waiter, lease)| {
            let lease = Duration::from_secs(lease);
            handed_over_then_released(waiter.lock(&name), lease, Duration::from_millis(20))
        }),
    );
    support::await_waiting(&mut admin, &name);
    held.unlock().unwrap();
    support::join_all(waiters, Duration::from_secs(20), "a waiter");

    let grants = grants_seen(&mut pubsub, 2);
    assert_eq!(grants.len(), 2, "{grants:?}");
    let owner = |payload: &str| payload.split(' ').nth(3).unwrap().to_string();
    let client_of = |owner: &str| owner.split(':').next().unwrap().to_string();
    // The holder's 10 s to `a`'s 10 s: to `a`'s client alone.
    let (to_a, grant_a) = &grants[0];
    assert_eq!(*to_a, format!("{channel}:{}", client_of(&owner(grant_a))));
    // `a`'s 10 s to `b`'s 1 s: to everyone.
    let (to_b, grant_b) = &grants[1];
    assert_eq!(*to_b, channel, "{grant_b}");
    assert_ne!(client_of(&owner(grant_a)), client_of(&owner(grant_b)));
}

/// A waiter queues for a hand-over of the lease it asks for, but never longer than the
/// watchdog's timeout: one that dies in the queue holds a lock handed to it no longer than a
/// dead holder would. The client sends that hand-over lease only when it is not the lease
/// asked for (`acquire.lua` takes its absence for the lease), so both kinds are checked.
#[test]
fn a_waiter_queues_for_a_hand_over_of_its_lease_capped_by_the_watchdog() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("handover-lease");
    let held = client(&server).lock(&name).lock().unwrap();
    let waiter = client_with_watchdog(&server, Duration::from_secs(2));
    let waiters = queue_in_turn(
        &mut admin,
        &name,
        [600, 1].map(|lease| {
            let lease = Duration::from_secs(lease);
            handed_over_then_released(waiter.lock(&name), lease, Duration::ZERO)
        }),
    );
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("redlatch:{{{name}}}:queue"))
        .arg(0)
        .arg(-1)
        .query(&mut admin)
        .unwrap();
    let handover_leases: Vec<&str> = members
        .iter()
        .map(|m| m.rsplit(' ').nth(1).unwrap())
        .collect();
    assert_eq!(handover_leases, ["2000", "1000"], "{members:?}");
    held.unlock().unwrap();
    support::join_all(waiters, Duration::from_secs(20), "a waiter");
}

/// A later attempt of a wait that moves its place's validity on renames the place (its member
/// carries the validity). Run again with the old name, as a retry after its reply was lost
/// is, it finds the same place by its arrival and takes no second one; a withdrawal that
/// names the old place still takes it out.
#[test]
fn an_attempt_retried_after_a_lost_reply_keeps_one_place_in_the_queue() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("retried-place");
    let _held = client(&server).lock(&name).lock().unwrap();
    let owner = support::SCRIPT_OWNER;
    // Queue for 2 s, with a 30 s hand-over lease.
    let attempt = |admin: &mut redis::Connection, place: &str| -> Vec<i64> {
        attempt_on_lock(admin, &name, owner, "2000", place, "")
    };
    let first = attempt(&mut admin, "");
    assert_eq!(
        (first[0], first.len()),
        (0, 5),
        "busy, with a place: {first:?}"
    );
    let (arrival, valid) = (first[3], first[4]);
    assert_eq!(valid, 2000);
    assert_eq!(queued(&mut admin, &name), 1);

    // Past the first second, the place has less than the wait's 2 s left: moved on.
    thread::sleep(Duration::from_millis(1200));
    let named = format!("{arrival} {valid}");
    let moved = attempt(&mut admin, &named);
    assert_eq!(moved[3], arrival, "the same place in line");
    assert!(moved[4] > valid + 1000, "valid longer: {moved:?}");
    // The retry names the place by its old member.
    let retried = attempt(&mut admin, &named);
    assert_eq!(
        retried[3], arrival,
        "the retry found its place: {retried:?}"
    );
    assert_eq!(queued_owners(&mut admin, &name), [owner], "one place");

    // So does a withdrawal whose wait last heard the old name.
    let withdrawn: Vec<i64> = run_on_lock(
        &mut admin,
        WITHDRAW_LUA,
        &name,
        &[owner, "30000", "3600000", &named, "30000"],
    );
    assert_eq!(withdrawn, [0, 0]);
    assert_eq!(
        queued(&mut admin, &name),
        0,
        "the withdrawal left the place"
    );
}

/// A place that a failed wait left behind is voided by the owner's next attempt, whether
/// its arrival is known (a later attempt's reply named it) or not (the first attempt's reply
/// was lost, and the place is named by its terms alone), and whatever that attempt answers.
#[test]
fn an_owners_attempt_voids_the_places_its_failed_waits_left() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("voided-places");
    let held = client(&server).lock(&name).lock().unwrap();
    let owner = support::SCRIPT_OWNER;
    let other = "00000000-0000-4000-8000-000000000000:8";
    let queue = |admin: &mut redis::Connection, who: &str, wait_ms: &str| -> Vec<i64> {
        attempt_on_lock(admin, &name, who, wait_ms, "", "")
    };
    let known = queue(&mut admin, owner, "5000");
    queue(&mut admin, other, "5000");
    // A second place of the owner's, of a wait whose first attempt got no reply: a different
    // wait, so a different validity in its member.
    queue(&mut admin, owner, "7000");
    assert_eq!(queued(&mut admin, &name), 3);

    // The owner's attempt that finds the lock busy and does not queue voids both.
    let leftovers = format!("{} 30000 5000 0 30000 7000", known[3]);
    let busy = attempt_on_lock(&mut admin, &name, owner, "0", "", &leftovers);
    assert_eq!(busy[0], 0);
    assert_eq!(queued_owners(&mut admin, &name), [other]);

    // And one that takes the lock (free now, with the owner's leftover as the only place).
    let _: i64 = redis::cmd("ZREM")
        .arg(format!("redlatch:{{{name}}}:queue"))
        .arg(format!("{other} 30000 5000"))
        .query(&mut admin)
        .unwrap();
    drop(held);
    let _: i64 = redis::cmd("ZADD")
        .arg(format!("redlatch:{{{name}}}:queue"))
        .arg(1)
        .arg(format!("{owner} 30000 6000"))
        .query(&mut admin)
        .unwrap();
    assert_eq!(queued(&mut admin, &name), 1);
    let taken = attempt_on_lock(&mut admin, &name, owner, "0", "", "0 30000 6000");
    assert_eq!(taken[0], 1, "{taken:?}");
    assert_eq!(queued(&mut admin, &name), 0);
}

/// A wait without end queues for as long each time, so its first attempt's place has the
/// same member as a leftover of an earlier such wait: the ZADD takes that place over (at the
/// back), and voiding the leftover must not take the caller's new place out with it.
#[test]
fn a_first_attempt_keeps_its_place_when_a_leftover_had_the_same_terms() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("same-terms");
    let _held = client(&server).lock(&name).lock().unwrap();
    let owner = support::SCRIPT_OWNER;
    let attempt = |admin: &mut redis::Connection, leftovers: &str| -> Vec<i64> {
        attempt_on_lock(admin, &name, owner, "32000", "", leftovers)
    };
    let failed_wait = attempt(&mut admin, "");
    for leftovers in [
        format!("{} 30000 32000", failed_wait[3]),
        "0 30000 32000".to_string(),
    ] {
        let again = attempt(&mut admin, &leftovers);
        assert_eq!(again[0], 0);
        assert_eq!(
            queued_owners(&mut admin, &name),
            [owner],
            "{leftovers}: queued"
        );
    }
}

/// A leftover whose place a later attempt renamed (moved its validity on; that reply was
/// lost) is voided by its arrival, even when the owner's new first attempt takes a place
/// under the leftover's old name.
#[test]
fn a_renamed_leftover_goes_even_when_a_new_place_takes_its_old_name() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("renamed-leftover");
    let _held = client(&server).lock(&name).lock().unwrap();
    let owner = support::SCRIPT_OWNER;
    let attempt = |admin: &mut redis::Connection, place: &str, leftovers: &str| -> Vec<i64> {
        attempt_on_lock(admin, &name, owner, "2000", place, leftovers)
    };
    let first = attempt(&mut admin, "", "");
    let (arrival, valid) = (first[3], first[4]);
    thread::sleep(Duration::from_millis(1200));
    // Moves the place on; its reply is lost, and the wait fails remembering the old name.
    let moved = attempt(&mut admin, &format!("{arrival} {valid}"), "");
    assert!(moved[4] > valid);

    let again = attempt(&mut admin, "", &format!("{arrival} 30000 {valid}"));
    assert_eq!(again[0], 0);
    assert!(again[3] > arrival, "a new place at the back");
    let members: Vec<(String, i64)> = redis::cmd("ZRANGE")
        .arg(format!("redlatch:{{{name}}}:queue"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut admin)
        .unwrap();
    assert_eq!(
        members,
        [(format!("{owner} 30000 2000"), again[3])],
        "only the new place"
    );
}

/// A client whose losses arrive on the returned channel.
fn told_client(server: &RedisServer) -> (Client, std::sync::mpsc::Receiver<redlatch::LostLock>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let client = Client::builder(&server.url())
        .on_lock_lost(move |lost| {
            let _ = tx.lock().unwrap().send(lost.clone());
        })
        .build()
        .unwrap();
    (client, rx)
}

#[test]
fn extend_sets_the_lease_from_now_and_the_hold_outlives_the_old_one() {
    let server = RedisServer::start();
    let (a, told) = told_client(&server);
    let b = client(&server);
    let name = unique("extend");
    let key = format!("redlatch:{{{name}}}");
    let mut admin = server.admin();
    let guard = a
        .lock(&name)
        .lock_with_lease(Duration::from_millis(400))
        .unwrap();
    guard.extend(Duration::from_secs(5)).unwrap();
    let ttl = pttl(&mut admin, &key);
    assert!((4000..=5000).contains(&ttl), "PTTL {ttl}");
    assert!(guard.remaining_lease() > Duration::from_secs(4));
    // Well past the old lease: still ours, in Redis and here.
    thread::sleep(Duration::from_millis(700));
    assert!(!guard.is_lost());
    assert!(
        b.lock(&name)
            .try_lock(Duration::ZERO, None)
            .unwrap()
            .is_none()
    );
    assert!(a.lock(&name).is_held_by_current_thread().unwrap());

    // Set, not added: a shorter lease shortens it, and the expiry is announced at the new
    // end without anybody asking is_lost().
    guard.extend(Duration::from_millis(300)).unwrap();
    let ttl = pttl(&mut admin, &key);
    assert!((1..=300).contains(&ttl), "PTTL {ttl}");
    assert!(guard.remaining_lease() <= Duration::from_millis(300));
    let lost = told
        .recv_timeout(Duration::from_secs(3))
        .expect("the new end was announced");
    assert_eq!(lost.cause, redlatch::LossCause::LeaseExpired);
    assert!(guard.is_lost());
    // Lost is lost: no extension revives it, even were the key there.
    assert!(matches!(
        guard.extend(Duration::from_secs(5)),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(pttl(&mut admin, &key), -2);
}

#[test]
fn extend_after_a_force_unlock_is_lock_lost_and_recreates_nothing() {
    let server = RedisServer::start();
    let a = client(&server);
    let b = client(&server);
    let name = unique("extend-forced");
    let guard = a
        .lock(&name)
        .lock_with_lease(Duration::from_secs(10))
        .unwrap();
    assert!(b.lock(&name).force_unlock().unwrap());
    assert!(matches!(
        guard.extend(Duration::from_secs(30)),
        Err(Error::LockLost { .. })
    ));
    assert!(guard.is_lost());
    assert!(!b.lock(&name).is_locked().unwrap());
    assert_eq!(
        pttl(&mut server.admin(), &format!("redlatch:{{{name}}}")),
        -2
    );

    // Nor does it touch a newer hold of the same thread (another token).
    let lock = a.lock(&name);
    drop(guard);
    let newer = lock.lock_with_lease(Duration::from_secs(10)).unwrap();
    let owner = newer.owner_id().to_string();
    assert!(lock.is_held_by(&owner).unwrap());
    newer.extend(Duration::from_secs(20)).unwrap();
    assert!(lock.remaining_ttl().unwrap().unwrap() > Duration::from_secs(15));
}

#[test]
fn extend_refuses_a_watchdog_hold_and_leases_out_of_range() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.lock(&unique("extend-refused"));
    {
        let watchdog = lock.lock().unwrap();
        assert!(matches!(
            watchdog.extend(Duration::from_secs(5)),
            Err(Error::InvalidArgument(_))
        ));
    }
    let leased = lock.lock_with_lease(Duration::from_secs(10)).unwrap();
    for lease in [Duration::ZERO, Duration::from_micros(500), Duration::MAX] {
        assert!(
            matches!(leased.extend(lease), Err(Error::InvalidArgument(_))),
            "{lease:?}"
        );
    }
    // A re-entry without a lease puts the thread's hold under the watchdog.
    let reentry = lock.lock().unwrap();
    assert!(matches!(
        leased.extend(Duration::from_secs(5)),
        Err(Error::InvalidArgument(_))
    ));
    drop(reentry);
    drop(leased);
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn is_held_by_answers_for_any_owner_id() {
    let server = RedisServer::start();
    let a = client(&server);
    let b = client(&server);
    let name = unique("held-by");
    let lock = b.lock(&name);
    let a_here = a.current_thread_owner_id();
    assert!(!lock.is_held_by(&a_here).unwrap());
    let guard = a.lock(&name).lock().unwrap();
    assert_eq!(guard.owner_id(), a_here);
    // Another client's thread, asked from anywhere.
    assert!(lock.is_held_by(&a_here).unwrap());
    assert!(!lock.is_held_by(&b.current_thread_owner_id()).unwrap());
    let from_elsewhere = {
        let lock = lock.clone();
        let a_here = a_here.clone();
        thread::spawn(move || lock.is_held_by(&a_here).unwrap())
    };
    assert!(from_elsewhere.join().unwrap());
    drop(guard);
    assert!(!lock.is_held_by(&a_here).unwrap());

    // An owned guard is its own owner.
    let owned = a.lock(&name).lock_owned().unwrap();
    assert!(lock.is_held_by(owned.owner_id()).unwrap());
    assert!(!lock.is_held_by(&a_here).unwrap());
    assert!(!a.lock(&name).is_held_by_current_thread().unwrap());
    assert!(matches!(
        lock.is_held_by(""),
        Err(Error::InvalidArgument(_))
    ));
}
