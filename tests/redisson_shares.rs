//! `Layout::Redisson`, the kinds with shares: `read_write_lock(n)` is Java's
//! `getReadWriteLock(n)` and `semaphore(n)` Java's `getPermitExpirableSemaphore(n)`. The Java
//! side here is raw commands and Lua snippets that follow Redisson's format (its read-write lock's
//! and permit-expirable semaphore's scripts); keys, fields and messages are compared with its reference trace.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redlatch::{Client, Error, HoldKind, Layout, LostLock};
use support::{RedisServer, await_parked, command_calls, eventually, join_all, pttl, unique};

fn redisson(server: &RedisServer) -> Client {
    Client::builder(&server.url())
        .layout(Layout::Redisson)
        .build()
        .unwrap()
}

fn with_watchdog(server: &RedisServer, watchdog: Duration) -> Client {
    Client::builder(&server.url())
        .layout(Layout::Redisson)
        .watchdog_timeout(watchdog)
        .build()
        .unwrap()
}

fn hash(admin: &mut redis::Connection, key: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL").arg(key).query(admin).unwrap()
}

fn get(admin: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(admin).unwrap()
}

fn exists(admin: &mut redis::Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query(admin).unwrap()
}

/// `{name}:<field>:rwlock_timeout:<k>`: a reader's timeout key of its hold k.
fn timeout_key(name: &str, field: &str, k: u32) -> String {
    format!("{{{name}}}:{field}:rwlock_timeout:{k}")
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

// The Java side of the read-write lock (Redisson's format), written from the
// numbered steps, without the unlock latch (a Java retry's concern only).

/// 7.2, read acquire. KEYS: the hash, the reader's timeout prefix. ARGV: lease, F, F:write.
const JAVA_READ: &str = r"
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':1', 1)
  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local k = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':' .. k, 1)
  redis.call('pexpire', KEYS[2] .. ':' .. k, ARGV[1])
  local r = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], math.max(r, tonumber(ARGV[1])))
  return nil
end
return redis.call('pttl', KEYS[1])
";

/// 7.3, read unlock. KEYS: the hash, the channel, the reader's timeout prefix, the key
/// prefix `{N}`. ARGV: `0`, F, publish command. Step 6 is Java's recomputation of the hash
/// TTL from every holder's timeout keys.
const JAVA_READ_UNLOCK: &str = r"
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
  redis.call(ARGV[3], KEYS[2], ARGV[1])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return nil
end
local c = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if c == 0 then
  redis.call('hdel', KEYS[1], ARGV[2])
end
redis.call('del', KEYS[3] .. ':' .. (c + 1))
if redis.call('hlen', KEYS[1]) > 1 then
  local m = -3
  for _, x in ipairs(redis.call('hkeys', KEYS[1])) do
    local v = tonumber(redis.call('hget', KEYS[1], x))
    if v then
      for k = v, 1, -1 do
        m = math.max(m, redis.call('pttl', KEYS[4] .. ':' .. x .. ':rwlock_timeout:' .. k))
      end
    end
  end
  if m > 0 then
    redis.call('pexpire', KEYS[1], m)
    return 0
  end
  if mode == 'write' then
    return 0
  end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
return 1
";

/// 7.4 (first acquisition only) and 7.5 (final unlock).
const JAVA_WRITE: &str = r"
if redis.call('hget', KEYS[1], 'mode') then
  return redis.call('pttl', KEYS[1])
end
redis.call('hset', KEYS[1], 'mode', 'write')
redis.call('hset', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[1])
return nil
";
const JAVA_WRITE_UNLOCK: &str = r"
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return nil
end
redis.call('hdel', KEYS[1], ARGV[1])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], '1')
else
  redis.call('hset', KEYS[1], 'mode', 'read')
end
return 1
";

/// A Java service's thread: `<uuid>:<thread id>`.
const JAVA: &str = "5f1c2c9e-3b7e-4b4e-9d6a-2f0d3c1f9a10:87";

fn java_reads(admin: &mut redis::Connection, name: &str, field: &str, lease_ms: u64) {
    let busy: Option<i64> = redis::Script::new(JAVA_READ)
        .key(name)
        .key(format!("{{{name}}}:{field}:rwlock_timeout"))
        .arg(lease_ms)
        .arg(field)
        .arg(format!("{field}:write"))
        .invoke(admin)
        .unwrap();
    assert_eq!(busy, None, "the Java read is taken");
}

fn java_read_unlocks(admin: &mut redis::Connection, name: &str, field: &str) -> Option<i64> {
    redis::Script::new(JAVA_READ_UNLOCK)
        .key(name)
        .key(format!("redisson_rwlock:{{{name}}}"))
        .key(format!("{{{name}}}:{field}:rwlock_timeout"))
        .key(format!("{{{name}}}"))
        .arg("0")
        .arg(field)
        .arg("PUBLISH")
        .invoke(admin)
        .unwrap()
}

fn java_writes(admin: &mut redis::Connection, name: &str, field: &str) {
    let busy: Option<i64> = redis::Script::new(JAVA_WRITE)
        .key(name)
        .arg(30_000)
        .arg(format!("{field}:write"))
        .invoke(admin)
        .unwrap();
    assert_eq!(busy, None, "the Java write is taken");
}

fn java_write_unlocks(admin: &mut redis::Connection, name: &str, field: &str) {
    let done: Option<i64> = redis::Script::new(JAVA_WRITE_UNLOCK)
        .key(name)
        .key(format!("redisson_rwlock:{{{name}}}"))
        .arg(format!("{field}:write"))
        .invoke(admin)
        .unwrap();
    assert_eq!(done, Some(1));
}

#[test]
fn reads_and_writes_leave_what_redisson_leaves() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("rw");
    let lock = client.read_write_lock(&name);
    let me = client.current_thread_owner_id();
    let token_key = format!("redisson_lock_token:{{{name}}}");

    // Two reads of one thread: the trace's {mode: read, U:1: 1}, then a count of 2 and a
    // timeout key per hold, each with the 30 s lease; a read takes no token.
    let read = lock.read().unwrap();
    assert_eq!(read.owner_id(), me);
    assert_eq!(
        read.fencing_token(),
        0,
        "no write yet: the counter is not there"
    );
    assert!(!exists(&mut admin, &token_key), "a read moves no counter");
    let again = lock.read().unwrap();
    assert_eq!(
        hash(&mut admin, &name),
        HashMap::from([("mode".into(), "read".into()), (me.clone(), "2".into())])
    );
    for k in [1, 2] {
        let key = timeout_key(&name, &me, k);
        assert_eq!(get(&mut admin, &key).as_deref(), Some("1"));
        assert!((25_000..=30_000).contains(&pttl(&mut admin, &key)), "{key}");
    }
    assert!((25_000..=30_000).contains(&pttl(&mut admin, &name)));
    // Unlock deletes the timeout key numbered by the old count.
    drop(again);
    assert_eq!(hash(&mut admin, &name)[&me], "1");
    assert!(!exists(&mut admin, &timeout_key(&name, &me, 2)));
    assert!(exists(&mut admin, &timeout_key(&name, &me, 1)));
    drop(read);
    assert!(!exists(&mut admin, &name));
    assert!(!exists(&mut admin, &timeout_key(&name, &me, 1)));

    // A write: {mode: write, F:write: 1}, a token from the counter; the writer may read,
    // which shows as its plain field beside the write (the trace's U:3 and U:3:write).
    let write = lock.write().unwrap();
    let writer = format!("{me}:write");
    assert_eq!(write.owner_id(), writer);
    let token: u64 = get(&mut admin, &token_key).unwrap().parse().unwrap();
    assert_eq!(write.fencing_token(), token);
    assert_eq!(
        hash(&mut admin, &name),
        HashMap::from([
            ("mode".into(), "write".into()),
            (writer.clone(), "1".into())
        ])
    );
    assert!((25_000..=30_000).contains(&pttl(&mut admin, &name)));
    let read = lock.read().unwrap();
    assert_eq!(
        read.fencing_token(),
        token,
        "a read carries the last write's token"
    );
    assert_eq!(
        hash(&mut admin, &name),
        HashMap::from([
            ("mode".into(), "write".into()),
            (writer.clone(), "1".into()),
            (me.clone(), "1".into())
        ])
    );
    // Re-entry keeps the token; the write unlock with a read held turns the mode to read.
    let rewrite = lock.write().unwrap();
    assert_eq!(rewrite.fencing_token(), token);
    assert_eq!(hash(&mut admin, &name)[&writer], "2");
    drop(rewrite);
    write.unlock().unwrap();
    assert_eq!(
        hash(&mut admin, &name),
        HashMap::from([("mode".into(), "read".into()), (me.clone(), "1".into())])
    );
    read.unlock().unwrap();
    assert!(!exists(&mut admin, &name));
    // The next write's token is above the last.
    let next = lock.write().unwrap();
    assert!(next.fencing_token() > token);
}

#[test]
fn our_unlocks_publish_what_java_waiters_read() {
    let server = RedisServer::start();
    let client = redisson(&server);
    let name = unique("msgs");
    let mut listener = support::jvm::Listener::new(
        &server.url(),
        &format!("redisson_rwlock:{{{name}}}"),
        support::jvm::Publish::Plain,
    );
    let lock = client.read_write_lock(&name);
    // A downgrade publishes nothing; the final read unlock "0".
    let write = lock.write().unwrap();
    let read = lock.read().unwrap();
    let second = lock.read().unwrap();
    drop(write);
    drop(second);
    drop(read);
    // A write unlock that frees the lock: "1".
    lock.write().unwrap().unlock().unwrap();
    let wait = Duration::from_secs(5);
    assert_eq!(listener.next(wait).as_deref(), Some("0"));
    assert_eq!(listener.next(wait).as_deref(), Some("1"));
    assert_eq!(listener.next(Duration::from_millis(300)), None);
}

#[test]
fn a_java_reader_and_ours_share_and_a_java_read_unlock_keeps_our_read() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("shared");
    // The Java reader's lease is the longer, so the hash's TTL could only come from our
    // reader's timeout key after the Java one leaves.
    java_reads(&mut admin, &name, JAVA, 60_000);
    let lock = client.read_write_lock(&name);
    let read = lock
        .try_read(Duration::ZERO, None)
        .unwrap()
        .expect("readers share");
    let me = client.current_thread_owner_id();
    assert_eq!(
        hash(&mut admin, &name),
        HashMap::from([
            ("mode".into(), "read".into()),
            (JAVA.into(), "1".into()),
            (me.clone(), "1".into())
        ])
    );
    assert!(
        pttl(&mut admin, &name) > 55_000,
        "a read only extends the hash"
    );

    // Java's read unlock: the hash lives on as long as our timeout key, and our field with it.
    assert_eq!(java_read_unlocks(&mut admin, &name, JAVA), Some(0));
    let fields = hash(&mut admin, &name);
    assert_eq!(
        fields,
        HashMap::from([("mode".into(), "read".into()), (me.clone(), "1".into())])
    );
    let ours = pttl(&mut admin, &timeout_key(&name, &me, 1));
    let left = pttl(&mut admin, &name);
    assert!(
        left > 25_000 && (left - ours).abs() < 1_000,
        "{left} {ours}"
    );
    assert!(!read.is_lost());

    // And ours, the last, deletes it.
    read.unlock().unwrap();
    assert!(!exists(&mut admin, &name));
}

#[test]
fn our_read_unlock_recomputes_the_ttl_from_the_java_readers_keys() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("recompute");
    let lock = client.read_write_lock(&name);
    let read = lock.read().unwrap();
    java_reads(&mut admin, &name, JAVA, 5_000);
    read.unlock().unwrap();
    // Java's rule: the longest timeout key left, the Java reader's 5 s.
    assert_eq!(
        hash(&mut admin, &name),
        HashMap::from([("mode".into(), "read".into()), (JAVA.into(), "1".into())])
    );
    let left = pttl(&mut admin, &name);
    assert!((3_000..=5_000).contains(&left), "{left}");
}

/// A writer of ours waits while `hold` holds the lock, and must be woken by the message of
/// `release`, long before the lease ends.
fn writer_woken_by(
    release: impl FnOnce(&mut redis::Connection, &str),
    hold: fn(&mut redis::Connection, &str),
) {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("woken");
    hold(&mut admin, &name);
    let lock = client.read_write_lock(&name);
    assert!(lock.try_write(Duration::ZERO, None).unwrap().is_none());
    let base = command_calls(&mut admin, "evalsha");
    let waiting = {
        let lock = lock.clone();
        thread::spawn(move || {
            let guard = lock.try_write(Duration::from_secs(20), None).unwrap();
            (Instant::now(), guard.map(|g| g.fencing_token()))
        })
    };
    assert!(eventually(Duration::from_secs(5), || {
        client.stats().waiting_threads == 1 && client.stats().subscriptions == 1
    }));
    await_parked(&mut admin, base);
    let released = Instant::now();
    release(&mut admin, &name);
    let (woken, token) = join_all(vec![waiting], Duration::from_secs(30), "writer").remove(0);
    assert!(token.is_some(), "the write was taken");
    assert!(
        woken - released < Duration::from_millis(800),
        "woken {:?} after the release, with 30 s of lease left",
        woken - released
    );
}

#[test]
fn a_java_final_read_unlock_wakes_our_writer() {
    writer_woken_by(
        |admin, name| assert_eq!(java_read_unlocks(admin, name, JAVA), Some(1)),
        |admin, name| java_reads(admin, name, JAVA, 30_000),
    );
}

#[test]
fn a_java_write_unlock_wakes_our_writer() {
    writer_woken_by(
        |admin, name| java_write_unlocks(admin, name, JAVA),
        |admin, name| java_writes(admin, name, JAVA),
    );
}

#[test]
fn readers_enter_while_a_writer_waits_and_a_reader_asking_to_write_would_deadlock() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (redisson(&server), redisson(&server));
    let name = unique("nopref");
    java_reads(&mut admin, &name, JAVA, 30_000);
    let waiting = {
        let lock = a.read_write_lock(&name);
        thread::spawn(move || {
            lock.try_write(Duration::from_secs(3), None)
                .unwrap()
                .is_some()
        })
    };
    assert!(eventually(Duration::from_secs(5), || a
        .stats()
        .waiting_threads
        == 1));
    // Redisson's rule: no writer preference.
    let lock = b.read_write_lock(&name);
    let read = lock
        .try_read(Duration::ZERO, None)
        .unwrap()
        .expect("no writer preference");
    // Ours: a reader asking to write is refused at once, waiting or not.
    let started = Instant::now();
    for wait in [Duration::ZERO, Duration::from_secs(10)] {
        match lock.try_write(wait, None) {
            Err(Error::WouldDeadlock { name: n }) => assert_eq!(n, name),
            other => panic!("expected WouldDeadlock, got {other:?}"),
        }
    }
    assert!(matches!(lock.write(), Err(Error::WouldDeadlock { .. })));
    assert!(started.elapsed() < Duration::from_secs(2));
    drop(read);
    assert!(!join_all(vec![waiting], Duration::from_secs(10), "writer").remove(0));
}

#[test]
fn the_watchdog_keeps_every_read_timeout_key_and_the_write_alive() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = with_watchdog(&server, Duration::from_millis(900));
    let name = unique("renewed");
    let lock = client.read_write_lock(&name);
    let me = client.current_thread_owner_id();
    let read = lock.read().unwrap();
    let again = lock.read().unwrap();
    thread::sleep(Duration::from_millis(2_000));
    assert!(!read.is_lost() && !again.is_lost());
    for k in [1, 2] {
        let left = pttl(&mut admin, &timeout_key(&name, &me, k));
        assert!(left > 0, "timeout key {k} renewed: {left}");
    }
    assert!(pttl(&mut admin, &name) > 0);
    // A Java read unlock finds our reader alive through its keys, long after their first
    // lease.
    java_reads(&mut admin, &name, JAVA, 30_000);
    assert_eq!(java_read_unlocks(&mut admin, &name, JAVA), Some(0));
    assert_eq!(hash(&mut admin, &name)[&me], "2");
    drop(again);
    drop(read);
    assert!(!exists(&mut admin, &name));

    let write = lock.write().unwrap();
    thread::sleep(Duration::from_millis(2_000));
    assert!(!write.is_lost());
    assert!(pttl(&mut admin, &name) > 0);
    write.unlock().unwrap();
}

#[test]
fn a_read_whose_keys_are_gone_is_reported_lost_as_a_read() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let lost = Arc::new(Mutex::new(Vec::<LostLock>::new()));
    let client = {
        let lost = lost.clone();
        Client::builder(&server.url())
            .layout(Layout::Redisson)
            .watchdog_timeout(Duration::from_millis(900))
            .on_lock_lost(move |l| lost.lock().unwrap().push(l.clone()))
            .build()
            .unwrap()
    };
    let name = unique("gone");
    let lock = client.read_write_lock(&name);
    let me = client.current_thread_owner_id();
    let read = lock.read().unwrap();
    // What a Java read unlock leaves of a reader without live timeout keys: nothing.
    let _: () = redis::cmd("DEL")
        .arg(&name)
        .arg(timeout_key(&name, &me, 1))
        .query(&mut admin)
        .unwrap();
    assert!(eventually(Duration::from_secs(3), || read.is_lost()));
    assert!(eventually(Duration::from_secs(3), || !lost
        .lock()
        .unwrap()
        .is_empty()));
    let reported = lost.lock().unwrap()[0].clone();
    assert_eq!(
        (reported.name.as_str(), reported.kind),
        (name.as_str(), HoldKind::Read)
    );
    assert!(matches!(read.unlock(), Err(Error::LockLost { .. })));
}

// The Java side of the permit-expirable semaphore (Redisson's format).

/// A permit a Java service took: the count down by one, its 16-byte id in the zset scored by
/// its lease end.
fn java_takes_permit(admin: &mut redis::Connection, name: &str, id: &[u8; 16], ends: i64) {
    let _: () = redis::pipe()
        .cmd("DECRBY")
        .arg(name)
        .arg(1)
        .cmd("ZADD")
        .arg(format!("{{{name}}}:timeout"))
        .arg(ends)
        .arg(&id[..])
        .query(admin)
        .unwrap();
}

/// Java's tryRelease(id): remove it, count it back, publish the new count.
const JAVA_RELEASE: &str = r"
if redis.call('zrem', KEYS[3], ARGV[1]) == 0 then
  return 0
end
local v = redis.call('incrby', KEYS[1], 1)
redis.call('publish', KEYS[2], v)
return 1
";

fn java_releases_permit(admin: &mut redis::Connection, name: &str, id: &[u8; 16]) {
    let released: i64 = redis::Script::new(JAVA_RELEASE)
        .key(name)
        .key(format!("redisson_sc:{{{name}}}"))
        .key(format!("{{{name}}}:timeout"))
        .arg(&id[..])
        .invoke(admin)
        .unwrap();
    assert_eq!(released, 1);
}

fn permits_held(admin: &mut redis::Connection, name: &str) -> Vec<(Vec<u8>, f64)> {
    redis::cmd("ZRANGE")
        .arg(format!("{{{name}}}:timeout"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(admin)
        .unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn permits_are_redissons_ids_and_scores_with_counts_published() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("sem");
    let mut listener = support::jvm::Listener::new(
        &server.url(),
        &format!("redisson_sc:{{{name}}}"),
        support::jvm::Publish::Plain,
    );
    let wait = Duration::from_secs(5);
    let semaphore = client.semaphore(&name);
    semaphore.set_permits(3).unwrap();
    assert_eq!(get(&mut admin, &name).as_deref(), Some("3"));
    assert_eq!(
        listener.next(wait).as_deref(),
        Some("3"),
        "setPermits publishes the total"
    );

    let before = now_ms();
    let two = semaphore.acquire(2).unwrap();
    assert_eq!(get(&mut admin, &name).as_deref(), Some("1"));
    let held = permits_held(&mut admin, &name);
    assert_eq!(held.len(), 2);
    for (id, score) in &held {
        assert_eq!(id.len(), 16, "raw 16-byte ids");
        let ends = *score as i64;
        assert!(
            (before + 30_000..=now_ms() + 30_000).contains(&ends),
            "a watchdog permit ends a watchdog timeout from now: {ends}"
        );
    }
    let mut ids: Vec<String> = held.iter().map(|(id, _)| hex(id)).collect();
    let mut owned: Vec<String> = two.owner_id().split(',').map(String::from).collect();
    ids.sort();
    owned.sort();
    assert_eq!(
        owned, ids,
        "the owner id is the permit ids, as Java shows them"
    );
    let token_key = format!("redisson_lock_token:{{{name}}}");
    let counter: u64 = get(&mut admin, &token_key).unwrap().parse().unwrap();
    assert_eq!(two.fencing_token(), counter);
    assert_eq!(semaphore.available().unwrap(), 1);

    // A fixed lease: its end by this client's clock; tokens rise.
    let before = now_ms();
    let one = semaphore
        .try_acquire(1, Duration::ZERO, Some(Duration::from_secs(10)))
        .unwrap()
        .unwrap();
    assert!(one.fencing_token() > two.fencing_token());
    let held = permits_held(&mut admin, &name);
    let (_, score) = held
        .iter()
        .find(|(id, _)| hex(id) == one.owner_id())
        .unwrap();
    assert!((before + 10_000..=now_ms() + 10_000).contains(&(*score as i64)));
    assert_eq!(semaphore.available().unwrap(), 0);
    assert_eq!(get(&mut admin, &name).as_deref(), Some("0"));

    // setPermits counts what is held: a total of 5 with 3 held leaves 2 free.
    semaphore.set_permits(5).unwrap();
    assert_eq!(listener.next(wait).as_deref(), Some("5"));
    assert_eq!(get(&mut admin, &name).as_deref(), Some("2"));
    semaphore.set_permits(5).unwrap();

    // A release publishes the new count.
    two.release().unwrap();
    assert_eq!(listener.next(wait).as_deref(), Some("4"));
    assert_eq!(get(&mut admin, &name).as_deref(), Some("4"));
    drop(one);
    assert_eq!(listener.next(wait).as_deref(), Some("5"));
    assert_eq!(permits_held(&mut admin, &name), vec![]);
    assert_eq!(
        listener.next(Duration::from_millis(300)),
        None,
        "nothing else"
    );
}

#[test]
fn a_java_release_wakes_our_waiter() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("semwait");
    let semaphore = client.semaphore(&name);
    semaphore.set_permits(1).unwrap();
    let id = *b"java-permit-id16";
    java_takes_permit(&mut admin, &name, &id, now_ms() + 60_000);
    assert!(
        semaphore
            .try_acquire(1, Duration::ZERO, None)
            .unwrap()
            .is_none()
    );
    let base = command_calls(&mut admin, "evalsha");
    let waiting = {
        let semaphore = semaphore.clone();
        thread::spawn(move || {
            let permits = semaphore
                .try_acquire(1, Duration::from_secs(20), None)
                .unwrap();
            (Instant::now(), permits.is_some())
        })
    };
    assert!(eventually(Duration::from_secs(5), || {
        client.stats().waiting_threads == 1 && client.stats().subscriptions == 1
    }));
    await_parked(&mut admin, base);
    let released = Instant::now();
    java_releases_permit(&mut admin, &name, &id);
    let (woken, got) = join_all(vec![waiting], Duration::from_secs(30), "waiter").remove(0);
    assert!(got);
    assert!(
        woken - released < Duration::from_millis(800),
        "woken {:?} after the release, with 60 s of lease left",
        woken - released
    );
}

#[test]
fn an_expired_java_permit_is_reclaimed_and_our_waiter_sleeps_only_until_its_end() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("reclaim");
    let semaphore = client.semaphore(&name);
    semaphore.set_permits(1).unwrap();
    let mut listener = support::jvm::Listener::new(
        &server.url(),
        &format!("redisson_sc:{{{name}}}"),
        support::jvm::Publish::Plain,
    );
    // Ended a second ago: availablePermits gives it back, and says so.
    java_takes_permit(&mut admin, &name, b"expired-permit!!", now_ms() - 1_000);
    assert_eq!(get(&mut admin, &name).as_deref(), Some("0"));
    assert_eq!(semaphore.available().unwrap(), 1);
    assert_eq!(permits_held(&mut admin, &name), vec![]);
    assert_eq!(listener.next(Duration::from_secs(5)).as_deref(), Some("1"));

    // Ends in 700 ms, and nobody publishes: a waiter tries again at its end.
    java_takes_permit(&mut admin, &name, b"ends-soon-permit", now_ms() + 700);
    let started = Instant::now();
    let permits = semaphore
        .try_acquire(1, Duration::from_secs(10), None)
        .unwrap();
    assert!(permits.is_some());
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(2_500),
        "{took:?}"
    );
}

#[test]
fn the_watchdog_moves_a_permits_lease_end() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = with_watchdog(&server, Duration::from_millis(900));
    let name = unique("semrenew");
    let semaphore = client.semaphore(&name);
    semaphore.set_permits(1).unwrap();
    let permits = semaphore.acquire(1).unwrap();
    let first = permits_held(&mut admin, &name)[0].1;
    thread::sleep(Duration::from_millis(2_000));
    assert!(!permits.is_lost());
    let later = permits_held(&mut admin, &name)[0].1;
    assert!(later > first + 1_000.0, "renewed: {first} -> {later}");
    assert!(later as i64 > now_ms(), "still in the future");
    // Another client sees it held: nothing reclaimed.
    assert_eq!(redisson(&server).semaphore(&name).available().unwrap(), 0);
    permits.release().unwrap();
    assert_eq!(semaphore.available().unwrap(), 1);
}

#[test]
fn a_request_above_the_total_waits_and_the_counts_are_checked() {
    let server = RedisServer::start();
    let client = redisson(&server);
    let semaphore = client.semaphore(&unique("above"));
    semaphore.set_permits(2).unwrap();
    let started = Instant::now();
    let got = semaphore
        .try_acquire(3, Duration::from_millis(300), None)
        .unwrap();
    assert!(got.is_none());
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(matches!(
        semaphore.try_acquire(0, Duration::ZERO, None),
        Err(Error::InvalidArgument(_))
    ));
    match semaphore.try_acquire(65_537, Duration::ZERO, None) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("65,536"), "{why}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(semaphore.available().unwrap(), 2);
}

#[test]
fn keys_of_another_type_are_wrong_type_and_left_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);

    // A read-write lock over a string.
    let name = unique("string");
    let _: () = redis::cmd("SET")
        .arg(&name)
        .arg("data")
        .query(&mut admin)
        .unwrap();
    let lock = client.read_write_lock(&name);
    for attempt in [
        lock.try_read(Duration::ZERO, None).map(|g| g.is_some()),
        lock.try_write(Duration::ZERO, None).map(|g| g.is_some()),
    ] {
        match attempt {
            Err(Error::WrongType { key }) => assert_eq!(key, name),
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
    assert_eq!(get(&mut admin, &name).as_deref(), Some("data"));

    // A write whose token counter is not a number: refused before anything is written.
    let other = unique("badtoken");
    let token_key = format!("redisson_lock_token:{{{other}}}");
    let _: () = redis::cmd("SET")
        .arg(&token_key)
        .arg("x")
        .query(&mut admin)
        .unwrap();
    for attempt in [
        client
            .read_write_lock(&other)
            .try_write(Duration::ZERO, None)
            .map(|g| g.is_some()),
        client
            .read_write_lock(&other)
            .try_read(Duration::ZERO, None)
            .map(|g| g.is_some()),
    ] {
        match attempt {
            Err(Error::WrongType { key }) => assert_eq!(key, token_key),
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
    assert!(!exists(&mut admin, &other));

    // A semaphore over a hash, and one whose permit zset is a string.
    let hashed = unique("hash");
    let _: () = redis::cmd("HSET")
        .arg(&hashed)
        .arg("a")
        .arg("b")
        .query(&mut admin)
        .unwrap();
    let semaphore = client.semaphore(&hashed);
    let results = [
        semaphore.set_permits(3).map(|_| ()),
        semaphore.available().map(|_| ()),
        semaphore.try_acquire(1, Duration::ZERO, None).map(|_| ()),
    ];
    for result in results {
        match result {
            Err(Error::WrongType { key }) => assert_eq!(key, hashed),
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
    assert_eq!(
        hash(&mut admin, &hashed),
        HashMap::from([("a".into(), "b".into())])
    );
    let zsetless = unique("zset");
    let zset = format!("{{{zsetless}}}:timeout");
    let _: () = redis::cmd("SET")
        .arg(&zset)
        .arg("x")
        .query(&mut admin)
        .unwrap();
    match client.semaphore(&zsetless).set_permits(1) {
        Err(Error::WrongType { key }) => assert_eq!(key, zset),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert!(!exists(&mut admin, &zsetless));
    assert_eq!(get(&mut admin, &zset).as_deref(), Some("x"));
}

#[test]
fn two_redlatch_clients_share_a_semaphore_and_wake_each_other() {
    let server = RedisServer::start();
    let (a, b) = (redisson(&server), redisson(&server));
    let name = unique("semours");
    a.semaphore(&name).set_permits(1).unwrap();
    let held = a.semaphore(&name).acquire(1).unwrap();
    let mut admin = server.admin();
    let base = command_calls(&mut admin, "evalsha");
    let waiting = {
        let semaphore = b.semaphore(&name);
        thread::spawn(move || {
            let permits = semaphore
                .try_acquire(1, Duration::from_secs(20), None)
                .unwrap();
            (Instant::now(), permits.map(|p| p.fencing_token()))
        })
    };
    assert!(eventually(Duration::from_secs(5), || b
        .stats()
        .waiting_threads
        == 1));
    await_parked(&mut admin, base);
    let first = held.fencing_token();
    let released = Instant::now();
    // Permits are Send: given back from another thread.
    thread::spawn(move || held.release().unwrap())
        .join()
        .unwrap();
    let (woken, token) = join_all(vec![waiting], Duration::from_secs(30), "waiter").remove(0);
    assert!(token.unwrap() > first);
    assert!(woken - released < Duration::from_millis(800));
}

// A lock and a read-write lock of one name. Redisson keeps both in the hash `name`: a
// read-write lock's always has a `mode` field, a lock's (plain, fair, spin) never has one.
// Ours takes the other kind's hash for what it is: `WrongType` on `name`, with nothing
// written, whatever fields it has, the caller's own thread's included (a reader's field is
// named as a lock holder's: `<client id>:<thread>`).

/// A Java service's lock, by hand (Redisson's format): `{field: 1}` with a PX lease.
fn java_locks(admin: &mut redis::Connection, name: &str, field: &str, lease_ms: u64) {
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(name)
        .arg(field)
        .arg(1)
        .cmd("PEXPIRE")
        .arg(name)
        .arg(lease_ms)
        .query(admin)
        .unwrap();
}

/// Replaces `name`, in one step, with a hash of `fields` and a lease of `lease_ms`: what a
/// hold of one kind finds when it was lost and a hold of the other kind by the same thread
/// took the name.
fn replace_hash(admin: &mut redis::Connection, name: &str, fields: &[(&str, &str)], lease_ms: u64) {
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("DEL").arg(name).ignore();
    for (field, value) in fields {
        pipe.cmd("HSET").arg(name).arg(field).arg(value).ignore();
    }
    let _: () = pipe
        .cmd("PEXPIRE")
        .arg(name)
        .arg(lease_ms)
        .ignore()
        .query(admin)
        .unwrap();
}

/// What the server holds: every key with its type and content (a hash's fields sorted), and
/// the PTTL of `name`.
struct Snapshot {
    keys: Vec<(String, String)>,
    pttl: i64,
}

fn snapshot(admin: &mut redis::Connection, name: &str) -> Snapshot {
    let mut names: Vec<String> = redis::cmd("KEYS").arg("*").query(admin).unwrap();
    names.sort();
    let keys = names
        .into_iter()
        .map(|key| {
            let kind: String = redis::cmd("TYPE").arg(&key).query(admin).unwrap();
            let content = match kind.as_str() {
                "hash" => {
                    let mut fields: Vec<_> = hash(admin, &key).into_iter().collect();
                    fields.sort();
                    format!("hash {fields:?}")
                }
                "string" => format!("string {:?}", get(admin, &key)),
                other => other.to_string(),
            };
            (key, content)
        })
        .collect();
    Snapshot {
        keys,
        pttl: pttl(admin, name),
    }
}

/// Nothing was written since `before`: the same keys with the same content, and `name`'s
/// lease only ran down (a join or a re-entry would have set it to the attempt's longer one).
fn assert_untouched(admin: &mut redis::Connection, name: &str, before: &Snapshot, what: &str) {
    let after = snapshot(admin, name);
    assert_eq!(after.keys, before.keys, "{what}: the data changed");
    assert!(
        after.pttl > 0 && after.pttl <= before.pttl,
        "{what}: PTTL {} -> {}",
        before.pttl,
        after.pttl
    );
}

fn assert_wrong_type<T: std::fmt::Debug>(result: redlatch::Result<T>, name: &str, what: &str) {
    match result {
        Err(Error::WrongType { key }) => assert_eq!(key, name, "{what}"),
        other => panic!("{what}: expected WrongType on {name:?}, got {other:?}"),
    }
}

/// What each attempt answered (`true`: it took the object), by what it was.
type Attempts = Vec<(&'static str, redlatch::Result<bool>)>;

/// A lease longer than the holders' (20 s): an attempt that wrote would have lengthened it.
const LONGER: Option<Duration> = Some(Duration::from_secs(40));
const HELD_FOR: Option<Duration> = Some(Duration::from_secs(20));

/// Our read and write attempts on `name`, at once and with a wait (which must not be waited
/// out: the refusal comes with the first attempt).
fn rw_attempts(client: &Client, name: &str) -> Attempts {
    let rw = client.read_write_lock(name);
    let wait = Duration::from_secs(3);
    let timed = |result: redlatch::Result<bool>, started: Instant| {
        assert!(started.elapsed() < Duration::from_secs(2), "waited it out");
        result
    };
    let started = Instant::now();
    let read_waiting = timed(rw.try_read(wait, LONGER).map(|g| g.is_some()), started);
    let started = Instant::now();
    let write_waiting = timed(rw.try_write(wait, LONGER).map(|g| g.is_some()), started);
    vec![
        (
            "try_read",
            rw.try_read(Duration::ZERO, LONGER).map(|g| g.is_some()),
        ),
        (
            "try_write",
            rw.try_write(Duration::ZERO, LONGER).map(|g| g.is_some()),
        ),
        ("try_read with a wait", read_waiting),
        ("try_write with a wait", write_waiting),
    ]
}

/// Our lock, fair lock, spin lock and multi-lock attempts on `name`, at once and with a
/// wait, and each kind's force-unlock.
fn lock_attempts(client: &Client, name: &str) -> Attempts {
    let wait = Duration::from_secs(3);
    let timed = |result: redlatch::Result<bool>, started: Instant| {
        assert!(started.elapsed() < Duration::from_secs(2), "waited it out");
        result
    };
    let (lock, fair, spin) = (
        client.lock(name),
        client.fair_lock(name),
        client.spin_lock(name),
    );
    let other = format!("{name}-other");
    let mut attempts = vec![
        (
            "lock",
            lock.try_lock(Duration::ZERO, LONGER).map(|g| g.is_some()),
        ),
        (
            "fair_lock",
            fair.try_lock(Duration::ZERO, LONGER).map(|g| g.is_some()),
        ),
        (
            "spin_lock",
            spin.try_lock(Duration::ZERO, LONGER).map(|g| g.is_some()),
        ),
        (
            "multi_lock",
            client
                .multi_lock(&[&other, name])
                .try_lock(Duration::ZERO, LONGER)
                .map(|g| g.is_some()),
        ),
        ("lock's force_unlock", lock.force_unlock()),
        ("fair_lock's force_unlock", fair.force_unlock()),
        ("spin_lock's force_unlock", spin.force_unlock()),
    ];
    for (what, handle) in [
        ("lock with a wait", &lock),
        ("fair_lock with a wait", &fair),
    ] {
        let started = Instant::now();
        let result = handle.try_lock(wait, LONGER).map(|g| g.is_some());
        attempts.push((what, timed(result, started)));
    }
    let started = Instant::now();
    let result = spin.try_lock(wait, LONGER).map(|g| g.is_some());
    attempts.push(("spin_lock with a wait", timed(result, started)));
    attempts
}

/// `attempts` made by the calling thread (whose fields the object may hold: a reader's is
/// named as a lock holder's) and by another thread of `client`: each refused with WrongType
/// on `name`, and nothing written. Those named in `refused_here` the calling thread's client
/// may refuse before sending anything (any error): it keeps its holds by key and owner, so
/// it takes this thread's hold of the other kind for one of the attempt's (a lock's for a
/// read, which may not ask to write; a read's for the lock, which a multi-lock does not
/// re-enter).
fn refused(
    admin: &mut redis::Connection,
    client: &Client,
    name: &str,
    attempts: fn(&Client, &str) -> Attempts,
    refused_here: &[&str],
    whose: &str,
) {
    let before = snapshot(admin, name);
    let other = {
        let (client, name) = (client.clone(), name.to_string());
        thread::spawn(move || {
            attempts(&client, &name)
                .into_iter()
                .map(|(what, result)| (what, result.map_err(|e| format!("{e:?}"))))
                .collect::<Vec<_>>()
        })
    };
    for (what, result) in attempts(client, name) {
        let what = format!("{whose}, the same thread: {what}");
        if refused_here.iter().any(|here| what.ends_with(here)) {
            assert!(result.is_err(), "{what}: {result:?}");
        } else {
            assert_wrong_type(result, name, &what);
        }
    }
    for (what, result) in join_all(vec![other], Duration::from_secs(60), "attempts").remove(0) {
        let what = format!("{whose}, another thread: {what}");
        match result {
            Err(e) => assert!(
                e.starts_with("WrongType") && e.contains(&format!("{name:?}")),
                "{what}: {e}"
            ),
            Ok(got) => panic!("{what}: expected WrongType on {name:?}, got Ok({got})"),
        }
    }
    assert_untouched(admin, name, &before, whose);
}

#[test]
fn a_read_write_lock_refuses_a_locks_hash_and_leaves_it_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let here = ["try_write", "try_write with a wait"];

    // Ours: this thread holds the lock; it and another thread read and write.
    let name = unique("dup");
    let held = client
        .lock(&name)
        .try_lock(Duration::ZERO, HELD_FOR)
        .unwrap()
        .unwrap();
    refused(&mut admin, &client, &name, rw_attempts, &here, "our lock");
    held.check().unwrap();
    held.unlock().unwrap();
    assert!(!exists(&mut admin, &name), "the lock's release freed it");

    // The same over a fair lock's hold (the same hash).
    let fair = client
        .fair_lock(&name)
        .try_lock(Duration::ZERO, HELD_FOR)
        .unwrap()
        .unwrap();
    refused(
        &mut admin,
        &client,
        &name,
        rw_attempts,
        &here,
        "our fair lock",
    );
    fair.check().unwrap();
    fair.unlock().unwrap();
    assert!(!exists(&mut admin, &name));

    // A Java service's lock, written by hand.
    let name = unique("dup");
    java_locks(&mut admin, &name, JAVA, 20_000);
    refused(&mut admin, &client, &name, rw_attempts, &[], "a Java lock");
    assert_eq!(
        hash(&mut admin, &name),
        HashMap::from([(JAVA.to_string(), "1".to_string())])
    );
}

#[test]
fn a_lock_refuses_a_read_write_locks_hash_and_leaves_it_alone() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let here = ["multi_lock"];
    let name = unique("dup");
    let rw = client.read_write_lock(&name);

    // Ours: this thread reads, then writes; it and another thread lock and force-unlock.
    let read = rw.try_read(Duration::ZERO, HELD_FOR).unwrap().unwrap();
    refused(&mut admin, &client, &name, lock_attempts, &here, "our read");
    read.check().unwrap();
    read.unlock().unwrap();
    assert!(!exists(&mut admin, &name), "the read's release freed it");
    let write = rw.try_write(Duration::ZERO, HELD_FOR).unwrap().unwrap();
    refused(&mut admin, &client, &name, lock_attempts, &[], "our write");
    write.check().unwrap();
    write.unlock().unwrap();
    assert!(!exists(&mut admin, &name));

    // Java's read and write, written by hand (Redisson's format).
    java_reads(&mut admin, &name, JAVA, 20_000);
    refused(
        &mut admin,
        &client,
        &name,
        lock_attempts,
        &[],
        "a Java read",
    );
    assert_eq!(java_read_unlocks(&mut admin, &name, JAVA), Some(1));
    java_writes(&mut admin, &name, JAVA);
    refused(
        &mut admin,
        &client,
        &name,
        lock_attempts,
        &[],
        "a Java write",
    );
    java_write_unlocks(&mut admin, &name, JAVA);
    assert!(!exists(&mut admin, &name));
}

#[test]
fn a_lock_hold_never_releases_re_enters_or_renews_a_read_of_its_thread_on_its_name() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let me = client.current_thread_owner_id();

    // The lock was lost, and a read of the same thread took the name: the lock's re-entry
    // and release find a field named as theirs, in a read-write lock's hash.
    let name = unique("taken");
    let guard = client
        .lock(&name)
        .try_lock(Duration::ZERO, HELD_FOR)
        .unwrap()
        .unwrap();
    replace_hash(&mut admin, &name, &[("mode", "read"), (&me, "1")], 20_000);
    let before = snapshot(&mut admin, &name);
    assert_wrong_type(
        client
            .lock(&name)
            .try_lock(Duration::ZERO, LONGER)
            .map(|g| g.is_some()),
        &name,
        "the lock's re-entry",
    );
    assert_untouched(&mut admin, &name, &before, "the lock's re-entry");
    assert_wrong_type(guard.unlock(), &name, "the lock's release");
    assert_untouched(&mut admin, &name, &before, "the lock's release");

    // The same for a fair lock's hold.
    let name = unique("taken");
    let fair = client.fair_lock(&name);
    let guard = fair.try_lock(Duration::ZERO, HELD_FOR).unwrap().unwrap();
    replace_hash(&mut admin, &name, &[("mode", "read"), (&me, "1")], 20_000);
    let before = snapshot(&mut admin, &name);
    assert_wrong_type(
        fair.try_lock(Duration::ZERO, LONGER).map(|g| g.is_some()),
        &name,
        "the fair lock's re-entry",
    );
    assert_wrong_type(guard.unlock(), &name, "the fair lock's release");
    assert_untouched(
        &mut admin,
        &name,
        &before,
        "the fair lock's re-entry and release",
    );

    // The same where the release would hand the lock to a waiting thread of its client (one
    // script moves the hold to the waiter's field).
    let name = unique("handed");
    let lock = client.lock(&name);
    let guard = lock.try_lock(Duration::ZERO, HELD_FOR).unwrap().unwrap();
    let base = command_calls(&mut admin, "evalsha");
    let waiter = {
        let lock = lock.clone();
        thread::spawn(move || {
            lock.try_lock(Duration::from_secs(3), None)
                .map(|g| g.is_some())
                .map_err(|e| format!("{e:?}"))
        })
    };
    assert!(eventually(Duration::from_secs(5), || client
        .stats()
        .waiting_threads
        == 1));
    await_parked(&mut admin, base);
    replace_hash(&mut admin, &name, &[("mode", "read"), (&me, "1")], 20_000);
    let before = snapshot(&mut admin, &name);
    assert_wrong_type(guard.unlock(), &name, "the lock's release to a waiter");
    assert_untouched(&mut admin, &name, &before, "the lock's release to a waiter");
    match join_all(vec![waiter], Duration::from_secs(30), "waiter").remove(0) {
        Ok(false) => {}
        Err(e) => assert!(e.starts_with("WrongType"), "the waiter: {e}"),
        Ok(true) => panic!("the waiter took a read-write lock's hash for its lock"),
    }
    assert_untouched(&mut admin, &name, &before, "the waiter's last attempt");

    // The watchdog of such a lock reports it lost and extends nothing.
    let watched = with_watchdog(&server, Duration::from_millis(900));
    let name = unique("renewed");
    let guard = watched.lock(&name).lock().unwrap();
    let owner = guard.owner_id().to_string();
    replace_hash(&mut admin, &name, &[("mode", "read"), (&owner, "1")], 600);
    assert!(
        eventually(Duration::from_secs(5), || guard.is_lost()),
        "a renewal took the read for the lock"
    );
    assert!(
        pttl(&mut admin, &name) <= 600,
        "the read's lease was extended"
    );
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
}

#[test]
fn a_read_or_write_hold_never_releases_re_enters_or_renews_a_lock_of_its_thread_on_its_name() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let me = client.current_thread_owner_id();
    let rw = |name: &str| client.read_write_lock(name);

    // The read was lost, and a lock of the same thread took the name.
    let name = unique("taken");
    let read = rw(&name)
        .try_read(Duration::ZERO, HELD_FOR)
        .unwrap()
        .unwrap();
    replace_hash(&mut admin, &name, &[(&me, "1")], 20_000);
    let before = snapshot(&mut admin, &name);
    assert_wrong_type(
        rw(&name)
            .try_read(Duration::ZERO, LONGER)
            .map(|g| g.is_some()),
        &name,
        "the read's re-entry",
    );
    assert_untouched(&mut admin, &name, &before, "the read's re-entry");
    assert_wrong_type(read.unlock(), &name, "the read's release");
    assert_untouched(&mut admin, &name, &before, "the read's release");

    // The same for a write.
    let name = unique("taken");
    let write = rw(&name)
        .try_write(Duration::ZERO, HELD_FOR)
        .unwrap()
        .unwrap();
    replace_hash(&mut admin, &name, &[(&me, "1")], 20_000);
    let before = snapshot(&mut admin, &name);
    assert_wrong_type(
        rw(&name)
            .try_write(Duration::ZERO, LONGER)
            .map(|g| g.is_some()),
        &name,
        "the write's re-entry",
    );
    assert_wrong_type(write.unlock(), &name, "the write's release");
    assert_untouched(
        &mut admin,
        &name,
        &before,
        "the write's re-entry and release",
    );

    // The watchdog of such a read reports it lost and extends nothing, though the read's
    // timeout key still lives.
    let watched = with_watchdog(&server, Duration::from_millis(900));
    let name = unique("renewed");
    let read = watched.read_write_lock(&name).read().unwrap();
    let owner = read.owner_id().to_string();
    replace_hash(&mut admin, &name, &[(&owner, "1")], 600);
    assert!(
        eventually(Duration::from_secs(5), || read.is_lost()),
        "a renewal took the lock for the read"
    );
    assert!(
        pttl(&mut admin, &name) <= 600,
        "the lock's lease was extended"
    );
}

#[test]
fn semaphore_administration_writes_and_publishes_what_java_does() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("semadmin");
    let mut listener = support::jvm::Listener::new(
        &server.url(),
        &format!("redisson_sc:{{{name}}}"),
        support::jvm::Publish::Plain,
    );
    let wait = Duration::from_secs(5);
    let quiet = Duration::from_millis(200);
    let semaphore = client.semaphore(&name);
    assert_eq!(
        (semaphore.permits().unwrap(), semaphore.acquired().unwrap()),
        (0, 0)
    );
    assert!(semaphore.try_set_permits(2).unwrap());
    assert_eq!(get(&mut admin, &name).as_deref(), Some("2"));
    assert_eq!(
        listener.next(wait).as_deref(),
        Some("2"),
        "trySetPermits publishes it"
    );
    assert!(!semaphore.try_set_permits(7).unwrap());
    assert_eq!(
        get(&mut admin, &name).as_deref(),
        Some("2"),
        "left as it was"
    );
    assert_eq!(listener.next(quiet), None, "and nothing published");

    // One permit ours, one Java's: both count as held.
    let ours = semaphore.acquire(1).unwrap();
    java_takes_permit(&mut admin, &name, b"java-admin-perm1", now_ms() + 60_000);
    assert_eq!(
        (semaphore.permits().unwrap(), semaphore.acquired().unwrap()),
        (2, 2)
    );

    // Up: the count moves by the delta, and the delta is published (Java's addPermits).
    assert_eq!(semaphore.add_permits(3).unwrap(), 5);
    assert_eq!(get(&mut admin, &name).as_deref(), Some("3"));
    assert_eq!(listener.next(wait).as_deref(), Some("3"));
    assert_eq!(semaphore.available().unwrap(), 3);
    // Down below what is held: the count goes below 0 as Java's does, nothing published,
    // and the holders keep theirs.
    assert_eq!(semaphore.add_permits(-4).unwrap(), 1);
    assert_eq!(get(&mut admin, &name).as_deref(), Some("-1"));
    assert_eq!(listener.next(quiet), None, "a shrink publishes nothing");
    assert_eq!(
        (semaphore.permits().unwrap(), semaphore.acquired().unwrap()),
        (1, 2)
    );
    assert_eq!(semaphore.available().unwrap(), 0);
    ours.check().unwrap();
    assert_eq!(permits_held(&mut admin, &name).len(), 2);
    // A total below 0 is refused, with nothing written.
    assert!(matches!(
        semaphore.add_permits(-2),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        semaphore.add_permits(i64::MIN),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        semaphore.add_permits(i64::from(u32::MAX)),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(get(&mut admin, &name).as_deref(), Some("-1"));
    drop(ours);
    java_releases_permit(&mut admin, &name, b"java-admin-perm1");
    assert_eq!(
        (semaphore.permits().unwrap(), semaphore.acquired().unwrap()),
        (1, 0)
    );
    assert_eq!(semaphore.available().unwrap(), 1);

    // getPermits and acquiredPermits give back an ended lease first.
    java_takes_permit(&mut admin, &name, b"java-ended-perm1", now_ms() - 1_000);
    assert_eq!(semaphore.acquired().unwrap(), 0);
    assert_eq!(permits_held(&mut admin, &name), vec![]);
    assert_eq!(get(&mut admin, &name).as_deref(), Some("1"));

    // Foreign data: WrongType, left alone.
    let hashed = unique("semadminhash");
    let _: () = redis::cmd("HSET")
        .arg(&hashed)
        .arg("a")
        .arg("b")
        .query(&mut admin)
        .unwrap();
    let semaphore = client.semaphore(&hashed);
    for result in [
        semaphore.try_set_permits(3).map(drop),
        semaphore.add_permits(1).map(drop),
        semaphore.permits().map(drop),
        semaphore.acquired().map(drop),
    ] {
        match result {
            Err(Error::WrongType { key }) => assert_eq!(key, hashed),
            other => panic!("expected WrongType, got {other:?}"),
        }
    }
    assert_eq!(
        hash(&mut admin, &hashed),
        HashMap::from([("a".into(), "b".into())])
    );
}

#[test]
fn adding_permits_wakes_our_waiter_at_once() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let (a, b) = (redisson(&server), redisson(&server));
    let name = unique("semaddwake");
    let semaphore = a.semaphore(&name);
    assert!(semaphore.try_set_permits(1).unwrap());
    // Held by Java for a minute: only the raise can wake the waiter.
    java_takes_permit(&mut admin, &name, b"java-holds-long!", now_ms() + 60_000);
    let base = command_calls(&mut admin, "evalsha");
    let waiting = {
        let semaphore = b.semaphore(&name);
        thread::spawn(move || {
            let permits = semaphore
                .try_acquire(2, Duration::from_secs(20), None)
                .unwrap();
            (Instant::now(), permits.is_some())
        })
    };
    assert!(eventually(Duration::from_secs(5), || {
        b.stats().waiting_threads == 1 && b.stats().subscriptions == 1
    }));
    await_parked(&mut admin, base);
    let raised = Instant::now();
    assert_eq!(semaphore.add_permits(2).unwrap(), 3);
    let (woken, got) = join_all(vec![waiting], Duration::from_secs(30), "waiter").remove(0);
    assert!(got);
    assert!(
        woken - raised < Duration::from_millis(800),
        "woken {:?} after the raise, with 60 s of lease left",
        woken - raised
    );
    assert_eq!(
        semaphore.acquired().unwrap(),
        1,
        "the waiter gave its two back; Java's is held"
    );
}

#[test]
fn queries_read_java_holds_and_ours() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("rw-queries");
    let lock = client.read_write_lock(&name);
    let state = |l: &redlatch::ReadWriteLock| {
        (
            l.is_locked().unwrap(),
            l.is_write_locked().unwrap(),
            l.read_hold_count().unwrap(),
            l.write_hold_count().unwrap(),
        )
    };
    assert_eq!(state(&lock), (false, false, 0, 0));
    assert_eq!(lock.remaining_ttl().unwrap(), None);
    java_reads(&mut admin, &name, JAVA, 30_000);
    assert_eq!(state(&lock), (true, false, 0, 0));
    let ttl = lock.remaining_ttl().unwrap().unwrap();
    assert!(
        ttl > Duration::from_secs(25) && ttl <= Duration::from_secs(30),
        "{ttl:?}"
    );
    let lease = Some(Duration::from_secs(10));
    let r1 = lock.try_read(Duration::ZERO, lease).unwrap().unwrap();
    let r2 = lock.try_read(Duration::ZERO, lease).unwrap().unwrap();
    assert_eq!(state(&lock), (true, false, 2, 0));
    let other = lock.clone();
    let seen = thread::spawn(move || {
        let _r = other.read().unwrap();
        other.read_hold_count().unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(seen, 1);
    drop((r1, r2));
    assert_eq!(java_read_unlocks(&mut admin, &name, JAVA), Some(1));
    assert_eq!(state(&lock), (false, false, 0, 0));

    java_writes(&mut admin, &name, JAVA);
    assert_eq!(state(&lock), (true, true, 0, 0));
    java_write_unlocks(&mut admin, &name, JAVA);
    let w1 = lock.write().unwrap();
    let w2 = lock.write().unwrap();
    let read = lock.read().unwrap();
    assert_eq!(state(&lock), (true, true, 1, 2));
    drop((w1, w2));
    assert_eq!(state(&lock), (true, false, 1, 0));
    drop(read);
    assert_eq!(state(&lock), (false, false, 0, 0));
}

#[test]
fn force_unlock_frees_java_and_our_readers_their_keys_and_wakes_every_waiter() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let lost = Arc::new(Mutex::new(Vec::<LostLock>::new()));
    let told = |lost: &Arc<Mutex<Vec<LostLock>>>| {
        let lost = lost.clone();
        Client::builder(&server.url())
            .layout(Layout::Redisson)
            .watchdog_timeout(Duration::from_millis(900))
            .on_lock_lost(move |l| lost.lock().unwrap().push(l.clone()))
            .build()
            .unwrap()
    };
    let (a, b, c) = (told(&lost), told(&lost), redisson(&server));
    let name = unique("rw-force");
    let lock = a.read_write_lock(&name);
    assert!(!lock.force_unlock().unwrap(), "nobody held it");
    java_reads(&mut admin, &name, JAVA, 30_000);
    let ours = lock.read().unwrap();
    let theirs = b.read_write_lock(&name).read().unwrap();
    let (me, them) = (a.current_thread_owner_id(), b.current_thread_owner_id());
    assert!(exists(&mut admin, &timeout_key(&name, &me, 1)));
    let mut sub = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut sub = sub.as_pubsub();
    sub.subscribe(format!("redisson_rwlock:{{{name}}}"))
        .unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let writer = {
        let lock = c.read_write_lock(&name);
        thread::spawn(move || {
            let guard = lock.try_write(Duration::from_secs(20), None).unwrap();
            (guard.is_some(), Instant::now())
        })
    };
    assert!(eventually(Duration::from_secs(5), || {
        c.stats().waiting_threads == 1 && c.stats().subscriptions == 1
    }));
    let forced = Instant::now();
    assert!(lock.force_unlock().unwrap());
    let message: String = sub.get_message().unwrap().get_payload().unwrap();
    assert_eq!(message, "1", "Java's waiters all wake");
    let (wrote, at) = writer.join().unwrap();
    assert!(wrote);
    assert!(
        at - forced < Duration::from_secs(2),
        "woken at once, not at lease end"
    );
    for field in [JAVA, me.as_str(), them.as_str()] {
        assert!(
            !exists(&mut admin, &timeout_key(&name, field, 1)),
            "{field}"
        );
    }
    assert!(ours.is_lost() && lock.read_hold_count().unwrap() == 0);
    assert!(eventually(Duration::from_secs(5), || theirs.is_lost()));
    assert!(eventually(Duration::from_secs(5), || lost
        .lock()
        .unwrap()
        .len()
        == 2));
    let causes: Vec<_> = lost.lock().unwrap().iter().map(|l| l.cause).collect();
    assert!(
        causes.contains(&redlatch::LossCause::ForceUnlocked),
        "this client's: {causes:?}"
    );
    drop((ours, theirs));
}

#[test]
fn force_unlock_frees_a_java_writer_and_wakes_our_reader_at_once() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("rw-force-w");
    java_writes(&mut admin, &name, JAVA);
    let lock = client.read_write_lock(&name);
    let reader = {
        let lock = lock.clone();
        thread::spawn(move || {
            let guard = lock.try_read(Duration::from_secs(20), None).unwrap();
            (guard.is_some(), Instant::now())
        })
    };
    assert!(eventually(Duration::from_secs(5), || {
        client.stats().waiting_threads == 1 && client.stats().subscriptions == 1
    }));
    let forced = Instant::now();
    assert!(
        redisson(&server)
            .read_write_lock(&name)
            .force_unlock()
            .unwrap()
    );
    let (read, at) = reader.join().unwrap();
    assert!(read);
    assert!(
        at - forced < Duration::from_secs(2),
        "woken at once, not at lease end"
    );
}

#[test]
fn force_unlock_refuses_a_plain_locks_hash_and_leaves_it() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = redisson(&server);
    let name = unique("rw-force-plain");
    let held = client.lock(&name).lock().unwrap();
    let before = hash(&mut admin, &name);
    let lock = client.read_write_lock(&name);
    assert!(matches!(lock.force_unlock(), Err(Error::WrongType { .. })));
    assert!(matches!(lock.is_locked(), Err(Error::WrongType { .. })));
    assert!(matches!(lock.remaining_ttl(), Err(Error::WrongType { .. })));
    assert_eq!(hash(&mut admin, &name), before);
    assert!(!held.is_lost());
    held.unlock().unwrap();
}
