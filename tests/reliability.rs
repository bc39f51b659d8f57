//! The safety checker (`tests/support/checker.rs`) under injected faults: threads in several
//! clients take turns on locks and write to a protected resource with their fencing tokens.
//! - Faults that keep the lock state (killed command and pub/sub connections, SCRIPT FLUSH,
//!   CLIENT PAUSE shorter than the lease): no overlap, no rejected write, no guard reported
//!   lost, no error, nothing hung.
//! - Faults that lose it (kill -9 and restart without persistence, SIGSTOP of the server past
//!   the watchdog timeout): every overlap and every rejected write belongs to a holder that
//!   was told its lock was lost, and nothing hangs.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use support::RedisServer;
use support::checker::{Checker, Config};

#[test]
fn fenced_writes_stay_safe_under_faults_that_keep_the_lock_state() {
    let server = RedisServer::start();
    let resource = RedisServer::start();
    let config = Config {
        clients: 3,
        threads: 3,
        locks: 2,
        hold: Duration::from_micros(500),
        wait: Duration::from_secs(10),
        watchdog: Duration::from_secs(2),
        response_timeout: Duration::from_secs(3),
    };
    let checker = Checker::start(&server.url(), &resource.url(), &config);

    let mut admin = server.admin();
    let faults: [&[&str]; 5] = [
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
        &["CLIENT", "KILL", "TYPE", "pubsub"],
        &["SCRIPT", "FLUSH"],
        &["CLIENT", "PAUSE", "300", "WRITE"],
        &["CLIENT", "PAUSE", "300", "ALL"],
    ];
    let end = Instant::now() + Duration::from_secs(4);
    let mut injected = 0;
    while Instant::now() < end && injected < 1_000 {
        thread::sleep(Duration::from_millis(150));
        let fault = faults[injected % faults.len()];
        let _: redis::RedisResult<redis::Value> =
            redis::cmd(fault[0]).arg(&fault[1..]).query(&mut admin);
        injected += 1;
    }
    let counts = checker
        .finish(Duration::from_secs(30))
        .expect("a worker hung");
    eprintln!("{injected} faults: {counts:?}");
    assert!(
        injected >= 10 && counts.sections > 50,
        "too little happened"
    );
    assert_eq!(counts.overtaken, 0, "two holders at once");
    assert_eq!(counts.rejected, 0, "a fenced write was rejected");
    assert_eq!(counts.reported_lost, 0, "a guard was reported lost");
    assert_eq!(counts.errors, 0, "unexpected errors");
}

#[test]
fn every_overlap_under_faults_that_lose_the_lock_state_is_reported() {
    let mut server = RedisServer::start();
    // The protected resource is another system: it does not restart with the lock server.
    let resource = RedisServer::start();
    let watchdog = Duration::from_millis(900);
    let config = Config {
        clients: 3,
        threads: 2,
        locks: 1,
        // Long enough that faults land inside critical sections.
        hold: Duration::from_millis(300),
        wait: Duration::from_secs(3),
        watchdog,
        response_timeout: Duration::from_millis(500),
    };
    let checker = Checker::start(&server.url(), &resource.url(), &config);

    let mut faults = 0;
    while faults < 4 {
        thread::sleep(Duration::from_millis(500));
        if faults % 2 == 0 {
            server.restart();
        } else {
            let pid = server.pid().to_string();
            let signal = |sig: &str| {
                std::process::Command::new("kill")
                    .args([sig, &pid])
                    .status()
                    .unwrap()
            };
            signal("-STOP");
            thread::sleep(watchdog + Duration::from_millis(400));
            signal("-CONT");
        }
        faults += 1;
    }
    thread::sleep(Duration::from_secs(1));
    let counts = checker
        .finish(Duration::from_secs(60))
        .expect("a worker hung");
    eprintln!("{faults} faults: {counts:?}");
    assert!(counts.sections > 10, "too little happened");
    assert_eq!(
        counts.unreported, 0,
        "overlaps or rejected writes never reported"
    );
}
