//! redlatch in `Layout::Redisson` and the real Redisson (`support::java`) in one fleet, on
//! one server: how they share a contended lock, and what each side meets when the other
//! fails, when Redis restarts and when pub/sub connections are killed.
//!
//! Hold intervals are CLOCK_MONOTONIC on both sides (`monotonic_ns`, Java's `nanoTime`), each
//! taken inside the hold, so two holders at once show as overlapping intervals. A fleet must
//! show none, and so must the short fleet that follows each fault. Where a fault does make
//! two holders (a restart without persistence loses the lock under its holder), the test
//! checks that our holder is told (`on_lock_lost`, `check()`, `unlock` answering `LockLost`)
//! before it releases, the promise `tests/support/checker.rs` checks among our own clients.
//! A Java holder is never told: Redisson has no lost signal (its watchdog stops renewing and
//! says nothing), so the test prints what Java answers when asked.
//!
//! The tests run one at a time (`SERIAL`): the fleet's timing must not share the two cores
//! with another test's JVM. `REDLATCH_FLEET_SECS` sets the fleet's length (60 s unset).

mod support;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redlatch::{Client, Error, Layout};
use support::java::{Deployment, JavaService, LoopReport, LoopSpec, NO_LEASE, monotonic_ns};
use support::{RedisServer, eventually, unique};

static SERIAL: Mutex<()> = Mutex::new(());

/// Threads a side in the fleet.
const THREADS: usize = 8;
/// How long each acquisition holds the lock.
const HOLD: Duration = Duration::from_millis(1);
/// The bound on any one wait in a fleet (both sides: `try_lock`/`tryLock` with it), so that a
/// starved thread shows as a timeout rather than a hang.
const WAIT_BOUND: Duration = Duration::from_secs(20);

/// What the fleet must show: each side at least [`MIN_SHARE`] of all acquisitions, and no
/// single acquisition on either side waiting past [`MAX_WAIT`]. Redisson's own measure, two
/// Java services of 8 threads on one lock (`java_services_share_a_lock`, run with
/// `--ignored`), shared 65/35 with waits up to 2.2 s; the mixed fleet shared 96.5/3.5 before
/// the fix (`engine::turn`), Java's waits up to 5.3 s, and about 53/47 after it, every wait
/// under 0.9 s (60 s runs, the figures in the commit that added this file). A quarter is
/// what the smaller of two Java services gets with room to spare; 3 s is Redisson's own
/// longest wait with room to spare, and below what Java's threads waited before the fix.
const MIN_SHARE: f64 = 0.25;
const MAX_WAIT: Duration = Duration::from_secs(3);

/// How long the fleet runs: `REDLATCH_FLEET_SECS`, 60 s when unset.
fn fleet_duration() -> Duration {
    let secs = std::env::var("REDLATCH_FLEET_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    Duration::from_secs(secs)
}

fn redisson_client(url: &str) -> Client {
    Client::builder(url)
        .layout(Layout::Redisson)
        .build()
        .unwrap()
}

/// The losses a client announced: each lock's name, and when (CLOCK_MONOTONIC ns).
type Losses = Arc<Mutex<Vec<(String, u64)>>>;

/// A client in Redisson's layout whose watchdog lease is `watchdog`, and whose losses are
/// noted as they are announced.
fn watched_client(url: &str, watchdog: Duration) -> (Client, Losses) {
    let losses = Losses::default();
    let seen = losses.clone();
    let client = Client::builder(url)
        .layout(Layout::Redisson)
        .watchdog_timeout(watchdog)
        .on_lock_lost(move |lost| seen.lock().push((lost.name.clone(), monotonic_ns())))
        .build()
        .unwrap();
    (client, losses)
}

fn nanos(ns: u64) -> Duration {
    Duration::from_nanos(ns)
}

// ---------------------------------------------------------------------------------------
// Hold intervals of both sides

/// One hold of ours: its interval (CLOCK_MONOTONIC ns), and whether its holder was told it
/// was lost.
#[derive(Clone, Copy, Debug)]
struct OurHold {
    start: u64,
    end: u64,
    told: bool,
}

/// One Rust thread's acquisitions.
#[derive(Default)]
struct RustThread {
    holds: Vec<OurHold>,
    waits: Vec<Duration>,
    timeouts: u64,
    errors: Vec<String>,
}

/// Takes `lock` in a loop until `until`: `try_lock(WAIT_BOUND)`, hold `hold`, release. An
/// error (Redis restarting) is noted and the loop goes on after a short pause.
fn rust_loop(lock: redlatch::Lock, until: Instant, hold: Duration) -> RustThread {
    let mut me = RustThread::default();
    while Instant::now() < until {
        let t0 = monotonic_ns();
        let guard = match lock.try_lock(WAIT_BOUND, None) {
            Ok(Some(guard)) => guard,
            Ok(None) => {
                me.timeouts += 1;
                continue;
            }
            Err(e) => {
                me.errors.push(e.to_string());
                thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        let start = monotonic_ns();
        thread::sleep(hold);
        let end = monotonic_ns();
        let mut told = guard.is_lost();
        match guard.unlock() {
            Ok(()) => {}
            Err(Error::LockLost { .. }) => told = true,
            Err(e) => me.errors.push(format!("unlock: {e}")),
        }
        me.holds.push(OurHold { start, end, told });
        me.waits.push(nanos(start - t0));
    }
    me
}

/// `threads` Rust threads of `client` and a Java loop of `threads` threads on lock `name`
/// for `duration`, each holding `hold` with no pause between holds: what both sides saw.
fn mixed_fleet(
    java: &JavaService,
    client: &Client,
    name: &str,
    threads: usize,
    duration: Duration,
    hold: Duration,
) -> (Vec<RustThread>, LoopReport) {
    let spec = LoopSpec {
        hold,
        wait_ms: WAIT_BOUND.as_millis() as i64,
        intervals: true,
        ..LoopSpec::new(name, threads, duration)
    };
    let java_loop = java.start_loop(&spec);
    let until = Instant::now() + duration;
    let rust: Vec<_> = (0..threads)
        .map(|_| {
            let lock = client.lock(name);
            thread::spawn(move || rust_loop(lock, until, hold))
        })
        .collect();
    let rust = support::join_all(rust, duration + WAIT_BOUND * 2, "a Rust thread");
    let report = LoopReport::parse(&java_loop.value(duration + WAIT_BOUND * 2));
    (rust, report)
}

/// Pairs of holds at once, by whose came first (the stale one) and whose came second.
#[derive(Debug, Default)]
struct Overlaps {
    /// Ours first, and its holder was told it lost the lock; ours first, not told.
    ours_then_java_told: usize,
    ours_then_java_untold: usize,
    java_then_ours: usize,
    among_ours: usize,
    among_java: usize,
}

impl Overlaps {
    fn none(&self) -> bool {
        self.ours_then_java_told
            + self.ours_then_java_untold
            + self.java_then_ours
            + self.among_ours
            + self.among_java
            == 0
    }
}

fn overlaps(rust: &[RustThread], java: &[(u64, u64)]) -> Overlaps {
    // (start, end, Some(our hold) | None for Java's), by start.
    let mut all: Vec<(u64, u64, Option<OurHold>)> = rust
        .iter()
        .flat_map(|t| t.holds.iter().map(|h| (h.start, h.end, Some(*h))))
        .chain(java.iter().map(|&(a, b)| (a, b, None)))
        .collect();
    all.sort_by_key(|&(start, end, _)| (start, end));
    let mut found = Overlaps::default();
    for (i, &(_, end, first)) in all.iter().enumerate() {
        // Every later hold that starts before this one ends overlaps it.
        for &(_, _, second) in all[i + 1..].iter().take_while(|h| h.0 < end) {
            match (first, second) {
                (Some(_), Some(_)) => found.among_ours += 1,
                (Some(ours), None) if ours.told => found.ours_then_java_told += 1,
                (Some(_), None) => found.ours_then_java_untold += 1,
                (None, Some(_)) => found.java_then_ours += 1,
                (None, None) => found.among_java += 1,
            }
        }
    }
    found
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((q * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1);
    sorted[i]
}

// ---------------------------------------------------------------------------------------
// A mixed fleet shares fairly

/// 8 Rust threads and 8 Java threads on one lock, each holding it 1 ms and asking again at
/// once: nobody else ever holds it with them, each side gets at least [`MIN_SHARE`] of the
/// acquisitions (every thread some), and no acquisition waits past [`MAX_WAIT`].
///
/// Before the fix (`engine::turn`) ours took 96.5% of the acquisitions and a Java thread
/// waited up to 5.3 s (p99 3.8 s): a release of ours handed the lock to a thread of ours
/// three times in four, and at the fourth the thread that released, or one of ours woken in
/// process, reached Redis before the Java waiter that the same message woke.
#[test]
fn a_mixed_fleet_shares_fairly() {
    let _serial = SERIAL.lock();
    let server = RedisServer::start();
    let java = JavaService::single(&server.url());
    let client = redisson_client(&server.url());
    let name = unique("fleet");
    let duration = fleet_duration();

    // The JVM's lock path warmed up before the clock starts.
    java.run_loop(
        &LoopSpec::new(&unique("warm"), 2, Duration::from_millis(500)),
        Duration::from_secs(30),
    );

    let (rust, report) = mixed_fleet(&java, &client, &name, THREADS, duration, HOLD);

    // Exclusion: no two holds at once, across both sides.
    let found = overlaps(&rust, &report.intervals);
    assert!(found.none(), "two holders at once: {found:?}");
    let errors: Vec<&String> = rust.iter().flat_map(|t| &t.errors).collect();
    assert!(errors.is_empty(), "our errors: {errors:?}");
    assert_eq!(report.errors, 0, "Java's errors: {:?}", report.first_error);
    let told = rust
        .iter()
        .flat_map(|t| &t.holds)
        .filter(|h| h.told)
        .count();
    assert_eq!(told, 0, "holds of ours lost in a fleet without faults");

    // Shares, counted over the time both sides ran.
    let java_first = report.intervals.iter().map(|i| i.0).min().unwrap_or(0);
    let rust_first = rust
        .iter()
        .flat_map(|t| t.holds.iter().map(|h| h.start))
        .min()
        .unwrap_or(0);
    let java_last = report.intervals.iter().map(|i| i.1).max().unwrap_or(0);
    let rust_last = rust
        .iter()
        .flat_map(|t| t.holds.iter().map(|h| h.end))
        .max()
        .unwrap_or(0);
    let (from, to) = (java_first.max(rust_first), java_last.min(rust_last));
    let ours = rust
        .iter()
        .flat_map(|t| &t.holds)
        .filter(|h| h.start >= from && h.start < to)
        .count();
    let theirs = report
        .intervals
        .iter()
        .filter(|i| i.0 >= from && i.0 < to)
        .count();
    let total = (ours + theirs).max(1) as f64;
    let mut rust_waits: Vec<Duration> = rust.iter().flat_map(|t| t.waits.clone()).collect();
    rust_waits.sort();
    let rust_per_thread: Vec<usize> = rust.iter().map(|t| t.holds.len()).collect();
    let rust_timeouts: u64 = rust.iter().map(|t| t.timeouts).sum();
    let rust_max = rust_waits.last().copied().unwrap_or_default();
    eprintln!(
        "fleet over {:?} (both running {:?}): ours {ours} ({:.1}%), Java's {theirs} ({:.1}%)\n  \
         ours:   per thread {rust_per_thread:?}, wait p50 {:?} p99 {:?} max {rust_max:?}, \
         timeouts {rust_timeouts}\n  \
         Java's: per thread {:?}, wait p50 {:?} p99 {:?} max {:?}, timeouts {}\n  \
         Redisson {} on Java {}",
        duration,
        nanos(to.saturating_sub(from)),
        100.0 * ours as f64 / total,
        100.0 * theirs as f64 / total,
        percentile(&rust_waits, 0.5),
        percentile(&rust_waits, 0.99),
        report.per_thread,
        report.wait_p50,
        report.wait_p99,
        report.wait_max,
        report.timeouts,
        java.redisson_version,
        java.java_version,
    );
    assert!(
        ours as f64 / total >= MIN_SHARE,
        "our share {ours} of {total} is below {MIN_SHARE}"
    );
    assert!(
        theirs as f64 / total >= MIN_SHARE,
        "Java's share {theirs} of {total} is below {MIN_SHARE}"
    );
    assert!(
        rust_per_thread.iter().all(|&n| n > 0),
        "a Rust thread never got the lock: {rust_per_thread:?}"
    );
    assert_eq!(report.per_thread.len(), THREADS);
    assert!(
        report.per_thread.iter().all(|&n| n > 0),
        "a Java thread never got the lock: {:?}",
        report.per_thread
    );
    assert_eq!(
        rust_timeouts, 0,
        "a Rust thread waited {WAIT_BOUND:?} in vain"
    );
    assert_eq!(
        report.timeouts, 0,
        "a Java thread waited {WAIT_BOUND:?} in vain"
    );
    assert!(rust_max <= MAX_WAIT, "a Rust thread waited {rust_max:?}");
    assert!(
        report.wait_max <= MAX_WAIT,
        "a Java thread waited {:?}",
        report.wait_max
    );
}

/// What Redisson itself does: two Java services, 8 threads each, on one lock as in
/// [`a_mixed_fleet_shares_fairly`]. The baseline its bounds were set against; it checks
/// nothing but exclusion and that both services got the lock.
#[test]
#[ignore = "a measurement for the fleet's bounds (another minute with two JVMs), not a check of ours: run with --ignored --nocapture"]
fn java_services_share_a_lock() {
    let _serial = SERIAL.lock();
    let server = RedisServer::start();
    let services = [
        JavaService::single(&server.url()),
        JavaService::single(&server.url()),
    ];
    let name = unique("pair");
    let duration = fleet_duration();
    let spec = LoopSpec {
        hold: HOLD,
        wait_ms: WAIT_BOUND.as_millis() as i64,
        intervals: true,
        ..LoopSpec::new(&name, THREADS, duration)
    };
    let loops: Vec<_> = services.iter().map(|s| s.start_loop(&spec)).collect();
    let reports: Vec<LoopReport> = loops
        .into_iter()
        .map(|p| LoopReport::parse(&p.value(duration + WAIT_BOUND * 2)))
        .collect();
    let total: u64 = reports.iter().map(|r| r.acquisitions).sum();
    for (n, r) in reports.iter().enumerate() {
        eprintln!(
            "service {n}: {} ({:.1}%), per thread {:?}, wait p50 {:?} p99 {:?} max {:?}, \
             timeouts {}",
            r.acquisitions,
            100.0 * r.acquisitions as f64 / total.max(1) as f64,
            r.per_thread,
            r.wait_p50,
            r.wait_p99,
            r.wait_max,
            r.timeouts
        );
        assert!(r.acquisitions > 0);
    }
    let all: Vec<(u64, u64)> = reports
        .iter()
        .flat_map(|r| r.intervals.iter().copied())
        .collect();
    let found = overlaps(&[], &all);
    assert!(found.none(), "two Java holders at once: {found:?}");
}

// ---------------------------------------------------------------------------------------
// Failures the real client meets

/// Redisson's channel for lock `name`.
fn channel(name: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}")
}

/// How many connections listen on lock `name`'s channel (one per client with a waiter).
fn listeners(admin: &mut redis::Connection, name: &str) -> u64 {
    let (_, n): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel(name))
        .query(admin)
        .unwrap();
    n
}

fn await_listeners(admin: &mut redis::Connection, name: &str, n: u64) {
    let mut seen = 0;
    assert!(
        eventually(Duration::from_secs(10), || {
            seen = listeners(admin, name);
            seen == n
        }),
        "{seen} listeners on {name}'s channel, not {n}"
    );
}

/// The ids of the pub/sub connections whose client name passes `which`.
fn pubsub_connections(admin: &mut redis::Connection, which: impl Fn(&str) -> bool) -> Vec<u64> {
    support::java::client_list(admin, Some("pubsub"), which, "id")
        .iter()
        .filter_map(|id| id.parse().ok())
        .collect()
}

fn java_pubsub(admin: &mut redis::Connection) -> Vec<u64> {
    pubsub_connections(admin, |name| name == support::java::CLIENT_NAME)
}

fn our_pubsub(admin: &mut redis::Connection, client: &Client) -> Vec<u64> {
    let ours = format!("redlatch:{}", client.id());
    pubsub_connections(admin, |name| name == ours)
}

/// `CLIENT KILL ID` each of `ids`; how many were killed.
fn kill_clients(admin: &mut redis::Connection, ids: &[u64]) -> usize {
    ids.iter()
        .filter(|id| {
            redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(**id)
                .query::<u64>(admin)
                .is_ok_and(|n| n == 1)
        })
        .count()
}

/// Entry point of the child process in `our_holder_killed_frees_the_lock_for_java_at_its_lease_end`;
/// does nothing unless started by it.
#[test]
#[ignore = "run as a child process by another test"]
fn child_holds_a_redisson_lock_until_killed() {
    let Some([url, name, lease]) = support::child_env([
        "REDLATCH_CHILD_URL",
        "REDLATCH_CHILD_LOCK",
        "REDLATCH_CHILD_LEASE_MS",
    ]) else {
        return;
    };
    let client = redisson_client(&url);
    let lease = Duration::from_millis(lease.parse().unwrap());
    let guard = client.lock(&name).lock_with_lease(lease).unwrap();
    println!("LOCKED {}", guard.fencing_token());
    thread::sleep(Duration::from_secs(60)); // killed long before
}

/// Our process, holding a lock with a 3 s lease, is killed (SIGKILL): a Java thread that
/// waits with `lock()` gets the lock when the lease ends, not before, and within a second
/// after (it sleeps as long as the lease's PTTL said, then tries again).
#[test]
fn our_holder_killed_frees_the_lock_for_java_at_its_lease_end() {
    let _serial = SERIAL.lock();
    let server = RedisServer::start();
    let java = JavaService::single(&server.url());
    let mut admin = server.admin();
    let name = unique("killed-ours");
    let lease = Duration::from_secs(3);
    let mut child = support::spawn_child_test(
        "child_holds_a_redisson_lock_until_killed",
        &[
            ("REDLATCH_CHILD_URL", server.url()),
            ("REDLATCH_CHILD_LOCK", name.clone()),
            ("REDLATCH_CHILD_LEASE_MS", lease.as_millis().to_string()),
        ],
    );
    support::read_reported(&mut child, "LOCKED", Duration::from_secs(30));

    let waiting = java.lock("lock", &name, 1, NO_LEASE);
    await_listeners(&mut admin, &name, 1);
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = monotonic_ns();
    let left = support::pttl(&mut admin, &name);
    assert!(left > 0, "the lock is gone at once: PTTL {left}");
    let lease_end = killed + left as u64 * 1_000_000;
    // Not before the lease's end (the PTTL read may lag the kill by a few ms).
    let early =
        nanos(lease_end.saturating_sub(monotonic_ns())).saturating_sub(Duration::from_millis(100));
    assert!(
        waiting.poll(early).is_none(),
        "Java got the lock before our lease ended"
    );
    // Nor much after, and without hanging.
    let reply = waiting.wait(lease + Duration::from_secs(10));
    let got = monotonic_ns();
    reply.unwrap_or_else(|e| panic!("Java's lock() threw {e}\n{}", java.log()));
    let after = got as i64 - lease_end as i64;
    eprintln!(
        "our holder killed with {left} ms of its lease left: Java had the lock {} ms after \
         the lease's end",
        after as f64 / 1e6
    );
    assert!(
        after < 1_000_000_000,
        "Java got the lock {} ms after our lease ended",
        after / 1_000_000
    );
    assert!(java.is_held("lock", &name, 1));
    let ours = redisson_client(&server.url());
    assert!(
        ours.lock(&name)
            .try_lock(Duration::ZERO, None)
            .unwrap()
            .is_none(),
        "ours took the lock Java holds"
    );
    java.unlock("lock", &name, 1).unwrap();
}

/// A Java service holding a lock with its watchdog (3 s) is killed (SIGKILL): our waiter gets
/// the lock when the watchdog's last lease ends, not before (the watchdog kept it while the
/// JVM lived), and within a second after.
#[test]
fn a_java_holder_killed_frees_the_lock_for_ours_at_its_watchdog_lease_end() {
    let _serial = SERIAL.lock();
    let server = RedisServer::start();
    let watchdog = Duration::from_secs(3);
    let java = JavaService::start_with(Deployment::Single(&server.url()), Some(watchdog));
    let mut admin = server.admin();
    let name = unique("killed-java");
    java.lock("lock", &name, 1, NO_LEASE)
        .value(Duration::from_secs(30));
    let client = redisson_client(&server.url());
    let lock = client.lock(&name);
    let waiter = thread::spawn(move || {
        let guard = lock.try_lock(Duration::from_secs(30), None);
        let got = monotonic_ns();
        (got, guard.map(|g| g.is_some()))
    });
    await_listeners(&mut admin, &name, 1);
    // Past a whole watchdog lease, the live JVM's watchdog keeps it.
    thread::sleep(watchdog + Duration::from_secs(1));
    assert!(
        !waiter.is_finished(),
        "ours got a lock Java's watchdog keeps"
    );

    java.kill();
    let killed = monotonic_ns();
    let left = support::pttl(&mut admin, &name);
    assert!(left > 0, "the lock is gone at once: PTTL {left}");
    let lease_end = killed + left as u64 * 1_000_000;
    thread::sleep(
        nanos(lease_end.saturating_sub(monotonic_ns())).saturating_sub(Duration::from_millis(100)),
    );
    assert!(
        !waiter.is_finished(),
        "ours got the lock before Java's lease ended"
    );
    let (got, taken) =
        support::join_all(vec![waiter], Duration::from_secs(30), "our waiter").remove(0);
    assert!(taken.unwrap(), "our waiter did not get the lock");
    let after = got as i64 - lease_end as i64;
    eprintln!(
        "Java killed with {left} ms of its watchdog lease left: ours had the lock {} ms after \
         the lease's end",
        after as f64 / 1e6
    );
    assert!(
        after < 1_000_000_000,
        "ours got the lock {} ms after Java's lease ended",
        after / 1_000_000
    );
}

/// Retries `attempt` (each bounded by itself) until it answers `Some`, for at most 30 s;
/// how long after `since` it did.
fn back_after(since: Instant, mut attempt: impl FnMut() -> Option<()>) -> Duration {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if attempt().is_some() {
            return since.elapsed();
        }
        assert!(Instant::now() < deadline, "not working again 30 s after");
        thread::sleep(Duration::from_millis(10));
    }
}

/// How long after `since` each side takes a lock again (each its own lock, both at once).
fn both_back(java: &JavaService, client: &Client, since: Instant) -> (Duration, Duration) {
    let lock = client.lock(&unique("back-ours"));
    let ours = thread::spawn(move || {
        back_after(since, || {
            let guard = lock.try_lock(Duration::from_secs(1), None).ok()??;
            guard.unlock().ok()
        })
    });
    let name = unique("back-java");
    let java_back = back_after(since, || {
        let wait = Duration::from_secs(1);
        let taken = java.call(
            2,
            "trylock",
            &[&"lock", &name, &wait.as_millis(), &NO_LEASE],
        );
        (taken.ok()? == "true").then_some(())?;
        java.unlock("lock", &name, 2).ok().map(|_| ())
    });
    let ours_back = support::join_all(vec![ours], Duration::from_secs(40), "ours").remove(0);
    (ours_back, java_back)
}

/// Two threads a side for 2 s on `name`: no two holders at once, and no error.
fn exclusion_holds(java: &JavaService, client: &Client, name: &str) {
    let (rust, report) = mixed_fleet(java, client, name, 2, Duration::from_secs(2), HOLD);
    let found = overlaps(&rust, &report.intervals);
    let acquired: usize = rust.iter().map(|t| t.holds.len()).sum();
    let errors: Vec<&String> = rust.iter().flat_map(|t| &t.errors).collect();
    assert!(
        errors.is_empty() && report.errors == 0,
        "errors: ours {errors:?}, Java's {:?}",
        report.first_error
    );
    assert!(
        acquired > 0 && report.acquisitions > 0,
        "ours {acquired}, Java's {}",
        report.acquisitions
    );
    assert!(found.none(), "two holders at once: {found:?}");
}

/// Redis is killed and restarted without its data, under both sides, three times:
/// - nobody holds the lock: each side takes locks again once the server is back;
/// - ours holds, a Java thread waits: the Java thread gets the lock (the restart lost ours),
///   and our holder is told (`on_lock_lost`, `check()`, `unlock` answering `LockLost`)
///   before it releases, and its release leaves Java's hold alone;
/// - Java holds, ours waits: ours gets the lock (our subscriber wakes its waiters when it
///   reconnects), Java's `unlock` then throws and leaves ours alone. Java's holder is never
///   told (Redisson has no lost signal): that overlap is Redisson's to report, and is printed.
///
/// After each, two threads a side share the lock with no two holders at once. Nothing hangs:
/// every wait is bounded.
#[test]
fn both_sides_recover_from_a_restarted_redis() {
    let _serial = SERIAL.lock();
    let mut server = RedisServer::start();
    let watchdog = Duration::from_secs(3);
    let java = JavaService::start_with(Deployment::Single(&server.url()), Some(watchdog));
    let (client, losses) = watched_client(&server.url(), watchdog);
    let name = unique("restart");
    exclusion_holds(&java, &client, &name);

    // Nobody holds it.
    server.restart();
    let restarted = Instant::now();
    let (ours_back, java_back) = both_back(&java, &client, restarted);
    eprintln!(
        "restart with no hold: ours took a lock again after {ours_back:?}, Java after {java_back:?}"
    );
    exclusion_holds(&java, &client, &name);

    // Ours holds, Java waits.
    let guard = client.lock(&name).lock().unwrap();
    let waiting = java.lock("lock", &name, 1, NO_LEASE);
    let mut admin = server.admin();
    await_listeners(&mut admin, &name, 1);
    losses.lock().clear();
    server.restart();
    let restarted_ns = monotonic_ns();
    // A Java lock() whose attempt met the restart throws (Redisson does not retry a script
    // that is not idempotent: RedisResponseTimeoutException after 3 s, seen once in a few
    // runs); a service calls it again, and so does this one, a bounded number of times.
    let mut thrown = Vec::new();
    let mut reply = waiting.wait(Duration::from_secs(30));
    while let Err(e) = &reply {
        thrown.push(e.split(' ').next().unwrap_or_default().to_string());
        assert!(
            thrown.len() < 5,
            "Java's lock() kept throwing: {thrown:?}\n{}",
            java.log()
        );
        reply = java
            .lock("lock", &name, 1, NO_LEASE)
            .wait(Duration::from_secs(30));
    }
    let java_got = monotonic_ns();
    assert!(
        eventually(Duration::from_secs(15), || !losses.lock().is_empty()),
        "our holder was never told the restart lost its lock"
    );
    let told = losses.lock()[0].1;
    assert!(guard.is_lost() && guard.check().is_err());
    assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
    assert!(
        java.is_held("lock", &name, 1),
        "our release of a lost lock took Java's"
    );
    eprintln!(
        "restart under our hold: Java had the lock {:?} after the restart (its lock() threw \
         {thrown:?} first), our holder was told {:?} after it ({:+.1} ms from Java's having \
         it; check() failed from then on)",
        nanos(java_got - restarted_ns),
        nanos(told - restarted_ns),
        (told as f64 - java_got as f64) / 1e6,
    );
    java.unlock("lock", &name, 1).unwrap();
    admin = server.admin();
    let back = Instant::now();
    let (ours_back, java_back) = both_back(&java, &client, back);
    assert!(ours_back < Duration::from_secs(2) && java_back < Duration::from_secs(2));
    exclusion_holds(&java, &client, &name);

    // Java holds, ours waits.
    java.lock("lock", &name, 1, NO_LEASE)
        .value(Duration::from_secs(30));
    let (got_tx, got_rx) = crossbeam_channel::bounded(1);
    let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(1);
    let lock = client.lock(&name);
    let waiter = thread::spawn(move || {
        let guard = lock.try_lock(Duration::from_secs(30), None).unwrap();
        got_tx.send(monotonic_ns()).unwrap();
        let guard = guard.expect("our waiter got the lock");
        go_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        let still = guard.check().is_ok();
        guard.unlock().unwrap();
        still
    });
    await_listeners(&mut admin, &name, 1);
    server.restart();
    let restarted_ns = monotonic_ns();
    let ours_got = got_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let java_thinks = java.is_held("lock", &name, 1);
    let java_unlock = java.unlock("lock", &name, 1);
    go_tx.send(()).unwrap();
    let still = support::join_all(vec![waiter], Duration::from_secs(30), "our waiter").remove(0);
    assert!(still, "Java's unlock after the restart took our lock");
    assert!(
        java_unlock.is_err(),
        "Java's unlock of a lock the restart lost released ours: {java_unlock:?}"
    );
    eprintln!(
        "restart under Java's hold: ours had the lock {:?} after the restart; Java's \
         isHeldByCurrentThread then said {java_thinks}, its unlock threw {:?} (Redisson tells \
         its holder nothing else)",
        nanos(ours_got - restarted_ns),
        java_unlock
            .unwrap_err()
            .split(' ')
            .next()
            .unwrap_or_default(),
    );
    exclusion_holds(&java, &client, &name);
}

/// A waiter behind a holder of the other side, whose pub/sub connection is killed (its side's
/// alone, by id, or every one with `CLIENT KILL TYPE pubsub`), still gets the lock once the
/// holder releases it: each side subscribes again. The holder's lease is 30 s, so a waiter
/// left to its lease would miss the bound of 2 s by far. The waiter never gets it before the
/// release, and the holder is never told it lost it (it did not).
#[test]
fn a_waiter_whose_pubsub_connection_is_killed_still_gets_the_lock() {
    let _serial = SERIAL.lock();
    let server = RedisServer::start();
    let java = JavaService::single(&server.url());
    let client = redisson_client(&server.url());
    let mut admin = server.admin();
    for all in [false, true] {
        let how = if all { "TYPE pubsub" } else { "ID" };

        // A Java waiter behind our holder.
        let name = unique("pubsub-java-waits");
        let guard = client.lock(&name).lock().unwrap();
        let waiting = java.lock("lock", &name, 1, NO_LEASE);
        await_listeners(&mut admin, &name, 1);
        let killed = Instant::now();
        if all {
            let _: () = redis::cmd("CLIENT")
                .arg(&["KILL", "TYPE", "pubsub"])
                .query(&mut admin)
                .unwrap_or(());
        } else {
            let ids = java_pubsub(&mut admin);
            assert!(
                kill_clients(&mut admin, &ids) > 0,
                "no Java pub/sub connection"
            );
        }
        await_listeners(&mut admin, &name, 1);
        let resubscribed = killed.elapsed();
        assert!(
            waiting.poll(Duration::from_millis(200)).is_none(),
            "Java got a held lock"
        );
        assert!(guard.check().is_ok());
        let released = Instant::now();
        guard.unlock().unwrap();
        let reply = waiting.wait(Duration::from_secs(40));
        let after = released.elapsed();
        reply.unwrap_or_else(|e| panic!("Java's lock() threw {e}\n{}", java.log()));
        eprintln!(
            "Java's pub/sub killed ({how}) while it waited behind ours: subscribed again \
             after {resubscribed:?}; it had the lock {after:?} after our release"
        );
        assert!(
            after < Duration::from_secs(2),
            "Java had the lock {after:?} after the release"
        );
        java.unlock("lock", &name, 1).unwrap();

        // Our waiter behind a Java holder.
        let name = unique("pubsub-ours-waits");
        java.lock("lock", &name, 1, NO_LEASE)
            .value(Duration::from_secs(30));
        let lock = client.lock(&name);
        let waiter = thread::spawn(move || {
            let guard = lock.try_lock(Duration::from_secs(40), None).unwrap();
            let got = Instant::now();
            (got, guard.map(|g| g.unlock().is_ok()))
        });
        await_listeners(&mut admin, &name, 1);
        let killed = Instant::now();
        if all {
            let _: () = redis::cmd("CLIENT")
                .arg(&["KILL", "TYPE", "pubsub"])
                .query(&mut admin)
                .unwrap_or(());
        } else {
            let ids = our_pubsub(&mut admin, &client);
            assert!(
                kill_clients(&mut admin, &ids) > 0,
                "no pub/sub connection of ours"
            );
        }
        await_listeners(&mut admin, &name, 1);
        let resubscribed = killed.elapsed();
        thread::sleep(Duration::from_millis(200));
        assert!(!waiter.is_finished(), "ours got a held lock");
        let released = Instant::now();
        java.unlock("lock", &name, 1).unwrap();
        let (got, released_ok) =
            support::join_all(vec![waiter], Duration::from_secs(45), "our waiter").remove(0);
        assert_eq!(released_ok, Some(true), "our waiter did not get the lock");
        let after = got.saturating_duration_since(released);
        eprintln!(
            "our pub/sub killed ({how}) while ours waited behind Java: subscribed again after \
             {resubscribed:?}; it had the lock {after:?} after Java's release"
        );
        assert!(
            after < Duration::from_secs(2),
            "ours had the lock {after:?} after the release"
        );
    }
}
