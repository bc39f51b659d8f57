//! The counting semaphore (Java's `RSemaphore`) against a real redis-server, in both layouts:
//! its admin calls and counts (below zero too), acquire and release across clients and
//! threads, waiters woken by another client's release without polling, cancelled waits,
//! waiters of both semaphores on Redisson's one channel, bad input and foreign data.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Cancel, Client, Error, Layout};
use support::{RedisServer, command_calls, eventually, join_all, unique};

const LAYOUTS: [Layout; 2] = [Layout::Redlatch, Layout::Redisson];

fn client(server: &RedisServer, layout: Layout) -> Client {
    Client::builder(&server.url())
        .layout(layout)
        .build()
        .unwrap()
}

/// The semaphore's key in `layout`.
fn key(layout: Layout, name: &str) -> String {
    match layout {
        Layout::Redisson => name.to_string(),
        _ => format!("redlatch:{{{name}}}:counting"),
    }
}

/// The semaphore's channel in `layout`.
fn channel(layout: Layout, name: &str) -> String {
    match layout {
        Layout::Redisson => format!("redisson_sc:{{{name}}}"),
        _ => format!("redlatch:{{{name}}}:counting:unlocked"),
    }
}

/// Waits (at most 5 s) until `client` has `n` threads waiting on the subscriber.
fn await_waiting(client: &Client, n: u64) {
    assert!(
        eventually(Duration::from_secs(5), || client.stats().waiting_threads
            == n),
        "expected {n} waiting threads, saw {}",
        client.stats().waiting_threads
    );
}

/// Waits (at most 5 s) until the server's script calls stop changing for 200 ms: every
/// waiter has made its attempts and sleeps. The count then.
fn settled_scripts(admin: &mut redis::Connection) -> u64 {
    let mut last = command_calls(admin, "evalsha") + command_calls(admin, "eval");
    for _ in 0..25 {
        thread::sleep(Duration::from_millis(200));
        let now = command_calls(admin, "evalsha") + command_calls(admin, "eval");
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("script calls never settled");
}

fn raw(admin: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(admin).unwrap()
}

#[test]
fn admin_calls_and_counts_in_both_layouts() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    for layout in LAYOUTS {
        let c = client(&server, layout);
        let name = unique("cs-admin");
        let sem = c.counting_semaphore(&name);
        assert_eq!(sem.name(), name);
        assert_eq!(sem.available().unwrap(), 0, "{layout:?}: never set");
        assert!(!sem.try_acquire(1, Duration::ZERO).unwrap());
        assert!(sem.try_set_permits(3).unwrap());
        assert!(!sem.try_set_permits(5).unwrap(), "{layout:?}: set twice");
        assert_eq!(sem.available().unwrap(), 3);
        assert_eq!(raw(&mut admin, &key(layout, &name)).as_deref(), Some("3"));
        assert!(sem.try_acquire(2, Duration::ZERO).unwrap());
        assert_eq!(sem.available().unwrap(), 1);
        assert!(!sem.try_acquire(2, Duration::ZERO).unwrap());
        assert_eq!(sem.available().unwrap(), 1, "a refusal takes nothing");
        sem.release(1).unwrap();
        assert_eq!(sem.available().unwrap(), 2);
        // Taken away while permits are out: below zero, as Java's.
        sem.add_permits(-5).unwrap();
        assert_eq!(sem.available().unwrap(), -3, "{layout:?}");
        assert_eq!(raw(&mut admin, &key(layout, &name)).as_deref(), Some("-3"));
        assert!(!sem.try_acquire(1, Duration::ZERO).unwrap());
        match layout {
            // Ours: nothing free, nothing taken, the debt stays.
            Layout::Redlatch => {
                assert_eq!(sem.drain().unwrap(), 0);
                assert_eq!(sem.available().unwrap(), -3);
                sem.add_permits(3).unwrap();
            }
            // Java's drainPermits answers the count as it is and sets 0.
            _ => assert_eq!(sem.drain().unwrap(), -3),
        }
        assert_eq!(sem.available().unwrap(), 0);
        sem.add_permits(4).unwrap();
        sem.release(2).unwrap();
        assert_eq!(sem.available().unwrap(), 6);
        assert_eq!(sem.drain().unwrap(), 6);
        assert_eq!(sem.available().unwrap(), 0);
        assert_eq!(sem.drain().unwrap(), 0);
        // A release with nothing taken adds permits: nothing is owned.
        c.counting_semaphore(&name).release(1).unwrap();
        assert_eq!(sem.available().unwrap(), 1);
        // Another kind of the same name is another object in our layout.
        if layout == Layout::Redlatch {
            assert_eq!(c.semaphore(&name).available().unwrap(), 0);
            assert_eq!(c.count_down_latch(&name).count().unwrap(), 0);
        }
    }
}

#[test]
fn acquire_and_release_across_clients_and_threads_never_exceed_the_permits() {
    let server = RedisServer::start();
    for layout in LAYOUTS {
        let name = unique("cs-threads");
        let clients: Vec<Client> = (0..3).map(|_| client(&server, layout)).collect();
        assert!(
            clients[0]
                .counting_semaphore(&name)
                .try_set_permits(2)
                .unwrap()
        );
        let inside = Arc::new(AtomicI64::new(0));
        let most = Arc::new(AtomicI64::new(0));
        let handles: Vec<_> = (0..9)
            .map(|i| {
                let sem = clients[i % 3].counting_semaphore(&name);
                let (inside, most) = (inside.clone(), most.clone());
                thread::spawn(move || {
                    for _ in 0..5 {
                        assert!(sem.try_acquire(1, Duration::from_secs(20)).unwrap());
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        thread::sleep(Duration::from_millis(3));
                        inside.fetch_sub(1, Ordering::SeqCst);
                        // Given back from another thread than the one that took it.
                        let sem = sem.clone();
                        thread::spawn(move || sem.release(1).unwrap())
                            .join()
                            .unwrap();
                    }
                })
            })
            .collect();
        join_all(handles, Duration::from_secs(60), "the workers");
        assert!(
            most.load(Ordering::SeqCst) <= 2,
            "{layout:?}: over the limit"
        );
        assert_eq!(
            most.load(Ordering::SeqCst),
            2,
            "{layout:?}: never both used"
        );
        assert_eq!(clients[1].counting_semaphore(&name).available().unwrap(), 2);
    }
}

#[test]
fn a_waiter_sleeps_without_commands_and_another_clients_release_wakes_it() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    for layout in LAYOUTS {
        let name = unique("cs-wake");
        let (waiting, releasing) = (client(&server, layout), client(&server, layout));
        // Loads the release's script, so that each release below is one call.
        releasing
            .counting_semaphore(&unique("cs-prime"))
            .release(1)
            .unwrap();
        let waiter = {
            let sem = waiting.counting_semaphore(&name);
            thread::spawn(move || {
                let got = sem.try_acquire(3, Duration::from_secs(20)).unwrap();
                (got, Instant::now())
            })
        };
        await_waiting(&waiting, 1);
        support::await_subscribed(&mut admin, &channel(layout, &name));
        let before = settled_scripts(&mut admin);
        let calls_before = command_calls(&mut admin, "get");
        thread::sleep(Duration::from_secs(1));
        assert_eq!(
            command_calls(&mut admin, "evalsha") + command_calls(&mut admin, "eval"),
            before,
            "{layout:?}: the waiter polled"
        );
        assert_eq!(command_calls(&mut admin, "get"), calls_before);
        // Too few: the waiter wakes, tries, and sleeps again.
        releasing.counting_semaphore(&name).release(1).unwrap();
        let after_one = settled_scripts(&mut admin);
        assert_eq!(
            after_one,
            before + 2,
            "{layout:?}: a release and one attempt, then silence"
        );
        assert_eq!(waiting.stats().waiting_threads, 1);
        let released = Instant::now();
        releasing.counting_semaphore(&name).release(2).unwrap();
        let (got, at) = join_all(vec![waiter], Duration::from_secs(30), "the waiter").remove(0);
        let latency = at - released;
        println!("{layout:?}: woken {latency:?} after the release");
        assert!(got, "{layout:?}: not acquired");
        assert!(latency < Duration::from_secs(1), "{layout:?}: {latency:?}");
        assert_eq!(releasing.counting_semaphore(&name).available().unwrap(), 0);
    }
}

#[test]
fn add_and_first_set_wake_waiters_and_a_release_wakes_every_waiter_that_fits() {
    let server = RedisServer::start();
    for layout in LAYOUTS {
        let name = unique("cs-many");
        let (waiting, other) = (client(&server, layout), client(&server, layout));
        // A large request first, then small ones: a release of 2 must wake the small ones
        // even though the large one cannot go.
        let spawn = |c: &Client, n: u32| {
            let sem = c.counting_semaphore(&name);
            thread::spawn(move || sem.try_acquire(n, Duration::from_secs(20)).unwrap())
        };
        let large = spawn(&waiting, 5);
        await_waiting(&waiting, 1);
        let small: Vec<_> = (0..2).map(|_| spawn(&waiting, 1)).collect();
        let elsewhere = spawn(&other, 1);
        await_waiting(&waiting, 3);
        await_waiting(&other, 1);
        let started = Instant::now();
        assert!(other.counting_semaphore(&name).try_set_permits(2).unwrap());
        // Two of the three small ones get theirs; the third gets it from an add.
        assert!(eventually(Duration::from_secs(2), || {
            waiting.stats().waiting_threads + other.stats().waiting_threads == 2
        }));
        assert!(started.elapsed() < Duration::from_secs(1));
        other.counting_semaphore(&name).add_permits(1).unwrap();
        assert!(eventually(Duration::from_secs(2), || {
            waiting.stats().waiting_threads + other.stats().waiting_threads == 1
        }));
        other.counting_semaphore(&name).add_permits(5).unwrap();
        let mut all = small;
        all.push(elsewhere);
        all.push(large);
        let got = join_all(all, Duration::from_secs(5), "the waiters");
        assert!(got.iter().all(|g| *g), "{layout:?}: {got:?}");
        assert_eq!(other.counting_semaphore(&name).available().unwrap(), 0);
    }
}

#[test]
fn a_cancelled_wait_ends_at_once_and_takes_nothing() {
    let server = RedisServer::start();
    for layout in LAYOUTS {
        let name = unique("cs-cancel");
        let c = client(&server, layout);
        let sem = c.counting_semaphore(&name);
        sem.add_permits(1).unwrap();
        let cancel = Cancel::new();
        let waiter = {
            let sem = sem.cancel_on(&cancel);
            thread::spawn(move || (sem.acquire(2), Instant::now()))
        };
        await_waiting(&c, 1);
        let cancelled = Instant::now();
        cancel.cancel();
        let (r, at) = join_all(vec![waiter], Duration::from_secs(5), "the waiter").remove(0);
        assert!(
            matches!(&r, Err(Error::Cancelled { name: n }) if *n == name),
            "{layout:?}: {r:?}"
        );
        assert!(r.unwrap_err().is_cancelled());
        assert!(at - cancelled < Duration::from_secs(1));
        assert_eq!(sem.available().unwrap(), 1, "{layout:?}: took something");
        // Already cancelled: at once, with no attempt.
        assert!(
            sem.cancel_on(&cancel)
                .try_acquire(1, Duration::from_secs(5))
                .is_err()
        );
        assert_eq!(sem.available().unwrap(), 1);

        // The client's cancel_all_waits ends every wait.
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let sem = sem.clone();
                thread::spawn(move || sem.try_acquire(5, Duration::from_secs(20)))
            })
            .collect();
        await_waiting(&c, 2);
        c.cancel_all_waits();
        for r in join_all(waiters, Duration::from_secs(5), "the waiters") {
            assert!(
                matches!(r, Err(Error::Cancelled { .. })),
                "{layout:?}: {r:?}"
            );
        }
        assert_eq!(sem.available().unwrap(), 1);
        // Later waits are not cancelled.
        assert!(sem.try_acquire(1, Duration::from_secs(1)).unwrap());
    }
}

#[test]
fn redisson_layout_waiters_of_both_semaphores_share_the_channel() {
    // Java's getSemaphore and getPermitExpirableSemaphore use one key and one channel: one
    // subscription entry holds waiters of both, and a count wakes them all.
    let server = RedisServer::start();
    let name = unique("cs-shared");
    let (c, other) = (
        client(&server, Layout::Redisson),
        client(&server, Layout::Redisson),
    );
    let leased = {
        let sem = c.semaphore(&name);
        thread::spawn(move || {
            let p = sem
                .try_acquire(1, Duration::from_secs(20), None)
                .unwrap()
                .is_some();
            (p, Instant::now())
        })
    };
    await_waiting(&c, 1);
    let counting = {
        let sem = c.counting_semaphore(&name);
        thread::spawn(move || {
            (
                sem.try_acquire(1, Duration::from_secs(20)).unwrap(),
                Instant::now(),
            )
        })
    };
    await_waiting(&c, 2);
    let released = Instant::now();
    other.counting_semaphore(&name).release(2).unwrap();
    for (got, at) in join_all(
        vec![leased, counting],
        Duration::from_secs(30),
        "the waiters",
    ) {
        assert!(got);
        assert!(
            at - released < Duration::from_secs(1),
            "{:?}",
            at - released
        );
    }
    // The leased permit came back when its guard was dropped; the counted one did not.
    assert_eq!(other.counting_semaphore(&name).available().unwrap(), 1);
}

#[test]
fn bad_input_is_refused_before_anything_is_sent() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    for layout in LAYOUTS {
        let c = client(&server, layout);
        let name = unique("cs-bad");
        let sem = c.counting_semaphore(&name);
        let invalid = |r: redlatch::Result<()>| matches!(r, Err(Error::InvalidArgument(_)));
        assert!(invalid(sem.acquire(0)));
        assert!(invalid(sem.try_acquire(0, Duration::ZERO).map(|_| ())));
        assert!(invalid(sem.release(0)));
        assert!(invalid(sem.try_set_permits(0).map(|_| ())));
        assert!(invalid(sem.add_permits(0)));
        assert!(invalid(sem.add_permits(i64::MAX)));
        assert!(invalid(sem.add_permits(i64::MIN)));
        assert!(invalid(sem.try_acquire(1, Duration::MAX).map(|_| ())));
        let empty = c.counting_semaphore("");
        assert!(invalid(empty.acquire(1)));
        assert!(invalid(empty.available().map(|_| ())));
        assert!(invalid(empty.drain().map(|_| ())));
        assert!(invalid(empty.release(1)));
        assert_eq!(
            raw(&mut admin, &key(layout, &name)),
            None,
            "nothing written"
        );
        // The count stays within what Lua counts exactly: refused, nothing changed.
        let most = (1i64 << 53) - 1;
        sem.add_permits(most).unwrap();
        assert!(invalid(sem.add_permits(1)));
        assert!(invalid(sem.release(1)));
        assert_eq!(sem.available().unwrap(), most);
        sem.add_permits(-most).unwrap();
        sem.add_permits(-most).unwrap();
        assert!(invalid(sem.add_permits(-1)));
        assert_eq!(sem.available().unwrap(), -most);
    }
}

#[test]
fn foreign_data_is_wrong_type_and_left_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    for layout in LAYOUTS {
        let c = client(&server, layout);
        for (i, foreign) in ["hash", "text"].into_iter().enumerate() {
            let name = unique(&format!("cs-foreign-{i}"));
            let k = key(layout, &name);
            match foreign {
                "hash" => {
                    let _: () = redis::cmd("HSET")
                        .arg(&k)
                        .arg("f")
                        .arg("v")
                        .query(&mut admin)
                        .unwrap();
                }
                _ => {
                    let _: () = redis::cmd("SET")
                        .arg(&k)
                        .arg("hello")
                        .query(&mut admin)
                        .unwrap();
                }
            }
            let sem = c.counting_semaphore(&name);
            let wrong = |r: redlatch::Result<()>| match r {
                Err(Error::WrongType { key }) => key == k,
                other => panic!("{layout:?} {foreign}: {other:?}"),
            };
            assert!(wrong(sem.available().map(|_| ())));
            assert!(wrong(sem.try_acquire(1, Duration::ZERO).map(|_| ())));
            assert!(wrong(sem.acquire(1)));
            assert!(wrong(sem.release(1)));
            assert!(wrong(sem.add_permits(-1)));
            assert!(wrong(sem.try_set_permits(1).map(|_| ())));
            assert!(wrong(sem.drain().map(|_| ())));
            let kind: String = redis::cmd("TYPE").arg(&k).query(&mut admin).unwrap();
            assert_eq!(kind, if foreign == "hash" { "hash" } else { "string" });
            if foreign == "text" {
                assert_eq!(raw(&mut admin, &k).as_deref(), Some("hello"));
            }
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("*{name}*"))
                .query(&mut admin)
                .unwrap();
            assert_eq!(keys, vec![k.clone()], "{layout:?}: wrote {keys:?}");
        }
    }
}

#[test]
fn a_wait_that_times_out_takes_nothing_and_reports_false() {
    let server = RedisServer::start();
    for layout in LAYOUTS {
        let c = client(&server, layout);
        let sem = c.counting_semaphore(&unique("cs-timeout"));
        sem.add_permits(1).unwrap();
        let started = Instant::now();
        assert!(!sem.try_acquire(2, Duration::from_millis(300)).unwrap());
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(2),
            "{took:?}"
        );
        assert_eq!(sem.available().unwrap(), 1);
    }
}

#[test]
fn each_call_publishes_what_its_layout_says() {
    let server = RedisServer::start();
    for layout in LAYOUTS {
        let c = client(&server, layout);
        let name = unique("cs-messages");
        let sem = c.counting_semaphore(&name);
        let listener = redis::Client::open(server.url()).unwrap();
        let mut con = listener.get_connection().unwrap();
        let mut pubsub = con.as_pubsub();
        pubsub.subscribe(channel(layout, &name)).unwrap();
        pubsub
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut heard = |what: &str| -> Option<String> {
            match pubsub.get_message() {
                Ok(m) => Some(m.get_payload().unwrap()),
                Err(e) if e.is_timeout() => None,
                Err(e) => panic!("{layout:?} {what}: {e}"),
            }
        };
        // (call, what ours publishes, what Redisson's layout publishes: Java's messages)
        assert!(sem.try_set_permits(2).unwrap());
        let expect = |ours: Option<&str>, java: Option<&str>| match layout {
            Layout::Redisson => java.map(str::to_string),
            _ => ours.map(str::to_string),
        };
        assert_eq!(heard("set"), expect(Some("free 2"), Some("2")));
        assert!(!sem.try_set_permits(2).unwrap());
        assert!(sem.try_acquire(2, Duration::ZERO).unwrap());
        assert_eq!(heard("set again, acquire"), None);
        sem.release(1).unwrap();
        assert_eq!(heard("release"), expect(Some("free 1"), Some("1")));
        sem.add_permits(-3).unwrap();
        assert_eq!(heard("add -3"), expect(None, Some("-2")));
        sem.add_permits(2).unwrap();
        assert_eq!(heard("add 2"), expect(None, Some("0")));
        sem.add_permits(3).unwrap();
        assert_eq!(heard("add 3"), expect(Some("free 3"), Some("3")));
        assert_eq!(sem.drain().unwrap(), 3);
        assert_eq!(heard("drain"), None);
    }
}

#[test]
fn every_call_is_idempotent_under_a_lost_reply() {
    let server = RedisServer::start();
    let proxy = support::Proxy::start(server.port);
    for layout in LAYOUTS {
        let c = Client::builder(&proxy.url())
            .layout(layout)
            .build()
            .unwrap();
        let name = unique("cs-lost-reply");
        let sem = c.counting_semaphore(&name);
        // Loads the scripts, so that the lost replies below are EVALSHA's.
        let primer = c.counting_semaphore(&unique("cs-primer"));
        primer.try_set_permits(1).unwrap();
        primer.try_acquire(1, Duration::ZERO).unwrap();
        primer.release(1).unwrap();
        primer.add_permits(1).unwrap();
        primer.drain().unwrap();
        primer.available().unwrap();

        let cuts = proxy.cuts();
        let lose = || proxy.lose_reply_to(b"EVALSHA");
        lose();
        assert!(sem.try_set_permits(3).unwrap(), "{layout:?}: its own set");
        lose();
        assert!(sem.try_acquire(2, Duration::ZERO).unwrap());
        assert_eq!(sem.available().unwrap(), 1, "{layout:?}: taken twice");
        lose();
        sem.release(1).unwrap();
        assert_eq!(sem.available().unwrap(), 2, "{layout:?}: released twice");
        lose();
        sem.add_permits(2).unwrap();
        assert_eq!(sem.available().unwrap(), 4, "{layout:?}: added twice");
        lose();
        assert_eq!(sem.drain().unwrap(), 4, "{layout:?}: its own drain");
        assert_eq!(
            proxy.cuts(),
            cuts + 5,
            "{layout:?}: every reply was lost once"
        );
        assert_eq!(sem.available().unwrap(), 0);
    }
}

#[test]
fn on_a_cluster_a_release_wakes_a_waiter_through_its_shard_in_both_layouts() {
    let cluster = support::topology::Cluster::start();
    let urls = cluster.seed_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    for layout in LAYOUTS {
        let build = || {
            Client::cluster_builder(&urls)
                .layout(layout)
                .connect_timeout(Duration::from_secs(1))
                .response_timeout(Duration::from_secs(1))
                .build()
                .unwrap()
        };
        let (waiting, releasing) = (build(), build());
        // Names spread over the slots, so over the masters.
        for i in 0..4 {
            let name = unique(&format!("cs-cluster-{i}"));
            let waiter = {
                let sem = waiting.counting_semaphore(&name);
                thread::spawn(move || (sem.try_acquire(2, Duration::from_secs(20)), Instant::now()))
            };
            await_waiting(&waiting, 1);
            thread::sleep(Duration::from_millis(200)); // its attempt after subscribing
            let released = Instant::now();
            releasing.counting_semaphore(&name).release(2).unwrap();
            let (got, at) = join_all(vec![waiter], Duration::from_secs(30), "the waiter").remove(0);
            assert!(got.unwrap(), "{layout:?} {name}");
            let after = at - released;
            assert!(
                after < Duration::from_secs(1),
                "{layout:?}: woken {after:?} after"
            );
            assert!(
                !releasing
                    .counting_semaphore(&name)
                    .try_acquire(1, Duration::ZERO)
                    .unwrap()
            );
            assert!(eventually(Duration::from_secs(5), || waiting
                .stats()
                .waiting_threads
                == 0));
        }
    }
}

#[test]
fn acquire_waits_as_long_as_it_takes_and_returns_holding_the_permits() {
    let server = RedisServer::start();
    for layout in LAYOUTS {
        let (waiting, releasing) = (client(&server, layout), client(&server, layout));
        let name = unique("cs-acquire");
        let waiter = {
            let sem = waiting.counting_semaphore(&name);
            thread::spawn(move || {
                sem.acquire(2).unwrap();
                Instant::now()
            })
        };
        await_waiting(&waiting, 1);
        let released = Instant::now();
        releasing.counting_semaphore(&name).add_permits(3).unwrap();
        let at = join_all(vec![waiter], Duration::from_secs(30), "the waiter").remove(0);
        assert!(at - released < Duration::from_secs(1), "{layout:?}");
        assert_eq!(releasing.counting_semaphore(&name).available().unwrap(), 1);
    }
}
