//! Sentinel: one master, one replica and three sentinels, real processes on free ports
//! (`tests/support/topology.rs`). The client finds the master through the sentinels, follows
//! it through a failover, reports the locks a failover lost, and `wait_for_replicas` keeps
//! the ones it confirmed.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Client, Error};
use support::eventually;
use support::topology::{Sentinel, replicate_lock};

fn client(
    setup: &Sentinel,
    configure: impl FnOnce(redlatch::ClientBuilder) -> redlatch::ClientBuilder,
) -> Client {
    let urls = setup.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let builder = Client::sentinel_builder(&urls, Sentinel::NAME)
        .watchdog_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(1));
    configure(builder).build().unwrap()
}

/// Whether the data node on `port` has lock `name`.
fn has_lock(setup: &Sentinel, port: u16, name: &str) -> bool {
    let mut con = setup.data_connection(port).unwrap();
    redis::cmd("EXISTS")
        .arg(format!("redlatch:{{{name}}}"))
        .query(&mut con)
        .unwrap()
}

#[test]
fn a_failover_under_contention_hangs_nobody_and_the_new_master_serves_the_waiters() {
    let setup = Sentinel::start();
    let old = setup.master_port();
    let clients = [client(&setup, |b| b), client(&setup, |b| b)];
    let guard = clients[0].lock("shared").lock().unwrap();
    assert!(has_lock(&setup, old, "shared"), "not on the master");
    drop(guard);

    let stop = Arc::new(AtomicBool::new(false));
    let after_failover = Arc::new(AtomicBool::new(false));
    let acquired_after = Arc::new(AtomicU64::new(0));
    let acquired = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for i in 0..4 {
        let lock = clients[i % 2].lock("shared");
        let (stop, after, count) = (stop.clone(), after_failover.clone(), acquired_after.clone());
        let total = acquired.clone();
        workers.push(thread::spawn(move || {
            let mut errors = 0;
            for _ in 0..100_000 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let failover_done = after.load(Ordering::SeqCst);
                match lock.try_lock(Duration::from_secs(5), None) {
                    Ok(Some(guard)) => {
                        thread::sleep(Duration::from_millis(5));
                        let _ = guard.unlock();
                        total.fetch_add(1, Ordering::SeqCst);
                        if failover_done {
                            count.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    Ok(None) => {}
                    Err(_) => {
                        errors += 1;
                        thread::sleep(Duration::from_millis(50));
                    }
                }
            }
            errors
        }));
    }
    // The failover lands on a fleet that is already contending.
    assert!(
        eventually(Duration::from_secs(10), || acquired.load(Ordering::SeqCst)
            >= 20),
        "the workers did not get going"
    );
    let new = setup.failover();
    assert_ne!(new, old);
    // Until Sentinel demotes it, the old master still takes writes; the clients ask the
    // sentinels every second and move over.
    assert!(
        eventually(Duration::from_secs(5), || {
            let _held = clients[1].lock("after").lock().unwrap();
            has_lock(&setup, new, "after")
        }),
        "the client did not follow the master"
    );
    after_failover.store(true, Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(20), || acquired_after
            .load(Ordering::SeqCst)
            >= 20),
        "the waiters did not get the lock on the new master"
    );
    stop.store(true, Ordering::SeqCst);
    for errors in support::join_all(workers, Duration::from_secs(20), "a worker") {
        eprintln!("worker saw {errors} errors during the failover");
    }
}

#[test]
fn a_lock_the_failover_lost_is_reported_and_wait_for_replicas_keeps_confirmed_ones() {
    let mut setup = Sentinel::start();
    let master = setup.master_port();
    let replica = setup.servers()[1].port;
    // Leases that outlast the failover (about 3 s after the crash), so that only the lock
    // the new master never received is lost.
    let lasting = |b: redlatch::ClientBuilder| b.watchdog_timeout(Duration::from_secs(10));
    let plain = client(&setup, lasting);
    let waiting = client(&setup, |b| {
        lasting(b).wait_for_replicas(1, Duration::from_millis(300))
    });

    // Replicated before the failover, and confirmed so.
    let kept = waiting.lock("kept").lock().unwrap();
    // A lock whose fencing counter the replica has, but not its last increment (below).
    plain.lock("unreplicated").lock().unwrap().unlock().unwrap();
    let fence = |port: u16| -> Option<u64> {
        let mut con = support::topology::connect(port, None).unwrap();
        redis::cmd("GET")
            .arg("redlatch:{unreplicated}:fence")
            .query(&mut con)
            .unwrap()
    };
    assert!(eventually(Duration::from_secs(5), || fence(replica)
        .is_some()
        && fence(replica) == fence(master)));

    // The replica loses its link to the master and cannot make a new one: it now presents
    // a password the master refuses. (A SIGSTOP is not enough: the kernel keeps receiving the
    // replication stream for the stopped process.)
    let mut replica_con = setup.data_connection(replica).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "masterauth", "not-the-password"])
        .query(&mut replica_con)
        .unwrap();
    let _: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "master"])
        .query(&mut replica_con)
        .unwrap();
    let mut master_con = setup.data_connection(master).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut master_con)
                .unwrap();
            info.contains("connected_slaves:0")
        }),
        "the replica stayed connected"
    );
    // What is written now exists on the master only.
    let unreplicated = plain.lock("unreplicated").lock().unwrap();
    let lost_token = unreplicated.fencing_token();
    let refused = waiting.lock("refused").lock();
    match refused {
        Err(Error::NotReplicated {
            acknowledged: 0,
            wanted: 1,
            ..
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(
        !has_lock(&setup, master, "refused"),
        "a refused lock stayed held"
    );
    assert!(has_lock(&setup, master, "unreplicated"));
    // ... and the master crashes.
    setup.server_mut(master).kill();

    let promoted = eventually(Duration::from_secs(30), || {
        setup
            .master_addr_from(0)
            .is_ok_and(|(_, port)| port == replica)
    });
    assert!(promoted, "the sentinels did not promote the replica");
    assert!(
        eventually(Duration::from_secs(15), || unreplicated.is_lost()),
        "the holder of a lock the failover lost was not told"
    );
    assert!(
        has_lock(&setup, replica, "kept"),
        "a confirmed lock was lost"
    );
    assert!(
        !kept.is_lost(),
        "a lock the new master has was reported lost"
    );
    assert!(matches!(unreplicated.unlock(), Err(Error::LockLost { .. })));
    kept.unlock().unwrap();
    // Life goes on on the new master.
    let again = plain.lock("unreplicated").lock().unwrap();
    assert!(has_lock(&setup, replica, "unreplicated"));
    // The new master's counter was behind; the token is not handed out twice.
    assert!(fence(replica).is_some());
    assert!(
        again.fencing_token() > lost_token,
        "token {} again after the failover lost {lost_token}",
        again.fencing_token()
    );
    again.unlock().unwrap();
    eprintln!(
        "failover after a crash: without wait_for_replicas 1 of 1 unreplicated acquisitions \
         returned and was lost; with it, 1 was refused and the confirmed one survived"
    );
}

#[test]
fn bad_sentinel_settings_are_refused_and_unreachable_sentinels_fail_fast() {
    assert!(matches!(
        Client::sentinel_builder(&[], "x").build(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Client::sentinel_builder(&["redis://127.0.0.1:1"], "").build(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Client::sentinel_builder(&["not a url"], "x").build(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Client::builder("redis://127.0.0.1:1")
            .master_credentials(None, "pw")
            .build(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Client::builder("redis://127.0.0.1:1")
            .wait_for_replicas(0, Duration::from_millis(10))
            .build(),
        Err(Error::InvalidArgument(_))
    ));

    // Nobody listening, and a sentinel that does not know the name: a clear error, at once.
    let setup = Sentinel::start();
    let port = support::free_port();
    let started = Instant::now();
    let urls = [
        format!("redis://127.0.0.1:{port}"),
        setup.sentinel_urls()[0].clone(),
    ];
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let err = Client::sentinel_builder(&urls, "no-such-master")
        .build()
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    let text = err.to_string();
    println!("{text}");
    assert!(
        text.contains("no sentinel named a reachable master") && text.contains("no-such-master"),
        "{text}"
    );
    // The kind once, not again for each sentinel's failure.
    assert_eq!(
        text.matches("MasterNameNotFoundBySentinel").count(),
        1,
        "{text}"
    );

    // A stopped sentinel costs one response timeout, then the next one answers.
    support::signal(setup.sentinel_pid(0), "-STOP");
    let started = Instant::now();
    let urls = setup.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = Client::sentinel_builder(&urls, Sentinel::NAME)
        .response_timeout(Duration::from_millis(500))
        .build();
    support::signal(setup.sentinel_pid(0), "-CONT");
    let client = client.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    client.lock("works").lock().unwrap().unlock().unwrap();
}

#[test]
fn sentinels_and_master_with_their_own_passwords() {
    let setup = Sentinel::start_with(support::topology::SentinelAuth {
        data_password: Some("data-secret".into()),
        sentinel_password: Some("sentinel-secret".into()),
    });
    let urls = setup.sentinel_urls(); // carry the sentinels' password
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = Client::sentinel_builder(&urls, Sentinel::NAME)
        .master_credentials(None, "data-secret")
        .build()
        .unwrap();
    let guard = client.lock("guarded").lock().unwrap();
    assert!(has_lock(&setup, setup.master_port(), "guarded"));
    guard.unlock().unwrap();

    // The wrong master password: said so, at once.
    let err = Client::sentinel_builder(&urls, Sentinel::NAME)
        .master_credentials(None, "wrong")
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("the master it names") && text.contains("authentication failed"),
        "{text}"
    );
    assert!(
        text.contains(&format!("127.0.0.1:{}", setup.master_port())),
        "names the master: {text}"
    );

    // A sentinel given where a server is expected: said so at build().
    let port = setup.sentinel_ports()[0];
    let url = format!("redis://:sentinel-secret@127.0.0.1:{port}/");
    match Client::open(&url) {
        Err(Error::InvalidArgument(text)) => assert!(
            text.contains(&format!("127.0.0.1:{port}"))
                && text.contains("Sentinel")
                && text.contains("sentinel_builder"),
            "{text}"
        ),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn unresponsive_sentinels_do_not_starve_renewal_on_a_healthy_master() {
    // The master is fine; only the sentinels stop answering. Renewal must go on: asking
    // the sentinels (a response timeout each) must not delay it past the lease.
    let setup = Sentinel::start();
    let client = client(&setup, |b| b);
    let guard = client.lock("renewed").lock().unwrap();
    for i in 0..3 {
        support::signal(setup.sentinel_pid(i), "-STOP");
    }
    thread::sleep(Duration::from_secs(6)); // three leases of 2 s
    let lost = guard.is_lost();
    for i in 0..3 {
        support::signal(setup.sentinel_pid(i), "-CONT");
    }
    assert!(
        !lost,
        "a healthy master's lock was lost while the sentinels were stopped"
    );
    guard.unlock().unwrap();
}

#[test]
fn a_refused_wait_gives_the_lock_back() {
    // A user whose WAIT is taken away after the client was built (build() refuses one
    // without it): the acquisition itself succeeds, its WAIT does not.
    let (server, _replica) = support::topology::master_and_replica();
    let mut admin = server.admin();
    let url = server.acl_user("nowait", &["~*", "&*", "+@all"]);
    let client = Client::builder(&url)
        .wait_for_replicas(1, Duration::from_millis(100))
        .build()
        .unwrap();
    server.acl_user("nowait", &["-wait"]);
    match client.lock("refused-wait").lock() {
        Err(Error::NotReplicated {
            acknowledged: 0, ..
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    let held: bool = redis::cmd("EXISTS")
        .arg("redlatch:{refused-wait}")
        .query(&mut admin)
        .unwrap();
    assert!(!held, "the lock stayed held without a guard");
}

/// The master is SIGSTOPped while a thread waits: it keeps its connections open and says
/// nothing, so no error tells the subscriber, and Sentinel promotes the replica (with the
/// lock, replicated before). The release on the new master must wake the waiter at once;
/// a subscriber left listening on the stopped master would leave it asleep until its
/// deadline, since the lock's fixed lease (60 s) outlasts it.
///
/// The subscriber's heartbeat (a PING after 5 s of quiet, answered within the response
/// timeout) is what finds the stopped master; then it asks the sentinels again.
#[test]
fn a_waiter_follows_the_master_when_the_old_one_is_stopped() {
    let setup = Sentinel::start();
    let old = setup.master_port();
    let holder = client(&setup, |b| b);
    let waiter = client(&setup, |b| b);
    let guard = holder
        .lock("stopped")
        .try_lock(Duration::ZERO, Some(Duration::from_secs(60)))
        .unwrap()
        .unwrap();
    let subscribed = |port: u16| {
        let reply: (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("redlatch:{stopped}:unlocked")
            .query(&mut setup.data_connection(port).ok()?)
            .ok()?;
        (reply.1 >= 1).then_some(())
    };
    let lock = waiter.lock("stopped");
    let waiting = support::wait_through_errors(lock, Duration::from_secs(40));
    assert!(
        eventually(Duration::from_secs(5), || subscribed(old).is_some()),
        "the waiter subscribed"
    );
    // The lock and the waiter's place must be on the replica before its master stops.
    let replica = setup
        .servers()
        .iter()
        .map(|s| s.port)
        .find(|&port| port != old)
        .unwrap();
    replicate_lock(
        &mut setup.data_connection(old).unwrap(),
        &mut setup.data_connection(replica).unwrap(),
        "stopped",
        guard.fencing_token(),
    );

    let t = Instant::now();
    let pid = setup
        .servers()
        .iter()
        .find(|s| s.port == old)
        .unwrap()
        .pid();
    support::signal(pid, "-STOP"); // SIGKILLed with the setup at the end
    let new = wait_until_master_moves(&setup, old);
    let failed_over = t.elapsed();
    assert!(
        eventually(Duration::from_secs(30), || subscribed(new).is_some()),
        "the subscriber follows the master"
    );
    let followed = t.elapsed();
    // The holder's pooled connections to the stopped master time out once each.
    let mut stale = 0;
    while let Err(e) = holder.lock("settled").try_lock(Duration::ZERO, None) {
        stale += 1;
        assert!(stale < 10, "commands never reach the new master: {e}");
    }
    let released = Instant::now();
    guard.unlock().unwrap();
    let after = support::woken_soon_after(released, waiting);
    eprintln!(
        "sentinel, master stopped: failed over after {failed_over:?}, subscriber followed \
         after {followed:?}, waiter woken {after:?} after the release"
    );
}

/// Waits (bounded) until the sentinels name a master other than `old`, and returns it.
fn wait_until_master_moves(setup: &Sentinel, old: u16) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok((_, port)) = setup.master_addr_from(0)
            && port != old
        {
            return port;
        }
        assert!(Instant::now() < deadline, "no failover within 30 s");
        thread::sleep(Duration::from_millis(100));
    }
}

/// Every kind of the family through the sentinels: on the master they name, all but the spin
/// lock waking their waiters by message.
#[test]
fn every_kind_of_the_family_works_on_the_master_the_sentinels_name() {
    let setup = Sentinel::start();
    let holder = client(&setup, |b| b);
    let waiters = client(&setup, |b| b);
    let master = setup.master_port();
    let exists = |key: String| -> bool {
        let mut con = setup.data_connection(master).unwrap();
        redis::cmd("EXISTS").arg(key).query(&mut con).unwrap()
    };

    let write = holder.read_write_lock("family-rw").write().unwrap();
    assert!(exists("redlatch:{family-rw}:rwlock".into()));
    let lock = waiters.read_write_lock("family-rw");
    let reader = thread::spawn(move || {
        let read = lock.try_read(Duration::from_secs(8), None).unwrap();
        (Instant::now(), read.map(|r| r.fencing_token()))
    });
    thread::sleep(Duration::from_millis(300));
    let token = write.fencing_token();
    let released = Instant::now();
    write.unlock().unwrap();
    let (woken, read) = reader.join().unwrap();
    assert_eq!(read, Some(token));
    assert!(
        woken - released < Duration::from_secs(1),
        "the reader woke late"
    );

    let sem = holder.semaphore("family-sem");
    sem.set_permits(2).unwrap();
    let held = sem.acquire(2).unwrap();
    assert!(exists("redlatch:{family-sem}:semaphore".into()));
    let other = waiters.semaphore("family-sem");
    let waiting = thread::spawn(move || {
        let permits = other.try_acquire(1, Duration::from_secs(8), None).unwrap();
        (Instant::now(), permits.map(|p| p.count()))
    });
    thread::sleep(Duration::from_millis(300));
    let released = Instant::now();
    held.release().unwrap();
    let (woken, got) = waiting.join().unwrap();
    assert_eq!(got, Some(1));
    assert!(
        woken - released < Duration::from_secs(1),
        "the waiter woke late"
    );
    assert_eq!(sem.available().unwrap(), 2);

    // A spin lock: the lock on the master, taken after a holder's release by backoff.
    let held = holder.lock("family-spin").lock().unwrap();
    assert!(has_lock(&setup, master, "family-spin"));
    let spin = waiters.spin_lock("family-spin");
    let spinning = thread::spawn(move || {
        spin.try_lock(Duration::from_secs(8), None)
            .unwrap()
            .is_some()
    });
    thread::sleep(Duration::from_millis(300));
    drop(held);
    assert!(spinning.join().unwrap());

    // A count-down latch, its waiter woken by the message of the count-down to zero.
    let latch = holder.count_down_latch("family-latch");
    assert!(latch.try_set_count(1).unwrap());
    let watching = waiters.count_down_latch("family-latch");
    let watcher = thread::spawn(move || {
        (
            watching.wait(Duration::from_secs(8)).unwrap(),
            Instant::now(),
        )
    });
    thread::sleep(Duration::from_millis(300));
    let opened = Instant::now();
    assert_eq!(latch.count_down().unwrap(), 0);
    let (reached, at) = watcher.join().unwrap();
    assert!(reached && at - opened < Duration::from_secs(1));
}
