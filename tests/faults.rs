//! Faults that are real: a holder process killed, pub/sub connections killed, the server
//! restarted, replies lost between send and receive, a least-privilege ACL user.

mod support;

use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Client, Error};
use support::{
    Proxy, RedisServer, await_waiting, eventually, release_to_waiter, spawn_waiter, unique,
};

/// Entry point of the child process in `a_killed_holder_frees_the_lock_after_the_watchdog_timeout`;
/// does nothing unless started by it.
#[test]
#[ignore = "run as a child process by another test"]
fn child_holds_a_lock_until_killed() {
    let Some([url, name, watchdog]) = support::child_env([
        "REDLATCH_CHILD_URL",
        "REDLATCH_CHILD_LOCK",
        "REDLATCH_CHILD_WATCHDOG_MS",
    ]) else {
        return;
    };
    let client = Client::builder(&url)
        .watchdog_timeout(Duration::from_millis(watchdog.parse().unwrap()))
        .build()
        .unwrap();
    let guard = client.lock(&name).lock().unwrap();
    println!("LOCKED {}", guard.fencing_token());
    thread::sleep(Duration::from_secs(60)); // killed long before
}

/// Entry point of the child process in `a_waiter_killed_in_the_queue_delays_the_next_by_its_lease_only`;
/// does nothing unless started by it.
#[test]
#[ignore = "run as a child process by another test"]
fn child_waits_for_a_lock_until_killed() {
    let Some([url, name]) = support::child_env(["REDLATCH_CHILD_URL", "REDLATCH_CHILD_LOCK"])
    else {
        return;
    };
    let lease = std::env::var("REDLATCH_CHILD_LEASE_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(500);
    let client = Client::open(&url).unwrap();
    println!("WAITING");
    // Queues with a short lease, and is killed while it waits.
    let _ = client
        .lock(&name)
        .try_lock(Duration::from_secs(60), Some(Duration::from_millis(lease)));
}

fn spawn_holder(server: &RedisServer, name: &str, watchdog: Duration) -> Child {
    support::spawn_child_test(
        "child_holds_a_lock_until_killed",
        &[
            ("REDLATCH_CHILD_URL", server.url()),
            ("REDLATCH_CHILD_LOCK", name.to_string()),
            (
                "REDLATCH_CHILD_WATCHDOG_MS",
                watchdog.as_millis().to_string(),
            ),
        ],
    )
}

#[test]
fn a_killed_holder_frees_the_lock_after_the_watchdog_timeout() {
    let server = RedisServer::start();
    let name = unique("killed");
    let watchdog = Duration::from_millis(1500);
    let mut child = spawn_holder(&server, &name, watchdog);
    let token: u64 = support::read_reported(&mut child, "LOCKED", Duration::from_secs(30))
        .parse()
        .unwrap();

    let client = Client::open(&server.url()).unwrap();
    let lock = client.lock(&name);
    // The child's watchdog keeps it held well past one lease.
    thread::sleep(watchdog * 2);
    assert!(
        lock.try_lock(Duration::ZERO, None).unwrap().is_none(),
        "lock expired under a live holder"
    );

    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    let left = lock
        .remaining_ttl()
        .unwrap()
        .expect("still locked right after the kill");
    let guard = lock
        .try_lock(Duration::from_secs(20), None)
        .unwrap()
        .expect("freed by expiry");
    let freed_after = killed.elapsed();
    assert!(guard.fencing_token() > token);
    assert!(
        freed_after + Duration::from_millis(50) >= left,
        "freed after {freed_after:?}, lease had {left:?} left"
    );
    assert!(
        freed_after < watchdog + Duration::from_secs(1),
        "took {freed_after:?} to notice expiry"
    );
}

/// The ids of the connections that are subscribed to something (CLIENT LIST, `sub=` > 0).
fn subscribed_connections(admin: &mut redis::Connection) -> Vec<String> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(admin).unwrap();
    list.lines()
        .filter(|line| {
            line.split(' ')
                .any(|field| field.starts_with("sub=") && field != "sub=0")
        })
        .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
        .map(str::to_string)
        .collect()
}

/// Whether a connection with this id is still open.
fn connection_open(admin: &mut redis::Connection, id: &str) -> bool {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(admin).unwrap();
    let field = format!("id={id}");
    list.lines()
        .any(|line| line.split(' ').next() == Some(field.as_str()))
}

/// A channel the subscriber cannot read back (longer than its 1 MiB frame limit) used to fail
/// its connection at every subscription, and every waiter of the client, on every lock,
/// slept to its lease. Such a name is refused now; this one comes through the benchmarks'
/// hook, which subscribes any name.
#[test]
fn a_channel_too_long_to_read_costs_the_other_locks_of_its_client_nothing() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::open(&server.url()).unwrap();
    let holder = Client::open(&server.url()).unwrap();
    let long_waiter = {
        let client = client.clone();
        let long = "h".repeat((1 << 20) + 1024);
        thread::spawn(move || redlatch::bench_support::subscribe_latency(&client, &long))
    };
    thread::sleep(Duration::from_millis(300)); // its subscription would be out by now

    let name = unique("beside-a-long-channel");
    let held = holder.lock(&name).lock().unwrap(); // 30 s lease
    let waiting = support::wait_through_errors(client.lock(&name), Duration::from_secs(25));
    await_waiting(&mut admin, &name);
    let released = Instant::now();
    held.unlock().unwrap();
    support::woken_soon_after(released, waiting);

    let confirmed = long_waiter.join().unwrap();
    assert!(
        confirmed.is_none(),
        "a channel it cannot read was confirmed"
    );
    assert!(support::pubsub_channels(&mut admin, "redlatch:{hhh*").is_empty());
}

/// Anyone allowed to PUBLISH on a lock's channel can send a message bigger than the
/// subscriber keeps. It is read past: the grant right behind it wakes the waiter, and the
/// connection, with every other lock's subscription on it, stays up.
#[test]
fn a_huge_message_on_a_locks_channel_is_read_past_without_a_reconnect() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::open(&server.url()).unwrap();
    let holder = Client::open(&server.url()).unwrap();
    let name = unique("huge-message");
    let held = holder.lock(&name).lock().unwrap(); // 30 s lease
    let waiting = support::wait_through_errors(client.lock(&name), Duration::from_secs(25));
    await_waiting(&mut admin, &name);
    let subscribed = subscribed_connections(&mut admin);
    assert_eq!(subscribed.len(), 1, "{subscribed:?}");

    let receivers: i64 = redis::cmd("PUBLISH")
        .arg(support::channel_of(&name))
        .arg(vec![b'x'; 3 << 20])
        .query(&mut admin)
        .unwrap();
    assert_eq!(receivers, 1);
    let released = Instant::now();
    held.unlock().unwrap();
    support::woken_soon_after(released, waiting);
    assert!(
        connection_open(&mut admin, &subscribed[0]),
        "the subscriber's connection was dropped"
    );
}

#[test]
fn waiters_still_wake_after_their_pubsub_connection_is_killed() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let holder_client = Client::open(&server.url()).unwrap();
    let waiter_client = Client::open(&server.url()).unwrap();
    let name = unique("pubsub-kill");
    let holder = holder_client.lock(&name).lock().unwrap(); // 30 s lease
    let lock = waiter_client.lock(&name);
    let waiter = spawn_waiter(lock, Duration::from_secs(25));
    await_waiting(&mut admin, &name);

    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut admin)
        .unwrap();
    assert!(killed >= 1);
    // Released while the subscriber is still reconnecting: that message is lost, and the
    // waiter must not sleep out the holder's 30 s lease.
    let released = Instant::now();
    holder.unlock().unwrap();
    assert!(waiter.join().unwrap());
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "took {:?}",
        released.elapsed()
    );

    // And the resubscribed connection delivers later releases.
    let holder = holder_client.lock(&name).lock().unwrap();
    let took = release_to_waiter(&mut admin, waiter_client.lock(&name), holder);
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn a_server_restart_reports_the_lock_lost_and_clients_recover() {
    let mut server = RedisServer::start();
    let client = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_millis(900))
        .build()
        .unwrap();
    let name = unique("restart");
    let lock = client.lock(&name);
    let guard = lock.lock().unwrap();
    let token = guard.fencing_token();

    server.restart();
    assert!(
        eventually(Duration::from_secs(5), || guard.is_lost()),
        "restart went unnoticed"
    );
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));

    // The same client works again without any help: pool and subscriber reconnect.
    let again = lock
        .try_lock(Duration::from_secs(5), None)
        .unwrap()
        .expect("lock after restart");
    // The fence counter was lost with the data (no persistence): say so, don't hide it.
    assert!(again.fencing_token() >= 1);
    let _ = token;
    let other = Client::open(&server.url()).unwrap();
    let other_lock = other.lock(&name);
    let waiter = spawn_waiter(other_lock, Duration::from_secs(10));
    let mut admin = server.admin();
    await_waiting(&mut admin, &name);
    again.unlock().unwrap();
    assert!(waiter.join().unwrap());
}

#[test]
fn an_unreachable_server_makes_the_guard_lost_once_its_lease_ran_out() {
    let mut server = RedisServer::start();
    let watchdog = Duration::from_millis(900);
    let client = Client::builder(&server.url())
        .watchdog_timeout(watchdog)
        .build()
        .unwrap();
    let lock = client.lock(&unique("unreachable"));
    let guard = lock.lock().unwrap();
    thread::sleep(watchdog); // renewed at least twice by now
    assert!(!guard.is_lost());

    server.kill();
    let killed = Instant::now();
    assert!(eventually(Duration::from_secs(5), || guard.is_lost()));
    let noticed = killed.elapsed();
    assert!(
        noticed <= watchdog + Duration::from_millis(300),
        "lost only after {noticed:?}"
    );
    // Renewals run every third of the watchdog timeout, so the last confirmed lease reached
    // at least two thirds of it past the kill: the guard must not give up before that.
    assert!(
        noticed + Duration::from_millis(50) >= watchdog * 2 / 3,
        "lost after {noticed:?}, too early"
    );
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
    assert!(matches!(
        lock.try_lock(Duration::ZERO, None),
        Err(Error::Redis(_))
    ));

    // Back again (empty): the same client recovers.
    server.restart();
    assert!(
        lock.try_lock(Duration::from_secs(5), None)
            .unwrap()
            .is_some()
    );
}

/// A client through `proxy` that gives up on a reply after 300 ms, with its scripts loaded.
fn impatient_client(proxy: &Proxy) -> Client {
    let client = Client::builder(&proxy.url())
        .response_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    warm_up(&client);
    client
}

/// Warms the script cache so a lost reply hits the script itself, not its NOSCRIPT reload.
fn warm_up(client: &Client) {
    let lock = client.lock(&unique("warm"));
    let g = lock.lock_with_lease(Duration::from_secs(5)).unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    g.unlock().unwrap();
}

/// Lets through what `proxy` held back (a release that timed out on its way), and waits (at
/// most 5 s) until the server has run it.
fn deliver_the_held_release(proxy: &Proxy, admin: &mut redis::Connection) {
    let scripts_run = support::command_calls(admin, "evalsha");
    assert!(proxy.deliver_held() > 0);
    assert!(
        eventually(Duration::from_secs(5), || support::command_calls(
            admin, "evalsha"
        ) > scripts_run),
        "the held-back release never ran"
    );
}

#[test]
fn a_release_whose_reply_was_lost_is_retried_without_harm() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let client = Client::open(&proxy.url()).unwrap();
    warm_up(&client);
    let lock = client.lock(&unique("lost-release"));
    let lease = Some(Duration::from_secs(30));

    // An intermediate release: the count must drop by exactly one.
    let outer = lock.try_lock(Duration::ZERO, lease).unwrap().unwrap();
    let inner = lock.try_lock(Duration::ZERO, lease).unwrap().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    proxy.lose_reply_to(b"EVALSHA");
    inner.unlock().unwrap();
    assert_eq!(proxy.cuts(), 1);
    assert_eq!(lock.hold_count().unwrap(), 1);

    // The final release: the retry finds it already done and says so, not "not ours".
    proxy.lose_reply_to(b"EVALSHA");
    outer
        .unlock()
        .expect("a retried release must not report the lock lost");
    assert_eq!(proxy.cuts(), 2);
    assert!(!lock.is_locked().unwrap());
}

/// A share's final release leaves no latch outside a Cluster, as a lock's: its retry must still
/// answer "released", while a hold deleted under its holder stays lost.
#[test]
fn a_share_release_whose_reply_was_lost_is_retried_without_harm() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let proxy = Proxy::start(server.port);
    let client = Client::open(&proxy.url()).unwrap();
    warm_up(&client);
    let lease = Some(Duration::from_secs(30));

    let semaphore = client.semaphore(&unique("lost-permit-release"));
    semaphore.set_permits(2).unwrap();
    let permits = semaphore
        .try_acquire(1, Duration::ZERO, lease)
        .unwrap()
        .unwrap();
    proxy.lose_reply_to(b"EVALSHA");
    permits
        .release()
        .expect("a retried permit release must not report the permits lost");
    assert_eq!(proxy.cuts(), 1);
    assert_eq!(semaphore.available().unwrap(), 2);

    let rw = client.read_write_lock(&unique("lost-write-release"));
    let write = rw.try_write(Duration::ZERO, lease).unwrap().unwrap();
    proxy.lose_reply_to(b"EVALSHA");
    write
        .unlock()
        .expect("a retried write release must not report the lock lost");
    assert_eq!(proxy.cuts(), 2);
    assert!(rw.try_write(Duration::ZERO, lease).unwrap().is_some());

    let keys_left: Vec<String> = redis::cmd("KEYS")
        .arg("redlatch:*:released:*")
        .query(&mut admin)
        .unwrap();
    assert!(
        keys_left.is_empty(),
        "no latch outside a Cluster: {keys_left:?}"
    );

    // Deleted by hand within its lease: the first and only attempt is no retry.
    let name = unique("permits-deleted-by-hand");
    let semaphore = client.semaphore(&name);
    semaphore.set_permits(1).unwrap();
    let permits = semaphore
        .try_acquire(1, Duration::ZERO, lease)
        .unwrap()
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(format!("redlatch:{{{name}}}:semaphore"))
        .query(&mut admin)
        .unwrap();
    assert!(permits.release().unwrap_err().is_lock_lost());
}

/// In Redisson's layout a release frees the lock for the waiters to race for (no hand-over,
/// no fence): its retry after a lost reply may find a waiter of another client holding it
/// already. That is this release's doing, not a loss.
#[test]
fn a_redisson_release_whose_lock_was_taken_before_its_retry_is_still_a_release() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let proxy = Proxy::start(server.port);
    // One connection, so that the retry opens a new one, which the proxy holds back.
    let client = Client::builder(&proxy.url())
        .layout(redlatch::Layout::Redisson)
        .pool_size(1)
        .build()
        .unwrap();
    warm_up(&client);
    let name = unique("taken-before-the-retry");
    let guard = client
        .lock(&name)
        .try_lock(Duration::ZERO, Some(Duration::from_secs(30)))
        .unwrap()
        .unwrap();
    let other = Client::builder(&server.url())
        .layout(redlatch::Layout::Redisson)
        .build()
        .unwrap();
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let (taken_tx, taken_rx) = crossbeam_channel::bounded(1);
    let (checked_tx, checked_rx) = crossbeam_channel::bounded::<()>(1);
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            let taken = other
                .lock(&name)
                .try_lock(Duration::from_secs(10), None)
                .unwrap()
                .expect("the waiter took the freed lock");
            taken_tx.send(()).unwrap();
            // Held until the release's retry has run.
            // (Bounded: a failed check below leaves it to the lease.)
            if checked_rx.recv_timeout(Duration::from_secs(15)).is_ok() {
                assert!(!taken.is_lost(), "the new holder's hold was touched");
                taken.unlock().unwrap();
            }
        });
        assert!(eventually(Duration::from_secs(5), || {
            let (_, n): (String, i64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query(&mut admin)
                .unwrap();
            n > 0
        }));
        proxy.stall_new_connections();
        proxy.lose_reply_to(b"EVALSHA");
        // The first run frees it and the waiter takes it; only then does the retry, on a new
        // connection, reach Redis.
        s.spawn(|| {
            let _ = taken_rx.recv_timeout(Duration::from_secs(15));
            proxy.pass_new_connections();
            proxy.deliver_held();
        });
        let released = guard.unlock();
        assert_eq!(proxy.cuts(), 1);
        assert!(
            released.is_ok(),
            "a retried release reported the lock lost: {released:?}"
        );
        let held: bool = redis::cmd("EXISTS").arg(&name).query(&mut admin).unwrap();
        assert!(held, "the new holder's lock is still there");
        checked_tx.send(()).unwrap();
        waiter.join().unwrap();
    });
}

#[test]
fn a_release_that_handed_over_and_lost_its_reply_is_still_a_release() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let proxy = Proxy::start(server.port);
    let client = Client::open(&proxy.url()).unwrap();
    warm_up(&client);
    let name = unique("lost-handover");
    let guard = client
        .lock(&name)
        .try_lock(Duration::ZERO, Some(Duration::from_secs(30)))
        .unwrap()
        .unwrap();
    let other = Client::open(&server.url()).unwrap();
    let waiter = spawn_waiter(other.lock(&name), Duration::from_secs(10));
    await_waiting(&mut admin, &name);
    // The first run hands the lock over (the fence moves on); its retry must see that as
    // this release's doing, not as a loss.
    proxy.lose_reply_to(b"EVALSHA");
    guard
        .unlock()
        .expect("a retried release that handed over must not report the lock lost");
    assert_eq!(proxy.cuts(), 1);
    assert!(waiter.join().unwrap());
}

#[test]
fn a_hold_gone_under_its_holder_is_reported_lost_by_the_release_retried_or_not() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let proxy = Proxy::start(server.port);
    let client = Client::open(&proxy.url()).unwrap();
    warm_up(&client);
    let lease = Some(Duration::from_secs(30));

    // Deleted by hand within its lease: the release's first (and only) attempt finds what a
    // release would have left, and must not take it for its own doing.
    let name = unique("deleted-by-hand");
    let guard = client
        .lock(&name)
        .try_lock(Duration::ZERO, lease)
        .unwrap()
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(format!("redlatch:{{{name}}}"))
        .query(&mut admin)
        .unwrap();
    assert!(guard.unlock().unwrap_err().is_lock_lost());

    // Force-unlocked by another client, and the reply to the release lost: the retry finds
    // the force-unlock's mark of this very token.
    let name = unique("forced-then-retried");
    let guard = client
        .lock(&name)
        .try_lock(Duration::ZERO, lease)
        .unwrap()
        .unwrap();
    let other = Client::open(&server.url()).unwrap();
    assert!(other.lock(&name).force_unlock().unwrap());
    proxy.lose_reply_to(b"EVALSHA");
    assert!(guard.unlock().unwrap_err().is_lock_lost());
    assert_eq!(proxy.cuts(), 1);
}

#[test]
fn an_acquisition_whose_reply_was_lost_leaves_no_orphan_hold() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let proxy = Proxy::start(server.port);
    let client = Client::open(&proxy.url()).unwrap();
    warm_up(&client);
    let name = unique("lost-acquire");
    let lock = client.lock(&name);
    let lease = Some(Duration::from_secs(30));

    proxy.lose_reply_to(b"EVALSHA");
    let guard = lock
        .try_lock(Duration::ZERO, lease)
        .unwrap()
        .expect("the retry returns the acquisition");
    assert_eq!(proxy.cuts(), 1);
    assert_eq!(lock.hold_count().unwrap(), 1);
    let fence: u64 = redis::cmd("GET")
        .arg(format!("redlatch:{{{name}}}:fence"))
        .query(&mut admin)
        .unwrap();
    assert_eq!(
        fence,
        guard.fencing_token(),
        "the retry must not take a second token"
    );

    proxy.lose_reply_to(b"EVALSHA");
    let inner = lock.try_lock(Duration::ZERO, lease).unwrap().unwrap();
    assert_eq!(proxy.cuts(), 2);
    assert_eq!(lock.hold_count().unwrap(), 2);
    drop(inner);
    drop(guard);
    assert!(
        !lock.is_locked().unwrap(),
        "a retried acquisition left a hold behind"
    );
}

/// The holders' counts of a read-write lock or semaphore (`"<count> <token>"` values).
fn share_counts(admin: &mut redis::Connection, key: &str) -> Vec<(u64, u64)> {
    let all: Vec<(String, String)> = redis::cmd("HGETALL").arg(key).query(admin).unwrap();
    all.into_iter()
        .filter(|(field, _)| field != "writer")
        .map(|(_, v)| {
            let (count, token) = v.split_once(' ').unwrap();
            (count.parse().unwrap(), token.parse().unwrap())
        })
        .collect()
}

#[test]
fn the_read_write_lock_and_the_semaphore_are_idempotent_under_lost_replies() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let proxy = Proxy::start(server.port);
    let client = Client::open(&proxy.url()).unwrap();
    let other = Client::open(&server.url()).unwrap();
    let lease = Some(Duration::from_secs(30));
    let name = unique("lost-rw");
    let key = format!("redlatch:{{{name}}}:rwlock");
    let lock = client.read_write_lock(&name);
    drop(lock.try_write(Duration::ZERO, lease).unwrap()); // loads the scripts

    // A first write whose reply was lost: one hold, with the latest token.
    proxy.lose_reply_to(b"EVALSHA");
    let outer = lock
        .try_write(Duration::ZERO, lease)
        .unwrap()
        .expect("the retry");
    assert_eq!(proxy.cuts(), 1);
    let fence: u64 = redis::cmd("GET")
        .arg(format!("{key}:fence"))
        .query(&mut admin)
        .unwrap();
    assert_eq!(share_counts(&mut admin, &key), vec![(1, fence)]);
    assert_eq!(outer.fencing_token(), fence);
    // A re-entry and its release, each reply lost: the count moves by exactly one.
    proxy.lose_reply_to(b"EVALSHA");
    let inner = lock.try_write(Duration::ZERO, lease).unwrap().unwrap();
    assert_eq!(share_counts(&mut admin, &key), vec![(2, fence)]);
    proxy.lose_reply_to(b"EVALSHA");
    inner.unlock().unwrap();
    assert_eq!(share_counts(&mut admin, &key), vec![(1, fence)]);
    // The final release: the retry finds it done and says so, not "lost".
    proxy.lose_reply_to(b"EVALSHA");
    outer
        .unlock()
        .expect("a retried release must not report the lock lost");
    assert_eq!(proxy.cuts(), 4);
    assert!(
        other
            .read_write_lock(&name)
            .try_write(Duration::ZERO, None)
            .unwrap()
            .is_some(),
        "a retried release left the write held"
    );

    let name = unique("lost-sem");
    let sem = client.semaphore(&name);
    sem.set_permits(2).unwrap();
    drop(sem.try_acquire(1, Duration::ZERO, lease).unwrap());
    proxy.lose_reply_to(b"EVALSHA");
    let permits = sem
        .try_acquire(1, Duration::ZERO, lease)
        .unwrap()
        .expect("the retry");
    assert_eq!(
        sem.available().unwrap(),
        1,
        "a retried acquisition took twice"
    );
    proxy.lose_reply_to(b"EVALSHA");
    permits
        .release()
        .expect("a retried release must not report the permits lost");
    assert_eq!(proxy.cuts(), 6);
    assert_eq!(sem.available().unwrap(), 2);
}

#[test]
fn a_command_paused_then_killed_is_retried_safely() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::builder(&server.url())
        .response_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    warm_up(&client);
    let lock = client.lock(&unique("pause-kill"));
    let guard = lock.lock_with_lease(Duration::from_secs(30)).unwrap();

    // The release reaches a paused server; its connection is killed before it runs.
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("WRITE")
        .query(&mut admin)
        .unwrap();
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(200));
        let killed: i64 = redis::cmd("CLIENT")
            .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
            .query(&mut admin)
            .unwrap();
        let _: () = redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .query(&mut admin)
            .unwrap();
        killed
    });
    guard.unlock().expect("the release must succeed on retry");
    assert!(killer.join().unwrap() >= 1);
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn a_least_privilege_acl_user_can_do_everything() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "locker",
            "on",
            ">s3cret",
            "resetkeys",
            "~redlatch:*",
            "resetchannels",
            "&redlatch:*",
            "+@all",
            "-@dangerous",
            "-client",
        ])
        .query(&mut admin)
        .unwrap();
    let url = format!("redis://locker:s3cret@127.0.0.1:{}/", server.port);
    let a = Client::builder(&url)
        .watchdog_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let b = Client::open(&url).unwrap();
    let name = unique("acl");
    let lock = a.lock(&name);
    let guard = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    assert!(lock.remaining_ttl().unwrap().is_some());
    thread::sleep(Duration::from_millis(700)); // renewal ran
    assert!(!guard.is_lost());
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut admin).unwrap();
    drop(inner);
    let waiter_lock = b.lock(&name);
    let waiter = spawn_waiter(waiter_lock, Duration::from_secs(10));
    await_waiting(&mut admin, &name);
    // A watch sees the hand-over, although the ACL refuses it the pattern of every grant
    // channel: it follows the queued clients' grant channels instead.
    let watcher = {
        let (a, name) = (a.clone(), name.clone());
        thread::spawn(move || {
            let mut seen = Vec::new();
            a.watch(
                redlatch::ObjectKind::Lock,
                &name,
                Some(Duration::from_secs(10)),
                |_, payload| {
                    seen.push(payload.to_string());
                    !payload.starts_with("grant ")
                },
            )
            .map(|()| seen)
        })
    };
    thread::sleep(Duration::from_millis(300)); // the watch subscribed
    guard.unlock().unwrap();
    assert!(waiter.join().unwrap());
    let seen = watcher.join().unwrap().unwrap();
    assert!(
        seen.iter().any(|m| m.starts_with("grant ")),
        "the watch saw {seen:?}"
    );
    let _guard = lock.lock_with_lease(Duration::from_secs(5)).unwrap();
    assert!(b.lock(&name).force_unlock().unwrap());

    // The read-write lock, the semaphore and the latch: renewed, waited for, granted.
    let rw = a.read_write_lock(&name);
    let write = rw.write().unwrap();
    let read = rw.read().unwrap();
    thread::sleep(Duration::from_millis(700)); // renewal ran
    assert!(!write.is_lost() && !read.is_lost());
    let waiting_rw = b.read_write_lock(&name);
    let waiter = thread::spawn(move || {
        waiting_rw
            .try_write(Duration::from_secs(10), None)
            .map(|g| g.is_some())
    });
    thread::sleep(Duration::from_millis(300));
    drop(write);
    drop(read);
    assert!(waiter.join().unwrap().unwrap());
    let sem = a.semaphore(&name);
    sem.set_permits(1).unwrap();
    let permits = sem.acquire(1).unwrap();
    thread::sleep(Duration::from_millis(700)); // renewal ran
    assert!(!permits.is_lost());
    let waiting_sem = b.semaphore(&name);
    let waiter = thread::spawn(move || {
        waiting_sem
            .try_acquire(1, Duration::from_secs(10), None)
            .map(|p| p.is_some())
    });
    thread::sleep(Duration::from_millis(300));
    drop(permits);
    assert!(waiter.join().unwrap().unwrap());
    assert_eq!(sem.available().unwrap(), 1);
    let latch = a.count_down_latch(&name);
    assert!(latch.try_set_count(1).unwrap());
    let watching = b.count_down_latch(&name);
    let watcher = thread::spawn(move || watching.wait(Duration::from_secs(10)));
    thread::sleep(Duration::from_millis(300));
    assert_eq!(latch.count_down().unwrap(), 0);
    assert!(watcher.join().unwrap().unwrap());

    // The user really is restricted: a key outside the prefix is refused.
    let mut limited = server.admin_with_url(&url);
    let denied = redis::cmd("SET")
        .arg("elsewhere")
        .arg(1)
        .query::<()>(&mut limited);
    assert!(denied.is_err());
}

#[test]
fn a_force_unlock_whose_reply_was_lost_answers_the_same_on_retry() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let holder = Client::open(&server.url()).unwrap();
    let admin_client = Client::open(&proxy.url()).unwrap();
    warm_up(&admin_client);
    let name = unique("lost-force");
    let _held = holder.lock(&name).lock().unwrap();
    proxy.lose_reply_to(b"EVALSHA");
    assert!(
        admin_client.lock(&name).force_unlock().unwrap(),
        "the retry must report what the first run did"
    );
    assert_eq!(proxy.cuts(), 1);
    assert!(!holder.lock(&name).is_locked().unwrap());
}

#[test]
fn a_release_that_never_reached_redis_does_not_hand_its_token_out_again() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let client = impatient_client(&proxy);
    let lock = client.lock(&unique("token-reuse"));
    let first = lock.lock_with_lease(Duration::from_secs(30)).unwrap();
    let first_token = first.fencing_token();

    proxy.blackhole(true);
    assert!(
        matches!(first.unlock(), Err(Error::Redis(_))),
        "a release nobody heard fails"
    );
    proxy.blackhole(false);

    // The hold is still in Redis; this thread takes it over with a new token. The lease is
    // never shortened (the call that takes over may arrive late, under a newer hold); the
    // guard counts only on the lease it asked for.
    let again = lock.lock_with_lease(Duration::from_secs(1)).unwrap();
    assert!(
        again.fencing_token() > first_token,
        "token {first_token} was handed out twice"
    );
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(lock.remaining_ttl().unwrap().unwrap() > Duration::from_secs(1));
    again.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

/// The README's rule for a release that fails: the error goes to the caller (or the log), the
/// hold has left the watchdog, and the lock frees itself with the lease it had; nobody keeps
/// renewing a lock its holder gave up.
#[test]
fn a_failed_release_leaves_the_lock_to_its_lease_and_is_not_renewed() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let proxy = Proxy::start(server.port);
    // Renewed every second: a blackout of two 300 ms timeouts leaves the lease well alive.
    let watchdog = Duration::from_secs(3);
    let client = Client::builder(&proxy.url())
        .watchdog_timeout(watchdog)
        .response_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    warm_up(&client);
    let names = [unique("failed-unlock"), unique("failed-drop")];
    let unlocked = client.lock(&names[0]).lock().unwrap();
    let dropped = client.lock(&names[1]).lock().unwrap();

    proxy.blackhole(true);
    assert!(matches!(unlocked.unlock(), Err(Error::Redis(_))));
    drop(dropped); // logged, not raised
    proxy.blackhole(false);
    let failed = Instant::now();

    let mut locked = |name: &String| -> bool {
        redis::cmd("EXISTS")
            .arg(format!("redlatch:{{{name}}}"))
            .query::<i64>(&mut admin)
            .unwrap()
            == 1
    };
    assert!(names.iter().all(&mut locked), "still held by their leases");
    // The proxy passes again, so a renewal would reach Redis: only its absence lets the
    // locks go.
    assert!(eventually(watchdog + Duration::from_secs(2), || {
        !names.iter().any(&mut locked)
    }));
    assert!(
        failed.elapsed() <= watchdog + Duration::from_millis(500),
        "freed {:?} after the failed release",
        failed.elapsed()
    );
}

#[test]
fn a_stopped_server_costs_one_response_timeout_not_a_hang() {
    let server = RedisServer::start();
    let client = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let lock = client.lock(&unique("stopped"));
    let guard = lock.lock_with_lease(Duration::from_secs(30)).unwrap();
    support::signal(server.pid(), "-STOP");
    let start = Instant::now();
    assert!(matches!(
        lock.try_lock(Duration::ZERO, None),
        Err(Error::Redis(_))
    ));
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "took {:?}",
        start.elapsed()
    );
    let start = Instant::now();
    assert!(guard.unlock().is_err());
    drop(lock);
    drop(client);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "release and drop took {:?}",
        start.elapsed()
    );
    support::signal(server.pid(), "-CONT");
}

#[test]
fn a_resp3_client_is_woken_like_a_resp2_one() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let holder = Client::open(&server.url()).unwrap();
    let waiter_client = Client::open(&format!("{}?protocol=resp3", server.url())).unwrap();
    let name = unique("resp3");
    let held = holder.lock(&name).lock().unwrap(); // 30 s lease
    let took = release_to_waiter(&mut admin, waiter_client.lock(&name), held);
    assert!(took < Duration::from_secs(2), "woken after {took:?}");
}

#[test]
fn a_release_that_reaches_redis_late_leaves_a_newer_hold_alone() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let client = impatient_client(&proxy);
    let lock = client.lock(&unique("late-release"));
    let first = lock.lock_with_lease(Duration::from_secs(30)).unwrap();

    // The release times out on its way; the thread moves on and takes the lock again.
    proxy.stall_open_connections();
    assert!(matches!(first.unlock(), Err(Error::Redis(_))));
    let again = lock.lock_with_lease(Duration::from_secs(30)).unwrap();

    // Now the old release arrives. It must not delete the new hold.
    let mut admin = server.admin();
    deliver_the_held_release(&proxy, &mut admin);
    let other = Client::open(&server.url()).unwrap();
    assert!(
        other
            .lock(lock.name())
            .try_lock(Duration::ZERO, None)
            .unwrap()
            .is_none(),
        "the late release freed the lock under its new holder"
    );
    assert!(!again.is_lost());
    again.unlock().unwrap();
}

/// `holder` holds a lock; a child process queues for it asking for `child_lease` and is
/// killed in the queue; a waiter of another client queues behind it. How long after the
/// holder's release that waiter had the lock (the dead child was handed it first).
fn release_past_a_waiter_killed_in_the_queue(
    server: &RedisServer,
    holder: &Client,
    child_lease: Duration,
) -> Duration {
    let mut admin = server.admin();
    let name = unique("dead-waiter");
    let queued = |admin: &mut redis::Connection| -> usize {
        redis::cmd("ZCARD")
            .arg(format!("redlatch:{{{name}}}:queue"))
            .query(admin)
            .unwrap()
    };
    let held = holder.lock(&name).lock().unwrap();
    let mut child = support::spawn_child_test(
        "child_waits_for_a_lock_until_killed",
        &[
            ("REDLATCH_CHILD_URL", server.url()),
            ("REDLATCH_CHILD_LOCK", name.clone()),
            (
                "REDLATCH_CHILD_LEASE_MS",
                child_lease.as_millis().to_string(),
            ),
        ],
    );
    support::read_reported(&mut child, "WAITING", Duration::from_secs(30));
    assert!(eventually(Duration::from_secs(10), || queued(&mut admin) == 1));
    child.kill().unwrap();
    child.wait().unwrap();

    let waiter_client = Client::open(&server.url()).unwrap();
    let waiter = spawn_waiter(waiter_client.lock(&name), Duration::from_secs(20));
    assert!(eventually(Duration::from_secs(5), || queued(&mut admin) == 2));
    await_waiting(&mut admin, &name);
    let released = Instant::now();
    held.unlock().unwrap();
    assert!(waiter.join().unwrap());
    released.elapsed()
}

#[test]
fn a_waiter_killed_in_the_queue_delays_the_next_by_its_lease_only() {
    let server = RedisServer::start();
    let holder = Client::open(&server.url()).unwrap(); // 30 s leases
    // The dead child was first in line and got the lock with its 500 ms lease; the next
    // waiter has it once that runs out, not after the holder's 30 s.
    let took =
        release_past_a_waiter_killed_in_the_queue(&server, &holder, Duration::from_millis(500));
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

/// A hand-over for no shorter a lease than the released hold's is published to the new
/// holder's client alone: a waiter of another client is not told of it. When the new holder
/// died in the queue, that waiter still wakes by the time its lease runs out (it sleeps no
/// longer than the old hold's lease, then sees the new one) and takes the lock.
#[test]
fn a_waiter_not_told_of_a_hand_over_to_a_dead_waiter_still_has_the_lock_after_its_lease() {
    let server = RedisServer::start();
    // The holder's watchdog sets 2 s leases; the child asks for as much.
    let holder = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let took = release_past_a_waiter_killed_in_the_queue(&server, &holder, Duration::from_secs(2));
    // The dead child held it for its 2 s; the waiter was told nothing, yet woke by then.
    assert!(took >= Duration::from_millis(1500), "took {took:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn a_hand_over_whose_release_never_arrived_is_not_reused_or_freed_late() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let client = impatient_client(&proxy);
    let name = unique("handover-late-release");
    let lock = client.lock(&name);

    // Another client holds the lock and lets go once this thread is queued: the lock is
    // handed over, and this thread takes it from the message.
    let holder = Client::open(&server.url()).unwrap();
    let (held_tx, held_rx) = crossbeam_channel::bounded::<()>(0);
    let holder_lock = holder.lock(&name);
    let url = server.url();
    let holder_thread = thread::spawn(move || {
        let guard = holder_lock.lock().unwrap();
        let mut admin = redis::Client::open(url).unwrap().get_connection().unwrap();
        let base = support::command_calls(&mut admin, "evalsha");
        held_tx.send(()).unwrap();
        // The waiter parks after two attempts: the one that queued it, and the one after its
        // subscription was confirmed. Then the release hands it the lock.
        assert!(eventually(Duration::from_secs(10), || {
            support::command_calls(&mut admin, "evalsha") == base + 2
        }));
        guard.unlock().unwrap();
    });
    held_rx.recv().unwrap();
    let first = lock
        .try_lock(Duration::from_secs(20), None)
        .unwrap()
        .expect("handed over");
    let first_token = first.fencing_token();
    holder_thread.join().unwrap();

    // Its release never arrives in time; the thread locks again.
    proxy.stall_everything();
    let released = first.unlock();
    assert!(matches!(released, Err(Error::Redis(_))), "{released:?}");
    proxy.pass_new_connections();
    let again = lock.lock_with_lease(Duration::from_secs(30)).unwrap();
    assert!(
        again.fencing_token() > first_token,
        "token {first_token} handed out twice"
    );

    // And when the old release does arrive, it leaves the new hold alone.
    let mut admin = server.admin();
    deliver_the_held_release(&proxy, &mut admin);
    let other = Client::open(&server.url()).unwrap();
    assert!(
        other
            .lock(&name)
            .try_lock(Duration::ZERO, None)
            .unwrap()
            .is_none()
    );
    assert!(!again.is_lost());
    again.unlock().unwrap();
}

/// Subscribers of lock `name`'s channel (PUBSUB NUMSUB).
fn subscribers(admin: &mut redis::Connection, name: &str) -> i64 {
    let (_, n): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(support::channel_of(name))
        .query(admin)
        .unwrap();
    n
}

/// A thread whose wait failed keeps its place in the queue (nothing withdrew it). If that
/// thread then takes the lock by an attempt of its own while an older waiter is held up, that
/// attempt must leave its old place void: otherwise a later release hands the lock to a thread
/// that no longer waits, and the waiters behind it sleep through that hand-over's lease.
#[test]
fn a_failed_waits_place_is_voided_by_its_owners_next_attempt() {
    failed_waits_place_is_voided_by(|client, name| {
        Ok(held(client.lock(name).try_lock(Duration::ZERO, None)?))
    });
}

/// The same when the owner's next attempt is a spin lock's on the same name (the lock
/// itself): it voids the place as the lock's own attempt does.
#[test]
fn a_failed_waits_place_is_voided_by_its_owners_next_spin_lock_attempt() {
    failed_waits_place_is_voided_by(|client, name| {
        Ok(held(client.spin_lock(name).try_lock(Duration::ZERO, None)?))
    });
}

/// The same when the owner's next attempt takes the lock in a multi-lock's all-at-once call
/// (`acquire_many.lua`).
#[test]
fn a_failed_waits_place_is_voided_by_its_owners_next_multi_lock_attempt() {
    failed_waits_place_is_voided_by(|client, name| {
        let other = format!("{name}-other");
        let all = client.multi_lock(&[name, &other]);
        Ok(held(all.try_lock(Duration::ZERO, None)?))
    });
}

/// A guard of any kind, held until dropped.
type Held = Option<Box<dyn std::any::Any>>;

fn held<G: 'static>(guard: Option<G>) -> Held {
    guard.map(|g| Box::new(g) as Box<dyn std::any::Any>)
}

/// T's wait for a lock fails and leaves its place; T then takes the free lock with `take`,
/// which must void that place, so that the release after T's hands the lock to the next
/// real waiter at once.
fn failed_waits_place_is_voided_by(take: fn(&Client, &str) -> redlatch::Result<Held>) {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("leftover-place");
    let lock_key = format!("redlatch:{{{name}}}");
    let queued = |admin: &mut redis::Connection| support::queued_owners(admin, &name);
    let holder = Client::open(&server.url()).unwrap();
    let held = holder
        .lock(&name)
        .try_lock(Duration::ZERO, Some(Duration::from_secs(30)))
        .unwrap()
        .unwrap();

    // A, the oldest waiter, reaches Redis through a proxy that can hold its requests back.
    let proxy_a = Proxy::start(server.port);
    let a_client = Client::open(&proxy_a.url()).unwrap();
    warm_up(&a_client);
    let a_lock = a_client.lock(&name);
    let (a_got_tx, a_got) = crossbeam_channel::bounded::<()>(1);
    let (a_go_tx, a_go) = crossbeam_channel::bounded::<()>(1);
    let a = thread::spawn(move || {
        let guard = a_lock.try_lock(Duration::from_secs(30), None).unwrap();
        assert!(guard.is_some(), "A never got the lock");
        a_got_tx.send(()).unwrap();
        let _ = a_go.recv_timeout(Duration::from_secs(30));
        drop(guard);
    });
    await_waiting(&mut admin, &name);

    // T queues behind A; its wait fails (its attempt after the force-unlock below never
    // reaches Redis), which leaves its place, valid for its whole wait. The same thread then
    // takes the free lock with one attempt, and lets go when told.
    let proxy_t = Proxy::start(server.port);
    let t_client = impatient_client(&proxy_t);
    let t_lock = t_client.lock(&name);
    let (t_taker, t_name) = (t_client.clone(), name.clone());
    let (t_tx, t_rx) = crossbeam_channel::bounded::<&'static str>(1);
    let (t_go_tx, t_go) = crossbeam_channel::bounded::<()>(1);
    let t = thread::spawn(move || {
        let waited = t_lock.try_lock(Duration::from_secs(20), Some(Duration::from_secs(5)));
        assert!(matches!(waited, Err(Error::Redis(_))), "{waited:?}");
        t_tx.send("failed").unwrap();
        t_go.recv_timeout(Duration::from_secs(30)).unwrap();
        let guard = take(&t_taker, &t_name).unwrap();
        assert!(guard.is_some(), "the lock was free");
        t_tx.send("holds").unwrap();
        t_go.recv_timeout(Duration::from_secs(30)).unwrap();
        drop(guard);
    });
    assert!(
        eventually(Duration::from_secs(5), || subscribers(&mut admin, &name)
            == 2),
        "T did not start waiting"
    );

    // The lock comes free while A's requests are held back and T's vanish.
    proxy_a.stall_everything();
    proxy_t.blackhole(true);
    assert!(holder.lock(&name).force_unlock().unwrap());
    let _ = held.unlock(); // lost to the force-unlock
    assert_eq!(
        t_rx.recv_timeout(Duration::from_secs(10)).unwrap(),
        "failed"
    );
    proxy_t.blackhole(false);
    t_go_tx.send(()).unwrap();
    assert_eq!(t_rx.recv_timeout(Duration::from_secs(10)).unwrap(), "holds");
    let owners: Vec<String> = redis::cmd("HKEYS")
        .arg(&lock_key)
        .query(&mut admin)
        .unwrap();
    let t_owner = owners[0].clone();
    assert!(
        !queued(&mut admin).contains(&t_owner),
        "T's attempt left its failed wait's place in the queue"
    );

    // A's attempt arrives, finds T holding the lock, and keeps A's place.
    let before = support::command_calls(&mut admin, "evalsha");
    proxy_a.pass_new_connections();
    proxy_a.deliver_held();
    assert!(
        eventually(Duration::from_secs(5), || support::command_calls(
            &mut admin, "evalsha"
        ) > before),
        "A's attempt never arrived"
    );

    // T lets go: the lock goes to A. T is done with the lock, and with its client.
    t_go_tx.send(()).unwrap();
    t.join().unwrap();
    a_got
        .recv_timeout(Duration::from_secs(10))
        .expect("A was handed the lock");
    drop(t_client);
    assert!(!queued(&mut admin).contains(&t_owner));

    // W queues; when A lets go, W gets the lock at once, not after a hand-over to T's old
    // place has run out.
    let w_client = Client::open(&server.url()).unwrap();
    let w = spawn_waiter(w_client.lock(&name), Duration::from_secs(30));
    assert!(
        eventually(Duration::from_secs(5), || queued(&mut admin).len() == 1),
        "W did not queue"
    );
    let released = Instant::now();
    a_go_tx.send(()).unwrap();
    a.join().unwrap();
    assert!(w.join().unwrap(), "W never got the lock");
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "W waited {:?}: the lock went to a thread that no longer waited",
        released.elapsed()
    );
}

/// The same for a read-write lock's write: the thread's owner is the same on both holds, so
/// only the token tells the late release's hold from the new one.
#[test]
fn a_write_release_that_reaches_redis_late_leaves_a_newer_write_alone() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let client = impatient_client(&proxy);
    // The release script in the server's cache, so that the late one runs rather than
    // meet NOSCRIPT.
    let warm = client.read_write_lock(&unique("warm-write"));
    warm.write().unwrap().unlock().unwrap();
    let rw = client.read_write_lock(&unique("late-write"));
    let first = rw
        .try_write(Duration::ZERO, Some(Duration::from_secs(30)))
        .unwrap()
        .unwrap();

    let first_token = first.fencing_token();
    proxy.stall_open_connections();
    assert!(matches!(first.unlock(), Err(Error::Redis(_))));
    let again = rw
        .try_write(Duration::from_secs(10), Some(Duration::from_secs(30)))
        .unwrap()
        .unwrap();
    assert!(
        again.fencing_token() > first_token,
        "a newer hold, same owner"
    );

    let mut admin = server.admin();
    deliver_the_held_release(&proxy, &mut admin);
    let other = Client::open(&server.url()).unwrap();
    assert!(
        other
            .read_write_lock(rw.name())
            .try_write(Duration::ZERO, None)
            .unwrap()
            .is_none(),
        "the late release freed the write under its new holder"
    );
    assert!(!again.is_lost());
    again.unlock().unwrap();
}

/// Issue 40: a client holds a lock with a 4 s lease; another client's two threads wait for
/// it (`try_lock(20 s)` and `lock()`); the server is stopped for 8 s. Both waits fail (the
/// server does not answer), as they may; but on SIGCONT the server ran their attempts, which
/// took the lock (the holder's lease had run out) and places in its queue, for threads that
/// had given up: the lock was unusable for everyone for the rest of a 30 s lease. Each
/// attempt whose reply was lost is now settled once the server answers: within moments the
/// lock is free, with nobody of the failed client's in its queue.
#[test]
fn attempts_whose_reply_was_lost_are_settled_once_the_server_answers() {
    for layout in [redlatch::Layout::Redlatch, redlatch::Layout::Redisson] {
        let server = RedisServer::start();
        let holder = Client::builder(&server.url())
            .layout(layout)
            .build()
            .unwrap();
        // The default watchdog: a lost run's hold has a 30 s lease, a place 5 s or more.
        let waiting = Client::builder(&server.url())
            .layout(layout)
            .build()
            .unwrap();
        let name = unique("lost-attempt");
        let key = match layout {
            redlatch::Layout::Redisson => name.clone(),
            _ => format!("redlatch:{{{name}}}"),
        };
        let held = holder
            .lock(&name)
            .lock_with_lease(Duration::from_secs(4))
            .unwrap();
        let mut admin = server.admin();
        let scripts_before = support::command_calls(&mut admin, "evalsha");
        let waiters: Vec<_> = [Some(Duration::from_secs(20)), None]
            .into_iter()
            .map(|wait| {
                let lock = waiting.lock(&name);
                thread::spawn(move || match wait {
                    Some(wait) => lock.try_lock(wait, None).map(|g| g.is_some()),
                    None => lock.lock().map(|_| true),
                })
            })
            .collect();
        if layout == redlatch::Layout::Redlatch {
            assert!(
                eventually(Duration::from_secs(5), || {
                    support::queued_owners(&mut admin, &name).len() == 2
                }),
                "both threads queue"
            );
        } else {
            // Both parked: each attempted, subscribed and attempted again (Redisson's order).
            assert!(
                eventually(Duration::from_secs(5), || {
                    support::command_calls(&mut admin, "evalsha") >= scripts_before + 4
                }),
                "both threads wait"
            );
        }
        support::signal(server.pid(), "-STOP");
        let stopped = Instant::now();
        let ended = support::join_all(waiters, Duration::from_secs(30), "the waits");
        // Both failed, or (had a thread been quick) took the lock; either is fine here.
        let failed = ended.iter().filter(|r| r.is_err()).count();
        let left = Duration::from_secs(8).saturating_sub(stopped.elapsed());
        thread::sleep(left);
        support::signal(server.pid(), "-CONT");
        let resumed = Instant::now();
        drop(held); // its lease ran out in the stop: nothing of it left to release
        assert!(
            failed >= 1,
            "{layout:?}: the waits failed while stopped: {ended:?}"
        );

        // Free, with nobody in the queue, within moments: the settlement sent while the
        // server was stopped is answered once it resumes, or the next one 250 ms later.
        let settled = eventually(Duration::from_secs(3), || {
            let pttl = support::pttl(&mut admin, &key);
            let queue = match layout {
                redlatch::Layout::Redlatch => support::queued_owners(&mut admin, &name),
                _ => Vec::new(),
            };
            pttl == -2 && queue.is_empty()
        });
        let hash: Vec<String> = redis::cmd("HGETALL").arg(&key).query(&mut admin).unwrap();
        let queue: Vec<String> = redis::cmd("ZRANGE")
            .arg(format!("{key}:queue"))
            .arg(0)
            .arg(-1)
            .query(&mut admin)
            .unwrap();
        assert!(
            settled,
            "{layout:?}: {:?} after SIGCONT the lock is {hash:?} (PTTL {}), its queue \
             {queue:?}; the waits ended {ended:?}",
            resumed.elapsed(),
            support::pttl(&mut admin, &key)
        );
        assert!(
            waiting.stats().lost_replies_settled >= 1,
            "{layout:?}: {}",
            waiting.stats()
        );
        // And it is usable at once by anyone.
        let again = holder.lock(&name).try_lock(Duration::ZERO, None).unwrap();
        assert!(again.is_some(), "{layout:?}: the lock is free for others");
    }
}

/// The ACLs of issue 40 (item 1) that leave a user without our channels: none granted, none
/// and no PUBLISH either, or the channels granted but PUBLISH refused. `keys` are the user's
/// key patterns.
fn channel_less_acls(keys: &[&str], channels: &str) -> Vec<Vec<String>> {
    // Redis 6.2 has no SPUBLISH, and refuses to remove what it does not know.
    let no_publish: &[&str] = if support::sharded_pubsub() {
        &["-publish", "-spublish"]
    } else {
        &["-publish"]
    };
    let base = |extra: &[&str]| {
        let mut rules = vec!["resetkeys".to_string()];
        rules.extend(keys.iter().map(|k| k.to_string()));
        rules.extend(["+@all", "-@dangerous"].map(String::from));
        rules.extend(extra.iter().map(|r| r.to_string()));
        rules
    };
    vec![
        base(&[]),
        base(no_publish),
        base(&[&[channels], no_publish].concat()),
    ]
}

/// What the client logged, at every level, in every test of this file (each test picks its
/// own lines by its server's port).
static LOGGED: std::sync::Mutex<Vec<(log::Level, String)>> = std::sync::Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        let line = record.args().to_string();
        LOGGED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((record.level(), line));
    }
    fn flush(&self) {}
}

/// Starts capturing the client's log (once per test binary); lines already logged stay.
fn capture_logs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        log::set_logger(&Capture).unwrap();
        log::set_max_level(log::LevelFilter::Debug);
    });
}

/// How many lines at `level` mention `port` and contain `text`.
fn logged(level: log::Level, port: u16, text: &str) -> usize {
    let port = format!(":{port}");
    LOGGED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(l, line)| *l == level && line.contains(&port) && line.contains(text))
        .count()
}

/// A release by a user whose ACL refuses our channels (or PUBLISH) succeeds and frees the lock
/// at once, where the refused PUBLISH made the whole script fail and the lock stay held for
/// its lease; the waiter, who hears nothing, has it by the end of the lease it knew of. So
/// does every other call that publishes, of every kind.
fn a_release_succeeds_whatever_the_channel_permission(layout: redlatch::Layout) {
    capture_logs();
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (keys, channels, grant): (&[&str], _, _) = match layout {
        redlatch::Layout::Redisson => (
            &["~redlatch:*", "~redisson_*", "~{redlatch:*"],
            "&redisson_*",
            "&redisson_lock__channel:*",
        ),
        _ => (&["~redlatch:*"], "&redlatch:*", "&redlatch:*"),
    };
    for (i, rules) in channel_less_acls(keys, channels).into_iter().enumerate() {
        let warned = logged(log::Level::Warn, server.port, "refused");
        let repeated = logged(log::Level::Debug, server.port, "refused");
        let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
        let url = server.acl_user(&format!("u{i}"), &rules);
        let client = |url: &str| {
            Client::builder(url)
                .layout(layout)
                .response_timeout(Duration::from_secs(2))
                .build()
                .unwrap()
        };
        let (a, b) = (client(&url), client(&url));
        // Redisson's keys are the names themselves: under `redlatch:` for the ACL's sake.
        let name = format!("redlatch:{}", unique("acl-release"));
        let key = match layout {
            redlatch::Layout::Redisson => name.clone(),
            _ => format!("redlatch:{{{name}}}"),
        };
        let lease = Duration::from_secs(2);
        let held = a.lock(&name).lock_with_lease(lease).unwrap();
        let taken = Instant::now();
        let holder = a.current_thread_owner_id();
        let waiter_lock = b.lock(&name);
        let waiter = thread::spawn(move || {
            waiter_lock
                .try_lock(Duration::from_secs(10), None)
                .map(|g| g.map(|g| (Instant::now(), g.owner_id().to_string())))
        });
        thread::sleep(Duration::from_millis(300)); // the waiter tried, and sleeps
        assert!(!waiter.is_finished(), "{rules:?}: the waiter must wait");
        held.unlock()
            .unwrap_or_else(|e| panic!("{rules:?}: the release failed: {e}"));
        // Free, or handed to the waiter: not the holder's any more.
        let pttl = support::pttl(&mut admin, &key);
        let fields: Vec<String> = redis::cmd("HKEYS").arg(&key).query(&mut admin).unwrap();
        assert!(
            pttl == -2 || !fields.contains(&holder),
            "{rules:?}: still held after the release: PTTL {pttl}, fields {fields:?}"
        );
        let (got, owner) = waiter
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("{rules:?}: the wait failed: {e}"))
            .unwrap_or_else(|| panic!("{rules:?}: the waiter did not get the lock"));
        assert!(
            got.duration_since(taken) < lease + Duration::from_secs(1),
            "{rules:?}: the waiter had the lock {:?} after it was taken",
            got.duration_since(taken)
        );
        assert!(owner.starts_with(b.id()), "{owner}");
        // The refused SUBSCRIBE, retried all along the wait, is said once, with what to
        // grant; the ACL that grants the channels refuses none (debug lines may still come
        // from the last ACL's clients, whose subscriber threads end after they are dropped).
        let said = logged(
            log::Level::Warn,
            server.port,
            &format!("ACL SETUSER <user> {grant}"),
        );
        let warned = logged(log::Level::Warn, server.port, "refused") - warned;
        let repeated = logged(log::Level::Debug, server.port, "refused") - repeated;
        if rules.iter().any(|r| r.starts_with('&')) {
            assert_eq!(warned, 0, "{rules:?}");
        } else {
            assert_eq!(warned, 1, "{rules:?}: warned {warned} times");
            assert!(
                said >= 1 && repeated >= 1,
                "{rules:?}: said {said}, {repeated} at debug"
            );
        }

        // Every other call that publishes, each kind on a name of its own (in Redisson's
        // layout a lock and a read-write lock of one name are one hash).
        let other = |kind: &str| format!("redlatch:{}", unique(&format!("acl-{kind}")));
        let lock = a.lock(&other("lock"));
        let held = lock.lock().unwrap();
        assert!(b.lock(lock.name()).force_unlock().unwrap(), "{rules:?}");
        drop(held);
        let rw = a.read_write_lock(&other("rw"));
        rw.write().unwrap().unlock().unwrap();
        rw.read().unwrap().unlock().unwrap();
        assert!(!rw.is_locked().unwrap());
        let write = rw.write().unwrap();
        assert!(
            b.read_write_lock(rw.name()).force_unlock().unwrap(),
            "{rules:?}"
        );
        drop(write);
        let sem = a.semaphore(&other("sem"));
        sem.set_permits(2).unwrap();
        assert!(!sem.try_set_permits(3).unwrap());
        assert_eq!(sem.add_permits(1).unwrap(), 3);
        sem.acquire(1).unwrap().release().unwrap();
        let permit = sem.acquire(1).unwrap();
        assert!(b.semaphore(sem.name()).force_unlock().unwrap(), "{rules:?}");
        drop(permit);
        let counting = a.counting_semaphore(&other("counting"));
        assert!(counting.try_set_permits(1).unwrap());
        counting.add_permits(1).unwrap();
        counting.acquire(1).unwrap();
        counting.release(1).unwrap();
        assert_eq!(counting.available().unwrap(), 2);
        let latch = a.count_down_latch(&other("latch"));
        assert!(latch.try_set_count(2).unwrap());
        assert_eq!(latch.count_down().unwrap(), 1);
        assert_eq!(latch.count_down().unwrap(), 0);
        assert!(latch.try_set_count(1).unwrap());
        assert!(latch.delete().unwrap());
    }
}

#[test]
fn a_release_succeeds_whatever_the_channel_permission_in_our_layout() {
    a_release_succeeds_whatever_the_channel_permission(redlatch::Layout::Redlatch);
}

#[test]
fn a_release_succeeds_whatever_the_channel_permission_in_redissons_layout() {
    a_release_succeeds_whatever_the_channel_permission(redlatch::Layout::Redisson);
}

/// The same with a wait that begins while the server is stopped: its first attempt, which
/// names no place (the place's arrival is what its lost reply would have said), queues when
/// the server resumes. Settled, that place leaves the queue, so the holder's release hands
/// the lock to a real waiter, not to a thread that had given up.
#[test]
fn a_first_attempt_whose_reply_was_lost_leaves_no_place_behind() {
    let server = RedisServer::start();
    let holder = Client::open(&server.url()).unwrap();
    let failing = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let name = unique("lost-first-attempt");
    let held = holder.lock(&name).lock().unwrap(); // a 30 s lease outlives the stop
    let lock = failing.lock(&name);
    // Warm the pool, so that the attempt below is sent on a connection made before the stop.
    assert!(lock.try_lock(Duration::ZERO, None).unwrap().is_none());
    support::signal(server.pid(), "-STOP");
    let waited = lock.try_lock(Duration::from_secs(20), None);
    assert!(matches!(waited, Err(Error::Redis(_))), "{waited:?}");
    thread::sleep(Duration::from_millis(500));
    support::signal(server.pid(), "-CONT");
    let mut admin = server.admin();
    let queued = |admin: &mut redis::Connection| support::queued_owners(admin, &name);
    assert!(
        eventually(Duration::from_secs(3), || queued(&mut admin).is_empty()),
        "the failed wait's place is still queued: {:?}",
        queued(&mut admin)
    );
    // The holder's release goes to a real waiter at once.
    let waiter = Client::open(&server.url()).unwrap();
    let w = spawn_waiter(waiter.lock(&name), Duration::from_secs(20));
    assert!(
        eventually(Duration::from_secs(5), || queued(&mut admin).len() == 1),
        "the waiter did not queue"
    );
    let released = Instant::now();
    held.unlock().unwrap();
    assert!(w.join().unwrap(), "the waiter never got the lock");
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "the waiter waited {:?} after the release",
        released.elapsed()
    );
}
