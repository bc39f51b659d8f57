//! A server at maxmemory with `noeviction`: every call that frees memory (a release, a waiter
//! leaving the queue, a hand-over given back, a multi-lock's release) must still run, since
//! freeing is how the server gets out of that state, and waiters must be woken at once, not
//! when the lease runs out.
//!
//! What redis-server 7.0.15 does (checked by hand, and by `the_server_refuses_writes`
//! below): with `used_memory` above `maxmemory`, a script's first write that may need memory
//! (SET, HSET, ZADD, INCR) fails with OOM, unless the script wrote anything before it; DEL,
//! ZREM, HDEL and PEXPIRE need none and are never refused. The scripts in `lua/` free first.

mod support;

use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redlatch::Client;
use support::{RedisServer, await_waiting, channel_of, join_all, unique, woken_soon_after};

/// Brings `admin`'s server to maxmemory with `noeviction`: about 5 MB of ballast, and a limit
/// below what is used, so that any write that needs memory is refused while the test runs.
fn fill_to_maxmemory(admin: &mut redis::Connection) {
    let _: () = redis::cmd("EVAL")
        .arg("for i = 1, 40000 do redis.call('set', 'ballast:' .. i, string.rep('x', 100)) end")
        .arg(0)
        .query(admin)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query(admin)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("2mb")
        .query(admin)
        .unwrap();
    the_server_refuses_writes(admin);
}

/// The state the tests rely on is real: a plain write is refused with OOM.
fn the_server_refuses_writes(admin: &mut redis::Connection) {
    let refused = redis::cmd("SET")
        .arg("probe")
        .arg("x")
        .query::<()>(admin)
        .unwrap_err();
    assert_eq!(refused.code(), Some("OOM"), "{refused}");
}

fn exists(admin: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(admin).unwrap() == 1
}

fn queued(admin: &mut redis::Connection, name: &str) -> i64 {
    redis::cmd("ZCARD")
        .arg(format!("redlatch:{{{name}}}:queue"))
        .query(admin)
        .unwrap()
}

/// A thread that waits up to `wait` for `lock` with `lease`, without retrying an error (a
/// retry at maxmemory would only be refused again). Joins to when it stopped and whether it
/// got the lock; the guard is released (at maxmemory too) before it returns.
fn waiter(lock: redlatch::Lock, wait: Duration, lease: Option<Duration>) -> Waiting {
    thread::spawn(move || match lock.try_lock(wait, lease) {
        Ok(guard) => {
            let stopped = Instant::now();
            let got = guard.is_some();
            if let Some(guard) = guard {
                guard.unlock().expect("the waiter's release");
            }
            (stopped, got)
        }
        Err(e) => {
            eprintln!("waiter: {e}");
            (Instant::now(), false)
        }
    })
}

type Waiting = JoinHandle<(Instant, bool)>;

#[test]
fn a_release_at_maxmemory_frees_the_lock_and_hands_it_to_the_waiter() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let holder = Client::open(&server.url()).unwrap();
    let other = Client::open(&server.url()).unwrap();
    let name = unique("full-release");
    let guard = holder.lock(&name).lock().unwrap();
    let waiting = waiter(other.lock(&name), Duration::from_secs(20), None);
    await_waiting(&mut admin, &name);

    fill_to_maxmemory(&mut admin);
    let released = Instant::now();
    guard.unlock().expect("a release at maxmemory");
    // Handed over, not left to the 30 s lease; and the waiter's own release (with nobody
    // queued: a plain delete) ran at maxmemory too.
    woken_soon_after(released, waiting);
    assert!(!exists(&mut admin, &format!("redlatch:{{{name}}}")));
    the_server_refuses_writes(&mut admin);
}

#[test]
fn a_waiter_whose_time_runs_out_at_maxmemory_leaves_the_queue() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let holder = Client::open(&server.url()).unwrap();
    let other = Client::open(&server.url()).unwrap();
    let name = unique("full-withdraw");
    let guard = holder.lock(&name).lock().unwrap();
    // The holder's 30 s lease is longer than the wait: the waiter sleeps to its deadline and
    // withdraws, with no attempt in between.
    let wait = Duration::from_millis(1500);
    let waiting = waiter(other.lock(&name), wait, None);
    await_waiting(&mut admin, &name);
    assert_eq!(queued(&mut admin, &name), 1);

    fill_to_maxmemory(&mut admin);
    let [(_, got)] = join_all(vec![waiting], Duration::from_secs(10), "the waiter")
        .try_into()
        .unwrap();
    assert!(!got, "the lock was held throughout");
    assert_eq!(queued(&mut admin, &name), 0, "the waiter left its place");
    guard.unlock().expect("a release at maxmemory");
    assert!(!holder.lock(&name).is_locked().unwrap());
}

#[test]
fn a_waiter_keeps_its_place_at_maxmemory_and_is_handed_the_lock() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    // Short watchdogs: the holder's keeps the lock's TTL short, so the waiter attempts again
    // about every second; the waiter's keeps its place valid for 3 s only, so those attempts
    // move its validity on (ZREM before ZADD, which a full server lets through).
    let holder = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let other = Client::builder(&server.url())
        .watchdog_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let name = unique("full-waiting");
    let guard = holder.lock(&name).lock().unwrap();
    let lock = other.lock(&name);
    let waiting = thread::spawn(move || {
        lock.try_lock(Duration::from_secs(20), None)
            .map(|g| g.map(|g| g.fencing_token()))
    });
    await_waiting(&mut admin, &name);
    assert_eq!(queued(&mut admin, &name), 1);

    fill_to_maxmemory(&mut admin);
    let attempts = support::command_calls(&mut admin, "evalsha");
    thread::sleep(Duration::from_millis(3500));
    assert!(
        support::command_calls(&mut admin, "evalsha") >= attempts + 3,
        "the waiter attempted again, and the holder renewed"
    );
    assert!(!waiting.is_finished(), "the waiter's attempts were refused");
    assert_eq!(queued(&mut admin, &name), 1, "the waiter kept its place");
    let released = Instant::now();
    guard.unlock().expect("a release at maxmemory");
    let [got] = join_all(vec![waiting], Duration::from_secs(5), "the waiter")
        .try_into()
        .unwrap();
    assert!(got.unwrap().is_some(), "the waiter was not handed the lock");
    assert!(released.elapsed() < Duration::from_secs(1));
    assert_eq!(queued(&mut admin, &name), 0);
}

#[test]
fn a_waiter_handed_the_lock_at_maxmemory_takes_it_up() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let holder = Client::open(&server.url()).unwrap();
    let other = Client::open(&server.url()).unwrap();
    let name = unique("full-take-up");
    let guard = holder.lock(&name).lock().unwrap();
    // A lease longer than the watchdog timeout: the hand-over comes with the shorter one, so
    // the waiter takes it up with an attempt of its own, which sets its lease.
    let lease = Some(Duration::from_secs(60));
    let waiting = waiter(other.lock(&name), Duration::from_secs(20), lease);
    await_waiting(&mut admin, &name);

    fill_to_maxmemory(&mut admin);
    let released = Instant::now();
    guard.unlock().expect("a release at maxmemory");
    woken_soon_after(released, waiting);
    assert!(!exists(&mut admin, &format!("redlatch:{{{name}}}")));
}

#[test]
fn a_hand_over_given_back_at_maxmemory_goes_to_the_next_waiter() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let holder = Client::open(&server.url()).unwrap();
    let other = Client::open(&server.url()).unwrap();
    let name = unique("full-give-back");
    let (lock, fence) = (
        format!("redlatch:{{{name}}}"),
        format!("redlatch:{{{name}}}:fence"),
    );
    let mark = format!("{lock}:granted");
    let guard = holder.lock(&name).lock().unwrap();

    // A thread of `other` that queued and left without withdrawing (its withdrawal lost, say):
    // queued by the real script, under a thread number no thread of this process has.
    let gone = format!("{}:{}", other.id(), u32::MAX);
    let busy: Vec<i64> = support::run_on_lock(
        &mut admin,
        &support::ACQUIRE_LUA,
        &name,
        &support::acquire_args(&gone, "30000", "", ""),
    );
    assert_eq!(busy[0], 0, "queued behind the holder: {busy:?}");
    // Released while `other` has nobody waiting, so its subscriber misses the grant: the lock
    // is the gone thread's now, for 30 s.
    guard.unlock().unwrap();
    let token: String = redis::cmd("GET").arg(&fence).query(&mut admin).unwrap();
    let granted: String = redis::cmd("GET").arg(&mark).query(&mut admin).unwrap();
    assert_eq!(granted, format!("{gone} {token}"));

    let waiting = waiter(other.lock(&name), Duration::from_secs(20), None);
    await_waiting(&mut admin, &name);
    assert_eq!(queued(&mut admin, &name), 1);
    fill_to_maxmemory(&mut admin);
    // The grant reaches `other` now, as a message that came late: the thread it names does
    // not wait, so `other` gives the lock back, on a full server, and the release in that
    // give-back hands it to the waiter.
    let given_back = Instant::now();
    let _: i64 = redis::cmd("PUBLISH")
        .arg(channel_of(&name))
        .arg(format!("grant {token} 30000 {gone}"))
        .query(&mut admin)
        .unwrap();
    woken_soon_after(given_back, waiting);
    assert!(!exists(&mut admin, &lock));
}

#[test]
fn a_multi_lock_released_at_maxmemory_wakes_the_waiters_of_every_member() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let holder = Client::open(&server.url()).unwrap();
    let other = Client::open(&server.url()).unwrap();
    let names = [unique("full-multi-a"), unique("full-multi-b")];
    let guard = holder
        .multi_lock(&[names[0].as_str(), names[1].as_str()])
        .lock()
        .unwrap();
    let waiting: Vec<Waiting> = names
        .iter()
        .map(|name| waiter(other.lock(name), Duration::from_secs(20), None))
        .collect();
    for name in &names {
        await_waiting(&mut admin, name);
    }

    fill_to_maxmemory(&mut admin);
    let released = Instant::now();
    guard.unlock().expect("a multi-lock's release at maxmemory");
    for waiting in waiting {
        woken_soon_after(released, waiting);
    }
    for name in &names {
        assert!(!exists(&mut admin, &format!("redlatch:{{{name}}}")));
    }
}

/// An attempt that voids leftover places (`acquire.lua`'s ARGV[9]) is refused on a full
/// server like any other: the voiding's removal comes after the writes that need memory, so
/// it does not let them through.
#[test]
fn an_attempt_that_voids_leftovers_is_still_refused_at_maxmemory() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let name = unique("full-leftovers");
    let lock = format!("redlatch:{{{name}}}");
    let queue = format!("{lock}:queue");
    let owner = support::SCRIPT_OWNER;
    let _: i64 = redis::cmd("ZADD")
        .arg(&queue)
        .arg(1)
        .arg(format!("{owner} 30000 6000"))
        .query(&mut admin)
        .unwrap();
    fill_to_maxmemory(&mut admin);
    let refused: redis::RedisResult<Vec<i64>> = support::eval_on_lock(
        &mut admin,
        &support::ACQUIRE_LUA,
        &name,
        &support::acquire_args(owner, "0", "", "0 30000 6000"),
    );
    match refused {
        // The script's own reply, called directly: Redis 7 passes the failed call's OOM on as
        // it is, 6.2 replies `@user_script: <line>: -OOM ...` (which the crate unwraps).
        Err(e) if e.code() == Some("OOM") || e.to_string().contains("-OOM command not allowed") => {
        }
        other => panic!("expected the server's OOM refusal, got {other:?}"),
    }
    assert!(
        !exists(&mut admin, &lock),
        "the lock was taken on a full server"
    );
    assert!(!exists(&mut admin, &format!("{lock}:fence")));
    // The leftover is voided all the same: a removal needs no memory.
    assert!(!exists(&mut admin, &queue));
}

/// A read whose token is the counter as it stands (a write came before) keeps the counter
/// alive with a PEXPIRE, which Redis does not refuse at maxmemory, and after which it refuses
/// none of the script's writes: so that PEXPIRE must come after the read's first write, and a
/// read on a full server is refused with nothing taken, in the usual case as in the general
/// way (another reader holds).
#[test]
fn a_read_at_maxmemory_is_refused_and_takes_nothing() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::open(&server.url()).unwrap();
    let (alone, shared) = (unique("full-read"), unique("full-read-shared"));
    for name in [&alone, &shared] {
        let rw = client.read_write_lock(name);
        drop(rw.write().unwrap()); // the counter stands, with the write's lease and retention
    }
    let other = Client::open(&server.url()).unwrap();
    let holder = other.read_write_lock(&shared).read().unwrap();
    fill_to_maxmemory(&mut admin);
    for name in [&alone, &shared] {
        match client.read_write_lock(name).try_read(Duration::ZERO, None) {
            Err(redlatch::Error::Redis(e)) if e.code() == Some("OOM") => {}
            other => panic!("{name}: expected the server's OOM refusal, got {other:?}"),
        }
    }
    assert!(!exists(&mut admin, &format!("redlatch:{{{alone}}}:rwlock")));
    let holders: i64 = redis::cmd("HLEN")
        .arg(format!("redlatch:{{{shared}}}:rwlock"))
        .query(&mut admin)
        .unwrap();
    assert_eq!(holders, 1, "only the other reader holds");
    drop(holder);
}

/// A write or permits asked for beside a holder, at maxmemory: the attempt's first write
/// (the waiter's terms) is refused, and with it the rest, so nothing is queued, as a lock's
/// waiter is refused. The holder's release still runs.
#[test]
fn a_share_waiter_at_maxmemory_is_refused_and_queues_nothing() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let holder = Client::open(&server.url()).unwrap();
    let other = Client::open(&server.url()).unwrap();
    let (written, permitted) = (unique("full-write-wait"), unique("full-permit-wait"));
    let write = holder.read_write_lock(&written).write().unwrap();
    let semaphore = holder.semaphore(&permitted);
    semaphore.set_permits(1).unwrap();
    let permits = semaphore.acquire(1).unwrap();
    fill_to_maxmemory(&mut admin);
    let wait = Duration::from_secs(3);
    let started = Instant::now();
    let attempts = [
        (
            "rwlock",
            &written,
            other
                .read_write_lock(&written)
                .try_write(wait, None)
                .map(drop),
        ),
        (
            "semaphore",
            &permitted,
            other
                .semaphore(&permitted)
                .try_acquire(1, wait, None)
                .map(drop),
        ),
    ];
    for (kind, name, attempt) in attempts {
        match attempt {
            Err(redlatch::Error::Redis(e)) if e.code() == Some("OOM") => {}
            other => panic!("{kind}: expected the server's OOM refusal, got {other:?}"),
        }
        for key in ["queue", "waiters"] {
            let key = format!("redlatch:{{{name}}}:{kind}:{key}");
            assert!(!exists(&mut admin, &key), "{key} was written");
        }
    }
    assert!(started.elapsed() < wait, "refused at the first attempt");
    drop(write);
    permits.release().expect("a release at maxmemory");
    the_server_refuses_writes(&mut admin);
}

/// A count-down at maxmemory is the server's refusal, not foreign data: the count stays.
#[test]
fn a_count_down_at_maxmemory_is_refused_as_the_server_says() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::open(&server.url()).unwrap();
    let name = unique("full-latch");
    let latch = client.count_down_latch(&name);
    assert!(latch.try_set_count(2).unwrap());
    fill_to_maxmemory(&mut admin);
    match latch.count_down() {
        Err(redlatch::Error::Redis(e)) if e.code() == Some("OOM") => {}
        other => panic!("expected the server's OOM refusal, got {other:?}"),
    }
    assert_eq!(latch.count().unwrap(), 2);
}
