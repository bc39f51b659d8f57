//! The spin lock against a real redis-server: the same lock as `Lock` (exclusion and
//! re-entry across the two), waiting by backoff with no queue and no subscription, a `Lock`
//! waiter served by a spin holder's release, leases, bounded commands, bad input.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Client, Error, SpinLock};
use support::{RedisServer, command_calls, join_all, unique};

const ZERO: Duration = Duration::ZERO;

fn client(server: &RedisServer) -> Client {
    Client::open(&server.url()).unwrap()
}

fn exists(admin: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query(admin).unwrap()
}

#[test]
fn handles_are_clone_send_and_sync() {
    fn check<T: Clone + Send + Sync>() {}
    check::<SpinLock>();
}

#[test]
fn a_spin_lock_and_a_lock_of_the_same_name_exclude_each_other_and_share_re_entry() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let name = unique("spin-same");
    let spin = a.spin_lock(&name);
    let guard = spin.lock().unwrap();
    assert!(b.lock(&name).try_lock(ZERO, None).unwrap().is_none());
    assert!(b.spin_lock(&name).try_lock(ZERO, None).unwrap().is_none());
    // The same thread re-enters through either handle: one hold, one token.
    let again = a
        .lock(&name)
        .try_lock(ZERO, None)
        .unwrap()
        .expect("re-entry");
    assert_eq!(again.fencing_token(), guard.fencing_token());
    assert_eq!(spin.hold_count().unwrap(), 2);
    drop(again);
    guard.unlock().unwrap();
    assert!(!spin.is_locked().unwrap());
    let held = b.lock(&name).lock().unwrap();
    assert!(a.spin_lock(&name).try_lock(ZERO, None).unwrap().is_none());
    drop(held);
    assert!(a.spin_lock(&name).try_lock(ZERO, None).unwrap().is_some());
}

#[test]
fn a_spinning_waiter_takes_no_place_and_no_subscription_and_gets_the_lock() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("spin-quiet");
    let held = a.lock(&name).lock().unwrap();
    let spin = b.spin_lock(&name);
    let waiter = thread::spawn(move || {
        let guard = spin.try_lock(Duration::from_secs(10), None).unwrap();
        (Instant::now(), guard.map(|g| g.fencing_token()))
    });
    thread::sleep(Duration::from_millis(500));
    let subscribed = support::pubsub_channels(&mut admin, "*");
    assert!(
        subscribed.is_empty(),
        "a spin waiter subscribed: {subscribed:?}"
    );
    let queued: bool = redis::cmd("EXISTS")
        .arg(format!("redlatch:{{{name}}}:queue"))
        .query(&mut admin)
        .unwrap();
    assert!(!queued, "a spin waiter queued");
    // Backoff, not a busy loop: at most one attempt per ms of the first 2 ms step, then
    // doubling to 128 ms, is a handful per second.
    let before = command_calls(&mut admin, "evalsha");
    thread::sleep(Duration::from_secs(1));
    let attempts = command_calls(&mut admin, "evalsha") - before;
    assert!(
        (3..=20).contains(&attempts),
        "{attempts} attempts in a second of spinning"
    );
    let token = held.fencing_token();
    let released = Instant::now();
    held.unlock().unwrap();
    let (got, new_token) = waiter.join().unwrap();
    assert!(new_token.is_some_and(|t| t > token));
    // At most one capped step (128 ms) after the release, plus the round trip.
    assert!(
        got - released < Duration::from_millis(400),
        "woke {:?} late",
        got - released
    );
}

#[test]
fn a_queued_lock_waiter_is_handed_the_lock_when_a_spin_holder_unlocks() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("to-lock-waiter");
    let held = client(&server).spin_lock(&name).lock().unwrap(); // 30 s watchdog lease
    let holder_token = held.fencing_token();

    let lock = client(&server).lock(&name);
    let queued = thread::spawn(move || {
        let guard = lock
            .try_lock(Duration::from_secs(20), None)
            .unwrap()
            .expect("acquired");
        let got = Instant::now();
        let token = guard.fencing_token();
        thread::sleep(Duration::from_millis(300));
        (got, token)
    });
    support::await_waiting(&mut admin, &name);
    assert!(exists(&mut admin, &format!("redlatch:{{{name}}}:queue")));

    // A spin waiter too: it must not take the lock from the queued waiter.
    let spin = client(&server).spin_lock(&name);
    let spinning = thread::spawn(move || {
        let guard = spin.try_lock(Duration::from_secs(20), None).unwrap();
        guard.map(|g| g.fencing_token())
    });
    thread::sleep(Duration::from_millis(200));

    let released = Instant::now();
    held.unlock().unwrap();
    let results = join_all(vec![queued], Duration::from_secs(10), "the Lock waiter");
    let (got, queued_token) = results[0];
    let after = got - released;
    assert!(
        after < Duration::from_secs(2),
        "the Lock waiter got it {after:?} after the release (lease: 30 s)"
    );
    assert!(queued_token > holder_token);
    let spun = join_all(vec![spinning], Duration::from_secs(10), "the spin waiter");
    let spun_token = spun[0].expect("the spin waiter got it after the Lock waiter");
    assert!(
        spun_token > queued_token,
        "the spin waiter went before the queued Lock waiter"
    );
}

#[test]
fn a_holder_that_never_releases_costs_its_lease_only() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let name = unique("spin-lease");
    let held = a
        .spin_lock(&name)
        .lock_with_lease(Duration::from_millis(300))
        .unwrap();
    let started = Instant::now();
    let guard = b
        .spin_lock(&name)
        .try_lock(Duration::from_secs(5), None)
        .unwrap();
    assert!(guard.is_some());
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "waited {:?}",
        started.elapsed()
    );
    assert!(held.is_lost());
    assert!(matches!(held.unlock(), Err(Error::LockLost { .. })));
}

#[test]
fn try_lock_waits_about_as_long_as_asked() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let name = unique("spin-timeout");
    let _held = a.lock(&name).lock().unwrap();
    let spin = b.spin_lock(&name);
    let started = Instant::now();
    assert!(spin.try_lock(ZERO, None).unwrap().is_none());
    assert!(started.elapsed() < Duration::from_millis(200));
    let started = Instant::now();
    assert!(
        spin.try_lock(Duration::from_millis(500), None)
            .unwrap()
            .is_none()
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_millis(800),
        "waited {waited:?} for 500 ms"
    );
}

#[test]
fn exclusion_and_bounded_commands_under_contention() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("spin-contend");
    let inside = Arc::new(AtomicI64::new(0));
    let before = command_calls(&mut admin, "evalsha") + command_calls(&mut admin, "eval");
    const THREADS: usize = 4;
    const ROUNDS: usize = 25;
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let client = client(&server);
            let inside = inside.clone();
            let name = name.clone();
            thread::spawn(move || {
                let spin = client.spin_lock(&name);
                let lock = client.lock(&name);
                let mut overlaps = 0;
                for round in 0..ROUNDS {
                    // One thread in four waits as a Lock: the two kinds mix.
                    let guard = if i == 0 && round % 2 == 0 {
                        lock.try_lock(Duration::from_secs(20), None).unwrap()
                    } else {
                        spin.try_lock(Duration::from_secs(20), None).unwrap()
                    }
                    .expect("acquired within 20 s");
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps += 1;
                    }
                    thread::sleep(Duration::from_millis(2));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().unwrap();
                }
                overlaps
            })
        })
        .collect();
    let overlaps: usize = join_all(handles, Duration::from_secs(120), "spinners")
        .into_iter()
        .sum();
    assert_eq!(overlaps, 0, "two holders at once");
    let scripts = command_calls(&mut admin, "evalsha") + command_calls(&mut admin, "eval") - before;
    let per_acquisition = scripts as f64 / (THREADS * ROUNDS) as f64;
    eprintln!("{per_acquisition:.1} script calls per acquisition");
    // A busy loop would make hundreds per acquisition; backoff keeps it to a few.
    assert!(
        per_acquisition < 15.0,
        "{per_acquisition:.1} script calls per acquisition"
    );
}

#[test]
fn bad_input_is_refused_before_any_io() {
    let server = RedisServer::start();
    let a = client(&server);
    let empty = a.spin_lock("");
    assert!(matches!(
        empty.try_lock(ZERO, None),
        Err(Error::InvalidArgument(_))
    ));
    let spin = a.spin_lock(&unique("spin-bad"));
    assert!(matches!(
        spin.try_lock(ZERO, Some(ZERO)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        spin.try_lock(Duration::MAX, None),
        Err(Error::InvalidArgument(_))
    ));
    let ms = Duration::from_millis;
    for (min, max) in [
        (ms(0), ms(10)),
        (ms(50), ms(10)),
        (ms(1), Duration::from_secs(7200)),
    ] {
        assert!(matches!(
            spin.clone().with_backoff(min, max).try_lock(ZERO, None),
            Err(Error::InvalidArgument(_))
        ));
    }
    let tuned = spin.with_backoff(ms(1), ms(5));
    assert!(tuned.try_lock(ZERO, None).unwrap().is_some());
}

#[test]
fn foreign_data_is_refused_and_left_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let a = client(&server);
    let name = unique("spin-foreign");
    let key = format!("redlatch:{{{name}}}");
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("mine")
        .query(&mut admin)
        .unwrap();
    match a
        .spin_lock(&name)
        .try_lock(Duration::from_millis(100), None)
    {
        Err(Error::WrongType { key: k }) => assert_eq!(k, key),
        other => panic!("expected WrongType, got {other:?}"),
    }
    let kept: String = redis::cmd("GET").arg(&key).query(&mut admin).unwrap();
    assert_eq!(kept, "mine");
}

#[test]
fn a_spin_waiter_gets_the_lock_when_the_holders_lease_runs_out() {
    let server = RedisServer::start();
    let name = unique("expiry");
    let holder = client(&server);
    let start = Instant::now();
    // A holder that never unlocks (as if it died): only the lease frees the lock.
    std::mem::forget(
        holder
            .lock(&name)
            .lock_with_lease(Duration::from_millis(300))
            .unwrap(),
    );
    // Backoff steps far longer than the lease: only the TTL in the busy reply can wake it.
    let spin = client(&server)
        .spin_lock(&name)
        .with_backoff(Duration::from_secs(10), Duration::from_secs(10));
    let guard = spin
        .try_lock(Duration::from_secs(5), None)
        .unwrap()
        .expect("acquired once the lease ran out");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(250),
        "acquired after {took:?}"
    );
    assert!(
        took < Duration::from_secs(1),
        "acquired {took:?} after a 300 ms lease"
    );
    assert!(!guard.is_lost());
}
