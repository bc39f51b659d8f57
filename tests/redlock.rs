//! Redlock over five independent masters (real redis-server processes): a majority is enough,
//! less is an error, a lock is lost only when the majority is, and waiters are woken.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Client, Error, RedlockClient};
use support::topology::Masters;
use support::{eventually, unique};

fn redlock(masters: &Masters, watchdog: Duration) -> RedlockClient {
    let clients = masters
        .urls()
        .iter()
        .map(|url| {
            Client::builder(url)
                .watchdog_timeout(watchdog)
                .response_timeout(Duration::from_millis(500))
                .connect_timeout(Duration::from_millis(500))
                .build()
                .unwrap()
        })
        .collect();
    RedlockClient::new(clients).unwrap()
}

fn held_on(masters: &Masters, i: usize, name: &str) -> bool {
    let mut con = masters.server(i).admin();
    redis::cmd("EXISTS")
        .arg(format!("redlatch:{{{name}}}"))
        .query(&mut con)
        .unwrap()
}

#[test]
fn a_majority_is_enough_and_less_is_an_error() {
    let mut masters = Masters::start(5);
    let rl = redlock(&masters, Duration::from_secs(10));
    let other = redlock(&masters, Duration::from_secs(10));
    assert_eq!(rl.majority(), 3);
    masters.server_mut(1).kill();
    masters.server_mut(3).kill();

    let name = unique("majority");
    let guard = rl
        .lock(&name)
        .try_lock(Duration::from_secs(2), None)
        .unwrap()
        .expect("three of five masters are up");
    assert_eq!(guard.held_on(), 3);
    assert!(!guard.is_lost());
    for i in [0, 2, 4] {
        assert!(held_on(&masters, i, &name), "not on master {i}");
    }
    let tokens = guard.fencing_tokens();
    assert_eq!(tokens.iter().flatten().count(), 3);
    assert!(tokens[1].is_none() && tokens[3].is_none());
    // Another client finds it taken.
    assert!(
        other
            .lock(&name)
            .try_lock(Duration::ZERO, None)
            .unwrap()
            .is_none()
    );
    guard.unlock().unwrap();
    for i in [0, 2, 4] {
        assert!(!held_on(&masters, i, &name), "still on master {i}");
    }

    // A third master down: no majority can answer. A clear error, at once, nothing left.
    masters.server_mut(0).kill();
    let started = Instant::now();
    let failed = rl.lock(&name).try_lock(Duration::from_secs(5), None);
    match failed {
        Err(Error::Redis(e)) => assert!(e.to_string().contains("majority"), "{e}"),
        other => panic!("expected a Redis error, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(3));
    for i in [2, 4] {
        assert!(!held_on(&masters, i, &name), "left on master {i}");
    }
}

#[test]
fn the_lock_is_lost_only_when_the_majority_is() {
    let mut masters = Masters::start(5);
    let watchdog = Duration::from_millis(600);
    let rl = redlock(&masters, watchdog);
    let guard = rl.lock(&unique("held")).lock().unwrap();
    assert_eq!(guard.held_on(), 5);
    masters.server_mut(0).kill();
    masters.server_mut(1).kill();
    // Past the lease on the dead masters: two of five lost, three still renewed.
    thread::sleep(watchdog * 2);
    assert_eq!(guard.held_on(), 3);
    assert!(!guard.is_lost());
    guard.check().unwrap();
    masters.server_mut(2).kill();
    assert!(
        eventually(Duration::from_secs(5), || guard.is_lost()),
        "three of five masters gone and the guard says held"
    );
    assert!(matches!(guard.check(), Err(Error::LockLost { .. })));
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
}

#[test]
fn a_waiter_is_woken_by_the_release_and_holders_never_overlap() {
    let masters = Masters::start(3);
    let name = unique("shared");
    let holder = redlock(&masters, Duration::from_secs(5));
    let guard = holder.lock(&name).lock().unwrap();
    let waiter_lock = redlock(&masters, Duration::from_secs(5)).lock(&name);
    let waiter = thread::spawn(move || {
        waiter_lock
            .try_lock(Duration::from_secs(10), None)
            .unwrap()
            .map(|g| g.unlock().unwrap())
            .is_some()
    });
    let mut admin = masters.server(0).admin();
    support::await_waiting(&mut admin, &name);
    let released = Instant::now();
    guard.unlock().unwrap();
    assert!(waiter.join().unwrap());
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "not woken: {:?}",
        released.elapsed()
    );

    // Four threads, each with its own clients, take turns.
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let lock = redlock(&masters, Duration::from_secs(5)).lock(&name);
            let (inside, overlaps) = (inside.clone(), overlaps.clone());
            thread::spawn(move || {
                let mut rounds = 0;
                let end = Instant::now() + Duration::from_secs(2);
                while Instant::now() < end && rounds < 10_000 {
                    let guard = lock
                        .try_lock(Duration::from_secs(10), None)
                        .unwrap()
                        .expect("a 10 s wait ran out: deadlocked?");
                    if inside.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    thread::sleep(Duration::from_micros(300));
                    inside.store(false, Ordering::SeqCst);
                    guard.unlock().unwrap();
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let total: u64 = support::join_all(threads, Duration::from_secs(30), "a thread")
        .into_iter()
        .sum();
    assert!(total > 20, "too little happened: {total}");
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
}

#[test]
fn a_lease_too_short_for_the_round_trips_never_counts_as_held() {
    let masters = Masters::start(3);
    let rl = redlock(&masters, Duration::from_secs(5));
    let name = unique("short");
    // 1 ms minus the drift allowance (2 ms) leaves no validity, however fast the masters.
    let got = rl
        .lock(&name)
        .try_lock(Duration::from_millis(200), Some(Duration::from_millis(1)))
        .unwrap();
    assert!(got.is_none());
    assert!(matches!(
        RedlockClient::new(Vec::new()),
        Err(Error::InvalidArgument(_))
    ));
}

/// Entry point of the checker's child processes; does nothing unless started by a checker.
#[test]
#[ignore = "run as a child process by the checker"]
fn checker_child() {
    support::checker::run_child();
}

#[test]
fn the_checker_over_redlock_sees_no_overlap_when_one_master_at_a_time_fails() {
    let mut masters = Masters::start(3);
    let resource = support::RedisServer::start();
    let config = support::checker::Config {
        processes: 3,
        threads: 2,
        locks: 1,
        hold: Duration::from_millis(5),
        wait: Duration::from_secs(5),
        watchdog: Duration::from_millis(900),
        response_timeout: Duration::from_millis(500),
        kinds: vec![support::checker::Checked::Lock],
        layout: redlatch::Layout::Redlatch,
    };
    let checker = support::checker::Checker::start(
        &masters.urls().join(","),
        &resource.url(),
        &config,
        || support::child_test_command("checker_child"),
    );
    assert!(
        eventually(Duration::from_secs(20), || checker.counts().sections > 20),
        "the children did not start"
    );
    // One master at a time loses everything (kill -9, restart without persistence) or stops
    // past the watchdog timeout: the other two still make a majority.
    for fault in 0..6 {
        thread::sleep(Duration::from_millis(700));
        let i = fault % 3;
        if fault % 2 == 0 {
            masters.server_mut(i).restart();
        } else {
            let pid = masters.server(i).pid();
            support::signal(pid, "-STOP");
            thread::sleep(config.watchdog + Duration::from_millis(300));
            support::signal(pid, "-CONT");
        }
    }
    thread::sleep(Duration::from_millis(700));
    let within = config.wait + Duration::from_secs(15);
    let (counts, leftovers, ()) = checker.finish(within, || ());
    eprintln!("{counts:?}");
    assert_eq!(counts.hung, 0, "a child did not finish");
    assert!(counts.sections > 100, "too little happened: {counts:?}");
    assert_eq!(
        counts.overtaken, 0,
        "two Redlock holders at once: {counts:?}"
    );
    assert_eq!(counts.out_of_order, 0, "{counts:?}");
    assert_eq!(counts.rejected, 0, "{counts:?}");
    assert_eq!(counts.unreported, 0, "{counts:?}");
    assert_eq!(counts.other_errors, 0, "{counts:?}");
    assert!(leftovers.iter().all(|l| l.threads <= 0), "{leftovers:?}");
}

#[test]
fn a_member_lost_while_waiting_does_not_count_towards_the_majority() {
    // Three masters. `rl` takes master 0 and waits on master 1 (held by B), keeping master 0.
    // Master 0's lock is then taken from it (force-unlocked and taken by C), and renewal
    // marks that member lost. When B hands over master 1, `rl` has 1 and a lost 0 while 2 is
    // busy: that is not a majority, and must not be returned as one.
    let masters = Masters::start(3);
    let rl = redlock(&masters, Duration::from_millis(600));
    let plain = |i: usize| Client::open(&masters.urls()[i]).unwrap();
    let name = unique("lost-member");
    let (b1, d2, c0) = (plain(1), plain(2), plain(0));
    let held_1 = b1.lock(&name).lock().unwrap();
    let held_2 = d2.lock(&name).lock().unwrap();
    let lock = rl.lock(&name);
    let waiter = thread::spawn(move || {
        lock.try_lock(Duration::from_secs(10), None)
            .unwrap()
            .map(|g| (g.is_lost(), g.held_on()))
    });
    assert!(eventually(Duration::from_secs(5), || held_on(
        &masters, 0, &name
    )));
    thread::sleep(Duration::from_millis(300)); // waiting on master 1 now
    let thief = c0.lock(&name);
    assert!(thief.force_unlock().unwrap());
    let stolen = thief
        .try_lock(Duration::ZERO, None)
        .unwrap()
        .expect("free after force");
    thread::sleep(Duration::from_millis(1000)); // renewal finds master 0's member gone
    drop(held_1); // hands master 1 to the waiter
    thread::sleep(Duration::from_millis(300));
    drop(stolen); // master 0 is free again: the waiter can now have a real majority
    let (lost, held) = waiter
        .join()
        .unwrap()
        .expect("masters 0 and 1 came free in time");
    assert!(
        !lost,
        "returned a Redlock guard held on {held} of 3 masters, already lost"
    );
    drop(held_2);
}

/// The error of `RedlockClient::new(clients)`, which must refuse them as `InvalidArgument`.
fn refused(clients: Vec<Client>) -> String {
    match RedlockClient::new(clients) {
        Err(Error::InvalidArgument(message)) => message,
        Err(e) => panic!("refused, but not as InvalidArgument: {e:?}"),
        Ok(_) => panic!("one server given twice was accepted as two masters"),
    }
}

#[test]
fn one_server_given_twice_is_refused_naming_the_duplicate() {
    let server = support::RedisServer::start();
    let url = server.url();
    let port = url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let open = |url: &str| Client::open(url).unwrap();
    let c = open(&url);

    // One client three times: a quorum of one.
    let message = refused(vec![c.clone(), c.clone(), c.clone()]);
    println!("{message}");
    assert!(message.contains("masters 0 and 1"), "{message}");
    assert!(message.contains(c.id()), "{message}");

    // Three clients of one address.
    let message = refused(vec![open(&url), open(&url), open(&url)]);
    println!("{message}");
    assert!(message.contains("masters 0 and 1"), "{message}");
    assert!(
        message.contains(&format!("(127.0.0.1:{port})")),
        "{message}"
    );

    // The same server under another loopback name, and in another database: one process,
    // which fails for both.
    let other = support::RedisServer::start();
    let message = refused(vec![
        open(&other.url()),
        open(&format!("redis://localhost:{port}/")),
        open(&format!("redis://127.0.0.1:{port}/3")),
    ]);
    println!("{message}");
    assert!(message.contains("masters 1 and 2"), "{message}");
    assert!(
        message.contains(&format!("(localhost:{port} and 127.0.0.1:{port})")),
        "{message}"
    );

    // Distinct servers are fine, and a lock over them is held on each.
    let third = support::RedisServer::start();
    let rl = RedlockClient::new(vec![c, open(&other.url()), open(&third.url())]).unwrap();
    let guard = rl.lock(&unique("distinct")).lock().unwrap();
    assert_eq!(guard.held_on(), 3);
}
