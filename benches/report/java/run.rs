//! Running one scenario on each side: the JVM's loop, ours (a copy of `Loop.java`), the
//! warm-up, the blocks in turn, and the `MONITOR` run that counts requests.

use std::thread;
use std::time::Duration;

use parking_lot::Mutex;

use super::super::cpu;
use super::super::scenario::MAX_WAIT;
use super::super::support::java::{self, JavaService, LoopReport, Monitor, monotonic_ns};
use super::tally::Tally;
use super::{LOOP_THREAD, OURS_NAME, Run, Sample, Spec, Stats};

/// One side: the Java service, or one of our clients.
#[derive(Clone, Copy)]
pub(super) enum Side<'a> {
    Java(&'a JavaService),
    Ours(&'a redlatch::Client, &'static str),
}

impl Side<'_> {
    pub(super) fn run(&self, spec: &Spec) -> Run {
        match self {
            Side::Java(java) => java_loop(java, spec),
            Side::Ours(client, _) => ours(client, spec),
        }
    }

    /// The addresses of this side's connections.
    pub(super) fn connections(&self, admin: &mut redis::Connection) -> Vec<String> {
        match self {
            Side::Java(_) => java::java_connections(admin),
            Side::Ours(_, name) => named_connections(admin, name),
        }
    }
}

/// `Loop.java` in the JVM, with every acquisition's times.
pub(super) fn java_loop(java: &JavaService, spec: &Spec) -> Run {
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
pub(super) fn ours(client: &redlatch::Client, spec: &Spec) -> Run {
    let cpu_before = cpu::rusage_self();
    let start = monotonic_ns();
    let deadline = start + spec.duration.as_nanos() as u64;
    let all: Mutex<Vec<(usize, Run)>> = Mutex::new(Vec::new());
    thread::scope(|scope| {
        for me in 0..spec.threads {
            let all = &all;
            scope.spawn(move || {
                let mut rng = super::super::support::checker::XorShift(
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
pub(super) fn command_stats(admin: &mut redis::Connection) -> Stats {
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
pub(super) fn stats_delta(before: &Stats, after: &Stats) -> Stats {
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
pub(super) fn named_connections(admin: &mut redis::Connection, name: &str) -> Vec<String> {
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
pub(super) fn warm(sides: &[Side; 3], spec: &Spec) {
    let cap = Duration::from_secs(super::super::knob("REPORT_JAVA_WARMUP_SECS", 40));
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
pub(super) fn blocks(
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

pub(super) fn side_tag(side: &Side) -> &'static str {
    match side {
        Side::Java(_) => "java",
        Side::Ours(_, name) if *name == OURS_NAME => "ours",
        Side::Ours(..) => "rl",
    }
}

/// The same scenario again, shorter, with `MONITOR` on: the commands each side's client sends,
/// by name, into its tally.
pub(super) fn count_requests(
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
