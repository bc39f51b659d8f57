//! The options Redisson users tune, against a real redis-server: a name mapper in both layouts,
//! the watchdog's batch size, the Redisson fair lock's wait timeout, the spin lock's backoff,
//! and bad values for each.

mod support;

use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redlatch::{Client, Error, Layout};
use support::{RedisServer, command_calls, eventually, unique};

fn exists(admin: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query(admin).unwrap()
}

#[test]
fn a_name_mapper_maps_every_kind_in_both_layouts() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("mapped");
    for layout in [Layout::Redlatch, Layout::Redisson] {
        let mapped = Client::builder(&server.url())
            .layout(layout)
            .name_mapper(|n| format!("billing:{n}"))
            .build()
            .unwrap();
        let plain = Client::builder(&server.url())
            .layout(layout)
            .build()
            .unwrap();
        let stored = format!("billing:{name}");
        let (lock_key, rw_key) = match layout {
            Layout::Redisson => (stored.clone(), stored.clone()),
            _ => (
                format!("redlatch:{{{stored}}}"),
                format!("redlatch:{{{stored}}}:rwlock"),
            ),
        };
        let guard = mapped.lock(&name).lock().unwrap();
        assert_eq!(
            guard.name(),
            stored,
            "{layout:?}: the handle names the stored name"
        );
        assert!(exists(&mut admin, &lock_key), "{layout:?}: no {lock_key}");
        // The same lock to a client that names it by its stored name, and not the plain name.
        assert!(plain.lock(&stored).is_locked().unwrap());
        assert!(!plain.lock(&name).is_locked().unwrap());
        assert!(
            plain
                .lock(&stored)
                .try_lock(Duration::ZERO, None)
                .unwrap()
                .is_none()
        );
        drop(guard);
        // The fair lock and the spin lock are that lock too.
        let fair = mapped.fair_lock(&name).lock().unwrap();
        assert!(
            plain.lock(&stored).is_locked().unwrap(),
            "{layout:?}: fair lock"
        );
        drop(fair);
        let spun = mapped.spin_lock(&name).lock().unwrap();
        assert!(
            plain.lock(&stored).is_locked().unwrap(),
            "{layout:?}: spin lock"
        );
        drop(spun);
        if layout == Layout::Redlatch {
            let write = mapped.read_write_lock(&name).write().unwrap();
            assert!(exists(&mut admin, &rw_key), "{layout:?}: no {rw_key}");
            drop(write);
        }
        // The operator's view follows the mapper too.
        let latch = mapped.count_down_latch(&format!("{name}-l"));
        assert!(latch.try_set_count(2).unwrap());
        assert_eq!(
            plain
                .count_down_latch(&format!("billing:{name}-l"))
                .count()
                .unwrap(),
            2
        );
        assert_eq!(latch.count_down().unwrap(), 1);
        latch.count_down().unwrap();
    }
    // A mapper that maps to nothing is refused when the handle is used, never sent.
    let empty = Client::builder(&server.url())
        .name_mapper(|_| String::new())
        .build()
        .unwrap();
    assert!(matches!(
        empty.lock("x").try_lock(Duration::ZERO, None),
        Err(Error::InvalidArgument(_))
    ));
}

/// The renewal thread renews its holds `watchdog_batch_size` to a script call: counted as
/// script calls against holds renewed, over about ten renewal rounds.
#[test]
fn the_watchdog_renews_in_batches_of_the_size_asked_for() {
    const HOLDS: usize = 6;
    let server = RedisServer::start();
    let mut admin = server.admin();
    for (batch, calls_per_round) in [(2usize, 3u64), (500, 1)] {
        let client = Client::builder(&server.url())
            .watchdog_timeout(Duration::from_millis(600))
            .watchdog_batch_size(batch)
            .build()
            .unwrap();
        let name = unique("batch");
        let guards: Vec<_> = (0..HOLDS)
            .map(|i| client.lock(&format!("{name}-{i}")).lock().unwrap())
            .collect();
        thread::sleep(Duration::from_millis(250)); // past the first round
        let (calls_before, renewed_before) = (
            command_calls(&mut admin, "evalsha"),
            client.stats().renewals_ok,
        );
        thread::sleep(Duration::from_secs(2));
        let (calls, renewed) = (
            command_calls(&mut admin, "evalsha") - calls_before,
            client.stats().renewals_ok - renewed_before,
        );
        let rounds = renewed / HOLDS as u64;
        println!("batch {batch}: {calls} script calls renewed {renewed} holds ({rounds} rounds)");
        assert!(rounds >= 5, "batch {batch}: only {rounds} rounds");
        // A round in progress at either end of the window may count on one side only.
        let expected = rounds * calls_per_round;
        assert!(
            calls.abs_diff(expected) <= 2 * calls_per_round,
            "batch {batch}: {calls} calls for {rounds} rounds, expected about {expected}"
        );
        drop(guards);
    }
    for bad in [0, 5001] {
        let built = Client::builder(&server.url())
            .watchdog_batch_size(bad)
            .build();
        assert!(matches!(built, Err(Error::InvalidArgument(_))), "{bad}");
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A waiter of Redisson's fair lock that waits without a deadline keeps its place for the
/// client's `fair_wait_timeout` past the holder's lease: its deadline in
/// `redisson_lock_timeout:{name}`, as Java's `fairLockWaitTimeout` sets it.
#[test]
fn the_fair_locks_wait_timeout_sets_an_unbounded_waiters_deadline() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    for (timeout, expected) in [(Some(Duration::from_secs(7)), 7_000i64), (None, 300_000)] {
        let mut builder = Client::builder(&server.url()).layout(Layout::Redisson);
        if let Some(timeout) = timeout {
            builder = builder.fair_wait_timeout(timeout);
        }
        let client = builder.build().unwrap();
        let name = unique("fair-timeout");
        let holder = client.fair_lock(&name).lock_owned().unwrap();
        let waiter = {
            let lock = client.fair_lock(&name);
            thread::spawn(move || lock.lock().map(drop))
        };
        let zset = format!("redisson_lock_timeout:{{{name}}}");
        let deadline = || -> Option<i64> {
            let entries: Vec<(String, i64)> = redis::cmd("ZRANGE")
                .arg(&zset)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(&mut server.admin())
                .unwrap();
            entries.first().map(|(_, score)| *score)
        };
        assert!(eventually(Duration::from_secs(5), || deadline().is_some()));
        let left = deadline().unwrap() - now_ms();
        let lease = support::pttl(&mut admin, &name);
        // Java's rule: the holder's remaining lease, plus the wait timeout.
        let beyond_lease = left - lease;
        println!(
            "fair_wait_timeout {timeout:?}: the waiter's place lasts {beyond_lease} ms past the lease"
        );
        assert!(
            (beyond_lease - expected).abs() < 1500,
            "{timeout:?}: {beyond_lease} ms past the lease, expected about {expected}"
        );
        drop(holder);
        waiter.join().unwrap().unwrap();
    }
    let built = Client::builder(&server.url())
        .layout(Layout::Redisson)
        .fair_wait_timeout(Duration::ZERO)
        .build();
    assert!(matches!(built, Err(Error::InvalidArgument(_))));
}

/// The spin lock's backoff: a constant one attempts about every `delay` (each sleep between
/// half and all of it), an exponential one spaces its attempts out fast.
#[test]
fn the_spin_locks_backoff_is_constant_or_exponential_as_asked() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let name = unique("spin-backoff");
    let _held = client.lock(&name).lock().unwrap();
    let attempts_in = |lock: redlatch::SpinLock| {
        let waiter = thread::spawn(move || {
            lock.try_lock(Duration::from_secs(1), None)
                .map(|g| g.is_some())
        });
        let before = command_calls(&mut server.admin(), "evalsha");
        let started = Instant::now();
        let got = waiter.join().unwrap().unwrap();
        assert!(!got, "the lock is held");
        assert!(started.elapsed() < Duration::from_secs(3));
        command_calls(&mut server.admin(), "evalsha") - before
    };
    let constant = attempts_in(
        client
            .spin_lock(&name)
            .with_constant_backoff(Duration::from_millis(50)),
    );
    let exponential = attempts_in(client.spin_lock(&name).with_exponential_backoff(
        Duration::from_millis(2),
        Duration::from_millis(400),
        4.0,
    ));
    println!("in 1 s: {constant} attempts at a constant 50 ms, {exponential} from 2 ms times 4");
    // 1 s of sleeps of 25-50 ms; 2, 8, 32, 128, 400, 400 ms (halved at worst): 6 to 9.
    assert!((17..=45).contains(&constant), "constant: {constant}");
    assert!(
        (4..=12).contains(&exponential),
        "exponential: {exponential}"
    );
    for bad in [
        client.spin_lock(&name).with_exponential_backoff(
            Duration::from_millis(2),
            Duration::from_millis(8),
            0.5,
        ),
        client
            .spin_lock(&name)
            .with_constant_backoff(Duration::ZERO),
    ] {
        assert!(matches!(
            bad.try_lock(Duration::ZERO, None),
            Err(Error::InvalidArgument(_))
        ));
    }
}
