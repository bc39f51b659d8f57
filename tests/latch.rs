//! The count-down latch against a real redis-server: its counting, waiters released only at
//! zero and promptly, waiting without polling, a lost message, expiry after zero, foreign
//! data, bad input, idempotence under lost replies.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Client, Error};
use support::{Proxy, RedisServer, command_calls, eventually, join_all, unique};

fn client(server: &RedisServer) -> Client {
    Client::open(&server.url()).unwrap()
}

fn key(name: &str) -> String {
    format!("redlatch:{{{name}}}:latch")
}

fn channel(name: &str) -> String {
    format!("redlatch:{{{name}}}:latch:unlocked")
}

/// Threads that each wait up to `timeout` on latch `name` and report when they returned.
fn spawn_waiters(
    client: &Client,
    name: &str,
    n: usize,
    timeout: Duration,
) -> Vec<thread::JoinHandle<(Instant, bool)>> {
    (0..n)
        .map(|_| {
            let latch = client.count_down_latch(name);
            thread::spawn(move || {
                let reached = latch.wait(timeout).unwrap();
                (Instant::now(), reached)
            })
        })
        .collect()
}

#[test]
fn counting_down_rounds_and_a_latch_never_set() {
    let server = RedisServer::start();
    let a = client(&server);
    let latch = a.count_down_latch(&unique("latch-count"));
    assert_eq!(latch.count().unwrap(), 0);
    let started = Instant::now();
    assert!(
        latch.wait(Duration::from_secs(5)).unwrap(),
        "a latch never set is open"
    );
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(latch.count_down().unwrap(), 0, "counting down nothing");
    assert!(latch.try_set_count(3).unwrap());
    assert!(
        !latch.try_set_count(5).unwrap(),
        "a second round over a running one"
    );
    assert_eq!(latch.count().unwrap(), 3);
    assert_eq!(latch.count_down().unwrap(), 2);
    assert_eq!(latch.count_down().unwrap(), 1);
    assert!(!latch.wait(Duration::ZERO).unwrap());
    assert_eq!(latch.count_down().unwrap(), 0);
    assert_eq!(latch.count_down().unwrap(), 0, "at zero it stays zero");
    assert!(latch.wait(Duration::ZERO).unwrap());
    // A new round once at zero; the huge count a 64-bit integer allows.
    assert!(latch.try_set_count(i64::MAX as u64).unwrap());
    assert_eq!(latch.count_down().unwrap(), i64::MAX as u64 - 1);
    // Exact on either side of 2^53, where a count stops fitting a double (the script answers
    // small counts from DECR's reply and larger ones as the stored text).
    let edge = 1u64 << 53;
    let name = unique("latch-edge");
    for start in [edge + 3, edge + 1, edge] {
        let latch = a.count_down_latch(&format!("{name}-{start}"));
        assert!(latch.try_set_count(start).unwrap());
        assert_eq!(latch.count_down().unwrap(), start - 1);
        assert_eq!(latch.count_down().unwrap(), start - 2);
        assert_eq!(latch.count().unwrap(), start - 2);
    }
}

#[test]
fn waiters_are_released_only_at_zero_and_promptly() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let name = unique("latch-wake");
    let latch = a.count_down_latch(&name);
    latch.try_set_count(3).unwrap();
    let waiters = spawn_waiters(&b, &name, 3, Duration::from_secs(20));
    let mut admin = server.admin();
    assert!(eventually(Duration::from_secs(5), || {
        support::pubsub_channels(&mut admin, &channel(&name)).len() == 1
    }));
    for _ in 0..2 {
        latch.count_down().unwrap();
        thread::sleep(Duration::from_millis(200));
        assert!(
            waiters.iter().all(|w| !w.is_finished()),
            "a waiter went through before zero"
        );
    }
    let opened = Instant::now();
    assert_eq!(latch.count_down().unwrap(), 0);
    for (at, reached) in join_all(waiters, Duration::from_secs(10), "waiters") {
        assert!(reached);
        assert!(
            at - opened < Duration::from_millis(500),
            "a waiter woke {:?} after zero",
            at - opened
        );
    }
}

#[test]
fn a_wait_that_runs_out_answers_false_near_its_timeout() {
    let server = RedisServer::start();
    let a = client(&server);
    let latch = a.count_down_latch(&unique("latch-timeout"));
    latch.try_set_count(1).unwrap();
    let started = Instant::now();
    assert!(!latch.wait(Duration::from_millis(400)).unwrap());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_millis(900),
        "waited {waited:?} for 400 ms"
    );
}

#[test]
fn waiting_costs_no_commands() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (client(&server), client(&server));
    let name = unique("latch-idle");
    let latch = a.count_down_latch(&name);
    latch.try_set_count(1).unwrap();
    let waiters = spawn_waiters(&b, &name, 3, Duration::from_secs(20));
    assert!(eventually(Duration::from_secs(5), || {
        support::pubsub_channels(&mut admin, &channel(&name)).len() == 1
    }));
    thread::sleep(Duration::from_millis(200)); // the waiters' second checks
    let before = command_calls(&mut admin, "evalsha");
    thread::sleep(Duration::from_secs(2));
    let during = command_calls(&mut admin, "evalsha") - before;
    assert!(during == 0, "waiters polled: {during} script calls in 2 s");
    latch.count_down().unwrap();
    for (_, reached) in join_all(waiters, Duration::from_secs(10), "waiters") {
        assert!(reached);
    }
}

#[test]
fn a_lost_message_costs_at_most_one_watchdog_timeout() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let waiting = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let name = unique("latch-lost");
    let latch = waiting.count_down_latch(&name);
    latch.try_set_count(1).unwrap();
    let waiters = spawn_waiters(&waiting, &name, 2, Duration::from_secs(20));
    assert!(eventually(Duration::from_secs(5), || {
        support::pubsub_channels(&mut admin, &channel(&name)).len() == 1
    }));
    thread::sleep(Duration::from_millis(200));
    // Zero without the message: as if it had been lost.
    let _: () = redis::cmd("SET")
        .arg(key(&name))
        .arg("0")
        .query(&mut admin)
        .unwrap();
    let zeroed = Instant::now();
    for (at, reached) in join_all(waiters, Duration::from_secs(10), "waiters") {
        assert!(reached);
        assert!(
            at - zeroed < Duration::from_millis(1500),
            "{:?}",
            at - zeroed
        );
    }
}

#[test]
fn the_key_expires_after_zero_and_nothing_is_left_without_a_ttl() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let a = client(&server);
    let name = unique("latch-expiry");
    let latch = a.count_down_latch(&name);
    latch.try_set_count(2).unwrap();
    latch.count_down().unwrap();
    let ttl: i64 = redis::cmd("PTTL")
        .arg(key(&name))
        .query(&mut admin)
        .unwrap();
    assert_eq!(ttl, -1, "a running count expired");
    latch.count_down().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("redlatch:{{{name}}}*"))
        .query(&mut admin)
        .unwrap();
    assert!(!keys.is_empty());
    for k in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut admin).unwrap();
        assert!(
            ttl > 0 && ttl <= 121_220,
            "{k} left with PTTL {ttl} after zero"
        );
    }
    // A new round takes the expiry off again.
    assert!(latch.try_set_count(1).unwrap());
    let ttl: i64 = redis::cmd("PTTL")
        .arg(key(&name))
        .query(&mut admin)
        .unwrap();
    assert_eq!(ttl, -1);
}

#[test]
fn foreign_data_is_refused_and_left_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let a = client(&server);
    for (i, setup) in [["SET", "hello"], ["HSET", "f"]].iter().enumerate() {
        let name = unique(&format!("latch-foreign-{i}"));
        let k = key(&name);
        let mut cmd = redis::cmd(setup[0]);
        cmd.arg(&k).arg(setup[1]);
        if setup[0] == "HSET" {
            cmd.arg("v");
        }
        let _: () = cmd.query(&mut admin).unwrap();
        let latch = a.count_down_latch(&name);
        for result in [
            latch.count(),
            latch.count_down(),
            latch.try_set_count(2).map(u64::from),
            latch.wait(Duration::from_millis(50)).map(u64::from),
        ] {
            match result {
                Err(Error::WrongType { key }) => assert_eq!(key, k),
                other => panic!("expected WrongType, got {other:?}"),
            }
        }
        let kind: String = redis::cmd("TYPE").arg(&k).query(&mut admin).unwrap();
        assert_eq!(kind, if i == 0 { "string" } else { "hash" });
        if i == 0 {
            let v: String = redis::cmd("GET").arg(&k).query(&mut admin).unwrap();
            assert_eq!(v, "hello");
        }
    }
}

#[test]
fn bad_input_is_refused_before_any_io() {
    let server = RedisServer::start();
    let a = client(&server);
    let latch = a.count_down_latch(&unique("latch-bad"));
    assert!(matches!(
        latch.try_set_count(0),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        latch.try_set_count(u64::MAX),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        latch.wait(Duration::MAX),
        Err(Error::InvalidArgument(_))
    ));
    let empty = a.count_down_latch("");
    assert!(matches!(empty.count(), Err(Error::InvalidArgument(_))));
    assert!(matches!(empty.count_down(), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        empty.wait(Duration::ZERO),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn counting_down_and_setting_are_idempotent_under_lost_replies() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let a = Client::open(&proxy.url()).unwrap();
    let name = unique("latch-lost-reply");
    let latch = a.count_down_latch(&name);
    // Loads the scripts, so that the lost replies below are EVALSHA's.
    latch.try_set_count(3).unwrap();
    latch.count_down().unwrap();
    latch.count_down().unwrap();
    latch.count_down().unwrap();

    proxy.lose_reply_to(b"EVALSHA");
    assert!(
        latch.try_set_count(3).unwrap(),
        "the retry must report its own round"
    );
    assert_eq!(proxy.cuts(), 1);
    proxy.lose_reply_to(b"EVALSHA");
    assert_eq!(latch.count_down().unwrap(), 2);
    assert_eq!(proxy.cuts(), 2);
    assert_eq!(
        latch.count().unwrap(),
        2,
        "a retried count-down counted twice"
    );
    // Loads the delete script first, so that the lost reply is EVALSHA's.
    assert!(!a.count_down_latch(&unique("latch-never")).delete().unwrap());
    proxy.lose_reply_to(b"EVALSHA");
    assert!(
        latch.delete().unwrap(),
        "the retry must report its own delete"
    );
    assert_eq!(proxy.cuts(), 3);
}

/// The count-down that reaches zero tells the waiters when (its server time), and a waiter
/// whose last look came before that returns without another: the opening costs the server one
/// script call, the count-down, however many wait.
#[test]
fn waiters_return_on_the_opening_without_another_look() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (counter, waiting) = (
        Client::open(&server.url()).unwrap(),
        Client::open(&server.url()).unwrap(),
    );
    let name = unique("opening");
    counter.count_down_latch(&name).try_set_count(1).unwrap();
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let latch = waiting.count_down_latch(&name);
            std::thread::spawn(move || latch.wait(Duration::from_secs(20)).unwrap())
        })
        .collect();
    assert!(support::eventually(Duration::from_secs(5), || {
        waiting.stats().waiting_threads == 4
    }));
    // Each has looked again since its subscription was confirmed.
    std::thread::sleep(Duration::from_millis(200));
    let before = support::command_calls(&mut admin, "evalsha");
    assert_eq!(counter.count_down_latch(&name).count_down().unwrap(), 0);
    let opened = support::join_all(waiters, Duration::from_secs(30), "waiters");
    assert!(opened.iter().all(|o| *o));
    assert_eq!(
        support::command_calls(&mut admin, "evalsha") - before,
        1,
        "only the count-down ran"
    );
}

/// A client of `layout`, with a watchdog timeout of `watchdog`.
fn client_of(server: &RedisServer, layout: redlatch::Layout, watchdog: Duration) -> Client {
    Client::builder(&server.url())
        .layout(layout)
        .watchdog_timeout(watchdog)
        .build()
        .unwrap()
}

/// Latch `name`'s key and channel in `layout`.
fn key_and_channel(layout: redlatch::Layout, name: &str) -> (String, String) {
    match layout {
        redlatch::Layout::Redisson => (
            name.to_string(),
            format!("redisson_countdownlatch__channel__{{{name}}}"),
        ),
        _ => (key(name), channel(name)),
    }
}

/// Threads that each wait on latch `name` with `await_zero`; joins to when they returned.
fn spawn_unbounded_waiters(
    client: &Client,
    name: &str,
    n: usize,
) -> Vec<thread::JoinHandle<(Instant, redlatch::Result<()>)>> {
    (0..n)
        .map(|_| {
            let latch = client.count_down_latch(name);
            thread::spawn(move || {
                let done = latch.await_zero();
                (Instant::now(), done)
            })
        })
        .collect()
}

#[test]
fn delete_wakes_every_waiter_and_says_whether_a_count_ran_in_both_layouts() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    for layout in [redlatch::Layout::Redlatch, redlatch::Layout::Redisson] {
        // A long watchdog timeout: only the message can wake the waiters in time.
        let waiting = client_of(&server, layout, Duration::from_secs(60));
        let deleting = client_of(&server, layout, Duration::from_secs(60));
        let name = unique("latch-delete");
        let (key, channel) = key_and_channel(layout, &name);
        let latch = deleting.count_down_latch(&name);
        assert!(!latch.delete().unwrap(), "{layout:?}: nothing ran");
        assert!(latch.try_set_count(2).unwrap());
        let waiters = spawn_unbounded_waiters(&waiting, &name, 3);
        support::await_subscribed(&mut admin, &channel);
        thread::sleep(Duration::from_millis(100));
        assert!(waiters.iter().all(|w| !w.is_finished()));
        let deleted = Instant::now();
        assert!(latch.delete().unwrap(), "{layout:?}: a count ran");
        for (at, done) in join_all(waiters, Duration::from_secs(5), "waiters") {
            done.unwrap();
            assert!(at - deleted < Duration::from_secs(2), "{layout:?}");
        }
        assert_eq!(support::pttl(&mut admin, &key), -2, "{layout:?}");
        assert_eq!(latch.count().unwrap(), 0);
        assert!(!latch.delete().unwrap(), "{layout:?}: already gone");
        // A new round may start at once.
        assert!(latch.try_set_count(1).unwrap());
        assert_eq!(latch.count().unwrap(), 1);
    }
}

#[test]
fn deleting_a_latch_at_zero_says_no_count_ran_and_leaves_nothing() {
    let server = RedisServer::start();
    let latch = client(&server).count_down_latch(&unique("latch-delete-zero"));
    assert!(latch.try_set_count(1).unwrap());
    assert_eq!(latch.count_down().unwrap(), 0);
    // At zero the key is kept a while (with a TTL); the delete takes it, and says no count
    // was running.
    assert!(!latch.delete().unwrap());
    let exists: i64 = redis::cmd("EXISTS")
        .arg(key(latch.name()))
        .query(&mut server.admin())
        .unwrap();
    assert_eq!(exists, 0);
}

#[test]
fn await_zero_returns_at_zero_looks_again_each_watchdog_timeout_and_can_be_cancelled() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    for layout in [redlatch::Layout::Redlatch, redlatch::Layout::Redisson] {
        let waiting = client_of(&server, layout, Duration::from_secs(1));
        let name = unique("latch-await");
        let (key, channel) = key_and_channel(layout, &name);
        let latch = waiting.count_down_latch(&name);
        latch.await_zero().unwrap(); // never set: open
        assert!(latch.try_set_count(1).unwrap());

        // Zero without a message, as if it had been lost: found at the next look.
        let waiters = spawn_unbounded_waiters(&waiting, &name, 2);
        support::await_subscribed(&mut admin, &channel);
        thread::sleep(Duration::from_millis(200));
        let _: () = redis::cmd("DEL").arg(&key).query(&mut admin).unwrap();
        let zeroed = Instant::now();
        for (at, done) in join_all(waiters, Duration::from_secs(10), "waiters") {
            done.unwrap();
            assert!(at - zeroed < Duration::from_millis(1500), "{layout:?}");
        }

        // A cancel ends it, and leaves the count as it is.
        assert!(latch.try_set_count(3).unwrap());
        let cancel = redlatch::Cancel::new();
        let waiter = {
            let latch = latch.cancel_on(&cancel);
            thread::spawn(move || latch.await_zero())
        };
        thread::sleep(Duration::from_millis(200));
        assert!(!waiter.is_finished());
        cancel.cancel();
        let done = join_all(vec![waiter], Duration::from_secs(2), "cancelled waiter");
        assert!(matches!(&done[0], Err(e) if e.is_cancelled()), "{layout:?}");
        assert_eq!(latch.count().unwrap(), 3);
    }
}

#[test]
fn javas_delete_message_wakes_our_waiters_in_redissons_layout() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let waiting = client_of(&server, redlatch::Layout::Redisson, Duration::from_secs(60));
    let name = unique("latch-java-delete");
    let (key, channel) = key_and_channel(redlatch::Layout::Redisson, &name);
    assert!(waiting.count_down_latch(&name).try_set_count(5).unwrap());
    let waiters = spawn_unbounded_waiters(&waiting, &name, 2);
    support::await_subscribed(&mut admin, &channel);
    thread::sleep(Duration::from_millis(100));
    // What Java's RCountDownLatch.delete does (Redisson's format): DEL, then "1".
    let _: () = redis::cmd("DEL").arg(&key).query(&mut admin).unwrap();
    let _: () = redis::cmd("PUBLISH")
        .arg(&channel)
        .arg("1")
        .query(&mut admin)
        .unwrap();
    let deleted = Instant::now();
    for (at, done) in join_all(waiters, Duration::from_secs(5), "waiters") {
        done.unwrap();
        assert!(at - deleted < Duration::from_secs(2));
    }
}
