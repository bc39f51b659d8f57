//! The Redisson 4.7.0 emulation of the test support (`support::jvm`) checked against itself
//! and against Redisson's format: its reference trace where it gives exact
//! replies or state, and Java's waiting where it gives behaviour: attempt,
//! subscribe, attempt again, be woken by the message within a few hundred ms while the lease
//! is 30 s (also after a killed subscriber connection was replaced), and send nothing while
//! nothing happens. Interop tests against redlatch build on this, so the
//! emulation must first be shown to be Redisson-shaped on its own.

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use support::jvm::{
    Fenced, Jvm, Listener, NO_LEASE_SCORE, PermitAttempt, Publish, fair_channel, fair_queue_key,
    fair_timeout_key, latch_channel, lock_channel, new_request_id, permit_zset_key, prefix_form,
    rw_channel, rw_key_prefix, rw_timeout_prefix, semaphore_channel, suffix_form, token_key,
    unlock_latch_key,
};
use support::{RedisServer, eventually, pttl, unique};

/// Nothing should arrive on a channel within this long when nothing was published.
const QUIET: Duration = Duration::from_millis(250);
/// A message that was published arrives well within this long.
const ARRIVES: Duration = Duration::from_secs(3);
/// How long after the release a woken Java waiter must hold the lock: "a few hundred ms",
/// against a 30 s lease it would otherwise sleep out.
const PROMPT: Duration = Duration::from_millis(800);
/// Every background wait in these tests gives up after this long.
const WAIT: Duration = Duration::from_secs(20);

fn subscribers(admin: &mut redis::Connection, channel: &str) -> i64 {
    let (_, n): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(admin)
        .unwrap();
    n
}

fn shard_subscribers(admin: &mut redis::Connection, channel: &str) -> i64 {
    let (_, n): (String, i64) = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query(admin)
        .unwrap();
    n
}

fn exists(admin: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(admin).unwrap() == 1
}

fn hash(admin: &mut redis::Connection, key: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL").arg(key).query(admin).unwrap()
}

fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Keys matching `pattern` (a test server holds only this test's keys).
fn keys(admin: &mut redis::Connection, pattern: &str) -> Vec<String> {
    redis::cmd("KEYS").arg(pattern).query(admin).unwrap()
}

/// Waits until `jvm` has sent exactly `expected` commands, then checks that it sends no more
/// for a while: a parked Java thread is silent.
fn settles_at(jvm: &Jvm, expected: u64) {
    assert!(
        eventually(ARRIVES, || jvm.commands_sent() >= expected),
        "the JVM sent {} commands, expected {expected}",
        jvm.commands_sent()
    );
    thread::sleep(QUIET);
    assert_eq!(
        jvm.commands_sent(),
        expected,
        "a waiting Java thread must send nothing while nothing happens"
    );
}

/// A background Java thread's result and when it had it.
fn spawn_timed<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<(T, Instant)> {
    thread::spawn(move || {
        let value = f();
        (value, Instant::now())
    })
}

// --- names ------------------------------------------------------------------------------

#[test]
fn names_follow_the_contains_brace_rule_and_the_latch_channel_exception() {
    // The table of section 2.1, both columns.
    let f = "5f1c2c9e-3b7e-4b4e-9d6a-2f0d3c1f9a10:87";
    assert_eq!(prefix_form("p", "orders"), "p:{orders}");
    assert_eq!(prefix_form("p", "app{42}lock"), "p:app{42}lock");
    assert_eq!(prefix_form("p", "x{"), "p:x{", "contains, not starts with");
    assert_eq!(suffix_form("orders", "s"), "{orders}:s");
    assert_eq!(suffix_form("app{42}lock", "s"), "app{42}lock:s");

    assert_eq!(lock_channel("orders"), "redisson_lock__channel:{orders}");
    assert_eq!(
        lock_channel("app{42}lock"),
        "redisson_lock__channel:app{42}lock"
    );
    assert_eq!(
        unlock_latch_key("orders", "00112233445566778899aabbccddeeff"),
        "redisson_unlock_latch:{orders}:00112233445566778899aabbccddeeff"
    );
    assert_eq!(
        unlock_latch_key("app{42}lock", "ab"),
        "redisson_unlock_latch:app{42}lock:ab"
    );
    assert_eq!(fair_queue_key("orders"), "redisson_lock_queue:{orders}");
    assert_eq!(
        fair_queue_key("app{42}lock"),
        "redisson_lock_queue:app{42}lock"
    );
    assert_eq!(fair_timeout_key("orders"), "redisson_lock_timeout:{orders}");
    assert_eq!(
        fair_timeout_key("app{42}lock"),
        "redisson_lock_timeout:app{42}lock"
    );
    assert_eq!(
        fair_channel("orders", f),
        format!("redisson_lock__channel:{{orders}}:{f}")
    );
    assert_eq!(
        fair_channel("app{42}lock", f),
        format!("redisson_lock__channel:app{{42}}lock:{f}")
    );
    assert_eq!(token_key("orders"), "redisson_lock_token:{orders}");
    assert_eq!(token_key("app{42}lock"), "redisson_lock_token:app{42}lock");
    assert_eq!(rw_channel("orders"), "redisson_rwlock:{orders}");
    assert_eq!(rw_channel("app{42}lock"), "redisson_rwlock:app{42}lock");
    assert_eq!(
        rw_timeout_prefix("orders", f),
        format!("{{orders}}:{f}:rwlock_timeout")
    );
    assert_eq!(
        rw_timeout_prefix("app{42}lock", f),
        format!("app{{42}}lock:{f}:rwlock_timeout")
    );
    assert_eq!(rw_key_prefix("orders"), "{orders}");
    assert_eq!(rw_key_prefix("app{42}lock"), "app{42}lock");
    assert_eq!(semaphore_channel("orders"), "redisson_sc:{orders}");
    assert_eq!(semaphore_channel("app{42}lock"), "redisson_sc:app{42}lock");
    assert_eq!(permit_zset_key("orders"), "{orders}:timeout");
    assert_eq!(permit_zset_key("app{42}lock"), "app{42}lock:timeout");
    assert_eq!(
        latch_channel("orders"),
        "redisson_countdownlatch__channel__{orders}"
    );
    assert_eq!(
        latch_channel("app{42}lock"),
        "redisson_countdownlatch__channel__{app{42}lock}",
        "the latch channel always has braces"
    );
}

#[test]
fn identity_is_a_uuid_per_client_and_the_thread_id() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    assert_ne!(a.uuid(), b.uuid());
    for jvm in [&a, &b] {
        let uuid = jvm.uuid();
        assert_eq!(uuid.len(), 36);
        assert_eq!(uuid.matches('-').count(), 4);
        assert_eq!(uuid, uuid.to_lowercase());
        assert_eq!(jvm.owner(87), format!("{uuid}:87"));
        assert_eq!(jvm.write_owner(87), format!("{uuid}:87:write"));
    }
    let id = new_request_id();
    assert_eq!(id.len(), 32);
    assert!(
        id.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_uppercase())
    );
    assert_ne!(id, new_request_id());
}

#[test]
fn a_name_with_inner_braces_uses_the_unbraced_channel() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("app{42}lock");
    let channel = format!("redisson_lock__channel:{name}");
    let mut listener = a.listen(&channel);
    let mut braced = a.listen(&format!("redisson_lock__channel:{{{name}}}"));

    assert_eq!(a.lock_acquire(&name, 1, -1), None);
    let waiter = {
        let (b, name) = (b.clone(), name.clone());
        spawn_timed(move || b.try_lock(&name, 1, WAIT, -1))
    };
    assert!(eventually(ARRIVES, || subscribers(&mut admin, &channel) == 2));
    let released = Instant::now();
    assert_eq!(a.unlock(&name, 1), Some(1));
    assert_eq!(listener.next(ARRIVES).as_deref(), Some("0"));
    let (acquired, at) = waiter.join().unwrap();
    assert!(acquired);
    assert!(at - released < PROMPT, "woken after {:?}", at - released);
    assert_eq!(
        braced.next(QUIET),
        None,
        "the starts-with form hears nothing"
    );
    assert_eq!(b.unlock(&name, 1), Some(1));

    // The count-down latch keeps its braces even here.
    let mut latch = a.listen(&format!(
        "redisson_countdownlatch__channel__{{{name}-latch}}"
    ));
    let latch_name = format!("{name}-latch");
    assert!(a.latch_try_set_count(&latch_name, 1));
    assert_eq!(latch.next(ARRIVES).as_deref(), Some("1"));
    a.latch_count_down(&latch_name);
    assert_eq!(latch.next(ARRIVES).as_deref(), Some("0"));
}

// --- RLock ------------------------------------------------------------------------------

#[test]
fn rlock_two_jvms_exclude_each_other_and_count_reentries() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("rlock");

    assert_eq!(a.lock_acquire(&name, 1, -1), None);
    assert_eq!(a.lock_acquire(&name, 1, -1), None, "re-entry");
    assert_eq!(a.hold_count(&name, 1), 2);
    assert!(a.is_held_by(&name, 1));
    assert_eq!(hash(&mut admin, &name), map(&[(&a.owner(1), "2")]));
    let lease = pttl(&mut admin, &name);
    assert!((29_000..=30_000).contains(&lease), "PTTL {lease}");

    let ttl = b
        .lock_acquire(&name, 1, -1)
        .expect("another JVM is excluded");
    assert!((29_000..=30_000).contains(&ttl), "ttl {ttl}");
    assert!(a.lock_acquire(&name, 2, -1).is_some(), "another thread too");
    assert_eq!(b.unlock(&name, 1), None, "a non-owner's unlock is nil");
    assert_eq!(a.unlock(&name, 2), None);
    assert_eq!(a.hold_count(&name, 1), 2, "nothing changed");

    // Read the release message with the redis crate's own subscriber too, so that this
    // does not rest on the emulation's RESP reader alone.
    let mut subscriber = server.admin();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.subscribe(lock_channel(&name)).unwrap();
    pubsub.set_read_timeout(Some(ARRIVES)).unwrap();
    assert_eq!(a.unlock(&name, 1), Some(0));
    assert_eq!(a.hold_count(&name, 1), 1);
    assert_eq!(a.unlock(&name, 1), Some(1));
    let message = pubsub.get_message().unwrap();
    assert_eq!(message.get_channel_name(), lock_channel(&name));
    assert_eq!(message.get_payload::<String>().unwrap(), "0");
    drop(pubsub);
    assert!(!a.is_locked(&name));
    assert_eq!(a.unlock(&name, 1), None, "not held any more");
    assert!(
        keys(&mut admin, "redisson_unlock_latch:*").is_empty(),
        "every unlock deletes its latch"
    );

    assert_eq!(b.lock_acquire(&name, 1, 5_000), None);
    let lease = pttl(&mut admin, &name);
    assert!(
        (4_000..=5_000).contains(&lease),
        "an explicit lease: {lease}"
    );
    assert!(a.force_unlock(&name));
    assert!(!a.force_unlock(&name));
}

#[test]
fn rlock_matches_the_reference_trace() {
    // Section 14 rows for RLock, with U = one JVM and threads 1..3.
    let server = RedisServer::start();
    let u = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("res1");
    let mut channel = u.listen(&lock_channel(&name));

    assert_eq!(u.lock_acquire(&name, 1, 30_000), None);
    assert_eq!(u.lock_acquire(&name, 1, 30_000), None);
    let ttl = u.lock_acquire(&name, 2, 30_000).unwrap();
    assert!((29_000..=30_000).contains(&ttl), "ttl {ttl}");
    assert_eq!(u.renew_batch(&[(&name, &u.owner(1))], 30_000), vec![1]);

    let request = new_request_id();
    let latch = unlock_latch_key(&name, &request);
    assert_eq!(u.unlock_request(&name, 1, &request), Some(0));
    assert_eq!(
        redis::cmd("GET")
            .arg(&latch)
            .query::<String>(&mut admin)
            .unwrap(),
        "0"
    );
    let latch_ttl = pttl(&mut admin, &latch);
    assert!(
        (15_000..=20_000).contains(&latch_ttl),
        "latch PTTL {latch_ttl}"
    );
    assert_eq!(u.unlock_request(&name, 1, &request), Some(0), "replayed");
    assert_eq!(u.hold_count(&name, 1), 1, "a replay decrements nothing");
    assert_eq!(channel.next(QUIET), None);

    assert_eq!(u.unlock(&name, 1), Some(1));
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("0"));
    let free = new_request_id();
    assert_eq!(u.unlock_request(&name, 1, &free), None);
    assert!(
        !exists(&mut admin, &unlock_latch_key(&name, &free)),
        "not owner: no latch"
    );

    assert_eq!(u.lock_acquire(&name, 3, 30_000), None);
    assert!(u.force_unlock(&name));
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("0"));
    assert_eq!(channel.next(QUIET), None, "nothing else was published");
}

#[test]
fn a_retried_unlock_replays_its_first_result() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("retry");
    let mut channel = a.listen(&lock_channel(&name));
    assert_eq!(a.lock_acquire(&name, 1, -1), None);

    // The final unlock "loses" its reply and is retried with the same requestId: the
    // replay says 1 again instead of nil, and nothing is published twice.
    let request = new_request_id();
    assert_eq!(a.unlock_request(&name, 1, &request), Some(1));
    assert_eq!(a.unlock_request(&name, 1, &request), Some(1));
    assert_eq!(channel.drain(QUIET), vec!["0"]);

    // Meanwhile another owner took the lock: the replay must not touch it.
    let b = Jvm::new(&server.url());
    assert_eq!(b.lock_acquire(&name, 1, -1), None);
    assert_eq!(a.unlock_request(&name, 1, &request), Some(1));
    assert!(b.is_held_by(&name, 1));
    assert!(exists(&mut admin, &unlock_latch_key(&name, &request)));
}

#[test]
fn a_waiting_try_lock_is_woken_by_the_unlock_and_is_silent_meanwhile() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("wake");
    let channel = lock_channel(&name);

    assert_eq!(a.lock_acquire(&name, 1, -1), None, "a 30 s watchdog lease");
    let waiter = {
        let (b, name) = (b.clone(), name.clone());
        spawn_timed(move || b.try_lock(&name, 7, WAIT, -1))
    };
    // Attempt, SUBSCRIBE, attempt; then a parked thread: nothing more.
    settles_at(&b, 3);
    assert_eq!(subscribers(&mut admin, &channel), 1);
    assert_eq!(b.open_subscriptions(), 1);

    let released = Instant::now();
    assert_eq!(a.unlock(&name, 1), Some(1));
    let (acquired, at) = waiter.join().unwrap();
    assert!(acquired);
    assert!(at - released < PROMPT, "woken after {:?}", at - released);
    // One attempt after the message, then the last waiter unsubscribes.
    assert_eq!(b.commands_sent(), 5);
    assert_eq!(b.hold_count(&name, 7), 1);
    assert_eq!(b.open_subscriptions(), 0);
    assert!(eventually(ARRIVES, || subscribers(&mut admin, &channel) == 0));
}

#[test]
fn a_waiter_whose_subscriber_connection_is_killed_resubscribes_and_the_release_wakes_it() {
    // Redisson resubscribes 80-290 ms after its pub/sub connection is killed, wakes nobody
    // when it is back, and a release published after that wakes its waiter at once. Without
    // the resubscription the waiter sleeps out the holder's 30 s lease (here its 5 s wait).
    let server = RedisServer::start();
    let mut admin = server.admin();
    // Sharded pub/sub came with Redis 7.
    let publishes: &[Publish] = if support::server_version() >= (7, 0) {
        &[Publish::Plain, Publish::Sharded]
    } else {
        &[Publish::Plain]
    };
    for &publish in publishes {
        let a = Jvm::new(&server.url());
        let b = Jvm::new(&server.url());
        a.set_publish(publish);
        b.set_publish(publish);
        let name = unique("resubscribe");
        let channel = lock_channel(&name);
        let numsub = |admin: &mut redis::Connection| match publish {
            Publish::Plain => subscribers(admin, &channel),
            Publish::Sharded => shard_subscribers(admin, &channel),
        };

        assert_eq!(a.lock_acquire(&name, 1, 30_000), None, "a 30 s lease");
        let waiter = {
            let (b, name) = (b.clone(), name.clone());
            spawn_timed(move || b.try_lock(&name, 7, Duration::from_secs(5), -1))
        };
        // Attempt, SUBSCRIBE, attempt (the scripts are cached by `a`'s first call).
        settles_at(&b, 3);
        assert_eq!(numsub(&mut admin), 1, "{publish:?}");

        let killed: i64 = redis::cmd("CLIENT")
            .arg(&["KILL", "TYPE", "pubsub"])
            .query(&mut admin)
            .unwrap();
        let killed_at = Instant::now();
        assert!(killed >= 1, "{publish:?}: killed {killed}");
        let resubscribed = eventually(Duration::from_secs(3), || numsub(&mut admin) == 1);
        let back_after = killed_at.elapsed();
        // Back, and nothing woke the waiter: one SUBSCRIBE more, no attempt.
        thread::sleep(QUIET);
        let sent_before_release = b.commands_sent();

        let released = Instant::now();
        assert_eq!(a.unlock(&name, 1), Some(1));
        let (acquired, at) = waiter.join().unwrap();
        let woken_after = at.saturating_duration_since(released);
        assert!(
            acquired && woken_after < Duration::from_secs(1),
            "{publish:?}: acquired {acquired} {woken_after:?} after the release \
             (resubscribed: {resubscribed}, {back_after:?} after the kill)"
        );
        assert!(resubscribed, "{publish:?}: not resubscribed");
        assert!(
            back_after < Duration::from_secs(1),
            "{publish:?}: resubscribed {back_after:?} after the kill"
        );
        assert_eq!(
            sent_before_release, 4,
            "{publish:?}: the resubscription is one SUBSCRIBE and wakes nobody"
        );
        // One attempt after the message, then the last waiter unsubscribes.
        assert_eq!(b.commands_sent(), 6, "{publish:?}");
        assert_eq!(b.hold_count(&name, 7), 1);
        assert_eq!(b.open_subscriptions(), 0);
        assert!(eventually(ARRIVES, || numsub(&mut admin) == 0));
        eprintln!(
            "{publish:?}: resubscribed {back_after:?} after the kill; \
             woken {woken_after:?} after the release"
        );
    }
}

#[test]
fn try_lock_gives_up_after_its_wait_and_a_ttl_bounded_wait_retries() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let name = unique("giveup");

    assert_eq!(a.lock_acquire(&name, 1, 30_000), None);
    let started = Instant::now();
    assert!(!b.try_lock(&name, 1, Duration::from_millis(400), -1));
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(400), "gave up after {took:?}");
    assert!(took < Duration::from_secs(3), "gave up after {took:?}");
    assert_eq!(b.open_subscriptions(), 0);

    // A holder that lets its lease run out and publishes nothing: the waiter retries when
    // the ttl it was given has passed, not earlier and without a message.
    assert!(a.force_unlock(&name));
    assert_eq!(a.lock_acquire(&name, 1, 600), None);
    let started = Instant::now();
    assert!(b.try_lock(&name, 1, WAIT, -1));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(400),
        "acquired after {took:?}"
    );
    assert!(took < Duration::from_secs(3), "acquired after {took:?}");
}

#[test]
fn one_message_zero_wakes_one_thread_per_jvm_and_one_wakes_all() {
    // Section 3: one shared subscription per channel per JVM; `0` releases one permit of the
    // JVM-local semaphore, `1` as many as threads are parked, anything else nothing.
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("herd");
    let channel = lock_channel(&name);

    assert_eq!(a.lock_acquire(&name, 1, -1), None);
    let waiters: Vec<_> = [1, 2]
        .into_iter()
        .map(|thread| {
            let (b, name) = (b.clone(), name.clone());
            spawn_timed(move || {
                let acquired = b.try_lock(&name, thread, WAIT, -1);
                if acquired {
                    assert_eq!(b.unlock(&name, thread), Some(1));
                }
                acquired
            })
        })
        .collect();
    // Per thread: attempt, attempt; one SUBSCRIBE for both.
    settles_at(&b, 5);
    assert_eq!(
        subscribers(&mut admin, &channel),
        1,
        "one subscription per JVM"
    );

    let publish = |message: &str| {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg(message)
            .query(&mut server.admin())
            .unwrap();
    };
    publish("0");
    settles_at(&b, 6);
    publish("1");
    settles_at(&b, 8);
    publish("2");
    publish("x");
    settles_at(&b, 8);

    // The holder's release wakes one; its release wakes the other.
    assert_eq!(a.unlock(&name, 1), Some(1));
    for waiter in waiters {
        assert!(waiter.join().unwrap().0);
    }
    assert_eq!(b.open_subscriptions(), 0);
}

#[test]
fn sharded_mode_publishes_and_subscribes_with_spublish() {
    if support::server_version() < (7, 0) {
        eprintln!("sharded pub/sub came with Redis 7: nothing to check on this server");
        return;
    }
    let server = RedisServer::start();
    let a = Jvm::sharded(&server.url());
    let b = Jvm::sharded(&server.url());
    assert_eq!(a.publish(), Publish::Sharded);
    let mut admin = server.admin();
    let name = unique("sharded");
    let channel = lock_channel(&name);
    let mut plain = Listener::new(&server.url(), &channel, Publish::Plain);
    let mut sharded = a.listen(&channel);

    assert_eq!(a.lock_acquire(&name, 1, -1), None);
    let waiter = {
        let (b, name) = (b.clone(), name.clone());
        spawn_timed(move || b.try_lock(&name, 1, WAIT, -1))
    };
    settles_at(&b, 3);
    assert_eq!(shard_subscribers(&mut admin, &channel), 2);
    let released = Instant::now();
    assert_eq!(a.unlock(&name, 1), Some(1));
    let (acquired, at) = waiter.join().unwrap();
    assert!(acquired);
    assert!(at - released < PROMPT, "woken after {:?}", at - released);
    assert_eq!(sharded.next(ARRIVES).as_deref(), Some("0"));
    assert_eq!(plain.next(QUIET), None, "SPUBLISH never reaches SUBSCRIBE");
}

#[test]
fn lock_waits_out_a_holder_without_a_message_only_until_its_guard() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("nottl");
    assert_eq!(a.lock_acquire(&name, 1, -1), None);
    let _: i64 = redis::cmd("PERSIST").arg(&name).query(&mut admin).unwrap();
    assert_eq!(b.lock_acquire(&name, 1, -1), Some(-1));
    // Java's lock() would wait for a message forever; the guard ends the test's wait.
    let started = Instant::now();
    assert!(!b.lock(&name, 1, -1, Duration::from_millis(300)));
    assert!(started.elapsed() < Duration::from_secs(3));
    // So far: attempt; then attempt, SUBSCRIBE, attempt, UNSUBSCRIBE.
    assert_eq!(b.commands_sent(), 5);
    let waiter = {
        let (b, name) = (b.clone(), name.clone());
        spawn_timed(move || b.lock(&name, 1, -1, WAIT))
    };
    settles_at(&b, 8);
    assert_eq!(a.unlock(&name, 1), Some(1));
    assert!(waiter.join().unwrap().0);
}

// --- fenced and spin locks --------------------------------------------------------------

#[test]
fn fenced_lock_counts_every_acquisition() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("fenced");

    assert_eq!(a.fenced_acquire(&name, 1, -1), Fenced::Token(1));
    assert_eq!(
        a.fenced_acquire(&name, 1, -1),
        Fenced::Token(2),
        "re-entry too"
    );
    match b.fenced_acquire(&name, 1, -1) {
        Fenced::Held(ttl) => assert!((29_000..=30_000).contains(&ttl), "ttl {ttl}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(a.fenced_token(&name), Some(2));
    assert_eq!(
        pttl(&mut admin, &token_key(&name)),
        -1,
        "the token has no TTL"
    );

    let waiter = {
        let (b, name) = (b.clone(), name.clone());
        spawn_timed(move || b.fenced_try_lock(&name, 1, WAIT, -1))
    };
    settles_at(&b, 4);
    assert_eq!(a.unlock(&name, 1), Some(0));
    assert_eq!(a.unlock(&name, 1), Some(1));
    assert_eq!(waiter.join().unwrap().0, Some(3));
    assert_eq!(b.fenced_acquire_plain(&name, 1, -1), None);
    assert_eq!(b.fenced_token(&name), Some(4));
    assert_eq!(b.hold_count(&name, 1), 2);
}

#[test]
fn spin_lock_publishes_nothing_and_waits_by_backoff() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("spin");
    let mut channel = a.listen(&lock_channel(&name));

    assert_eq!(a.spin_acquire(&name, 1, -1), None);
    assert_eq!(a.spin_acquire(&name, 1, -1), None);
    assert!(b.spin_acquire(&name, 1, -1).is_some());
    let waiter = {
        let (b, name) = (b.clone(), name.clone());
        spawn_timed(move || b.spin_try_lock(&name, 1, WAIT, -1))
    };
    thread::sleep(Duration::from_millis(500));
    let polled = b.commands_sent();
    assert!(
        (4..40).contains(&polled),
        "backoff up to 128 ms: {polled} attempts in 500 ms"
    );
    assert_eq!(
        subscribers(&mut admin, &lock_channel(&name)),
        1,
        "only ours"
    );
    assert_eq!(a.spin_unlock(&name, 1), Some(0));
    let released = Instant::now();
    assert_eq!(a.spin_unlock(&name, 1), Some(1));
    let (acquired, at) = waiter.join().unwrap();
    assert!(acquired);
    assert!(at - released < PROMPT);
    assert_eq!(channel.next(QUIET), None, "a spin lock publishes nothing");
    assert!(keys(&mut admin, "redisson_unlock_latch:*").is_empty());
    assert!(a.spin_force_unlock(&name));
    assert!(!a.spin_force_unlock(&name));
    assert_eq!(channel.next(QUIET), None);
}

// --- fair lock --------------------------------------------------------------------------

#[test]
fn fair_lock_queue_state_matches_the_reference_trace() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("fair1");
    let (queue, timeouts) = (fair_queue_key(&name), fair_timeout_key(&name));
    const SLOT: u64 = 300_000;

    assert_eq!(a.fair_acquire(&name, 1, 30_000, SLOT), None);
    let before = a.now_ms();
    let ttl2 = b.fair_acquire(&name, 2, 30_000, SLOT).unwrap();
    assert!((29_000..=30_000).contains(&ttl2), "ttl {ttl2}");
    let ttl3 = a.fair_acquire(&name, 3, 30_000, SLOT).unwrap();
    assert!((329_000..=330_000).contains(&ttl3), "ttl {ttl3}");

    let queued: Vec<String> = redis::cmd("LRANGE")
        .arg(&queue)
        .arg(0)
        .arg(-1)
        .query(&mut admin)
        .unwrap();
    assert_eq!(queued, vec![b.owner(2), a.owner(3)]);
    let score = |admin: &mut redis::Connection, field: &str| -> Option<i64> {
        redis::cmd("ZSCORE")
            .arg(&timeouts)
            .arg(field)
            .query::<Option<f64>>(admin)
            .unwrap()
            .map(|s| s as i64)
    };
    let d2 = score(&mut admin, &b.owner(2)).unwrap();
    let d3 = score(&mut admin, &a.owner(3)).unwrap();
    assert_eq!(d3 - d2, 300_000, "a slot apart");
    let expected = before + ttl2 + 300_000;
    assert!((d2 - expected).abs() < 2_000, "deadline {d2} vs {expected}");

    // Already queued: max(0, PTTL), own deadline untouched.
    let again = b.fair_acquire(&name, 2, 30_000, SLOT).unwrap();
    assert!((28_000..=30_000).contains(&again), "ttl {again}");
    assert_eq!(score(&mut admin, &b.owner(2)), Some(d2));

    a.fair_acquire_failed(&name, 3, SLOT);
    assert_eq!(score(&mut admin, &a.owner(3)), None);
    let queued: Vec<String> = redis::cmd("LRANGE")
        .arg(&queue)
        .arg(0)
        .arg(-1)
        .query(&mut admin)
        .unwrap();
    assert_eq!(queued, vec![b.owner(2)]);

    let mut head = a.listen(&fair_channel(&name, &b.owner(2)));
    let mut common = a.listen(&lock_channel(&name));
    assert_eq!(a.fair_unlock(&name, 1), Some(1));
    assert_eq!(head.next(ARRIVES).as_deref(), Some("0"));
    assert_eq!(common.next(QUIET), None, "only the head's own channel");

    assert!(b.fair_acquire_once(&name, 2, 30_000));
    assert!(!exists(&mut admin, &queue));
    assert!(!exists(&mut admin, &timeouts));
    assert!(
        !a.fair_acquire_once(&name, 1, 30_000),
        "try-once never queues"
    );
    assert!(!exists(&mut admin, &queue));

    assert!(a.fair_force_unlock(&name));
    assert_eq!(head.next(QUIET), None, "queue empty: nobody to tell");
    assert!(!a.fair_force_unlock(&name));
}

#[test]
fn fair_lock_serves_three_waiters_of_two_jvms_in_arrival_order() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("fifo");
    let queue = fair_queue_key(&name);
    let order = Arc::new(Mutex::new(Vec::new()));

    assert!(a.fair_acquire_once(&name, 1, -1));
    let mut waiters = Vec::new();
    for (i, (jvm, thread)) in [(&b, 10), (&a, 11), (&b, 12)].into_iter().enumerate() {
        let (jvm, name, order) = (jvm.clone(), name.clone(), order.clone());
        waiters.push(spawn_timed(move || {
            let acquired = jvm.fair_try_lock(&name, thread, WAIT, -1);
            if acquired {
                order.lock().push(thread);
                thread::sleep(Duration::from_millis(30));
                assert_eq!(jvm.fair_unlock(&name, thread), Some(1));
            }
            acquired
        }));
        // The next one starts only once this one is queued: arrival order is known.
        assert!(eventually(ARRIVES, || {
            redis::cmd("LLEN")
                .arg(&queue)
                .query::<i64>(&mut admin)
                .unwrap()
                == i as i64 + 1
        }));
    }
    thread::sleep(QUIET);
    assert!(order.lock().is_empty());

    let released = Instant::now();
    assert_eq!(a.fair_unlock(&name, 1), Some(1));
    for waiter in waiters {
        assert!(waiter.join().unwrap().0);
    }
    assert_eq!(*order.lock(), vec![10, 11, 12]);
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "each is woken by its own message: {:?}",
        released.elapsed()
    );
    assert!(!exists(&mut admin, &queue));
    assert_eq!(a.open_subscriptions() + b.open_subscriptions(), 0);
}

#[test]
fn a_fair_waiter_that_gives_up_leaves_the_queue_and_moves_the_rest_up() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("fairgiveup");
    let (queue, timeouts) = (fair_queue_key(&name), fair_timeout_key(&name));

    assert!(a.fair_acquire_once(&name, 1, -1));
    let quitter = {
        let (b, name) = (b.clone(), name.clone());
        spawn_timed(move || b.fair_try_lock(&name, 2, Duration::from_millis(700), -1))
    };
    assert!(eventually(ARRIVES, || exists(&mut admin, &queue)));
    assert_eq!(
        a.fair_acquire(&name, 3, -1, 10_000).map(|t| t > 0),
        Some(true)
    );
    let score3 = |admin: &mut redis::Connection| -> i64 {
        redis::cmd("ZSCORE")
            .arg(&timeouts)
            .arg(a.owner(3))
            .query::<f64>(admin)
            .unwrap() as i64
    };
    let before = score3(&mut admin);
    assert!(!quitter.join().unwrap().0);
    // Slot length of tryLock(700 ms) = 700 ms.
    assert_eq!(score3(&mut admin), before - 700);
    let queued: Vec<String> = redis::cmd("LRANGE")
        .arg(&queue)
        .arg(0)
        .arg(-1)
        .query(&mut admin)
        .unwrap();
    assert_eq!(queued, vec![a.owner(3)]);
}

// --- read-write lock --------------------------------------------------------------------

#[test]
fn readers_share_a_writer_waits_and_the_last_read_unlock_wakes_it() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("rw");
    let mut channel = a.listen(&rw_channel(&name));

    assert_eq!(a.read_acquire(&name, 1, -1), None);
    assert_eq!(b.read_acquire(&name, 2, -1), None, "readers share");
    assert_eq!(
        hash(&mut admin, &name),
        map(&[("mode", "read"), (&a.owner(1), "1"), (&b.owner(2), "1")])
    );
    let timeout_keys = [
        format!("{}:1", rw_timeout_prefix(&name, &a.owner(1))),
        format!("{}:1", rw_timeout_prefix(&name, &b.owner(2))),
    ];
    for key in &timeout_keys {
        assert!(key.starts_with(&format!("{{{name}}}:")), "{key}");
        let ttl = pttl(&mut admin, key);
        assert!((29_000..=30_000).contains(&ttl), "{key}: PTTL {ttl}");
    }
    assert!(a.read_is_locked(&name));
    assert!(!a.write_is_locked(&name));

    let writer = {
        let (b, name) = (b.clone(), name.clone());
        spawn_timed(move || b.write_try_lock(&name, 3, WAIT, -1))
    };
    // Read acquire; then write attempt (EVALSHA, then SCRIPT LOAD and EVALSHA again after
    // NOSCRIPT: the first write acquire on this server), SUBSCRIBE, write attempt.
    settles_at(&b, 6);
    assert_eq!(
        a.read_unlock(&name, 1),
        Some(0),
        "the other reader still holds"
    );
    assert_eq!(channel.next(QUIET), None);
    assert!(!writer.is_finished());

    let released = Instant::now();
    assert_eq!(b.read_unlock(&name, 2), Some(1));
    let (acquired, at) = writer.join().unwrap();
    assert!(acquired);
    assert!(at - released < PROMPT, "woken after {:?}", at - released);
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("0"));
    for key in &timeout_keys {
        assert!(!exists(&mut admin, key), "{key} deleted with its hold");
    }
    assert_eq!(
        hash(&mut admin, &name),
        map(&[("mode", "write"), (&b.write_owner(3), "1")])
    );
    assert!(a.write_is_locked(&name));

    assert_eq!(b.write_unlock(&name, 3), Some(1));
    assert_eq!(
        channel.next(ARRIVES).as_deref(),
        Some("1"),
        "write unlock wakes all"
    );
    assert!(!exists(&mut admin, &name));
}

#[test]
fn read_write_lock_matches_the_reference_trace() {
    let server = RedisServer::start();
    let u = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("rw1");
    let mut channel = u.listen(&rw_channel(&name));

    assert_eq!(u.read_acquire(&name, 1, 30_000), None);
    assert_eq!(u.read_acquire(&name, 2, 30_000), None);
    let ttl = u.write_acquire(&name, 3, 30_000).unwrap();
    assert!((29_000..=30_000).contains(&ttl), "ttl {ttl}");
    assert_eq!(
        u.renew_read_batch(&[(&name, vec![u.owner(1)])], 30_000),
        vec![1]
    );
    assert_eq!(u.read_unlock(&name, 1), Some(0));
    assert_eq!(u.read_unlock(&name, 2), Some(1));
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("0"));

    assert_eq!(u.write_acquire(&name, 3, 30_000), None);
    assert_eq!(u.read_acquire(&name, 3, 30_000), None, "a writer may read");
    assert_eq!(
        hash(&mut admin, &name),
        map(&[
            ("mode", "write"),
            (&u.write_owner(3), "1"),
            (&u.owner(3), "1")
        ])
    );
    assert!(u.read_is_locked(&name));
    assert_eq!(u.write_unlock(&name, 3), Some(1));
    assert_eq!(channel.next(QUIET), None, "reads remain: nothing published");
    assert_eq!(
        hash(&mut admin, &name),
        map(&[("mode", "read"), (&u.owner(3), "1")])
    );
    assert_eq!(u.read_unlock(&name, 3), Some(1));
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("0"));

    assert_eq!(u.write_acquire(&name, 4, 30_000), None);
    assert_eq!(u.write_unlock(&name, 4), Some(1));
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("1"));

    // Unlock of a missing lock: nil, and read unlock still publishes `0`.
    assert_eq!(u.read_unlock(&name, 4), None);
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("0"));
    assert_eq!(u.write_unlock(&name, 4), None);
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("1"));
}

#[test]
fn a_java_read_unlock_drops_readers_without_live_timeout_keys() {
    // Pitfall 12.1: a foreign reader whose `rwlock_timeout` key is gone is deleted with the
    // hash by the next Java read unlock.
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("rwpitfall");
    assert_eq!(a.read_acquire(&name, 1, -1), None);
    assert_eq!(b.read_acquire(&name, 1, -1), None);
    let _: i64 = redis::cmd("DEL")
        .arg(format!("{}:1", rw_timeout_prefix(&name, &b.owner(1))))
        .query(&mut admin)
        .unwrap();
    assert_eq!(a.read_unlock(&name, 1), Some(1));
    assert!(!exists(&mut admin, &name));
}

#[test]
fn force_unlocks_of_the_read_write_lock_publish_by_mode() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let name = unique("rwforce");
    let mut channel = a.listen(&rw_channel(&name));
    assert_eq!(a.read_acquire(&name, 1, -1), None);
    assert!(!a.write_force_unlock(&name), "not in write mode");
    assert!(a.read_force_unlock(&name));
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("0"));
    assert_eq!(a.write_acquire(&name, 1, -1), None);
    assert!(!a.read_force_unlock(&name), "not in read mode");
    assert!(a.write_force_unlock(&name));
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("1"));
}

// --- watchdog ---------------------------------------------------------------------------

#[test]
fn the_watchdog_renews_locks_taken_without_a_lease_and_only_those() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    a.set_watchdog_timeout_ms(1_200);
    a.start_watchdog();
    let (plain, leased, read, write, lost) = (
        unique("wd-plain"),
        unique("wd-leased"),
        unique("wd-read"),
        unique("wd-write"),
        unique("wd-lost"),
    );
    assert_eq!(a.lock_acquire(&plain, 1, -1), None);
    assert_eq!(a.lock_acquire(&leased, 1, 1_200), None);
    assert_eq!(a.read_acquire(&read, 1, -1), None);
    assert_eq!(a.read_acquire(&read, 2, -1), None);
    assert_eq!(a.write_acquire(&write, 1, -1), None);
    assert_eq!(a.lock_acquire(&lost, 1, -1), None);
    assert!(b.force_unlock(&lost));
    assert!(a.renew(&plain, 1));
    assert!(!a.renew(&lost, 1));
    assert!(a.renew_write(&write, 1));
    assert!(a.renew_read(&read, &[1, 2]));

    thread::sleep(Duration::from_millis(3_000));
    for key in [plain.clone(), read.clone(), write.clone()] {
        let ttl = pttl(&mut admin, &key);
        assert!(ttl > 0 && ttl <= 1_200, "{key} renewed: PTTL {ttl}");
    }
    for thread in [1, 2] {
        let key = format!("{}:1", rw_timeout_prefix(&read, &a.owner(thread)));
        let ttl = pttl(&mut admin, &key);
        assert!(ttl > 0, "{key} renewed: PTTL {ttl}");
    }
    assert!(
        !exists(&mut admin, &leased),
        "an explicit lease is not renewed"
    );
    let renewed: HashSet<String> = a.renewed_locks().into_iter().map(|(n, _)| n).collect();
    assert!(!renewed.contains(&lost), "a lost lock is dropped after a 0");
    assert!(!renewed.contains(&leased));

    assert_eq!(a.unlock(&plain, 1), Some(1));
    assert_eq!(a.read_unlock(&read, 1), Some(0));
    assert_eq!(a.read_unlock(&read, 2), Some(1));
    assert_eq!(a.write_unlock(&write, 1), Some(1));
    assert!(a.renewed_locks().is_empty());
}

// --- permit-expirable semaphore ---------------------------------------------------------

#[test]
fn permit_semaphore_third_acquirer_waits_for_a_release() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("pes");
    let zset = permit_zset_key(&name);
    let mut channel = a.listen(&semaphore_channel(&name));

    assert!(a.permit_try_set_permits(&name, 2));
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("2"));
    assert!(!a.permit_try_set_permits(&name, 5));
    let before = a.now_ms();
    let PermitAttempt::Acquired(first) = a.permit_acquire(&name, 60_000) else {
        panic!("a permit was free")
    };
    let PermitAttempt::Acquired(second) = b.permit_acquire(&name, 60_000) else {
        panic!("a permit was free")
    };
    let members: Vec<Vec<u8>> = redis::cmd("ZRANGE")
        .arg(&zset)
        .arg(0)
        .arg(-1)
        .query(&mut admin)
        .unwrap();
    assert_eq!(members.len(), 2);
    assert!(members.iter().all(|m| m.len() == 16), "raw 16-byte ids");
    assert_eq!(
        members.iter().cloned().collect::<HashSet<_>>(),
        HashSet::from([first.clone(), second.clone()])
    );
    match a.permit_acquire(&name, 60_000) {
        PermitAttempt::NextExpiry(score) => {
            assert!((score - (before + 60_000)).abs() < 2_000, "score {score}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(a.permit_available(&name), 0);

    let sent = b.commands_sent();
    let waiter = {
        let (b, name) = (b.clone(), name.clone());
        spawn_timed(move || b.permit_try_acquire(&name, WAIT, 60_000))
    };
    // Attempt, SUBSCRIBE, attempt, and then silence (the next lease ends in a minute).
    settles_at(&b, sent + 3);
    // Java's semaphore listener releases min(subscribers, m) permits: 0 wakes nobody, and a
    // negative count throws inside the listener.
    for message in ["0", "-1", "x"] {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(semaphore_channel(&name))
            .arg(message)
            .query(&mut admin)
            .unwrap();
        assert_eq!(channel.next(ARRIVES).as_deref(), Some(message));
    }
    settles_at(&b, sent + 3);
    let released = Instant::now();
    assert!(a.permit_release(&name, &first));
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("1"));
    let (third, at) = waiter.join().unwrap();
    let third = third.expect("woken by the release");
    assert!(at - released < PROMPT, "woken after {:?}", at - released);
    assert_eq!(third.len(), 16);
    assert!(!a.permit_release(&name, &first), "released twice");

    assert!(b.permit_update_lease_time(&name, &second, 5_000));
    let score: f64 = redis::cmd("ZSCORE")
        .arg(&zset)
        .arg(&second)
        .query(&mut admin)
        .unwrap();
    assert!((score as i64 - (a.now_ms() + 5_000)).abs() < 2_000);

    a.permit_add_permits(&name, 3);
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("3"), "the delta");
    assert_eq!(a.permit_available(&name), 3);
    a.permit_set_permits(&name, 2);
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("2"), "the new total");
    assert_eq!(a.permit_available(&name), 0, "2 acquired, total 2");
}

#[test]
fn permit_semaphore_nil_without_leases_and_reclaims_expired_permits() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("pes1");
    let zset = permit_zset_key(&name);
    let mut channel = a.listen(&semaphore_channel(&name));

    assert!(a.permit_try_set_permits(&name, 1));
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("1"));
    let PermitAttempt::Acquired(id) = a.permit_acquire(&name, -1) else {
        panic!("a permit was free")
    };
    let score: String = redis::cmd("ZSCORE")
        .arg(&zset)
        .arg(&id)
        .query(&mut admin)
        .unwrap();
    assert_eq!(score, NO_LEASE_SCORE.to_string());
    assert_eq!(b.permit_acquire(&name, 60_000), PermitAttempt::Nothing);
    assert!(a.permit_release(&name, &id));
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("1"));

    // A short lease ends; the waiter retries when it ends, by its own clock, and the
    // reclaim publishes the new count.
    let PermitAttempt::Acquired(_) = a.permit_acquire(&name, 500) else {
        panic!("a permit was free")
    };
    let started = Instant::now();
    let id = b
        .permit_try_acquire(&name, WAIT, 60_000)
        .expect("the expired permit comes back");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(300), "after {took:?}");
    assert!(took < Duration::from_secs(3), "after {took:?}");
    assert_eq!(id.len(), 16);
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("1"), "reclaimed");
}

// --- count-down latch -------------------------------------------------------------------

#[test]
fn latch_await_is_opened_by_the_other_jvms_count_down_to_zero() {
    let server = RedisServer::start();
    let a = Jvm::new(&server.url());
    let b = Jvm::new(&server.url());
    let mut admin = server.admin();
    let name = unique("latch1");
    let mut channel = a.listen(&latch_channel(&name));

    assert!(a.latch_try_set_count(&name, 2));
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("1"));
    assert!(!a.latch_try_set_count(&name, 5));
    let waiter = {
        let (b, name) = (b.clone(), name.clone());
        spawn_timed(move || b.latch_await(&name, WAIT))
    };
    // GET, SUBSCRIBE, GET; then silence.
    settles_at(&b, 3);
    a.latch_count_down(&name);
    assert_eq!(a.latch_get_count(&name), 1);
    assert_eq!(channel.next(QUIET), None);
    assert!(!waiter.is_finished());
    let opened = Instant::now();
    a.latch_count_down(&name);
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("0"));
    let (reached, at) = waiter.join().unwrap();
    assert!(reached);
    assert!(at - opened < PROMPT, "opened after {:?}", at - opened);
    assert!(!exists(&mut admin, &name), "the key goes at zero");
    assert_eq!(b.latch_get_count(&name), 0);
    a.latch_count_down(&name);
    assert!(!exists(&mut admin, &name), "counting down an open latch");
    assert_eq!(channel.next(QUIET), None);

    assert!(a.latch_try_set_count(&name, 1));
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("1"));
    let started = Instant::now();
    assert!(!b.latch_await(&name, Duration::from_millis(300)));
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(a.latch_delete(&name));
    assert_eq!(channel.next(ARRIVES).as_deref(), Some("1"));
    assert!(!a.latch_delete(&name));
    assert!(
        b.latch_await(&name, Duration::from_millis(300)),
        "no count: open"
    );
}
