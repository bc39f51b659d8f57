//! Thread accounting, alone in its own test binary so no other test's threads interfere:
//! a client runs exactly two threads, however many locks are held or threads wait, and both
//! end with the client.

mod support;

use std::thread;
use std::time::Duration;

use redlatch::Client;
use support::{RedisServer, eventually, pubsub_channels, thread_count};

#[test]
fn two_threads_per_client_with_50_waiters_and_none_after_drop() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let before = thread_count();
    let client = Client::open(&server.url()).unwrap();
    assert_eq!(
        thread_count(),
        before + 2,
        "a client runs exactly two threads"
    );

    let holder = Client::open(&server.url()).unwrap();
    let with_holder = thread_count();
    let guards: Vec<_> = (0..5)
        .map(|i| holder.lock(&format!("held-{i}")).lock().unwrap())
        .collect();

    const WAITERS: usize = 50;
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let lock = client.lock(&format!("held-{}", i % 5));
        waiters.push(thread::spawn(move || {
            lock.try_lock(Duration::from_secs(30), Some(Duration::from_millis(20)))
                .unwrap()
                .is_some()
        }));
    }
    assert!(
        eventually(Duration::from_secs(10), || pubsub_channels(
            &mut admin,
            "redlatch:{held-*}:unlocked"
        )
        .len()
            == 5),
        "five channels, one per lock, shared by ten waiters each"
    );
    assert_eq!(
        thread_count(),
        with_holder + WAITERS,
        "the client started threads for its waiters"
    );

    drop(guards);
    for w in waiters {
        assert!(w.join().unwrap());
    }
    assert!(
        eventually(Duration::from_secs(5), || pubsub_channels(
            &mut admin,
            "redlatch:{held-*}:unlocked"
        )
        .is_empty()),
        "subscriptions must be dropped when the last waiter leaves"
    );
    assert_eq!(thread_count(), with_holder);

    drop(client);
    drop(holder);
    assert!(
        eventually(Duration::from_secs(5), || thread_count() == before),
        "client threads outlived the clients"
    );

    // A user that may not subscribe at all: waiting degrades to waking at the lock's TTL, and
    // the refused subscriber thread still ends with its client.
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "deaf",
            "on",
            ">pw",
            "~*",
            "resetchannels",
            "+@all",
        ])
        .query(&mut admin)
        .unwrap();
    let url = format!("redis://deaf:pw@127.0.0.1:{}/", server.port);
    let deaf = Client::open(&url).unwrap();
    let holder = Client::open(&server.url()).unwrap();

    // Threads that keep joining must not turn the refused subscriber's backoff into a
    // reconnect storm.
    let connections = || -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut server.admin())
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap()
    };
    let busy = holder.lock("deaf-busy").lock().unwrap();
    let before_storm = connections();
    let churners: Vec<_> = (0..4)
        .map(|_| {
            let lock = deaf.lock("deaf-busy");
            std::thread::spawn(move || {
                for _ in 0..20 {
                    assert!(
                        lock.try_lock(Duration::from_millis(100), None)
                            .unwrap()
                            .is_none()
                    );
                }
            })
        })
        .collect();
    for c in churners {
        c.join().unwrap();
    }
    let reconnects = connections() - before_storm;
    assert!(reconnects < 40, "{reconnects} connections in about 2 s");
    drop(busy);

    let held = holder
        .lock("deaf")
        .lock_with_lease(Duration::from_millis(300))
        .unwrap();
    let got = deaf
        .lock("deaf")
        .try_lock(Duration::from_secs(5), None)
        .unwrap();
    assert!(got.is_some(), "the TTL bound must still get the lock");
    drop(got);
    drop(held);
    drop(deaf);
    drop(holder);
    assert!(
        eventually(Duration::from_secs(5), || thread_count() == before),
        "a refused subscriber outlived its client"
    );
}
