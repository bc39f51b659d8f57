//! Thread accounting, alone in its own test binary so no other test's threads interfere:
//! a client runs exactly two threads, however many locks are held or threads wait, and both
//! end with the client. The tests here take turns (`SERIAL`), for the same reason.

mod support;

use std::thread;
use std::time::Duration;

use parking_lot::Mutex;
use redlatch::Client;
use support::topology::{Cluster, connect, key_slot};
use support::{RedisServer, eventually, pubsub_channels, thread_count};

static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn two_threads_per_client_with_50_waiters_and_none_after_drop() {
    let _turn = SERIAL.lock();
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

/// On a Redis 7 Cluster the subscriber keeps one connection per shard with waiters (before
/// Redis 7, one connection), all served by its one thread: waiters on every master still cost the client no thread, and
/// the connections close with the client.
#[test]
fn a_cluster_client_also_runs_two_threads_with_waiters_on_every_shard() {
    let _turn = SERIAL.lock();
    let c = Cluster::start();
    let urls = c.seed_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let masters = c.master_ports();
    let connected = |port: u16| -> usize {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut connect(port, None).unwrap())
            .unwrap();
        list.lines().count()
    };
    let baseline: Vec<usize> = masters.iter().map(|&p| connected(p)).collect();
    let before = thread_count();
    let client = Client::cluster_builder(&urls).build().unwrap();
    assert_eq!(
        thread_count(),
        before + 2,
        "a cluster client runs two threads"
    );
    let holder = Client::cluster_builder(&urls).build().unwrap();
    let with_holder = thread_count();

    // One lock name per master.
    let view = c.view();
    let owner = |name: &str| {
        let slot = key_slot(format!("redlatch:{{{name}}}").as_bytes());
        view.iter()
            .find(|n| n.master && n.serves(slot))
            .unwrap()
            .port
    };
    let names: Vec<String> = masters
        .iter()
        .map(|&m| {
            (0..100_000)
                .map(|i| format!("shard-{i}"))
                .find(|n| owner(n) == m)
                .unwrap()
        })
        .collect();
    assert_eq!(names.len(), masters.len());
    let guards: Vec<_> = names
        .iter()
        .map(|n| holder.lock(n).lock().unwrap())
        .collect();
    const WAITERS: usize = 12;
    let waiters: Vec<_> = (0..WAITERS)
        .map(|i| {
            let lock = client.lock(&names[i % names.len()]);
            thread::spawn(move || {
                lock.try_lock(Duration::from_secs(30), None)
                    .unwrap()
                    .is_some()
            })
        })
        .collect();
    // Subscriptions to the locks' channels on the node on `port`, sharded (Redis 7 on) or
    // classic (before).
    let subscriptions = |port: u16| -> i64 {
        let verb = if support::sharded_pubsub() {
            "SHARDNUMSUB"
        } else {
            "NUMSUB"
        };
        let mut con = connect(port, None).unwrap();
        names
            .iter()
            .map(|n| {
                let reply: (String, i64) = redis::cmd("PUBSUB")
                    .arg(verb)
                    .arg(format!("redlatch:{{{n}}}:unlocked"))
                    .query(&mut con)
                    .unwrap_or_default();
                reply.1
            })
            .sum()
    };
    let listening = || {
        if support::sharded_pubsub() {
            masters.iter().all(|&p| subscriptions(p) == 1)
        } else {
            // One node listens for every lock; a release's PUBLISH reaches it over the bus.
            let nodes: Vec<i64> = c.view().iter().map(|n| subscriptions(n.port)).collect();
            nodes.iter().sum::<i64>() == names.len() as i64 && nodes.contains(&(names.len() as i64))
        }
    };
    assert!(
        eventually(Duration::from_secs(10), listening),
        "one subscription per lock: by shard, on its own master (on one node before Redis 7)"
    );
    assert_eq!(
        thread_count(),
        with_holder + WAITERS,
        "waiters on three shards cost the client no thread"
    );
    drop(guards);
    for w in waiters {
        assert!(w.join().unwrap());
    }
    drop(client);
    drop(holder);
    assert!(
        eventually(Duration::from_secs(5), || thread_count() == before),
        "cluster client threads outlived the clients"
    );
    assert!(
        eventually(Duration::from_secs(5), || masters
            .iter()
            .zip(&baseline)
            .all(|(&p, &n)| connected(p) <= n)),
        "connections outlived the clients"
    );
}
