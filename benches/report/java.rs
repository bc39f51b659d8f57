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

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

use parking_lot::Mutex;

use super::Figures;
use super::contenders::connection;
use super::cpu;
use super::scenario::MAX_WAIT;
use super::support::java::{self, JavaService, LoopReport, Monitor, monotonic_ns};

/// The Java service's thread number for its loops (its requests run in order).
const LOOP_THREAD: u64 = 7_000_000;
/// `CLIENT SETNAME` of our two clients, so that `CLIENT LIST` tells their connections.
const OURS_NAME: &str = "report-ours";
const REDISSON_LAYOUT_NAME: &str = "report-redisson-layout";
/// The three sides, in the order of every array here; the first is the key prefix of the raw
/// figures.
const SIDES: [&str; 3] = ["java_redisson", "redlatch", "redisson_layout"];

/// One scenario, as both sides run it (`Loop.java`'s arguments).
#[derive(Clone, Debug)]
struct Spec {
    name: String,
    /// More than 1: a name `<name>-<k>` at random per acquisition.
    keys: usize,
    threads: usize,
    duration: Duration,
    hold: Duration,
    think: Duration,
    /// `tryLock(wait)`; `None`: `lock()`.
    wait: Option<Duration>,
    samples: bool,
}

/// One acquisition: its thread, and acquire called, returned, release called, returned
/// (CLOCK_MONOTONIC ns).
#[derive(Clone, Copy, Debug)]
struct Sample {
    thread: u32,
    t0: u64,
    t1: u64,
    t2: u64,
    t3: u64,
}

/// What one run of a loop gave.
#[derive(Default)]
struct Run {
    acquisitions: u64,
    timeouts: u64,
    errors: u64,
    first_error: Option<String>,
    per_thread: Vec<u64>,
    samples: Vec<Sample>,
    cpu: Duration,
    elapsed: Duration,
    /// The JVM's JIT compilers' time over the loop.
    jit: Duration,
}

/// `INFO commandstats`: calls and µs by command.
type Stats = HashMap<String, (u64, u64)>;

/// One side's figures over every block of one scenario.
#[derive(Default)]
struct Tally {
    acquisitions: u64,
    timeouts: u64,
    errors: u64,
    first_error: Option<String>,
    elapsed: Duration,
    cpu: Duration,
    /// The JVM's JIT time over the measured runs (zero for ours).
    jit: Duration,
    waits: Vec<u64>,
    cycles: Vec<u64>,
    handoffs: Vec<u64>,
    pairs: u64,
    self_handoffs: u64,
    per_thread: Vec<u64>,
    server: Stats,
    /// From the `MONITOR` run: commands the client sent, by name, and the acquisitions.
    sent: HashMap<String, u64>,
    sent_acquisitions: u64,
}

impl Tally {
    fn add(&mut self, mut run: Run, server: Stats) {
        if run.errors > 0 {
            eprintln!(
                "    {} errors, the first: {}",
                run.errors,
                run.first_error.as_deref().unwrap_or("?")
            );
        }
        self.acquisitions += run.acquisitions;
        self.timeouts += run.timeouts;
        self.errors += run.errors;
        if self.first_error.is_none() {
            self.first_error = run.first_error.take();
        }
        self.elapsed += run.elapsed;
        self.cpu += run.cpu;
        self.jit += run.jit;
        self.per_thread.extend(&run.per_thread);
        for (name, (calls, usec)) in server {
            let entry = self.server.entry(name).or_default();
            entry.0 += calls;
            entry.1 += usec;
        }
        run.samples.sort_by_key(|s| s.t1);
        self.waits.extend(run.samples.iter().map(|s| s.t1 - s.t0));
        self.cycles.extend(run.samples.iter().map(|s| s.t3 - s.t0));
        for pair in run.samples.windows(2) {
            let (before, next) = (pair[0], pair[1]);
            self.pairs += 1;
            self.self_handoffs += u64::from(before.thread == next.thread);
            if next.t0 < before.t2 && next.t1 >= before.t2 {
                self.handoffs.push(next.t1 - before.t2);
            }
        }
    }

    fn per_acquisition(&self, v: f64) -> f64 {
        v / self.acquisitions.max(1) as f64
    }

    fn throughput(&self) -> f64 {
        self.acquisitions as f64 / self.elapsed.as_secs_f64()
    }

    fn cpu_us_per_acquisition(&self) -> f64 {
        self.per_acquisition(self.cpu.as_secs_f64() * 1e6)
    }

    /// Commands the server ran per acquisition, those inside scripts included.
    fn server_commands(&self) -> f64 {
        self.per_acquisition(self.server.values().map(|c| c.0).sum::<u64>() as f64)
    }

    /// The server's µs per acquisition, each request counted once: a script's own time
    /// includes the commands it runs, which `INFO commandstats` also counts under their names,
    /// so of every other command only the share the client sent itself is counted (the sent
    /// commands per acquisition are the `MONITOR` run's).
    fn server_usec(&self) -> f64 {
        let sent_per_acq = |name: &str| {
            self.sent.get(name).copied().unwrap_or(0) as f64 / self.sent_acquisitions.max(1) as f64
        };
        let usec: f64 = self
            .server
            .iter()
            .map(|(name, &(calls, usec))| {
                if name.starts_with("eval") || name.starts_with("fcall") {
                    usec as f64
                } else {
                    let sent = sent_per_acq(name) * self.acquisitions as f64;
                    usec as f64 * (sent / calls.max(1) as f64).min(1.0)
                }
            })
            .sum();
        self.per_acquisition(usec)
    }

    /// Every server µs per acquisition, script-internal commands counted twice (in the
    /// script's time and under their own names), as `INFO commandstats` sums them.
    fn server_usec_all(&self) -> f64 {
        self.per_acquisition(self.server.values().map(|c| c.1).sum::<u64>() as f64)
    }

    fn requests(&self) -> f64 {
        self.sent.values().sum::<u64>() as f64 / self.sent_acquisitions.max(1) as f64
    }
}

/// µs at quantile `q` of ns samples (nearest rank); NaN when there are none.
fn quantile_us(v: &mut [u64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize] as f64 / 1e3
}

fn max_us(v: &[u64]) -> f64 {
    v.iter().copied().max().map_or(f64::NAN, |m| m as f64 / 1e3)
}

/// One side: the Java service, or one of our clients.
#[derive(Clone, Copy)]
enum Side<'a> {
    Java(&'a JavaService),
    Ours(&'a redlatch::Client, &'static str),
}

impl Side<'_> {
    fn run(&self, spec: &Spec) -> Run {
        match self {
            Side::Java(java) => java_loop(java, spec),
            Side::Ours(client, _) => ours(client, spec),
        }
    }

    /// The addresses of this side's connections.
    fn connections(&self, admin: &mut redis::Connection) -> Vec<String> {
        match self {
            Side::Java(_) => java::java_connections(admin),
            Side::Ours(_, name) => named_connections(admin, name),
        }
    }
}

/// `Loop.java` in the JVM, with every acquisition's times.
fn java_loop(java: &JavaService, spec: &Spec) -> Run {
    let wait_ms = spec.wait.map_or(-1, |w| w.as_millis() as i64);
    let reply = java
        .send(
            LOOP_THREAD,
            "loop",
            &[
                &"lock",
                &spec.name,
                &spec.keys,
                &spec.threads,
                &spec.duration.as_millis(),
                &spec.hold.as_micros(),
                &spec.think.as_micros(),
                &wait_ms,
                &java::NO_LEASE,
                &0,
                &u8::from(spec.samples),
            ],
        )
        .value(spec.duration + MAX_WAIT + Duration::from_secs(60));
    let report = LoopReport::parse(&reply);
    let jit = reply
        .split(' ')
        .find_map(|w| w.strip_prefix("jit_ms="))
        .map_or(Duration::ZERO, |ms| {
            Duration::from_millis(ms.parse().unwrap())
        });
    let samples = reply
        .split(' ')
        .find_map(|w| w.strip_prefix("samples="))
        .map(|list| {
            list.split(',')
                .filter(|s| !s.is_empty())
                .map(|s| {
                    let v: Vec<u64> = s.split(':').map(|n| n.parse().unwrap()).collect();
                    Sample {
                        thread: v[0] as u32,
                        t0: v[1],
                        t1: v[2],
                        t2: v[3],
                        t3: v[4],
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    Run {
        acquisitions: report.acquisitions,
        timeouts: report.timeouts,
        errors: report.errors,
        first_error: report.first_error,
        per_thread: report.per_thread,
        samples,
        cpu: report.cpu,
        elapsed: report.elapsed,
        jit,
    }
}

/// `Loop.java`'s loop, on our client, with the same spans timed the same way.
fn ours(client: &redlatch::Client, spec: &Spec) -> Run {
    let cpu_before = cpu::rusage_self();
    let start = monotonic_ns();
    let deadline = start + spec.duration.as_nanos() as u64;
    let all: Mutex<Vec<(usize, Run)>> = Mutex::new(Vec::new());
    thread::scope(|scope| {
        for me in 0..spec.threads {
            let all = &all;
            scope.spawn(move || {
                let mut rng = super::support::checker::XorShift(
                    ((me as u64 + 1) * 0x9E37_79B9_7F4A_7C15) ^ start,
                );
                let mut mine = Run::default();
                while monotonic_ns() < deadline {
                    let name = if spec.keys > 1 {
                        format!("{}-{}", spec.name, rng.next() % spec.keys as u64)
                    } else {
                        spec.name.clone()
                    };
                    let lock = client.lock(&name);
                    let t0 = monotonic_ns();
                    let taken = match spec.wait {
                        Some(wait) => lock.try_lock(wait, None),
                        None => lock.lock().map(Some),
                    };
                    let t1 = monotonic_ns();
                    let guard = match taken {
                        Ok(Some(guard)) => guard,
                        Ok(None) => {
                            mine.timeouts += 1;
                            continue;
                        }
                        Err(e) => {
                            mine.errors += 1;
                            mine.first_error.get_or_insert_with(|| e.to_string());
                            continue;
                        }
                    };
                    if !spec.hold.is_zero() {
                        thread::sleep(spec.hold);
                    }
                    let t2 = monotonic_ns();
                    let released = guard.unlock();
                    let t3 = monotonic_ns();
                    if let Err(e) = released {
                        mine.errors += 1;
                        mine.first_error.get_or_insert_with(|| e.to_string());
                    } else {
                        mine.acquisitions += 1;
                        if spec.samples {
                            mine.samples.push(Sample {
                                thread: me as u32,
                                t0,
                                t1,
                                t2,
                                t3,
                            });
                        }
                    }
                    if !spec.think.is_zero() {
                        thread::sleep(spec.think);
                    }
                }
                all.lock().push((me, mine));
            });
        }
    });
    let elapsed = Duration::from_nanos(monotonic_ns() - start);
    let cpu = cpu::rusage_self() - cpu_before;
    let mut all = all.into_inner();

    all.sort_by_key(|(me, _)| *me);
    let mut run = Run {
        cpu,
        elapsed,
        ..Run::default()
    };
    for (_, mine) in all {
        run.acquisitions += mine.acquisitions;
        run.timeouts += mine.timeouts;
        run.errors += mine.errors;
        if run.first_error.is_none() {
            run.first_error = mine.first_error;
        }
        run.per_thread.push(mine.acquisitions);
        run.samples.extend(mine.samples);
    }
    run
}

/// `INFO commandstats`: calls and µs by command.
fn command_stats(admin: &mut redis::Connection) -> Stats {
    let info: String = redis::cmd("INFO").arg("commandstats").query(admin).unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| -> Option<u64> {
                stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))?
                    .parse()
                    .ok()
            };
            Some((name.to_string(), (field("calls")?, field("usec")?)))
        })
        .collect()
}

/// What the server ran between two `command_stats`, the report's own commands and `ping`
/// (idle connections' keep-alives, of either side) left out.
fn stats_delta(before: &Stats, after: &Stats) -> Stats {
    after
        .iter()
        .filter(|(name, _)| {
            !(["info", "ping", "client|list", "monitor"].contains(&name.as_str())
                || name.starts_with("config|"))
        })
        .filter_map(|(name, &(calls, usec))| {
            let (c0, u0) = before.get(name).copied().unwrap_or((0, 0));
            (calls > c0).then(|| (name.clone(), (calls - c0, usec - u0)))
        })
        .collect()
}

/// The addresses of the connections of our client named `name` (its connections are
/// `<name>:<client id>`).
fn named_connections(admin: &mut redis::Connection, name: &str) -> Vec<String> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(admin).unwrap();
    let wanted = format!("name={name}:");
    list.lines()
        .filter(|line| line.split(' ').any(|w| w.starts_with(&wanted)))
        .filter_map(|line| {
            line.split(' ')
                .find_map(|w| w.strip_prefix("addr="))
                .map(str::to_string)
        })
        .collect()
}

/// Warms `spec` up on every side: the JVM compiles its hot paths over the first tens of
/// seconds (on a 2-core machine its uncontended loop took 30-40 s before its compilers went
/// idle, its CPU per cycle falling ninefold), so the scenario runs in the JVM in blocks of
/// 2 s until a block's JIT time is under 2 % of it, at most `REPORT_JAVA_WARMUP_SECS` (40);
/// our clients run it for 0.5 s (their pools filled, their scripts loaded). Nothing of these
/// runs is kept. Each scenario is warmed right before it is measured, so that what an
/// earlier scenario did not exercise is compiled too.
fn warm(sides: &[Side; 3], spec: &Spec) {
    let cap = Duration::from_secs(super::knob("REPORT_JAVA_WARMUP_SECS", 40));
    for side in sides {
        let mut warm = spec.clone();
        warm.samples = false;
        warm.name = format!("{}-warm-{}", spec.name, side_tag(side));
        if let Side::Java(_) = side {
            warm.duration = Duration::from_secs(2);
            let started = std::time::Instant::now();
            loop {
                let run = side.run(&warm);
                if run.jit < warm.duration / 50 || started.elapsed() > cap {
                    eprintln!(
                        "    the JVM warm after {:.0} s: JIT {} ms in the last 2 s",
                        started.elapsed().as_secs_f64(),
                        run.jit.as_millis()
                    );
                    break;
                }
            }
        } else {
            warm.duration = Duration::from_millis(500);
            side.run(&warm);
        }
    }
}

/// Runs `spec` on each side in turn, `rounds` times, into three tallies (the server's
/// figures of each block its own).
fn blocks(
    sides: &[Side; 3],
    spec: &Spec,
    rounds: usize,
    admin: &mut redis::Connection,
) -> [Tally; 3] {
    let mut tallies: [Tally; 3] = Default::default();
    for _ in 0..rounds {
        for (side, tally) in sides.iter().zip(tallies.iter_mut()) {
            let mut spec = spec.clone();
            spec.name = format!("{}-{}", spec.name, side_tag(side));
            let before = command_stats(admin);
            let run = side.run(&spec);
            let after = command_stats(admin);
            tally.add(run, stats_delta(&before, &after));
        }
    }
    tallies
}

fn side_tag(side: &Side) -> &'static str {
    match side {
        Side::Java(_) => "java",
        Side::Ours(_, name) if *name == OURS_NAME => "ours",
        Side::Ours(..) => "rl",
    }
}

/// The same scenario again, shorter, with `MONITOR` on: the commands each side's client sends,
/// by name, into its tally.
fn count_requests(
    sides: &[Side; 3],
    spec: &Spec,
    tallies: &mut [Tally; 3],
    port: u16,
    admin: &mut redis::Connection,
) {
    for (side, tally) in sides.iter().zip(tallies.iter_mut()) {
        let mut spec = spec.clone();
        spec.name = format!("{}-{}", spec.name, side_tag(side));
        spec.samples = false;
        let monitor = Monitor::start(port);
        let run = side.run(&spec);
        thread::sleep(Duration::from_millis(200));
        let addrs = side.connections(admin);
        for command in monitor.commands_from(&addrs) {
            let name = command
                .split(' ')
                .next()
                .unwrap_or("")
                .trim_matches('"')
                .to_ascii_lowercase();
            *tally.sent.entry(name).or_default() += 1;
        }
        tally.sent_acquisitions += run.acquisitions;
        drop(monitor);
        // The monitor's reader stops at its next read timeout (200 ms): let it, so that it
        // takes no CPU from the runs that follow.
        thread::sleep(Duration::from_millis(300));
    }
}

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
