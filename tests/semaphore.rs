//! The semaphore against a real redis-server: the total, leased permits, arrival order,
//! requests above the total, one message per release, permits that move between threads,
//! a crashed holder, foreign data, bad input, waiting without polling.

mod support;

use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Client, Error, Permits, Semaphore};
use support::{RedisServer, command_calls, eventually, join_all, pttl, unique};

const ZERO: Duration = Duration::ZERO;
const LONG: Duration = Duration::from_secs(20);

fn client(server: &RedisServer) -> Client {
    Client::open(&server.url()).unwrap()
}

fn queued(admin: &mut redis::Connection, name: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(format!("redlatch:{{{name}}}:semaphore:queue"))
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

/// A thread that waits up to `LONG` for `n` permits and reports when it got them, holding
/// them for `hold`.
fn spawn_acquirer(
    sem: Semaphore,
    n: u32,
    hold: Duration,
) -> thread::JoinHandle<(Instant, Option<u64>)> {
    thread::spawn(move || {
        let permits = sem.try_acquire(n, LONG, None).unwrap();
        let got = Instant::now();
        let token = permits.as_ref().map(Permits::fencing_token);
        thread::sleep(hold);
        drop(permits);
        (got, token)
    })
}

#[test]
fn permits_are_counted_against_the_total() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let name = unique("sem-count");
    let sem = a.semaphore(&name);
    assert_eq!(sem.available().unwrap(), 0, "the total starts at 0");
    assert!(sem.try_acquire(1, ZERO, None).unwrap().is_none());
    sem.set_permits(3).unwrap();
    assert_eq!(sem.available().unwrap(), 3);
    let two = sem.acquire(2).unwrap();
    assert_eq!(two.count(), 2);
    let other = b.semaphore(&name);
    assert!(other.try_acquire(2, ZERO, None).unwrap().is_none());
    assert_eq!(other.available().unwrap(), 1);
    let one = other.try_acquire(1, ZERO, None).unwrap().expect("one left");
    assert!(one.fencing_token() > two.fencing_token());
    assert_eq!(sem.available().unwrap(), 0);
    two.release().unwrap();
    assert_eq!(sem.available().unwrap(), 2);
    drop(one);
    assert_eq!(sem.available().unwrap(), 3);
}

#[test]
fn a_large_request_at_the_head_is_not_overtaken_by_small_ones() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("sem-fifo");
    let sem = a.semaphore(&name);
    sem.set_permits(4).unwrap();
    let held = sem.acquire(3).unwrap();
    let big = spawn_acquirer(b.semaphore(&name), 3, Duration::from_millis(300));
    await_queued(&mut admin, &name, 1);
    // One permit is free, but the request for 3 came first.
    let small = spawn_acquirer(b.semaphore(&name), 1, ZERO);
    await_queued(&mut admin, &name, 2);
    thread::sleep(Duration::from_millis(300));
    assert!(
        !small.is_finished(),
        "a small request overtook the large one"
    );
    let released = Instant::now();
    held.release().unwrap();
    let (big_at, _) = big.join().unwrap();
    let (small_at, _) = small.join().unwrap();
    assert!(big_at.duration_since(released) < Duration::from_secs(1));
    // The small one fitted beside the big one (3 + 1 = 4): both were granted by the release.
    assert!(small_at.duration_since(released) < Duration::from_secs(1));
}

#[test]
fn a_request_above_the_total_waits_aside_until_the_total_is_raised() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("sem-aside");
    let sem = a.semaphore(&name);
    sem.set_permits(2).unwrap();
    let five = spawn_acquirer(b.semaphore(&name), 5, ZERO);
    await_queued(&mut admin, &name, 1);
    // Requests the total allows are not held up by it.
    let one = sem
        .try_acquire(1, Duration::from_millis(500), None)
        .unwrap()
        .expect("a request that fits is not held up by one that cannot");
    assert!(sem.try_acquire(5, ZERO, None).unwrap().is_none());
    let raised = Instant::now();
    sem.set_permits(6).unwrap();
    let (got, token) = five.join().unwrap();
    assert!(token.is_some());
    assert!(
        got.duration_since(raised) < Duration::from_secs(1),
        "raising the total did not grant it"
    );
    drop(one);
    // With the total at 6 and nobody holding, one try for 7 answers at its deadline.
    let started = Instant::now();
    assert!(
        sem.try_acquire(7, Duration::from_millis(300), None)
            .unwrap()
            .is_none()
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn one_release_grants_every_waiter_that_fits_in_one_message() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("sem-batch");
    let sem = a.semaphore(&name);
    sem.set_permits(3).unwrap();
    let held = sem.acquire(3).unwrap();
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let w = spawn_acquirer(b.semaphore(&name), 1, Duration::from_millis(200));
            await_queued(&mut admin, &name, i + 1);
            w
        })
        .collect();
    // A fourth, which will not fit, keeps its place.
    let fourth = spawn_acquirer(b.semaphore(&name), 1, ZERO);
    await_queued(&mut admin, &name, 4);
    let publishes = command_calls(&mut admin, "publish");
    let released = Instant::now();
    held.release().unwrap();
    assert_eq!(command_calls(&mut admin, "publish") - publishes, 1);
    let got = join_all(waiters, Duration::from_secs(10), "waiters");
    let mut tokens: Vec<u64> = got.iter().map(|(_, t)| t.unwrap()).collect();
    for (at, _) in &got {
        assert!(at.duration_since(released) < Duration::from_millis(150));
    }
    let (fourth_at, fourth_token) = fourth.join().unwrap();
    assert!(fourth_at.duration_since(released) >= Duration::from_millis(150));
    tokens.push(fourth_token.unwrap());
    let mut sorted = tokens.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 4, "tokens repeat: {tokens:?}");
}

#[test]
fn raising_the_total_grants_waiters_and_lowering_it_takes_nothing_from_holders() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("sem-total");
    let sem = a.semaphore(&name);
    sem.set_permits(2).unwrap();
    let held = sem.acquire(2).unwrap();
    let w1 = spawn_acquirer(b.semaphore(&name), 1, ZERO);
    let w2 = spawn_acquirer(b.semaphore(&name), 1, ZERO);
    await_queued(&mut admin, &name, 2);
    let raised = Instant::now();
    sem.set_permits(4).unwrap();
    for (at, token) in join_all(vec![w1, w2], Duration::from_secs(10), "waiters") {
        assert!(token.is_some());
        assert!(at.duration_since(raised) < Duration::from_secs(1));
    }
    sem.set_permits(1).unwrap();
    assert!(!held.is_lost());
    held.check().unwrap();
    assert_eq!(sem.available().unwrap(), 0);
    assert!(sem.try_acquire(1, ZERO, None).unwrap().is_none());
    held.release().unwrap();
    assert_eq!(sem.available().unwrap(), 1);
}

#[test]
fn permits_are_send_and_may_be_released_by_another_thread() {
    let server = RedisServer::start();
    let a = client(&server);
    let sem = a.semaphore(&unique("sem-send"));
    sem.set_permits(1).unwrap();
    let permits = sem.acquire(1).unwrap();
    thread::spawn(move || permits.release())
        .join()
        .unwrap()
        .unwrap();
    assert_eq!(sem.available().unwrap(), 1);
    // Two acquisitions by one thread are two holders, not a re-entry.
    sem.set_permits(2).unwrap();
    let (p1, p2) = (sem.acquire(1).unwrap(), sem.acquire(1).unwrap());
    assert_ne!(p1.fencing_token(), p2.fencing_token());
    assert_eq!(sem.available().unwrap(), 0);
}

#[test]
fn waiting_for_permits_costs_no_commands() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("sem-idle");
    let sem = a.semaphore(&name);
    sem.set_permits(1).unwrap();
    let held = sem.acquire(1).unwrap();
    let waiters: Vec<_> = (0..3)
        .map(|_| spawn_acquirer(b.semaphore(&name), 1, ZERO))
        .collect();
    await_queued(&mut admin, &name, 3);
    let channel = format!("redlatch:{{{name}}}:semaphore:unlocked");
    assert!(eventually(Duration::from_secs(5), || {
        support::pubsub_channels(&mut admin, &channel).len() == 1
    }));
    // The confirmation of the subscription gives each waiter one attempt: wait until those
    // have passed, that is until the count holds still for half a second (they follow the
    // confirmation within milliseconds, unless this machine is very busy).
    let mut before = command_calls(&mut admin, "evalsha");
    assert!(
        eventually(Duration::from_secs(10), || {
            thread::sleep(Duration::from_millis(500));
            let now = command_calls(&mut admin, "evalsha");
            std::mem::replace(&mut before, now) == now
        }),
        "the waiters' attempts never stopped"
    );
    thread::sleep(Duration::from_secs(2));
    let during = command_calls(&mut admin, "evalsha") - before;
    assert!(during <= 1, "waiters polled: {during} script calls in 2 s");
    drop(held);
    for (_, token) in join_all(waiters, Duration::from_secs(20), "waiters") {
        assert!(token.is_some());
    }
}

#[test]
fn a_fixed_lease_gives_permits_back_and_the_guard_is_told() {
    let server = RedisServer::start();
    let a = client(&server);
    let sem = a.semaphore(&unique("sem-lease"));
    sem.set_permits(1).unwrap();
    let permits = sem
        .try_acquire(1, ZERO, Some(Duration::from_millis(300)))
        .unwrap()
        .unwrap();
    let started = Instant::now();
    let next = sem.try_acquire(1, Duration::from_secs(5), None).unwrap();
    assert!(next.is_some());
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(permits.is_lost());
    assert!(matches!(permits.check(), Err(Error::LockLost { .. })));
    assert!(matches!(permits.release(), Err(Error::LockLost { .. })));
    assert_eq!(
        sem.available().unwrap(),
        0,
        "a stale release gave back another's permit"
    );
}

/// Entry point of the child process of `a_killed_holders_permits_come_back_after_the_watchdog_timeout`.
#[test]
#[ignore = "run as a child process by another test"]
fn child_holds_permits_until_killed() {
    let Some([url, name]) = support::child_env(["REDLATCH_CHILD_URL", "REDLATCH_CHILD_LOCK"])
    else {
        return;
    };
    let client = Client::builder(&url)
        .watchdog_timeout(Duration::from_millis(1500))
        .build()
        .unwrap();
    let permits = client.semaphore(&name).acquire(2).unwrap();
    println!("HOLDING {}", permits.fencing_token());
    thread::sleep(Duration::from_secs(60)); // killed long before
}

fn spawn_holder(server: &RedisServer, name: &str) -> Child {
    support::spawn_child_test(
        "child_holds_permits_until_killed",
        &[
            ("REDLATCH_CHILD_URL", server.url()),
            ("REDLATCH_CHILD_LOCK", name.to_string()),
        ],
    )
}

#[test]
fn a_killed_holders_permits_come_back_after_the_watchdog_timeout() {
    let server = RedisServer::start();
    let a = client(&server);
    let name = unique("sem-killed");
    let sem = a.semaphore(&name);
    sem.set_permits(3).unwrap();
    let mut child = spawn_holder(&server, &name);
    support::read_reported(&mut child, "HOLDING", Duration::from_secs(30));
    thread::sleep(Duration::from_secs(3)); // past one lease: the child's watchdog renews
    assert_eq!(sem.available().unwrap(), 1);
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    let permits = sem.try_acquire(3, Duration::from_secs(10), None).unwrap();
    assert!(
        permits.is_some(),
        "the dead holder's permits never came back"
    );
    let waited = killed.elapsed();
    assert!(
        waited < Duration::from_millis(2500),
        "came back after {waited:?}, more than one watchdog timeout"
    );
}

#[test]
fn never_more_permits_in_use_than_the_total() {
    let server = RedisServer::start();
    let name = unique("sem-safety");
    const TOTAL: u32 = 3;
    client(&server).semaphore(&name).set_permits(TOTAL).unwrap();
    let url = server.url();
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let client = Client::open(&url).unwrap();
            let (url, name) = (url.clone(), name.clone());
            thread::spawn(move || {
                let sem = client.semaphore(&name);
                let mut data = redis::Client::open(url).unwrap().get_connection().unwrap();
                let inside = format!("{name}:inside");
                let mut over = 0;
                for round in 0..25u32 {
                    let n = 1 + (i as u32 + round) % 2;
                    let wait = Duration::from_millis(50 + u64::from(round % 4) * 50);
                    let lease = (round % 5 == 0).then_some(Duration::from_millis(400));
                    let Some(permits) = sem.try_acquire(n, wait, lease).unwrap() else {
                        continue;
                    };
                    let now: i64 = redis::cmd("INCRBY")
                        .arg(&inside)
                        .arg(n)
                        .query(&mut data)
                        .unwrap();
                    if now > i64::from(TOTAL) {
                        over += 1;
                    }
                    thread::sleep(Duration::from_millis(3));
                    let _: i64 = redis::cmd("DECRBY")
                        .arg(&inside)
                        .arg(n)
                        .query(&mut data)
                        .unwrap();
                    drop(permits);
                }
                over
            })
        })
        .collect();
    let over: usize = join_all(handles, Duration::from_secs(120), "contenders")
        .into_iter()
        .sum();
    assert_eq!(over, 0, "more permits in use than the total");
}

#[test]
fn foreign_data_is_refused_and_left_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let a = client(&server);
    let name = unique("sem-foreign");
    let total = format!("redlatch:{{{name}}}:semaphore:permits");
    let _: () = redis::cmd("SET")
        .arg(&total)
        .arg("lots")
        .query(&mut admin)
        .unwrap();
    let sem = a.semaphore(&name);
    for result in [
        sem.set_permits(3),
        sem.available().map(drop),
        sem.try_acquire(1, ZERO, None).map(drop),
    ] {
        match result {
            Err(Error::WrongType { key }) => assert_eq!(key, total),
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
    let kept: String = redis::cmd("GET").arg(&total).query(&mut admin).unwrap();
    assert_eq!(kept, "lots");
    let name = unique("sem-foreign-list");
    let holders = format!("redlatch:{{{name}}}:semaphore");
    let _: () = redis::cmd("RPUSH")
        .arg(&holders)
        .arg("x")
        .query(&mut admin)
        .unwrap();
    let sem = a.semaphore(&name);
    match sem
        .set_permits(1)
        .and_then(|()| sem.try_acquire(1, ZERO, None).map(drop))
    {
        Err(Error::WrongType { key }) => assert_eq!(key, holders),
        other => panic!("expected WrongType, got {other:?}"),
    }
    let len: usize = redis::cmd("LLEN").arg(&holders).query(&mut admin).unwrap();
    assert_eq!(len, 1);
    // A fencing counter that is not one (here a hash), on a name otherwise free: the first
    // acquisition must not write over it.
    let name = unique("sem-foreign-fence");
    let fence = format!("redlatch:{{{name}}}:semaphore:fence");
    let sem = a.semaphore(&name);
    sem.set_permits(1).unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&fence)
        .arg("f")
        .arg("v")
        .query(&mut admin)
        .unwrap();
    match sem.try_acquire(1, ZERO, None) {
        Err(Error::WrongType { key }) => assert_eq!(key, fence),
        other => panic!("expected WrongType, got {other:?}"),
    }
    let kept: String = redis::cmd("HGET")
        .arg(&fence)
        .arg("f")
        .query(&mut admin)
        .unwrap();
    assert_eq!(kept, "v");
}

#[test]
fn bad_input_is_refused_before_any_io() {
    let server = RedisServer::start();
    let a = client(&server);
    let sem = a.semaphore(&unique("sem-bad"));
    assert!(matches!(sem.acquire(0), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        sem.try_acquire(0, ZERO, None),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        sem.try_acquire(1, ZERO, Some(ZERO)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        sem.try_acquire(1, Duration::MAX, None),
        Err(Error::InvalidArgument(_))
    ));
    let empty = a.semaphore("");
    assert!(matches!(
        empty.set_permits(1),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(empty.available(), Err(Error::InvalidArgument(_))));
}

#[test]
fn nothing_is_left_behind_after_use() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let a = client(&server);
    let name = unique("sem-clean");
    let sem = a.semaphore(&name);
    sem.set_permits(1).unwrap();
    let held = sem.acquire(1).unwrap();
    let waiter = spawn_acquirer(a.semaphore(&name), 1, ZERO);
    await_queued(&mut admin, &name, 1);
    drop(held);
    waiter.join().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("redlatch:{{{name}}}*"))
        .query(&mut admin)
        .unwrap();
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut admin).unwrap();
        let kept = key.ends_with(":permits") || key.ends_with(":fence");
        assert!(kept || ttl > 0, "{key} left behind without a TTL ({ttl})");
        assert!(
            !key.ends_with(":semaphore") && !key.ends_with(":leases"),
            "{key} outlived its last holder"
        );
    }
}

/// Grants (channel, payload) seen by `pubsub` until `n` came or 5 s passed.
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

/// A release grants the waiters of each client in one message on that client's grant
/// channel, so that no other client wakes; when a new lease would end before the released
/// one, every grant goes in one message on the semaphore's channel, which every waiter hears.
#[test]
fn a_release_grants_each_client_on_its_own_channel_unless_a_lease_ends_sooner() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("sem-grant-channels");
    let channel = format!("redlatch:{{{name}}}:semaphore:unlocked");
    let mut watcher = server.admin();
    let mut pubsub = watcher.as_pubsub();
    pubsub.psubscribe(format!("{channel}*")).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let (a, b, c) = (client(&server), client(&server), client(&server));
    let sem = a.semaphore(&name);
    sem.set_permits(2).unwrap();

    for (held_lease, waiter_lease) in [(None, None), (Some(10), Some(1))] {
        let held = sem
            .try_acquire(2, ZERO, held_lease.map(Duration::from_secs))
            .unwrap()
            .expect("free");
        let mut waiters = Vec::new();
        for (i, waiter) in [&b, &c].into_iter().enumerate() {
            let sem = waiter.semaphore(&name);
            waiters.push(thread::spawn(move || {
                let lease = waiter_lease.map(Duration::from_secs);
                let permits = sem.try_acquire(1, LONG, lease).unwrap().expect("granted");
                permits.release().unwrap();
            }));
            await_queued(&mut admin, &name, i + 1);
        }
        held.release().unwrap();
        join_all(waiters, Duration::from_secs(10), "waiters");
        let grants = grants_seen(&mut pubsub, 2);
        let client_of = |payload: &str| {
            let owner = payload.split(' ').nth(3).unwrap();
            owner.split(':').next().unwrap().to_string()
        };
        if held_lease.is_none() {
            // 30 s leases all round: one message to each client, on its own channel.
            assert_eq!(grants.len(), 2, "{grants:?}");
            for (to, payload) in &grants {
                assert_eq!(*to, format!("{channel}:{}", client_of(payload)));
            }
            assert_ne!(client_of(&grants[0].1), client_of(&grants[1].1));
        } else {
            // 1 s leases after a 10 s one: one message, to everyone.
            assert_eq!(grants.len(), 1, "{grants:?}");
            assert_eq!(grants[0].0, channel);
            assert_eq!(grants[0].1.split(' ').count(), 6, "{grants:?}");
        }
    }
}

/// A grant's "granted" terms outlive the grant's lease, though the waiter queued for a wait
/// far shorter than it: they are what tells a grant nobody took up from one taken up, so the
/// waiter's queueing made the terms' key outlive its wait by the lease.
#[test]
fn a_grants_terms_outlive_its_lease_after_a_short_wait() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("sem-grant-outlives");
    let waiters_key = format!("redlatch:{{{name}}}:semaphore:waiters");
    let sem = client(&server).semaphore(&name);
    sem.set_permits(1).unwrap();
    let held = sem.acquire(1).unwrap();
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
    let other = client(&server).semaphore(&name);
    let base = command_calls(&mut admin, "evalsha");
    let waiter = thread::spawn(move || {
        // A place valid about 3.5 s (the wait plus the slack); the watchdog's 30 s lease.
        let permits = other
            .try_acquire(1, Duration::from_millis(1500), None)
            .unwrap()
            .expect("granted");
        let _ = done_rx.recv_timeout(Duration::from_secs(30));
        drop(permits);
    });
    await_queued(&mut admin, &name, 1);
    // And parked: released before, the waiter takes the permits up with a round trip, which
    // removes the terms (seen in a full run).
    support::await_parked(&mut admin, base);
    held.release().unwrap();
    assert!(eventually(Duration::from_secs(5), || {
        let terms: Vec<String> = redis::cmd("HVALS")
            .arg(&waiters_key)
            .query(&mut admin)
            .unwrap();
        terms.len() == 1 && terms[0].starts_with("granted ")
    }));
    let left: i64 = redis::cmd("PTTL")
        .arg(&waiters_key)
        .query(&mut admin)
        .unwrap();
    assert!(left > 25_000, "the grant's terms expire in {left} ms");
    done_tx.send(()).unwrap();
    waiter.join().unwrap();
}

/// A release with a live waiter at the head that takes every permit hands them over in the
/// release's own call (lua/shares_release.lua's usual hand-over): when it returns, the
/// holders, the lease, the waiter's "granted" terms and the grant message all carry the one
/// new token.
#[test]
fn a_release_hands_all_permits_to_the_head_with_one_token_everywhere() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("sem-handover");
    let key = format!("redlatch:{{{name}}}:semaphore");
    a.semaphore(&name).set_permits(1).unwrap();
    let held = a.semaphore(&name).acquire(1).unwrap();
    let (first, old_owner) = (held.fencing_token(), held.owner_id().to_string());
    // The waiter holds until the test has read Redis.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let sem = b.semaphore(&name);
    let waiter = thread::spawn(move || {
        let permits = sem.try_acquire(1, LONG, None).unwrap();
        let got = Instant::now();
        let token = permits.as_ref().map(Permits::fencing_token);
        let _ = done_rx.recv_timeout(LONG);
        drop(permits);
        (got, token)
    });
    await_queued(&mut admin, &name, 1);
    let released = Instant::now();
    held.release().unwrap();
    let holders: Vec<(String, String)> = redis::cmd("HGETALL").arg(&key).query(&mut admin).unwrap();
    assert_eq!(holders.len(), 1, "{holders:?}");
    let (owner, value) = holders[0].clone();
    assert_ne!(owner, old_owner, "handed over by the release");
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
    assert_eq!(queued(&mut admin, &name), 0);
    done_tx.send(()).unwrap();
    let (got, waiter_token) = join_all(vec![waiter], LONG, "waiter").remove(0);
    assert_eq!(
        waiter_token,
        Some(token),
        "the message carried the token Redis keeps"
    );
    assert!(token > first && got - released < Duration::from_secs(5));
    assert_eq!(a.semaphore(&name).available().unwrap(), 1, "given back");
}

/// Permits taken and given back beside another holder (the usual cases of the scripts): the
/// object lives as long as its latest lease, longer when a longer lease joins and shorter
/// when it leaves; and a release whose lease the server saw end is not ours to make.
#[test]
fn beside_another_holder_the_object_lives_as_long_as_the_latest_lease() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("sem-beside");
    let (holders, leases) = (
        format!("redlatch:{{{name}}}:semaphore"),
        format!("redlatch:{{{name}}}:semaphore:leases"),
    );
    let sem = a.semaphore(&name);
    sem.set_permits(3).unwrap();
    let short = Some(Duration::from_secs(2));
    let brief = sem.try_acquire(1, ZERO, short).unwrap().unwrap();
    let long = b.semaphore(&name).acquire(1).unwrap(); // the watchdog's 30 s
    assert!(
        pttl(&mut admin, &holders) > 20_000,
        "the longer lease joined"
    );
    assert!(pttl(&mut admin, &leases) > 20_000);
    long.release().unwrap();
    assert!(pttl(&mut admin, &holders) <= 2_000, "the longer lease left");
    assert!(pttl(&mut admin, &leases) <= 2_000);
    assert_eq!(sem.available().unwrap(), 2);
    drop(brief);

    // The server saw this hold's lease end (its score moved into the past) while another
    // holds: its release must not take the field away as if it were still a hold.
    let doomed = sem.acquire(1).unwrap();
    let other = b.semaphore(&name).acquire(1).unwrap();
    let fields: Vec<String> = redis::cmd("HGETALL")
        .arg(&holders)
        .query(&mut admin)
        .unwrap();
    let token = doomed.fencing_token().to_string();
    let owner = fields
        .chunks(2)
        .find(|f| f[1].ends_with(&format!(" {token}")))
        .map(|f| f[0].clone())
        .expect("the doomed hold's field");
    let _: () = redis::cmd("ZADD")
        .arg(&leases)
        .arg("XX")
        .arg(1)
        .arg(&owner)
        .query(&mut admin)
        .unwrap();
    assert!(matches!(doomed.release(), Err(Error::LockLost { .. })));
    other.release().unwrap();

    // Among many holders, acquisitions and releases keep to the usual ways (the general way
    // begins with TYPE).
    sem.set_permits(20).unwrap();
    let crowd: Vec<Permits> = (0..12).map(|_| sem.acquire(1).unwrap()).collect();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut admin)
        .unwrap();
    let late = b.semaphore(&name).acquire(2).unwrap();
    for permits in crowd {
        permits.release().unwrap();
    }
    late.release().unwrap();
    assert_eq!(command_calls(&mut admin, "evalsha"), 14);
    assert_eq!(command_calls(&mut admin, "type"), 0, "the general way ran");
    assert_eq!(sem.available().unwrap(), 20);
}

#[test]
fn administration_sets_once_moves_the_total_and_counts_what_is_held() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("sem-admin");
    let sem = a.semaphore(&name);
    assert_eq!((sem.permits().unwrap(), sem.acquired().unwrap()), (0, 0));
    assert!(
        sem.try_set_permits(3).unwrap(),
        "a new semaphore takes the total"
    );
    assert!(
        !b.semaphore(&name).try_set_permits(10).unwrap(),
        "a total is set: left as it is"
    );
    assert_eq!(sem.permits().unwrap(), 3);
    let two = sem.try_acquire(2, ZERO, None).unwrap().unwrap();
    let one = b
        .semaphore(&name)
        .try_acquire(1, ZERO, None)
        .unwrap()
        .unwrap();
    assert_eq!(
        (sem.permits().unwrap(), sem.acquired().unwrap()),
        (3, 3),
        "held by two clients"
    );
    assert_eq!(sem.available().unwrap(), 0);

    // Up with everything held: the holders keep theirs, and two more are free.
    assert_eq!(sem.add_permits(2).unwrap(), 5);
    assert_eq!(sem.available().unwrap(), 2);
    assert_eq!(sem.acquired().unwrap(), 3);
    // Down below what is held: nothing is taken, nobody is admitted.
    assert_eq!(sem.add_permits(-4).unwrap(), 1);
    assert_eq!((sem.permits().unwrap(), sem.acquired().unwrap()), (1, 3));
    assert_eq!(sem.available().unwrap(), 0, "never below 0 in this layout");
    two.check().unwrap();
    one.check().unwrap();
    assert!(sem.try_acquire(1, ZERO, None).unwrap().is_none());
    drop(two);
    assert_eq!(sem.available().unwrap(), 0, "1 of 1 still held");
    drop(one);
    assert_eq!((sem.available().unwrap(), sem.acquired().unwrap()), (1, 0));
    let stored: String = redis::cmd("GET")
        .arg(format!("redlatch:{{{name}}}:semaphore:permits"))
        .query(&mut admin)
        .unwrap();
    assert_eq!(stored, "1");

    // A total not set yet counts as 0.
    let fresh = a.semaphore(&unique("sem-admin-new"));
    assert_eq!(fresh.add_permits(4).unwrap(), 4);
    assert!(!fresh.try_set_permits(1).unwrap());
    assert_eq!(fresh.permits().unwrap(), 4);
}

#[test]
fn adding_permits_wakes_a_waiter_that_now_fits_at_once() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("sem-add-wake");
    let sem = a.semaphore(&name);
    assert!(sem.try_set_permits(1).unwrap());
    // A watchdog hold: its lease would end only in 30 s, so only the raise can wake.
    let held = sem.acquire(1).unwrap();
    let waiter = spawn_acquirer(b.semaphore(&name), 2, ZERO);
    await_queued(&mut admin, &name, 1);
    thread::sleep(Duration::from_millis(50));
    let raised = Instant::now();
    assert_eq!(sem.add_permits(2).unwrap(), 3);
    let (at, token) = join_all(vec![waiter], Duration::from_secs(10), "waiter")
        .pop()
        .unwrap();
    assert!(token.is_some());
    let took = at.duration_since(raised);
    assert!(took < Duration::from_secs(1), "woken after {took:?}");
    held.check().unwrap();
    assert_eq!(sem.acquired().unwrap(), 1);
}

#[test]
fn administration_refuses_bad_input_and_foreign_data() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let a = client(&server);
    let name = unique("sem-admin-bad");
    let sem = a.semaphore(&name);
    assert!(sem.try_set_permits(2).unwrap());
    let invalid = |r: redlatch::Result<u32>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(sem.add_permits(-3)), "a total below 0");
    assert!(invalid(sem.add_permits(i64::MIN)));
    assert!(invalid(sem.add_permits(i64::MAX)));
    assert!(
        invalid(sem.add_permits(i64::from(u32::MAX))),
        "above u32::MAX"
    );
    assert_eq!(sem.permits().unwrap(), 2, "nothing was changed");
    assert_eq!(
        sem.add_permits(i64::from(u32::MAX) - 2).unwrap(),
        u32::MAX,
        "the largest total set_permits takes"
    );
    assert_eq!(sem.add_permits(-i64::from(u32::MAX)).unwrap(), 0);

    // Foreign data: WrongType, and it stays.
    let name = unique("sem-admin-foreign");
    let total = format!("redlatch:{{{name}}}:semaphore:permits");
    let sem = a.semaphore(&name);
    for value in ["lots", "hash"] {
        let _: () = redis::cmd("DEL").arg(&total).query(&mut admin).unwrap();
        let _: () = if value == "hash" {
            redis::cmd("HSET")
                .arg(&total)
                .arg("f")
                .arg("v")
                .query(&mut admin)
                .unwrap()
        } else {
            redis::cmd("SET")
                .arg(&total)
                .arg(value)
                .query(&mut admin)
                .unwrap()
        };
        for result in [
            sem.try_set_permits(3).map(drop),
            sem.add_permits(1).map(drop),
            sem.permits().map(drop),
            sem.acquired().map(drop),
        ] {
            match result {
                Err(Error::WrongType { key }) => assert_eq!(key, total),
                other => panic!("{value}: expected WrongType, got {other:?}"),
            }
        }
        let kind: String = redis::cmd("TYPE").arg(&total).query(&mut admin).unwrap();
        assert_eq!(kind, if value == "hash" { "hash" } else { "string" });
    }
    let kept: String = redis::cmd("HGET")
        .arg(&total)
        .arg("f")
        .query(&mut admin)
        .unwrap();
    assert_eq!(kept, "v");
    let name = unique("sem-admin-foreign-holders");
    let holders = format!("redlatch:{{{name}}}:semaphore");
    let _: () = redis::cmd("RPUSH")
        .arg(&holders)
        .arg("x")
        .query(&mut admin)
        .unwrap();
    let sem = a.semaphore(&name);
    for result in [
        sem.try_set_permits(3).map(drop),
        sem.add_permits(1).map(drop),
    ] {
        match result {
            Err(Error::WrongType { key }) => assert_eq!(key, holders),
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
    let len: usize = redis::cmd("LLEN").arg(&holders).query(&mut admin).unwrap();
    assert_eq!(len, 1);
    let gone: bool = redis::cmd("EXISTS")
        .arg(format!("redlatch:{{{name}}}:semaphore:permits"))
        .query(&mut admin)
        .unwrap();
    assert!(!gone, "nothing written");
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
fn extend_sets_the_permits_lease_from_now_and_never_revives_them() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("sem-extend");
    let holders = format!("redlatch:{{{name}}}:semaphore");
    let leases = format!("{holders}:leases");
    let sem = a.semaphore(&name);
    sem.set_permits(2).unwrap();
    let permits = sem
        .try_acquire(2, Duration::ZERO, Some(Duration::from_millis(400)))
        .unwrap()
        .unwrap();
    // Extended from another thread: permits are Send.
    let permits = thread::spawn(move || {
        permits.extend(Duration::from_secs(5)).unwrap();
        permits
    })
    .join()
    .unwrap();
    let left = lease_left(&mut admin, &leases, permits.owner_id());
    assert!((4000..=5000).contains(&left), "{left}");
    assert!(pttl(&mut admin, &holders) >= 4000);
    thread::sleep(Duration::from_millis(700));
    assert!(!permits.is_lost());
    assert_eq!(b.semaphore(&name).available().unwrap(), 0);
    // Set, not added: shorter too; then they run out and come back.
    permits.extend(Duration::from_millis(300)).unwrap();
    assert!(permits.remaining_lease() <= Duration::from_millis(300));
    assert!(eventually(Duration::from_secs(3), || permits.is_lost()));
    assert!(matches!(
        permits.extend(Duration::from_secs(5)),
        Err(Error::LockLost { .. })
    ));
    // The client counts a lease from when it sent the call, so it calls the hold lost a
    // moment before the server's lease ends: what is left there is that moment, never the 5 s.
    let left = lease_left(&mut admin, &leases, permits.owner_id());
    assert!(left < 200, "not revived: {left} ms left");
    assert_eq!(b.semaphore(&name).available().unwrap(), 2);
    drop(permits);

    let watched = sem.acquire(1).unwrap();
    assert!(matches!(
        watched.extend(Duration::from_secs(5)),
        Err(Error::InvalidArgument(_))
    ));
}
