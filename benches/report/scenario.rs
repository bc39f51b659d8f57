//! Scenario runners: contended hand-offs, many keys, raw round trips, and the command count.

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::contenders::{Contender, connection};

/// How long one acquisition may wait before it counts as a timeout.
pub const MAX_WAIT: Duration = Duration::from_secs(10);

/// Many threads in a few clients on one lock.
pub struct Contended {
    pub clients: usize,
    pub threads_per_client: usize,
    pub hold: Duration,
    /// Each hold lasts `hold` plus or minus up to this much, uniformly (seeded per thread):
    /// a fixed hold as long as the polling lock's retry interval lets its pollers fall into
    /// step with the holder, and retry just after each release.
    pub hold_spread: Duration,
    /// How long a releaser waits before asking again: with a pause, every hand-off goes to a
    /// thread that was waiting, whatever the lock's policy.
    pub pause: Duration,
    pub duration: Duration,
}

/// What a contended run measured.
#[derive(Default)]
pub struct Outcome {
    pub acquisitions: u64,
    pub timeouts: u64,
    /// From a holder starting its release to the next holder returning from its lock call.
    pub handoffs: Vec<Duration>,
    /// From calling lock to holding it.
    pub waits: Vec<Duration>,
    /// Hand-offs where the releasing thread took the lock straight back.
    pub self_handoffs: u64,
    /// Commands clients sent to Redis (script-internal calls not counted).
    pub commands: u64,
    /// Commands the server ran, script-internal calls and PUBLISH included.
    pub server_commands: u64,
    /// Each hand-off in stages, where the lock says when its subscriber thread had the
    /// message and when the waiter ran again: (release sent -> subscriber has the message,
    /// -> waiter runs, -> lock call returns).
    pub stages: Vec<(Duration, Duration, Duration)>,
    /// Each release call, from sending it to its reply.
    pub releases: Vec<Duration>,
    pub duration: Duration,
}

/// Who released last, and when they started.
type LastRelease = Option<(Instant, usize)>;

pub fn contended(contender: &dyn Contender, s: &Contended, url: &str) -> Outcome {
    let mut admin = connection(url);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut admin)
        .unwrap();
    let last_release: Mutex<LastRelease> = Mutex::new(None);
    let results: Mutex<Outcome> = Mutex::new(Outcome::default());
    let lock_name = format!("contended-{}", contender.name());
    let end = Instant::now() + s.duration;
    thread::scope(|scope| {
        for client in 0..s.clients {
            for t in 0..s.threads_per_client {
                let me = client * s.threads_per_client + t;
                let (last_release, results, lock_name) = (&last_release, &results, &lock_name);
                scope.spawn(move || {
                    let mut handle = contender.handle(client, lock_name);
                    let mut mine = Outcome::default();
                    let mut rng =
                        crate::support::checker::XorShift((me as u64 + 1) * 0x9E37_79B9_7F4A_7C15);
                    let spread_us = s.hold_spread.as_micros() as u64;
                    while Instant::now() < end {
                        let asked = Instant::now();
                        if !handle.lock(MAX_WAIT) {
                            mine.timeouts += 1;
                            continue;
                        }
                        let got = Instant::now();
                        let probe = handle.last_hand_over();
                        mine.acquisitions += 1;
                        mine.waits.push(got - asked);
                        if let Some((released, who)) = last_release.lock().take() {
                            mine.handoffs.push(got - released);
                            mine.self_handoffs += u64::from(who == me);
                            if let Some((received, woke)) = probe
                                && released <= received
                                && woke <= got
                            {
                                mine.stages.push((
                                    received - released,
                                    woke - received,
                                    got - woke,
                                ));
                            }
                        }
                        let hold = if spread_us == 0 {
                            s.hold
                        } else {
                            let offset = rng.next() % (2 * spread_us + 1);
                            (s.hold + Duration::from_micros(offset))
                                .saturating_sub(Duration::from_micros(spread_us))
                        };
                        thread::sleep(hold);
                        let releasing = Instant::now();
                        *last_release.lock() = Some((releasing, me));
                        handle.unlock();
                        mine.releases.push(releasing.elapsed());
                        if !s.pause.is_zero() {
                            thread::sleep(s.pause);
                        }
                    }
                    let mut all = results.lock();
                    all.acquisitions += mine.acquisitions;
                    all.timeouts += mine.timeouts;
                    all.handoffs.extend(mine.handoffs);
                    all.waits.extend(mine.waits);
                    all.self_handoffs += mine.self_handoffs;
                    all.stages.extend(mine.stages);
                    all.releases.extend(mine.releases);
                });
            }
        }
    });
    let mut outcome = results.into_inner();
    outcome.duration = s.duration;
    let calls = command_stats(&mut admin);
    outcome.server_commands = server_commands(&calls);
    outcome.commands = client_commands(&calls, contender, outcome.acquisitions);
    outcome
}

/// Commands the server ran since the last CONFIG RESETSTAT, script-internal ones included,
/// the admin connection's own INFO and CONFIG left out.
pub fn server_commands(calls: &HashMap<String, u64>) -> u64 {
    calls
        .iter()
        .filter(|(name, _)| !["info", "config|resetstat"].contains(&name.as_str()))
        .map(|(_, n)| n)
        .sum()
}

/// Commands clients sent since the last CONFIG RESETSTAT: INFO commandstats counts commands
/// run inside scripts too, so the contender's script-internal commands are taken out (and
/// the admin connection's own INFO and CONFIG).
pub fn client_commands(
    calls: &HashMap<String, u64>,
    contender: &dyn Contender,
    releases: u64,
) -> u64 {
    let total: u64 = calls.values().sum();
    let inner: u64 = contender
        .inner_commands()
        .iter()
        .map(|c| calls.get(*c).copied().unwrap_or(0))
        .sum();
    let admin_calls = calls.get("info").copied().unwrap_or(0)
        + calls.get("config|resetstat").copied().unwrap_or(0);
    let inner_publishes = contender.inner_publishes_per_release() * releases;
    total.saturating_sub(inner + admin_calls + inner_publishes)
}

/// `cmdstat_<name>:calls=N` from INFO commandstats.
pub fn command_stats(admin: &mut redis::Connection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(admin).unwrap();
    info.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cmdstat_")?;
            let (name, stats) = rest.split_once(':')?;
            let calls = stats
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

/// Many threads over many locks, no hold: acquisitions per second. Each thread waits up to
/// `wait` for a lock it finds held (the seed scripts' threads never wait: they move on).
pub fn many_keys(
    url: &str,
    clients: usize,
    threads_per_client: usize,
    locks: usize,
    wait: Duration,
    duration: Duration,
) -> f64 {
    let clients: Vec<redlatch::Client> = (0..clients)
        .map(|_| redlatch::Client::open(url).unwrap())
        .collect();
    let end = Instant::now() + duration;
    let total = Mutex::new(0u64);
    thread::scope(|scope| {
        for (c, client) in clients.iter().enumerate() {
            for t in 0..threads_per_client {
                let total = &total;
                scope.spawn(move || {
                    let mut rng = crate::support::checker::XorShift(
                        (c * 1000 + t + 1) as u64 * 0x9E37_79B9_7F4A_7C15,
                    );
                    let mut n = 0u64;
                    while Instant::now() < end {
                        let lock = client.lock(&format!("many-{}", rng.next() as usize % locks));
                        if let Some(guard) = lock.try_lock(wait, None).unwrap() {
                            guard.unlock().unwrap();
                            n += 1;
                        }
                    }
                    *total.lock() += n;
                });
            }
        }
    });
    total.into_inner() as f64 / duration.as_secs_f64()
}

/// The same as [`many_keys`] with the seed articles' HSET lock and unlock scripts, each
/// thread on its own connection: acquisitions per second. With `fenced`, the lock script is
/// the seed's with a fencing token added as ours keeps one
/// ([`seed_fenced_lock_script`](crate::contenders::seed_fenced_lock_script)).
pub fn many_keys_seed(
    url: &str,
    threads: usize,
    locks: usize,
    duration: Duration,
    fenced: bool,
) -> f64 {
    let end = Instant::now() + duration;
    let total = Mutex::new(0u64);
    let (plain, unlock) = crate::contenders::seed_scripts();
    let lock = if fenced {
        crate::contenders::seed_fenced_lock_script()
    } else {
        plain
    };
    thread::scope(|scope| {
        for t in 0..threads {
            let (total, lock, unlock) = (&total, &lock, &unlock);
            scope.spawn(move || {
                let mut con = connection(url);
                let owner = format!("seed-owner:{t}");
                let mut rng =
                    crate::support::checker::XorShift((t + 1) as u64 * 0x9E37_79B9_7F4A_7C15);
                let mut n = 0u64;
                while Instant::now() < end {
                    let key = format!("seed-many-{}", rng.next() as usize % locks);
                    let mut call = lock.key(&key);
                    if fenced {
                        call.key(format!("{key}:fence"));
                    }
                    call.arg(&owner).arg(30_000);
                    if fenced {
                        call.arg(3_630_000);
                    }
                    let busy: Option<i64> = call.invoke(&mut con).unwrap();
                    if busy.is_none() {
                        let _: Option<i64> = unlock
                            .key(&key)
                            .key(format!("{key}:ch"))
                            .arg(&owner)
                            .arg(30_000)
                            .invoke(&mut con)
                            .unwrap();
                        n += 1;
                    }
                }
                *total.lock() += n;
            });
        }
    });
    total.into_inner() as f64 / duration.as_secs_f64()
}

/// `threads` threads, each on its own connection, running a one-key EVALSHA back to back:
/// round trips per second, the ceiling for anything that needs one script call.
pub fn raw_evalsha(url: &str, threads: usize, duration: Duration) -> f64 {
    let end = Instant::now() + duration;
    let total = Mutex::new(0u64);
    let script = redis::Script::new("return redis.call('exists', KEYS[1])");
    thread::scope(|scope| {
        for t in 0..threads {
            let (total, script) = (&total, &script);
            scope.spawn(move || {
                let mut con = connection(url);
                let key = format!("raw-{t}");
                let mut n = 0u64;
                while Instant::now() < end {
                    let _: i64 = script.key(&key).invoke(&mut con).unwrap();
                    n += 1;
                }
                *total.lock() += n;
            });
        }
    });
    total.into_inner() as f64 / duration.as_secs_f64()
}
