//! The figures of `Layout::Redisson`: what speaking Redisson's layout costs against our own,
//! and against the emulated Java client (`tests/support/jvm.rs`), all measured in this run on
//! this server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::contenders::{Contender, Handle, Polling, Redlatch};
use super::figures::Figures;
use super::scenario::{self, Contended};
use super::stats::{percentile, quantile_ratio, ratio, time_one};
use super::support::eventually;
use super::support::jvm::{self, Jvm};

/// Java's "no lease": the watchdog's 30 s, renewed.
const JAVA_LEASE: i64 = -1;

/// Uncontended cycles in both layouts, hand-offs to a waiter against the polling lock, and
/// requests per contended acquisition.
pub fn figures(f: &mut Figures, url: &str, secs: Duration) {
    eprintln!("Redisson layout: uncontended cycles, alternating with our own layout's");
    let ours = redlatch::Client::open(url).unwrap();
    let theirs = redlatch::Client::builder(url)
        .layout(redlatch::Layout::Redisson)
        .build()
        .unwrap();
    let (ours, theirs) = (ours.lock("cycle-ours"), theirs.lock("cycle-redisson"));
    let java = Jvm::new(url);
    let mut samples: [Vec<Duration>; 3] = Default::default();
    // Blocks of 300 of each in turn, as the main cycles: a slow spell falls on both alike.
    for round in 0..11 {
        for (which, all) in samples.iter_mut().enumerate() {
            for _ in 0..300 {
                let one = match which {
                    0 | 1 => {
                        let lock = if which == 0 { &ours } else { &theirs };
                        time_one(|| {
                            let guard = lock.try_lock(Duration::ZERO, None).unwrap().unwrap();
                            guard.unlock().unwrap();
                        })
                    }
                    // Java's cycle: acquire, unlock; the unlock latch's DEL that follows
                    // goes out without waiting in Java, so it is left out here.
                    _ => time_one(|| {
                        assert!(java.lock_acquire("cycle-java", 1, JAVA_LEASE).is_none());
                        let request = jvm::new_request_id();
                        assert_eq!(java.unlock_request("cycle-java", 1, &request), Some(1));
                    }),
                };
                if round > 0 {
                    all.push(one);
                }
            }
        }
    }
    let [mut ours_cycles, mut redisson_cycles, mut java_cycles] = samples;
    f.put(
        "redisson_cycle_over_redlatch_cycle",
        quantile_ratio(&mut redisson_cycles, &mut ours_cycles, 0.5),
        "<= 1.0",
        "uncontended lock+unlock in Redisson's layout over our own layout's (p50)",
    );
    f.put(
        "redisson_cycle_over_emulated_java_cycle",
        quantile_ratio(&mut redisson_cycles, &mut java_cycles, 0.5),
        "<= 1.05",
        "ours in Redisson's layout over the emulated Java service's own lock+unlock (p50)",
    );
    f.put(
        "redisson_cycle_p99_over_redlatch_cycle",
        quantile_ratio(&mut redisson_cycles, &mut ours_cycles, 0.99),
        "",
        "the same at p99",
    );

    let four = Contended {
        clients: 4,
        threads_per_client: 1,
        hold: Duration::from_millis(1),
        hold_spread: Duration::ZERO,
        pause: Duration::from_millis(1),
        duration: secs,
    };
    eprintln!("Redisson layout: hand-off to a waiter, 4 threads, releaser pauses 1 ms");
    let redisson = Redlatch::with_layout(url, 4, redlatch::Layout::Redisson);
    let mut o = scenario::contended(&redisson, &four, url);
    drop(redisson);
    eprintln!("Redisson layout: the emulated Java services, the same scenario");
    let mut j = scenario::contended(&JavaFleet::new(url, 4), &four, url);
    eprintln!("Redisson layout: the polling lock, the same scenario");
    let mut p = scenario::contended(&Polling::new(url), &four, url);
    let (o50, p50) = (
        percentile(&mut o.handoffs, 0.5),
        percentile(&mut p.handoffs, 0.5),
    );
    f.put(
        "redisson_handoff_us_p50",
        o50.as_secs_f64() * 1e6,
        "",
        "Redisson's layout, 4 threads, releaser pauses 1 ms: hand-off, µs",
    );
    f.put(
        "redisson_handoff_p50_over_polling",
        ratio(o50, p50),
        "<= 1.3",
        "the same over the polling lock's, measured right after it",
    );
    f.put(
        "java_handoff_p50_over_polling",
        quantile_ratio(&mut j.handoffs, &mut p.handoffs, 0.5),
        "",
        "the emulated Java services' own hand-off over the polling lock's, same scenario",
    );
    f.put(
        "redisson_handoff_p99_over_polling",
        quantile_ratio(&mut o.handoffs, &mut p.handoffs, 0.99),
        "",
        "the same at p99",
    );
    f.put(
        "redisson_requests_per_acquisition_one_thread_per_client",
        o.commands as f64 / o.acquisitions.max(1) as f64,
        "",
        "requests clients sent per acquisition, 4 clients of one thread",
    );

    let four_by_four = Contended {
        threads_per_client: 4,
        pause: Duration::ZERO,
        ..four
    };
    eprintln!("Redisson layout: 16 threads in 4 clients on one lock");
    let redisson = Redlatch::with_layout(url, 4, redlatch::Layout::Redisson);
    let o = scenario::contended(&redisson, &four_by_four, url);
    drop(redisson);
    eprintln!("Redisson layout: 16 emulated Java threads in 4 JVMs");
    let j = scenario::contended(&JavaFleet::new(url, 4), &four_by_four, url);
    f.put(
        "java_requests_per_acquisition",
        j.commands as f64 / j.acquisitions.max(1) as f64,
        "",
        "the same scenario, the emulated Java services: Redisson's own protocol",
    );
    let acquisitions = o.acquisitions.max(1) as f64;
    f.put(
        "redisson_requests_per_acquisition",
        o.commands as f64 / acquisitions,
        "<= 3",
        "requests clients sent per contended acquisition (16 threads, 4 clients, hold 1 ms)",
    );
    f.put(
        "redisson_acquisitions_per_s",
        acquisitions / o.duration.as_secs_f64(),
        "",
        "throughput of the same",
    );
    f.put(
        "redisson_self_handoff_share",
        o.self_handoffs as f64 / o.handoffs.len().max(1) as f64,
        "",
        "releasing thread took it straight back (Redisson's lock is not fair)",
    );
    if o.timeouts > 0 {
        f.put(
            "redisson_timeouts",
            o.timeouts as f64,
            "0",
            "acquisitions that waited 10 s in vain",
        );
    }
}

/// Release-to-holding latency across the two sides, 200 times each way: a Java release that
/// wakes our waiter, and ours that wakes a Java waiter.
pub fn wake_figures(f: &mut Figures, url: &str) {
    eprintln!("Redisson layout: wake-ups across the two sides");
    let ours = redlatch::Client::builder(url)
        .layout(redlatch::Layout::Redisson)
        .build()
        .unwrap();
    let java = Jvm::new(url);
    let (mut to_rust, mut to_java) = (Vec::new(), Vec::new());
    for round in 0..200 {
        let name = format!("wake-{round}");
        // Java holds; our thread waits; Java releases.
        assert!(java.lock_acquire(&name, 1, JAVA_LEASE).is_none());
        let lock = ours.lock(&name);
        let waiter = thread::spawn(move || {
            let guard = lock.try_lock(Duration::from_secs(10), None).unwrap();
            let at = Instant::now();
            (at, guard.is_some())
        });
        assert!(
            eventually(Duration::from_secs(10), || ours.stats().waiting_threads > 0),
            "our waiter never waited"
        );
        thread::sleep(Duration::from_millis(2));
        let released = Instant::now();
        assert_eq!(java.unlock(&name, 1), Some(1));
        let (at, got) = waiter.join().unwrap();
        assert!(got);
        to_rust.push(at - released);

        // Ours holds; a Java thread waits; ours releases.
        let guard = ours.lock(&name).lock().unwrap();
        let waiting = java.clone();
        let before = java.commands_sent();
        let waiter = {
            let name = name.clone();
            thread::spawn(move || {
                let got = waiting.try_lock(&name, 2, Duration::from_secs(10), JAVA_LEASE);
                (Instant::now(), got)
            })
        };
        // The Java waiter attempts, subscribes and attempts again before it sleeps (three
        // commands: tests/redisson_interop.rs waits the same way).
        assert!(
            eventually(Duration::from_secs(10), || java.commands_sent()
                >= before + 3),
            "the Java waiter never parked"
        );
        thread::sleep(Duration::from_millis(2));
        let released = Instant::now();
        drop(guard);
        let (at, got) = waiter.join().unwrap();
        assert!(got);
        to_java.push(at - released);
        assert_eq!(java.unlock(&name, 2), Some(1));
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    f.put(
        "java_to_rust_wake_p50_us",
        us(percentile(&mut to_rust, 0.5)),
        "(reported)",
        "a Java release -> our waiter holds the lock, µs",
    );
    f.put(
        "rust_to_java_wake_p50_us",
        us(percentile(&mut to_java, 0.5)),
        "(reported)",
        "our release -> the emulated Java waiter holds the lock, µs",
    );
}

/// The emulated Java services (`support::jvm`) as a contender: one JVM per client, a Java
/// thread id per handle.
struct JavaFleet {
    jvms: Vec<Jvm>,
    threads: AtomicU64,
}

impl JavaFleet {
    fn new(url: &str, clients: usize) -> JavaFleet {
        JavaFleet {
            jvms: (0..clients).map(|_| Jvm::new(url)).collect(),
            threads: AtomicU64::new(1),
        }
    }
}

impl Contender for JavaFleet {
    fn name(&self) -> &'static str {
        "java"
    }
    fn handle(&self, client: usize, lock: &str) -> Box<dyn Handle> {
        Box::new(JavaHandle {
            jvm: self.jvms[client].clone(),
            lock: lock.to_string(),
            thread: self.threads.fetch_add(1, Ordering::Relaxed),
        })
    }
    fn inner_commands(&self) -> &'static [&'static str] {
        // What RLock's acquire and unlock run inside the script, but DEL: Java also sends
        // DEL itself (the unlock latch's), so the script's own DEL of the hash is counted by
        // `inner_publishes_per_release` below instead.
        &[
            "exists", "hexists", "hincrby", "pexpire", "pttl", "get", "set",
        ]
    }
    fn inner_publishes_per_release(&self) -> u64 {
        2 // the PUBLISH of "0", and the DEL of the hash
    }
}

struct JavaHandle {
    jvm: Jvm,
    lock: String,
    thread: u64,
}

impl Handle for JavaHandle {
    fn lock(&mut self, wait: Duration) -> bool {
        self.jvm.try_lock(&self.lock, self.thread, wait, JAVA_LEASE)
    }
    fn unlock(&mut self) {
        assert_eq!(self.jvm.unlock(&self.lock, self.thread), Some(1));
    }
}
