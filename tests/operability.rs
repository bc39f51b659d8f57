//! What tells a user how their locks are doing, against real redis-servers: the
//! `on_lock_lost` callback for each cause of loss and each kind of hold, a callback that
//! panics, `Client::stats`, guards' `remaining_lease`, and the error helpers.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, unbounded};
use redlatch::{Client, Error, HoldKind, LossCause, LostLock};
use support::{Proxy, RedisServer, eventually, unique};

const ZERO: Duration = Duration::ZERO;

/// A client with a short watchdog whose losses arrive on the returned channel.
fn told_client(url: &str, watchdog: Duration) -> (Client, Receiver<LostLock>) {
    let (tx, rx) = unbounded();
    let client = Client::builder(url)
        .watchdog_timeout(watchdog)
        .response_timeout(Duration::from_millis(300))
        .on_lock_lost(move |lost| {
            let _ = tx.send(lost.clone());
        })
        .build()
        .unwrap();
    (client, rx)
}

fn told(rx: &Receiver<LostLock>, within: Duration) -> LostLock {
    rx.recv_timeout(within)
        .expect("no loss was announced in time")
}

fn del(server: &RedisServer, key: &str) {
    let _: () = redis::cmd("DEL")
        .arg(key)
        .query(&mut server.admin())
        .unwrap();
}

#[test]
fn renewal_finding_a_lock_gone_announces_it_once() {
    let server = RedisServer::start();
    let (client, rx) = told_client(&server.url(), Duration::from_millis(600));
    let name = unique("lost-taken");
    let guard = client.lock(&name).lock().unwrap();
    let inner = client.lock(&name).lock().unwrap(); // a re-entry: the same hold
    del(&server, &format!("redlatch:{{{name}}}"));
    let lost = told(&rx, Duration::from_secs(2));
    assert_eq!(lost.name, name);
    assert_eq!(lost.fencing_token, guard.fencing_token());
    assert_eq!((lost.cause, lost.kind), (LossCause::Taken, HoldKind::Lock));
    assert!(guard.is_lost());
    assert!(inner.unlock().unwrap_err().is_lock_lost());
    assert!(guard.unlock().unwrap_err().is_lock_lost());
    assert!(
        rx.recv_timeout(Duration::from_millis(500)).is_err(),
        "a loss was announced twice"
    );
}

#[test]
fn a_force_unlock_is_announced_as_such_by_this_client_and_by_another() {
    let server = RedisServer::start();
    let (client, rx) = told_client(&server.url(), Duration::from_millis(600));
    let other = Client::open(&server.url()).unwrap();
    // By this client: at once, without waiting for renewal.
    let name = unique("lost-forced-here");
    let guard = client.lock(&name).lock().unwrap();
    assert!(client.lock(&name).force_unlock().unwrap());
    let lost = told(&rx, Duration::from_millis(300));
    assert_eq!(lost.cause, LossCause::ForceUnlocked);
    assert!(guard.is_lost());
    drop(guard);
    // By another client: found by renewal, which reads the force-unlock's mark.
    let name = unique("lost-forced-there");
    let guard = client.lock(&name).lock().unwrap();
    assert!(other.lock(&name).force_unlock().unwrap());
    let lost = told(&rx, Duration::from_secs(2));
    assert_eq!(
        (lost.name.as_str(), lost.cause),
        (name.as_str(), LossCause::ForceUnlocked)
    );
    assert!(guard.is_lost());
}

#[test]
fn a_fixed_lease_that_passes_is_announced_without_the_holder_asking() {
    let server = RedisServer::start();
    let (client, rx) = told_client(&server.url(), Duration::from_secs(30));
    let name = unique("lost-lease");
    let guard = client
        .lock(&name)
        .lock_with_lease(Duration::from_millis(300))
        .unwrap();
    let taken = Instant::now();
    let lost = told(&rx, Duration::from_secs(2));
    assert_eq!(
        (lost.cause, lost.kind),
        (LossCause::LeaseExpired, HoldKind::Lock)
    );
    let after = taken.elapsed();
    assert!(
        after < Duration::from_millis(800),
        "announced {after:?} after taking it"
    );
    assert!(guard.is_lost());
    // The other kinds' holds too, each with its kind.
    let rw = client.read_write_lock(&name);
    let read = rw
        .try_read(ZERO, Some(Duration::from_millis(200)))
        .unwrap()
        .unwrap();
    let lost = told(&rx, Duration::from_secs(2));
    assert_eq!(
        (lost.cause, lost.kind),
        (LossCause::LeaseExpired, HoldKind::Read)
    );
    drop(read);
    let write = rw
        .try_write(ZERO, Some(Duration::from_millis(200)))
        .unwrap()
        .unwrap();
    assert_eq!(told(&rx, Duration::from_secs(2)).kind, HoldKind::Write);
    drop(write);
    let sem = client.semaphore(&name);
    sem.set_permits(1).unwrap();
    let permits = sem
        .try_acquire(1, ZERO, Some(Duration::from_millis(200)))
        .unwrap()
        .unwrap();
    let lost = told(&rx, Duration::from_secs(2));
    assert_eq!(
        (lost.kind, lost.fencing_token),
        (HoldKind::Permits, permits.fencing_token())
    );
}

#[test]
fn an_unlock_that_finds_the_hold_gone_announces_it() {
    let server = RedisServer::start();
    let (client, rx) = told_client(&server.url(), Duration::from_secs(30));
    let name = unique("lost-at-unlock");
    let guard = client
        .lock(&name)
        .lock_with_lease(Duration::from_secs(30))
        .unwrap();
    del(&server, &format!("redlatch:{{{name}}}"));
    let err = guard.unlock().unwrap_err();
    assert!(err.is_lock_lost(), "{err:?}");
    let lost = told(&rx, Duration::from_secs(1));
    assert_eq!(lost.cause, LossCause::FoundGone);
}

#[test]
fn redis_out_of_reach_past_the_lease_is_announced() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let (client, rx) = told_client(&proxy.url(), Duration::from_millis(600));
    let name = unique("lost-unreachable");
    let guard = client.lock(&name).lock().unwrap();
    proxy.blackhole(true);
    let cut = Instant::now();
    let lost = told(&rx, Duration::from_secs(3));
    assert_eq!(lost.cause, LossCause::NotRenewedInTime);
    assert!(
        cut.elapsed() < Duration::from_millis(1500),
        "{:?}",
        cut.elapsed()
    );
    assert!(guard.is_lost());
    // The error helpers tell a timeout from the rest.
    let err = client
        .lock(&unique("away"))
        .try_lock(ZERO, None)
        .unwrap_err();
    assert!(err.is_timeout() && err.is_connection_error(), "{err:?}");
    assert!(!err.is_lock_lost() && !err.is_invalid_argument());
    proxy.blackhole(false);
}

#[test]
fn a_panicking_callback_stops_neither_renewal_nor_later_announcements() {
    let server = RedisServer::start();
    let (tx, rx) = unbounded();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let client = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_millis(600))
        .on_lock_lost(move |lost| {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("a careless callback");
            }
            let _ = tx.send(lost.clone());
        })
        .build()
        .unwrap();
    let kept = client.lock(&unique("kept")).lock().unwrap();
    let first = client
        .lock(&unique("first"))
        .lock_with_lease(Duration::from_millis(100))
        .unwrap();
    assert!(eventually(Duration::from_secs(2), || calls
        .load(Ordering::SeqCst)
        == 1));
    let second = client
        .lock(&unique("second"))
        .lock_with_lease(Duration::from_millis(100))
        .unwrap();
    let lost = told(&rx, Duration::from_secs(2));
    assert_eq!(lost.fencing_token, second.fencing_token());
    drop((first, second));
    // Renewal went on: the watchdog lock outlived several of its 600 ms leases.
    thread::sleep(Duration::from_millis(1500));
    assert!(!kept.is_lost());
    kept.check().unwrap();
}

#[test]
fn stats_count_what_the_client_did_and_is_doing() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    let other = Client::open(&server.url()).unwrap();
    let name = unique("stats");
    let before = client.stats();
    assert_eq!(before.acquisitions, 0);
    let held = other.lock(&name).lock().unwrap();
    assert!(client.lock(&name).try_lock(ZERO, None).unwrap().is_none());
    let lock = client.lock(&name);
    let waiter = thread::spawn(move || {
        lock.try_lock(Duration::from_secs(10), None)
            .unwrap()
            .is_some()
    });
    support::await_waiting(&mut admin, &name);
    assert!(eventually(Duration::from_secs(2), || {
        let s = client.stats();
        s.waiting_threads == 1 && s.subscriptions == 1
    }));
    thread::sleep(Duration::from_millis(100));
    drop(held);
    assert!(waiter.join().unwrap());
    let free = client.lock(&unique("stats-free"));
    let guard = free.lock().unwrap();
    thread::sleep(Duration::from_millis(700)); // a renewal or two
    drop(guard);
    let _: () = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "pubsub"])
        .query(&mut admin)
        .unwrap_or(());
    let s = client.stats();
    assert_eq!(s.acquisitions, 2, "{s:?}");
    assert_eq!(
        (s.acquired_at_once, s.handed_over, s.timeouts),
        (1, 1, 1),
        "{s:?}"
    );
    // The handed-over wait took over 100 ms; a quantile is a bound it does not exceed.
    assert!(s.wait_p99 >= Duration::from_millis(100), "{s:?}");
    assert!(s.renewals_ok >= 1, "{s:?}");
    assert_eq!((s.waiting_threads, s.locks_lost), (0, 0), "{s:?}");
    let line = format!("{s}");
    assert!(
        !line.contains('\n')
            && line.starts_with("acquisitions 2 (at once 1, after wait 0, handed over 1)")
            && line.contains(", wait p50 <= ")
            && line.contains(", waiting threads 0, subscriptions "),
        "{line}"
    );
    // A multi-lock taken in one call counts each member.
    let names = [unique("stats-m1"), unique("stats-m2")];
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    drop(client.multi_lock(&names).lock().unwrap());
    assert_eq!(client.stats().acquired_at_once, s.acquired_at_once + 2);
}

#[test]
fn remaining_lease_is_known_without_a_round_trip() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let name = unique("remaining");
    let fixed = client
        .lock(&name)
        .lock_with_lease(Duration::from_secs(2))
        .unwrap();
    let calls = support::command_calls(&mut admin, "evalsha");
    let left = fixed.remaining_lease();
    assert!(
        left > Duration::from_millis(1500) && left <= Duration::from_secs(2),
        "{left:?}"
    );
    thread::sleep(Duration::from_millis(300));
    assert!(fixed.remaining_lease() < left);
    assert_eq!(
        support::command_calls(&mut admin, "evalsha"),
        calls,
        "it asked Redis"
    );
    let watched = client.read_write_lock(&name).read().unwrap();
    assert!(watched.remaining_lease() <= Duration::from_secs(3));
    assert!(watched.remaining_lease() > Duration::from_secs(1));
    del(&server, &format!("redlatch:{{{name}}}"));
    assert!(fixed.unlock().is_err());
    let short = client
        .lock(&unique("remaining-short"))
        .lock_with_lease(Duration::from_millis(100))
        .unwrap();
    thread::sleep(Duration::from_millis(200));
    assert_eq!(short.remaining_lease(), ZERO);
    assert!(matches!(short.check(), Err(Error::LockLost { .. })));
}

#[test]
fn a_semaphore_force_unlock_gives_every_permit_back_and_wakes_the_waiters_in_both_layouts() {
    let server = RedisServer::start();
    let url = server.url();
    for layout in [redlatch::Layout::Redlatch, redlatch::Layout::Redisson] {
        let (tx, rx) = unbounded();
        let built = |tx: Option<crossbeam_channel::Sender<LostLock>>| {
            let builder = Client::builder(&url)
                .layout(layout)
                .watchdog_timeout(Duration::from_millis(600));
            match tx {
                Some(tx) => builder.on_lock_lost(move |lost| {
                    let _ = tx.send(lost.clone());
                }),
                None => builder,
            }
            .build()
            .unwrap()
        };
        let (holder, waiter_client, operator) = (built(Some(tx)), built(None), built(None));
        let name = unique("sem-forced");
        let sem = holder.semaphore(&name);
        sem.set_permits(3).unwrap();
        let two = sem.acquire(2).unwrap();
        let one = waiter_client.semaphore(&name).acquire(1).unwrap();
        // Waits for 2 of the 3 while 3 are held: only a force-unlock lets it in in time.
        let waiting = {
            let sem = waiter_client.semaphore(&name);
            thread::spawn(move || {
                let started = Instant::now();
                let got = sem.try_acquire(2, Duration::from_secs(10), None).unwrap();
                (got.is_some(), started.elapsed())
            })
        };
        thread::sleep(Duration::from_millis(300));
        assert!(
            operator.semaphore(&name).force_unlock().unwrap(),
            "{layout:?}"
        );
        let (got, after) =
            support::join_all(vec![waiting], Duration::from_secs(15), "waiter").remove(0);
        assert!(
            got && after < Duration::from_secs(5),
            "{layout:?}: {after:?}"
        );
        assert_eq!(sem.permits().unwrap(), 3, "{layout:?}: the total stays");
        // The holders' permits are gone: renewal finds it, within a watchdog period or two.
        assert!(
            eventually(Duration::from_secs(3), || two.is_lost() && one.is_lost()),
            "{layout:?}"
        );
        // Our layout marks a force-unlock, so another client's holder learns why; Redisson's
        // keeps no such mark, and its holder hears what a lost lease would say.
        let lost = told(&rx, Duration::from_secs(1));
        let cause = match layout {
            redlatch::Layout::Redisson => LossCause::Taken,
            _ => LossCause::ForceUnlocked,
        };
        assert_eq!((lost.name.as_str(), lost.cause), (name.as_str(), cause));
        assert!(matches!(two.release(), Err(Error::LockLost { .. })));
        drop(one);
        // By the holder's own client: told at once, as ForceUnlocked.
        let again = sem
            .try_acquire(1, Duration::from_secs(5), None)
            .unwrap()
            .unwrap();
        while rx.try_recv().is_ok() {}
        assert!(sem.force_unlock().unwrap());
        assert!(again.is_lost(), "{layout:?}");
        assert_eq!(
            told(&rx, Duration::from_millis(500)).cause,
            LossCause::ForceUnlocked
        );
        // Nothing held: false, and nothing changes.
        drop(again);
        let free = sem.available().unwrap();
        assert!(!sem.force_unlock().unwrap(), "{layout:?}");
        assert_eq!(sem.available().unwrap(), free);
    }
}

/// Issue 40: with the server stopped, a watchdog hold's loss was announced when the renewal
/// thread's round trip gave up (a response timeout after it was sent), not when the lease
/// ran out. The renewal thread's round trips now end by the first lease deadline, so the
/// callback comes then, whatever the response timeout.
#[test]
fn a_loss_is_announced_when_the_lease_ends_not_when_a_round_trip_gives_up() {
    let server = RedisServer::start();
    let (tx, rx) = unbounded();
    let watchdog = Duration::from_millis(1500);
    let client = Client::builder(&server.url())
        .watchdog_timeout(watchdog)
        // Far longer than the lease: a round trip that waited for it would announce late.
        .response_timeout(Duration::from_secs(8))
        .on_lock_lost(move |lost| {
            let _ = tx.send((lost.clone(), Instant::now()));
        })
        .build()
        .unwrap();
    let name = unique("lost-on-time");
    let guard = client.lock(&name).lock().unwrap();
    let leased = client
        .lock(&unique("lost-on-time-fixed"))
        .lock_with_lease(Duration::from_millis(2500))
        .unwrap();
    support::signal(server.pid(), "-STOP"); // SIGKILLed at the end, stopped or not
    let stopped = Instant::now();
    let (lost, at) = rx
        .recv_timeout(Duration::from_secs(6))
        .expect("no loss announced within 6 s of the stop");
    assert_eq!(lost.name, name);
    assert_eq!(lost.cause, LossCause::NotRenewedInTime);
    // The fixed lease ends while the thread waits on the stopped server too.
    let second = rx.recv_timeout(Duration::from_secs(4));
    support::signal(server.pid(), "-CONT");
    let deadline_passed = guard.remaining_lease() == ZERO;
    assert!(deadline_passed && guard.is_lost());
    // The lease ran at most one watchdog timeout past the stop (renewed just before it, at
    // the latest); the announcement must follow its end closely, not up to 8 s later.
    let late = at.saturating_duration_since(stopped);
    assert!(
        late <= watchdog + Duration::from_millis(700),
        "announced {late:?} after the stop, with a {watchdog:?} lease"
    );
    let (second, second_at) = second.expect("the fixed lease's end was not announced");
    assert_eq!(second.cause, LossCause::LeaseExpired);
    let late = second_at.saturating_duration_since(stopped);
    assert!(
        late <= Duration::from_millis(2500 + 700),
        "the fixed lease's end announced {late:?} after the stop"
    );
    drop(leased);
}
