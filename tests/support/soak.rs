//! The soak: the safety checker under random faults of every kind for a while, watching for
//! leaks. Run by `examples/soak.rs` (default 60 s; 10 minutes for the README's figures) and,
//! for 30 s, by `tests/soak.rs` in CI.
//!
//! It starts two private redis-servers (the locks', reached through a fault-injecting proxy,
//! and a protected resource's), runs the checker's child processes and injects a random fault
//! every 1 to 3 s: command or pub/sub connections killed, SCRIPT FLUSH, CLIENT PAUSE, the
//! network partitioned or reset, the lock server stopped (SIGSTOP) for less or more than the
//! watchdog timeout or killed and restarted without persistence, a holder process stopped past
//! its lease. Every period it prints acquisitions, wait percentiles, faults, holders told
//! their lock was lost, errors by kind, the children's resident memory and threads, and the
//! lock server's client connections and subscribed channels.
//!
//! At the end it stops the children, which drop their clients, and checks:
//! - the checker's verdict: every overlap, out-of-order entry and rejected fenced write,
//!   and every broken promise of a read-write lock or semaphore (a writer with another
//!   holder, more permits in use than the total), belongs to a holder that was told its hold
//!   was lost; no child hung; no unexpected error. The workers take turns with every kind of
//!   the family. Latch waits released early are printed, not failed: a restart without
//!   persistence forgets a latch's count, which then reads 0, as documented;
//! - leaks: each child's threads back to what it had before its client, its resident memory
//!   within [`MEMORY_TOLERANCE_KB`] of what it had after the first period, and the lock
//!   server without connections or channels from the clients.

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use super::checker::{self, Checked, Checker, Config, Counts, Heap, XorShift};
use super::{Proxy, RedisServer};

/// How much a child's resident memory may grow from its baseline (taken after the first
/// period): allocator noise and buffers that grew to their working size, not a leak.
pub const MEMORY_TOLERANCE_KB: u64 = 20 * 1024;

/// The soak example's command line, in one line.
pub const USAGE: &str = "usage: soak [--seconds N] [--seed N] [--faults KIND,KIND...|none]  \
    (N decimal, or hex with 0x; KIND one of: kill-normal, kill-pubsub, script-flush, \
    pause-write, pause-all, partition, reset, stop-short, stop-long, restart, pause-holder; \
    environment: SOAK_SECS, SOAK_SEED, SOAK_FAULTS; default: 60 s, a random seed, printed so \
    that a run can be replayed, and every kind of fault)";

/// The longest soak accepted: a year, far below where `Instant` arithmetic overflows.
pub const MAX_SECONDS: u64 = 365 * 24 * 3600;

/// What the soak example was asked to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// How long to run.
    pub seconds: u64,
    /// Which faults, when; `None`: draw one (see [`random_seed`]).
    pub seed: Option<u64>,
    /// The kinds of fault to inject, as indices into [`FAULTS`]; `None`: every kind.
    pub faults: Option<Vec<usize>>,
    /// `--help`: print [`USAGE`] and run nothing.
    pub help: bool,
}

/// Reads the soak's options from its command line (`args`, without the program name) and
/// environment (`env` looks a variable up): `--seconds N` / `--seconds=N` over `SOAK_SECS`
/// (default 60), `--seed N` / `--seed=N` over `SOAK_SEED`. An unknown argument, a missing or
/// bad number, a zero duration or a zero seed (the fault generator would be stuck at zero) is
/// an error saying which: a typo must not turn into a default run that looks like the one
/// asked for.
pub fn parse_options(
    args: impl IntoIterator<Item = String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Options, String> {
    let mut seconds = None;
    let mut seed = None;
    let mut faults = None;
    let mut help = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_string(), Some(value.to_string()))
            }
            _ => (arg.clone(), None),
        };
        if flag == "--faults" {
            let Some(value) = inline.or_else(|| args.next()) else {
                return Err("--faults needs a list of kinds".into());
            };
            faults = Some(fault_kinds("--faults", &value)?);
            continue;
        }
        let slot = match flag.as_str() {
            "--seconds" => &mut seconds,
            "--seed" => &mut seed,
            "-h" | "--help" if inline.is_none() => {
                help = true;
                continue;
            }
            _ => return Err(format!("unknown argument {arg:?}")),
        };
        let Some(value) = inline.or_else(|| args.next()) else {
            return Err(format!("{flag} needs a number"));
        };
        *slot = Some(number(&flag, &value)?);
    }
    let seconds = match seconds {
        Some(n) => n,
        None => match env("SOAK_SECS") {
            Some(v) => number("SOAK_SECS", &v)?,
            None => 60,
        },
    };
    let seed = match seed {
        Some(n) => Some(n),
        None => env("SOAK_SEED")
            .map(|v| number("SOAK_SEED", &v))
            .transpose()?,
    };
    if !(1..=MAX_SECONDS).contains(&seconds) {
        return Err(format!(
            "seconds: {seconds} is not between 1 and {MAX_SECONDS}"
        ));
    }
    if seed == Some(0) {
        return Err("seed 0 would inject the same fault every second; use another".into());
    }
    let faults = match faults {
        Some(kinds) => Some(kinds),
        None => env("SOAK_FAULTS")
            .map(|v| fault_kinds("SOAK_FAULTS", &v))
            .transpose()?,
    };
    Ok(Options {
        seconds,
        seed,
        faults,
        help,
    })
}

/// The kinds of fault `value` names (`restart,reset`; `none` for none), as indices into
/// [`FAULTS`]; a name is a fault's with `-` for its spaces.
fn fault_kinds(what: &str, value: &str) -> Result<Vec<usize>, String> {
    if value == "none" {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(|name| {
            FAULTS
                .iter()
                .position(|fault| fault.replace(' ', "-") == name)
                .ok_or_else(|| format!("{what}: {name:?} is not a kind of fault"))
        })
        .collect()
}

/// `value` of `what` as a number: decimal, or hexadecimal after `0x` (as the soak prints its
/// seed).
fn number(what: &str, value: &str) -> Result<u64, String> {
    let parsed = match value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => value.parse(),
    };
    parsed.map_err(|_| format!("{what}: {value:?} is not a number"))
}

/// A seed nobody chose: a different fault sequence each run, never 0.
pub fn random_seed() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0.max(1)
}

/// What to run.
pub struct Soak {
    pub duration: Duration,
    /// How often to print a line.
    pub period: Duration,
    pub config: Config,
    /// The command that runs [`checker::run_child`] in a new process.
    pub child: fn() -> Command,
    /// Seeds the choice and timing of faults.
    pub seed: u64,
    /// The kinds of fault injected, as indices into [`FAULTS`] (empty: none).
    pub faults: Vec<usize>,
}

impl Soak {
    /// The soak's usual fleet, for `duration`.
    pub fn new(duration: Duration, child: fn() -> Command) -> Soak {
        Soak {
            duration,
            period: Duration::from_secs(10),
            config: Config {
                processes: 3,
                threads: 3,
                locks: 3,
                hold: Duration::from_millis(2),
                wait: Duration::from_secs(10),
                watchdog: Duration::from_secs(2),
                response_timeout: Duration::from_secs(1),
                kinds: Checked::ALL.to_vec(),
                layout: redlatch::Layout::Redlatch,
            },
            child,
            seed: 0x5eed_1234_abcd_ef01,
            faults: (0..FAULTS.len()).collect(),
        }
    }

    /// Runs the soak, printing as it goes; the verdict, with what failed if anything did.
    pub fn run(&self) -> Result<Counts, String> {
        let config = &self.config;
        let mut server = RedisServer::start();
        let resource = RedisServer::start();
        let proxy = Proxy::start(server.port);
        println!(
            "soak: {} s, seed {:#x}, {config:?}, locks at {} through {}",
            self.duration.as_secs(),
            self.seed,
            server.url(),
            proxy.url()
        );
        let checker = Checker::start(&proxy.url(), &resource.url(), config, self.child);
        let pids = checker.pids();

        let start = Instant::now();
        let end = start + self.duration;
        let mut next_report = start + self.period;
        let mut next_fault = start + Duration::from_secs(2);
        let mut rng = XorShift(self.seed);
        let mut faults = [0u64; FAULTS.len()];
        let mut last_sections = 0;
        let mut rss_baseline: Option<Vec<u64>> = None;
        // Each child's lowest live heap this period, and in every period so far: the lowest,
        // since a period's sample may fall on a burst (a reconnect's buffers, a queue of
        // waiters) that the next moment frees.
        let mut heap_low: Vec<Option<Heap>> = vec![None; pids.len()];
        let mut heap_lows: Vec<Vec<Option<Heap>>> = Vec::new();
        let mut next_heap_sample = start;
        let mut timeline = Vec::new();
        while Instant::now() < end {
            thread::sleep(Duration::from_millis(50));
            if Instant::now() >= next_heap_sample {
                next_heap_sample += HEAP_SAMPLE;
                for (low, now) in heap_low.iter_mut().zip(checker.heaps()) {
                    if now.allocations > 0 && low.is_none_or(|l| now.bytes < l.bytes) {
                        *low = Some(now);
                    }
                }
            }
            if Instant::now() >= next_fault && !self.faults.is_empty() {
                let fault = self.faults[(rng.next() % self.faults.len() as u64) as usize];
                let began = checker::unix_ms();
                inject(fault, &mut server, &proxy, &checker, config.watchdog);
                timeline.push(format!("{began}..{} {}", checker::unix_ms(), FAULTS[fault]));
                faults[fault] += 1;
                next_fault = Instant::now() + Duration::from_millis(1000 + rng.next() % 2000);
            }
            if Instant::now() >= next_report {
                next_report += self.period;
                let counts = checker.counts();
                let mut waits = checker.take_waits();
                let mut admin = server.admin();
                let rss: Vec<u64> = pids.iter().map(|&p| checker::rss_kb(p)).collect();
                rss_baseline.get_or_insert(rss.clone());
                let lows = std::mem::replace(&mut heap_low, vec![None; pids.len()]);
                let heap_kb: u64 = lows.iter().flatten().map(|h| h.bytes).sum::<u64>() / 1024;
                let heap_allocs: u64 = lows.iter().flatten().map(|h| h.allocations).sum();
                heap_lows.push(lows);
                println!(
                    "{:5.0} s  {:7} acq ({:5}/s)  wait p50 {:6} µs p99 {:7} µs  faults {:3}  \
                     told lost {:3}  unreported {}  shared {}  latch early {}  errors: redis {} \
                     other {}  timeouts {}  late {}  \
                     rss {:6} kB  heap {:5} kB {:6} allocs  threads {:3}  conns {:3}  \
                     channels {:3}",
                    start.elapsed().as_secs_f64(),
                    counts.sections,
                    (counts.sections - last_sections) / self.period.as_secs().max(1),
                    percentile(&mut waits, 0.5),
                    percentile(&mut waits, 0.99),
                    faults.iter().sum::<u64>(),
                    counts.reported_lost,
                    counts.unreported,
                    counts.occupancy,
                    counts.latch_early,
                    counts.errors,
                    counts.other_errors,
                    counts.timeouts,
                    counts.late,
                    rss.iter().sum::<u64>(),
                    heap_kb,
                    heap_allocs,
                    pids.iter().map(|&p| threads_of(p)).sum::<u64>(),
                    client_connections(&mut admin),
                    super::pubsub_channels(&mut admin, "*").len(),
                );
                last_sections = counts.sections;
            }
        }

        let mut admin = server.admin();
        let within = config.wait + config.response_timeout * 4 + Duration::from_secs(10);
        let unreported = checker.unreported();
        let mut resource_con = resource.admin();
        let (counts, leftovers, (settled, (stranded, unexcused))) = checker.finish(within, || {
            let settled = super::eventually(Duration::from_secs(10), || {
                client_connections(&mut admin) == 0
                    && super::pubsub_channels(&mut admin, "*").is_empty()
            });
            // Every guard was released with its client, and every attempt whose reply a fault
            // lost was settled: no lock is held, and nobody queues.
            let stranded = stranded_locks(&mut admin, config);
            // Every holder has said by now whether it was told.
            let unexcused = checker::occupancy_unexcused(&mut resource_con);
            (settled, (stranded, unexcused))
        });
        println!(
            "--- after {} s: {counts:?}",
            start.elapsed().as_secs_f64().round()
        );
        let injected: Vec<String> = FAULTS
            .iter()
            .zip(faults)
            .map(|(name, n)| format!("{name} {n}"))
            .collect();
        println!("faults: {}", injected.join(", "));
        println!("children after dropping their clients: {leftovers:?}");

        let mut failures = Vec::new();
        if counts.unreported > 0 {
            println!("unreported sections (times in unix ms):");
            for detail in &unreported {
                println!("  {detail}");
            }
            println!("faults (unix ms):");
            for fault in &timeline {
                println!("  {fault}");
            }
            failures.push(format!(
                "{} overlaps, out-of-order entries or rejected writes were never reported",
                counts.unreported
            ));
        }
        if !unexcused.is_empty() {
            println!("shared objects' promises broken, nobody told:");
            for record in &unexcused {
                println!("  {record}");
            }
            failures.push(format!(
                "{} read-write or semaphore violations were never reported",
                unexcused.len()
            ));
        }
        if counts.hung > 0 {
            failures.push(format!("{} children did not finish in time", counts.hung));
        }
        if counts.other_errors > 0 {
            failures.push(format!("{} unexpected errors", counts.other_errors));
        }
        if leftovers.len() != pids.len() || leftovers.iter().any(|l| l.threads > 0) {
            failures.push("a client left threads behind".to_string());
        }
        let baseline = rss_baseline.unwrap_or_default();
        for (i, (left, base)) in leftovers.iter().zip(&baseline).enumerate() {
            let grown = left.rss_kb.saturating_sub(*base);
            println!(
                "child {i}: rss {} kB, +{grown} kB over the first period",
                left.rss_kb
            );
            if grown > MEMORY_TOLERANCE_KB {
                failures.push(format!(
                    "child {i}'s memory grew by {grown} kB (tolerance {MEMORY_TOLERANCE_KB} kB)"
                ));
            }
        }
        failures.extend(heap_grown(&heap_lows, &leftovers));
        if !settled {
            failures.push("the clients' connections or channels outlived them".to_string());
        }
        if !stranded.is_empty() {
            failures.push(format!(
                "locks held or queued for after every client was gone: {stranded:?}"
            ));
        }
        if failures.is_empty() {
            println!(
                "verdict: safe (every overlap and rejected write was reported), nothing leaked"
            );
            Ok(counts)
        } else {
            Err(failures.join("; "))
        }
    }
}

/// The checker's locks that are still held, or have places in their queues, with what is
/// there: none should be once every client is gone (its guards released, the attempts whose
/// reply was lost settled), soon after. A lock's key, in the layout the children speak.
fn stranded_locks(admin: &mut redis::Connection, config: &Config) -> Vec<String> {
    let mut left = Vec::new();
    super::eventually(Duration::from_secs(1), || {
        left = (0..config.locks)
            .flat_map(|k| {
                let name = format!("checked-{k}");
                let key = match config.layout {
                    redlatch::Layout::Redisson => name.clone(),
                    _ => format!("redlatch:{{{name}}}"),
                };
                let queue = format!("{key}:queue");
                let held: Vec<String> = redis::cmd("HKEYS")
                    .arg(&key)
                    .query(admin)
                    .unwrap_or_default();
                let queued: Vec<String> = redis::cmd("ZRANGE")
                    .arg(&queue)
                    .arg(0)
                    .arg(-1)
                    .query(admin)
                    .unwrap_or_default();
                let held = held.into_iter().map(move |o| format!("{key} held by {o}"));
                let queued = queued.into_iter().map(move |m| format!("{queue}: {m}"));
                held.chain(queued).collect::<Vec<_>>()
            })
            .collect();
        left.is_empty()
    });
    left
}

/// How often the children's live heap is read, to find each period's lowest.
const HEAP_SAMPLE: Duration = Duration::from_millis(500);

/// How much a child's lowest live heap of the last period may exceed that of the second (the
/// first is the warm-up: pools, buffers and maps growing to their working size). A leak of
/// even a few bytes per fault passes it within an hour of faults every two seconds.
pub const HEAP_TOLERANCE_KB: u64 = 64;

/// Prints each child's live heap over the run and after its client was dropped, and says
/// which grew past [`HEAP_TOLERANCE_KB`] from the second period to the last (nothing where the
/// heap is not measured, or the run had fewer than three periods).
fn heap_grown(lows: &[Vec<Option<Heap>>], leftovers: &[checker::Leftovers]) -> Vec<String> {
    let mut failures = Vec::new();
    let (Some(second), Some(last)) = (lows.get(1), lows.last()) else {
        return failures;
    };
    if lows.len() < 3 {
        return failures;
    }
    for (i, (base, end)) in second.iter().zip(last).enumerate() {
        let (Some(base), Some(end)) = (base, end) else {
            continue;
        };
        let grown = end.bytes as i64 - base.bytes as i64;
        let dropped = leftovers.get(i).map_or(String::new(), |l| {
            format!(
                "; after dropping its client {} kB, before making it {} kB",
                l.heap_after / 1024,
                l.heap_before / 1024
            )
        });
        println!(
            "child {i}: live heap at its lowest {} kB ({} allocations) in the last period, \
             {grown:+} bytes ({:+} allocations) from the second{dropped}",
            end.bytes / 1024,
            end.allocations,
            end.allocations as i64 - base.allocations as i64,
        );
        if grown > (HEAP_TOLERANCE_KB * 1024) as i64 {
            failures.push(format!(
                "child {i}'s live heap grew by {} kB (tolerance {HEAP_TOLERANCE_KB} kB)",
                grown / 1024
            ));
        }
    }
    failures
}

/// The kinds of fault, by name.
pub const FAULTS: [&str; 11] = [
    "kill normal",
    "kill pubsub",
    "script flush",
    "pause write",
    "pause all",
    "partition",
    "reset",
    "stop short",
    "stop long",
    "restart",
    "pause holder",
];

/// Fault number `fault` of [`FAULTS`].
fn inject(
    fault: usize,
    server: &mut RedisServer,
    proxy: &Proxy,
    checker: &Checker,
    watchdog: Duration,
) {
    let mut admin = server.admin();
    let mut command = |args: &[&str]| {
        let _: redis::RedisResult<redis::Value> =
            redis::cmd(args[0]).arg(&args[1..]).query(&mut admin);
    };
    let stopped = |pid: u32, length: Duration| {
        super::signal(pid, "-STOP");
        thread::sleep(length);
        super::signal(pid, "-CONT");
    };
    match FAULTS[fault] {
        "kill normal" => command(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]),
        "kill pubsub" => command(&["CLIENT", "KILL", "TYPE", "pubsub"]),
        "script flush" => command(&["SCRIPT", "FLUSH"]),
        "pause write" => command(&["CLIENT", "PAUSE", "500", "WRITE"]),
        "pause all" => command(&["CLIENT", "PAUSE", "500", "ALL"]),
        "partition" => proxy.partition(watchdog / 3),
        "reset" => proxy.reset(),
        // Less than the watchdog timeout: the locks survive.
        "stop short" => stopped(server.pid(), watchdog / 3),
        // Past it: the locks expire under their holders.
        "stop long" => stopped(server.pid(), watchdog + Duration::from_millis(500)),
        "restart" => server.restart(),
        "pause holder" => {
            // Lock 0 has a holder only now and then (holds of 2 ms, the workers taking turns
            // with every kind, latches included): look for one for up to 2 s, so that the
            // fault lands rather than finding nobody and doing nothing.
            let mut looking = server.admin();
            let deadline = Instant::now() + Duration::from_secs(2);
            for _ in 0..2_000 {
                if let Some(pid) = checker.holder_pid(&mut looking, 0) {
                    stopped(pid, watchdog + Duration::from_millis(500));
                    break;
                }
                if Instant::now() >= deadline {
                    break;
                }
                thread::sleep(Duration::from_millis(1));
            }
        }
        other => unreachable!("unknown fault {other}"),
    }
}

/// Connections to the lock server other than the admin's own.
fn client_connections(admin: &mut redis::Connection) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(admin)
        .unwrap_or_default();
    list.lines().count().saturating_sub(1)
}

fn threads_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn percentile(v: &mut [u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}
