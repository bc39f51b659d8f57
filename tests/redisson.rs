//! `Layout::Redisson`: redlatch reads and writes what Redisson 4.x does, so that a Rust
//! service and Java services share locks in one Redis. The Java side here is raw commands
//! that do what Redisson's scripts do (Redisson's format); `redisson_interop.rs` plays a
//! whole emulated Java client against every kind.

mod support;

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Client, Error, Layout};
use support::{RedisServer, await_parked, command_calls, eventually, join_all, unique};

fn redisson(server: &RedisServer) -> Client {
    Client::builder(&server.url())
        .layout(Layout::Redisson)
        .build()
        .unwrap()
}

#[test]
fn the_layout_is_chosen_at_build_and_refuses_a_prefix() {
    let server = RedisServer::start();
    assert_eq!(
        Client::open(&server.url()).unwrap().layout(),
        Layout::Redlatch
    );
    assert_eq!(redisson(&server).layout(), Layout::Redisson);
    let refused = Client::builder(&server.url())
        .layout(Layout::Redisson)
        .key_prefix("billing")
        .build();
    match refused {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("key_prefix"), "{why}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn a_lock_is_redissons_hash_with_a_lease_and_a_token_from_the_fenced_counter() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("orders");
    let lock = client.lock(&name);
    let guard = lock.lock().unwrap();
    let fields: HashMap<String, String> =
        redis::cmd("HGETALL").arg(&name).query(&mut admin).unwrap();
    let owner = client.current_thread_owner_id();
    assert_eq!(fields, HashMap::from([(owner.clone(), "1".to_string())]));
    let pttl: i64 = redis::cmd("PTTL").arg(&name).query(&mut admin).unwrap();
    assert!((25_000..=30_000).contains(&pttl), "a 30 s lease: {pttl}");
    let token_key = format!("redisson_lock_token:{{{name}}}");
    let counter: u64 = redis::cmd("GET").arg(&token_key).query(&mut admin).unwrap();
    assert_eq!(guard.fencing_token(), counter);
    // Re-entry: the count Java reads, the token kept.
    let again = lock.lock().unwrap();
    assert_eq!(again.fencing_token(), guard.fencing_token());
    let count: String = redis::cmd("HGET")
        .arg(&name)
        .arg(&owner)
        .query(&mut admin)
        .unwrap();
    assert_eq!(count, "2");
    assert_eq!(lock.hold_count().unwrap(), 2);
    drop(again);
    let count: String = redis::cmd("HGET")
        .arg(&name)
        .arg(&owner)
        .query(&mut admin)
        .unwrap();
    assert_eq!(count, "1");
    guard.unlock().unwrap();
    let exists: bool = redis::cmd("EXISTS").arg(&name).query(&mut admin).unwrap();
    assert!(!exists, "the final release deletes the hash");
    // The next acquisition's token is above the last.
    let next = lock.lock().unwrap();
    assert!(next.fencing_token() > counter);
}

#[test]
fn a_final_release_publishes_zero_on_redissons_channel() {
    let server = RedisServer::start();
    let client = redisson(&server);
    let name = unique("chan");
    let mut listener = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut pubsub = listener.as_pubsub();
    let channel = format!("redisson_lock__channel:{{{name}}}");
    pubsub.subscribe(&channel).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let lock = client.lock(&name);
    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    drop(inner);
    drop(outer);
    let message = pubsub.get_message().unwrap();
    assert_eq!(message.get_channel_name(), channel);
    assert_eq!(message.get_payload_bytes(), b"0");
}

#[test]
fn a_name_with_braces_follows_redissons_rule() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = format!("{}{{42}}lock", unique("app"));
    let guard = client.lock(&name).lock().unwrap();
    let token_key = format!("redisson_lock_token:{name}");
    let counter: u64 = redis::cmd("GET").arg(&token_key).query(&mut admin).unwrap();
    assert_eq!(counter, guard.fencing_token());
}

/// A Java holder, by hand: what Redisson's acquire leaves (Redisson's format).
fn java_holds(admin: &mut redis::Connection, name: &str, field: &str) {
    let _: () = redis::pipe()
        .cmd("HINCRBY")
        .arg(name)
        .arg(field)
        .arg(1)
        .cmd("PEXPIRE")
        .arg(name)
        .arg(30_000)
        .query(admin)
        .unwrap();
}

/// What Redisson's final unlock does (4.3): delete, publish "0".
fn java_unlocks(admin: &mut redis::Connection, name: &str) {
    let _: () = redis::pipe()
        .cmd("DEL")
        .arg(name)
        .cmd("PUBLISH")
        .arg(format!("redisson_lock__channel:{{{name}}}"))
        .arg("0")
        .query(admin)
        .unwrap();
}

#[test]
fn a_java_release_wakes_our_waiter_long_before_its_lease() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("woken");
    java_holds(&mut admin, &name, "5f1c2c9e-3b7e-4b4e-9d6a-2f0d3c1f9a10:87");
    let lock = client.lock(&name);
    assert!(lock.try_lock(Duration::ZERO, None).unwrap().is_none());
    let base = command_calls(&mut admin, "evalsha");
    let waiting = {
        let lock = lock.clone();
        thread::spawn(move || {
            let guard = lock.try_lock(Duration::from_secs(20), None).unwrap();
            (Instant::now(), guard.is_some())
        })
    };
    assert!(eventually(Duration::from_secs(5), || {
        client.stats().waiting_threads == 1 && client.stats().subscriptions == 1
    }));
    await_parked(&mut admin, base);
    let released = Instant::now();
    java_unlocks(&mut admin, &name);
    let (woken, got) = join_all(vec![waiting], Duration::from_secs(30), "waiter").remove(0);
    assert!(got);
    assert!(
        woken - released < Duration::from_millis(800),
        "woken {:?} after the release, with 30 s of lease left",
        woken - released
    );
}

#[test]
fn a_java_holder_is_not_released_by_us_and_a_force_unlock_takes_anyone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("theirs");
    java_holds(&mut admin, &name, "java:1");
    let lock = client.lock(&name);
    assert!(lock.is_locked().unwrap());
    assert!(!lock.is_held_by_current_thread().unwrap());
    assert!(lock.remaining_ttl().unwrap().is_some());
    assert!(lock.force_unlock().unwrap());
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn a_key_of_another_type_is_wrong_type_and_left_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("string");
    let _: () = redis::cmd("SET")
        .arg(&name)
        .arg("data")
        .query(&mut admin)
        .unwrap();
    let lock = client.lock(&name);
    assert!(matches!(
        lock.try_lock(Duration::ZERO, None),
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(lock.force_unlock(), Err(Error::WrongType { .. })));
    let kept: String = redis::cmd("GET").arg(&name).query(&mut admin).unwrap();
    assert_eq!(kept, "data");
    // A counter that is not a number: refused before anything is written.
    let other = unique("badtoken");
    let token_key = format!("redisson_lock_token:{{{other}}}");
    let _: () = redis::cmd("SET")
        .arg(&token_key)
        .arg("x")
        .query(&mut admin)
        .unwrap();
    match client.lock(&other).try_lock(Duration::ZERO, None) {
        Err(Error::WrongType { key }) => assert_eq!(key, token_key),
        other => panic!("expected WrongType, got {other:?}"),
    }
    let exists: bool = redis::cmd("EXISTS").arg(&other).query(&mut admin).unwrap();
    assert!(!exists);
}

#[test]
fn the_watchdog_renews_the_hash_and_a_taken_lock_is_reported_lost() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::builder(&server.url())
        .layout(Layout::Redisson)
        .watchdog_timeout(Duration::from_millis(900))
        .build()
        .unwrap();
    let name = unique("renewed");
    let guard = client.lock(&name).lock().unwrap();
    thread::sleep(Duration::from_millis(2_000));
    assert!(!guard.is_lost());
    let pttl: i64 = redis::cmd("PTTL").arg(&name).query(&mut admin).unwrap();
    assert!(pttl > 0, "renewed: {pttl}");
    // Taken by a Java service after a delete: our holder learns it at the next renewal.
    let _: () = redis::cmd("DEL").arg(&name).query(&mut admin).unwrap();
    java_holds(&mut admin, &name, "java:9");
    assert!(eventually(Duration::from_secs(3), || guard.is_lost()));
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
    let field: Option<String> = redis::cmd("HGET")
        .arg(&name)
        .arg("java:9")
        .query(&mut admin)
        .unwrap();
    assert_eq!(field.as_deref(), Some("1"), "the Java hold is untouched");
}

#[test]
fn two_redlatch_clients_exclude_each_other_and_wake_each_other() {
    let server = RedisServer::start();
    let name = unique("ours");
    let (a, b) = (redisson(&server), redisson(&server));
    let guard = a.lock(&name).lock().unwrap();
    let mut admin = server.admin();
    let base = command_calls(&mut admin, "evalsha");
    let waiting = {
        let lock = b.lock(&name);
        thread::spawn(move || {
            let guard = lock.try_lock(Duration::from_secs(20), None).unwrap();
            (Instant::now(), guard.map(|g| g.fencing_token()))
        })
    };
    assert!(eventually(Duration::from_secs(5), || b
        .stats()
        .waiting_threads
        == 1));
    await_parked(&mut admin, base);
    let first = guard.fencing_token();
    let released = Instant::now();
    drop(guard);
    let (woken, token) = join_all(vec![waiting], Duration::from_secs(30), "waiter").remove(0);
    assert!(token.unwrap() > first);
    assert!(woken - released < Duration::from_millis(800));
}

#[test]
fn a_latch_is_redissons_string_and_opens_both_ways() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("latch");
    let latch = client.count_down_latch(&name);
    let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
    let mut listener = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut pubsub = listener.as_pubsub();
    pubsub.subscribe(&channel).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(latch.try_set_count(2).unwrap());
    assert!(!latch.try_set_count(5).unwrap(), "a count is running");
    assert_eq!(pubsub.get_message().unwrap().get_payload_bytes(), b"1");
    let count: String = redis::cmd("GET").arg(&name).query(&mut admin).unwrap();
    assert_eq!(count, "2");
    assert_eq!(latch.count_down().unwrap(), 1);
    assert_eq!(latch.count_down().unwrap(), 0);
    assert_eq!(pubsub.get_message().unwrap().get_payload_bytes(), b"0");
    let exists: bool = redis::cmd("EXISTS").arg(&name).query(&mut admin).unwrap();
    assert!(!exists, "deleted at zero, as Java does");
    assert!(latch.wait(Duration::ZERO).unwrap());

    // A Java round (SET + "1"), counted down by Java (DECR, DEL, "0"): our waiter opens.
    let _: () = redis::cmd("SET")
        .arg(&name)
        .arg(1)
        .query(&mut admin)
        .unwrap();
    let base = command_calls(&mut admin, "evalsha");
    let waiting = {
        let latch = latch.clone();
        thread::spawn(move || (latch.wait(Duration::from_secs(20)).unwrap(), Instant::now()))
    };
    assert!(eventually(Duration::from_secs(5), || client
        .stats()
        .waiting_threads
        == 1));
    await_parked(&mut admin, base);
    let opened = Instant::now();
    let _: () = redis::pipe()
        .cmd("DEL")
        .arg(&name)
        .cmd("PUBLISH")
        .arg(&channel)
        .arg("0")
        .query(&mut admin)
        .unwrap();
    let (open, when) = join_all(vec![waiting], Duration::from_secs(30), "waiter").remove(0);
    assert!(open);
    assert!(when - opened < Duration::from_millis(800));
}

#[test]
fn a_multi_lock_takes_redissons_hashes_all_or_none() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let (a, b) = (unique("ma"), unique("mb"));
    java_holds(&mut admin, &b, "java:3");
    let multi = client.multi_lock(&[&a, &b]);
    assert!(multi.try_lock(Duration::ZERO, None).unwrap().is_none());
    let exists: bool = redis::cmd("EXISTS").arg(&a).query(&mut admin).unwrap();
    assert!(!exists, "none taken while one is busy");
    let base = command_calls(&mut admin, "evalsha");
    let waiting = {
        let multi = multi.clone();
        thread::spawn(move || {
            let guard = multi.try_lock(Duration::from_secs(20), None).unwrap();
            (Instant::now(), guard.map(|g| g.fencing_tokens()))
        })
    };
    assert!(eventually(Duration::from_secs(5), || client
        .stats()
        .waiting_threads
        == 1));
    await_parked(&mut admin, base);
    let released = Instant::now();
    java_unlocks(&mut admin, &b);
    let (woken, tokens) = join_all(vec![waiting], Duration::from_secs(30), "waiter").remove(0);
    assert_eq!(tokens.unwrap().len(), 2);
    assert!(woken - released < Duration::from_millis(800));
}

#[test]
fn a_spin_lock_is_the_same_hash_and_excludes_a_java_holder() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("spin");
    java_holds(&mut admin, &name, "java:4");
    let spin = client.spin_lock(&name);
    assert!(
        spin.try_lock(Duration::from_millis(200), None)
            .unwrap()
            .is_none()
    );
    java_unlocks(&mut admin, &name);
    let guard = spin
        .try_lock(Duration::from_secs(5), None)
        .unwrap()
        .unwrap();
    let count: String = redis::cmd("HGET")
        .arg(&name)
        .arg(client.current_thread_owner_id())
        .query(&mut admin)
        .unwrap();
    assert_eq!(count, "1");
    // The lock handle of the same name re-enters the spin lock's hold.
    let again = client.lock(&name).lock().unwrap();
    assert_eq!(again.fencing_token(), guard.fencing_token());
}

/// The owners queued for Redisson fair lock `name`, head first, and their deadlines.
fn fair_queue(admin: &mut redis::Connection, name: &str) -> Vec<(String, i64)> {
    let queue: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("redisson_lock_queue:{{{name}}}"))
        .arg(0)
        .arg(-1)
        .query(admin)
        .unwrap();
    queue
        .into_iter()
        .map(|owner| {
            let deadline: f64 = redis::cmd("ZSCORE")
                .arg(format!("redisson_lock_timeout:{{{name}}}"))
                .arg(&owner)
                .query(admin)
                .unwrap();
            (owner, deadline as i64)
        })
        .collect()
}

#[test]
fn a_fair_lock_serves_waiters_in_arrival_order_through_redissons_queue() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("fair");
    let lock = client.fair_lock(&name);
    let first = lock.lock().unwrap();
    let order = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let (lock, order) = (lock.clone(), order.clone());
        waiters.push(thread::spawn(move || {
            let guard = lock
                .try_lock(Duration::from_secs(30), None)
                .unwrap()
                .unwrap();
            order.lock().push(i);
            thread::sleep(Duration::from_millis(20));
            drop(guard);
        }));
        // Each one queued before the next arrives.
        assert!(eventually(Duration::from_secs(5), || fair_queue(
            &mut admin, &name
        )
        .len()
            == i + 1));
    }
    let queued = fair_queue(&mut admin, &name);
    // Java's chain: each deadline is its predecessor's plus the slot (the wait, 30 s).
    assert_eq!(queued[1].1 - queued[0].1, 30_000);
    assert_eq!(queued[2].1 - queued[1].1, 30_000);
    drop(first);
    join_all(waiters, Duration::from_secs(30), "fair waiters");
    assert_eq!(*order.lock(), vec![0, 1, 2]);
    assert!(
        fair_queue(&mut admin, &name).is_empty(),
        "each left the queue as it took the lock"
    );
}

#[test]
fn a_fair_release_wakes_the_head_on_its_own_channel_and_a_waiter_that_gives_up_leaves() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("fairhead");
    let lock = client.fair_lock(&name);
    // A waiter that gives up leaves the queue.
    let guard = lock.lock().unwrap();
    let gave_up = {
        let lock = lock.clone();
        thread::spawn(move || {
            lock.try_lock(Duration::from_millis(300), None)
                .unwrap()
                .is_none()
        })
    };
    assert!(join_all(vec![gave_up], Duration::from_secs(10), "waiter").remove(0));
    assert!(fair_queue(&mut admin, &name).is_empty());
    // A Java waiter queued as Java queues: head of the queue, its own channel.
    let java = "5f1c2c9e-3b7e-4b4e-9d6a-2f0d3c1f9a10:7";
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let _: () = redis::pipe()
        .cmd("RPUSH")
        .arg(format!("redisson_lock_queue:{{{name}}}"))
        .arg(java)
        .cmd("ZADD")
        .arg(format!("redisson_lock_timeout:{{{name}}}"))
        .arg(now + 300_000)
        .arg(java)
        .query(&mut admin)
        .unwrap();
    let mut listener = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut pubsub = listener.as_pubsub();
    let channel = format!("redisson_lock__channel:{{{name}}}:{java}");
    pubsub.subscribe(&channel).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    drop(guard);
    let message = pubsub.get_message().unwrap();
    assert_eq!(message.get_channel_name(), channel);
    assert_eq!(message.get_payload_bytes(), b"0");
    // Not the Java head's turn yet in our eyes: our attempt finds it ahead.
    assert!(lock.try_lock(Duration::ZERO, None).unwrap().is_none());
}

#[test]
fn inspect_reads_redissons_read_write_lock_and_semaphore() {
    let server = RedisServer::start();
    let client = redisson(&server);
    let rw_name = unique("rwi");
    let rw = client.read_write_lock(&rw_name);
    let read = rw.read().unwrap();
    let report = client
        .inspect(redlatch::ObjectKind::ReadWriteLock, &rw_name)
        .unwrap();
    assert_eq!(report.holders.len(), 1, "{report}");
    let holder = &report.holders[0];
    assert_eq!(holder.owner, read.owner_id());
    assert!(!holder.writer && holder.count == 1);
    assert!(
        holder
            .lease_left
            .is_some_and(|l| l > Duration::from_secs(20)),
        "{report}"
    );
    drop(read);
    let write = rw.write().unwrap();
    let report = client
        .inspect(redlatch::ObjectKind::ReadWriteLock, &rw_name)
        .unwrap();
    assert!(report.holders.iter().any(|h| h.writer), "{report}");
    assert_eq!(report.fence, Some(write.fencing_token()));

    let sem_name = unique("semi");
    let semaphore = client.semaphore(&sem_name);
    semaphore.set_permits(3).unwrap();
    let permits = semaphore.acquire(2).unwrap();
    let report = client
        .inspect(redlatch::ObjectKind::Semaphore, &sem_name)
        .unwrap();
    assert_eq!(report.count, Some(3), "the total: {report}");
    assert_eq!(report.holders.len(), 2, "one line per permit id: {report}");
    for holder in &report.holders {
        assert_eq!(
            holder.owner.len(),
            32,
            "a permit id in hex: {}",
            holder.owner
        );
        assert!(permits.owner_id().contains(&holder.owner));
    }
    let listed = client.list(&format!("{}*", &sem_name[..6])).unwrap();
    assert!(
        listed
            .iter()
            .any(|l| l.name == sem_name && l.kind == redlatch::ObjectKind::Semaphore),
        "{listed:?}"
    );
}

/// Within one client, a release hands the lock to a waiting thread of that client: the hash
/// changes field, nothing is published, and nobody else is woken; after three such releases
/// in a row the next one frees it for everybody ("0" on the channel).
#[test]
fn a_release_hands_the_lock_to_a_waiting_thread_of_its_client_three_times_in_a_row() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("local");
    let mut listener = support::jvm::Listener::new(
        &server.url(),
        &format!("redisson_lock__channel:{{{name}}}"),
        support::jvm::Publish::Plain,
    );
    let lock = client.lock(&name);
    // Owned guards move between threads: each round's holder releases with a waiter queued.
    let mut guard = lock.lock_owned().unwrap();
    let mut published = Vec::new();
    for round in 0..8 {
        let waiting = {
            let lock = lock.clone();
            thread::spawn(move || lock.try_lock_owned(Duration::from_secs(20), None).unwrap())
        };
        assert!(eventually(Duration::from_secs(5), || client
            .stats()
            .waiting_threads
            == 1));
        // Parked, not in the middle of an attempt of its own (its first wait may return at
        // once to attempt again): a release does not hand the lock to a thread mid-attempt,
        // and would free it for everybody instead. Parked once no script call comes for a
        // while.
        assert!(
            eventually(Duration::from_secs(5), || {
                let calls = command_calls(&mut admin, "evalsha");
                thread::sleep(Duration::from_millis(50));
                command_calls(&mut admin, "evalsha") == calls
            }),
            "round {round}: the waiter never parked"
        );
        let before = (guard.fencing_token(), client.stats().handed_over);
        drop(guard);
        guard = waiting.join().unwrap().expect("the waiter got it");
        assert!(
            guard.fencing_token() > before.0,
            "round {round}: a new token"
        );
        let fields: Vec<String> = redis::cmd("HKEYS").arg(&name).query(&mut admin).unwrap();
        assert_eq!(fields, vec![guard.owner_id().to_string()], "round {round}");
        let messages = listener.drain(Duration::from_millis(300)).len();
        published.push(messages);
        let handed = client.stats().handed_over > before.1;
        assert_eq!(
            handed,
            messages == 0,
            "round {round}: handed over or published"
        );
    }
    // Three handed over, the fourth freed for everybody, and again.
    assert_eq!(published, vec![0, 0, 0, 1, 0, 0, 0, 1]);
    drop(guard);
    let exists: bool = redis::cmd("EXISTS").arg(&name).query(&mut admin).unwrap();
    assert!(!exists);
}

/// A release that hands the lock to a thread of its own client while that thread's wait runs
/// out: the hand-over nobody takes up is given back, so the lock is free at once rather than
/// held by nobody for the hand-over's lease (30 s). Each round lets the two meet at the wait's
/// end; bounded by rounds and by a 2 s look at the lock after each.
#[test]
fn a_hand_over_to_a_thread_whose_wait_ran_out_is_given_back() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("given-back");
    for round in 0..100u64 {
        let wait = Duration::from_millis(20 + round % 7);
        let held = client.lock(&name).lock().unwrap();
        let waiter = {
            let lock = client.lock(&name);
            thread::spawn(move || lock.try_lock(wait, None).unwrap().map(drop).is_some())
        };
        thread::sleep(wait - Duration::from_micros(300 * (round % 9)));
        held.unlock().unwrap();
        waiter.join().unwrap();
        assert!(
            eventually(Duration::from_secs(2), || {
                !redis::cmd("EXISTS")
                    .arg(&name)
                    .query::<bool>(&mut admin)
                    .unwrap()
            }),
            "round {round}: the lock stayed held by nobody"
        );
    }
}

/// Threads of one client racing for a few locks with no pause, in Redisson's layout, where a
/// release hands the lock to a waiting thread of the client: no hold is ever lost. A waiter
/// woken by a message once attempted while a release was handing it the lock; its attempt
/// found its own field and took the lock, and the hand-over, finding it no longer waiting,
/// gave the lock back under it (the report found 10 to 64 unlocks a run answering LockLost
/// with 16 threads over 1,000 locks).
#[test]
fn racing_threads_never_lose_a_hold_handed_over_in_the_client() {
    let server = RedisServer::start();
    let client = redisson(&server);
    let names: Vec<String> = (0..8).map(|i| unique(&format!("race{i}"))).collect();
    let stop = Instant::now() + Duration::from_secs(8);
    let threads: Vec<_> = (0..12u64)
        .map(|t| {
            let (client, names) = (client.clone(), names.clone());
            thread::spawn(move || {
                let (mut taken, mut lost) = (0u64, Vec::new());
                let mut pick = t;
                while Instant::now() < stop {
                    pick = pick
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let name = &names[(pick >> 33) as usize % names.len()];
                    let lock = client.lock(name);
                    let Some(guard) = lock.try_lock(Duration::from_secs(5), None).unwrap() else {
                        continue;
                    };
                    taken += 1;
                    if let Err(e) = guard.unlock() {
                        lost.push(format!("{name}: {e}"));
                    }
                }
                (taken, lost)
            })
        })
        .collect();
    let results = join_all(threads, Duration::from_secs(60), "racing threads");
    let taken: u64 = results.iter().map(|r| r.0).sum();
    let lost: Vec<&String> = results.iter().flat_map(|r| &r.1).collect();
    assert!(taken > 1_000, "only {taken} acquisitions");
    assert!(
        lost.is_empty(),
        "{} of {taken} holds lost: {lost:?}",
        lost.len()
    );
}

fn pttl_of(admin: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(admin).unwrap()
}

#[test]
fn extend_sets_the_hashs_lease_only_while_our_field_is_there() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (client, other) = (redisson(&server), redisson(&server));
    let name = unique("extend");
    let lock = client.lock(&name);
    let guard = lock.lock_with_lease(Duration::from_millis(400)).unwrap();
    guard.extend(Duration::from_secs(5)).unwrap();
    let ttl = pttl_of(&mut admin, &name);
    assert!((4000..=5000).contains(&ttl), "PTTL {ttl}");
    thread::sleep(Duration::from_millis(700));
    assert!(!guard.is_lost());
    assert!(other.lock(&name).is_held_by(guard.owner_id()).unwrap());
    assert!(
        !other
            .lock(&name)
            .is_held_by(&other.current_thread_owner_id())
            .unwrap()
    );
    guard.extend(Duration::from_millis(1500)).unwrap();
    let ttl = pttl_of(&mut admin, &name);
    assert!((1..=1500).contains(&ttl), "set, not added: PTTL {ttl}");

    // Force-unlocked, and a Java thread took it: its hash is not ours to extend.
    assert!(other.lock(&name).force_unlock().unwrap());
    java_holds(&mut admin, &name, "java-uuid:7");
    assert!(matches!(
        guard.extend(Duration::from_secs(60)),
        Err(Error::LockLost { .. })
    ));
    assert!(pttl_of(&mut admin, &name) <= 30_000);
    assert!(lock.is_held_by("java-uuid:7").unwrap());
    java_unlocks(&mut admin, &name);
    drop(guard);
    assert!(matches!(
        lock.is_held_by(""),
        Err(Error::InvalidArgument(_))
    ));

    // Nothing is written back when the hash is gone.
    let owned = lock.lock_owned_with_lease(Duration::from_secs(5)).unwrap();
    assert!(lock.is_held_by(owned.owner_id()).unwrap());
    assert!(!lock.is_held_by_current_thread().unwrap());
    let _: () = redis::cmd("DEL").arg(&name).query(&mut admin).unwrap();
    assert!(matches!(
        owned.extend(Duration::from_secs(5)),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(pttl_of(&mut admin, &name), -2);
}

#[test]
fn extend_sets_a_writes_hash_lease_and_a_reads_timeout_keys() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("rw-extend");
    let lock = client.read_write_lock(&name);
    let short = Some(Duration::from_millis(400));
    let write = lock.try_write(Duration::ZERO, short).unwrap().unwrap();
    let read = lock.try_read(Duration::ZERO, short).unwrap().unwrap();
    let timeout = format!("{{{name}}}:{}:rwlock_timeout:1", read.owner_id());
    write.extend(Duration::from_secs(5)).unwrap();
    let ttl = pttl_of(&mut admin, &name);
    assert!((4000..=5000).contains(&ttl), "PTTL {ttl}");
    // A read of the writing thread: its timeout key, and the hash only extended (it carries
    // the write too).
    read.extend(Duration::from_secs(8)).unwrap();
    let ttl = pttl_of(&mut admin, &timeout);
    assert!((7000..=8000).contains(&ttl), "timeout key PTTL {ttl}");
    assert!(pttl_of(&mut admin, &name) >= 7000);
    // A write never sets the hash below what its thread's reads have left.
    write.extend(Duration::from_secs(1)).unwrap();
    assert!(pttl_of(&mut admin, &name) >= 7000);
    thread::sleep(Duration::from_millis(700));
    assert!(!write.is_lost() && !read.is_lost());
    write.unlock().unwrap();
    // Readers alone: the hash lives as long as the longest reader, as Java's read unlock
    // computes it.
    read.extend(Duration::from_secs(2)).unwrap();
    let ttl = pttl_of(&mut admin, &name);
    assert!((1..=2000).contains(&ttl), "PTTL {ttl}");

    assert!(lock.force_unlock().unwrap());
    assert!(matches!(
        read.extend(Duration::from_secs(5)),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(pttl_of(&mut admin, &name), -2);
    drop(read);
    let watched = lock.write().unwrap();
    assert!(matches!(
        watched.extend(Duration::from_secs(5)),
        Err(Error::InvalidArgument(_))
    ));
}

/// The 16 raw bytes of a permit id shown in hex.
fn permit_id(hex: &str) -> Vec<u8> {
    (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn epoch_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn extend_moves_a_permits_lease_end_as_javas_update_lease_time() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("psem-extend");
    let held = format!("{{{name}}}:timeout");
    let sem = client.semaphore(&name);
    sem.set_permits(1).unwrap();
    let permits = sem
        .try_acquire(1, Duration::ZERO, Some(Duration::from_millis(400)))
        .unwrap()
        .unwrap();
    let id = permit_id(permits.owner_id());
    let end_left = |admin: &mut redis::Connection| -> Option<i64> {
        let score: Option<i64> = redis::cmd("ZSCORE")
            .arg(&held)
            .arg(&id[..])
            .query(admin)
            .unwrap();
        score.map(|end| end - epoch_ms())
    };
    permits.extend(Duration::from_secs(5)).unwrap();
    let left = end_left(&mut admin).unwrap();
    assert!((4000..=5000).contains(&left), "{left}");
    thread::sleep(Duration::from_millis(700));
    assert!(!permits.is_lost());
    assert_eq!(sem.available().unwrap(), 0, "not reclaimed");
    permits.extend(Duration::from_millis(1500)).unwrap();
    let left = end_left(&mut admin).unwrap();
    assert!((1..=1500).contains(&left), "set, not added: {left}");

    // Reclaimed (as a Java client's reclaim does when the lease passed): never put back.
    let _: () = redis::cmd("ZREM")
        .arg(&held)
        .arg(&id[..])
        .query(&mut admin)
        .unwrap();
    assert!(matches!(
        permits.extend(Duration::from_secs(5)),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(end_left(&mut admin), None);
}

#[test]
fn extend_sets_a_fair_locks_lease_too() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("fair-extend");
    let lock = client.fair_lock(&name);
    let guard = lock.lock_with_lease(Duration::from_millis(400)).unwrap();
    guard.extend(Duration::from_secs(5)).unwrap();
    let ttl = pttl_of(&mut admin, &name);
    assert!((4000..=5000).contains(&ttl), "PTTL {ttl}");
    thread::sleep(Duration::from_millis(700));
    assert!(!guard.is_lost());
    assert!(lock.is_held_by(guard.owner_id()).unwrap());
    assert!(lock.force_unlock().unwrap());
    assert!(matches!(
        guard.extend(Duration::from_secs(5)),
        Err(Error::LockLost { .. })
    ));
    assert_eq!(pttl_of(&mut admin, &name), -2);
}

/// Runs `f` on a thread of its own; its result within `limit`, or the test fails (a wait that
/// never ends is the bug these tests look for).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("no answer within {limit:?}"))
}

/// A call that takes a lock of some kind on a name, with a client of its own.
type TakeOn = Box<dyn FnOnce(Client, String) -> redlatch::Result<()> + Send>;

fn assert_wrong_type<T: std::fmt::Debug>(what: &str, key: &str, got: redlatch::Result<T>) {
    match got {
        Err(Error::WrongType { key: k }) => assert_eq!(k, key, "{what}"),
        other => panic!("{what}: expected WrongType, got {other:?}"),
    }
}

/// An application's hash without a TTL is no Redisson lock (Java's and ours always have a
/// lease while held): every kind that takes a lock on it says `WrongType` at once, where a
/// `lock()` waited forever and `try_lock` called it busy (issue 40, item 3). The hash stays.
#[test]
fn an_applications_hash_without_a_ttl_is_not_a_lock_and_is_left_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("user");
    let _: () = redis::cmd("HSET")
        .arg(&name)
        .arg(&["name", "bob"])
        .query(&mut admin)
        .unwrap();
    let before: Vec<u8> = redis::cmd("DUMP").arg(&name).query(&mut admin).unwrap();
    let limit = Duration::from_secs(5);
    let free = unique("free");
    let calls: Vec<(&str, TakeOn)> = vec![
        ("lock", Box::new(|c, n| c.lock(&n).lock().map(drop))),
        (
            "try_lock",
            Box::new(|c, n| c.lock(&n).try_lock(Duration::from_secs(1), None).map(drop)),
        ),
        (
            "fair lock",
            Box::new(|c, n| c.fair_lock(&n).lock().map(drop)),
        ),
        (
            "fair try_lock",
            Box::new(|c, n| c.fair_lock(&n).try_lock(Duration::ZERO, None).map(drop)),
        ),
        (
            "spin lock",
            Box::new(|c, n| c.spin_lock(&n).lock().map(drop)),
        ),
        (
            "multi-lock",
            Box::new(move |c, n| c.multi_lock(&[&free, &n]).lock().map(drop)),
        ),
        (
            "write",
            Box::new(|c, n| c.read_write_lock(&n).write().map(drop)),
        ),
        (
            "read",
            Box::new(|c, n| c.read_write_lock(&n).read().map(drop)),
        ),
    ];
    for (what, call) in calls {
        let (c, n) = (client.clone(), name.clone());
        assert_wrong_type(what, &name, within(limit, move || call(c, n)));
        let after: Vec<u8> = redis::cmd("DUMP").arg(&name).query(&mut admin).unwrap();
        assert_eq!(after, before, "{what} changed the hash");
        assert_eq!(support::pttl(&mut admin, &name), -1, "{what}");
    }
}

/// `force_unlock` deletes only what looks like a lock: one field `<owner>:<thread>` with a
/// positive count, with or without a lease. An application's hash stays, with its TTL
/// (Java's forceUnlock would delete it).
#[test]
fn force_unlock_deletes_a_lock_but_not_an_applications_hash() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    for fields in [
        vec!["name", "bob"],
        vec!["name", "bob", "age", "7"],
        vec!["a1b2:7", "bob"],
        vec!["a1b2:7", "0"],
        vec!["a1b2:7", "1", "name", "bob"],
        vec!["nothread", "1"],
    ] {
        let name = unique("app-hash");
        let _: () = redis::cmd("HSET")
            .arg(&name)
            .arg(&fields)
            .query(&mut admin)
            .unwrap();
        let _: () = redis::cmd("PEXPIRE")
            .arg(&name)
            .arg(60_000)
            .query(&mut admin)
            .unwrap();
        let before: Vec<u8> = redis::cmd("DUMP").arg(&name).query(&mut admin).unwrap();
        assert_wrong_type(
            &format!("{fields:?}"),
            &name,
            client.lock(&name).force_unlock(),
        );
        let after: Vec<u8> = redis::cmd("DUMP").arg(&name).query(&mut admin).unwrap();
        assert_eq!(after, before, "{fields:?}");
        assert!(
            support::pttl(&mut admin, &name) > 50_000,
            "{fields:?}: its TTL stays"
        );
    }
    // The read-write lock's: a hash with a `mode` field is not one unless it reads as one.
    for fields in [
        vec!["mode", "dark", "user", "bob"],
        vec!["mode", "read", "user", "bob"],
        vec!["mode", "write", "a1b2:7:write", "x"],
    ] {
        let name = unique("app-mode");
        let _: () = redis::cmd("HSET")
            .arg(&name)
            .arg(&fields)
            .query(&mut admin)
            .unwrap();
        let _: () = redis::cmd("PEXPIRE")
            .arg(&name)
            .arg(60_000)
            .query(&mut admin)
            .unwrap();
        let before: Vec<u8> = redis::cmd("DUMP").arg(&name).query(&mut admin).unwrap();
        let rw = client.read_write_lock(&name);
        assert_wrong_type(&format!("{fields:?}"), &name, rw.force_unlock());
        let after: Vec<u8> = redis::cmd("DUMP").arg(&name).query(&mut admin).unwrap();
        assert_eq!(after, before, "{fields:?}");
    }
    let rw = client.read_write_lock(&unique("rw-held"));
    let write = rw.write().unwrap();
    assert!(rw.force_unlock().unwrap());
    drop(write);
    // A lock, Java's or ours, with its lease or after someone cleared it: freed.
    for lease in [Some(60_000), None] {
        let name = unique("stuck");
        let _: () = redis::cmd("HSET")
            .arg(&name)
            .arg(&["3f2c5d4e-1111-2222-3333-444455556666:81", "2"])
            .query(&mut admin)
            .unwrap();
        if let Some(ms) = lease {
            let _: () = redis::cmd("PEXPIRE")
                .arg(&name)
                .arg(ms)
                .query(&mut admin)
                .unwrap();
        }
        assert!(client.lock(&name).force_unlock().unwrap(), "{lease:?}");
        assert_eq!(support::pttl(&mut admin, &name), -2, "{lease:?}");
    }
    let name = unique("held");
    let guard = client.lock(&name).lock().unwrap();
    assert!(client.lock(&name).force_unlock().unwrap());
    assert!(guard.is_lost() || guard.check().is_err() || !client.lock(&name).is_locked().unwrap());
}
