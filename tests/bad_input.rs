//! Bad input gets a clear error: no panic, no hang, and foreign data stays untouched. So does
//! a server that answers but will not do what we need (no scripts, a flush storm, a read-only
//! replica, a full server, a changed password), and a client dropped while a thread waits.
//! Calls that could hang run on threads of their own with a time limit ([`bounded`]).

mod support;

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use redlatch::{Client, Error};
use support::{RedisServer, await_waiting, command_calls, eventually, thread_count, unique};

fn invalid<T: std::fmt::Debug>(r: redlatch::Result<T>) -> String {
    match r {
        Err(Error::InvalidArgument(what)) => what,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// The key a `WrongType` names; its message must name it too and say it was left alone.
fn wrong_type<T: std::fmt::Debug>(r: redlatch::Result<T>) -> String {
    match r {
        Err(e @ Error::WrongType { .. }) => {
            let message = e.to_string();
            let Error::WrongType { key } = e else {
                unreachable!()
            };
            assert!(
                message.contains(&key) && message.contains("left untouched"),
                "{message}"
            );
            key
        }
        other => panic!("expected WrongType, got {other:?}"),
    }
}

/// The message of an `Error::Redis`, which must contain `expected`.
fn redis_error<T: std::fmt::Debug>(r: redlatch::Result<T>, expected: &str) -> String {
    match r {
        Err(e @ Error::Redis(_)) => {
            let message = e.to_string();
            assert!(
                message.contains(expected),
                "{expected:?} not in {message:?}"
            );
            message
        }
        other => panic!("expected a redis error saying {expected:?}, got {other:?}"),
    }
}

/// Every kind of call on a lock of `client`, each on a thread of its own and bounded by
/// `limit`, each expected to fail with an `Error::Redis` saying `expected`.
fn every_call_fails(client: &Client, name: &str, limit: Duration, expected: &str) {
    type Call = fn(&redlatch::Lock) -> redlatch::Result<()>;
    let calls: [(&str, Call); 6] = [
        ("lock", |l| l.lock().map(drop)),
        ("lock_with_lease", |l| {
            l.lock_with_lease(Duration::from_secs(5)).map(drop)
        }),
        ("try_lock(ZERO)", |l| {
            l.try_lock(Duration::ZERO, None).map(drop)
        }),
        ("try_lock(2 s)", |l| {
            l.try_lock(Duration::from_secs(2), None).map(drop)
        }),
        ("is_locked", |l| l.is_locked().map(drop)),
        ("force_unlock", |l| l.force_unlock().map(drop)),
    ];
    for (what, call) in calls {
        let lock = client.lock(name);
        let start = Instant::now();
        let result = bounded(limit, move || call(&lock));
        let message = redis_error(result, expected);
        assert!(
            start.elapsed() < limit,
            "{what} took {:?}: {message}",
            start.elapsed()
        );
    }
}

fn dbsize(admin: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(admin).unwrap()
}

/// A call running on a thread of its own, to be waited for with a time limit.
struct Running<T> {
    result: crossbeam_channel::Receiver<T>,
    thread: thread::JoinHandle<()>,
}

impl<T: Send + 'static> Running<T> {
    fn start(f: impl FnOnce() -> T + Send + 'static) -> Running<T> {
        let (tx, result) = crossbeam_channel::bounded(1);
        let thread = thread::spawn(move || {
            let _ = tx.send(f());
        });
        Running { result, thread }
    }

    /// What the call returned; fails the test if it has not returned within `limit`, so that
    /// a hang is a failure rather than a stuck test binary.
    fn finish(self, limit: Duration) -> T {
        match self.result.recv_timeout(limit) {
            Ok(value) => value,
            Err(RecvTimeoutError::Disconnected) => match self.thread.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => unreachable!("the thread sends before it ends"),
            },
            Err(RecvTimeoutError::Timeout) => panic!("the call did not return within {limit:?}"),
        }
    }
}

/// Runs `f` on a thread of its own and returns its result, within `limit` or fails the test.
fn bounded<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    Running::start(f).finish(limit)
}

/// Writes someone else's data under `key` with `command` (`["SET", "precious"]`, say: the
/// key goes after the command's name) and answers its DUMP, to compare with later.
fn plant(admin: &mut redis::Connection, key: &str, command: &[&str]) -> Vec<u8> {
    let _: () = redis::cmd(command[0])
        .arg(key)
        .arg(&command[1..])
        .query(admin)
        .unwrap();
    dump(admin, key)
}

/// `DUMP key`: the serialized value, to show foreign data came through byte for byte.
fn dump(admin: &mut redis::Connection, key: &str) -> Vec<u8> {
    redis::cmd("DUMP").arg(key).query(admin).unwrap()
}

fn exists(admin: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(admin).unwrap() == 1
}

/// How many times the server answered with error `code` (INFO errorstats).
fn error_count(admin: &mut redis::Connection, code: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("errorstats").query(admin).unwrap();
    let needle = format!("errorstat_{code}:count=");
    info.lines()
        .find_map(|l| l.strip_prefix(&needle))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// An empty name is refused in the words of its kind: a semaphore's is no "lock name".
#[test]
fn an_empty_name_is_refused_naming_its_kind() {
    use redlatch::ObjectKind;
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let second = Duration::from_secs(1);
    for (kind, message) in [
        ("lock", invalid(client.lock("").try_lock(second, None))),
        ("lock", invalid(client.fair_lock("").try_lock(second, None))),
        ("lock", invalid(client.spin_lock("").try_lock(second, None))),
        (
            "lock",
            invalid(client.multi_lock(&["a", ""]).try_lock(second, None)),
        ),
        (
            "read-write lock",
            invalid(client.read_write_lock("").read()),
        ),
        (
            "read-write lock",
            invalid(client.read_write_lock("").is_locked()),
        ),
        ("semaphore", invalid(client.semaphore("").acquire(1))),
        ("semaphore", invalid(client.semaphore("").set_permits(1))),
        ("latch", invalid(client.count_down_latch("").count())),
        ("latch", invalid(client.count_down_latch("").wait(second))),
        (
            "counting semaphore",
            invalid(client.counting_semaphore("").available()),
        ),
        (
            "counting semaphore",
            invalid(client.counting_semaphore("").acquire(1)),
        ),
        (
            "semaphore",
            invalid(client.inspect(ObjectKind::Semaphore, "")),
        ),
        (
            "latch",
            invalid(client.watch(ObjectKind::CountDownLatch, "", Some(second), |_, _| true)),
        ),
        ("object", invalid(client.detect(""))),
    ] {
        assert_eq!(message, format!("{kind} name must not be empty"));
    }
}

#[test]
fn empty_names_zero_and_absurd_durations_are_refused_before_any_io() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let empty = client.lock("");
    invalid(empty.lock());
    invalid(empty.try_lock(Duration::ZERO, None));
    invalid(empty.is_locked());
    invalid(empty.hold_count());
    invalid(empty.remaining_ttl());
    invalid(empty.force_unlock());

    let lock = client.lock(&unique("durations"));
    assert!(invalid(lock.try_lock(Duration::ZERO, Some(Duration::ZERO))).contains("lease"));
    invalid(lock.lock_with_lease(Duration::ZERO));
    assert_eq!(
        invalid(lock.lock_with_lease(Duration::from_micros(500))),
        "lease of 500 µs is shorter than the minimum of 1 ms"
    );
    let too_long = invalid(lock.lock_with_lease(Duration::MAX));
    assert!(
        too_long.starts_with("lease of over ") && too_long.ends_with(": at most 100 years"),
        "{too_long}"
    );
    invalid(lock.try_lock(Duration::MAX, None));
    invalid(lock.try_lock(
        Duration::from_secs(1),
        Some(Duration::from_secs(u64::MAX / 1000)),
    ));
    assert!(
        !lock.is_locked().unwrap(),
        "a refused call must not have taken the lock"
    );

    assert_eq!(
        invalid(
            Client::builder(&server.url())
                .watchdog_timeout(Duration::ZERO)
                .build(),
        ),
        "watchdog_timeout of 0 s is shorter than the minimum of 30 ms"
    );
    invalid(
        Client::builder(&server.url())
            .watchdog_timeout(Duration::MAX)
            .build(),
    );
    invalid(Client::builder(&server.url()).pool_size(0).build());
    assert_eq!(
        invalid(
            Client::builder(&server.url())
                .response_timeout(Duration::from_secs(1))
                .wait_for_replicas(1, Duration::from_millis(1500))
                .build(),
        ),
        "the wait_for_replicas timeout of 1 s 500 ms must be shorter than the \
         response_timeout of 1 s"
    );
    invalid(Client::builder(&server.url()).key_prefix("").build());
    invalid(Client::builder(&server.url()).key_prefix("a{b").build());
}

/// Over-long names would make the lock's channel too long for the subscriber to read back,
/// and every waiter of the client would then sleep to its lease: they are refused first.
#[test]
fn names_and_prefixes_over_the_limits_are_refused_before_any_io() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::open(&server.url()).unwrap();
    let too_long = "n".repeat(redlatch::MAX_NAME_LEN + 1);
    let scripts_before = command_calls(&mut admin, "evalsha") + command_calls(&mut admin, "eval");
    let lock = client.lock(&too_long);
    for (what, message) in [
        ("lock", invalid(lock.lock())),
        (
            "lock_with_lease",
            invalid(lock.lock_with_lease(Duration::from_secs(1))),
        ),
        (
            "try_lock",
            invalid(lock.try_lock(Duration::from_secs(1), None)),
        ),
        ("is_locked", invalid(lock.is_locked())),
        (
            "is_held_by_current_thread",
            invalid(lock.is_held_by_current_thread()),
        ),
        ("hold_count", invalid(lock.hold_count())),
        ("remaining_ttl", invalid(lock.remaining_ttl())),
        ("force_unlock", invalid(lock.force_unlock())),
        (
            "multi_lock",
            invalid(
                client
                    .multi_lock(&["a-normal-name", &too_long])
                    .try_lock(Duration::from_secs(1), None),
            ),
        ),
        (
            "redlock",
            invalid(
                redlatch::RedlockClient::new(vec![client.clone()])
                    .unwrap()
                    .lock(&too_long)
                    .try_lock(Duration::from_secs(1), None),
            ),
        ),
    ] {
        assert!(
            message.ends_with("bytes is too long: at most 65,536 bytes"),
            "{what}: {message}"
        );
    }
    assert_eq!(
        command_calls(&mut admin, "evalsha") + command_calls(&mut admin, "eval"),
        scripts_before,
        "a refused name reached Redis"
    );
    assert_eq!(command_calls(&mut admin, "subscribe"), 0);
    assert_eq!(dbsize(&mut admin), 0);

    // The limit itself is a name like any other.
    let longest = "n".repeat(redlatch::MAX_NAME_LEN);
    let guard = client
        .lock(&longest)
        .try_lock(Duration::ZERO, None)
        .unwrap()
        .expect("a free lock");
    guard.unlock().unwrap();

    let prefix = "p".repeat(redlatch::MAX_PREFIX_LEN + 1);
    assert_eq!(
        invalid(Client::builder(&server.url()).key_prefix(&prefix).build()),
        "key prefix of 1,025 bytes is too long: at most 1,024 bytes"
    );
    let prefix = "p".repeat(redlatch::MAX_PREFIX_LEN);
    Client::builder(&server.url())
        .key_prefix(&prefix)
        .build()
        .unwrap();
}

#[test]
fn bad_urls_wrong_passwords_and_unreachable_servers_fail_fast() {
    for url in [
        "",
        "not a url",
        "http://127.0.0.1/",
        "redis://127.0.0.1:99999/",
    ] {
        invalid(Client::open(url));
    }
    let closed_port = support::free_port();
    let start = Instant::now();
    match Client::open(&format!("redis://127.0.0.1:{closed_port}/")) {
        Err(Error::Redis(e)) => assert!(e.is_connection_refusal() || e.is_io_error(), "{e}"),
        other => panic!("expected a connection error, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(5));

    let server = RedisServer::start_with(&["--requirepass", "right"]);
    match Client::open(&format!("redis://:wrong@127.0.0.1:{}/", server.port)) {
        Err(Error::Redis(e)) => assert!(e.to_string().to_lowercase().contains("pass"), "{e}"),
        other => panic!("expected an authentication error, got {other:?}"),
    }
    match Client::open(&server.url()) {
        Err(Error::Redis(_)) => {}
        other => panic!("expected NOAUTH, got {other:?}"),
    }
    let client = Client::open(&format!("redis://:right@127.0.0.1:{}/", server.port)).unwrap();
    assert!(
        client
            .lock("ok")
            .try_lock(Duration::ZERO, None)
            .unwrap()
            .is_some()
    );
}

#[test]
fn foreign_data_under_our_keys_is_reported_and_left_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::open(&server.url()).unwrap();

    // The lock key holds a string.
    let name = unique("string");
    let key = format!("redlatch:{{{name}}}");
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("precious")
        .query(&mut admin)
        .unwrap();
    let lock = client.lock(&name);
    for result in [
        lock.try_lock(Duration::ZERO, None).map(|_| ()),
        lock.lock().map(|_| ()),
        lock.force_unlock().map(|_| ()),
        lock.is_locked().map(|_| ()),
    ] {
        match result {
            Err(Error::WrongType { key: k }) => assert_eq!(k, key),
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
    let value: String = redis::cmd("GET").arg(&key).query(&mut admin).unwrap();
    assert_eq!(value, "precious");

    // A hash without a lease is not a lock of ours either.
    let name = unique("hash");
    let key = format!("redlatch:{{{name}}}");
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("field")
        .arg("value")
        .query(&mut admin)
        .unwrap();
    assert!(matches!(
        client
            .lock(&name)
            .try_lock(Duration::from_millis(100), None),
        Err(Error::WrongType { .. })
    ));
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut admin).unwrap();
    assert_eq!(ttl, -1);

    // The fencing counter holds something that is not a number.
    let name = unique("fence");
    let fence = format!("redlatch:{{{name}}}:fence");
    let _: () = redis::cmd("SET")
        .arg(&fence)
        .arg("not a number")
        .query(&mut admin)
        .unwrap();
    match client.lock(&name).try_lock(Duration::ZERO, None) {
        Err(Error::WrongType { key }) => assert_eq!(key, fence),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert!(
        !client.lock(&name).is_locked().unwrap(),
        "nothing may be written when a check fails"
    );
    let value: String = redis::cmd("GET").arg(&fence).query(&mut admin).unwrap();
    assert_eq!(value, "not a number");
    let _: () = redis::cmd("DEL").arg(&fence).query(&mut admin).unwrap();
    let _: () = redis::cmd("LPUSH")
        .arg(&fence)
        .arg("x")
        .query(&mut admin)
        .unwrap();
    assert!(matches!(
        client.lock(&name).try_lock(Duration::ZERO, None),
        Err(Error::WrongType { .. })
    ));
}

/// A waiter that takes up a hand-over (the lock holds its field and the mark names it and the
/// fence) must find a fence of ours: one that is not digits is reported, and nothing is
/// written, rather than its text being answered as a token.
#[test]
fn a_take_up_that_finds_a_foreign_fence_reports_it_and_writes_nothing() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("takeup");
    let lock = format!("redlatch:{{{name}}}");
    let (fence, queue, mark) = (
        format!("{lock}:fence"),
        format!("{lock}:queue"),
        format!("{lock}:granted"),
    );
    let owner = support::SCRIPT_OWNER;
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(&lock)
        .arg(owner)
        .arg(1)
        .ignore()
        .cmd("PEXPIRE")
        .arg(&lock)
        .arg(30_000)
        .ignore()
        .cmd("SET")
        .arg(&fence)
        .arg("precious")
        .ignore()
        .cmd("SET")
        .arg(&mark)
        .arg(format!("{owner} precious"))
        .ignore()
        .cmd("ZADD")
        .arg(&queue)
        .arg(1_000_000)
        .arg(format!("{owner} 30000 5000"))
        .ignore()
        .query(&mut admin)
        .unwrap();
    // A later attempt of the waiter's wait, at its place.
    let reply: redis::RedisResult<redis::Value> = support::eval_on_lock(
        &mut admin,
        &support::ACQUIRE_LUA,
        &name,
        &support::acquire_args(owner, "0", "1000000 5000", ""),
    );
    match reply {
        Err(e) if e.code() == Some("WRONGTYPE") && e.detail() == Some("fence") => {}
        other => panic!("expected WRONGTYPE fence, got {other:?}"),
    }
    let fence_now: String = redis::cmd("GET").arg(&fence).query(&mut admin).unwrap();
    let mark_now: String = redis::cmd("GET").arg(&mark).query(&mut admin).unwrap();
    let holds: String = redis::cmd("HGET")
        .arg(&lock)
        .arg(owner)
        .query(&mut admin)
        .unwrap();
    assert_eq!(
        (fence_now.as_str(), mark_now, holds.as_str()),
        ("precious", format!("{owner} precious"), "1"),
        "foreign data changed"
    );
}

#[test]
fn foreign_data_under_the_queue_key_is_reported_and_left_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::open(&server.url()).unwrap();
    let holder = Client::open(&server.url()).unwrap();

    for (suffix, foreign) in [
        (":queue", &["SET", "precious"][..]),
        (":queue", &["HSET", "field", "value"]),
        (":queue", &["RPUSH", "a", "b", "c"]),
    ] {
        let name = unique("foreign-queue");
        let lock_key = format!("redlatch:{{{name}}}");
        let key = format!("{lock_key}{suffix}");
        let before = plant(&mut admin, &key, foreign);
        let lock = client.lock(&name);

        // A free lock needs no queue: taken and released as usual.
        lock.try_lock(Duration::ZERO, None)
            .unwrap()
            .expect("the lock is free")
            .unlock()
            .unwrap();

        // A busy lock: one attempt does not queue and answers as usual; a wait would queue
        // and is refused at once, naming the key, whether bounded or not.
        let held = holder.lock(&name).lock().unwrap();
        assert!(lock.try_lock(Duration::ZERO, None).unwrap().is_none());
        for wait in [Some(Duration::from_secs(3)), None] {
            let waiting = lock.clone();
            let start = Instant::now();
            let result = bounded(Duration::from_secs(5), move || match wait {
                Some(wait) => waiting.try_lock(wait, None).map(|g| g.is_some()),
                None => waiting.lock().map(|_| true),
            });
            assert_eq!(wrong_type(result), key, "{foreign:?} under {suffix}");
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "refused after {:?}, not at the first attempt",
                start.elapsed()
            );
        }

        // The holder's release is not disturbed by the foreign key either.
        held.unlock().unwrap();
        assert!(!lock.is_locked().unwrap());
        assert!(lock.force_unlock().is_ok_and(|was_locked| !was_locked));
        assert_eq!(dump(&mut admin, &key), before, "{key} was changed");
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut admin).unwrap();
        assert_eq!(ttl, -1, "{key} was given an expiry");
    }
}

/// Beside a held write or held permits, an attempt that would queue reads every key it
/// relies on before it writes anything (the usual busy case of `lua/shares_acquire.lua`):
/// foreign data under any of them is named at once, left as it was, and nothing is queued.
/// Holders without an expiry are not ours either.
#[test]
fn foreign_data_beside_a_held_share_is_reported_and_left_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (holder, client) = (
        Client::open(&server.url()).unwrap(),
        Client::open(&server.url()).unwrap(),
    );
    let wait = Duration::from_secs(3);
    for (kind, suffix) in [
        ("semaphore", ":queue"),
        ("semaphore", ":waiters"),
        ("semaphore", ":fence"),
        ("semaphore", ":permits"),
        ("semaphore", ""),
        ("rwlock", ":queue"),
        ("rwlock", ":waiters"),
        ("rwlock", ":fence"),
        ("rwlock", ""),
    ] {
        let name = unique("foreign-beside-held");
        let holders = format!("redlatch:{{{name}}}:{kind}");
        let key = format!("{holders}{suffix}");
        let (semaphore, rw) = (holder.semaphore(&name), holder.read_write_lock(&name));
        let held: Box<dyn std::any::Any> = if kind == "semaphore" {
            semaphore.set_permits(1).unwrap();
            Box::new(semaphore.acquire(1).unwrap())
        } else {
            Box::new(rw.write().unwrap())
        };
        let before = if suffix.is_empty() {
            let _: () = redis::cmd("PERSIST").arg(&key).query(&mut admin).unwrap();
            dump(&mut admin, &key)
        } else {
            let _: () = redis::cmd("DEL").arg(&key).query(&mut admin).unwrap();
            plant(&mut admin, &key, &["SET", "precious"])
        };
        let (name_, client_) = (name.clone(), client.clone());
        let result = bounded(Duration::from_secs(5), move || {
            if kind == "semaphore" {
                let permits = client_.semaphore(&name_).try_acquire(1, wait, None);
                permits.map(|p| p.is_some())
            } else {
                let write = client_.read_write_lock(&name_).try_write(wait, None);
                write.map(|w| w.is_some())
            }
        });
        assert_eq!(wrong_type(result), key, "{kind}{suffix}");
        assert_eq!(dump(&mut admin, &key), before, "{key} was changed");
        if suffix != ":queue" {
            assert!(!exists(&mut admin, &format!("{holders}:queue")), "queued");
        }
        drop(held);
    }

    // The only holder's release, which deletes what it holds, leaves a foreign key under
    // the leases' name as it was (the release itself is refused: that is not our hold).
    for kind in ["semaphore", "rwlock"] {
        let name = unique("foreign-leases");
        let key = format!("redlatch:{{{name}}}:{kind}:leases");
        let release: Box<dyn FnOnce() -> redlatch::Result<()>> = if kind == "semaphore" {
            let semaphore = holder.semaphore(&name);
            semaphore.set_permits(1).unwrap();
            let permits = semaphore.acquire(1).unwrap();
            Box::new(move || permits.release())
        } else {
            let write = holder.read_write_lock(&name).write().unwrap();
            Box::new(move || write.unlock())
        };
        let _: () = redis::cmd("DEL").arg(&key).query(&mut admin).unwrap();
        let before = plant(&mut admin, &key, &["SET", "precious"]);
        let released = release();
        assert!(released.is_err(), "{kind}: {released:?}");
        assert_eq!(dump(&mut admin, &key), before, "{key} was changed");
    }
}

/// Foreign data under a lock's hand-over mark (`:granted`) is left as it was: a release that
/// would hand the lock over finds it, hands nothing over and wakes the waiters instead, which
/// then take the free lock with an attempt of their own.
#[test]
fn foreign_data_under_the_hand_over_mark_is_left_alone_and_waiters_still_get_the_lock() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::open(&server.url()).unwrap();
    let holder = Client::open(&server.url()).unwrap();

    for foreign in [
        &["SET", "precious"][..],
        &["RPUSH", "a", "b", "c"],
        &["HSET", "field", "value"],
    ] {
        let name = unique("foreign-mark");
        let key = format!("redlatch:{{{name}}}:granted");
        let before = plant(&mut admin, &key, foreign);
        let held = holder.lock(&name).lock().unwrap();
        let lock = client.lock(&name);
        let waiting = std::thread::spawn(move || {
            lock.try_lock(Duration::from_secs(10), None)
                .unwrap()
                .map(|g| g.fencing_token())
        });
        support::await_waiting(&mut admin, &name);
        let released = Instant::now();
        held.unlock().unwrap();
        let token = waiting.join().unwrap();
        assert!(
            token.is_some(),
            "{foreign:?}: the waiter never got the lock"
        );
        assert!(
            released.elapsed() < Duration::from_secs(2),
            "{foreign:?}: the waiter got the lock {:?} after the release",
            released.elapsed()
        );
        assert_eq!(dump(&mut admin, &key), before, "{key} was changed");
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut admin).unwrap();
        assert_eq!(ttl, -1, "{key} was given an expiry");
    }
}

#[test]
fn any_utf8_name_works() {
    let server = RedisServer::start();
    let client = Client::open(&server.url()).unwrap();
    let long = "x".repeat(10 * 1024);
    for name in [
        "with spaces",
        "{braces}",
        "}{",
        "a}b{c",
        "ünïcödé 🔒",
        "tab\tnewline\n",
        long.as_str(),
    ] {
        let lock = client.lock(name);
        let guard = lock.try_lock(Duration::ZERO, None).unwrap().expect(name);
        assert_eq!(lock.hold_count().unwrap(), 1);
        assert!(client.lock(name).is_locked().unwrap());
        guard.unlock().unwrap();
        assert!(!lock.is_locked().unwrap());
    }
    // Names that differ only after a brace are different locks.
    let a = client.lock("same{x}a").lock().unwrap();
    let other = client.clone();
    let b_free = std::thread::spawn(move || {
        other
            .lock("same{x}b")
            .try_lock(Duration::ZERO, None)
            .unwrap()
            .is_some()
    });
    assert!(b_free.join().unwrap());
    drop(a);
}

#[test]
fn a_script_flush_storm_never_reaches_the_caller_and_leaves_no_lock_held() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let names: Arc<[String]> = (0..2).map(|_| unique("storm")).collect();
    let deadline = Instant::now() + Duration::from_secs(10);

    // SCRIPT FLUSH back to back, from its own connection, until the workers are done.
    let stop = Arc::new(AtomicBool::new(false));
    let flusher = {
        let stop = stop.clone();
        let mut con = server.admin();
        thread::spawn(move || {
            let mut flushes = 0u64;
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline && flushes < 1_000_000 {
                let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
                flushes += 1;
            }
            flushes
        })
    };

    const ROUNDS: usize = 40;
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let client = client.clone();
            let names = names.clone();
            thread::spawn(move || {
                let mut failures = Vec::new();
                let mut cycles = 0;
                for round in 0..ROUNDS {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let lock = client.lock(&names[(w + round) % names.len()]);
                    match lock.try_lock(Duration::from_secs(3), None) {
                        Ok(Some(guard)) => match guard.check().and_then(|()| guard.unlock()) {
                            Ok(()) => cycles += 1,
                            Err(e) => failures.push(format!("releasing: {e}")),
                        },
                        Ok(None) => failures.push("timed out waiting".to_string()),
                        Err(e) => failures.push(format!("acquiring: {e}")),
                    }
                }
                (cycles, failures)
            })
        })
        .collect();
    let mut cycles = 0;
    let mut failures = Vec::new();
    for worker in workers {
        let (done, failed) = worker.join().unwrap();
        cycles += done;
        failures.extend(failed);
    }
    stop.store(true, Ordering::SeqCst);
    let flushes = flusher.join().unwrap();

    // The storm really hit the client: its EVALSHAs were answered NOSCRIPT.
    let noscripts = error_count(&mut admin, "NOSCRIPT");
    assert!(
        flushes >= 100 && noscripts >= 20,
        "too weak a storm: {flushes} flushes, {noscripts} NOSCRIPT replies"
    );
    assert!(
        failures.is_empty(),
        "{} of {} cycles failed under {flushes} flushes ({noscripts} NOSCRIPT), e.g. {:?}",
        failures.len(),
        cycles + failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert_eq!(cycles, 4 * ROUNDS, "the workers ran out of time");
    for name in names.iter() {
        assert!(
            !client.lock(name).is_locked().unwrap(),
            "{name} was left held"
        );
    }
}

#[test]
fn a_server_that_cannot_run_our_scripts_fails_each_call_at_once() {
    // Without SCRIPT and EVAL no script can be loaded: EVALSHA answers NOSCRIPT for ever.
    let server = RedisServer::start_with(&[
        "--rename-command",
        "SCRIPT",
        "",
        "--rename-command",
        "EVAL",
        "",
    ]);
    let mut admin = server.admin();
    let client = Client::open(&server.url()).expect("PING works: the server answers");
    let name = unique("no-scripts");
    let evalsha = command_calls(&mut admin, "evalsha");
    every_call_fails(&client, &name, Duration::from_secs(3), "unknown command");
    assert_eq!(
        command_calls(&mut admin, "evalsha") - evalsha,
        6,
        "one EVALSHA per call: a refusal is not retried"
    );
    assert_eq!(dbsize(&mut admin), 0);

    // Without EVALSHA nothing runs at all.
    let server = RedisServer::start_with(&["--rename-command", "EVALSHA", ""]);
    let client = Client::open(&server.url()).unwrap();
    every_call_fails(&client, &name, Duration::from_secs(3), "unknown command");
    assert_eq!(dbsize(&mut server.admin()), 0);

    // A user without scripting permissions is told so.
    let server = RedisServer::start();
    let mut admin = server.admin();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "noscript",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-@scripting",
        ])
        .query(&mut admin)
        .unwrap();
    let url = format!("redis://noscript:pw@127.0.0.1:{}/", server.port);
    let client = Client::open(&url).unwrap();
    every_call_fails(&client, &name, Duration::from_secs(3), "no permissions");
    assert_eq!(dbsize(&mut admin), 0);
}

#[test]
fn a_server_that_refuses_writes_says_why_and_nothing_is_written() {
    // A read-only replica of a master that holds one lock, and a master that is full.
    let master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
    // Loading the master's data straight from the socket: no dump.rdb in the working directory.
    let replica = RedisServer::start_with(&[
        "--replicaof",
        "127.0.0.1",
        &master.port.to_string(),
        "--repl-diskless-load",
        "on-empty-db",
    ]);
    let mut on_replica = replica.admin();
    assert!(
        eventually(Duration::from_secs(10), || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut on_replica)
                .unwrap();
            info.contains("master_link_status:up")
        }),
        "the replica did not sync"
    );
    let mut on_master = master.admin();
    let holder = Client::open(&master.url()).unwrap();
    let busy = unique("replicated");
    let held = holder.lock(&busy).lock().unwrap();
    let replica_client = Client::open(&replica.url()).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || replica_client
            .lock(&busy)
            .is_locked()
            .unwrap()),
        "reads work on the replica: it sees the master's lock"
    );
    let master_keys = || {
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query(&mut master.admin())
            .unwrap();
        keys.sort();
        keys
    };
    let keys_before = master_keys();
    let hold_before: Vec<String> = redis::cmd("HGETALL")
        .arg(format!("redlatch:{{{busy}}}"))
        .query(&mut on_master)
        .unwrap();

    // A free lock: taking it must write, which the replica refuses.
    let free = unique("free");
    for call in [
        replica_client
            .lock(&free)
            .try_lock(Duration::ZERO, None)
            .map(drop),
        replica_client.lock(&free).force_unlock().map(drop),
    ] {
        redis_error(call, "read only replica");
    }
    let lock = replica_client.lock(&free);
    redis_error(
        bounded(Duration::from_secs(3), move || lock.lock().map(drop)),
        "read only replica",
    );
    // A busy lock: a single attempt only reads and answers as usual; a wait must queue,
    // which the replica refuses.
    assert!(
        replica_client
            .lock(&busy)
            .try_lock(Duration::ZERO, None)
            .unwrap()
            .is_none()
    );
    for wait in [Some(Duration::from_secs(2)), None] {
        let lock = replica_client.lock(&busy);
        let start = Instant::now();
        let result = bounded(Duration::from_secs(3), move || match wait {
            Some(wait) => lock.try_lock(wait, None).map(drop),
            None => lock.lock().map(drop),
        });
        redis_error(result, "read only replica");
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "not refused at once"
        );
    }
    // The master was not touched: the holder's lock is as it was, nothing else was written.
    assert_eq!(master_keys(), keys_before);
    let hold_after: Vec<String> = redis::cmd("HGETALL")
        .arg(format!("redlatch:{{{busy}}}"))
        .query(&mut on_master)
        .unwrap();
    assert_eq!(hold_after, hold_before);
    held.unlock().unwrap();

    // A server at maxmemory with noeviction refuses every write with OOM.
    let full = RedisServer::start_with(&["--maxmemory", "1", "--maxmemory-policy", "noeviction"]);
    let client = Client::open(&full.url()).unwrap();
    for call in [
        client.lock(&free).try_lock(Duration::ZERO, None).map(drop),
        client.lock(&free).force_unlock().map(drop),
    ] {
        redis_error(call, "maxmemory");
    }
    let lock = client.lock(&free);
    redis_error(
        bounded(Duration::from_secs(3), move || lock.lock().map(drop)),
        "maxmemory",
    );
    assert_eq!(dbsize(&mut full.admin()), 0);
}

#[test]
fn a_password_change_fails_calls_clearly_reports_the_hold_lost_and_is_recovered_from() {
    let server = RedisServer::start_with(&["--requirepass", "old"]);
    let url = format!("redis://:old@127.0.0.1:{}/", server.port);
    let mut admin = server.admin_with_url(&url);
    let watchdog = Duration::from_millis(900);
    let client = Client::builder(&url)
        .watchdog_timeout(watchdog)
        .response_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let name = unique("password");
    let lock = client.lock(&name);
    let guard = lock.lock().unwrap();
    let waiting = lock.clone();
    let wait = Duration::from_secs(4);
    let waiter = Running::start(move || {
        let start = Instant::now();
        let got = waiting.try_lock(wait, None).map(|g| g.is_some());
        (got, start.elapsed())
    });
    await_waiting(&mut admin, &name);
    thread::sleep(watchdog * 3 / 2);
    assert!(
        !guard.is_lost(),
        "the watchdog renews while the password holds"
    );

    // The password changes, and every connection must authenticate anew.
    let changed = Instant::now();
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", "new"])
        .query(&mut admin)
        .unwrap();
    for kind in ["normal", "pubsub"] {
        let _: i64 = redis::cmd("CLIENT")
            .arg(&["KILL", "TYPE", kind, "SKIPME", "yes"])
            .query(&mut admin)
            .unwrap();
    }

    // Calls fail at once, saying why, even a wait without end.
    const AUTH: &str = "authentication failed";
    let other = client.lock(&unique("other"));
    redis_error(
        bounded(Duration::from_secs(3), move || {
            other.try_lock(Duration::ZERO, None).map(drop)
        }),
        AUTH,
    );
    let forever = lock.clone();
    redis_error(
        bounded(Duration::from_secs(3), move || forever.lock().map(drop)),
        AUTH,
    );
    redis_error(lock.is_locked(), AUTH);

    // The holder is told once its lease has run out unrenewed, not kept in the belief.
    assert!(
        eventually(watchdog + Duration::from_secs(2), || guard.is_lost()),
        "the guard still claims the lock {:?} after the change",
        changed.elapsed()
    );
    assert!(
        changed.elapsed() <= watchdog + Duration::from_secs(1),
        "reported lost only {:?} after the change",
        changed.elapsed()
    );
    match guard.check() {
        Err(e @ Error::LockLost { .. }) => assert!(e.to_string().contains(&name), "{e}"),
        other => panic!("expected LockLost, got {other:?}"),
    }

    // The waiter is answered by its deadline: an error (it cannot authenticate either), or
    // no lock; never the lock.
    let (got, waited) = waiter.finish(wait + Duration::from_secs(3));
    match got {
        Ok(false) => {}
        Ok(true) => panic!("the waiter got a lock nobody could take"),
        Err(e) => {
            redis_error(Err::<(), _>(e), AUTH);
        }
    }
    assert!(
        waited <= wait + Duration::from_secs(1),
        "the waiter took {waited:?}"
    );

    // The old password again: the same client recovers, its threads included.
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "requirepass", "old"])
        .query(&mut admin)
        .unwrap();
    let lost_token = guard.fencing_token();
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
    let again = lock
        .try_lock(Duration::from_secs(3), None)
        .unwrap()
        .expect("the expired lock can be taken again");
    assert!(again.fencing_token() > lost_token);
    // A waiter is woken through the subscriber's new connection...
    let waiting = lock.clone();
    let waiter = Running::start(move || {
        waiting
            .try_lock(Duration::from_secs(10), None)
            .map(|g| g.is_some())
    });
    await_waiting(&mut admin, &name);
    // ...while the renewal thread keeps the lock beyond its lease again.
    thread::sleep(watchdog * 3 / 2);
    assert!(!again.is_lost(), "renewal did not recover");
    again.unlock().unwrap();
    assert!(
        waiter.finish(Duration::from_secs(12)).unwrap(),
        "the waiter did not get the lock"
    );
    assert!(!lock.is_locked().unwrap());
}

/// Runs this binary's `#[ignore]`d test `name` alone in a child process with `env`, and fails
/// (showing the child's output) unless it passes within `limit` and prints `done`.
fn run_child_test(name: &str, env: &[(&str, String)], limit: Duration, done: &str) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--ignored", "--nocapture"])
        .args(["--test-threads", "1"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drained on threads of their own, so that a full pipe cannot stall the child.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let mut status = None;
    if !support::eventually(limit, || {
        status = child.try_wait().unwrap();
        status.is_some()
    }) {
        let _ = child.kill();
        let _ = child.wait();
    }
    let output = format!(
        "{}{}",
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default()
    );
    match status {
        Some(status) if status.success() && output.contains(done) => {}
        Some(status) => panic!("child test {name} ended with {status}:\n{output}"),
        None => panic!("child test {name} did not end within {limit:?}:\n{output}"),
    }
}

/// Connections of `kind` ("normal", "pubsub") the server has, the caller's own included.
fn connections(admin: &mut redis::Connection, kind: &str) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg(&["LIST", "TYPE", kind])
        .query(admin)
        .unwrap();
    list.lines().filter(|l| !l.trim().is_empty()).count()
}

const CHILD_DONE: &str = "CHILD DONE";

/// Entry point of the child process of
/// `a_client_dropped_while_a_thread_waits_answers_the_waiter_then_goes_away`, which runs alone
/// in its process so that threads can be counted exactly. Does nothing unless started by it.
#[test]
#[ignore = "run as a child process by another test"]
fn child_drops_its_client_while_a_thread_waits() {
    let Some([url]) = support::child_env(["REDLATCH_CHILD_URL"]) else {
        return;
    };
    let mut admin = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    admin
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let threads = thread_count();

    let client = Client::open(&url).unwrap();
    assert_eq!(thread_count(), threads + 2, "a client runs two threads");
    let name = unique("dropped-client");
    let lock = client.lock(&name);
    let held = lock.lock().unwrap();

    // The user drops the client while a thread waits on a lock made from it: the waiter's
    // lock handle keeps the client, its threads and its subscriber alive, and the waiter
    // times out cleanly.
    let wait = Duration::from_millis(500);
    let waiter = Running::start({
        let lock = lock.clone();
        move || {
            let start = Instant::now();
            (
                lock.try_lock(wait, None).map(|g| g.is_some()),
                start.elapsed(),
            )
        }
    });
    await_waiting(&mut admin, &name);
    drop(client);
    assert_eq!(
        thread_count(),
        threads + 2 + 1,
        "the client's threads and the waiter"
    );
    assert_eq!(connections(&mut admin, "pubsub"), 1, "the subscriber");
    let (got, waited) = waiter.finish(Duration::from_secs(5));
    assert!(matches!(got, Ok(false)), "{got:?}");
    assert!(
        waited >= wait && waited < wait + Duration::from_secs(2),
        "waited {waited:?}"
    );

    // Another waiter gets the lock when it is released.
    let waiter = Running::start({
        let lock = lock.clone();
        move || {
            lock.try_lock(Duration::from_secs(10), None)
                .map(|g| g.map(|g| g.fencing_token()))
        }
    });
    await_waiting(&mut admin, &name);
    let token = held.fencing_token();
    held.unlock().unwrap();
    let handed = waiter
        .finish(Duration::from_secs(12))
        .unwrap()
        .expect("the waiter gets the released lock");
    assert!(handed > token);

    // The last lock handle goes: so do the client's threads and its connections.
    drop(lock);
    assert!(
        eventually(Duration::from_secs(5), || thread_count() == threads),
        "{} threads outlived the client",
        thread_count() - threads
    );
    assert!(
        eventually(Duration::from_secs(5), || connections(&mut admin, "pubsub")
            == 0),
        "the subscriber's connection outlived the client"
    );
    assert!(
        eventually(Duration::from_secs(5), || connections(&mut admin, "normal")
            == 1),
        "the client's pooled connections outlived it (only this admin connection may be left)"
    );
    assert!(!exists(&mut admin, &format!("redlatch:{{{name}}}")));
    println!("{CHILD_DONE}");
}

#[test]
fn a_client_dropped_while_a_thread_waits_answers_the_waiter_then_goes_away() {
    let server = RedisServer::start();
    run_child_test(
        "child_drops_its_client_while_a_thread_waits",
        &[("REDLATCH_CHILD_URL", server.url())],
        Duration::from_secs(40),
        CHILD_DONE,
    );
}

/// When foreign data under the hand-over mark stops a hand-over, the waiter goes back to its
/// place, and the queue, which the release's ZPOPMIN may have emptied and deleted, still
/// expires: a waiter that never comes back leaves nothing behind for good.
#[test]
fn a_hand_over_stopped_by_a_foreign_mark_leaves_a_queue_that_expires() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let holder = Client::open(&server.url()).unwrap();
    let name = unique("foreign-mark-queue");
    let lock = format!("redlatch:{{{name}}}");
    let (queue, mark) = (format!("{lock}:queue"), format!("{lock}:granted"));
    let _: () = redis::cmd("SET")
        .arg(&mark)
        .arg("precious")
        .query(&mut admin)
        .unwrap();
    let held = holder.lock(&name).lock().unwrap();
    // A waiter, queued by the real script for 3 s, that never attempts again.
    let gone = support::SCRIPT_OWNER;
    let busy = support::attempt_on_lock(&mut admin, &name, gone, "3000", "", "");
    assert_eq!(busy[0], 0, "{busy:?}");
    held.unlock().unwrap();

    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(&queue)
        .arg(0)
        .arg(-1)
        .query(&mut admin)
        .unwrap();
    assert_eq!(
        members,
        [format!("{gone} 30000 3000")],
        "the waiter kept its place"
    );
    let ttl: i64 = redis::cmd("PTTL").arg(&queue).query(&mut admin).unwrap();
    assert!((1..=3000).contains(&ttl), "the queue expires in {ttl} ms");
    let kept: String = redis::cmd("GET").arg(&mark).query(&mut admin).unwrap();
    assert_eq!(kept, "precious");
}

/// What Lua's `tonumber` takes but no count of ours (or Redisson's) is: every number read
/// from a key must be a decimal integer (issue 40, item 5).
const NOT_INTEGERS: &[&str] = &[
    "inf",
    "-inf",
    "nan",
    "NaN",
    "1.5",
    "0x10",
    " 5",
    "5 ",
    "1e3",
    "",
    "+3",
    "-",
    // Beyond what Lua counts exactly (2^53), and beyond i64.
    "9007199254740993",
    "99999999999999999999",
    "-99999999999999999999",
];

/// The calls that read (and may write) the number kept under one key.
struct NumberKey {
    what: &'static str,
    key: String,
    calls: Vec<Box<dyn Fn() -> redlatch::Result<()> + Send>>,
}

fn number_keys(client: &Client, name: &str) -> Vec<NumberKey> {
    let redisson = client.layout() == redlatch::Layout::Redisson;
    let key = |ours: String| if redisson { name.to_string() } else { ours };
    let sem = client.semaphore(name);
    let counting = client.counting_semaphore(name);
    let latch = client.count_down_latch(name);
    let lock = client.lock(name);
    let rw = client.read_write_lock(name);
    let (s, c, l) = (sem.clone(), counting.clone(), latch.clone());
    let mut keys = vec![
        NumberKey {
            what: "semaphore total",
            key: key(format!("redlatch:{{{name}}}:semaphore:permits")),
            calls: vec![
                Box::new({
                    let s = s.clone();
                    move || s.set_permits(3)
                }),
                Box::new({
                    let s = s.clone();
                    move || s.try_set_permits(3).map(drop)
                }),
                Box::new({
                    let s = s.clone();
                    move || s.add_permits(1).map(drop)
                }),
                Box::new({
                    let s = s.clone();
                    move || s.add_permits(-1).map(drop)
                }),
                Box::new({
                    let s = s.clone();
                    move || s.permits().map(drop)
                }),
                Box::new({
                    let s = s.clone();
                    move || s.available().map(drop)
                }),
                Box::new({
                    let s = s.clone();
                    move || s.acquired().map(drop)
                }),
                Box::new({
                    let s = s.clone();
                    move || s.try_acquire(1, Duration::ZERO, None).map(drop)
                }),
            ],
        },
        NumberKey {
            what: "counting semaphore count",
            key: key(format!("redlatch:{{{name}}}:counting")),
            calls: vec![
                Box::new({
                    let c = c.clone();
                    move || c.try_set_permits(3).map(drop)
                }),
                Box::new({
                    let c = c.clone();
                    move || c.add_permits(1)
                }),
                Box::new({
                    let c = c.clone();
                    move || c.add_permits(-1)
                }),
                Box::new({
                    let c = c.clone();
                    move || c.release(1)
                }),
                Box::new({
                    let c = c.clone();
                    move || c.available().map(drop)
                }),
                Box::new({
                    let c = c.clone();
                    move || c.drain().map(drop)
                }),
                Box::new({
                    let c = c.clone();
                    move || c.try_acquire(1, Duration::ZERO).map(drop)
                }),
            ],
        },
        NumberKey {
            what: "latch count",
            key: if redisson {
                name.to_string()
            } else {
                format!("redlatch:{{{name}}}:latch")
            },
            calls: vec![
                Box::new({
                    let l = l.clone();
                    move || l.try_set_count(2).map(drop)
                }),
                Box::new({
                    let l = l.clone();
                    move || l.count_down().map(drop)
                }),
                Box::new({
                    let l = l.clone();
                    move || l.count().map(drop)
                }),
                Box::new({
                    let l = l.clone();
                    move || l.wait(Duration::ZERO).map(drop)
                }),
                Box::new({
                    let l = l.clone();
                    move || l.delete().map(drop)
                }),
            ],
        },
    ];
    let fence = if redisson {
        format!("redisson_lock_token:{{{name}}}")
    } else {
        format!("redlatch:{{{name}}}:fence")
    };
    keys.push(NumberKey {
        what: "lock fence",
        key: fence,
        calls: vec![Box::new(move || {
            lock.try_lock(Duration::ZERO, None).map(drop)
        })],
    });
    if !redisson {
        keys.push(NumberKey {
            what: "read-write lock fence",
            key: format!("redlatch:{{{name}}}:rwlock:fence"),
            calls: vec![Box::new(move || {
                rw.try_write(Duration::ZERO, None).map(drop)
            })],
        });
    }
    keys
}

#[test]
fn a_number_under_our_keys_that_is_not_a_decimal_integer_is_refused_and_left_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let mut failures = Vec::new();
    for layout in [redlatch::Layout::Redlatch, redlatch::Layout::Redisson] {
        let client = Client::builder(&server.url())
            .layout(layout)
            .build()
            .unwrap();
        let redisson = layout == redlatch::Layout::Redisson;
        for value in NOT_INTEGERS {
            let name = unique("not-a-number");
            for number in number_keys(&client, &name) {
                // A 64-bit count (a latch's), or an integer Redis's INCR takes (Redisson's
                // token counter, as Java's).
                if *value == "9007199254740993"
                    && (number.what == "latch count" || (redisson && number.what == "lock fence"))
                {
                    continue;
                }
                let _: () = redis::cmd("SET")
                    .arg(&number.key)
                    .arg(value)
                    .query(&mut admin)
                    .unwrap();
                let before = dump(&mut admin, &number.key);
                for (i, call) in number.calls.into_iter().enumerate() {
                    let got = bounded(Duration::from_secs(10), call);
                    let wrong = matches!(&got, Err(Error::WrongType { key }) if *key == number.key);
                    let after = dump(&mut admin, &number.key);
                    let pttl = support::pttl(&mut admin, &number.key);
                    if !wrong || after != before || pttl != -1 {
                        failures.push(format!(
                            "{layout:?} {} {value:?}, call {i}: {got:?}, key {} (PTTL {pttl})",
                            number.what,
                            if after == before { "kept" } else { "CHANGED" },
                        ));
                        // Put it back for the next call.
                        let _: () = redis::cmd("SET")
                            .arg(&number.key)
                            .arg(value)
                            .query(&mut admin)
                            .unwrap();
                    }
                }
                let _: () = redis::cmd("DEL")
                    .arg(&number.key)
                    .query(&mut admin)
                    .unwrap();
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
