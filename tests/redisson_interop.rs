//! redlatch in `Layout::Redisson` against an emulated Java service (`support::jvm`: what
//! Redisson 4.7.0 sends, its scripts' steps and its waiting algorithm), both ways, for every
//! kind this layout has, on one server, under Sentinel, on a Cluster (sharded pub/sub) and
//! over TLS.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Client, Error, Layout, LossCause};
use support::jvm::Jvm;
use support::{eventually, join_all, unique};

/// What the suite needs of a deployment: a redlatch client in Redisson's layout (with a
/// loss hook that counts), and a Java service on the same Redis.
struct Fleet {
    ours: Client,
    java: Jvm,
    lost: Arc<AtomicU64>,
    /// Script calls the deployment's servers have run so far (INFO commandstats).
    script_calls: Box<dyn Fn() -> u64>,
}

impl Fleet {
    fn new(
        builder: redlatch::ClientBuilder,
        java: Jvm,
        script_calls: impl Fn() -> u64 + 'static,
    ) -> Fleet {
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
        Fleet {
            ours,
            java,
            lost,
            script_calls: Box::new(script_calls),
        }
    }
}

/// Runs `f` on a thread of its own, returning when it finished and its result.
fn on_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> thread::JoinHandle<(Instant, T)> {
    thread::spawn(move || {
        let t = f();
        (Instant::now(), t)
    })
}

/// Java's "no lease": its watchdog's 30 s.
const JAVA_LEASE: i64 = -1;

/// Waits (at most 5 s) until a Java thread that started waiting after its JVM had sent
/// `before` commands has parked: attempted, subscribed and attempted again.
fn await_java_parked(java: &Jvm, before: u64) {
    assert!(
        eventually(Duration::from_secs(5), || java.commands_sent()
            >= before + 3),
        "the Java waiter did not park"
    );
}

const QUICK: Duration = Duration::from_millis(800);

/// Exclusion and re-entry seen from both sides; a non-owner's unlock refused either way.
fn lock_excludes_both_ways(f: &Fleet) {
    let name = unique("orders");
    let lock = f.ours.lock(&name);
    let outer = lock.lock().unwrap();
    let inner = lock.lock().unwrap();
    // Java sees our hold: the lock is taken, its count is ours.
    assert!(f.java.is_locked(&name));
    assert_eq!(
        f.java.lock_acquire(&name, 7, JAVA_LEASE).map(|ttl| ttl > 0),
        Some(true)
    );
    assert!(
        !f.java
            .try_lock(&name, 7, Duration::from_millis(100), JAVA_LEASE)
    );
    assert_eq!(
        f.java.unlock(&name, 7),
        None,
        "Java cannot release our hold"
    );
    drop(inner);
    drop(outer);
    // Java holds, re-enters; we wait in vain, and cannot release it.
    assert!(f.java.try_lock(&name, 7, Duration::ZERO, JAVA_LEASE));
    assert!(f.java.try_lock(&name, 7, Duration::ZERO, JAVA_LEASE));
    assert_eq!(f.java.hold_count(&name, 7), 2);
    assert!(lock.is_locked().unwrap());
    assert!(!lock.is_held_by_current_thread().unwrap());
    assert!(
        lock.try_lock(Duration::from_millis(100), None)
            .unwrap()
            .is_none()
    );
    assert_eq!(f.java.unlock(&name, 7), Some(0));
    assert_eq!(f.java.unlock(&name, 7), Some(1));
    assert!(!lock.is_locked().unwrap());
}

/// A Java release wakes our waiter, and ours wakes Java's, each within a few hundred ms
/// while the holder's lease is 30 s: nobody polls.
fn releases_wake_the_other_side(f: &Fleet) {
    wakes_both_ways(f, &unique("wake"), (1, 2));
}

/// A name with braces follows Redisson's rule on both sides (`app{42}lock` wakes on
/// `redisson_lock__channel:app{42}lock`): a Java release still wakes ours, and ours Java's.
fn a_name_with_braces_wakes_both_ways(f: &Fleet) {
    wakes_both_ways(f, &format!("{}{{42}}lock", unique("app")), (8, 9));
}

/// Java's thread `threads.0` holds lock `name` and its release wakes our waiter; then we hold
/// and our release wakes Java's thread `threads.1`.
fn wakes_both_ways(f: &Fleet, name: &str, threads: (u64, u64)) {
    assert!(f.java.try_lock(name, threads.0, Duration::ZERO, JAVA_LEASE));
    let ours = {
        let lock = f.ours.lock(name);
        on_thread(move || {
            lock.try_lock(Duration::from_secs(20), None)
                .unwrap()
                .is_some()
        })
    };
    assert!(eventually(Duration::from_secs(5), || f
        .ours
        .stats()
        .waiting_threads
        == 1));
    thread::sleep(Duration::from_millis(100));
    let released = Instant::now();
    assert_eq!(f.java.unlock(name, threads.0), Some(1));
    let (woken, got) = join_all(vec![ours], Duration::from_secs(30), "our waiter").remove(0);
    assert!(
        got && woken - released < QUICK,
        "ours woken {:?} after Java's release",
        woken - released
    );

    let guard = f.ours.lock(name).lock().unwrap();
    let before = f.java.commands_sent();
    let java = {
        let java = f.java.clone();
        let name = name.to_string();
        on_thread(move || java.try_lock(&name, threads.1, Duration::from_secs(20), JAVA_LEASE))
    };
    await_java_parked(&f.java, before);
    let released = Instant::now();
    drop(guard);
    let (woken, got) = join_all(vec![java], Duration::from_secs(30), "Java's waiter").remove(0);
    assert!(
        got && woken - released < QUICK,
        "Java woken {:?} after our release",
        woken - released
    );
    assert_eq!(f.java.unlock(name, threads.1), Some(1));
}

/// Our waiting thread sends nothing while nothing happens.
fn our_waiter_sends_nothing_while_it_waits(f: &Fleet) {
    let name = unique("quiet");
    assert!(f.java.try_lock(&name, 3, Duration::ZERO, JAVA_LEASE));
    let waiting = {
        let lock = f.ours.lock(&name);
        on_thread(move || {
            lock.try_lock(Duration::from_secs(20), None)
                .unwrap()
                .is_some()
        })
    };
    assert!(eventually(Duration::from_secs(5), || f
        .ours
        .stats()
        .waiting_threads
        == 1));
    thread::sleep(Duration::from_millis(300));
    let before = (f.script_calls)();
    thread::sleep(Duration::from_secs(2));
    assert_eq!((f.script_calls)(), before, "a waiting thread sent commands");
    assert_eq!(f.java.unlock(&name, 3), Some(1));
    assert!(
        join_all(vec![waiting], Duration::from_secs(30), "waiter")
            .remove(0)
            .1
    );
}

/// A force-unlock on the Java side is reported to our holder, by renewal and the hook.
fn a_java_force_unlock_is_reported_lost(f: &Fleet, watchdog: Duration) {
    let name = unique("forced");
    let guard = f.ours.lock(&name).lock().unwrap();
    let before = f.lost.load(Ordering::SeqCst);
    assert!(f.java.force_unlock(&name));
    assert!(eventually(watchdog + Duration::from_secs(3), || guard.is_lost()));
    assert!(eventually(Duration::from_secs(3), || f
        .lost
        .load(Ordering::SeqCst)
        > before));
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
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
            .fenced_try_lock(&name, 4, Duration::ZERO, JAVA_LEASE)
            .unwrap() as u64;
        assert!(java > last, "Java's token {java} after ours {last}");
        last = java;
        assert_eq!(f.java.unlock(&name, 4), Some(1));
    }
}

/// The fair lock serves both sides in arrival order.
fn fair_lock_order_across_both_sides(f: &Fleet) {
    let name = unique("fair");
    let lock = f.ours.fair_lock(&name);
    let first = lock.lock().unwrap();
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..4u64 {
        let order = order.clone();
        if i % 2 == 0 {
            let java = f.java.clone();
            let name = name.clone();
            waiters.push(thread::spawn(move || {
                assert!(java.fair_try_lock(&name, 10 + i, Duration::from_secs(30), JAVA_LEASE));
                order.lock().push(i);
                thread::sleep(Duration::from_millis(20));
                assert_eq!(java.fair_unlock(&name, 10 + i), Some(1));
            }));
        } else {
            let lock = lock.clone();
            waiters.push(thread::spawn(move || {
                let guard = lock
                    .try_lock(Duration::from_secs(30), None)
                    .unwrap()
                    .unwrap();
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
        assert!(eventually(Duration::from_secs(5), || queued() == i as usize + 1));
    }
    drop(first);
    join_all(waiters, Duration::from_secs(60), "fair waiters");
    assert_eq!(*order.lock(), vec![0, 1, 2, 3]);
}

/// The count-down latch opens both ways.
fn latch_opens_both_ways(f: &Fleet) {
    let name = unique("latch");
    let latch = f.ours.count_down_latch(&name);
    assert!(f.java.latch_try_set_count(&name, 2));
    assert_eq!(latch.count().unwrap(), 2);
    let ours = {
        let latch = latch.clone();
        on_thread(move || latch.wait(Duration::from_secs(20)).unwrap())
    };
    assert!(eventually(Duration::from_secs(5), || f
        .ours
        .stats()
        .waiting_threads
        == 1));
    f.java.latch_count_down(&name);
    thread::sleep(Duration::from_millis(100));
    let opened = Instant::now();
    f.java.latch_count_down(&name);
    let (when, open) = join_all(vec![ours], Duration::from_secs(30), "our waiter").remove(0);
    assert!(open && when - opened < QUICK);

    assert!(latch.try_set_count(1).unwrap());
    let before = f.java.commands_sent();
    let java = {
        let java = f.java.clone();
        let name = name.clone();
        on_thread(move || java.latch_await(&name, Duration::from_secs(20)))
    };
    await_java_parked(&f.java, before);
    let opened = Instant::now();
    assert_eq!(latch.count_down().unwrap(), 0);
    let (when, open) = join_all(vec![java], Duration::from_secs(30), "Java's waiter").remove(0);
    assert!(open && when - opened < QUICK);
}

/// The spin lock excludes and is excluded by Java's, both ways.
fn spin_lock_both_ways(f: &Fleet) {
    let name = unique("spin");
    assert!(f.java.spin_try_lock(&name, 5, Duration::ZERO, JAVA_LEASE));
    let spin = f.ours.spin_lock(&name);
    assert!(
        spin.try_lock(Duration::from_millis(100), None)
            .unwrap()
            .is_none()
    );
    assert_eq!(f.java.spin_unlock(&name, 5), Some(1));
    let guard = spin
        .try_lock(Duration::from_secs(5), None)
        .unwrap()
        .unwrap();
    assert!(
        !f.java
            .spin_try_lock(&name, 5, Duration::from_millis(100), JAVA_LEASE)
    );
    drop(guard);
    assert!(
        f.java
            .spin_try_lock(&name, 5, Duration::from_secs(5), JAVA_LEASE)
    );
    assert_eq!(f.java.spin_unlock(&name, 5), Some(1));
}

/// The multi-lock waits for a member Java holds, and Java's release wakes it. (Java waiting
/// for a member we hold is `releases_wake_the_other_side`: a member is a lock.)
fn multi_lock_over_java_locks(f: &Fleet) {
    let (a, b) = (unique("ma"), unique("mb"));
    assert!(f.java.try_lock(&b, 6, Duration::ZERO, JAVA_LEASE));
    let multi = f.ours.multi_lock(&[&a, &b]);
    let ours = {
        let multi = multi.clone();
        on_thread(move || {
            multi
                .try_lock(Duration::from_secs(20), None)
                .unwrap()
                .is_some()
        })
    };
    assert!(eventually(Duration::from_secs(5), || f
        .ours
        .stats()
        .waiting_threads
        == 1));
    let released = Instant::now();
    assert_eq!(f.java.unlock(&b, 6), Some(1));
    let (woken, got) = join_all(vec![ours], Duration::from_secs(30), "multi").remove(0);
    assert!(got && woken - released < QUICK);
}

/// Readers share across both sides while a writer waits; a Java read release leaves our
/// reader; write and read releases wake the other side's writer.
fn read_write_lock_both_ways(f: &Fleet) {
    let name = unique("rw");
    let rw = f.ours.read_write_lock(&name);
    let ours = rw.read().unwrap();
    assert!(f.java.read_try_lock(&name, 1, Duration::ZERO, JAVA_LEASE));
    // A Java writer waits for both readers.
    let before = f.java.commands_sent();
    let java_writer = {
        let java = f.java.clone();
        let name = name.clone();
        on_thread(move || java.write_try_lock(&name, 2, Duration::from_secs(20), JAVA_LEASE))
    };
    await_java_parked(&f.java, before);
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
    // Java's read release leaves our reader in place, its lease intact.
    assert_eq!(f.java.read_unlock(&name, 1), Some(0));
    assert!(!ours.is_lost());
    assert!(f.java.is_locked(&name), "our reader keeps the lock");
    let released = Instant::now();
    drop(ours);
    let (woken, got) =
        join_all(vec![java_writer], Duration::from_secs(30), "Java writer").remove(0);
    assert!(
        got && woken - released < QUICK,
        "Java's writer woken {:?} after our read release",
        woken - released
    );

    // Java writes; our writer waits; Java's write release wakes it.
    let our_writer = {
        let rw = rw.clone();
        on_thread(move || {
            rw.try_write(Duration::from_secs(20), None)
                .unwrap()
                .map(|g| g.fencing_token())
        })
    };
    assert!(eventually(Duration::from_secs(5), || f
        .ours
        .stats()
        .waiting_threads
        == 1));
    thread::sleep(Duration::from_millis(100));
    let released = Instant::now();
    assert_eq!(f.java.write_unlock(&name, 2), Some(1));
    let (woken, token) =
        join_all(vec![our_writer], Duration::from_secs(30), "our writer").remove(0);
    assert!(token.is_some() && woken - released < QUICK);
    // Our writer's turn is over: a Java reader gets in.
    assert!(
        f.java
            .read_try_lock(&name, 3, Duration::from_secs(5), JAVA_LEASE)
    );
    assert_eq!(f.java.read_unlock(&name, 3), Some(1));
}

/// The semaphore's counts agree on both sides, and releases wake the other side.
fn semaphore_both_ways(f: &Fleet) {
    let name = unique("sem");
    let semaphore = f.ours.semaphore(&name);
    semaphore.set_permits(2).unwrap();
    assert_eq!(f.java.permit_available(&name), 2);
    let java_permit = f
        .java
        .permit_try_acquire(&name, Duration::ZERO, JAVA_LEASE)
        .unwrap();
    assert_eq!(semaphore.available().unwrap(), 1);
    let ours = semaphore
        .try_acquire(1, Duration::ZERO, None)
        .unwrap()
        .unwrap();
    assert_eq!(f.java.permit_available(&name), 0);
    // Our waiter is woken by Java's release, Java's by ours.
    let waiting = {
        let semaphore = semaphore.clone();
        on_thread(move || {
            // Kept past the thread (Permits are Send): Java must wait for the last one.
            semaphore
                .try_acquire(1, Duration::from_secs(20), None)
                .unwrap()
        })
    };
    assert!(eventually(Duration::from_secs(5), || f
        .ours
        .stats()
        .waiting_threads
        == 1));
    thread::sleep(Duration::from_millis(100));
    let released = Instant::now();
    assert!(f.java.permit_release(&name, &java_permit));
    let (woken, kept) = join_all(vec![waiting], Duration::from_secs(30), "our waiter").remove(0);
    assert!(
        kept.is_some() && woken - released < QUICK,
        "ours woken {:?} after Java's release",
        woken - released
    );
    assert_eq!(f.java.permit_available(&name), 0);
    let before = f.java.commands_sent();
    let java_waiting = {
        let java = f.java.clone();
        let name = name.clone();
        on_thread(move || java.permit_try_acquire(&name, Duration::from_secs(20), JAVA_LEASE))
    };
    await_java_parked(&f.java, before);
    let released = Instant::now();
    ours.release().unwrap();
    let (woken, got) =
        join_all(vec![java_waiting], Duration::from_secs(30), "Java's waiter").remove(0);
    let id = got.expect("Java got the permit");
    assert!(
        woken - released < QUICK,
        "Java woken {:?} after our release",
        woken - released
    );
    assert!(f.java.permit_release(&name, &id));
    kept.unwrap().release().unwrap();
}

fn suite(f: &Fleet, watchdog: Duration) {
    lock_excludes_both_ways(f);
    releases_wake_the_other_side(f);
    a_name_with_braces_wakes_both_ways(f);
    our_waiter_sends_nothing_while_it_waits(f);
    a_java_force_unlock_is_reported_lost(f, watchdog);
    tokens_rise_across_both_sides(f);
    fair_lock_order_across_both_sides(f);
    latch_opens_both_ways(f);
    spin_lock_both_ways(f);
    multi_lock_over_java_locks(f);
    read_write_lock_both_ways(f);
    semaphore_both_ways(f);
}

const WATCHDOG: Duration = Duration::from_secs(3);

#[test]
fn with_a_java_service_on_one_server() {
    let server = support::RedisServer::start();
    let builder = Client::builder(&server.url()).watchdog_timeout(WATCHDOG);
    let admin = parking_lot::Mutex::new(server.admin());
    let calls = move || script_calls(&mut admin.lock());
    suite(
        &Fleet::new(builder, Jvm::new(&server.url()), calls),
        WATCHDOG,
    );
}

/// EVALSHA and EVAL calls a server has run.
fn script_calls(admin: &mut redis::Connection) -> u64 {
    support::command_calls(admin, "evalsha") + support::command_calls(admin, "eval")
}

#[test]
fn with_a_java_service_under_sentinel() {
    let setup = support::topology::Sentinel::start();
    let urls = setup.sentinel_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let builder = Client::sentinel_builder(&urls, support::topology::Sentinel::NAME)
        .watchdog_timeout(WATCHDOG);
    let master = setup.master_port();
    let admin = parking_lot::Mutex::new(setup.data_connection(master).unwrap());
    let calls = move || script_calls(&mut admin.lock());
    // Java under Sentinel talks to the master, with PUBLISH/SUBSCRIBE (Redisson's choice
    // everywhere but a Cluster).
    suite(
        &Fleet::new(builder, Jvm::new(&setup.master_url()), calls),
        WATCHDOG,
    );
}

/// Sharded pub/sub: on a Redis 7 Cluster both sides SPUBLISH and SSUBSCRIBE.
#[test]
fn with_a_java_service_on_a_cluster() {
    let cluster = support::topology::Cluster::start();
    let seeds = cluster.seed_urls();
    let urls: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let builder = Client::cluster_builder(&urls).watchdog_timeout(WATCHDOG);
    let masters: Vec<_> = cluster
        .master_ports()
        .into_iter()
        .map(|port| support::topology::connect(port, None).unwrap())
        .collect();
    let admins = parking_lot::Mutex::new(masters);
    let calls = move || admins.lock().iter_mut().map(script_calls).sum();
    suite(&Fleet::new(builder, Jvm::cluster(&seeds), calls), WATCHDOG);
}

/// Ours over TLS, Java on the same server's plain port: what they share is in Redis.
#[cfg(feature = "tls")]
#[test]
fn with_a_java_service_over_tls() {
    let server = support::tls::TlsServer::start(false);
    let builder = Client::builder(&server.url())
        .tls_certificates(support::tls::trusting(&server.certs.ca, None))
        .watchdog_timeout(WATCHDOG);
    let admin = parking_lot::Mutex::new(server.server.admin());
    let calls = move || script_calls(&mut admin.lock());
    let java = Jvm::new(&server.server.url());
    suite(&Fleet::new(builder, java, calls), WATCHDOG);
}

/// A Redlock over clients in Redisson's layout takes each master's RLock hash, as Java's
/// `RedissonRedLock` over `getLock(n)` of each master does: the two exclude each other by
/// majority.
#[test]
fn a_redlock_excludes_javas_redlock_over_the_same_masters() {
    let servers: Vec<_> = (0..3).map(|_| support::RedisServer::start()).collect();
    let clients = servers
        .iter()
        .map(|s| {
            Client::builder(&s.url())
                .layout(Layout::Redisson)
                .build()
                .unwrap()
        })
        .collect();
    let ours = redlatch::RedlockClient::new(clients).unwrap();
    let javas: Vec<Jvm> = servers.iter().map(|s| Jvm::new(&s.url())).collect();
    let name = unique("red");
    // Java holds a majority (two masters of three): ours cannot.
    for java in &javas[..2] {
        assert!(java.try_lock(&name, 1, Duration::ZERO, JAVA_LEASE));
    }
    let lock = ours.lock(&name);
    assert!(
        lock.try_lock(Duration::from_millis(200), None)
            .unwrap()
            .is_none()
    );
    for java in &javas[..2] {
        assert_eq!(java.unlock(&name, 1), Some(1));
    }
    let guard = lock
        .try_lock(Duration::from_secs(5), None)
        .unwrap()
        .unwrap();
    // Now Java gets at most the one master ours does not hold: no majority.
    let taken = javas
        .iter()
        .filter(|java| java.try_lock(&name, 2, Duration::ZERO, JAVA_LEASE))
        .count();
    assert!(
        taken < 2,
        "Java took {taken} masters while ours held the Redlock"
    );
    drop(guard);
}
