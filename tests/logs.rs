//! What the crate logs, read through a test logger (`support::logs`): a loss in the words of
//! what was lost, and a server restart said once at WARN, the rest below it. The tests take
//! turns (one logger per process), each starting with an empty log.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use redlatch::Client;
use support::{RedisServer, eventually, unique};

const WARN: log::Level = log::Level::Warn;

/// A restart of the server under a client with a watchdog hold and a waiter: one WARN line
/// that says what happened and that it recovers; the detail at info and debug.
#[test]
fn a_server_restart_says_one_warn_line() {
    let logs = support::logs::capture();
    let _turn = logs.exclusive();
    let mut server = RedisServer::start();
    let client = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let name = unique("restart");
    let held = client.lock(&name).lock().unwrap();
    let waiter = {
        let lock = client.lock(&name);
        thread::spawn(move || {
            lock.try_lock(Duration::from_secs(8), None)
                .map(|g| g.is_some())
        })
    };
    assert!(eventually(Duration::from_secs(5), || client
        .stats()
        .waiting_threads
        == 1));
    logs.clear();
    let restarted = Instant::now();
    // Down long enough for the renewal thread and the subscriber to meet it down, as a real
    // restart is (loading, a supervisor's delay).
    server.kill();
    thread::sleep(Duration::from_millis(1500));
    server.restart();
    // Past a renewal round (a third of the watchdog timeout) and the subscriber's reconnect.
    thread::sleep(Duration::from_secs(3));
    for line in logs.lines() {
        println!("{:?} {}", line.level, line.text);
    }
    println!("{:?} after the restart", restarted.elapsed());
    let warned = logs.at(WARN);
    drop(held); // itself a WARN: the guard of a lost hold dropped
    let _ = waiter.join().unwrap();
    // The restart wiped the server (no persistence): the hold's loss is news of its own, a
    // WARN an operator needs, apart from the outage's.
    let (lost, outage): (Vec<String>, Vec<String>) = warned
        .into_iter()
        .partition(|l| l.contains("no longer held by us"));
    assert_eq!(outage.len(), 1, "one WARN for the outage: {outage:#?}");
    assert!(
        outage[0].contains(&format!("127.0.0.1:{}", server.port))
            && outage[0].contains("Until Redis answers again"),
        "what happened, and what is done meanwhile: {}",
        outage[0]
    );
    assert_eq!(lost.len(), 1, "{lost:#?}");
    let info = logs.at(log::Level::Info);
    assert!(
        info.iter()
            .any(|l| l.starts_with("Redis answers again, after")),
        "its end, said: {info:#?}"
    );
    // Nothing is lost: each failure is still in the log, below WARN.
    assert!(
        logs.at(log::Level::Debug)
            .iter()
            .any(|l| l.contains("lock renewal failed"))
    );
}

/// A loss is logged in the words of what was lost: a semaphore's permits are no lock, and a
/// fixed lease, never renewed, ran out because it was not released.
#[test]
fn a_loss_is_said_in_the_words_of_what_was_lost() {
    let logs = support::logs::capture();
    let _turn = logs.exclusive();
    let server = RedisServer::start();
    let client = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .unwrap();
    let other = Client::open(&server.url()).unwrap();

    // Permits taken from us (force-unlocked by another client), found by renewal.
    let name = unique("uploads");
    let sem = client.semaphore(&name);
    sem.set_permits(2).unwrap();
    let permits = sem.acquire(2).unwrap();
    assert!(other.semaphore(&name).force_unlock().unwrap());
    assert!(eventually(Duration::from_secs(5), || permits.is_lost()));
    drop(permits);
    let said = format!("permits of semaphore {name:?} are no longer held by us (ForceUnlocked)");
    let warned = logs.at(WARN);
    assert!(warned.iter().any(|l| l.starts_with(&said)), "{warned:#?}");
    let said = format!("permits of semaphore {name:?} were lost before the guard was dropped");
    assert!(warned.contains(&said), "{warned:#?}");
    assert!(
        !warned.iter().any(|l| l.starts_with("lock ")),
        "{warned:#?}"
    );

    // A fixed lease that runs out while held.
    logs.clear();
    let name = unique("fixed");
    let guard = client
        .lock(&name)
        .lock_with_lease(Duration::from_millis(300))
        .unwrap();
    thread::sleep(Duration::from_millis(400));
    assert!(guard.is_lost());
    let said =
        format!("lock {name:?}: its fixed lease of 300 ms ran out before it was released; lost");
    let warned = logs.at(WARN);
    assert!(warned.contains(&said), "{warned:#?}");
    assert!(!warned.iter().any(|l| l.contains("renewed")), "{warned:#?}");
}
