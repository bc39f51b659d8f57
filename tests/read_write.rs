//! The read-write lock against a real redis-server: shared reads, exclusive writes,
//! re-entry and downgrade, no upgrade, writers not starved, one message per release, leases
//! per holder, foreign data, bad input, waiting without polling.

mod support;

use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Client, Error};
use support::{RedisServer, command_calls, eventually, join_all, pttl, unique};

const ZERO: Duration = Duration::ZERO;

fn client(server: &RedisServer) -> Client {
    Client::open(&server.url()).unwrap()
}

fn channel(name: &str) -> String {
    format!("redlatch:{{{name}}}:rwlock:unlocked")
}

/// How many owners wait in the lock's queue.
fn queued(admin: &mut redis::Connection, name: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(format!("redlatch:{{{name}}}:rwlock:queue"))
        .query(admin)
        .unwrap()
}

fn await_queued(admin: &mut redis::Connection, name: &str, n: usize) {
    assert!(
        eventually(Duration::from_secs(5), || queued(admin, name) == n),
        "expected {n} queued for {name}, saw {}",
        queued(admin, name)
    );
}

#[test]
fn readers_share_and_a_writer_excludes_everyone() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let name = unique("rw-share");
    let reads: Vec<_> = (0..3)
        .map(|_| {
            let lock = b.read_write_lock(&name);
            thread::spawn(move || {
                let guard = lock.try_read(ZERO, Some(Duration::from_secs(5))).unwrap();
                let held = guard.is_some();
                thread::sleep(Duration::from_millis(300));
                held
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(100));
    let lock = a.read_write_lock(&name);
    assert!(
        lock.try_write(ZERO, None).unwrap().is_none(),
        "wrote over readers"
    );
    let all_read = join_all(reads, Duration::from_secs(10), "readers");
    assert_eq!(all_read, vec![true; 3], "readers did not share");

    let write = lock
        .try_write(Duration::from_secs(2), None)
        .unwrap()
        .expect("free");
    let other = b.read_write_lock(&name);
    let (read, write2) = thread::scope(|s| {
        s.spawn(|| {
            (
                other.try_read(ZERO, None).unwrap().is_some(),
                other.try_write(ZERO, None).unwrap().is_some(),
            )
        })
        .join()
        .unwrap()
    });
    assert!(!read && !write2, "another thread got in beside a writer");
    write.unlock().unwrap();
    assert!(other.try_read(ZERO, None).unwrap().is_some());
}

#[test]
fn reentry_both_ways_and_downgrade_keep_tokens_and_holds() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let name = unique("rw-reenter");
    let lock = a.read_write_lock(&name);
    let w1 = lock.write().unwrap();
    let token = w1.fencing_token();
    let w2 = lock.try_write(ZERO, None).unwrap().expect("re-entry");
    assert_eq!(w1.fencing_token(), w2.fencing_token());
    // The writer reads at once, with the write's token: a read does not move the counter.
    let r1 = lock
        .try_read(ZERO, None)
        .unwrap()
        .expect("the writer reads");
    assert_eq!(r1.fencing_token(), w1.fencing_token());
    let r2 = lock.read().unwrap();
    drop(w2);
    w1.unlock().unwrap();
    // Downgraded: still reading, so others may read but nobody may write.
    let other = b.read_write_lock(&name);
    thread::scope(|s| {
        s.spawn(|| {
            assert!(
                other.try_write(ZERO, None).unwrap().is_none(),
                "wrote over a read"
            );
            assert!(
                other.try_read(ZERO, None).unwrap().is_some(),
                "readers shut out"
            );
        });
    });
    drop(r2);
    assert!(!r1.is_lost());
    r1.unlock().unwrap();
    let w3 = other.try_write(ZERO, None).unwrap().expect("free again");
    assert!(w3.fencing_token() > token);
}

#[test]
fn write_tokens_are_above_every_earlier_token_and_reads_carry_the_last() {
    let server = RedisServer::start();
    let a = client(&server);
    let name = unique("rw-tokens");
    let lock = a.read_write_lock(&name);
    let mut last = 0;
    for _ in 0..5 {
        let write = lock.write().unwrap().fencing_token();
        assert!(write > last, "write token {write} not above {last}");
        let read = lock.read().unwrap();
        assert_eq!(
            read.fencing_token(),
            write,
            "a read moved or missed the counter"
        );
        last = write;
    }
    // A read before any write still gets a token, and the next write is above it.
    let fresh = a.read_write_lock(&unique("rw-tokens-fresh"));
    let read = fresh.read().unwrap().fencing_token();
    assert!(fresh.write().unwrap().fencing_token() > read);
}

#[test]
fn a_reader_that_asks_to_write_gets_would_deadlock_at_once() {
    let server = RedisServer::start();
    let a = client(&server);
    let lock = a.read_write_lock(&unique("rw-upgrade"));
    let read = lock.read().unwrap();
    let started = Instant::now();
    match lock.write() {
        Err(Error::WouldDeadlock { name }) => assert_eq!(name, lock.name()),
        other => panic!("expected WouldDeadlock, got {other:?}"),
    }
    assert!(matches!(
        lock.try_write(Duration::from_secs(5), None),
        Err(Error::WouldDeadlock { .. })
    ));
    assert!(started.elapsed() < Duration::from_secs(1), "it waited");
    read.unlock().unwrap();
    assert!(lock.try_write(ZERO, None).unwrap().is_some());
}

#[test]
fn a_waiting_writer_is_not_starved_by_a_stream_of_readers() {
    let server = RedisServer::start();
    let name = unique("rw-starve");
    let readers_client = client(&server);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    // Four readers overlapping all the time: each holds 100 ms, then reads again at once,
    // so without writer preference the lock would never be free of readers.
    let readers: Vec<_> = (0..4)
        .map(|i| {
            let lock = readers_client.read_write_lock(&name);
            let (stop, reads) = (stop.clone(), reads.clone());
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(25 * i));
                let deadline = Instant::now() + Duration::from_secs(20);
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    if let Some(read) = lock.try_read(Duration::from_secs(5), None).unwrap() {
                        reads.fetch_add(1, Ordering::Relaxed);
                        thread::sleep(Duration::from_millis(100));
                        drop(read);
                    }
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(500));
    assert!(reads.load(Ordering::Relaxed) > 0);
    let writer_client = client(&server);
    let started = Instant::now();
    let write = writer_client
        .read_write_lock(&name)
        .try_write(Duration::from_secs(10), None)
        .unwrap();
    let waited = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    assert!(write.is_some(), "the writer starved for 10 s");
    // It waits for the reads already in progress (100 ms each), not for the stream.
    assert!(
        waited < Duration::from_millis(1000),
        "the writer waited {waited:?} behind a stream of readers"
    );
    drop(write);
    join_all(readers, Duration::from_secs(30), "readers");
}

#[test]
fn a_writes_release_grants_the_run_of_readers_at_the_head_in_one_message() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("rw-run");
    let holder = client(&server);
    let waiters = client(&server);
    let write = holder.read_write_lock(&name).write().unwrap();
    let spawn = |write: bool| {
        let lock = waiters.read_write_lock(&name);
        thread::spawn(move || {
            let wait = Duration::from_secs(20);
            let started = Instant::now();
            let token = if write {
                lock.try_write(wait, None).unwrap().map(|g| {
                    let t = g.fencing_token();
                    thread::sleep(Duration::from_millis(300));
                    t
                })
            } else {
                lock.try_read(wait, None).unwrap().map(|g| {
                    let t = g.fencing_token();
                    thread::sleep(Duration::from_millis(300));
                    t
                })
            };
            (started.elapsed(), token.expect("acquired"))
        })
    };
    // Queue: three readers, then a writer, then one more reader.
    let mut readers = Vec::new();
    for i in 0..3 {
        readers.push(spawn(false));
        await_queued(&mut admin, &name, i + 1);
    }
    let writer = spawn(true);
    await_queued(&mut admin, &name, 4);
    let late_reader = spawn(false);
    await_queued(&mut admin, &name, 5);

    let publishes = command_calls(&mut admin, "publish");
    let released = Instant::now();
    let write_token = write.fencing_token();
    write.unlock().unwrap();
    assert_eq!(
        command_calls(&mut admin, "publish") - publishes,
        1,
        "the release should grant the three readers in one message"
    );
    let reads = join_all(readers, Duration::from_secs(10), "readers");
    let granted_in = released.elapsed();
    for (_, token) in &reads {
        assert_eq!(*token, write_token, "a read carries the last write's token");
    }
    // All three read at once (each held 300 ms): well under three times that.
    assert!(
        granted_in < Duration::from_millis(850),
        "readers ran one by one"
    );
    let (_, next_write) = writer.join().unwrap();
    assert!(next_write > write_token);
    let (late_waited, late_token) = late_reader.join().unwrap();
    assert_eq!(
        late_token, next_write,
        "the late reader went before the writer"
    );
    assert!(late_waited > Duration::from_millis(600));
}

#[test]
fn waiting_readers_and_writers_cost_no_commands() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("rw-idle");
    let holder = client(&server);
    let waiters = client(&server);
    let write = holder.read_write_lock(&name).write().unwrap();
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let lock = waiters.read_write_lock(&name);
            thread::spawn(move || {
                let wait = Duration::from_secs(20);
                if i % 2 == 0 {
                    lock.try_read(wait, None).unwrap().is_some()
                } else {
                    lock.try_write(wait, None).unwrap().is_some()
                }
            })
        })
        .collect();
    await_queued(&mut admin, &name, 4);
    assert!(eventually(Duration::from_secs(5), || {
        support::pubsub_channels(&mut admin, &channel(&name)).len() == 1
    }));
    // The confirmation of the subscription gives each waiter one attempt: let those pass.
    thread::sleep(Duration::from_millis(300));
    let before = command_calls(&mut admin, "evalsha");
    thread::sleep(Duration::from_secs(2));
    let during = command_calls(&mut admin, "evalsha") - before;
    assert!(during <= 1, "waiters polled: {during} script calls in 2 s");
    write.unlock().unwrap();
    let got = join_all(handles, Duration::from_secs(20), "waiters");
    assert_eq!(got, vec![true; 4]);
}

#[test]
fn a_fixed_lease_ends_a_read_and_its_guard_is_told() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let name = unique("rw-lease");
    let read = a
        .read_write_lock(&name)
        .try_read(ZERO, Some(Duration::from_millis(300)))
        .unwrap()
        .unwrap();
    let other = b.read_write_lock(&name);
    let started = Instant::now();
    let write = other
        .try_write(Duration::from_secs(5), None)
        .unwrap()
        .expect("the read's lease ends");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(read.is_lost());
    assert!(matches!(read.check(), Err(Error::LockLost { .. })));
    assert!(matches!(read.unlock(), Err(Error::LockLost { .. })));
    // The stale release changed nothing.
    assert!(!write.is_lost());
    write.unlock().unwrap();
}

/// Entry point of the child process of `a_killed_reader_frees_its_share_after_the_watchdog_timeout`.
#[test]
#[ignore = "run as a child process by another test"]
fn child_reads_until_killed() {
    let Some([url, name]) = support::child_env(["REDLATCH_CHILD_URL", "REDLATCH_CHILD_LOCK"])
    else {
        return;
    };
    let client = Client::builder(&url)
        .watchdog_timeout(Duration::from_millis(1500))
        .build()
        .unwrap();
    let read = client.read_write_lock(&name).read().unwrap();
    println!("READING {}", read.fencing_token());
    thread::sleep(Duration::from_secs(60)); // killed long before
}

fn spawn_reader(server: &RedisServer, name: &str) -> Child {
    support::spawn_child_test(
        "child_reads_until_killed",
        &[
            ("REDLATCH_CHILD_URL", server.url()),
            ("REDLATCH_CHILD_LOCK", name.to_string()),
        ],
    )
}

#[test]
fn a_killed_reader_frees_its_share_after_the_watchdog_timeout() {
    let server = RedisServer::start();
    let name = unique("rw-killed");
    let mut child = spawn_reader(&server, &name);
    support::read_reported(&mut child, "READING", Duration::from_secs(30));
    let a = client(&server);
    let lock = a.read_write_lock(&name);
    // Another reader comes and goes; the child's watchdog keeps its share past one lease.
    assert!(lock.try_read(ZERO, None).unwrap().is_some());
    thread::sleep(Duration::from_secs(3));
    assert!(
        lock.try_write(ZERO, None).unwrap().is_none(),
        "the live reader's share went"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    let write = lock.try_write(Duration::from_secs(10), None).unwrap();
    assert!(write.is_some(), "the dead reader's share never came back");
    let waited = killed.elapsed();
    assert!(
        waited < Duration::from_millis(1500) + Duration::from_secs(1),
        "freed after {waited:?}, more than one watchdog timeout"
    );
}

#[test]
fn foreign_data_is_refused_and_left_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let a = client(&server);
    let name = unique("rw-foreign");
    let key = format!("redlatch:{{{name}}}:rwlock");
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("precious")
        .query(&mut admin)
        .unwrap();
    let lock = a.read_write_lock(&name);
    for result in [
        lock.try_read(ZERO, None).map(|g| g.is_some()),
        lock.try_write(ZERO, None).map(|g| g.is_some()),
    ] {
        match result {
            Err(Error::WrongType { key: k }) => assert_eq!(k, key),
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
    let kept: String = redis::cmd("GET").arg(&key).query(&mut admin).unwrap();
    assert_eq!(kept, "precious");

    // A hash without a lease is not ours either; nor is a fence that is not a counter.
    let name = unique("rw-foreign-hash");
    let key = format!("redlatch:{{{name}}}:rwlock");
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("f")
        .arg("v")
        .query(&mut admin)
        .unwrap();
    assert!(matches!(
        a.read_write_lock(&name).try_write(ZERO, None),
        Err(Error::WrongType { .. })
    ));
    let v: String = redis::cmd("HGET")
        .arg(&key)
        .arg("f")
        .query(&mut admin)
        .unwrap();
    assert_eq!(v, "v");
    let name = unique("rw-foreign-fence");
    let fence = format!("redlatch:{{{name}}}:rwlock:fence");
    let _: () = redis::cmd("SET")
        .arg(&fence)
        .arg("abc")
        .query(&mut admin)
        .unwrap();
    // A write's first run swaps the counter in one SET ... GET: what it finds that is not a
    // counter must be put back, for a write and a read alike.
    match a.read_write_lock(&name).try_write(ZERO, None) {
        Err(Error::WrongType { key }) => assert_eq!(key, fence),
        other => panic!("expected WrongType, got {other:?}"),
    }
    match a.read_write_lock(&name).try_read(ZERO, None) {
        Err(Error::WrongType { key }) => assert_eq!(key, fence),
        other => panic!("expected WrongType, got {other:?}"),
    }
    let kept: String = redis::cmd("GET").arg(&fence).query(&mut admin).unwrap();
    assert_eq!(kept, "abc");
}

#[test]
fn bad_input_is_refused_before_any_io() {
    let server = RedisServer::start();
    let a = client(&server);
    let empty = a.read_write_lock("");
    assert!(matches!(
        empty.try_read(ZERO, None),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(empty.write(), Err(Error::InvalidArgument(_))));
    let lock = a.read_write_lock(&unique("rw-bad"));
    assert!(matches!(
        lock.try_read(ZERO, Some(ZERO)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        lock.try_write(Duration::MAX, None),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        lock.try_write(ZERO, Some(Duration::from_secs(u64::MAX))),
        Err(Error::InvalidArgument(_))
    ));
}

/// In our layout the kinds have keys of their own (`redlatch:{n}`, `redlatch:{n}:rwlock`),
/// so a lock and a read-write lock called alike never meet, in Redis or in the client's
/// registry of holds (kept by key): each is taken, held and released as if the other were
/// not there, by the same thread or another. (Redisson's layout keeps both in one hash and
/// refuses the other kind's: `redisson_shares.rs`.)
#[test]
fn a_read_write_lock_and_a_lock_of_the_same_name_are_two_objects() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let a = client(&server);
    let name = unique("rw-apart");
    let lock_key = format!("redlatch:{{{name}}}");
    let rw_key = format!("redlatch:{{{name}}}:rwlock");
    let hash = |admin: &mut redis::Connection, key: &str| -> Vec<(String, String)> {
        let mut fields: Vec<(String, String)> =
            redis::cmd("HGETALL").arg(key).query(admin).unwrap();
        fields.sort();
        fields
    };
    let lock = a.lock(&name).lock().unwrap();
    let held = hash(&mut admin, &lock_key);
    assert!(!held.is_empty());
    let rw = a.read_write_lock(&name);
    let other = {
        let rw = rw.clone();
        thread::spawn(move || {
            let read = rw.try_read(ZERO, None).unwrap().is_some();
            let write = rw.try_write(ZERO, None).unwrap().is_some();
            (read, write)
        })
    };
    assert_eq!(
        join_all(vec![other], Duration::from_secs(10), "other")[0],
        (true, true)
    );
    let write = rw.try_write(ZERO, None).unwrap().unwrap();
    let read = rw.try_read(ZERO, None).unwrap().unwrap();
    assert_eq!(
        hash(&mut admin, &lock_key),
        held,
        "the lock's hash is its own"
    );
    lock.check().unwrap();
    lock.unlock().unwrap();
    assert!(
        !hash(&mut admin, &rw_key).is_empty(),
        "the read-write lock's stays"
    );
    // And the other way round: a lock, a fair lock and a spin lock beside the read and write.
    let rw_held = hash(&mut admin, &rw_key);
    let again = a.lock(&name).try_lock(ZERO, None).unwrap().unwrap();
    drop(again);
    assert!(a.fair_lock(&name).try_lock(ZERO, None).unwrap().is_some());
    assert!(a.spin_lock(&name).try_lock(ZERO, None).unwrap().is_some());
    assert!(
        !a.lock(&name).force_unlock().unwrap(),
        "nothing to force-unlock"
    );
    assert_eq!(
        hash(&mut admin, &rw_key),
        rw_held,
        "the read-write lock's hash is its own"
    );
    read.check().unwrap();
    write.check().unwrap();
    drop(read);
    write.unlock().unwrap();
    assert!(hash(&mut admin, &rw_key).is_empty());
}

#[test]
fn exclusion_holds_under_contention_with_short_waits_and_leases() {
    let server = RedisServer::start();
    let name = unique("rw-contend");
    let url = server.url();
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let client = Client::open(&url).unwrap();
            let url = url.clone();
            let name = name.clone();
            thread::spawn(move || {
                let lock = client.read_write_lock(&name);
                let mut data = redis::Client::open(url).unwrap().get_connection().unwrap();
                let inside = format!("{name}:inside");
                let mut violations = 0;
                for round in 0..30 {
                    let wait = Duration::from_millis(50 + (round % 3) * 100);
                    let write = (i + round as usize).is_multiple_of(3);
                    // +1000 per writer, +1 per reader: a writer must see exactly 1000.
                    let weight: i64 = if write { 1000 } else { 1 };
                    let guard: Option<Box<dyn std::any::Any>> = if write {
                        lock.try_write(wait, None)
                            .unwrap()
                            .map(|g| Box::new(g) as _)
                    } else {
                        lock.try_read(wait, None).unwrap().map(|g| Box::new(g) as _)
                    };
                    if guard.is_none() {
                        continue;
                    }
                    let now: i64 = redis::cmd("INCRBY")
                        .arg(&inside)
                        .arg(weight)
                        .query(&mut data)
                        .unwrap();
                    if (write && now != 1000) || (!write && now >= 1000) {
                        violations += 1;
                    }
                    thread::sleep(Duration::from_millis(3));
                    let _: i64 = redis::cmd("DECRBY")
                        .arg(&inside)
                        .arg(weight)
                        .query(&mut data)
                        .unwrap();
                    drop(guard);
                }
                violations
            })
        })
        .collect();
    let violations: usize = join_all(handles, Duration::from_secs(120), "contenders")
        .into_iter()
        .sum();
    assert_eq!(violations, 0, "a writer shared the lock");
}

/// A write released to a writer waiting at the head is handed over in the release's own call
/// (lua/shares_release.lua's usual hand-over): when it returns, the holders (with "writer"),
/// the lease and the waiter's "granted" terms carry the token the waiter returns with.
#[test]
fn a_write_released_to_a_waiting_writer_carries_one_token_everywhere() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("rw-handover");
    let key = format!("redlatch:{{{name}}}:rwlock");
    let held = a.read_write_lock(&name).write().unwrap();
    let (first, old_owner) = (held.fencing_token(), held.owner_id().to_string());
    let lock = b.read_write_lock(&name);
    // The waiter holds until the test has read Redis.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let waiter = thread::spawn(move || {
        let guard = lock.try_write(Duration::from_secs(20), None).unwrap();
        let token = guard.as_ref().map(|g| g.fencing_token());
        let _ = done_rx.recv_timeout(Duration::from_secs(20));
        drop(guard);
        token
    });
    await_queued(&mut admin, &name, 1);
    held.unlock().unwrap();
    let mut holders: Vec<(String, String)> =
        redis::cmd("HGETALL").arg(&key).query(&mut admin).unwrap();
    assert_eq!(holders.len(), 2, "{holders:?}");
    holders.sort();
    let (owner, value) = holders[0].clone();
    assert_ne!(owner, old_owner, "handed over by the release");
    assert_eq!(holders[1], ("writer".to_string(), owner.clone()));
    let token: u64 = value.strip_prefix("1 ").unwrap().parse().unwrap();
    let terms: String = redis::cmd("HGET")
        .arg(format!("{key}:waiters"))
        .arg(&owner)
        .query(&mut admin)
        .unwrap();
    assert_eq!(terms, format!("granted {token}"));
    let leased: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("{key}:leases"))
        .arg(0)
        .arg(-1)
        .query(&mut admin)
        .unwrap();
    assert_eq!(leased, vec![owner]);
    done_tx.send(()).unwrap();
    let got = join_all(vec![waiter], Duration::from_secs(30), "waiter").remove(0);
    assert_eq!(got, Some(token));
    assert!(token > first);
    assert!(
        a.read_write_lock(&name)
            .try_write(ZERO, None)
            .unwrap()
            .is_some()
    );
}

/// Reads taken and given back beside another reader (the usual cases of the scripts): the
/// lock lives as long as its latest lease, longer when a longer lease joins and shorter when
/// it leaves; and a write released while its thread still reads lets other readers in.
#[test]
fn beside_another_reader_the_lock_lives_as_long_as_the_latest_lease() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("rw-beside");
    let holders = format!("redlatch:{{{name}}}:rwlock");
    let brief = a
        .read_write_lock(&name)
        .try_read(ZERO, Some(Duration::from_secs(2)))
        .unwrap()
        .unwrap();
    let long = b.read_write_lock(&name).read().unwrap(); // the watchdog's 30 s
    assert!(
        pttl(&mut admin, &holders) > 20_000,
        "the longer lease joined"
    );
    long.unlock().unwrap();
    assert!(pttl(&mut admin, &holders) <= 2_000, "the longer lease left");
    brief.unlock().unwrap();

    // A thread writes, reads beside its write, then gives the write back: another client's
    // reader gets in at once, beside the read that stays.
    let rw = a.read_write_lock(&name);
    let write = rw.write().unwrap();
    let read = rw.read().unwrap();
    let other = b.read_write_lock(&name);
    assert!(
        other.try_read(ZERO, None).unwrap().is_none(),
        "a writer holds"
    );
    write.unlock().unwrap();
    let beside = other.try_read(ZERO, None).unwrap();
    assert!(beside.is_some(), "the write is gone, the read stays");
    assert!(!read.is_lost());
    drop((beside, read));
}

/// A read takes the counter as it stands, so an unused grant of an earlier wait of the same
/// thread ("granted <token>" in the waiters' terms, outliving the hold it granted) names the
/// token a new read takes too; a late give-back of that grant would then release the new
/// read. Taking a read clears the reading thread's old terms, on a free lock as beside
/// readers.
#[test]
fn a_read_clears_its_threads_old_terms_so_no_late_give_back_releases_it() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    for beside in [false, true] {
        let name = unique("rw-old-terms");
        let holders = format!("redlatch:{{{name}}}:rwlock");
        let waiters = format!("{holders}:waiters");
        let rw = a.read_write_lock(&name);
        // The thread's write owner, as its write's field shows; its read owner adds ":r".
        let write = rw.write().unwrap();
        let fields: Vec<String> = redis::cmd("HKEYS").arg(&holders).query(&mut admin).unwrap();
        let writer = fields.into_iter().find(|f| f != "writer").unwrap();
        let counter = write.fencing_token();
        write.unlock().unwrap();
        let reader = format!("{writer}:r");
        let _: () = redis::cmd("HSET")
            .arg(&waiters)
            .arg(&reader)
            .arg(format!("granted {counter}"))
            .query(&mut admin)
            .unwrap();
        let _: () = redis::cmd("PEXPIRE")
            .arg(&waiters)
            .arg(60_000)
            .query(&mut admin)
            .unwrap();
        let other = beside.then(|| b.read_write_lock(&name).read().unwrap());
        let read = rw.read().unwrap();
        assert_eq!(read.fencing_token(), counter, "a read takes the counter");
        let terms: Option<String> = redis::cmd("HGET")
            .arg(&waiters)
            .arg(&reader)
            .query(&mut admin)
            .unwrap();
        assert_eq!(terms, None, "beside readers: {beside}");
        drop((read, other));
    }
}

/// A client whose losses go to `lost`, with a short watchdog.
fn told(server: &RedisServer, lost: &Arc<std::sync::Mutex<Vec<redlatch::LostLock>>>) -> Client {
    let lost = lost.clone();
    Client::builder(&server.url())
        .watchdog_timeout(Duration::from_millis(900))
        .on_lock_lost(move |l| lost.lock().unwrap().push(l.clone()))
        .build()
        .unwrap()
}

#[test]
fn queries_read_readers_writers_and_reentries() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let name = unique("rw-queries");
    let lock = a.read_write_lock(&name);
    let state = |l: &redlatch::ReadWriteLock| {
        (
            l.is_locked().unwrap(),
            l.is_write_locked().unwrap(),
            l.read_hold_count().unwrap(),
            l.write_hold_count().unwrap(),
        )
    };
    assert_eq!(state(&lock), (false, false, 0, 0));
    assert_eq!(lock.remaining_ttl().unwrap(), None);

    // Two reads of this thread, one of another thread, one of another client.
    let lease = Some(Duration::from_secs(10));
    let r1 = lock.try_read(ZERO, lease).unwrap().unwrap();
    let r2 = lock.try_read(ZERO, lease).unwrap().unwrap();
    assert_eq!(state(&lock), (true, false, 2, 0));
    let ttl = lock.remaining_ttl().unwrap().unwrap();
    assert!(
        ttl > Duration::from_secs(9) && ttl <= Duration::from_secs(10),
        "{ttl:?}"
    );
    let other = lock.clone();
    let seen = thread::spawn(move || {
        let _r = other.read().unwrap();
        (other.read_hold_count().unwrap(), other.is_locked().unwrap())
    })
    .join()
    .unwrap();
    assert_eq!(seen, (1, true));
    let theirs = b.read_write_lock(&name).read().unwrap();
    assert_eq!(state(&b.read_write_lock(&name)), (true, false, 1, 0));
    assert_eq!(state(&lock), (true, false, 2, 0));
    drop((r1, r2));
    assert_eq!(
        state(&lock),
        (true, false, 0, 0),
        "the other client still reads"
    );
    drop(theirs);
    assert_eq!(state(&lock), (false, false, 0, 0));
    assert_eq!(lock.remaining_ttl().unwrap(), None);

    // A writer with the watchdog, re-entered, then reading too (a downgrade).
    let w1 = lock.write().unwrap();
    let w2 = lock.write().unwrap();
    assert_eq!(state(&lock), (true, true, 0, 2));
    let ttl = lock.remaining_ttl().unwrap().unwrap();
    assert!(
        ttl > Duration::from_secs(15) && ttl <= Duration::from_secs(30),
        "{ttl:?}"
    );
    let read = lock.read().unwrap();
    assert_eq!(state(&lock), (true, true, 1, 2));
    assert_eq!(state(&b.read_write_lock(&name)), (true, true, 0, 0));
    drop((w1, w2));
    assert_eq!(state(&lock), (true, false, 1, 0));
    drop(read);
    assert_eq!(state(&lock), (false, false, 0, 0));
}

#[test]
fn a_read_whose_lease_ended_is_not_a_holder() {
    let server = RedisServer::start();
    let a = client(&server);
    let lock = a.read_write_lock(&unique("rw-ended"));
    let _read = lock
        .try_read(ZERO, Some(Duration::from_millis(300)))
        .unwrap()
        .unwrap();
    assert!(lock.is_locked().unwrap());
    assert!(eventually(Duration::from_secs(3), || !lock
        .is_locked()
        .unwrap()));
    assert_eq!(lock.remaining_ttl().unwrap(), None);
}

#[test]
fn force_unlock_frees_readers_wakes_a_writer_at_once_and_holders_hear_it() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let lost = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (a, b, c) = (told(&server, &lost), told(&server, &lost), client(&server));
    let name = unique("rw-force");
    let lock = a.read_write_lock(&name);
    assert!(!lock.force_unlock().unwrap(), "nobody held it");
    let ours = lock.read().unwrap();
    let theirs = b.read_write_lock(&name).read().unwrap();
    let writer = {
        let lock = c.read_write_lock(&name);
        thread::spawn(move || {
            let guard = lock
                .try_write(Duration::from_secs(20), Some(Duration::from_secs(20)))
                .unwrap();
            (guard.is_some(), Instant::now())
        })
    };
    await_queued(&mut admin, &name, 1);
    let forced = Instant::now();
    assert!(lock.force_unlock().unwrap());
    let (wrote, at) = writer.join().unwrap();
    assert!(wrote);
    assert!(
        at - forced < Duration::from_secs(2),
        "woken at once, not at lease end"
    );
    assert!(ours.is_lost(), "this client's hold is lost at once");
    assert_eq!(lock.read_hold_count().unwrap(), 0);
    assert!(eventually(Duration::from_secs(5), || theirs.is_lost()));
    assert!(eventually(Duration::from_secs(5), || lost
        .lock()
        .unwrap()
        .len()
        == 2));
    for l in lost.lock().unwrap().iter() {
        assert_eq!(l.name, name);
        assert_eq!(l.cause, redlatch::LossCause::ForceUnlocked, "{l:?}");
    }
    assert!(matches!(ours.unlock(), Err(Error::LockLost { .. })));
    drop(theirs);
    // The writer's thread has ended, and released.
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn force_unlock_frees_a_writer_and_wakes_a_waiting_reader_at_once() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("rw-force-w");
    let write = b.read_write_lock(&name).write().unwrap();
    let reader = {
        let lock = a.read_write_lock(&name);
        thread::spawn(move || {
            let guard = lock.try_read(Duration::from_secs(20), None).unwrap();
            let held = guard.is_some();
            (held, Instant::now(), lock.read_hold_count().unwrap())
        })
    };
    await_queued(&mut admin, &name, 1);
    let forced = Instant::now();
    assert!(a.read_write_lock(&name).force_unlock().unwrap());
    let (read, at, count) = reader.join().unwrap();
    assert!(read && count == 1);
    assert!(
        at - forced < Duration::from_secs(2),
        "woken at once, not at lease end"
    );
    assert!(eventually(Duration::from_secs(40), || write.is_lost()));
}

#[test]
fn force_unlock_refuses_foreign_data_and_leaves_it() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let a = client(&server);
    let name = unique("rw-force-foreign");
    let key = format!("redlatch:{{{name}}}:rwlock");
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("x")
        .query(&mut admin)
        .unwrap();
    let lock = a.read_write_lock(&name);
    assert!(matches!(lock.force_unlock(), Err(Error::WrongType { .. })));
    assert!(matches!(lock.is_locked(), Err(Error::WrongType { .. })));
    let kept: String = redis::cmd("GET").arg(&key).query(&mut admin).unwrap();
    assert_eq!(kept, "x");
    // A hash without a lease is no read-write lock's either.
    let _: () = redis::cmd("DEL").arg(&key).query(&mut admin).unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("f")
        .arg("1")
        .query(&mut admin)
        .unwrap();
    assert!(matches!(lock.force_unlock(), Err(Error::WrongType { .. })));
    let kept: Option<String> = redis::cmd("HGET")
        .arg(&key)
        .arg("f")
        .query(&mut admin)
        .unwrap();
    assert_eq!(kept.as_deref(), Some("1"));
    // A plain lock of the same name is another object: untouched.
    let _: () = redis::cmd("DEL").arg(&key).query(&mut admin).unwrap();
    let plain = a.lock(&name).lock().unwrap();
    assert!(!lock.force_unlock().unwrap());
    assert!(!plain.is_lost() && a.lock(&name).is_locked().unwrap());
}

/// How long `owner`'s lease has left by the leases zset `leases` and the server's clock, ms.
fn lease_left(admin: &mut redis::Connection, leases: &str, owner: &str) -> i64 {
    let score: Option<i64> = redis::cmd("ZSCORE")
        .arg(leases)
        .arg(owner)
        .query(admin)
        .unwrap();
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(admin).unwrap();
    score.map_or(-2, |end| end - (secs * 1000 + micros / 1000))
}

#[test]
fn extend_sets_a_write_or_reads_lease_from_now_and_never_revives_one() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("rw-extend");
    let holders = format!("redlatch:{{{name}}}:rwlock");
    let leases = format!("{holders}:leases");
    let lock = a.read_write_lock(&name);
    let write = lock
        .try_write(ZERO, Some(Duration::from_millis(400)))
        .unwrap()
        .unwrap();
    write.extend(Duration::from_secs(5)).unwrap();
    let left = lease_left(&mut admin, &leases, write.owner_id());
    assert!((4000..=5000).contains(&left), "{left}");
    assert!(pttl(&mut admin, &holders) >= 4000);
    assert!(write.remaining_lease() > Duration::from_secs(4));
    thread::sleep(Duration::from_millis(700));
    assert!(!write.is_lost());
    let other = b.read_write_lock(&name);
    assert!(
        other.try_read(ZERO, None).unwrap().is_none(),
        "still written"
    );
    // Set, not added: shorter too.
    write.extend(Duration::from_millis(1500)).unwrap();
    let left = lease_left(&mut admin, &leases, write.owner_id());
    assert!((1..=1500).contains(&left), "{left}");
    write.unlock().unwrap();

    // A read, the same way.
    let read = other
        .try_read(ZERO, Some(Duration::from_millis(400)))
        .unwrap()
        .unwrap();
    read.extend(Duration::from_secs(5)).unwrap();
    let left = lease_left(&mut admin, &leases, read.owner_id());
    assert!((4000..=5000).contains(&left), "{left}");
    thread::sleep(Duration::from_millis(700));
    assert!(!read.is_lost());
    assert!(lock.try_write(ZERO, None).unwrap().is_none(), "still read");

    // Gone is gone: after a force-unlock nothing is written back.
    assert!(lock.force_unlock().unwrap());
    assert!(matches!(
        read.extend(Duration::from_secs(5)),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(pttl(&mut admin, &holders), -2);
    assert_eq!(pttl(&mut admin, &leases), -2);
    drop(read);

    // The watchdog's holds are its own to renew.
    let watched = lock.write().unwrap();
    assert!(matches!(
        watched.extend(Duration::from_secs(5)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        lock.try_read(ZERO, Some(Duration::from_secs(5)))
            .unwrap()
            .unwrap()
            .extend(ZERO),
        Err(Error::InvalidArgument(_))
    ));
}
