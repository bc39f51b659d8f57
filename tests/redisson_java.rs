//! redlatch in `Layout::Redisson` beside the real Redisson (`interop/redisson/`'s Java
//! service, `support::java`), both ways, for every kind the layout shares: on one server,
//! under Sentinel and on a Cluster (sharded pub/sub on both sides), and a Redlock over
//! independent masters. The checks `tests/redisson_interop.rs` runs against the emulation run
//! here against Redisson itself (`REDISSON_VERSION`, 4.7.0 unless set; CI runs 3.46.0 too).
//!
//! Wake-ups are measured, not assumed: Redis's `MONITOR` shows every command each side's
//! connections send while their waiter waits, and the time from a release to the other side's
//! acquisition is asserted well under the holder's 30 s lease.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redlatch::{Client, Error, Layout, LossCause};
use support::java::{JavaService, Monitor, NO_LEASE};
use support::jvm::{fair_channel, latch_channel, lock_channel, rw_channel, semaphore_channel};
use support::{eventually, join_all, unique};

/// Our client and a Java service on the same deployment, with what the checks need to watch.
struct Fleet {
    ours: Client,
    java: Arc<JavaService>,
    /// Locks our loss hook reported found gone or taken.
    lost: Arc<AtomicU64>,
    /// Every data node: a port and an admin connection (subscribers may sit on any of them).
    nodes: Vec<(u16, Mutex<redis::Connection>)>,
}

impl Fleet {
    fn new(builder: redlatch::ClientBuilder, java: JavaService, ports: Vec<u16>) -> Fleet {
        let lost = Arc::new(AtomicU64::new(0));
        let counted = lost.clone();
        let ours = builder
            .layout(Layout::Redisson)
            .on_lock_lost(move |lost| {
                if lost.cause == LossCause::FoundGone || lost.cause == LossCause::Taken {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
            })
            .build()
            .unwrap();
        let nodes = ports
            .into_iter()
            .map(|port| {
                let admin = support::topology::connect(port, None).unwrap();
                (port, Mutex::new(admin))
            })
            .collect();
        Fleet {
            ours,
            java: Arc::new(java),
            lost,
            nodes,
        }
    }

    /// Subscribers of `channel` across the deployment, plain and sharded.
    fn subscribers(&self, channel: &str) -> i64 {
        let mut total = 0;
        for (_, admin) in &self.nodes {
            let mut admin = admin.lock();
            for sub in ["NUMSUB", "SHARDNUMSUB"] {
                let reply: Vec<redis::Value> = redis::cmd("PUBSUB")
                    .arg(sub)
                    .arg(channel)
                    .query(&mut *admin)
                    .unwrap_or_default();
                if let Some(redis::Value::Int(n)) = reply.get(1) {
                    total += n;
                }
            }
        }
        total
    }

    /// Waits (at most 10 s) until `channel` has `n` subscribers, then 300 ms for the attempt
    /// a waiter makes after subscribing.
    fn await_parked(&self, channel: &str, n: i64) {
        assert!(
            eventually(Duration::from_secs(10), || self.subscribers(channel) >= n),
            "no waiter subscribed to {channel} in time\n{}",
            self.java.log()
        );
        thread::sleep(Duration::from_millis(300));
    }

    /// Waits (at most 10 s) until Java's waiter has parked, as `monitors` (started before
    /// it began) saw: it subscribed to `channel`, then made its attempt after subscribing.
    /// Only then is its silence worth measuring (under load that attempt can come late).
    fn await_java_parked(&self, monitors: &[Monitor], channel: &str) {
        let parked = || {
            let (java, _) = self.connections();
            let sent: Vec<String> = monitors
                .iter()
                .flat_map(|m| m.commands_from(&java))
                .collect();
            let subscribed = sent
                .iter()
                .position(|c| c.to_uppercase().contains("SUBSCRIBE") && c.contains(channel));
            subscribed.is_some_and(|at| {
                sent[at..]
                    .iter()
                    .any(|c| c.to_uppercase().starts_with("\"EVAL"))
            })
        };
        assert!(
            eventually(Duration::from_secs(10), parked),
            "Java's waiter did not subscribe to {channel} and attempt\n{}",
            self.java.log()
        );
    }

    /// Waits (at most 5 s) until `n` of our threads wait.
    fn await_ours_waiting(&self, n: u64) {
        assert!(
            eventually(Duration::from_secs(5), || self.ours.stats().waiting_threads
                == n),
            "our waiter did not wait"
        );
        thread::sleep(Duration::from_millis(100));
    }

    /// One `MONITOR` per data node.
    fn monitors(&self) -> Vec<Monitor> {
        self.nodes
            .iter()
            .map(|(port, _)| Monitor::start(*port))
            .collect()
    }

    /// The addresses of each side's connections: (Java's, ours).
    fn connections(&self) -> (Vec<String>, Vec<String>) {
        let (mut java, mut ours) = (Vec::new(), Vec::new());
        for (_, admin) in &self.nodes {
            let mut admin = admin.lock();
            java.extend(support::java::java_connections(&mut admin));
            ours.extend(support::java::connections_named(&mut admin, |name| {
                name.starts_with("redlatch:")
            }));
        }
        (java, ours)
    }

    /// What the connections at `addrs` sent while `monitors` watched that reads or changes
    /// data, so not keep-alives, topology or subscriptions: `PING` (Redisson pings each
    /// connection every 30 s), `CLUSTER ...` (it reads `CLUSTER NODES` every 5 s) and
    /// `(S|P)(UN)SUBSCRIBE` (on a loaded Cluster Redisson once sent a `SUNSUBSCRIBE` of the
    /// channel its waiter waited on, which then still woke within milliseconds of the
    /// release). None of them looks at a lock; a waiter that polled would send scripts.
    fn sent(monitors: &[Monitor], addrs: &[String]) -> Vec<String> {
        monitors
            .iter()
            .flat_map(|m| m.commands_from(addrs))
            .filter(|c| {
                let name = c.split(' ').next().unwrap_or("").to_uppercase();
                name != "\"PING\"" && name != "\"CLUSTER\"" && !name.ends_with("SUBSCRIBE\"")
            })
            .collect()
    }
}

/// Runs `f` on a thread of its own; the handle gives when it returned and what.
fn on_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<(Instant, T)> {
    thread::spawn(move || {
        let t = f();
        (Instant::now(), t)
    })
}

/// How soon after a release the other side's waiter must hold: far below the 30 s lease
/// (what a missed wake-up would cost), with room for a loaded CI machine. The measured
/// figures are printed.
const WOKEN_WITHIN: Duration = Duration::from_secs(1);
const LONG: Duration = Duration::from_secs(30);

fn assert_woken(what: &str, released: Instant, woken: Instant) {
    let after = woken.saturating_duration_since(released);
    eprintln!("{what}: woken {after:?} after the release");
    assert!(
        after < WOKEN_WITHIN,
        "{what}: woken {after:?} after the release"
    );
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// Exclusion, re-entry and the queries, seen from both sides; a non-owner's unlock refused
/// either way.
fn lock_excludes_both_ways(f: &Fleet) {
    let name = unique("orders");
    let lock = f.ours.lock(&name);
    let outer = lock.try_lock(Duration::ZERO, Some(LONG)).unwrap().unwrap();
    let inner = lock.lock().unwrap();
    assert!(f.java.is_locked("lock", &name));
    assert_eq!(f.java.hold_count("lock", &name, 7), 0, "not Java's hold");
    assert!(!f.java.is_held("lock", &name, 7));
    let ttl = f.java.remain_time_to_live("lock", &name);
    assert!(
        (20_000..=30_000).contains(&ttl),
        "Java reads our lease as {ttl} ms"
    );
    assert!(
        !f.java
            .try_lock("lock", &name, 7, Duration::from_millis(100), NO_LEASE)
    );
    let refused = f.java.unlock("lock", &name, 7).unwrap_err();
    assert!(
        refused.starts_with("IllegalMonitorStateException"),
        "Java's unlock of our hold: {refused}"
    );
    assert_eq!(lock.hold_count().unwrap(), 2);
    drop(inner);
    drop(outer);
    assert!(!f.java.is_locked("lock", &name));

    // Java holds and re-enters; we wait in vain and cannot release it.
    assert!(f.java.try_lock("lock", &name, 7, Duration::ZERO, NO_LEASE));
    assert!(f.java.try_lock("lock", &name, 7, Duration::ZERO, NO_LEASE));
    assert_eq!(f.java.hold_count("lock", &name, 7), 2);
    assert!(lock.is_locked().unwrap());
    assert!(!lock.is_held_by_current_thread().unwrap());
    let lease = lock
        .remaining_ttl()
        .unwrap()
        .expect("Java's hold has a lease");
    assert!(
        lease > Duration::from_secs(20),
        "we read Java's lease as {lease:?}"
    );
    assert!(
        lock.try_lock(Duration::from_millis(100), None)
            .unwrap()
            .is_none()
    );
    f.java.unlock("lock", &name, 7).unwrap();
    assert!(lock.is_locked().unwrap(), "one of Java's two holds left");
    f.java.unlock("lock", &name, 7).unwrap();
    assert!(!lock.is_locked().unwrap());
    assert_eq!(f.java.remain_time_to_live("lock", &name), -2);
}

/// A Java release wakes our waiter, ours wakes Java's, each within milliseconds while the
/// holder's lease is 30 s; neither waiter sends a command while it waits.
fn wakes_both_ways(f: &Fleet, name: &str, threads: (u64, u64)) {
    // Java holds with a 30 s lease; our waiter parks.
    assert!(
        f.java
            .try_lock("lock", name, threads.0, Duration::ZERO, 30_000)
    );
    let ours = {
        let lock = f.ours.lock(name);
        on_thread(move || lock.try_lock(LONG, None).unwrap().is_some())
    };
    f.await_ours_waiting(1);
    let (_, our_addrs) = f.connections();
    let monitors = f.monitors();
    thread::sleep(Duration::from_secs(2));
    let sent = Fleet::sent(&monitors, &our_addrs);
    assert!(sent.is_empty(), "our waiting thread sent {sent:?}");
    let released = Instant::now();
    f.java.unlock("lock", name, threads.0).unwrap();
    let (woken, got) = join_all(vec![ours], LONG, "our waiter").remove(0);
    assert!(got);
    assert_woken("our waiter behind Java", released, woken);

    // We hold with a 30 s lease; Java's waiter parks and stays silent.
    let guard = f
        .ours
        .lock(name)
        .try_lock(Duration::ZERO, Some(LONG))
        .unwrap()
        .unwrap();
    for m in &monitors {
        m.clear();
    }
    let java = f.java.send(
        threads.1,
        "trylock",
        &[&"lock", &name, &ms(LONG), &NO_LEASE],
    );
    f.await_java_parked(&monitors, &lock_channel(name));
    for m in &monitors {
        m.clear();
    }
    thread::sleep(Duration::from_secs(2));
    let (java_addrs, _) = f.connections();
    let sent = Fleet::sent(&monitors, &java_addrs);
    assert!(sent.is_empty(), "Java's waiting thread sent {sent:?}");
    let released = Instant::now();
    drop(guard);
    assert_eq!(java.value(LONG), "true");
    assert_woken("Java's waiter behind ours", released, Instant::now());
    f.java.unlock("lock", name, threads.1).unwrap();
}

/// A force-unlock on the Java side is reported to our holder, by renewal and the hook; ours
/// on a Java hold wakes Java's waiter.
fn force_unlock_both_ways(f: &Fleet, watchdog: Duration) {
    let name = unique("forced");
    let guard = f.ours.lock(&name).lock().unwrap();
    let before = f.lost.load(Ordering::SeqCst);
    assert!(f.java.force_unlock("lock", &name));
    assert!(eventually(watchdog + Duration::from_secs(3), || guard.is_lost()));
    assert!(eventually(Duration::from_secs(3), || f
        .lost
        .load(Ordering::SeqCst)
        > before));
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));

    assert!(f.java.try_lock("lock", &name, 11, Duration::ZERO, NO_LEASE));
    let waiter = f
        .java
        .send(12, "trylock", &[&"lock", &name, &ms(LONG), &NO_LEASE]);
    f.await_parked(&lock_channel(&name), 1);
    let released = Instant::now();
    assert!(f.ours.lock(&name).force_unlock().unwrap());
    assert_eq!(waiter.value(LONG), "true");
    assert_woken(
        "Java's waiter after our force-unlock",
        released,
        Instant::now(),
    );
    let refused = f.java.unlock("lock", &name, 11).unwrap_err();
    assert!(
        refused.starts_with("IllegalMonitorStateException"),
        "{refused}"
    );
    f.java.unlock("lock", &name, 12).unwrap();
}

/// Fencing tokens rise across both sides: Java's fenced lock and ours share the counter.
fn tokens_rise_across_both_sides(f: &Fleet) {
    let name = unique("fenced");
    let lock = f.ours.lock(&name);
    let mut last = 0;
    for _ in 0..3 {
        let ours = lock.lock().unwrap();
        assert!(ours.fencing_token() > last);
        last = ours.fencing_token();
        drop(ours);
        let java = f
            .java
            .fenced_try_lock(&name, 4, Duration::ZERO, NO_LEASE)
            .expect("Java's fenced lock") as u64;
        assert!(java > last, "Java's token {java} after ours {last}");
        assert_eq!(f.java.fenced_token(&name), Some(java as i64));
        last = java;
        f.java.unlock("fenced", &name, 4).unwrap();
    }
}

/// The fair lock serves both sides in arrival order.
fn fair_lock_order_across_both_sides(f: &Fleet) {
    let name = unique("fair");
    let lock = f.ours.fair_lock(&name);
    // Asked first: a Java thread answers only once its wait is over.
    let java_owner = f.java.owner(20);
    let first = lock.lock().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..4u64 {
        let order = order.clone();
        if i % 2 == 0 {
            let java = f.java.clone();
            let name = name.clone();
            waiters.push(thread::spawn(move || {
                assert!(java.try_lock("fair", &name, 20 + i, LONG, NO_LEASE));
                order.lock().push(i);
                thread::sleep(Duration::from_millis(20));
                java.unlock("fair", &name, 20 + i).unwrap();
            }));
        } else {
            let lock = lock.clone();
            waiters.push(thread::spawn(move || {
                let guard = lock.try_lock(LONG, None).unwrap().unwrap();
                order.lock().push(i);
                thread::sleep(Duration::from_millis(20));
                drop(guard);
            }));
        }
        // Each queued before the next arrives.
        let queued = || {
            f.ours
                .inspect(redlatch::ObjectKind::Lock, &name)
                .map(|r| r.queue.len())
                .unwrap_or(0)
        };
        assert!(
            eventually(Duration::from_secs(10), || queued() == i as usize + 1),
            "waiter {i} did not queue"
        );
    }
    // Java's queued threads listen on channels of their own.
    assert!(f.subscribers(&fair_channel(&name, &java_owner)) >= 1);
    drop(first);
    join_all(waiters, Duration::from_secs(60), "fair waiters");
    assert_eq!(*order.lock(), vec![0, 1, 2, 3]);
}

/// The count-down latch opens both ways.
fn latch_opens_both_ways(f: &Fleet) {
    let name = unique("latch");
    let latch = f.ours.count_down_latch(&name);
    assert_eq!(
        f.java.latch(1, "trysetcount", &name, &[&2]),
        Ok("true".into())
    );
    assert_eq!(latch.count().unwrap(), 2);
    assert!(!latch.try_set_count(5).unwrap(), "Java's count is set");
    let ours = {
        let latch = latch.clone();
        on_thread(move || latch.wait(LONG).unwrap())
    };
    f.await_ours_waiting(1);
    f.java.latch(1, "countdown", &name, &[]).unwrap();
    assert_eq!(latch.count().unwrap(), 1);
    let opened = Instant::now();
    f.java.latch(1, "countdown", &name, &[]).unwrap();
    let (when, open) = join_all(vec![ours], LONG, "our waiter").remove(0);
    assert!(open);
    assert_woken("our latch waiter", opened, when);

    assert!(latch.try_set_count(1).unwrap());
    assert_eq!(f.java.latch(1, "count", &name, &[]), Ok("1".into()));
    let java = f.java.send(13, "latch.await", &[&name, &ms(LONG)]);
    f.await_parked(&latch_channel(&name), 1);
    let opened = Instant::now();
    assert_eq!(latch.count_down().unwrap(), 0);
    assert_eq!(java.value(LONG), "true");
    assert_woken("Java's latch waiter", opened, Instant::now());
    assert_eq!(f.java.latch(1, "count", &name, &[]), Ok("0".into()));
}

/// The spin lock excludes and is excluded by Java's, both ways.
fn spin_lock_both_ways(f: &Fleet) {
    let name = unique("spin");
    assert!(f.java.try_lock("spin", &name, 5, Duration::ZERO, NO_LEASE));
    let spin = f.ours.spin_lock(&name);
    assert!(
        spin.try_lock(Duration::from_millis(100), None)
            .unwrap()
            .is_none()
    );
    f.java.unlock("spin", &name, 5).unwrap();
    let guard = spin
        .try_lock(Duration::from_secs(5), None)
        .unwrap()
        .unwrap();
    assert!(
        !f.java
            .try_lock("spin", &name, 5, Duration::from_millis(100), NO_LEASE)
    );
    drop(guard);
    assert!(
        f.java
            .try_lock("spin", &name, 5, Duration::from_secs(5), NO_LEASE)
    );
    f.java.unlock("spin", &name, 5).unwrap();
}

/// Our multi-lock waits for a member Java holds and Java's release wakes it; Java's
/// multi-lock waits for a member we hold and our release wakes it.
fn multi_lock_both_ways(f: &Fleet) {
    let (a, b) = (unique("{m}a"), unique("{m}b"));
    assert!(f.java.try_lock("lock", &b, 6, Duration::ZERO, NO_LEASE));
    let multi = f.ours.multi_lock(&[&a, &b]);
    let ours = {
        let multi = multi.clone();
        on_thread(move || multi.try_lock(LONG, None).unwrap().is_some())
    };
    f.await_ours_waiting(1);
    let released = Instant::now();
    f.java.unlock("lock", &b, 6).unwrap();
    let (woken, got) = join_all(vec![ours], LONG, "our multi-lock").remove(0);
    assert!(got);
    assert_woken("our multi-lock waiter", released, woken);

    let guard = f
        .ours
        .lock(&a)
        .try_lock(Duration::ZERO, Some(LONG))
        .unwrap()
        .unwrap();
    let both = format!("{a},{b}");
    let java = f
        .java
        .send(14, "trylock", &[&"multi", &both, &ms(LONG), &NO_LEASE]);
    f.await_parked(&lock_channel(&a), 1);
    assert!(
        !f.java.is_locked("lock", &b),
        "Java's multi-lock took no member while waiting"
    );
    let released = Instant::now();
    drop(guard);
    assert_eq!(java.value(LONG), "true");
    assert_woken("Java's multi-lock waiter", released, Instant::now());
    assert!(f.ours.lock(&b).is_locked().unwrap());
    f.java.unlock("multi", &both, 14).unwrap();
    assert!(!f.ours.lock(&a).is_locked().unwrap() && !f.ours.lock(&b).is_locked().unwrap());
}

/// Readers share across both sides while a writer waits; a Java read release leaves our
/// reader; write and read releases wake the other side's writer.
fn read_write_lock_both_ways(f: &Fleet) {
    let name = unique("rw");
    let rw = f.ours.read_write_lock(&name);
    let ours = rw.read().unwrap();
    assert!(f.java.try_lock("read", &name, 1, Duration::ZERO, NO_LEASE));
    // A Java writer waits for both readers.
    let java_writer = f
        .java
        .send(2, "trylock", &[&"write", &name, &ms(LONG), &NO_LEASE]);
    f.await_parked(&rw_channel(&name), 1);
    // Readers still enter while it waits (Redisson's rule), from both sides.
    let second = {
        let rw = rw.clone();
        thread::spawn(move || rw.try_read(Duration::ZERO, None).unwrap().is_some())
            .join()
            .unwrap()
    };
    assert!(
        second,
        "our second reader entered while Java's writer waits"
    );
    assert!(f.java.try_lock("read", &name, 3, Duration::ZERO, NO_LEASE));
    f.java.unlock("read", &name, 3).unwrap();
    // Java's read release leaves our reader in place, its lease intact.
    f.java.unlock("read", &name, 1).unwrap();
    thread::sleep(Duration::from_millis(100));
    assert!(!ours.is_lost());
    assert!(ours.check().is_ok());
    assert!(f.java.is_locked("read", &name), "our reader keeps the lock");
    assert!(
        java_writer.poll(Duration::ZERO).is_none(),
        "Java's writer got in beside our reader"
    );
    let released = Instant::now();
    drop(ours);
    assert_eq!(java_writer.value(LONG), "true");
    assert_woken("Java's writer behind our reader", released, Instant::now());

    // Java writes; our writer waits; Java's write release wakes it.
    let our_writer = {
        let rw = rw.clone();
        on_thread(move || rw.try_write(LONG, None).unwrap().map(|g| g.fencing_token()))
    };
    f.await_ours_waiting(1);
    let released = Instant::now();
    f.java.unlock("write", &name, 2).unwrap();
    let (woken, token) = join_all(vec![our_writer], LONG, "our writer").remove(0);
    assert!(token.is_some());
    assert_woken("our writer behind Java's writer", released, woken);
    // Our writer's turn is over: a Java reader gets in.
    assert!(
        f.java
            .try_lock("read", &name, 3, Duration::from_secs(5), NO_LEASE)
    );
    f.java.unlock("read", &name, 3).unwrap();
}

/// Our read-write lock's queries read Java's holds and Java's `isLocked` reads ours; Java's
/// `forceUnlock` frees only a lock in its own mode (the write lock's leaves readers, ours and
/// Java's, in place; the read lock's frees them all), and ours frees either and wakes Java's
/// waiter at once.
fn read_write_queries_and_force_unlock_both_ways(f: &Fleet, watchdog: Duration) {
    let name = unique("rw-admin");
    let rw = f.ours.read_write_lock(&name);
    assert!(!rw.is_locked().unwrap());
    assert!(!f.java.is_locked("read", &name) && !f.java.is_locked("write", &name));
    assert!(f.java.try_lock("read", &name, 1, Duration::ZERO, NO_LEASE));
    assert!(rw.is_locked().unwrap() && !rw.is_write_locked().unwrap());
    assert_eq!(
        (
            rw.read_hold_count().unwrap(),
            rw.write_hold_count().unwrap()
        ),
        (0, 0)
    );
    let ttl = rw
        .remaining_ttl()
        .unwrap()
        .expect("Java's read has a lease");
    let java_ttl = f.java.remain_time_to_live("read", &name);
    assert!(
        java_ttl > 0 && (ttl.as_millis() as i64 - java_ttl).abs() < 2_000,
        "ours {ttl:?}, Java's {java_ttl} ms"
    );
    let ours = rw.read().unwrap();
    assert_eq!(rw.read_hold_count().unwrap(), 1);
    assert!(
        !f.java.force_unlock("write", &name),
        "Java's writeLock().forceUnlock() frees a lock in write mode only"
    );
    assert!(rw.is_locked().unwrap() && !ours.is_lost());
    assert!(
        f.java.force_unlock("read", &name),
        "Java's readLock().forceUnlock() frees every reader"
    );
    assert!(!rw.is_locked().unwrap());
    assert!(eventually(watchdog + Duration::from_secs(3), || ours.is_lost()));
    drop(ours);

    // Our writer, re-entered: Java sees a write.
    let w1 = rw.write().unwrap();
    let w2 = rw.write().unwrap();
    assert_eq!(rw.write_hold_count().unwrap(), 2);
    assert!(f.java.is_locked("write", &name));
    let waiter = f
        .java
        .send(2, "trylock", &[&"read", &name, &ms(LONG), &NO_LEASE]);
    f.await_parked(&rw_channel(&name), 1);
    let released = Instant::now();
    assert!(rw.force_unlock().unwrap());
    assert_eq!(waiter.value(LONG), "true");
    assert_woken(
        "Java's reader after our force-unlock",
        released,
        Instant::now(),
    );
    assert!(w1.is_lost() && w2.is_lost());
    assert_eq!(rw.write_hold_count().unwrap(), 0);
    drop((w1, w2));
    assert!(rw.is_locked().unwrap() && !rw.is_write_locked().unwrap());
    f.java.unlock("read", &name, 2).unwrap();

    // Java writes: ours sees it, and Java's write force-unlock frees it.
    assert!(f.java.try_lock("write", &name, 3, Duration::ZERO, NO_LEASE));
    assert!(rw.is_write_locked().unwrap());
    assert_eq!(rw.write_hold_count().unwrap(), 0);
    assert!(f.java.force_unlock("write", &name));
    assert!(!rw.is_locked().unwrap());
}

/// The semaphore's counts agree on both sides, and releases wake the other side.
fn semaphore_both_ways(f: &Fleet) {
    let name = unique("sem");
    let semaphore = f.ours.semaphore(&name);
    semaphore.set_permits(2).unwrap();
    assert_eq!(f.java.permits(1, "available", &name, &[]), Ok("2".into()));
    let java_permit = f
        .java
        .permits(1, "tryacquire", &name, &[&0, &NO_LEASE])
        .unwrap();
    assert_ne!(java_permit, "null");
    assert_eq!(semaphore.available().unwrap(), 1);
    let ours = semaphore
        .try_acquire(1, Duration::ZERO, None)
        .unwrap()
        .unwrap();
    assert_eq!(f.java.permits(1, "available", &name, &[]), Ok("0".into()));
    if f.java.redisson_version.starts_with('4') {
        assert_eq!(f.java.permits(1, "acquired", &name, &[]), Ok("2".into()));
        assert_eq!(f.java.permits(1, "permits", &name, &[]), Ok("2".into()));
    }
    // Our waiter is woken by Java's release, Java's by ours.
    let waiting = {
        let semaphore = semaphore.clone();
        on_thread(move || semaphore.try_acquire(1, LONG, None).unwrap())
    };
    f.await_ours_waiting(1);
    let released = Instant::now();
    f.java
        .permits(1, "release", &name, &[&java_permit])
        .unwrap();
    let (woken, kept) = join_all(vec![waiting], LONG, "our waiter").remove(0);
    assert!(kept.is_some());
    assert_woken("our semaphore waiter", released, woken);
    assert_eq!(f.java.permits(1, "available", &name, &[]), Ok("0".into()));
    let java = f
        .java
        .send(15, "psem.tryacquire", &[&name, &ms(LONG), &NO_LEASE]);
    f.await_parked(&semaphore_channel(&name), 1);
    let released = Instant::now();
    ours.release().unwrap();
    let id = java.value(LONG);
    assert_ne!(id, "null", "Java got the permit");
    assert_woken("Java's semaphore waiter", released, Instant::now());
    assert_eq!(
        f.java.permits(1, "tryrelease", &name, &[&id]),
        Ok("true".into())
    );
    kept.unwrap().release().unwrap();
    assert_eq!(semaphore.available().unwrap(), 2);
    // Our force-unlock gives Java's permits back, and wakes Java's waiter.
    let held: Vec<String> = (0..2)
        .map(|_| {
            f.java
                .permits(1, "tryacquire", &name, &[&0, &NO_LEASE])
                .unwrap()
        })
        .collect();
    assert!(held.iter().all(|id| id != "null"));
    let java = f
        .java
        .send(16, "psem.tryacquire", &[&name, &ms(LONG), &NO_LEASE]);
    f.await_parked(&semaphore_channel(&name), 1);
    let released = Instant::now();
    assert!(semaphore.force_unlock().unwrap());
    let id = java.value(LONG);
    assert_ne!(id, "null", "Java's waiter got a permit");
    assert_woken(
        "Java's semaphore waiter, by our force-unlock",
        released,
        Instant::now(),
    );
    for old in &held {
        let released = f.java.permits(1, "tryrelease", &name, &[old]);
        assert_eq!(released, Ok("false".into()), "a force-freed permit");
    }
    assert_eq!(
        f.java.permits(1, "tryrelease", &name, &[&id]),
        Ok("true".into())
    );
    assert_eq!(semaphore.available().unwrap(), 2);
}

/// A cancelled wait leaves Redisson's fair queue, both ways: ours cancelled through its
/// `Cancel`, Java's `lockInterruptibly` interrupted. The waiter behind is served at once on
/// the next release, not after the leaver's place runs out (minutes).
fn cancelled_waits_leave_the_fair_queue_both_ways(f: &Fleet) {
    let queued = |name: &str| {
        f.ours
            .inspect(redlatch::ObjectKind::Lock, name)
            .map(|r| r.queue.len())
            .unwrap_or(0)
    };
    // Ours cancelled, Java's behind it.
    let name = unique("fair-cancel");
    let lock = f.ours.fair_lock(&name);
    let held = lock.lock_owned().unwrap();
    let cancel = redlatch::Cancel::new();
    let ours = {
        let lock = lock.cancel_on(&cancel);
        on_thread(move || lock.lock().map(drop))
    };
    assert!(eventually(Duration::from_secs(10), || queued(&name) == 1));
    let java = f.java.lock("fair", &name, 40, NO_LEASE);
    assert!(eventually(Duration::from_secs(10), || queued(&name) == 2));
    let cancelled = Instant::now();
    cancel.cancel();
    let (returned, result) = ours.join().unwrap();
    assert!(matches!(result, Err(Error::Cancelled { .. })), "{result:?}");
    eprintln!("our fair waiter cancelled in {:?}", returned - cancelled);
    assert!(eventually(Duration::from_secs(5), || queued(&name) == 1));
    let released = Instant::now();
    drop(held);
    java.value(WOKEN_WITHIN + Duration::from_secs(5));
    assert_woken(
        "Java's fair waiter behind our cancelled one",
        released,
        Instant::now(),
    );
    f.java.unlock("fair", &name, 40).unwrap();

    // Java's interrupted, ours behind it. Redisson's `lockInterruptibly` does not leave the
    // fair queue when interrupted (`RedissonLock.lock(.., interruptibly)` rethrows without the
    // `acquireFailed` that `tryLock` runs): the place stays until it times out
    // (`fairLockWaitTimeout`, 5 min past the holder's lease), and the waiters behind it wait
    // that long. Seen here, so that the README's word on it stays true; should a Redisson
    // release mend it, this fails and the README changes.
    let name = unique("fair-interrupt");
    assert!(f.java.try_lock("fair", &name, 41, LONG, NO_LEASE));
    let interrupted = f.java.send(42, "lockint", &[&"fair", &name, &NO_LEASE]);
    assert!(eventually(Duration::from_secs(10), || queued(&name) == 1));
    let ours = {
        let lock = f.ours.fair_lock(&name);
        on_thread(move || {
            lock.try_lock(Duration::from_secs(3), None)
                .map(|g| g.is_some())
        })
    };
    assert!(eventually(Duration::from_secs(10), || queued(&name) == 2));
    assert!(f.java.interrupt(42));
    let thrown = interrupted.wait(Duration::from_secs(10));
    assert!(thrown.is_err(), "lockInterruptibly returned {thrown:?}");
    f.java.unlock("fair", &name, 41).unwrap();
    let (_, got) = ours.join().unwrap();
    assert!(
        !got.unwrap(),
        "Redisson now leaves the fair queue when interrupted: update the README"
    );
    assert_eq!(queued(&name), 1, "Java's interrupted waiter's place");
    // The place is left to time out: the name is this test's alone.
}

/// The counting semaphore (Java's `getSemaphore`): counts agree after each step of either
/// side, and a release of either side wakes the other side's waiter at once.
fn counting_semaphore_both_ways(f: &Fleet) {
    let name = unique("csem");
    let sem = f.ours.counting_semaphore(&name);
    let java = |op: &str, args: &[&dyn std::fmt::Display]| f.java.counting(1, op, &name, args);
    let agree = |available: i64, what: &str| {
        assert_eq!(sem.available().unwrap(), available, "ours, after {what}");
        assert_eq!(
            java("available", &[]),
            Ok(available.to_string()),
            "Java's, after {what}"
        );
    };
    assert_eq!(java("trysetpermits", &[&2]), Ok("true".into()));
    assert!(!sem.try_set_permits(5).unwrap(), "Java set it first");
    agree(2, "Java's trySetPermits");
    assert_eq!(java("tryacquire", &[&1, &0]), Ok("true".into()));
    agree(1, "Java's tryAcquire");
    assert!(sem.try_acquire(1, Duration::ZERO).unwrap());
    agree(0, "our try_acquire");
    assert_eq!(java("tryacquire", &[&1, &0]), Ok("false".into()));
    assert!(!sem.try_acquire(1, Duration::ZERO).unwrap());

    // Java's release wakes our waiter.
    let waiting = {
        let sem = sem.clone();
        on_thread(move || sem.try_acquire(2, LONG).unwrap())
    };
    f.await_ours_waiting(1);
    let released = Instant::now();
    assert_eq!(java("release", &[&2]), Ok(String::new()));
    let (woken, got) = join_all(vec![waiting], LONG, "our waiter").remove(0);
    assert!(got, "our waiter took Java's permits");
    assert_woken("our counting-semaphore waiter", released, woken);
    agree(0, "our wait");

    // Ours wakes Java's.
    let monitors = f.monitors();
    let waiter = f.java.send(15, "sem.tryacquire", &[&name, &2, &ms(LONG)]);
    f.await_java_parked(&monitors, &semaphore_channel(&name));
    let released = Instant::now();
    sem.release(2).unwrap();
    assert_eq!(waiter.value(LONG), "true", "Java got our permits");
    assert_woken("Java's counting-semaphore waiter", released, Instant::now());
    agree(0, "Java's wait");

    // add, below zero, drain: both sides read the same after each.
    sem.add_permits(3).unwrap();
    agree(3, "our add_permits");
    assert_eq!(java("addpermits", &[&-5]), Ok(String::new()));
    agree(-2, "Java's addPermits below zero");
    sem.release(1).unwrap();
    agree(-1, "our release");
    // Java's drainPermits answers a count below zero as it is and sets 0; ours is Java's.
    assert_eq!(sem.drain().unwrap(), -1);
    agree(0, "our drain");
    sem.add_permits(4).unwrap();
    assert_eq!(java("drain", &[]), Ok("4".into()));
    agree(0, "Java's drain");
    sem.release(1).unwrap();
    assert_eq!(sem.drain().unwrap(), 1);
    agree(0, "our drain");
}

fn suite(f: &Fleet, watchdog: Duration) {
    eprintln!(
        "Redisson {} on Java {}",
        f.java.redisson_version, f.java.java_version
    );
    lock_excludes_both_ways(f);
    wakes_both_ways(f, &unique("wake"), (1, 2));
    // A name with braces follows Redisson's rule on both sides (`app{42}lock` wakes on
    // `redisson_lock__channel:app{42}lock`).
    wakes_both_ways(f, &format!("{}{{42}}lock", unique("app")), (8, 9));
    force_unlock_both_ways(f, watchdog);
    tokens_rise_across_both_sides(f);
    fair_lock_order_across_both_sides(f);
    latch_opens_both_ways(f);
    spin_lock_both_ways(f);
    multi_lock_both_ways(f);
    read_write_lock_both_ways(f);
    read_write_queries_and_force_unlock_both_ways(f, watchdog);
    semaphore_both_ways(f);
    cancelled_waits_leave_the_fair_queue_both_ways(f);
    counting_semaphore_both_ways(f);
}

const WATCHDOG: Duration = Duration::from_secs(3);

#[test]
fn beside_redisson_on_one_server() {
    let server = support::RedisServer::start();
    let builder = Client::builder(&server.url()).watchdog_timeout(WATCHDOG);
    let java = JavaService::single(&server.url());
    suite(&Fleet::new(builder, java, vec![server.port]), WATCHDOG);
}

#[test]
fn beside_redisson_under_sentinel() {
    let setup = support::topology::Sentinel::start();
    let urls = setup.sentinel_urls();
    let refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let builder = Client::sentinel_builder(&refs, support::topology::Sentinel::NAME)
        .watchdog_timeout(WATCHDOG);
    let java = JavaService::start(support::java::Deployment::Sentinel(
        support::topology::Sentinel::NAME,
        &urls,
    ));
    let ports = setup.servers().iter().map(|s| s.port).collect();
    suite(&Fleet::new(builder, java, ports), WATCHDOG);
}

/// Sharded pub/sub: on a Redis 7 Cluster both sides SPUBLISH and SSUBSCRIBE.
#[test]
fn beside_redisson_on_a_cluster() {
    let cluster = support::topology::Cluster::start();
    let seeds = cluster.seed_urls();
    let refs: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let builder = Client::cluster_builder(&refs).watchdog_timeout(WATCHDOG);
    let java = JavaService::start(support::java::Deployment::Cluster(&seeds));
    let ports = cluster.nodes().iter().map(|s| s.port).collect();
    let fleet = Fleet::new(builder, java, ports);
    suite(&fleet, WATCHDOG);
    // Java's waiters listened with SSUBSCRIBE, and its releases went out with SPUBLISH.
    let name = unique("sharded");
    let monitors = fleet.monitors();
    assert!(
        fleet
            .java
            .try_lock("lock", &name, 1, Duration::ZERO, NO_LEASE)
    );
    let ours = {
        let lock = fleet.ours.lock(&name);
        on_thread(move || lock.try_lock(LONG, None).unwrap().is_some())
    };
    fleet.await_ours_waiting(1);
    fleet.java.unlock("lock", &name, 1).unwrap();
    assert!(join_all(vec![ours], LONG, "our waiter").remove(0).1);
    let (java_addrs, _) = fleet.connections();
    let sent = Fleet::sent(&monitors, &java_addrs)
        .join("\n")
        .to_uppercase();
    // Redisson publishes sharded where the server has it (Redis 7 on), plainly before.
    if support::server_version() >= (7, 0) {
        assert!(
            !sent.contains("\"PUBLISH\""),
            "Java published unsharded:\n{sent}"
        );
    } else {
        assert!(
            !sent.contains("SPUBLISH"),
            "Java published sharded on a server without it:\n{sent}"
        );
    }
}

/// A Redlock over clients in Redisson's layout takes each master's RLock hash, as Java's
/// `RedissonRedLock` over `getLock(n)` of each master does: the two exclude each other by
/// majority, both ways.
#[test]
fn a_redlock_excludes_redissons_redlock_over_the_same_masters() {
    let servers: Vec<_> = (0..3).map(|_| support::RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let clients = urls
        .iter()
        .map(|url| {
            Client::builder(url)
                .layout(Layout::Redisson)
                .build()
                .unwrap()
        })
        .collect();
    let ours = redlatch::RedlockClient::new(clients).unwrap();
    let java = JavaService::start(support::java::Deployment::Masters(&urls));
    let name = unique("red");
    let lock = ours.lock(&name);
    // Java's Redlock holds: ours cannot, and Java's hash is on every master.
    assert!(java.try_lock("redlock", &name, 1, Duration::ZERO, NO_LEASE));
    // Each master's RedissonClient has an id of its own; the thread is the same.
    let owner = java.owner(1);
    let thread = owner.rsplit(':').next().unwrap();
    for server in &servers {
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg(&name)
            .query(&mut server.admin())
            .unwrap();
        assert_eq!(fields.len(), 1, "{fields:?}");
        assert!(
            fields[0].ends_with(&format!(":{thread}")),
            "{fields:?} for thread {thread}"
        );
    }
    assert!(
        lock.try_lock(Duration::from_millis(300), None)
            .unwrap()
            .is_none()
    );
    java.unlock("redlock", &name, 1).unwrap();
    // Ours holds: Java's cannot.
    let guard = lock
        .try_lock(Duration::from_secs(5), None)
        .unwrap()
        .unwrap();
    assert!(!java.try_lock("redlock", &name, 2, Duration::from_millis(300), NO_LEASE));
    // Java's plain locks get at most the masters ours does not hold: no majority.
    let mut admin = servers[0].admin();
    let _: () = redis::cmd("DEL").arg(&name).query(&mut admin).unwrap();
    assert!(
        guard.check().is_ok(),
        "one master of three lost keeps the majority"
    );
    drop(guard);
    assert!(java.try_lock("redlock", &name, 2, Duration::from_secs(5), NO_LEASE));
    java.unlock("redlock", &name, 2).unwrap();
}

/// The hash `name` and its lease, to see that a refused call left them alone.
fn hash_state(admin: &mut redis::Connection, name: &str) -> (Vec<(String, String)>, bool) {
    let mut fields: Vec<(String, String)> = redis::cmd("HGETALL").arg(name).query(admin).unwrap();
    fields.sort();
    let pttl: i64 = redis::cmd("PTTL").arg(name).query(admin).unwrap();
    (fields, pttl > 0)
}

fn is_wrong_type<T: std::fmt::Debug>(result: redlatch::Result<T>, name: &str) -> bool {
    match result {
        Err(Error::WrongType { key }) => key == name,
        other => panic!("{other:?}, not WrongType for {name}"),
    }
}

/// A lock and a read-write lock of one name, with the real Redisson on the other side, in both
/// orders. Ours never joins, changes or deletes the other kind's hash (`WrongType`, nothing
/// written). Java does not check: its read or write lock joins a lock's hash, its lock waits
/// behind a read-write hash and its `forceUnlock` deletes one. What Java does to our holds
/// that way is reported to our holder (`is_lost`, `on_lock_lost`).
#[test]
fn kinds_of_one_name_refuse_each_other_beside_redisson() {
    let server = support::RedisServer::start();
    let f = Fleet::new(
        Client::builder(&server.url()).watchdog_timeout(WATCHDOG),
        JavaService::single(&server.url()),
        vec![server.port],
    );
    let mut admin = server.admin();

    // Java's lock holds: our read and write are refused, its hash untouched.
    let name = unique("dup");
    assert!(f.java.try_lock("lock", &name, 1, Duration::ZERO, NO_LEASE));
    let before = hash_state(&mut admin, &name);
    let rw = f.ours.read_write_lock(&name);
    assert!(is_wrong_type(rw.try_read(Duration::ZERO, None), &name));
    assert!(is_wrong_type(
        rw.try_write(Duration::from_millis(200), None),
        &name
    ));
    assert_eq!(hash_state(&mut admin, &name), before);
    assert!(f.java.is_held("lock", &name, 1));
    f.java.unlock("lock", &name, 1).unwrap();

    // Java's read and write locks hold: our lock kinds and force-unlock are refused.
    for kind in ["read", "write"] {
        let name = unique(&format!("dup-{kind}"));
        assert!(f.java.try_lock(kind, &name, 2, Duration::ZERO, NO_LEASE));
        let before = hash_state(&mut admin, &name);
        assert!(is_wrong_type(
            f.ours.lock(&name).try_lock(Duration::ZERO, None),
            &name
        ));
        assert!(is_wrong_type(
            f.ours
                .fair_lock(&name)
                .try_lock(Duration::from_millis(200), None),
            &name
        ));
        assert!(is_wrong_type(
            f.ours.spin_lock(&name).try_lock(Duration::ZERO, None),
            &name
        ));
        assert!(is_wrong_type(f.ours.lock(&name).force_unlock(), &name));
        assert_eq!(
            hash_state(&mut admin, &name),
            before,
            "after our {kind} refusals"
        );
        assert!(f.java.is_held(kind, &name, 2));
        f.java.unlock(kind, &name, 2).unwrap();
    }

    // Java's own behaviour, in the other order: its read lock joins our lock's hash, and
    // its release deletes it; our holder is told.
    let name = unique("dup-ours");
    let guard = f.ours.lock(&name).lock().unwrap();
    let lost_before = f.lost.load(Ordering::SeqCst);
    assert!(
        f.java.try_lock("read", &name, 3, Duration::ZERO, NO_LEASE),
        "Redisson {} no longer joins a lock's hash with a read: update the README",
        f.java.redisson_version
    );
    f.java.unlock("read", &name, 3).unwrap();
    assert!(eventually(WATCHDOG + Duration::from_secs(3), || guard.is_lost()));
    assert!(eventually(Duration::from_secs(3), || f
        .lost
        .load(Ordering::SeqCst)
        > lost_before));
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));

    // And its lock waits behind our read, and its forceUnlock deletes our reader's hash.
    let name = unique("dup-read");
    let read = f.ours.read_write_lock(&name).read().unwrap();
    assert!(
        !f.java
            .try_lock("lock", &name, 4, Duration::from_millis(200), NO_LEASE)
    );
    assert!(f.java.force_unlock("lock", &name));
    assert!(eventually(WATCHDOG + Duration::from_secs(3), || read.is_lost()));
}

/// Semaphore administration in turns with the real Redisson (`trySetPermits`, `addPermits`,
/// `getPermits`, `acquiredPermits`, `availablePermits`): after each call of either side,
/// both sides read the same counts.
#[test]
fn semaphore_administration_agrees_with_redisson() {
    let server = support::RedisServer::start();
    let f = Fleet::new(
        Client::builder(&server.url()).watchdog_timeout(WATCHDOG),
        JavaService::single(&server.url()),
        vec![server.port],
    );
    let name = unique("semadmin");
    let semaphore = f.ours.semaphore(&name);
    let java = |op: &str, args: &[&dyn std::fmt::Display]| f.java.permits(1, op, &name, args);
    // Java's getPermits and acquiredPermits are there in Redisson 4 only.
    let has_counts = f.java.redisson_version.starts_with('4');
    // `available`: Java's count, below 0 while more is held than the total; ours reads 0.
    let agree = |permits: u32, acquired: u32, available: i64| {
        assert_eq!(semaphore.permits().unwrap(), permits, "our permits");
        assert_eq!(semaphore.acquired().unwrap(), acquired, "our acquired");
        assert_eq!(
            i64::from(semaphore.available().unwrap()),
            available.max(0),
            "our available"
        );
        assert_eq!(java("available", &[]), Ok(available.to_string()), "Java's");
        if has_counts {
            assert_eq!(java("permits", &[]), Ok(permits.to_string()), "Java's");
            assert_eq!(java("acquired", &[]), Ok(acquired.to_string()), "Java's");
        }
    };

    assert_eq!(java("trysetpermits", &[&3]), Ok("true".into()));
    assert!(!semaphore.try_set_permits(5).unwrap(), "Java set it first");
    agree(3, 0, 3);
    assert_eq!(semaphore.add_permits(2).unwrap(), 5);
    agree(5, 0, 5);
    assert_eq!(java("addpermits", &[&-1]), Ok(String::new()));
    agree(4, 0, 4);

    // A permit held on each side.
    let java_permit = java("tryacquire", &[&0, &60_000]).unwrap();
    assert_ne!(java_permit, "null");
    let ours = semaphore
        .try_acquire(1, Duration::ZERO, None)
        .unwrap()
        .unwrap();
    agree(4, 2, 2);
    assert_eq!(java("trysetpermits", &[&9]), Ok("false".into()));
    assert!(!semaphore.try_set_permits(9).unwrap());
    // Shrunk below what is held by either side: the holders keep theirs.
    assert_eq!(semaphore.add_permits(-3).unwrap(), 1);
    agree(1, 2, -1);
    ours.check().unwrap();
    assert_eq!(java("addpermits", &[&2]), Ok(String::new()));
    agree(3, 2, 1);
    assert_eq!(java("release", &[&java_permit]), Ok(String::new()));
    agree(3, 1, 2);
    ours.release().unwrap();
    agree(3, 0, 3);
    assert_eq!(semaphore.add_permits(-3).unwrap(), 0);
    agree(0, 0, 0);
}

/// A name mapper on both sides (Java's `NameMapper`, ours `name_mapper`) meets on the same
/// keys: Java's `getLock("orders")` and ours `lock("orders")` are the hash `billing:orders`,
/// exclude each other and wake each other; a client without the mapper sees that name.
#[test]
fn a_name_mapper_meets_javas_name_mapper() {
    let server = support::RedisServer::start();
    let java =
        JavaService::start_mapped(support::java::Deployment::Single(&server.url()), "billing:");
    let ours = Client::builder(&server.url())
        .layout(Layout::Redisson)
        .name_mapper(|n| format!("billing:{n}"))
        .build()
        .unwrap();
    let name = unique("orders");
    let stored = format!("billing:{name}");
    let mut admin = server.admin();
    assert!(java.try_lock("lock", &name, 1, Duration::ZERO, NO_LEASE));
    let exists: bool = redis::cmd("EXISTS").arg(&stored).query(&mut admin).unwrap();
    assert!(exists, "Java's mapped hash {stored}");
    let lock = ours.lock(&name);
    assert!(lock.is_locked().unwrap());
    let waiter = {
        let lock = lock.clone();
        on_thread(move || {
            lock.try_lock(LONG, None)
                .map(|g| g.map(|g| g.name().to_string()))
        })
    };
    assert!(eventually(Duration::from_secs(10), || ours
        .stats()
        .waiting_threads
        == 1));
    let released = Instant::now();
    java.unlock("lock", &name, 1).unwrap();
    let (woken, got) = waiter.join().unwrap();
    assert_eq!(got.unwrap().as_deref(), Some(stored.as_str()));
    assert_woken("our mapped waiter", released, woken);
    // And the other way: ours held, Java's mapped lock sees it.
    let guard = lock.lock().unwrap();
    assert_eq!(java.value(1, "islocked", &[&"lock", &name]), "true");
    assert!(!java.try_lock("lock", &name, 1, Duration::ZERO, NO_LEASE));
    drop(guard);
    assert!(java.try_lock("lock", &name, 1, Duration::ZERO, NO_LEASE));
    java.unlock("lock", &name, 1).unwrap();
}

/// The calls of issue 34 beside Redisson's: a permit's lease moved by either side
/// (`updateLeaseTime`, `Permits::extend`) holds for both; a latch deleted by either side wakes
/// the other side's waiter (Java's `delete` publishes `1`, ours `0`); `is_held_by` reads
/// Java's `isHeldByThread` field; a lock's lease set by `extend` keeps Java out.
#[test]
fn extend_delete_and_is_held_by_agree_with_redisson() {
    let server = support::RedisServer::start();
    let f = Fleet::new(
        Client::builder(&server.url()).watchdog_timeout(WATCHDOG),
        JavaService::single(&server.url()),
        vec![server.port],
    );
    // Long enough for a call to the Java service between an acquisition and its extension on
    // a loaded machine (400 ms was not, once, on Valkey with a fuzzer beside it).
    let short = Duration::from_millis(1_500);
    let past_short = Duration::from_millis(2_000);

    // Permits: Java's permit, its lease moved by Java, outlives its first lease for us too.
    let name = unique("psem-extend");
    let semaphore = f.ours.semaphore(&name);
    semaphore.set_permits(2).unwrap();
    let java = |op: &str, args: &[&dyn std::fmt::Display]| f.java.permits(1, op, &name, args);
    let java_permit = java("tryacquire", &[&0, &ms(short)]).unwrap();
    assert_ne!(java_permit, "null");
    assert_eq!(
        java("updatelease", &[&java_permit, &5_000]),
        Ok("true".into())
    );
    // Ours, extended by us, outlives its first lease for Java.
    let ours = semaphore
        .try_acquire(1, Duration::ZERO, Some(short))
        .unwrap()
        .unwrap();
    ours.extend(Duration::from_secs(5)).unwrap();
    thread::sleep(past_short);
    // Both sides reclaim ended leases when they count: neither permit came back.
    assert_eq!(semaphore.available().unwrap(), 0);
    assert_eq!(java("available", &[]), Ok("0".into()));
    assert!(!ours.is_lost());
    // Java moves ours too (the same score), and ours moves nothing of Java's.
    assert_eq!(
        java("updatelease", &[&ours.owner_id(), &5_000]),
        Ok("true".into())
    );
    assert_eq!(java("tryrelease", &[&java_permit]), Ok("true".into()));
    ours.release().unwrap();
    assert_eq!(
        java("updatelease", &[&java_permit, &5_000]),
        Ok("false".into()),
        "a released permit is not revived"
    );
    assert_eq!(semaphore.available().unwrap(), 2);

    // The latch: Java's delete wakes our unbounded waiter...
    let name = unique("latch-delete");
    let latch = f.ours.count_down_latch(&name);
    assert!(latch.try_set_count(2).unwrap());
    let waiting = {
        let latch = latch.clone();
        on_thread(move || latch.await_zero())
    };
    assert!(
        eventually(Duration::from_secs(5), || f
            .subscribers(&latch_channel(&name))
            >= 1),
        "our waiter did not subscribe"
    );
    thread::sleep(Duration::from_millis(200));
    let deleted = Instant::now();
    assert_eq!(f.java.latch(1, "delete", &name, &[]), Ok("true".into()));
    let (woken, done) = join_all(vec![waiting], LONG, "our latch waiter").remove(0);
    done.unwrap();
    assert_woken("our latch waiter, after Java's delete", deleted, woken);
    // ...and ours wakes Java's.
    assert!(latch.try_set_count(3).unwrap());
    let java_waiter = f.java.send(13, "latch.await", &[&name, &ms(LONG)]);
    f.await_parked(&latch_channel(&name), 1);
    let deleted = Instant::now();
    assert!(latch.delete().unwrap());
    assert_eq!(java_waiter.value(LONG), "true");
    assert_woken(
        "Java's latch waiter, after our delete",
        deleted,
        Instant::now(),
    );
    assert_eq!(f.java.latch(1, "count", &name, &[]), Ok("0".into()));

    // A lock: is_held_by reads Java's holder field; our extended lease keeps Java out.
    let name = unique("held-by");
    let lock = f.ours.lock(&name);
    assert!(f.java.try_lock("lock", &name, 5, Duration::ZERO, 60_000));
    assert!(lock.is_held_by(&f.java.owner(5)).unwrap());
    assert!(!lock.is_held_by(&f.ours.current_thread_owner_id()).unwrap());
    f.java.unlock("lock", &name, 5).unwrap();
    assert!(!lock.is_held_by(&f.java.owner(5)).unwrap());
    let guard = lock.lock_with_lease(short).unwrap();
    guard.extend(Duration::from_secs(10)).unwrap();
    thread::sleep(past_short);
    assert!(!f.java.try_lock("lock", &name, 5, Duration::ZERO, 60_000));
    let left = f.java.remain_time_to_live("lock", &name);
    assert!((6_000..=10_000).contains(&left), "Java reads {left} ms");
    guard.unlock().unwrap();
    assert!(f.java.try_lock("lock", &name, 5, Duration::ZERO, 60_000));
    f.java.unlock("lock", &name, 5).unwrap();
}
