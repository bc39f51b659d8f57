//! Soak: the safety checker under random faults, for a while, watching for leaks.
//!
//! ```text
//! SOAK_SECS=600 cargo run --release --example soak
//! ```
//!
//! Starts two private redis-servers (the locks', and a protected resource's), runs the
//! checker of `tests/support/checker.rs` (threads in several clients taking turns on a few
//! locks, writing to the resource with their fencing tokens) and injects a random fault every
//! few seconds: command or pub/sub connections killed, SCRIPT FLUSH, CLIENT PAUSE, the lock
//! server stopped (SIGSTOP) for less or more than the watchdog timeout, or killed and
//! restarted without persistence. Every 10 s it prints acquisitions, wait percentiles, faults,
//! holders told their lock was lost, errors, resident memory, threads, the clients' Redis
//! connections and subscribed channels. At the end it stops the clients and checks that
//! threads, connections and channels are back to where they started and memory within a
//! tolerance, and gives the checker's verdict: every overlap and every rejected fenced write
//! must belong to a holder that was told. Exits non-zero otherwise.
//!
//! Knobs: `SOAK_SECS` (default 60), `CLIENTS` (3), `THREADS` (3), `LOCKS` (3).

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use support::RedisServer;
use support::checker::{Checker, Config};

/// How much resident memory may grow from the baseline (taken after the first period).
const MEMORY_TOLERANCE_KB: u64 = 20 * 1024;
const PERIOD: Duration = Duration::from_secs(10);

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Connections to the lock server other than the admin's own.
fn client_connections(admin: &mut redis::Connection) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(admin)
        .unwrap_or_default();
    list.lines().count().saturating_sub(1)
}

fn channels(admin: &mut redis::Connection) -> usize {
    support::pubsub_channels(admin, "*").len()
}

fn percentile(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() -> ExitCode {
    let secs = knob("SOAK_SECS", 60);
    let watchdog = Duration::from_secs(2);
    let config = Config {
        clients: knob("CLIENTS", 3) as usize,
        threads: knob("THREADS", 3) as usize,
        locks: knob("LOCKS", 3) as usize,
        hold: Duration::from_millis(2),
        wait: Duration::from_secs(10),
        watchdog,
        response_timeout: Duration::from_secs(1),
    };
    let mut server = RedisServer::start();
    let resource = RedisServer::start();
    let threads_before = support::thread_count();
    println!("soak: {secs} s, {config:?}, locks at {}", server.url());

    let checker = Checker::start(&server.url(), &resource.url(), &config);
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let mut next_report = start + PERIOD;
    let mut next_fault = start + Duration::from_secs(3);
    let mut rng = support::checker::XorShift(0x5eed_1234_abcd_ef01);
    let mut faults = 0u64;
    let mut last_sections = 0;
    let mut rss_baseline = None;
    while Instant::now() < end {
        thread::sleep(Duration::from_millis(100));
        if Instant::now() >= next_fault {
            inject(&mut server, &mut rng, watchdog);
            faults += 1;
            next_fault = Instant::now() + Duration::from_millis(2000 + rng.next() % 4000);
        }
        if Instant::now() >= next_report {
            next_report += PERIOD;
            let counts = checker.counts();
            let mut waits = checker.take_waits();
            let mut admin = server.admin();
            let rss = rss_kb();
            rss_baseline.get_or_insert(rss);
            println!(
                "{:5.0} s  {:6} acq ({:5}/s)  wait p50 {:6} µs p99 {:7} µs  faults {:3}  told lost {:3}  \
                 unreported {}  errors {:4}  rss {:6} kB  threads {:3}  conns {:3}  channels {:3}",
                start.elapsed().as_secs_f64(),
                counts.sections,
                (counts.sections - last_sections) / PERIOD.as_secs(),
                percentile(&mut waits, 0.5),
                percentile(&mut waits, 0.99),
                faults,
                counts.reported_lost,
                counts.unreported,
                counts.errors,
                rss,
                support::thread_count(),
                client_connections(&mut admin),
                channels(&mut admin),
            );
            last_sections = counts.sections;
        }
    }

    let counts = match checker.finish(Duration::from_secs(60)) {
        Some(counts) => counts,
        None => {
            println!("FAIL: a worker hung");
            return ExitCode::FAILURE;
        }
    };
    // The clients are gone with their workers: their threads, connections and channels too.
    let mut admin = server.admin();
    let settled = support::eventually(Duration::from_secs(10), || {
        support::thread_count() == threads_before
            && client_connections(&mut admin) == 0
            && channels(&mut admin) == 0
    });
    let rss = rss_kb();
    let grown = rss.saturating_sub(rss_baseline.unwrap_or(rss));
    println!("--- after {secs} s and {faults} faults: {counts:?}");
    println!(
        "threads {} (before {threads_before}), connections {}, channels {}, rss {rss} kB (+{grown} kB over the first period)",
        support::thread_count(),
        client_connections(&mut admin),
        channels(&mut admin),
    );
    let mut ok = true;
    if counts.unreported > 0 {
        println!(
            "FAIL: {} overlaps or rejected writes were never reported",
            counts.unreported
        );
        ok = false;
    }
    if !settled {
        println!("FAIL: threads, connections or channels did not return to their baseline");
        ok = false;
    }
    if grown > MEMORY_TOLERANCE_KB {
        println!("FAIL: resident memory grew by {grown} kB (tolerance {MEMORY_TOLERANCE_KB} kB)");
        ok = false;
    }
    if ok {
        println!("verdict: safe (every overlap and rejected write was reported), nothing leaked");
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One random fault on the lock server.
fn inject(server: &mut RedisServer, rng: &mut support::checker::XorShift, watchdog: Duration) {
    let mut admin = server.admin();
    let signal = support::signal;
    match rng.next() % 8 {
        0 => drop(
            redis::cmd("CLIENT")
                .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
                .query::<i64>(&mut admin),
        ),
        1 => drop(
            redis::cmd("CLIENT")
                .arg(&["KILL", "TYPE", "pubsub"])
                .query::<i64>(&mut admin),
        ),
        2 => drop(redis::cmd("SCRIPT").arg("FLUSH").query::<()>(&mut admin)),
        3 => drop(
            redis::cmd("CLIENT")
                .arg(&["PAUSE", "500", "WRITE"])
                .query::<()>(&mut admin),
        ),
        4 => drop(
            redis::cmd("CLIENT")
                .arg(&["PAUSE", "500", "ALL"])
                .query::<()>(&mut admin),
        ),
        5 => {
            // Stopped for less than the watchdog timeout: the locks survive.
            signal(server.pid(), "-STOP");
            thread::sleep(watchdog / 3);
            signal(server.pid(), "-CONT");
        }
        6 => {
            // Stopped past it: the locks expire under their holders.
            signal(server.pid(), "-STOP");
            thread::sleep(watchdog + Duration::from_millis(500));
            signal(server.pid(), "-CONT");
        }
        _ => server.restart(),
    }
}
