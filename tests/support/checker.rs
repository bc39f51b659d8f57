//! The safety checker: P child processes, each with its own `Client`, run T threads that take
//! turns on K locks. Inside each critical section a holder writes to a protected resource
//! with its fencing token. Everything the checker proves is recorded in a second Redis, the
//! resource server, which the faults never touch:
//!
//! - `entries:<k>` counts entries into lock k's critical section. A holder notes the count as
//!   it enters and reads it again as it leaves: if it moved, another holder entered while it
//!   was inside (an overlap, detected directly and across processes).
//! - `last:<k>` is the largest token that entered: a holder entering with a token not above
//!   it entered out of order (a stale holder, e.g. one that was paused), and a holder that
//!   finds it above its own token as it leaves was overtaken by a newer holder (its lock was
//!   lost under it). Of two holders that overlap, the older token is to blame either way.
//! - `resource:<k>` is the fenced resource ([`FENCED_WRITE`]): it rejects a write whose token
//!   is older than the last accepted one, so accepted tokens strictly increase.
//! - `checker:counts:<child>` holds each child's counts, `checker:waits` recent waits (µs),
//!   `checker:stop` tells the children to stop and `checker:exit` to exit.
//!
//! - `inside:<object>` holds who is inside a read-write lock or a semaphore now (id ->
//!   `"<mode> <n>"`): a writer entering beside anyone, a reader beside a writer, or permits
//!   beyond the total is an *occupancy* violation, recorded in `checker:violations` with
//!   everyone involved; it is excused if one of them was told its hold was lost
//!   (`checker:told:<id>`). Latch rounds (set to 2, counted down twice, a wait after each)
//!   count a wait that returned before the second count-down as `latch_early`.
//!
//! A section is *unreported* when it was overtaken by a newer token, entered out of order or
//! had its write rejected, and its holder was never told its lock was lost (`is_lost()` at
//! the end of the section, or `unlock()` answering `LockLost`). That count must stay 0 under
//! every fault.
//!
//! The parent ([`Checker`]) starts the children, sums their counts, stops them and notices a
//! child that does not finish in time. A child runs [`run_child`]: the test binary (an
//! `#[ignore]`d test) or the soak example, started again with the checker's environment.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
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

/// Entering a critical section: the entry's number, and 1 if a token is not above every
/// token that entered before it. KEYS[1] counts entries; KEYS[1 + i] is the last token that
/// entered from master i, ARGV[i] the holder's token from that master (a Redlock holder has
/// one per master it holds; a single lock's holder has one).
const ENTER: &str = r"
local entry = redis.call('incr', KEYS[1])
local out_of_order = 0
for i = 1, #ARGV do
  local last = tonumber(redis.call('get', KEYS[i + 1]) or '0')
  local token = tonumber(ARGV[i])
  if token > last then
    redis.call('set', KEYS[i + 1], ARGV[i])
  else
    out_of_order = 1
  end
end
return {entry, out_of_order}
";

/// The protected resource for holders with several tokens (Redlock: one per master held):
/// KEYS[i] is the last accepted token from master i, ARGV[i] the writer's. Rejected if any
/// token is older than the last accepted from its master.
const FENCED_WRITE_MANY: &str = r"
for i = 1, #ARGV do
  if tonumber(ARGV[i]) < tonumber(redis.call('get', KEYS[i]) or '0') then
    return 0
  end
end
for i = 1, #ARGV do
  if tonumber(ARGV[i]) > tonumber(redis.call('get', KEYS[i]) or '0') then
    redis.call('set', KEYS[i], ARGV[i])
  end
end
return 1
";

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Child processes, each with one `Client`.
    pub processes: usize,
    /// Threads per process.
    pub threads: usize,
    pub locks: usize,
    /// How long a holder stays inside.
    pub hold: Duration,
    /// How long a thread waits for a lock.
    pub wait: Duration,
    pub watchdog: Duration,
    pub response_timeout: Duration,
    /// What the workers take turns with, round by round ([`Checked::ALL`] mixes every kind).
    pub kinds: Vec<Checked>,
    /// Whose data layout the children's clients speak.
    pub layout: redlatch::Layout,
}

/// The kinds of the lock family a checker can exercise, each with the promise it checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checked {
    /// `Lock` on `checked-<k>`: one holder at a time, fenced writes in token order.
    Lock,
    /// `SpinLock` on the same names as `Lock` (the same lock in Redis): the same promise.
    Spin,
    /// A read of `ReadWriteLock` `rw-<k>`: never together with a writer.
    Read,
    /// A write of `ReadWriteLock` `rw-<k>`: alone, fenced writes in token order.
    Write,
    /// 1 or 2 permits of `Semaphore` `sem-<k>`, whose total is [`PERMITS`]: never more in
    /// use than that.
    Permits,
    /// A round of a `CountDownLatch` of the worker's own: set to 2, counted down twice; a
    /// wait must not return true before the second count-down.
    Latch,
}

/// The total of every semaphore the checker uses.
pub const PERMITS: u32 = 3;

impl Checked {
    pub const ALL: [Checked; 6] = [
        Checked::Lock,
        Checked::Spin,
        Checked::Read,
        Checked::Write,
        Checked::Permits,
        Checked::Latch,
    ];

    fn name(self) -> &'static str {
        match self {
            Checked::Lock => "lock",
            Checked::Spin => "spin",
            Checked::Read => "read",
            Checked::Write => "write",
            Checked::Permits => "permits",
            Checked::Latch => "latch",
        }
    }

    fn parse(name: &str) -> Option<Checked> {
        Checked::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl Config {
    /// A `try_lock` that returns later than this after it was called is counted as late: the
    /// wait, plus one call that may be in flight when it runs out.
    fn late_after(&self) -> Duration {
        self.wait + self.response_timeout
    }

    fn to_env(&self) -> Vec<(&'static str, String)> {
        let ms = |d: Duration| d.as_micros().to_string();
        vec![
            ("CHECKER_THREADS", self.threads.to_string()),
            ("CHECKER_LOCKS", self.locks.to_string()),
            ("CHECKER_HOLD_US", ms(self.hold)),
            ("CHECKER_WAIT_US", ms(self.wait)),
            ("CHECKER_WATCHDOG_US", ms(self.watchdog)),
            ("CHECKER_RESPONSE_US", ms(self.response_timeout)),
            (
                "CHECKER_LAYOUT",
                if self.layout == redlatch::Layout::Redisson {
                    "redisson"
                } else {
                    "redlatch"
                }
                .to_string(),
            ),
            (
                "CHECKER_KINDS",
                self.kinds
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        ]
    }

    fn from_env() -> Option<Config> {
        let var = |n: &str| std::env::var(n).ok()?.parse::<u64>().ok();
        let us = |n: &str| var(n).map(Duration::from_micros);
        Some(Config {
            processes: 1,
            threads: var("CHECKER_THREADS")? as usize,
            locks: var("CHECKER_LOCKS")? as usize,
            hold: us("CHECKER_HOLD_US")?,
            wait: us("CHECKER_WAIT_US")?,
            watchdog: us("CHECKER_WATCHDOG_US")?,
            response_timeout: us("CHECKER_RESPONSE_US")?,
            layout: match std::env::var("CHECKER_LAYOUT").ok()?.as_str() {
                "redisson" => redlatch::Layout::Redisson,
                _ => redlatch::Layout::Redlatch,
            },
            kinds: std::env::var("CHECKER_KINDS")
                .ok()?
                .split(',')
                .map(Checked::parse)
                .collect::<Option<Vec<_>>>()
                .filter(|kinds| !kinds.is_empty())?,
        })
    }
}

/// The names of [`Counts`]' fields, in the resource server's hashes.
const FIELDS: [&str; 13] = [
    "sections",
    "overtaken",
    "out_of_order",
    "rejected",
    "reported_lost",
    "unreported",
    "errors",
    "other_errors",
    "timeouts",
    "late",
    "hung",
    "occupancy",
    "latch_early",
];

/// Counts so far, summed over the children.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counts {
    pub sections: u64,
    /// Sections another holder entered while they were inside.
    pub overtaken: u64,
    /// Sections entered with a token not above one that entered before.
    pub out_of_order: u64,
    /// Sections whose fenced write was rejected.
    pub rejected: u64,
    /// Sections whose holder was told: `is_lost()` at the end, or `unlock()` -> LockLost.
    pub reported_lost: u64,
    /// Overtaken, out-of-order or rejected sections whose holder was never told: must stay 0.
    pub unreported: u64,
    /// Calls that failed because Redis was unreachable, timed out or failed a command:
    /// `Error::Redis`.
    pub errors: u64,
    /// Calls that failed with any other error (`LockLost` from `unlock()` is counted as
    /// `reported_lost`): must stay 0.
    pub other_errors: u64,
    /// `try_lock` calls that ran out of time (`Ok(None)`).
    pub timeouts: u64,
    /// `try_lock` calls that returned later than their wait plus one response timeout.
    pub late: u64,
    /// Children that did not finish in time after being asked to stop.
    pub hung: u64,
    /// Entries into a shared object that broke its promise: a writer with anyone else, a
    /// reader with a writer, more permits in use than the total. Counted whether or not a
    /// holder was told (under faults that lose the lock state they may be excused; the
    /// checks of faults that keep it want none).
    pub occupancy: u64,
    /// Latch waits that returned true before their latch could have reached zero.
    pub latch_early: u64,
}

impl Counts {
    fn get(&mut self, field: &str) -> &mut u64 {
        match field {
            "sections" => &mut self.sections,
            "overtaken" => &mut self.overtaken,
            "out_of_order" => &mut self.out_of_order,
            "rejected" => &mut self.rejected,
            "reported_lost" => &mut self.reported_lost,
            "unreported" => &mut self.unreported,
            "errors" => &mut self.errors,
            "other_errors" => &mut self.other_errors,
            "timeouts" => &mut self.timeouts,
            "late" => &mut self.late,
            "hung" => &mut self.hung,
            "occupancy" => &mut self.occupancy,
            "latch_early" => &mut self.latch_early,
            _ => unreachable!("unknown field {field}"),
        }
    }
}

/// What a child says about itself once its client is gone.
#[derive(Clone, Debug, Default)]
pub struct Leftovers {
    /// Threads the child had after dropping its client, minus before creating it.
    pub threads: i64,
    /// The child's resident memory then, in kB.
    pub rss_kb: u64,
    /// Its live heap then, bytes, and before it made its client (0: not measured, see
    /// [`super::heap`]).
    pub heap_after: u64,
    pub heap_before: u64,
}

/// A child's live heap as it last reported it: bytes and allocations (zeros where it is not
/// measured).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heap {
    pub bytes: u64,
    pub allocations: u64,
}

/// The running children.
pub struct Checker {
    resource: redis::Client,
    children: Vec<Child>,
}

impl Checker {
    /// Starts `config.processes` children against the lock server at `lock_url`; the
    /// resource lives at `resource_url`, a server the faults leave alone. `child` makes the
    /// command that runs [`run_child`] in a new process (the checker adds its environment).
    pub fn start(
        lock_url: &str,
        resource_url: &str,
        config: &Config,
        child: impl Fn() -> Command,
    ) -> Checker {
        let resource = redis::Client::open(resource_url).unwrap();
        let mut con = resource.get_connection().unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        let children = (0..config.processes)
            .map(|i| {
                let mut cmd = child();
                for (k, v) in config.to_env() {
                    cmd.env(k, v);
                }
                cmd.env("CHECKER_LOCK_URL", lock_url)
                    .env("CHECKER_RESOURCE_URL", resource_url)
                    .env("CHECKER_CHILD", i.to_string())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .expect("start a checker child")
            })
            .collect();
        Checker { resource, children }
    }

    /// The children's process ids (to pause one, or read its memory).
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// The process of the child holding lock `k` now, if one does; `admin` is a connection
    /// to the lock server.
    pub fn holder_pid(&self, admin: &mut redis::Connection, k: usize) -> Option<u32> {
        let owners: Vec<String> = redis::cmd("HKEYS")
            .arg(format!("redlatch:{{checked-{k}}}"))
            .query(admin)
            .ok()?;
        let client = owners.first()?.rsplit_once(':')?.0.to_string();
        let mut con = self.con();
        (0..self.children.len())
            .find(|i| {
                redis::cmd("GET")
                    .arg(format!("checker:client:{i}"))
                    .query::<Option<String>>(&mut con)
                    .ok()
                    .flatten()
                    .as_deref()
                    == Some(client.as_str())
            })
            .map(|i| self.children[i].id())
    }

    fn con(&self) -> redis::Connection {
        let con = self
            .resource
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap();
        con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        con
    }

    /// The counts the children reported so far (they report every 100 ms).
    pub fn counts(&self) -> Counts {
        let mut con = self.con();
        let mut counts = Counts::default();
        for i in 0..self.children.len() {
            let child: HashMap<String, u64> = redis::cmd("HGETALL")
                .arg(format!("checker:counts:{i}"))
                .query(&mut con)
                .unwrap();
            for field in FIELDS {
                *counts.get(field) += child.get(field).copied().unwrap_or(0);
            }
        }
        counts
    }

    /// Each child's live heap, as it last reported it (every 100 ms).
    pub fn heaps(&self) -> Vec<Heap> {
        let mut con = self.con();
        (0..self.children.len())
            .map(|i| {
                let (bytes, allocations): (Option<u64>, Option<u64>) = redis::cmd("HMGET")
                    .arg(format!("checker:counts:{i}"))
                    .arg(&["heap_bytes", "heap_allocs"])
                    .query(&mut con)
                    .unwrap_or_default();
                Heap {
                    bytes: bytes.unwrap_or(0),
                    allocations: allocations.unwrap_or(0),
                }
            })
            .collect()
    }

    /// The occupancy violations (see [`Counts::occupancy`]) none of whose holders was ever
    /// told its hold was lost: under faults that lose the lock state, a violation is excused
    /// when the stale holder learned of its loss, as an overlap of locks is.
    pub fn occupancy_unexcused(&self) -> Vec<String> {
        occupancy_unexcused(&mut self.con())
    }

    /// What the children recorded about each unreported section.
    pub fn unreported(&self) -> Vec<String> {
        redis::cmd("LRANGE")
            .arg("checker:unreported")
            .arg(0)
            .arg(-1)
            .query(&mut self.con())
            .unwrap_or_default()
    }

    /// The waits (µs) recorded since the last call (at most the last 100,000).
    pub fn take_waits(&self) -> Vec<u64> {
        let mut con = self.con();
        let (waits, ()): (Vec<u64>, ()) = redis::pipe()
            .atomic()
            .lrange("checker:waits", 0, -1)
            .del("checker:waits")
            .query(&mut con)
            .unwrap();
        waits
    }

    /// Asks the children to stop and waits, at most `within`, until each has dropped its
    /// client and said what it left behind. A child that does not is counted as hung.
    /// `settled` runs then, while the children are still alive without their clients (to
    /// check the lock server's connections, say); afterwards the children exit.
    pub fn finish<T>(
        mut self,
        within: Duration,
        settled: impl FnOnce() -> T,
    ) -> (Counts, Vec<Leftovers>, T) {
        let mut con = self.con();
        let _: () = redis::cmd("SET")
            .arg("checker:stop")
            .arg(1)
            .query(&mut con)
            .unwrap();
        let deadline = Instant::now() + within;
        let mut leftovers = Vec::new();
        let mut hung = 0;
        for i in 0..self.children.len() {
            let key = format!("checker:done:{i}");
            let done =
                super::eventually(deadline.saturating_duration_since(Instant::now()), || {
                    redis::cmd("EXISTS")
                        .arg(&key)
                        .query::<bool>(&mut con)
                        .unwrap_or(false)
                });
            if done {
                let (threads, rss_kb, heap_after, heap_before): (i64, u64, u64, u64) =
                    redis::cmd("HMGET")
                        .arg(&key)
                        .arg(&["threads", "rss_kb", "heap_after", "heap_before"])
                        .query(&mut con)
                        .unwrap();
                leftovers.push(Leftovers {
                    threads,
                    rss_kb,
                    heap_after,
                    heap_before,
                });
            } else {
                hung += 1;
            }
        }
        let settled = settled();
        let _: () = redis::cmd("SET")
            .arg("checker:exit")
            .arg(1)
            .query(&mut con)
            .unwrap();
        let mut counts = self.counts();
        counts.hung = hung;
        for child in &mut self.children {
            let exited = super::eventually(Duration::from_secs(10), || {
                child.try_wait().ok().flatten().is_some()
            });
            if !exited {
                counts.hung += 1;
            }
        }
        (counts, leftovers, settled)
    }
}

impl Drop for Checker {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The child's side: runs the workers when this process was started by [`Checker::start`],
/// and returns whether it was.
pub fn run_child() -> bool {
    let (Some(config), Ok(lock_url), Ok(resource_url), Ok(me)) = (
        Config::from_env(),
        std::env::var("CHECKER_LOCK_URL"),
        std::env::var("CHECKER_RESOURCE_URL"),
        std::env::var("CHECKER_CHILD"),
    ) else {
        return false;
    };
    // A parent killed outright (SIGKILL, an OOM kill) runs no destructor to kill us: notice
    // that we were handed to another parent, and stop.
    let parent = std::os::unix::process::parent_id();
    let orphaned = || std::os::unix::process::parent_id() != parent;
    let threads_before = super::thread_count();
    // The resource's connection first, so that the heap before the client holds it too.
    let mut resource = Resource::open(&resource_url);
    let heap_before = super::heap::live().map_or(0, |(bytes, _)| bytes);
    // Several URLs, comma-separated: a Redlock over those masters.
    let clients: Vec<Client> = lock_url
        .split(',')
        .map(|url| {
            Client::builder(url)
                .layout(config.layout)
                .watchdog_timeout(config.watchdog)
                .response_timeout(config.response_timeout)
                .build()
                .unwrap()
        })
        .collect();
    let _ = resource.query::<()>(
        redis::cmd("SET")
            .arg(format!("checker:client:{me}"))
            .arg(clients[0].id()),
    );
    let locker = match clients.len() {
        1 => Locker::Single(clients[0].clone()),
        _ => Locker::Red(redlatch::RedlockClient::new(clients.clone()).unwrap()),
    };
    drop(clients);
    let shared = Arc::new(Shared::default());
    let workers: Vec<_> = (0..config.threads)
        .map(|t| {
            let (locker, shared, config) = (locker.clone(), shared.clone(), config.clone());
            let (resource_url, me) = (resource_url.clone(), me.clone());
            thread::spawn(move || work(&me, t, &locker, &config, &resource_url, &shared))
        })
        .collect();
    drop(locker);

    let key = format!("checker:counts:{me}");
    loop {
        thread::sleep(Duration::from_millis(100));
        shared.report(&mut resource, &key);
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        if orphaned()
            || resource.query::<bool>(redis::cmd("EXISTS").arg("checker:stop")) == Some(true)
        {
            shared.stop.store(true, Ordering::SeqCst);
        }
    }
    for worker in workers {
        worker.join().unwrap();
    }
    shared.report(&mut resource, &key);
    // The client is gone with the last worker: so should its threads be.
    super::eventually(Duration::from_secs(10), || {
        super::thread_count() <= threads_before
    });
    let threads = super::thread_count() as i64 - threads_before as i64;
    let _ = resource.query::<()>(
        redis::cmd("HSET")
            .arg(format!("checker:done:{me}"))
            .arg("threads")
            .arg(threads)
            .arg("rss_kb")
            .arg(rss_kb(std::process::id()))
            .arg("heap_before")
            .arg(heap_before)
            .arg("heap_after")
            .arg(super::heap::live().map_or(0, |(bytes, _)| bytes)),
    );
    super::eventually(Duration::from_secs(60), || {
        if orphaned() {
            return true;
        }
        resource.query::<bool>(redis::cmd("EXISTS").arg("checker:exit")) == Some(true)
    });
    true
}

/// [`Checker::occupancy_unexcused`], on a connection `con` to the resource server (for a
/// caller that has handed its checker to [`Checker::finish`]: call it from `settled`, when
/// every holder has said whether it was told).
pub fn occupancy_unexcused(con: &mut redis::Connection) -> Vec<String> {
    let violations: Vec<String> = redis::cmd("LRANGE")
        .arg("checker:violations")
        .arg(0)
        .arg(-1)
        .query(con)
        .unwrap_or_default();
    violations
        .into_iter()
        .filter(|record| {
            !record.split(' ').any(|id| {
                redis::cmd("EXISTS")
                    .arg(format!("checker:told:{id}"))
                    .query::<bool>(con)
                    .unwrap_or(false)
            })
        })
        .collect()
}

/// Wall-clock milliseconds, to line events of several processes up.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Resident memory of process `pid`, in kB.
pub fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// One child's counts, reported to the resource server by its main thread.
#[derive(Default)]
struct Shared {
    counts: Mutex<Counts>,
    waits: Mutex<Vec<u64>>,
    stop: AtomicBool,
}

impl Shared {
    fn report(&self, resource: &mut Resource, key: &str) {
        let mut counts = self.counts.lock().clone();
        let mut hset = redis::cmd("HSET");
        hset.arg(key);
        for field in FIELDS {
            hset.arg(field).arg(*counts.get(field));
        }
        if let Some((bytes, allocations)) = super::heap::live() {
            hset.arg("heap_bytes")
                .arg(bytes)
                .arg("heap_allocs")
                .arg(allocations);
        }
        let _ = resource.query::<()>(&hset);
        let waits = std::mem::take(&mut *self.waits.lock());
        if !waits.is_empty() {
            let mut pipe = redis::pipe();
            pipe.rpush("checker:waits", waits)
                .ignore()
                .ltrim("checker:waits", -100_000, -1)
                .ignore();
            let _ = pipe.query::<()>(&mut resource.con);
        }
    }
}

/// A connection to the resource server, which no fault touches; a call that fails anyway is
/// retried on a new connection a few times.
pub struct Resource {
    client: redis::Client,
    con: redis::Connection,
}

impl Resource {
    pub fn open(url: &str) -> Resource {
        let client = redis::Client::open(url).unwrap();
        let con = Resource::connect(&client);
        Resource { client, con }
    }

    fn connect(client: &redis::Client) -> redis::Connection {
        let con = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("the resource server is never faulted");
        con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        con
    }

    fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Option<T> {
        for _ in 0..5 {
            match cmd.query(&mut self.con) {
                Ok(v) => return Some(v),
                Err(_) => {
                    thread::sleep(Duration::from_millis(20));
                    self.con = Resource::connect(&self.client);
                }
            }
        }
        None
    }

    fn invoke<T: redis::FromRedisValue>(&mut self, script: &redis::ScriptInvocation) -> T {
        for _ in 0..5 {
            match script.invoke(&mut self.con) {
                Ok(v) => return v,
                Err(_) => {
                    thread::sleep(Duration::from_millis(20));
                    self.con = Resource::connect(&self.client);
                }
            }
        }
        panic!("the resource server stopped answering");
    }
}

/// What a child's workers take their locks from.
#[derive(Clone)]
enum Locker {
    Single(Client),
    Red(redlatch::RedlockClient),
}

impl Locker {
    /// Takes `kind` on object `which` for one section (`round` picks how many permits).
    fn acquire(
        &self,
        kind: Checked,
        which: usize,
        round: u64,
        wait: Duration,
    ) -> redlatch::Result<Option<Held>> {
        let client = match self {
            Locker::Red(redlock) => {
                let guard = redlock
                    .lock(&format!("checked-{which}"))
                    .try_lock(wait, None)?;
                return Ok(guard.map(Held::Red));
            }
            Locker::Single(client) => client,
        };
        let lock = format!("checked-{which}");
        let rw = format!("rw-{which}");
        Ok(match kind {
            Checked::Lock => client.lock(&lock).try_lock(wait, None)?.map(Held::Single),
            Checked::Spin => client
                .spin_lock(&lock)
                .try_lock(wait, None)?
                .map(Held::Single),
            Checked::Read => client
                .read_write_lock(&rw)
                .try_read(wait, None)?
                .map(Held::Read),
            Checked::Write => client
                .read_write_lock(&rw)
                .try_write(wait, None)?
                .map(Held::Write),
            Checked::Permits => {
                let semaphore = client.semaphore(&format!("sem-{which}"));
                semaphore.set_permits(PERMITS)?;
                let n = 1 + (round % 2) as u32;
                semaphore.try_acquire(n, wait, None)?.map(Held::Permits)
            }
            Checked::Latch => unreachable!("a latch round holds nothing"),
        })
    }

    fn client(&self) -> Option<&Client> {
        match self {
            Locker::Single(client) => Some(client),
            Locker::Red(_) => None,
        }
    }
}

fn count_error(shared: &Shared, e: &Error) {
    let mut counts = shared.counts.lock();
    match e {
        Error::Redis(_) => counts.errors += 1,
        _ => counts.other_errors += 1,
    }
}

fn work(
    child: &str,
    me: usize,
    locker: &Locker,
    config: &Config,
    resource_url: &str,
    shared: &Shared,
) {
    let mut resource = Resource::open(resource_url);
    for round in 0..u64::MAX {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let which = (me + round as usize) % config.locks;
        let kind = config.kinds[(me + round as usize / config.locks) % config.kinds.len()];
        if kind == Checked::Latch {
            if let Some(client) = locker.client() {
                latch_round(client, &format!("latch-{child}-{me}"), shared);
            }
            continue;
        }
        let asked = Instant::now();
        let asked_at = unix_ms();
        let acquired = locker.acquire(kind, which, round, config.wait);
        let waited = asked.elapsed();
        if waited > config.late_after() {
            shared.counts.lock().late += 1;
        }
        let held = match acquired {
            Ok(Some(held)) => held,
            Ok(None) => {
                shared.counts.lock().timeouts += 1;
                continue;
            }
            Err(e) => {
                count_error(shared, &e);
                thread::sleep(Duration::from_millis(20)); // Redis is away: don't spin
                continue;
            }
        };
        {
            let mut waits = shared.waits.lock();
            if waits.len() < 100_000 {
                waits.push(waited.as_micros() as u64);
            }
        }
        let id = format!("{child}-{me}-{round}");
        let token = held.tokens();
        let object = match kind {
            Checked::Read | Checked::Write => format!("rw{which}"),
            Checked::Permits => format!("sem{which}"),
            _ => which.to_string(),
        };
        let occupied = held
            .occupancy()
            .map(|occupancy| resource.occupy(&object, &id, occupancy));
        let entered = (!token.is_empty()).then(|| resource.enter_with(&object, token.clone()));
        thread::sleep(config.hold);
        let vacate = |resource: &mut Resource| {
            if occupied.is_some() {
                resource.vacate(&object, &id);
            }
        };
        let (section, released) = match entered {
            Some(entered) => resource.leave_with(entered, held, vacate),
            None => {
                vacate(&mut resource);
                let lost_at_end = held.is_lost();
                let released = held.unlock();
                let told = lost_at_end || matches!(released, Err(Error::LockLost { .. }));
                let section = Section {
                    told,
                    ..Section::default()
                };
                (section, released)
            }
        };
        if section.told && occupied.is_some() {
            resource.told(&id);
        }
        let took = asked.elapsed().saturating_sub(waited);
        let mut counts = shared.counts.lock();
        counts.sections += 1;
        counts.overtaken += u64::from(section.overtaken);
        counts.out_of_order += u64::from(section.out_of_order);
        counts.rejected += u64::from(section.rejected);
        counts.reported_lost += u64::from(section.told);
        counts.unreported += u64::from(section.unreported());
        counts.occupancy += u64::from(occupied == Some(true));
        match released {
            Ok(()) | Err(Error::LockLost { .. }) => {}
            Err(Error::Redis(_)) => counts.errors += 1,
            Err(_) => counts.other_errors += 1,
        }
        drop(counts);
        if section.unreported() {
            // What it takes to find out why, next to the faults' times (unix ms).
            let detail = format!(
                "{kind:?} {object} tokens {token:?} {section:?} asked at {asked_at} waited \
                 {waited:?} took {took:?} ended at {} unlock {released:?}",
                unix_ms()
            );
            let _ = resource.query::<()>(redis::cmd("RPUSH").arg("checker:unreported").arg(detail));
        }
    }
}

/// One round of latch `name`: set to 2, counted down once, a short wait (which must not see
/// zero), counted down again, a wait. A count-down that failed may or may not have counted,
/// but never twice (the client retries with the same request id), so a wait that returns
/// true after fewer than two count-down calls saw zero too early. A round that an error left
/// running is counted down to zero at the start of the next.
fn latch_round(client: &Client, name: &str, shared: &Shared) {
    let latch = client.count_down_latch(name);
    let started = match latch.try_set_count(2) {
        Ok(true) => true,
        Ok(false) => false,
        Err(e) => return count_error(shared, &e),
    };
    if !started {
        for _ in 0..3 {
            match latch.count_down() {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) => return count_error(shared, &e),
            }
        }
        return;
    }
    for calls in 1..=2 {
        if let Err(e) = latch.count_down() {
            count_error(shared, &e);
        }
        let wait = if calls < 2 {
            Duration::from_millis(20)
        } else {
            Duration::from_secs(1)
        };
        match latch.wait(wait) {
            Ok(true) if calls < 2 => shared.counts.lock().latch_early += 1,
            Ok(_) => {}
            Err(e) => count_error(shared, &e),
        }
    }
    shared.counts.lock().sections += 1;
}

/// A holder inside lock `which`'s critical section, as [`Resource::enter`] noted it.
pub struct Entered {
    which: String,
    /// (master, token) for each master the holder holds.
    tokens: Vec<(usize, u64)>,
    /// The entry's number.
    entry: u64,
    /// Its token was not above every token that entered before.
    out_of_order: bool,
}

/// What one critical section showed, once its holder left.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Section {
    /// Another holder entered while this one was inside.
    pub overtaken: bool,
    /// A holder with a newer token entered while this one was inside: this one's lock had
    /// been lost. (An older token entering is that holder's fault: it is `out_of_order`.)
    pub overtaken_by_newer: bool,
    /// It entered with a token not above one that entered before it.
    pub out_of_order: bool,
    /// Its fenced write was rejected.
    pub rejected: bool,
    /// Its holder was told the lock was lost: `is_lost()` at the end, or `unlock()` answered
    /// `LockLost`.
    pub told: bool,
}

impl Section {
    /// Whether this section broke the lock's promise without its holder being told. Of two
    /// holders that overlap, the one with the older token is the stale one and must have been
    /// told: it finds a newer token entered while it was inside (`overtaken_by_newer`) or,
    /// entering late, one above its own (`out_of_order`). The other did nothing wrong.
    pub fn unreported(&self) -> bool {
        (self.overtaken_by_newer || self.out_of_order || self.rejected) && !self.told
    }
}

/// What a worker holds: a lock, a Redlock over several masters, a read or a write, permits.
pub enum Held {
    Single(redlatch::LockGuard),
    Red(redlatch::RedlockGuard),
    Read(redlatch::ReadGuard),
    Write(redlatch::WriteGuard),
    Permits(redlatch::Permits),
}

impl Held {
    /// (master, token) for each master held, for the holders whose tokens order their
    /// writes: none for a read or permits (many hold at once; they are checked by
    /// occupancy instead).
    pub fn tokens(&self) -> Vec<(usize, u64)> {
        match self {
            Held::Single(g) => vec![(0, g.fencing_token())],
            Held::Write(g) => vec![(0, g.fencing_token())],
            Held::Red(g) => g
                .fencing_tokens()
                .into_iter()
                .enumerate()
                .filter_map(|(m, t)| Some((m, t?)))
                .collect(),
            Held::Read(_) | Held::Permits(_) => Vec::new(),
        }
    }

    /// How this holder occupies a shared object: `("w", 1)` a writer, `("r", 1)` a reader,
    /// `("p", n)` n permits; `None` for a lock.
    fn occupancy(&self) -> Option<(&'static str, u32)> {
        match self {
            Held::Single(_) | Held::Red(_) => None,
            Held::Read(_) => Some(("r", 1)),
            Held::Write(_) => Some(("w", 1)),
            Held::Permits(p) => Some(("p", p.count())),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::Single(g) => g.is_lost(),
            Held::Red(g) => g.is_lost(),
            Held::Read(g) => g.is_lost(),
            Held::Write(g) => g.is_lost(),
            Held::Permits(p) => p.is_lost(),
        }
    }

    fn unlock(self) -> redlatch::Result<()> {
        match self {
            Held::Single(g) => g.unlock(),
            Held::Red(g) => g.unlock(),
            Held::Read(g) => g.unlock(),
            Held::Write(g) => g.unlock(),
            Held::Permits(p) => p.release(),
        }
    }
}

/// Taking a place in a shared object: KEYS[1] is the hash of who is inside (id -> "mode n"),
/// KEYS[2] the list of violations, ARGV the holder's id, mode ("r", "w" or "p") and n,
/// ARGV[4] the semaphores' total. Answers 1, and records "<id> <everyone inside>" as a
/// violation, if the place breaks the object's promise: a writer with anyone else, a reader
/// with a writer, more permits in use than the total.
const OCCUPY: &str = r"
local inside = redis.call('hgetall', KEYS[1])
local mode, n, total = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local used, writers, others = n, 0, {}
for i = 1, #inside, 2 do
  local m, k = string.match(inside[i + 1], '^(%a) (%d+)$')
  if m == 'w' then writers = writers + 1 end
  used = used + tonumber(k)
  table.insert(others, inside[i])
end
redis.call('hset', KEYS[1], ARGV[1], mode .. ' ' .. n)
local broke
if mode == 'w' then
  broke = #others > 0
elseif mode == 'r' then
  broke = writers > 0
else
  broke = used > total
end
if broke then
  redis.call('rpush', KEYS[2], ARGV[1] .. ' ' .. table.concat(others, ' '))
  return 1
end
return 0
";

impl Resource {
    /// Enters lock `which`'s critical section with `token`.
    pub fn enter(&mut self, which: usize, token: u64) -> Entered {
        self.enter_with(&which.to_string(), vec![(0, token)])
    }

    /// Enters the critical section of object `which` with a token per master.
    pub fn enter_with(&mut self, which: &str, tokens: Vec<(usize, u64)>) -> Entered {
        let script = redis::Script::new(ENTER);
        let mut invocation = script.key(format!("entries:{which}"));
        for (m, token) in &tokens {
            invocation.key(format!("last:{which}:{m}")).arg(*token);
        }
        let (entry, out_of_order): (u64, u64) = self.invoke(&invocation);
        Entered {
            which: which.to_string(),
            tokens,
            entry,
            out_of_order: out_of_order == 1,
        }
    }

    /// Writes with the section's token, checks who entered meanwhile, and releases `guard`.
    pub fn leave(
        &mut self,
        entered: Entered,
        guard: redlatch::LockGuard,
    ) -> (Section, redlatch::Result<()>) {
        self.leave_held(entered, Held::Single(guard))
    }

    /// Writes with the section's tokens, checks who entered meanwhile, and releases `held`.
    pub fn leave_held(&mut self, entered: Entered, held: Held) -> (Section, redlatch::Result<()>) {
        self.leave_with(entered, held, |_| {})
    }

    /// Takes holder `id`'s place in shared object `object` (see [`OCCUPY`]); `true` if that
    /// broke the object's promise.
    fn occupy(&mut self, object: &str, id: &str, (mode, n): (&str, u32)) -> bool {
        let script = redis::Script::new(OCCUPY);
        let mut invocation = script.key(format!("inside:{object}"));
        invocation.key("checker:violations");
        invocation.arg(id).arg(mode).arg(n).arg(PERMITS);
        let broke: i64 = self.invoke(&invocation);
        broke == 1
    }

    /// Notes that holder `id` was told its hold was lost: a violation it took part in is
    /// excused (see [`Checker::occupancy_unexcused`]).
    fn told(&mut self, id: &str) {
        let _ = self.query::<()>(redis::cmd("SET").arg(format!("checker:told:{id}")).arg(1));
    }

    /// Gives holder `id`'s place in `object` up.
    fn vacate(&mut self, object: &str, id: &str) {
        let _ = self.query::<()>(redis::cmd("HDEL").arg(format!("inside:{object}")).arg(id));
    }

    /// [`Resource::leave_held`], running `before_unlock` (leaving a shared object's places)
    /// after the write and before the release, so that nobody the release admits finds this
    /// holder still inside.
    fn leave_with(
        &mut self,
        entered: Entered,
        held: Held,
        before_unlock: impl FnOnce(&mut Resource),
    ) -> (Section, redlatch::Result<()>) {
        let which = entered.which.clone();
        // The same token again is harmless, so a write whose reply was cut off is retried.
        let script = redis::Script::new(FENCED_WRITE_MANY);
        let mut write = script.prepare_invoke();
        let mut read = redis::cmd("MGET");
        read.arg(format!("entries:{which}"));
        for (m, token) in &entered.tokens {
            write.key(format!("resource:{which}:{m}")).arg(*token);
            read.arg(format!("last:{which}:{m}"));
        }
        let accepted: i64 = self.invoke(&write);
        let seen: Vec<u64> = self.query(&read).unwrap_or_default();
        before_unlock(self);
        let lost_at_end = held.is_lost();
        let released = held.unlock();
        let entries = seen.first().copied().unwrap_or(entered.entry);
        let overtaken_by_newer = entered
            .tokens
            .iter()
            .zip(seen.iter().skip(1))
            .any(|((_, mine), last)| last > mine);
        let section = Section {
            overtaken: entries != entered.entry,
            overtaken_by_newer,
            out_of_order: entered.out_of_order,
            rejected: accepted == 0,
            told: lost_at_end || matches!(released, Err(Error::LockLost { .. })),
        };
        (section, released)
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
