//! The three locks the report runs side by side, behind one small interface.

use std::time::{Duration, Instant};

use redis::io::tcp::TcpSettings;

/// A lock implementation under test: makes one handle per (client, thread).
pub trait Contender: Sync {
    /// Short name used in the table and the JSON keys.
    fn name(&self) -> &'static str;
    /// A handle on lock `lock` for a thread of simulated client `client`.
    fn handle(&self, client: usize, lock: &str) -> Box<dyn Handle>;
    /// Commands that this implementation's scripts run inside EVAL/EVALSHA. INFO commandstats
    /// counts those too; the report counts only commands a client sent, so it subtracts them.
    fn inner_commands(&self) -> &'static [&'static str];
    /// PUBLISH calls made inside scripts per release (subtracted like `inner_commands`).
    fn inner_publishes_per_release(&self) -> u64 {
        0
    }
}

/// Every command redlatch's scripts run, read from their text (`redis.call('<name>'` and
/// `redis.pcall('<name>'`), so that a script that starts using a new command is counted
/// right without anyone updating a list. The PUBLISH a release makes (its name is an
/// argument) is counted by `inner_publishes_per_release` instead; `and_publish` adds it.
fn redlatch_script_commands(and_publish: bool) -> &'static [&'static str] {
    use std::sync::OnceLock;
    static PLAIN: OnceLock<Vec<&'static str>> = OnceLock::new();
    static WITH_PUBLISH: OnceLock<Vec<&'static str>> = OnceLock::new();
    let plain = PLAIN.get_or_init(|| {
        const SCRIPTS: &[&str] = &[
            include_str!("../../lua/acquire.lua"),
            include_str!("../../lua/acquire_many.lua"),
            include_str!("../../lua/places.lua"),
            include_str!("../../lua/force_unlock.lua"),
            include_str!("../../lua/inspect.lua"),
            include_str!("../../lua/latch_count.lua"),
            include_str!("../../lua/latch_count_down.lua"),
            include_str!("../../lua/latch_set.lua"),
            include_str!("../../lua/release.lua"),
            include_str!("../../lua/renew.lua"),
            include_str!("../../lua/semaphore_counts.lua"),
            include_str!("../../lua/semaphore_set.lua"),
            include_str!("../../lua/shares.lua"),
            include_str!("../../lua/shares_acquire.lua"),
            include_str!("../../lua/shares_release.lua"),
            include_str!("../../lua/shares_renew.lua"),
            include_str!("../../lua/shares_withdraw.lua"),
            include_str!("../../lua/withdraw.lua"),
            include_str!("../../lua/redisson/acquire.lua"),
            include_str!("../../lua/redisson/acquire_many.lua"),
            include_str!("../../lua/redisson/fair_acquire.lua"),
            include_str!("../../lua/redisson/fair_release.lua"),
            include_str!("../../lua/redisson/fair_withdraw.lua"),
            include_str!("../../lua/redisson/force_unlock.lua"),
            include_str!("../../lua/redisson/latch_count_down.lua"),
            include_str!("../../lua/redisson/latch_set.lua"),
            include_str!("../../lua/redisson/release.lua"),
            include_str!("../../lua/redisson/renew.lua"),
        ];
        let mut names: Vec<&'static str> = SCRIPTS
            .iter()
            .flat_map(|text| {
                ["redis.call('", "redis.pcall('"]
                    .into_iter()
                    .flat_map(move |call| {
                        text.match_indices(call).filter_map(move |(at, _)| {
                            let rest = &text[at + call.len()..];
                            rest.find('\'').map(|end| &rest[..end])
                        })
                    })
            })
            .collect();
        names.sort_unstable();
        names.dedup();
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase())),
            "commands the report cannot match with INFO commandstats: {names:?}"
        );
        names
    });
    if and_publish {
        WITH_PUBLISH.get_or_init(|| plain.iter().copied().chain(["publish"]).collect())
    } else {
        plain
    }
}

/// One thread's use of one lock.
pub trait Handle {
    /// Waits at most `wait`; `true` if acquired.
    fn lock(&mut self, wait: Duration) -> bool;
    fn unlock(&mut self);
    /// After a `lock` that a hand-over answered: when the subscriber thread had the message,
    /// and when the waiting thread ran again (redlatch's locks only).
    fn last_hand_over(&mut self) -> Option<(Instant, Instant)> {
        None
    }
}

/// The seed articles' reentrant HSET lock and unlock scripts (KEYS: lock, channel; ARGV:
/// owner, lease ms): lock answers nil when acquired, else the PTTL.
pub fn seed_scripts() -> (redis::Script, redis::Script) {
    let lock = redis::Script::new(
        "if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[1]) == 1 then \
           redis.call('hincrby', KEYS[1], ARGV[1], 1) redis.call('pexpire', KEYS[1], ARGV[2]) return nil end \
         return redis.call('pttl', KEYS[1])",
    );
    let unlock = redis::Script::new(
        "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil end \
         local n = redis.call('hincrby', KEYS[1], ARGV[1], -1) \
         if n > 0 then redis.call('pexpire', KEYS[1], ARGV[2]) return 0 end \
         redis.call('del', KEYS[1]) redis.call('publish', KEYS[2], 'unlock') return 1",
    );
    (lock, unlock)
}

/// The seed lock script with a fencing token added the way redlatch keeps one (the server's
/// clock in µs, written to a fence key with its life in one SET ... PX ... GET), and nothing
/// else of ours (no check of the old token, no queue): KEYS lock, fence; ARGV owner, lease
/// ms, fence life ms. What the contract's token alone costs the seed lock.
pub fn seed_fenced_lock_script() -> redis::Script {
    redis::Script::new(
        "if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[1]) == 1 then \
           local t = redis.call('time') \
           redis.call('set', KEYS[2], t[1] .. string.sub('00000' .. t[2], -6), 'PX', ARGV[3], 'GET') \
           redis.call('hincrby', KEYS[1], ARGV[1], 1) redis.call('pexpire', KEYS[1], ARGV[2]) return nil end \
         return redis.call('pttl', KEYS[1])",
    )
}

/// A connection like redlatch's own: TCP_NODELAY on, so PING and the baselines get the same
/// transport.
pub fn connection(url: &str) -> redis::Connection {
    let info = redis::IntoConnectionInfo::into_connection_info(url).unwrap();
    let info = info.set_tcp_settings(TcpSettings::default().set_nodelay(true));
    redis::Client::open(info).unwrap().get_connection().unwrap()
}

// ---------------------------------------------------------------------------------------------

/// redlatch itself: one `Client` per simulated client, shared by its threads.
pub struct Redlatch {
    clients: Vec<redlatch::Client>,
}

impl Redlatch {
    pub fn new(url: &str, clients: usize) -> Redlatch {
        Redlatch::with_layout(url, clients, redlatch::Layout::Redlatch)
    }

    /// Clients that speak `layout` (Redisson's: a release wakes one waiter per client, who
    /// attempts again).
    pub fn with_layout(url: &str, clients: usize, layout: redlatch::Layout) -> Redlatch {
        Redlatch {
            clients: (0..clients)
                .map(|_| {
                    redlatch::Client::builder(url)
                        .layout(layout)
                        .build()
                        .unwrap()
                })
                .collect(),
        }
    }
}

impl Contender for Redlatch {
    fn name(&self) -> &'static str {
        "redlatch"
    }
    fn handle(&self, client: usize, lock: &str) -> Box<dyn Handle> {
        Box::new(RedlatchHandle {
            lock: self.clients[client].lock(lock),
            guard: None,
        })
    }
    fn inner_commands(&self) -> &'static [&'static str] {
        redlatch_script_commands(false)
    }
    fn inner_publishes_per_release(&self) -> u64 {
        1
    }
}

struct RedlatchHandle {
    lock: redlatch::Lock,
    guard: Option<redlatch::LockGuard>,
}

impl Handle for RedlatchHandle {
    fn lock(&mut self, wait: Duration) -> bool {
        self.guard = self.lock.try_lock(wait, None).unwrap();
        self.guard.is_some()
    }
    fn unlock(&mut self) {
        self.guard.take().unwrap().unlock().unwrap();
    }
    fn last_hand_over(&mut self) -> Option<(Instant, Instant)> {
        redlatch::bench_support::last_message_wake()
    }
}

// ---------------------------------------------------------------------------------------------

/// The seed articles' lock: SET NX PX with a random token, compare-and-delete unlock, waiters
/// retry every millisecond. One connection per thread.
pub struct Polling {
    url: String,
}

impl Polling {
    pub fn new(url: &str) -> Polling {
        Polling {
            url: url.to_string(),
        }
    }
}

pub const COMPARE_AND_DELETE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

impl Contender for Polling {
    fn name(&self) -> &'static str {
        "polling"
    }
    fn handle(&self, _client: usize, lock: &str) -> Box<dyn Handle> {
        Box::new(PollingHandle {
            con: connection(&self.url),
            key: format!("polling:{lock}"),
            token: String::new(),
            unlock: redis::Script::new(COMPARE_AND_DELETE),
        })
    }
    fn inner_commands(&self) -> &'static [&'static str] {
        &["get", "del"]
    }
}

struct PollingHandle {
    con: redis::Connection,
    key: String,
    token: String,
    unlock: redis::Script,
}

impl Handle for PollingHandle {
    fn lock(&mut self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        self.token = uuid::Uuid::new_v4().to_string();
        loop {
            let ok: Option<String> = redis::cmd("SET")
                .arg(&self.key)
                .arg(&self.token)
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query(&mut self.con)
                .unwrap();
            if ok.is_some() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    fn unlock(&mut self) {
        let _: i64 = self
            .unlock
            .key(&self.key)
            .arg(&self.token)
            .invoke(&mut self.con)
            .unwrap();
    }
}

// ---------------------------------------------------------------------------------------------

/// The `redlock` crate (redlock-rs 2.x) on a single server: its `lock()` makes `retry_count`
/// attempts with a random sleep in `[0, retry_delay)` ms between them; we call it until the
/// wait is over. It opens a new connection for every command.
pub struct RedlockRs {
    managers: Vec<&'static redlock::RedLock>,
    label: &'static str,
}

impl RedlockRs {
    /// `retry_delay_ms: None` keeps the crate's defaults (3 attempts, 0-200 ms sleeps).
    pub fn new(
        url: &str,
        clients: usize,
        retry_delay_ms: Option<u32>,
        label: &'static str,
    ) -> RedlockRs {
        let managers = (0..clients)
            .map(|_| {
                let mut rl = redlock::RedLock::new(vec![url.to_string()]);
                if let Some(delay) = retry_delay_ms {
                    rl.set_retry(3, delay);
                }
                // Handles borrow the manager for as long as the bench runs.
                &*Box::leak(Box::new(rl))
            })
            .collect();
        RedlockRs { managers, label }
    }
}

impl Contender for RedlockRs {
    fn name(&self) -> &'static str {
        self.label
    }
    fn handle(&self, client: usize, lock: &str) -> Box<dyn Handle> {
        Box::new(RedlockHandle {
            manager: self.managers[client],
            resource: format!("redlock:{lock}").into_bytes(),
            held: None,
        })
    }
    fn inner_commands(&self) -> &'static [&'static str] {
        &["get", "del"]
    }
}

struct RedlockHandle {
    manager: &'static redlock::RedLock,
    resource: Vec<u8>,
    held: Option<redlock::Lock<'static>>,
}

impl Handle for RedlockHandle {
    fn lock(&mut self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(lock) = self.manager.lock(&self.resource, 30_000).unwrap() {
                self.held = Some(lock);
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
    }
    fn unlock(&mut self) {
        let lock = self.held.take().unwrap();
        self.manager.unlock(&lock);
    }
}

// ---------------------------------------------------------------------------------------------

/// A redlatch semaphore of one permit, used as a lock: its hand-off against the lock's.
pub struct RedlatchSemaphore {
    clients: Vec<redlatch::Client>,
}

impl RedlatchSemaphore {
    pub fn new(url: &str, clients: usize) -> RedlatchSemaphore {
        RedlatchSemaphore {
            clients: (0..clients)
                .map(|_| redlatch::Client::open(url).unwrap())
                .collect(),
        }
    }
}

impl Contender for RedlatchSemaphore {
    fn name(&self) -> &'static str {
        "redlatch-semaphore"
    }
    fn handle(&self, client: usize, lock: &str) -> Box<dyn Handle> {
        let semaphore = self.clients[client].semaphore(lock);
        semaphore.set_permits(1).unwrap();
        Box::new(SemaphoreHandle {
            semaphore,
            permits: None,
        })
    }
    fn inner_commands(&self) -> &'static [&'static str] {
        redlatch_script_commands(true)
    }
}

struct SemaphoreHandle {
    semaphore: redlatch::Semaphore,
    permits: Option<redlatch::Permits>,
}

impl Handle for SemaphoreHandle {
    fn lock(&mut self, wait: Duration) -> bool {
        self.permits = self.semaphore.try_acquire(1, wait, None).unwrap();
        self.permits.is_some()
    }
    fn unlock(&mut self) {
        self.permits.take().unwrap().release().unwrap();
    }
    fn last_hand_over(&mut self) -> Option<(Instant, Instant)> {
        redlatch::bench_support::last_message_wake()
    }
}

/// Writers of a redlatch read-write lock, used as a lock: a write's hand-off against the
/// lock's.
pub struct RedlatchWriters {
    clients: Vec<redlatch::Client>,
}

impl RedlatchWriters {
    pub fn new(url: &str, clients: usize) -> RedlatchWriters {
        RedlatchWriters {
            clients: (0..clients)
                .map(|_| redlatch::Client::open(url).unwrap())
                .collect(),
        }
    }
}

impl Contender for RedlatchWriters {
    fn name(&self) -> &'static str {
        "redlatch-writers"
    }
    fn handle(&self, client: usize, lock: &str) -> Box<dyn Handle> {
        Box::new(WriterHandle {
            lock: self.clients[client].read_write_lock(lock),
            guard: None,
        })
    }
    fn inner_commands(&self) -> &'static [&'static str] {
        redlatch_script_commands(true)
    }
}

struct WriterHandle {
    lock: redlatch::ReadWriteLock,
    guard: Option<redlatch::WriteGuard>,
}

impl Handle for WriterHandle {
    fn lock(&mut self, wait: Duration) -> bool {
        self.guard = self.lock.try_write(wait, None).unwrap();
        self.guard.is_some()
    }
    fn unlock(&mut self) {
        self.guard.take().unwrap().unlock().unwrap();
    }
    fn last_hand_over(&mut self) -> Option<(Instant, Instant)> {
        redlatch::bench_support::last_message_wake()
    }
}

/// Readers of a redlatch read-write lock: they share it, so only their throughput counts.
pub struct RedlatchReaders {
    clients: Vec<redlatch::Client>,
}

impl RedlatchReaders {
    pub fn new(url: &str, clients: usize) -> RedlatchReaders {
        RedlatchReaders {
            clients: (0..clients)
                .map(|_| redlatch::Client::open(url).unwrap())
                .collect(),
        }
    }
}

impl Contender for RedlatchReaders {
    fn name(&self) -> &'static str {
        "redlatch-readers"
    }
    fn handle(&self, client: usize, lock: &str) -> Box<dyn Handle> {
        Box::new(ReaderHandle {
            lock: self.clients[client].read_write_lock(lock),
            guard: None,
        })
    }
    fn inner_commands(&self) -> &'static [&'static str] {
        redlatch_script_commands(true)
    }
}

struct ReaderHandle {
    lock: redlatch::ReadWriteLock,
    guard: Option<redlatch::ReadGuard>,
}

impl Handle for ReaderHandle {
    fn lock(&mut self, wait: Duration) -> bool {
        self.guard = self.lock.try_read(wait, None).unwrap();
        self.guard.is_some()
    }
    fn unlock(&mut self) {
        self.guard.take().unwrap().unlock().unwrap();
    }
}

/// redlatch's spin lock: the lock itself, waited for by backoff instead of pub/sub.
pub struct RedlatchSpin {
    clients: Vec<redlatch::Client>,
}

impl RedlatchSpin {
    pub fn new(url: &str, clients: usize) -> RedlatchSpin {
        RedlatchSpin {
            clients: (0..clients)
                .map(|_| redlatch::Client::open(url).unwrap())
                .collect(),
        }
    }
}

impl Contender for RedlatchSpin {
    fn name(&self) -> &'static str {
        "redlatch-spin"
    }
    fn handle(&self, client: usize, lock: &str) -> Box<dyn Handle> {
        Box::new(SpinHandle {
            lock: self.clients[client].spin_lock(lock),
            guard: None,
        })
    }
    fn inner_commands(&self) -> &'static [&'static str] {
        redlatch_script_commands(true)
    }
}

struct SpinHandle {
    lock: redlatch::SpinLock,
    guard: Option<redlatch::LockGuard>,
}

impl Handle for SpinHandle {
    fn lock(&mut self, wait: Duration) -> bool {
        self.guard = self.lock.try_lock(wait, None).unwrap();
        self.guard.is_some()
    }
    fn unlock(&mut self) {
        self.guard.take().unwrap().unlock().unwrap();
    }
}
