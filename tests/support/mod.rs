//! Test support: private `redis-server` processes on free loopback ports, a fault-injecting
//! TCP proxy, and bounded waiting. Every helper here gives up after a deadline.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A redis-server child process on a free loopback port; killed on drop.
pub struct RedisServer {
    pub port: u16,
    /// `redis-server` (from PATH) unless a caller names a binary: the benchmark report runs
    /// several servers side by side in one process, so PATH cannot choose for it.
    program: String,
    args: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// A server with no persistence, on a free port.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// For the examples: `REDIS_URL` if it is set, else a private server started here (kept
    /// alive, and stopped, by the returned value, which the caller declares before its
    /// clients so that it is dropped after them).
    #[allow(dead_code)] // only the examples call it
    pub fn unless_redis_url() -> (Option<RedisServer>, String) {
        match std::env::var("REDIS_URL") {
            Ok(url) => (None, url),
            Err(_) => {
                let server = RedisServer::start();
                let url = server.url();
                (Some(server), url)
            }
        }
    }

    /// A server with extra `redis-server` arguments, e.g. `["--requirepass", "s3cret"]`.
    pub fn start_with(args: &[&str]) -> RedisServer {
        RedisServer::start_program("redis-server", args)
    }

    /// A server from binary `program` (a path, or a name looked up on PATH), with extra
    /// arguments.
    pub fn start_program(program: &str, args: &[&str]) -> RedisServer {
        for _ in 0..20 {
            let port = free_port();
            let mut server = RedisServer {
                port,
                program: program.to_string(),
                args: args.iter().map(|s| s.to_string()).collect(),
                child: None,
            };
            if server.spawn() {
                return server;
            }
        }
        panic!("could not start {program} on a free port (is redis-server on PATH?)");
    }

    fn spawn(&mut self) -> bool {
        // A data file of a name no server used before, in the temporary folder: a server loads
        // the one in its folder when it starts, and one left in the working directory (by a
        // server of another version, whose format an older one cannot read) would stop it or
        // bring back data a restart must not have.
        static SPAWNED: AtomicU64 = AtomicU64::new(0);
        let dbfilename = format!(
            "redlatch-test-{}-{}.rdb",
            std::process::id(),
            SPAWNED.fetch_add(1, Ordering::Relaxed)
        );
        let child = Command::new(&self.program)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--dir", &std::env::temp_dir().display().to_string()])
            .args(["--dbfilename", &dbfilename])
            .args(["--loglevel", "warning"])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be on PATH (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                let _ = status;
                self.child = None;
                return false; // port taken, most likely
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                match self.answered_by_ours() {
                    Some(true) => return true,
                    // Something else took the port between `free_port` and our server's bind
                    // (another test's proxy, say), and answered for it: ours will have exited.
                    Some(false) => break,
                    None => {}
                }
            }
            thread::sleep(Duration::from_millis(5));
        }
        self.kill();
        false
    }

    /// Who answers on our port: `Some(true)` our redis-server (by the process id `INFO
    /// server` gives; where INFO is refused, a password say, any server while ours runs),
    /// `Some(false)` another process, `None` nobody, or not yet.
    fn answered_by_ours(&mut self) -> Option<bool> {
        let client = redis::Client::open(self.url()).ok()?;
        let mut con = client
            .get_connection_with_timeout(Duration::from_secs(1))
            .ok()?;
        con.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        let child = self.child.as_mut()?;
        match redis::cmd("INFO").arg("server").query::<String>(&mut con) {
            Ok(info) => Some(
                info.lines()
                    .find_map(|l| l.strip_prefix("process_id:"))
                    .and_then(|pid| pid.trim().parse::<u32>().ok())
                    == Some(child.id()),
            ),
            Err(e) if !e.is_io_error() => Some(matches!(child.try_wait(), Ok(None))),
            Err(_) => None,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// An admin connection (default user; pass the password if the server has one).
    pub fn admin(&self) -> redis::Connection {
        self.admin_with_url(&self.url())
    }

    /// Retried for up to 5 s: a server that has just started may reset the first connection
    /// (seen on the loaded 2-core CI machine, "Connection reset by peer" right after the port
    /// answered), and the test's own admin connection is not what any test is about.
    pub fn admin_with_url(&self, url: &str) -> redis::Connection {
        let client = redis::Client::open(url).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let con = loop {
            match client.get_connection_with_timeout(Duration::from_secs(5)) {
                Ok(con) => break con,
                Err(e) if Instant::now() < deadline && e.is_io_error() => {
                    thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("admin connection to {url}: {e}"),
            }
        };
        con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        con
    }

    /// Makes ACL user `user` (password `pw`) with `rules` added to any it has; its URL.
    pub fn acl_user(&self, user: &str, rules: &[&str]) -> String {
        // Redis 7's default for a new user's channels; 6.2's is every channel, and it then
        // refuses a channel pattern as meaningless.
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(user)
            .arg("on")
            .arg(">pw")
            .arg("resetchannels")
            .arg(rules)
            .query(&mut self.admin())
            .unwrap();
        format!("redis://{user}:pw@127.0.0.1:{}/", self.port)
    }

    /// kill -9, then start again on the same port with no data: a crash without persistence.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.spawn() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not come back on {}",
                self.port
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server is running").id()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port free now and never handed out before in this process. The OS may give a port
/// again as soon as its listener closes; tests run in parallel threads, and a server started
/// on another test's port would answer that test's readiness check before failing to bind
/// (a cluster's `redis-cli --cluster create` then met a plain server).
/// The version of the `redis-server` on PATH, as (major, minor): `(6, 2)`, `(7, 0)`, and a
/// Valkey server's own (`(9, 1)`), which takes every argument Redis 7 does.
pub fn server_version() -> (u32, u32) {
    static VERSION: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        let out = Command::new("redis-server")
            .arg("--version")
            .output()
            .expect("redis-server must be on PATH");
        let text = String::from_utf8_lossy(&out.stdout);
        let version = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .unwrap_or_else(|| panic!("no version in {text:?}"));
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    })
}

/// Whether the servers under test have sharded pub/sub (`SSUBSCRIBE`, `SPUBLISH`): Redis 7 on,
/// and Valkey. Before, a Cluster's waiters listen with classic `SUBSCRIBE` on one node, which a
/// release's `PUBLISH` reaches over the cluster bus.
pub fn sharded_pubsub() -> bool {
    server_version() >= (7, 0)
}

pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if !handed_out.contains(&port) {
            handed_out.push(port);
            return port;
        }
    }
    panic!("no port free that this process has not used");
}

/// A thread that waits up to `within` for `lock` through a fault: a call that meets a stopped
/// server fails with a timeout, so up to ten errors are allowed (and printed). It returns
/// when it stopped waiting and whether it got the lock (the guard is released on return).
pub fn wait_through_errors(
    lock: redlatch::Lock,
    within: Duration,
) -> std::thread::JoinHandle<(Instant, bool)> {
    std::thread::spawn(move || {
        let deadline = Instant::now() + within;
        for _ in 0..10 {
            let left = deadline.saturating_duration_since(Instant::now());
            match lock.try_lock(left, None) {
                Ok(guard) => return (Instant::now(), guard.is_some()),
                Err(e) => {
                    eprintln!("waiter: {e}");
                    // A refused connection fails at once: pause as a caller would, so that
                    // ten errors span a failover instead of a millisecond of it.
                    let left = deadline.saturating_duration_since(Instant::now());
                    std::thread::sleep(left.min(Duration::from_millis(500)));
                }
            }
        }
        (Instant::now(), false)
    })
}

/// Joins a thread of [`wait_through_errors`] and checks that it got the lock within a second
/// of `released` (a release it must have been woken by); how long after.
pub fn woken_soon_after(
    released: Instant,
    waiting: std::thread::JoinHandle<(Instant, bool)>,
) -> Duration {
    let (woken, got) = join_all(vec![waiting], Duration::from_secs(45), "the waiter").remove(0);
    assert!(got, "the waiter got the lock");
    let after = woken - released;
    assert!(
        after < Duration::from_secs(1),
        "woken {after:?} after the release"
    );
    after
}

/// Polls `cond` every few milliseconds until it holds or `within` passes; returns whether it held.
pub fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// A lock name no other test uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// `PTTL key`: ms left, -1 without an expiry, -2 absent.
pub fn pttl(admin: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(admin).unwrap()
}

/// Total calls of `command` (lowercase, e.g. "evalsha") from INFO commandstats.
pub fn command_calls(admin: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(admin).unwrap();
    let needle = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&needle))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Waits (at most 5 s) until a new waiter has parked: the server has run two more script
/// calls than `base` (the count before the waiter started, with nothing else calling
/// scripts): the attempt that queued it, and the one after its subscription was confirmed.
/// The waiter's client must not have been subscribed to the object's channel already (then
/// there is no confirmation, and no second attempt). Released before that second attempt,
/// the object would be taken up by the attempt (a round trip) rather than handed over by
/// message.
pub fn await_parked(admin: &mut redis::Connection, base: u64) {
    assert!(
        eventually(Duration::from_secs(5), || command_calls(admin, "evalsha")
            >= base + 2),
        "the waiter did not park in time"
    );
}

/// Channels with at least one subscriber (PUBSUB CHANNELS pattern).
pub fn pubsub_channels(admin: &mut redis::Connection, pattern: &str) -> Vec<String> {
    redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(pattern)
        .query(admin)
        .unwrap()
}

/// The owner ids queued for lock `name` (default prefix), oldest first. A place is the member
/// `"<owner> <hand-over lease ms> <valid ms>"` (`lua/acquire.lua`); any other member fails.
pub fn queued_owners(admin: &mut redis::Connection, name: &str) -> Vec<String> {
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("redlatch:{{{name}}}:queue"))
        .arg(0)
        .arg(-1)
        .query(admin)
        .unwrap();
    members
        .iter()
        .map(|m| {
            let mut words = m.rsplitn(3, ' ');
            let (valid, lease) = (words.next(), words.next());
            assert!(
                valid.is_some_and(|v| v.parse::<u64>().is_ok())
                    && lease.is_some_and(|l| l.parse::<u64>().is_ok()),
                "lock {name}: a queue member not of the layout: {m:?}"
            );
            words.next().unwrap().to_string()
        })
        .collect()
}

/// Runs `script` of `lua/` on `admin` with lock `name`'s four keys that `acquire.lua` and
/// `withdraw.lua` take, as the crate would (a retry after a lost reply is a second run).
pub fn run_on_lock<T: redis::FromRedisValue>(
    admin: &mut redis::Connection,
    script: &str,
    name: &str,
    args: &[&str],
) -> T {
    eval_on_lock(admin, script, name, args).unwrap()
}

/// [`run_on_lock`], for a run that may fail: what Redis answered.
pub fn eval_on_lock<T: redis::FromRedisValue>(
    admin: &mut redis::Connection,
    script: &str,
    name: &str,
    args: &[&str],
) -> redis::RedisResult<T> {
    let lock = format!("redlatch:{{{name}}}");
    let keys = [
        lock.clone(),
        format!("{lock}:fence"),
        format!("{lock}:queue"),
        format!("{lock}:granted"),
    ];
    redis::cmd("EVAL")
        .arg(script)
        .arg(4)
        .arg(&keys)
        .arg(args)
        .query(admin)
}

/// The owner id of a thread of no client: what script-level tests (`run_on_lock`) act as.
pub const SCRIPT_OWNER: &str = "00000000-0000-4000-8000-000000000000:7";

/// One run of `acquire.lua` on lock `name`, as [`acquire_args`] describes its arguments: its
/// reply, with an acquisition's token (which the script answers alone) as `[1, token]`, so
/// that every reply begins with its kind as the busy and lost ones do.
pub fn attempt_on_lock(
    admin: &mut redis::Connection,
    name: &str,
    owner: &str,
    queue_for_ms: &str,
    place: &str,
    leftovers: &str,
) -> Vec<i64> {
    let args = acquire_args(owner, queue_for_ms, place, leftovers);
    match run_on_lock(admin, &ACQUIRE_LUA, name, &args) {
        redis::Value::Array(reply) => redis::from_redis_value(redis::Value::Array(reply)).unwrap(),
        token => vec![1, redis::from_redis_value(token).unwrap()],
    }
}

/// `acquire.lua`'s arguments for a first acquisition by `owner` (30 s lease, 30 s hand-over
/// lease, a fence life of the lease plus an hour): queueing for `queue_for_ms` ("0": not at
/// all), at `place` ("" on a wait's first attempt, else "<arrival µs> <valid ms>"), voiding
/// `leftovers` ("<arrival µs> <hand-over lease ms> <valid ms>" each).
pub fn acquire_args<'a>(
    owner: &'a str,
    queue_for_ms: &'a str,
    place: &'a str,
    leftovers: &'a str,
) -> [&'a str; 9] {
    [
        owner,
        "30000",
        "3630000",
        queue_for_ms,
        place,
        "0",
        "",
        "30000",
        leftovers,
    ]
}

/// `lua/acquire.lua` with `lua/places.lua` where it says, as the client runs it, to run with
/// [`run_on_lock`].
pub static ACQUIRE_LUA: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let (before, after) = include_str!("../../lua/acquire.lua")
        .split_once("-- places.lua goes here")
        .expect("acquire.lua places places.lua");
    [before, include_str!("../../lua/places.lua"), after].concat()
});
/// `lua/withdraw.lua` with `lua/places.lua` in front, to run with [`run_on_lock`].
pub const WITHDRAW_LUA: &str = concat!(
    include_str!("../../lua/places.lua"),
    "\n",
    include_str!("../../lua/withdraw.lua")
);

/// The unlock channel of lock `name` under the default prefix.
pub fn channel_of(name: &str) -> String {
    format!("redlatch:{{{name}}}:unlocked")
}

/// Waits (at most 5 s) until some client subscribes to lock `name`'s channel: a waiter has
/// queued and its subscription is live.
pub fn await_waiting(admin: &mut redis::Connection, name: &str) {
    await_subscribed(admin, &channel_of(name));
}

/// Waits (at most 5 s) until some client subscribes to `channel`.
pub fn await_subscribed(admin: &mut redis::Connection, channel: &str) {
    assert!(
        eventually(Duration::from_secs(5), || pubsub_channels(admin, channel)
            .len()
            == 1),
        "nobody subscribed to {channel} in time"
    );
}

/// Joins every handle, panicking (with `what` hung) if one has not returned within `within`.
pub fn join_all<T>(handles: Vec<thread::JoinHandle<T>>, within: Duration, what: &str) -> Vec<T> {
    let deadline = Instant::now() + within;
    for h in &handles {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(eventually(left, || h.is_finished()), "{what} hung");
    }
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Starts a thread that waits up to `wait` for `lock`; joins to whether it got it.
pub fn spawn_waiter(lock: redlatch::Lock, wait: Duration) -> thread::JoinHandle<bool> {
    thread::spawn(move || lock.try_lock(wait, None).unwrap().is_some())
}

/// Queues a waiter on `lock` (held by `held`), waits until its subscription is live, releases
/// `held`, and returns how long after the release the waiter had the lock.
pub fn release_to_waiter(
    admin: &mut redis::Connection,
    lock: redlatch::Lock,
    held: redlatch::LockGuard,
) -> Duration {
    let name = lock.name().to_string();
    let waiter = spawn_waiter(lock, Duration::from_secs(25));
    await_waiting(admin, &name);
    let released = Instant::now();
    held.unlock().unwrap();
    assert!(waiter.join().unwrap(), "the waiter did not get the lock");
    released.elapsed()
}

/// The pub/sub connections of the server: `(client id, subscriptions)` for each, from
/// `CLIENT LIST TYPE pubsub`.
pub fn pubsub_clients(admin: &mut redis::Connection) -> Vec<(u64, u64)> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("pubsub")
        .query(admin)
        .unwrap();
    let field = |line: &str, name: &str| -> u64 {
        line.split(' ')
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    list.lines()
        .map(|line| {
            (
                field(line, "id="),
                field(line, "sub=") + field(line, "ssub="),
            )
        })
        .collect()
}

/// The one pub/sub connection of the server, its client id; waits up to 5 s for there to be
/// exactly one, with exactly two subscriptions (the lock's channel and the client's grant
/// channel of that lock: nothing else, such as a control channel of the client's own).
pub fn the_one_pubsub_client(admin: &mut redis::Connection) -> u64 {
    let mut seen = Vec::new();
    let one = eventually(Duration::from_secs(5), || {
        seen = pubsub_clients(admin);
        seen.len() == 1 && seen[0].1 == 2
    });
    assert!(one, "pub/sub connections (id, subscriptions): {seen:?}");
    seen[0].0
}

/// A thread of `waiter` waits for lock `name`, which `holder` holds, over whatever transport
/// the two clients use: while it waits it sends no script, the server has exactly one pub/sub
/// connection with that one subscription (no channel of the client's own), and the release
/// hands it the lock, with a newer token, within 500 ms. `admin` reaches the same server.
pub fn release_wakes_a_waiter_without_polling(
    admin: &mut redis::Connection,
    holder: &redlatch::Client,
    waiter: &redlatch::Client,
    name: &str,
) {
    let held = holder.lock(name).lock().unwrap();
    let lock = waiter.lock(name);
    let base = command_calls(admin, "evalsha");
    let waiting = thread::spawn(move || {
        let guard = lock.try_lock(Duration::from_secs(20), None).unwrap();
        (Instant::now(), guard.map(|g| g.fencing_token()))
    });
    // Parked, not only subscribed: its attempt after the confirmation would fall in the
    // silent second below.
    await_parked(admin, base);
    the_one_pubsub_client(admin);
    let before = command_calls(admin, "evalsha");
    thread::sleep(Duration::from_secs(1));
    let during = command_calls(admin, "evalsha") - before;
    assert_eq!(
        during, 0,
        "the waiter sent {during} scripts while it waited"
    );
    release_hands_over(held, waiting);
}

/// Unlocks `held` and joins `waiting` (a thread that waits for the same lock and returns when
/// it got it and its token): it must get the lock, with a newer token, within 500 ms of the
/// release, and return within 25 s at all.
pub fn release_hands_over(
    held: redlatch::LockGuard,
    waiting: thread::JoinHandle<(Instant, Option<u64>)>,
) {
    let token = held.fencing_token();
    let released = Instant::now();
    held.unlock().unwrap();
    let (woken, got) = join_all(vec![waiting], Duration::from_secs(25), "the waiter").remove(0);
    assert!(
        got.is_some_and(|t| t > token),
        "the waiter did not get the lock"
    );
    let after = woken.duration_since(released);
    assert!(
        after < Duration::from_millis(500),
        "woken {after:?} after the release"
    );
}

/// A server reached over `holder`'s and `waiter`'s transport is stopped (SIGSTOP) for 8 s
/// while a thread of `waiter` waits for a lock `holder` holds. The subscriber's heartbeat (a
/// PING after 5 s of quiet, answered within the 1 s response timeout) must give up its
/// connection meanwhile: after SIGCONT its pub/sub connection is a new one, subscribed again,
/// and the release still wakes the waiter at once. Without a heartbeat the old connection
/// would simply carry on, its silence unnoticed (a server that stays stopped, or a master
/// that fails over, would leave the waiters deaf until the lock's lease).
///
/// `admin` reaches the server by another way (its plain port), `pid` is its process.
pub fn heartbeat_notices_a_stopped_server(
    admin: &mut redis::Connection,
    pid: u32,
    holder: &redlatch::Client,
    waiter: &redlatch::Client,
) {
    let name = unique("stopped");
    let held = holder
        .lock(&name)
        .try_lock(Duration::ZERO, Some(Duration::from_secs(60)))
        .unwrap()
        .expect("the lock is free");
    let waiting = wait_through_errors(waiter.lock(&name), Duration::from_secs(40));
    await_waiting(admin, &name);
    let before = the_one_pubsub_client(admin);

    signal(pid, "-STOP");
    thread::sleep(Duration::from_secs(8));
    signal(pid, "-CONT");

    let mut seen = Vec::new();
    let replaced = eventually(Duration::from_secs(10), || {
        seen = pubsub_clients(admin);
        seen.len() == 1 && seen[0].0 != before && seen[0].1 == 2
    });
    assert!(
        replaced,
        "the subscriber kept its connection {before} through 8 s of silence: {seen:?}"
    );
    let released = Instant::now();
    held.unlock().unwrap();
    let after = woken_soon_after(released, waiting);
    eprintln!("woken {after:?} after the release");
}

/// Sends `sig` (e.g. "-STOP", "-CONT") to process `pid`.
pub fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid} failed");
}

/// Threads of this process, from /proc.
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// A TCP proxy between clients and a server that can lose a reply on purpose: the request
/// reaches the server and runs, the reply is swallowed and the client's connection reset.
pub struct Proxy {
    pub port: u16,
    state: Arc<ProxyState>,
}

struct ProxyState {
    upstream: SocketAddr,
    /// Lose the reply to the next request whose bytes contain this pattern.
    armed: Mutex<Option<Vec<u8>>>,
    /// Drop everything clients send (the server never sees it, and never answers).
    blackhole: AtomicBool,
    cuts: AtomicUsize,
    stop: AtomicBool,
    /// Both ends of every open connection, by connection number.
    streams: Mutex<Vec<(u64, TcpStream)>>,
    next_id: AtomicU64,
    links: Mutex<Vec<Arc<Link>>>,
    /// New connections start held back too.
    stall_new: AtomicBool,
}

/// One proxied connection's client-to-server direction, which can be held back.
struct Link {
    /// Requests are kept here instead of reaching the server, until delivered.
    stalled: AtomicBool,
    held: Mutex<Vec<u8>>,
    to_server: TcpStream,
    client_gone: AtomicBool,
}

impl Proxy {
    pub fn start(upstream_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(ProxyState {
            upstream: SocketAddr::from(([127, 0, 0, 1], upstream_port)),
            armed: Mutex::new(None),
            blackhole: AtomicBool::new(false),
            cuts: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            streams: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            links: Mutex::new(Vec::new()),
            stall_new: AtomicBool::new(false),
        });
        let accept_state = state.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if accept_state.stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(accept_state.upstream) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                Proxy::pump(accept_state.clone(), client, server);
            }
        });
        Proxy { port, state }
    }

    fn pump(state: Arc<ProxyState>, client: TcpStream, server: TcpStream) {
        let id = state.next_id.fetch_add(1, Ordering::SeqCst);
        {
            let mut streams = state.streams.lock();
            streams.push((id, client.try_clone().unwrap()));
            streams.push((id, server.try_clone().unwrap()));
        }
        let lose_next_reply = Arc::new(AtomicBool::new(false));
        let (mut c_read, mut s_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        let link = Arc::new(Link {
            stalled: AtomicBool::new(state.stall_new.load(Ordering::SeqCst)),
            held: Mutex::new(Vec::new()),
            to_server: server.try_clone().unwrap(),
            client_gone: AtomicBool::new(false),
        });
        state.links.lock().push(link.clone());
        let down_link = link.clone();
        let up_state = state.clone();
        let up_flag = lose_next_reply.clone();
        thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = c_read.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let chunk = &buf[..n];
                if up_state.blackhole.load(Ordering::SeqCst) {
                    continue;
                }
                {
                    let mut held = link.held.lock();
                    if link.stalled.load(Ordering::SeqCst) {
                        held.extend_from_slice(chunk);
                        continue;
                    }
                }
                {
                    let mut armed = up_state.armed.lock();
                    if armed
                        .as_ref()
                        .is_some_and(|p| chunk.windows(p.len()).any(|w| w == &p[..]))
                    {
                        *armed = None;
                        up_flag.store(true, Ordering::SeqCst);
                    }
                }
                if s_write.write_all(chunk).is_err() {
                    break;
                }
            }
            // Held-back requests still go to the server when delivered: close then.
            let held = link.held.lock();
            if link.stalled.load(Ordering::SeqCst) {
                link.client_gone.store(true, Ordering::SeqCst);
            } else {
                let _ = s_write.shutdown(Shutdown::Both);
            }
            drop(held);
        });
        let (mut s_read, mut c_write) = (server, client);
        thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = s_read.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if lose_next_reply.load(Ordering::SeqCst) {
                    state.cuts.fetch_add(1, Ordering::SeqCst);
                    break; // the reply is dropped and both sides closed
                }
                if c_write.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = c_write.shutdown(Shutdown::Both);
            let _ = s_read.shutdown(Shutdown::Both);
            // The server's side is closed: nothing held back can be delivered any more.
            state.streams.lock().retain(|(s, _)| *s != id);
            state.links.lock().retain(|l| !Arc::ptr_eq(l, &down_link));
        });
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The next request containing `pattern` runs on the server, but its reply is lost and
    /// the connection reset.
    pub fn lose_reply_to(&self, pattern: &[u8]) {
        *self.state.armed.lock() = Some(pattern.to_vec());
    }

    /// While on, requests vanish: the server never sees them and the client never hears back.
    pub fn blackhole(&self, on: bool) {
        self.state.blackhole.store(on, Ordering::SeqCst);
    }

    /// Holds back whatever the connections open now send, until [`Proxy::deliver_held`]:
    /// requests that reach the server late, after their client gave up on them. Connections
    /// opened later pass freely.
    pub fn stall_open_connections(&self) {
        for link in self.state.links.lock().iter() {
            link.stalled.store(true, Ordering::SeqCst);
        }
    }

    /// Holds back whatever any connection sends, open now or opened later, until
    /// [`Proxy::pass_new_connections`] (for new ones) and [`Proxy::deliver_held`].
    pub fn stall_everything(&self) {
        self.state.stall_new.store(true, Ordering::SeqCst);
        self.stall_open_connections();
    }

    /// Holds back whatever connections opened from now on send, until
    /// [`Proxy::pass_new_connections`] and [`Proxy::deliver_held`]: a retry on a new
    /// connection arrives when the test says so. Open connections pass freely.
    pub fn stall_new_connections(&self) {
        self.state.stall_new.store(true, Ordering::SeqCst);
    }

    /// Connections opened from now on pass freely; held-back ones stay held.
    pub fn pass_new_connections(&self) {
        self.state.stall_new.store(false, Ordering::SeqCst);
    }

    /// Sends the held-back requests to the server; returns how many bytes that was.
    pub fn deliver_held(&self) -> usize {
        let mut delivered = 0;
        for link in self.state.links.lock().iter() {
            let mut held = link.held.lock();
            if link.stalled.swap(false, Ordering::SeqCst) {
                delivered += held.len();
                let _ = (&link.to_server).write_all(&held);
                held.clear();
                if link.client_gone.load(Ordering::SeqCst) {
                    let _ = link.to_server.shutdown(Shutdown::Write);
                }
            }
        }
        delivered
    }

    /// A network partition of `length`: nothing gets through meanwhile, and whatever was sent
    /// arrives afterwards, as TCP retransmits it.
    pub fn partition(&self, length: Duration) {
        self.stall_everything();
        thread::sleep(length);
        self.pass_new_connections();
        self.deliver_held();
    }

    /// Resets every open connection, as a failing network does; whatever was held back is
    /// lost with them.
    pub fn reset(&self) {
        for (_, s) in self.state.streams.lock().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Replies lost so far.
    pub fn cuts(&self) -> usize {
        self.state.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.reset();
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // unblocks accept
    }
}

/// The command that runs the current test binary's `#[ignore]`d test `name` alone.
pub fn child_test_command(name: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        name,
        "--ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ]);
    cmd
}

/// Runs the current test binary's `#[ignore]`d test `name` as a child process with `env`,
/// and returns it with its stdout piped.
pub fn spawn_child_test(name: &str, env: &[(&str, String)]) -> Child {
    let mut cmd = child_test_command(name);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// In a child process started by [`spawn_child_test`], the values of the environment
/// variables `names`; `None` when not started that way (the entry point then does nothing).
pub fn child_env<const N: usize>(names: [&str; N]) -> Option<[String; N]> {
    let mut values = names.map(|n| std::env::var(n).ok());
    if values.iter().any(Option::is_none) {
        return None;
    }
    Some(std::array::from_fn(|i| {
        values[i].take().unwrap_or_default()
    }))
}

/// Reads the child's stdout until a line contains `prefix` (libtest may print its own text
/// before it on the same line); returns what follows it.
pub fn read_reported(child: &mut Child, prefix: &str, within: Duration) -> String {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let prefix = prefix.to_string();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(at) = line.find(&prefix) {
                let _ = tx.send(line[at + prefix.len()..].trim().to_string());
                return;
            }
        }
    });
    rx.recv_timeout(within)
        .expect("child did not report in time")
}

pub mod checker;
pub mod fake;
pub mod heap;
pub mod java;
pub mod jvm;
pub mod logs;
pub mod soak;
pub mod tls;

impl RedisServer {
    /// Like [`RedisServer::start_with`], with arguments that depend on the port it gets (a
    /// cluster node's config file and bus port): `args` is called once per port tried.
    pub fn start_with_port(args: impl FnMut(u16) -> Vec<String>) -> RedisServer {
        RedisServer::start_with_port_where(|_| true, args)
    }

    /// [`RedisServer::start_with_port`] on a port that `fits` (a port whose cluster bus, at
    /// port + 10000 before Redis 7, is free too).
    pub fn start_with_port_where(
        fits: impl Fn(u16) -> bool,
        mut args: impl FnMut(u16) -> Vec<String>,
    ) -> RedisServer {
        for _ in 0..20 {
            let port = (0..100)
                .map(|_| free_port())
                .find(|&port| fits(port))
                .expect("no free port that fits");
            let mut server = RedisServer {
                port,
                program: "redis-server".to_string(),
                args: args(port),
                child: None,
            };
            if server.spawn() {
                return server;
            }
        }
        panic!("could not start redis-server on a free port (is redis-server on PATH?)");
    }

    /// Whether the process is running (not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

pub mod topology;
