//! The owned lock guard against a real redis-server: a hold of one acquisition rather than of
//! a thread, for pooled worker threads. It moves between threads, never re-enters, is renewed,
//! reports its loss, shares one queue and one fencing counter with the thread's guards, and
//! every guard kind names the owner id Redis keeps.

mod support;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::unbounded;
use redlatch::{Client, Error, HoldKind, LossCause, OwnedLockGuard};
use support::{RedisServer, eventually, join_all, queued_owners, unique};

fn client(server: &RedisServer) -> Client {
    Client::open(&server.url()).unwrap()
}

fn lock_key(name: &str) -> String {
    format!("redlatch:{{{name}}}")
}

/// The fields of hash `key`, sorted.
fn hkeys(admin: &mut redis::Connection, key: &str) -> Vec<String> {
    let mut fields: Vec<String> = redis::cmd("HKEYS").arg(key).query(admin).unwrap();
    fields.sort();
    fields
}

fn exists(admin: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query(admin).unwrap()
}

/// Tries `acquire` with a short wait and checks that it waited it out, empty-handed.
fn waits_in_vain<T: std::fmt::Debug>(what: &str, acquire: impl FnOnce(Duration) -> Option<T>) {
    let wait = Duration::from_millis(250);
    let started = Instant::now();
    let got = acquire(wait);
    assert!(got.is_none(), "{what} re-entered: {got:?}");
    assert!(
        started.elapsed() >= wait - Duration::from_millis(20),
        "{what} gave up after {:?}, before its wait",
        started.elapsed()
    );
}

#[test]
fn an_owned_guard_moves_to_another_thread_and_is_released_there() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = client(&server);
    let name = unique("moved");
    let lock = client.lock(&name);

    let guard = lock.lock_owned().unwrap();
    assert_eq!(hkeys(&mut admin, &lock_key(&name)), [guard.owner_id()]);
    let unlocked = thread::spawn(move || guard.unlock());
    join_all(
        vec![unlocked],
        Duration::from_secs(10),
        "the unlocking thread",
    )
    .remove(0)
    .unwrap();
    assert!(!exists(&mut admin, &lock_key(&name)), "released in Redis");

    // Dropped on the other thread releases as well.
    let guard = lock
        .try_lock_owned(Duration::from_secs(1), None)
        .unwrap()
        .expect("free");
    let dropped = thread::spawn(move || drop(guard));
    join_all(
        vec![dropped],
        Duration::from_secs(10),
        "the dropping thread",
    );
    assert!(!exists(&mut admin, &lock_key(&name)), "released in Redis");
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn neither_kind_of_guard_re_enters_the_other_nor_an_owned_one_itself() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.lock(&unique("no-reentry"));

    let owned = lock.lock_owned().unwrap();
    waits_in_vain("a second owned acquisition", |wait| {
        lock.try_lock_owned(wait, None).unwrap()
    });
    waits_in_vain("the thread's acquisition", |wait| {
        lock.try_lock(wait, None).unwrap()
    });
    assert!(lock.try_lock(Duration::ZERO, None).unwrap().is_none());
    assert!(lock.try_lock_owned(Duration::ZERO, None).unwrap().is_none());
    // An owned hold is nobody's thread's.
    assert!(lock.is_locked().unwrap());
    assert!(!lock.is_held_by_current_thread().unwrap());
    assert_eq!(lock.hold_count().unwrap(), 0);
    // A MultiLock waits for it as for another thread, rather than refusing a re-entry.
    let other = unique("no-reentry-other");
    let multi = client.multi_lock(&[lock.name(), other.as_str()]);
    assert!(
        multi
            .try_lock(Duration::from_millis(200), None)
            .unwrap()
            .is_none()
    );
    owned.unlock().unwrap();

    let mine = lock.lock().unwrap();
    waits_in_vain("an owned acquisition by the holding thread", |wait| {
        lock.try_lock_owned(wait, None).unwrap()
    });
    // Waiting without end for its own hold, which only it can release, is refused at once.
    match lock.lock_owned() {
        Err(redlatch::Error::WouldDeadlock { name }) => assert_eq!(name, lock.name()),
        other => panic!("expected WouldDeadlock, got {other:?}"),
    }
    assert!(matches!(
        lock.lock_owned_with_lease(Duration::from_secs(5)),
        Err(redlatch::Error::WouldDeadlock { .. })
    ));
    assert_eq!(
        lock.hold_count().unwrap(),
        1,
        "the waits left the hold as it was"
    );
    mine.unlock().unwrap();

    // A hold with a fixed lease would end only by running out under its own guard, which
    // would lose it: refused at once too (issue 40: it waited out the 5 s lease).
    let leased = lock.lock_with_lease(Duration::from_secs(5)).unwrap();
    let started = std::time::Instant::now();
    match lock.lock_owned() {
        Err(redlatch::Error::WouldDeadlock { name }) => assert_eq!(name, lock.name()),
        other => panic!("expected WouldDeadlock, got {other:?}"),
    }
    assert!(matches!(
        lock.lock_owned_with_lease(Duration::from_secs(1)),
        Err(redlatch::Error::WouldDeadlock { .. })
    ));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "refused at once, not after the lease: {:?}",
        started.elapsed()
    );
    assert!(!leased.is_lost());
    leased.unlock().unwrap();

    // A hold that is already lost (its lease ran out) is no hold: the owned acquisition
    // takes the lock like any waiter.
    let leased = lock.lock_with_lease(Duration::from_millis(200)).unwrap();
    assert!(
        eventually(Duration::from_secs(2), || leased.is_lost()),
        "the 200 ms lease never ran out"
    );
    let owned = lock.lock_owned().unwrap();
    drop(leased);
    owned.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn the_watchdog_keeps_an_owned_guard() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let name = unique("renewed");
    let guard = client.lock(&name).lock_owned().unwrap();
    // Held on another thread for six watchdog timeouts: only renewal keeps it.
    let held = thread::spawn(move || {
        thread::sleep(Duration::from_millis(1800));
        guard
    });
    let guard = join_all(vec![held], Duration::from_secs(10), "the holding thread").remove(0);
    assert!(!guard.is_lost());
    guard.check().unwrap();
    assert!(guard.remaining_lease() > Duration::ZERO);
    let pttl: i64 = redis::cmd("PTTL")
        .arg(lock_key(&name))
        .query(&mut admin)
        .unwrap();
    assert!(pttl > 0, "the lease in Redis: {pttl} ms");
    assert_eq!(hkeys(&mut admin, &lock_key(&name)), [guard.owner_id()]);
    assert!(client.stats().renewals_ok > 0);
    guard.unlock().unwrap();
}

#[test]
fn a_force_unlocked_owned_guard_is_reported_lost_once() {
    let server = RedisServer::start();
    let (tx, rx) = unbounded();
    let client = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_millis(600))
        .on_lock_lost(move |lost| {
            let _ = tx.send(lost.clone());
        })
        .build()
        .unwrap();
    let name = unique("lost");
    let guard = client.lock(&name).lock_owned().unwrap();

    let other = Client::open(&server.url()).unwrap();
    assert!(other.lock(&name).force_unlock().unwrap());
    assert!(
        eventually(Duration::from_secs(3), || guard.is_lost()),
        "renewal did not notice"
    );
    assert!(matches!(guard.check(), Err(Error::LockLost { .. })));
    assert_eq!(guard.remaining_lease(), Duration::ZERO);
    let lost = rx
        .recv_timeout(Duration::from_secs(3))
        .expect("the loss was announced");
    assert_eq!(lost.name, name);
    assert_eq!(lost.fencing_token, guard.fencing_token());
    assert_eq!(lost.kind, HoldKind::Lock);
    assert_eq!(lost.cause, LossCause::ForceUnlocked);

    // Somebody else takes it; the stale guard's unlock changes nothing there.
    let taken = other.lock(&name).lock().unwrap();
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
    assert!(other.lock(&name).is_locked().unwrap());
    assert!(
        rx.recv_timeout(Duration::from_millis(1500)).is_err(),
        "a loss is announced once"
    );
    drop(taken);
}

#[test]
fn a_deleted_owned_guard_is_found_lost_by_its_unlock() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = client(&server); // 30 s watchdog: the unlock finds out first
    let name = unique("deleted");
    let guard = client.lock(&name).lock_owned().unwrap();
    let _: () = redis::cmd("DEL")
        .arg(lock_key(&name))
        .query(&mut admin)
        .unwrap();
    assert!(!guard.is_lost(), "nothing told the client yet");
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
    // Counted where every loss is announced: on the renewal thread, soon after.
    assert!(eventually(Duration::from_secs(3), || client
        .stats()
        .locks_lost
        == 1));
}

#[test]
fn owned_and_thread_waiters_queue_in_one_line_and_hand_over_to_each_other() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("one-line");
    let holder = client(&server);
    let held = holder.lock(&name).lock_owned().unwrap();
    let first_token = held.fencing_token();

    // Arrival order: a thread's waiter, an owned one (both of the holder's client), then the
    // same of another client. Each records its token as it gets the lock, then releases.
    let got = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..4 {
        let lock = if i < 2 {
            holder.lock(&name)
        } else {
            client(&server).lock(&name)
        };
        let got = got.clone();
        waiters.push(thread::spawn(move || {
            let wait = Duration::from_secs(20);
            if i % 2 == 0 {
                let guard = lock.try_lock(wait, None).unwrap().expect("handed over");
                got.lock().push((i, guard.fencing_token()));
                thread::sleep(Duration::from_millis(20));
                guard.unlock().unwrap();
            } else {
                let guard = lock
                    .try_lock_owned(wait, None)
                    .unwrap()
                    .expect("handed over");
                got.lock().push((i, guard.fencing_token()));
                thread::sleep(Duration::from_millis(20));
                // Released by yet another thread: the hand-over does not care which.
                thread::spawn(move || guard.unlock())
                    .join()
                    .unwrap()
                    .unwrap();
            }
        }));
        assert!(
            eventually(Duration::from_secs(5), || queued_owners(&mut admin, &name)
                .len()
                == i + 1),
            "waiter {i} did not queue"
        );
    }
    let queued = queued_owners(&mut admin, &name);
    support::await_waiting(&mut admin, &name);

    // The owned holder releases from a thread other than the one that took it.
    let released = Instant::now();
    thread::spawn(move || held.unlock())
        .join()
        .unwrap()
        .unwrap();
    join_all(waiters, Duration::from_secs(30), "the waiters");
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "the hand-overs took {:?}: somebody waited for a lease",
        released.elapsed()
    );
    let got = got.lock().clone();
    let order: Vec<usize> = got.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, [0, 1, 2, 3], "served in arrival order");
    let mut previous = first_token;
    for (i, token) in got {
        assert!(
            token > previous,
            "waiter {i}'s token {token} after {previous}"
        );
        previous = token;
    }
    // Each waited under an owner id of its own: a thread's, or its acquisition's.
    let mut distinct = queued.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{queued:?}");
    assert!(!exists(&mut admin, &lock_key(&name)));
}

#[test]
fn an_owned_waiter_returns_its_guard_to_another_thread() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = client(&server);
    let name = unique("returned");
    let lock = client.lock(&name);
    let mine = lock.lock().unwrap();

    let waiting = lock.clone();
    let waiter = thread::spawn(move || -> Option<OwnedLockGuard> {
        waiting
            .try_lock_owned(Duration::from_secs(10), None)
            .unwrap()
    });
    support::await_waiting(&mut admin, &name);
    let token = mine.fencing_token();
    mine.unlock().unwrap();
    let owned = join_all(vec![waiter], Duration::from_secs(15), "the owned waiter")
        .remove(0)
        .expect("handed over");
    assert!(owned.fencing_token() > token);
    // The waiting thread is gone; its acquisition holds on.
    assert_eq!(hkeys(&mut admin, &lock_key(&name)), [owned.owner_id()]);
    owned.check().unwrap();
    owned.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn every_guard_names_the_owner_id_redis_keeps() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = client(&server);
    let prefix = format!("{}:", client.id());
    let here = client.current_thread_owner_id();
    assert!(here.starts_with(&prefix), "{here}");
    assert_eq!(client.current_thread_owner_id(), here, "stable on a thread");
    let theirs = {
        let client = client.clone();
        thread::spawn(move || client.current_thread_owner_id())
            .join()
            .unwrap()
    };
    assert_ne!(theirs, here);

    let name = unique("owners");
    let guard = client.lock(&name).lock().unwrap();
    assert_eq!(guard.owner_id(), here);
    assert_eq!(hkeys(&mut admin, &lock_key(&name)), [here.as_str()]);
    drop(guard);

    let owned = client.lock(&name).lock_owned().unwrap();
    let owned_id = owned.owner_id().to_string();
    assert_eq!(hkeys(&mut admin, &lock_key(&name)), [owned_id.as_str()]);
    // A thread's shape (`<client id>:<number>`, as Redisson's explicit thread ids), never
    // a thread's id, never another acquisition's.
    let number = owned_id.strip_prefix(&prefix).expect("this client's");
    assert!(number.parse::<u64>().is_ok(), "{owned_id}");
    assert!(owned_id != here && owned_id != theirs);
    owned.unlock().unwrap();
    let again = client.lock(&name).lock_owned().unwrap();
    assert_ne!(again.owner_id(), owned_id, "an owner id is never reused");
    drop(again);

    let rw = client.read_write_lock(&name);
    let rw_key = format!("{}:rwlock", lock_key(&name));
    let write = rw.write().unwrap();
    assert_eq!(write.owner_id(), here);
    let writer: String = redis::cmd("HGET")
        .arg(&rw_key)
        .arg("writer")
        .query(&mut admin)
        .unwrap();
    assert_eq!(writer, here);
    let read = rw.read().unwrap(); // the writer may read
    assert_eq!(read.owner_id(), format!("{here}:r"));
    let holders = hkeys(&mut admin, &rw_key);
    assert!(holders.contains(&here), "{holders:?}");
    assert!(
        holders.contains(&read.owner_id().to_string()),
        "{holders:?}"
    );
    drop((read, write));

    let semaphore = client.semaphore(&name);
    semaphore.set_permits(2).unwrap();
    let permits = semaphore.acquire(1).unwrap();
    let sem_key = format!("{}:semaphore", lock_key(&name));
    assert_eq!(hkeys(&mut admin, &sem_key), [permits.owner_id()]);
    assert!(permits.owner_id().starts_with(&format!("{prefix}p")));
    permits.release().unwrap();
}

#[test]
fn an_owned_acquisition_is_fenced_above_every_earlier_one() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.lock(&unique("fenced"));
    let mut previous = lock.lock().unwrap().fencing_token();
    for round in 0..3 {
        let owned = lock.lock_owned().unwrap();
        assert!(owned.fencing_token() > previous, "round {round}: owned");
        previous = owned.fencing_token();
        drop(owned);
        let again = lock.lock_owned().unwrap();
        assert!(
            again.fencing_token() > previous,
            "round {round}: owned again"
        );
        previous = again.fencing_token();
        drop(again);
        let thread = lock.lock().unwrap();
        assert!(
            thread.fencing_token() > previous,
            "round {round}: the thread's"
        );
        previous = thread.fencing_token();
    }
}

#[test]
fn an_owned_guard_with_a_lease_expires_and_its_stale_guard_changes_nothing() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.lock(&unique("owned-lease"));
    let guard = lock
        .lock_owned_with_lease(Duration::from_millis(200))
        .unwrap();
    assert!(guard.remaining_lease() <= Duration::from_millis(200));
    assert!(
        eventually(Duration::from_secs(3), || !lock.is_locked().unwrap()),
        "the lease did not expire"
    );
    assert!(guard.is_lost());
    let taken = lock.lock_owned().unwrap();
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
    assert!(
        lock.is_locked().unwrap(),
        "the stale unlock released the new holder"
    );
    taken.unlock().unwrap();
}

#[test]
fn a_panicking_owned_holder_releases() {
    let server = RedisServer::start();
    let client = client(&server);
    let lock = client.lock(&unique("owned-panic"));
    let guard = lock.lock_owned().unwrap();
    let panicked = thread::spawn(move || {
        let _guard = guard;
        panic!("a failing job");
    })
    .join();
    assert!(panicked.is_err());
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn an_owned_guard_is_extended_from_any_thread_and_never_revived() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let name = unique("owned-extend");
    let mut admin = server.admin();
    let guard = a
        .lock(&name)
        .lock_owned_with_lease(Duration::from_millis(400))
        .unwrap();
    // Extended on another thread than the one that took it.
    let guard = thread::spawn(move || {
        guard.extend(Duration::from_secs(5)).unwrap();
        guard
    })
    .join()
    .unwrap();
    let ttl = support::pttl(&mut admin, &lock_key(&name));
    assert!((4000..=5000).contains(&ttl), "PTTL {ttl}");
    thread::sleep(Duration::from_millis(700));
    assert!(!guard.is_lost());
    assert!(b.lock(&name).is_held_by(guard.owner_id()).unwrap());
    assert!(
        b.lock(&name)
            .try_lock_owned(Duration::ZERO, None)
            .unwrap()
            .is_none()
    );

    assert!(b.lock(&name).force_unlock().unwrap());
    assert!(matches!(
        guard.extend(Duration::from_secs(5)),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(support::pttl(&mut admin, &lock_key(&name)), -2);
    drop(guard);

    let watched = a.lock(&name).lock_owned().unwrap();
    assert!(matches!(
        watched.extend(Duration::from_secs(5)),
        Err(Error::InvalidArgument(_))
    ));
}
