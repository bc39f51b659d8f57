//! The safety checker: threads in several clients take turns on a few locks; inside each
//! critical section they write to a protected resource with their fencing token. It counts
//! overlaps (another holder entered while one was inside), rejected fenced writes, and
//! whether the holders involved were told their lock was lost. Used by `tests/reliability.rs`
//! and by `examples/soak.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redlatch::{Client, Error};

/// The protected resource: accepts a write only with a token at least the last accepted one
/// (the same token again is the same holder retrying a write whose reply a fault cut off).
pub const FENCED_WRITE: &str = r"
local last = tonumber(redis.call('get', KEYS[1]) or '0')
local token = tonumber(ARGV[1])
if token == last then
  return 1
end
if token < last then
  return 0
end
redis.call('set', KEYS[1], token)
return 1
";

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    pub clients: usize,
    pub threads: usize,
    pub locks: usize,
    /// How long a holder stays inside.
    pub hold: Duration,
    /// How long a thread waits for a lock.
    pub wait: Duration,
    pub watchdog: Duration,
    pub response_timeout: Duration,
}

/// Counts so far.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    pub sections: u64,
    /// Sections another holder entered while they were inside.
    pub overtaken: u64,
    /// Sections whose fenced write was rejected.
    pub rejected: u64,
    /// Sections whose holder was told: `is_lost()` at the end, or `unlock()` -> LockLost.
    pub reported_lost: u64,
    /// Overtaken or rejected sections whose holder was never told: must stay 0.
    pub unreported: u64,
    /// Calls that failed (Redis unreachable, timed out...).
    pub errors: u64,
    /// `try_lock` calls that ran out of time.
    pub timeouts: u64,
}

#[derive(Default)]
struct Shared {
    counts: Mutex<Counts>,
    /// Recent waits (µs), for percentiles; emptied by `take_waits`.
    waits: Mutex<Vec<u64>>,
    stop: AtomicBool,
    finished: AtomicU64,
}

/// A running checker.
pub struct Checker {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl Checker {
    /// Starts the workers against the lock server at `lock_url`; the resource lives at
    /// `resource_url` (another server, so that faults of the lock server do not touch it).
    pub fn start(lock_url: &str, resource_url: &str, config: &Config) -> Checker {
        let shared = Arc::new(Shared::default());
        let insiders: Arc<Vec<Mutex<Vec<Arc<AtomicBool>>>>> =
            Arc::new((0..config.locks).map(|_| Mutex::new(Vec::new())).collect());
        let mut workers = Vec::new();
        for c in 0..config.clients {
            let client = Client::builder(lock_url)
                .watchdog_timeout(config.watchdog)
                .response_timeout(config.response_timeout)
                .build()
                .unwrap();
            for t in 0..config.threads {
                let (client, shared, insiders) = (client.clone(), shared.clone(), insiders.clone());
                let (config, resource_url) = (config.clone(), resource_url.to_string());
                workers.push(thread::spawn(move || {
                    work(
                        c * config.threads + t,
                        &client,
                        &config,
                        &resource_url,
                        &shared,
                        &insiders,
                    );
                    shared.finished.fetch_add(1, Ordering::SeqCst);
                }));
            }
        }
        Checker { shared, workers }
    }

    pub fn counts(&self) -> Counts {
        self.shared.counts.lock().clone()
    }

    /// The waits (µs) recorded since the last call.
    pub fn take_waits(&self) -> Vec<u64> {
        std::mem::take(&mut *self.shared.waits.lock())
    }

    /// Stops the workers and waits for them, at most `within`; `None` if one hung.
    pub fn finish(self, within: Duration) -> Option<Counts> {
        self.shared.stop.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + within;
        while self.shared.finished.load(Ordering::SeqCst) < self.workers.len() as u64 {
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
        for w in self.workers {
            w.join().unwrap();
        }
        Some(self.shared.counts.lock().clone())
    }
}

fn work(
    me: usize,
    client: &Client,
    config: &Config,
    resource_url: &str,
    shared: &Shared,
    insiders: &[Mutex<Vec<Arc<AtomicBool>>>],
) {
    let resource = redis::Client::open(resource_url).unwrap();
    let write = redis::Script::new(FENCED_WRITE);
    for round in 0..u64::MAX {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let which = (me + round as usize) % insiders.len();
        let lock = client.lock(&format!("checked-{which}"));
        let asked = Instant::now();
        let guard = match lock.try_lock(config.wait, None) {
            Ok(Some(guard)) => guard,
            Ok(None) => {
                shared.counts.lock().timeouts += 1;
                continue;
            }
            Err(_) => {
                shared.counts.lock().errors += 1;
                thread::sleep(Duration::from_millis(20)); // Redis is away: don't spin
                continue;
            }
        };
        {
            let mut waits = shared.waits.lock();
            if waits.len() < 100_000 {
                waits.push(asked.elapsed().as_micros() as u64);
            }
        }
        let overtaken = Arc::new(AtomicBool::new(false));
        {
            let mut inside = insiders[which].lock();
            for other in inside.iter() {
                other.store(true, Ordering::SeqCst);
            }
            inside.push(overtaken.clone());
        }
        thread::sleep(config.hold);
        // The fenced write; a fault may cut its reply, and the same token again is harmless.
        let mut rejected = false;
        for _ in 0..10 {
            let wrote = resource
                .get_connection_with_timeout(Duration::from_secs(1))
                .and_then(|mut con| {
                    write
                        .key(format!("resource:{which}"))
                        .arg(guard.fencing_token())
                        .invoke::<i64>(&mut con)
                });
            if let Ok(accepted) = wrote {
                rejected = accepted == 0;
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        insiders[which]
            .lock()
            .retain(|x| !Arc::ptr_eq(x, &overtaken));
        let lost_at_end = guard.is_lost();
        let released = guard.unlock();
        let told = lost_at_end || matches!(released, Err(Error::LockLost { .. }));
        let overtaken = overtaken.load(Ordering::SeqCst);
        let mut counts = shared.counts.lock();
        counts.sections += 1;
        counts.overtaken += u64::from(overtaken);
        counts.rejected += u64::from(rejected);
        counts.reported_lost += u64::from(told);
        counts.unreported += u64::from((overtaken || rejected) && !told);
        counts.errors += u64::from(matches!(released, Err(Error::Redis(_))));
    }
}

/// A small, seedable generator: faults need spread, not cryptography.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
