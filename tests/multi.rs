//! MultiLock: several locks all or none, with one wait and one lease; no deadlock between
//! multi-locks over overlapping names in opposite orders.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Client, Error};
use support::topology::{await_replicas, master_and_replica};
use support::{RedisServer, command_calls, eventually, unique};

#[test]
fn free_locks_are_taken_in_one_call_and_released_together() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::open(&server.url()).unwrap();
    let other = Client::open(&server.url()).unwrap();
    let names = [unique("m-c"), unique("m-a"), unique("m-b")];
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let multi = client.multi_lock(&refs);
    let mut sorted = refs.clone();
    sorted.sort_unstable();
    assert_eq!(multi.names(), sorted, "taken in name order");
    // Load the script first: a NOSCRIPT reply would count as a call too.
    multi.lock().unwrap().unlock().unwrap();

    let before = command_calls(&mut admin, "evalsha");
    let guard = multi.try_lock(Duration::ZERO, None).unwrap().unwrap();
    assert_eq!(
        command_calls(&mut admin, "evalsha") - before,
        1,
        "one script call"
    );
    let tokens = guard.fencing_tokens();
    assert_eq!(tokens.len(), 3);
    for name in &refs {
        let lock = other.lock(name);
        assert!(lock.is_locked().unwrap());
        assert!(lock.try_lock(Duration::ZERO, None).unwrap().is_none());
    }
    assert!(!guard.is_lost());
    guard.unlock().unwrap();
    for name in &refs {
        assert!(!other.lock(name).is_locked().unwrap(), "{name} still held");
    }
    // Tokens keep increasing per lock.
    let again = multi.lock().unwrap();
    assert!(
        again
            .fencing_tokens()
            .iter()
            .zip(&tokens)
            .all(|(new, old)| new > old)
    );
}

#[test]
fn a_busy_or_foreign_member_leaves_the_others_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::open(&server.url()).unwrap();
    let holder = Client::open(&server.url()).unwrap();
    let (a, b, c) = (unique("x-a"), unique("x-b"), unique("x-c"));
    let multi = client.multi_lock(&[&a, &b, &c]);

    // Busy: a single attempt fails and takes nothing.
    let held = holder.lock(&b).lock().unwrap();
    assert!(multi.try_lock(Duration::ZERO, None).unwrap().is_none());
    let waited = Instant::now();
    assert!(
        multi
            .try_lock(Duration::from_millis(300), None)
            .unwrap()
            .is_none()
    );
    assert!(waited.elapsed() >= Duration::from_millis(300));
    assert!(
        !client.lock(&a).is_locked().unwrap(),
        "a kept after a failed wait"
    );
    assert!(!client.lock(&c).is_locked().unwrap());
    drop(held);

    // Foreign data under one member's key: refused, named, untouched, nothing else taken.
    let foreign = format!("redlatch:{{{c}}}");
    let _: () = redis::cmd("SET")
        .arg(&foreign)
        .arg("not a lock")
        .query(&mut admin)
        .unwrap();
    match multi.try_lock(Duration::from_secs(1), None) {
        Err(Error::WrongType { key }) => assert_eq!(key, foreign),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert!(!client.lock(&a).is_locked().unwrap());
    assert!(!client.lock(&b).is_locked().unwrap());
    let value: String = redis::cmd("GET").arg(&foreign).query(&mut admin).unwrap();
    assert_eq!(value, "not a lock");

    // A thread that holds a member cannot take the multi-lock (it would wait for itself).
    let single = client.lock(&a).lock().unwrap();
    assert!(matches!(
        multi.try_lock(Duration::from_secs(1), None),
        Err(Error::InvalidArgument(_))
    ));
    drop(single);
    assert!(matches!(
        client.multi_lock(&[]).try_lock(Duration::ZERO, None),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_waiter_gets_every_member_when_the_last_busy_one_is_released() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let holder = Client::open(&server.url()).unwrap();
    let (a, b) = (unique("w-a"), unique("w-b"));
    let held = holder.lock(&b).lock().unwrap();
    let multi = client.multi_lock(&[&a, &b]);
    let waiter = thread::spawn(move || {
        let guard = multi
            .try_lock(Duration::from_secs(10), Some(Duration::from_secs(5)))
            .unwrap()
            .expect("got them");
        let tokens = guard.fencing_tokens();
        guard.unlock().unwrap();
        tokens
    });
    let mut admin = server.admin();
    support::await_waiting(&mut admin, &b);
    let released = Instant::now();
    held.unlock().unwrap();
    let tokens = waiter.join().unwrap();
    assert_eq!(tokens.len(), 2);
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "the waiter was not woken by the release: {:?}",
        released.elapsed()
    );
}

#[test]
fn overlapping_multi_locks_in_opposite_orders_never_deadlock_or_overlap() {
    let server = RedisServer::start();
    let names = [unique("d-1"), unique("d-2"), unique("d-3")];
    let inside: Arc<Vec<AtomicBool>> = Arc::new((0..3).map(|_| AtomicBool::new(false)).collect());
    let overlaps = Arc::new(AtomicU64::new(0));
    // Every pair and all three, each asked for in both orders, plus single-lock users that
    // keep making one member busy while the others are free.
    let sets: [&[usize]; 8] = [
        &[0, 1],
        &[1, 0],
        &[1, 2],
        &[2, 1],
        &[0, 2],
        &[2, 0],
        &[0, 1, 2],
        &[2, 1, 0],
    ];
    let mut threads = Vec::new();
    for t in 0..sets.len() + 3 {
        let client = Client::open(&server.url()).unwrap();
        let idx: Vec<usize> = match sets.get(t) {
            Some(set) => set.to_vec(),
            None => vec![t - sets.len()],
        };
        let mine: Vec<String> = idx.iter().map(|&i| names[i].clone()).collect();
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        threads.push(thread::spawn(move || {
            let refs: Vec<&str> = mine.iter().map(String::as_str).collect();
            let multi = client.multi_lock(&refs);
            let mut rounds = 0;
            let end = Instant::now() + Duration::from_secs(3);
            while Instant::now() < end && rounds < 10_000 {
                let guard = multi.try_lock(Duration::from_secs(10), None).unwrap();
                let guard = guard.expect("a 10 s wait ran out: deadlocked?");
                for &i in &idx {
                    if inside[i].swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                }
                thread::sleep(Duration::from_micros(500));
                for &i in &idx {
                    inside[i].store(false, Ordering::SeqCst);
                }
                guard.unlock().unwrap();
                rounds += 1;
            }
            rounds
        }));
    }
    let total: u64 = support::join_all(threads, Duration::from_secs(40), "a thread (deadlock?)")
        .into_iter()
        .sum();
    assert!(total > 100, "too little happened: {total}");
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two holders of one lock"
    );
}

#[test]
fn a_member_taken_from_the_multi_lock_makes_the_guard_lost() {
    let server = RedisServer::start();
    let client = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let (a, b) = (unique("l-a"), unique("l-b"));
    let guard = client.multi_lock(&[&a, &b]).lock().unwrap();
    assert!(client.lock(&b).force_unlock().unwrap());
    assert!(
        eventually(Duration::from_secs(5), || guard.is_lost()),
        "the watchdog did not notice"
    );
    assert!(matches!(guard.check(), Err(Error::LockLost { name }) if name == b));
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
    assert!(
        !client.lock(&a).is_locked().unwrap(),
        "the other member stayed held"
    );
}

#[test]
fn a_multi_lock_waiting_for_a_member_holds_none_that_comes_after_it() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::open(&server.url()).unwrap();
    let others = Client::open(&server.url()).unwrap();
    let (a, b) = (unique("o-a"), unique("o-b")); // a sorts before b
    assert!(a < b);
    let held_b = others.lock(&b).lock().unwrap();
    let multi = client.multi_lock(&[&b, &a]);
    let waiter = thread::spawn(move || {
        multi
            .try_lock(Duration::from_secs(20), None)
            .unwrap()
            .map(|g| g.unlock())
    });
    support::await_waiting(&mut admin, &b); // a was free, b busy: it waits for b
    let held_a = others.lock(&a).lock().unwrap(); // now a is taken too
    held_b.unlock().unwrap(); // b is handed to the waiter, which then finds a busy
    support::await_waiting(&mut admin, &a);
    // It waits for a while holding b, which comes after a: it must have let b go, or a
    // thread holding a and waiting for b would wait for it forever.
    let b_free = eventually(Duration::from_secs(5), || {
        others
            .lock(&b)
            .try_lock(Duration::ZERO, None)
            .unwrap()
            .is_some()
    });
    assert!(b_free, "the waiter kept b while waiting for a");
    drop(held_a);
    assert!(waiter.join().unwrap().is_some());
}

#[test]
fn wait_for_replicas_applies_to_a_multi_lock_too() {
    // A master whose one replica went away after the client was built (build() refuses a
    // master without one): every acquisition must be refused with NotReplicated and leave
    // nothing held, whether one lock is taken or several at once.
    let (server, mut replica) = master_and_replica();
    let client = Client::builder(&server.url())
        .response_timeout(Duration::from_secs(1))
        .wait_for_replicas(1, Duration::from_millis(50))
        .build()
        .unwrap();
    replica.kill();
    await_replicas(&mut server.admin(), 0);
    let other = Client::open(&server.url()).unwrap();
    let (a, b) = (unique("r-a"), unique("r-b"));
    assert!(matches!(
        client.lock(&a).try_lock(Duration::ZERO, None),
        Err(Error::NotReplicated { .. })
    ));
    let multi = client.multi_lock(&[&a, &b]);
    match multi.try_lock(Duration::ZERO, None) {
        Err(Error::NotReplicated {
            acknowledged: 0,
            wanted: 1,
            ..
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    for name in [&a, &b] {
        assert!(!other.lock(name).is_locked().unwrap(), "{name} stayed held");
    }
}

#[test]
fn a_fixed_lease_member_that_ran_out_while_waiting_is_never_returned_as_held() {
    // The multi-lock waits for `a`, gets it, then waits for `b` longer than its fixed lease:
    // `a` runs out meanwhile and somebody else takes it. What the multi-lock returns must
    // hold every member.
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let holder = Client::open(&server.url()).unwrap();
    let (a, b) = (unique("f-a"), unique("f-b"));
    let held_a = holder.lock(&a).lock().unwrap();
    let held_b = holder.lock(&b).lock().unwrap();
    let multi = client.multi_lock(&[&a, &b]);
    let waiter = thread::spawn(move || {
        let guard = multi
            .try_lock(Duration::from_secs(10), Some(Duration::from_millis(300)))
            .unwrap();
        guard.map(|g| (g.is_lost(), g.fencing_tokens()))
    });
    thread::sleep(Duration::from_millis(200));
    drop(held_a); // hands `a` to the multi-lock, which then waits for `b` keeping `a`
    let thief = Client::open(&server.url()).unwrap();
    let a2 = a.clone();
    let stolen = thread::spawn(move || {
        let lock = thief.lock(&a2);
        // `a` is the multi-lock's now; once its lease ran out, this client takes it.
        let guard = loop {
            if let Some(g) = lock
                .try_lock(Duration::from_millis(50), Some(Duration::from_secs(5)))
                .unwrap()
            {
                break g;
            }
        };
        thread::sleep(Duration::from_secs(2));
        guard.unlock()
    });
    thread::sleep(Duration::from_millis(1000));
    drop(held_b); // hands `b` to the multi-lock
    let (lost, tokens) = waiter
        .join()
        .unwrap()
        .expect("both members came free within the wait");
    assert!(
        !lost,
        "returned holding a member it had lost: tokens {tokens:?}"
    );
    stolen.join().unwrap().unwrap();
}

/// A name given twice is refused, naming it, and nothing is taken: the caller meant two
/// locks, and would have held one.
#[test]
fn a_name_given_twice_is_refused_naming_it() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let (x, y) = (unique("twice-x"), unique("twice-y"));
    let multi = client.multi_lock(&[&x, &y, &x]);
    for result in [
        multi
            .try_lock(Duration::from_secs(1), None)
            .map(|g| g.is_some()),
        multi.lock().map(|_| true),
    ] {
        match result {
            Err(Error::InvalidArgument(message)) => {
                assert!(message.contains(&format!("{x:?} twice")), "{message}")
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
    assert!(!client.lock(&x).is_locked().unwrap() && !client.lock(&y).is_locked().unwrap());
    // Each name once is fine.
    let guard = client.multi_lock(&[&x, &y]).lock().unwrap();
    assert_eq!(guard.fencing_tokens().len(), 2);
}
