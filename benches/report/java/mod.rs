//! redlatch against the real Redisson (`interop/redisson/`, a JVM driven over stdin/stdout by
//! `support::java`), in the same run, on the same Redis: Redisson's `getLock`, ours in our
//! layout and ours in Redisson's layout, each side one process with one client (one
//! `RedissonClient`, one `redlatch::Client`), on the same scenarios.
//!
//! Both sides run the same loop (`Loop.java`, and [`ours`] here, a copy of it): each thread
//! picks a name, notes the time, acquires, notes it, holds, notes it, releases, notes it,
//! thinks. The Java loop runs inside the JVM and sends every acquisition's four times back
//! after the loop, so no stdin round trip falls inside a timed span; both clocks are
//! CLOCK_MONOTONIC. Everything is then computed from those samples alike:
//! - a cycle is the acquire called to the release returned, uncontended;
//! - a hand-off is the gap between a release called and the next acquisition returning, when
//!   the next holder had been waiting since before that release (a thread that takes the lock
//!   back straight after its own release was not waiting, and is left out);
//! - a wait is the acquire called to its return.
//!
//! Server figures are `INFO commandstats` deltas over the same runs (`ping` and the report's
//! own `info`, `client|list`, `config|*` left out); requests (the commands a client sends) are
//! counted from `MONITOR` in a separate, shorter run of each scenario, because `MONITOR` slows
//! the server. Client CPU is the JVM's process CPU over its loop against this process's
//! (getrusage) over ours. The JVM is warmed up on every scenario first, and the sides take
//! turns in blocks, so that a slow spell of the machine falls on all three.

mod run;
mod tally;

use std::collections::HashMap;
use std::time::Duration;

use super::contenders::connection;
use super::figures::Figures;
use super::scenario::MAX_WAIT;
use super::support::java::JavaService;

use run::{Side, blocks, count_requests, warm};
use tally::{Tally, max_us, quantile_us};

/// The Java service's thread number for its loops (its requests run in order).
pub(super) const LOOP_THREAD: u64 = 7_000_000;
/// `CLIENT SETNAME` of our two clients, so that `CLIENT LIST` tells their connections.
pub(super) const OURS_NAME: &str = "report-ours";
pub(super) const REDISSON_LAYOUT_NAME: &str = "report-redisson-layout";
/// The three sides, in the order of every array here; the first is the key prefix of the raw
/// figures.
pub(super) const SIDES: [&str; 3] = ["java_redisson", "redlatch", "redisson_layout"];

/// One scenario, as both sides run it (`Loop.java`'s arguments).
#[derive(Clone, Debug)]
pub(super) struct Spec {
    pub(super) name: String,
    /// More than 1: a name `<name>-<k>` at random per acquisition.
    pub(super) keys: usize,
    pub(super) threads: usize,
    pub(super) duration: Duration,
    pub(super) hold: Duration,
    pub(super) think: Duration,
    /// `tryLock(wait)`; `None`: `lock()`.
    pub(super) wait: Option<Duration>,
    pub(super) samples: bool,
}

/// One acquisition: its thread, and acquire called, returned, release called, returned
/// (CLOCK_MONOTONIC ns).
#[derive(Clone, Copy, Debug)]
pub(super) struct Sample {
    pub(super) thread: u32,
    pub(super) t0: u64,
    pub(super) t1: u64,
    pub(super) t2: u64,
    pub(super) t3: u64,
}

/// What one run of a loop gave.
#[derive(Default)]
pub(super) struct Run {
    pub(super) acquisitions: u64,
    pub(super) timeouts: u64,
    pub(super) errors: u64,
    pub(super) first_error: Option<String>,
    pub(super) per_thread: Vec<u64>,
    pub(super) samples: Vec<Sample>,
    pub(super) cpu: Duration,
    pub(super) elapsed: Duration,
    /// The JVM's JIT compilers' time over the loop.
    pub(super) jit: Duration,
}

/// `INFO commandstats`: calls and µs by command.
pub(super) type Stats = HashMap<String, (u64, u64)>;

/// `metric` for the three sides: Java's raw figure, and both of ours over it.
fn put(
    f: &mut Figures,
    metric: &str,
    values: [f64; 3],
    targets: [&str; 2],
    unit: &str,
    what: &str,
) {
    eprintln!(
        "    {metric}: Redisson {:.3}, ours {:.3}, ours in Redisson's layout {:.3} ({unit})",
        values[0], values[1], values[2]
    );
    f.put(
        &format!("{}_{metric}", SIDES[0]),
        values[0],
        "(reference)",
        &format!("{what}, {unit}: the real Redisson"),
    );
    f.put(
        &format!("{metric}_over_java_redisson"),
        values[1] / values[0],
        targets[0],
        "the same, ours in our layout over Redisson's",
    );
    f.put(
        &format!("redisson_layout_{metric}_over_java_redisson"),
        values[2] / values[0],
        targets[1],
        "the same, ours in Redisson's layout over Redisson's",
    );
}

fn each(tallies: &mut [Tally; 3], mut figure: impl FnMut(&mut Tally) -> f64) -> [f64; 3] {
    let [a, b, c] = tallies;
    [figure(a), figure(b), figure(c)]
}

/// The section: every scenario on the three sides, and their figures.
pub fn figures(f: &mut Figures, url: &str, port: u16, secs: Duration) {
    eprintln!("the real Redisson: starting the Java service (Maven builds it on first use)");
    let java = JavaService::single(url);
    eprintln!(
        "  Redisson {}, java.version {}",
        java.redisson_version, java.java_version
    );
    f.note("java_redisson_version", &java.redisson_version);
    f.note("java_version", &java.java_version);
    let ours = redlatch::Client::builder(url)
        .name(OURS_NAME)
        .build()
        .unwrap();
    let redisson_layout = redlatch::Client::builder(url)
        .name(REDISSON_LAYOUT_NAME)
        .layout(redlatch::Layout::Redisson)
        .build()
        .unwrap();
    let sides = [
        Side::Java(&java),
        Side::Ours(&ours, OURS_NAME),
        Side::Ours(&redisson_layout, REDISSON_LAYOUT_NAME),
    ];
    let mut admin = connection(url);

    let block = (secs / 4).max(Duration::from_millis(500));
    let cycle = Spec {
        name: "java-cycle".into(),
        keys: 1,
        threads: 1,
        duration: (secs / 8).max(Duration::from_millis(250)),
        hold: Duration::ZERO,
        think: Duration::ZERO,
        wait: None,
        samples: true,
    };
    let t4 = Spec {
        name: "java-t4".into(),
        threads: 4,
        duration: block,
        hold: Duration::from_millis(1),
        think: Duration::from_millis(1),
        wait: Some(MAX_WAIT),
        ..cycle.clone()
    };
    let t16 = Spec {
        name: "java-t16".into(),
        threads: 16,
        think: Duration::ZERO,
        ..t4.clone()
    };
    let many = Spec {
        name: "java-many".into(),
        keys: 1000,
        hold: Duration::ZERO,
        samples: false,
        ..t16.clone()
    };
    let crowd = Spec {
        name: "java-crowd".into(),
        threads: super::knob("REPORT_CROWD", 200) as usize,
        duration: secs / 2,
        ..t16.clone()
    };

    eprintln!("  uncontended lock() + unlock(), one thread, in alternating blocks");
    let mut jit = (Duration::ZERO, Duration::ZERO);
    let mut add_jit = |(a, b): (Duration, Duration)| {
        jit.0 += a;
        jit.1 += b;
    };
    warm(&sides, &cycle);
    let mut t = blocks(&sides, &cycle, 6, &mut admin);
    count_requests(&sides, &cycle, &mut t, port, &mut admin);
    add_jit(diagnose("cycle", &t));
    put(
        f,
        "cycle_latency",
        each(&mut t, |t| quantile_us(&mut t.cycles, 0.5)),
        ["<= 0.8", "<= 0.8"],
        "µs p50",
        "uncontended lock() + unlock() at the caller, one thread",
    );
    put(
        f,
        "cycle_latency_p99",
        each(&mut t, |t| quantile_us(&mut t.cycles, 0.99)),
        ["", ""],
        "µs p99",
        "the same",
    );
    put(
        f,
        "server_usec_per_cycle",
        each(&mut t, |t| t.server_usec()),
        ["<= 1.0", "<= 1.0"],
        "µs",
        "Redis's time per uncontended cycle (INFO commandstats, each request once)",
    );
    put(
        f,
        "server_usec_all_per_cycle",
        each(&mut t, |t| t.server_usec_all()),
        ["", ""],
        "µs",
        "the same summed over every command, script-internal ones counted again",
    );
    put(
        f,
        "server_commands_per_cycle",
        each(&mut t, |t| t.server_commands()),
        ["", ""],
        "commands",
        "commands Redis ran per uncontended cycle, those inside scripts included",
    );
    put(
        f,
        "requests_per_cycle",
        each(&mut t, |t| t.requests()),
        ["", ""],
        "requests",
        "commands the client sent per uncontended cycle (MONITOR)",
    );
    put(
        f,
        "cycle_client_cpu",
        each(&mut t, |t| t.cpu_us_per_acquisition()),
        ["", ""],
        "µs",
        "the client process's CPU per uncontended cycle",
    );

    eprintln!("  4 threads on one lock, hold 1 ms, think 1 ms");
    warm(&sides, &t4);
    let mut t = blocks(&sides, &t4, 2, &mut admin);
    count_requests(&sides, &t4, &mut t, port, &mut admin);
    add_jit(diagnose("t4", &t));
    contended(f, "t4", &mut t, true);

    eprintln!("  16 threads on one lock, hold 1 ms");
    warm(&sides, &t16);
    let mut t = blocks(&sides, &t16, 2, &mut admin);
    count_requests(&sides, &t16, &mut t, port, &mut admin);
    add_jit(diagnose("t16", &t));
    contended(f, "t16", &mut t, false);

    eprintln!("  16 threads over 1,000 locks, no hold");
    warm(&sides, &many);
    let mut t = blocks(&sides, &many, 2, &mut admin);
    add_jit(diagnose("many", &t));
    put(
        f,
        "many_keys_throughput",
        each(&mut t, |t| t.throughput()),
        [">= 1.0", ">= 1.0"],
        "acquisitions/s",
        "16 threads over 1,000 locks, no hold",
    );
    put(
        f,
        "many_keys_client_cpu_per_acquisition",
        each(&mut t, |t| t.cpu_us_per_acquisition()),
        ["", ""],
        "µs",
        "the client process's CPU per acquisition, the same",
    );
    for (side, t) in SIDES.iter().zip(t.iter()) {
        if t.errors > 0 {
            f.put(
                &format!("{side}_many_keys_errors"),
                t.errors as f64,
                "0",
                &format!(
                    "acquisitions that failed, the first: {}",
                    t.first_error.as_deref().unwrap_or("?")
                ),
            );
        }
    }
    put(
        f,
        "many_keys_server_commands_per_acquisition",
        each(&mut t, |t| t.server_commands()),
        ["", ""],
        "commands",
        "commands Redis ran per acquisition, the same",
    );

    eprintln!(
        "  a crowd: {} threads on one lock, hold 1 ms",
        crowd.threads
    );
    warm(&sides, &crowd);
    let mut t = blocks(&sides, &crowd, 1, &mut admin);
    add_jit(diagnose("crowd", &t));
    put(
        f,
        "crowd_throughput",
        each(&mut t, |t| t.throughput()),
        ["", ""],
        "acquisitions/s",
        &format!("{} threads on one lock, hold 1 ms", crowd.threads),
    );
    put(
        f,
        "crowd_max_wait",
        each(&mut t, |t| max_us(&t.waits)),
        ["", ""],
        "µs",
        "the longest wait, the same (tryLock waits at most 10 s)",
    );
    put(
        f,
        "crowd_handoff_p50",
        each(&mut t, |t| quantile_us(&mut t.handoffs, 0.5)),
        ["", ""],
        "µs",
        "hand-off to a waiting thread, the same",
    );
    put(
        f,
        "crowd_starved_threads",
        each(&mut t, |t| {
            t.per_thread.iter().filter(|&&n| n == 0).count() as f64
        }),
        ["", ""],
        "threads",
        "threads that never got the lock, the same",
    );
    put(
        f,
        "crowd_timeouts",
        each(&mut t, |t| t.timeouts as f64),
        ["", ""],
        "tryLock calls",
        "waits that ran out (10 s), the same",
    );
    f.put(
        "java_redisson_jit_share",
        jit.0.as_secs_f64() / jit.1.as_secs_f64(),
        "(reference)",
        "the JVM's JIT compilers' time over its measured runs / their time: warm when near 0",
    );
}

/// The figures of a contended scenario on one lock (`t4` or `t16`).
fn contended(f: &mut Figures, scenario: &str, t: &mut [Tally; 3], headline: bool) {
    let what = if scenario == "t4" {
        "4 threads, one lock, hold 1 ms, think 1 ms"
    } else {
        "16 threads, one lock, hold 1 ms"
    };
    let key = |m: &str| {
        if headline {
            m.to_string()
        } else {
            format!("{scenario}_{m}")
        }
    };
    put(
        f,
        &key("handoff_p50"),
        each(t, |t| quantile_us(&mut t.handoffs, 0.5)),
        if headline {
            ["<= 0.6", "<= 0.8"]
        } else {
            ["", ""]
        },
        "µs",
        &format!("hand-off p50 (a release called -> a waiting thread's acquire returns), {what}"),
    );
    put(
        f,
        &key("handoff_p99"),
        each(t, |t| quantile_us(&mut t.handoffs, 0.99)),
        ["", ""],
        "µs",
        "the same, p99",
    );
    put(
        f,
        &format!("{scenario}_max_wait"),
        each(t, |t| max_us(&t.waits)),
        if scenario == "t16" {
            ["<= 0.5", "(reported)"]
        } else {
            ["", ""]
        },
        "µs",
        &format!("the longest wait, {what}"),
    );
    put(
        f,
        &format!("{scenario}_throughput"),
        each(t, |t| t.throughput()),
        if scenario == "t16" {
            [">= 1.0", ">= 1.0"]
        } else {
            ["", ""]
        },
        "acquisitions/s",
        what,
    );
    let requests = if scenario == "t16" {
        "requests_per_acquisition".to_string()
    } else {
        format!("{scenario}_requests_per_acquisition")
    };
    put(
        f,
        &requests,
        each(t, |t| t.requests()),
        if scenario == "t16" {
            ["<= 0.5", "<= 0.5"]
        } else {
            ["", ""]
        },
        "requests",
        &format!("commands the client sent per acquisition (MONITOR), {what}"),
    );
    put(
        f,
        &format!("{scenario}_server_commands_per_acquisition"),
        each(t, |t| t.server_commands()),
        ["", ""],
        "commands",
        "commands Redis ran per acquisition, those inside scripts included",
    );
    put(
        f,
        &format!("{scenario}_server_usec_per_acquisition"),
        each(t, |t| t.server_usec()),
        ["", ""],
        "µs",
        "Redis's time per acquisition, each request once",
    );
    let cpu = if scenario == "t16" {
        "client_cpu_per_acquisition".to_string()
    } else {
        format!("{scenario}_client_cpu_per_acquisition")
    };
    put(
        f,
        &cpu,
        each(t, |t| t.cpu_us_per_acquisition()),
        if scenario == "t16" {
            ["<= 0.5", "<= 0.5"]
        } else {
            ["", ""]
        },
        "µs",
        &format!("the client process's CPU per acquisition, {what}"),
    );
    put(
        f,
        &format!("{scenario}_self_handoff_share"),
        each(t, |t| t.self_handoffs as f64 / t.pairs.max(1) as f64),
        ["", ""],
        "share",
        "acquisitions by the thread that held the lock just before",
    );
}

/// What the tables leave out, for the log: timeouts and errors, the JVM's JIT time during the
/// measured runs (it should be near nothing once warm), the mean hand-off. Returns the JVM's
/// (JIT time, time) over the scenario.
fn diagnose(scenario: &str, t: &[Tally; 3]) -> (Duration, Duration) {
    for (side, t) in SIDES.iter().zip(t.iter()) {
        let mean_handoff = if t.handoffs.is_empty() {
            f64::NAN
        } else {
            t.handoffs.iter().sum::<u64>() as f64 / t.handoffs.len() as f64 / 1e3
        };
        eprintln!(
            "    {scenario} {side}: {} acquisitions, {} timeouts, {} errors, mean hand-off {mean_handoff:.0} µs, JIT {} ms",
            t.acquisitions,
            t.timeouts,
            t.errors,
            t.jit.as_millis()
        );
        if t.sent_acquisitions > 0 {
            let mut sent: Vec<(&String, &u64)> = t.sent.iter().collect();
            sent.sort();
            let per: Vec<String> = sent
                .iter()
                .map(|(name, n)| format!("{name} {:.3}", **n as f64 / t.sent_acquisitions as f64))
                .collect();
            eprintln!("      sent per acquisition: {}", per.join(", "));
        }
    }
    (t[0].jit, t[0].elapsed)
}
