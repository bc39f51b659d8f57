//! The first pieces of the safety checker (issue 4): threads in several clients take turns
//! on locks and write to a protected resource with their fencing tokens while faults are
//! injected.
//! - Faults that keep the lock state (killed command and pub/sub connections, SCRIPT FLUSH,
//!   CLIENT PAUSE shorter than the lease): no overlap, no rejected write, no guard reported
//!   lost, no error, nothing hung.
//! - Faults that lose it (kill -9 and restart without persistence, SIGSTOP of the server past
//!   the watchdog timeout): every overlap and every rejected write belongs to a holder that
//!   was told its lock was lost, and nothing hangs.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlatch::Client;
use support::RedisServer;

/// The protected resource: accepts a write only with a token at least the last accepted one
/// for that resource (the same token again is the same holder retrying a write whose reply
/// a fault cut off), and counts what it accepted and rejected.
const FENCED_WRITE: &str = r"
local last = tonumber(redis.call('get', KEYS[1]) or '0')
local token = tonumber(ARGV[1])
if token == last then
  return 1
end
if token < last then
  redis.call('incr', KEYS[3])
  return 0
end
redis.call('set', KEYS[1], token)
redis.call('incr', KEYS[2])
return 1
";

#[test]
fn fenced_writes_stay_safe_under_faults_that_keep_the_lock_state() {
    let server = RedisServer::start();
    let url = server.url();
    const CLIENTS: usize = 3;
    const THREADS: usize = 3;
    const LOCKS: usize = 2;
    let run_for = Duration::from_secs(4);
    let end = Instant::now() + run_for;

    let overlaps = Arc::new(AtomicUsize::new(0));
    let lost = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let inside: Arc<Vec<AtomicUsize>> = Arc::new((0..LOCKS).map(|_| AtomicUsize::new(0)).collect());

    let mut workers = Vec::new();
    for c in 0..CLIENTS {
        let client = Client::builder(&url)
            .watchdog_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        for t in 0..THREADS {
            let (client, url) = (client.clone(), url.clone());
            let (overlaps, lost, errors, done, inside) = (
                overlaps.clone(),
                lost.clone(),
                errors.clone(),
                done.clone(),
                inside.clone(),
            );
            workers.push(thread::spawn(move || {
                let data_client = redis::Client::open(url).unwrap();
                let mut data = data_client.get_connection().unwrap();
                let write = redis::Script::new(FENCED_WRITE);
                for round in 0..100_000usize {
                    if Instant::now() >= end {
                        break;
                    }
                    let which = (c + t + round) % LOCKS;
                    let lock = client.lock(&format!("resource-{which}"));
                    let guard = match lock.try_lock(Duration::from_secs(10), None) {
                        Ok(Some(guard)) => guard,
                        Ok(None) => continue,
                        Err(e) => {
                            eprintln!("acquire failed: {e}");
                            errors.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                    };
                    if inside[which].fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    // The fenced write, on a connection of its own (faults may cut it: retry).
                    for _ in 0..20 {
                        let wrote: redis::RedisResult<i64> = write
                            .key(format!("res:{which}:last"))
                            .key(format!("res:{which}:accepted"))
                            .key(format!("res:{which}:rejected"))
                            .arg(guard.fencing_token())
                            .invoke(&mut data);
                        match wrote {
                            Ok(_) => break,
                            Err(_) => {
                                thread::sleep(Duration::from_millis(20));
                                if let Ok(con) = data_client.get_connection() {
                                    data = con;
                                }
                            }
                        }
                    }
                    inside[which].fetch_sub(1, Ordering::SeqCst);
                    if guard.is_lost() {
                        lost.fetch_add(1, Ordering::SeqCst);
                    }
                    match guard.unlock() {
                        Ok(()) => {}
                        Err(redlatch::Error::LockLost { .. }) => {
                            lost.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => {
                            eprintln!("release failed: {e}");
                            errors.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                done.fetch_add(1, Ordering::SeqCst);
            }));
        }
    }

    // Faults, one at a time, until the workers are done.
    let mut admin = server.admin();
    let faults = [
        vec!["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
        vec!["CLIENT", "KILL", "TYPE", "pubsub"],
        vec!["SCRIPT", "FLUSH"],
        vec!["CLIENT", "PAUSE", "300", "WRITE"],
        vec!["CLIENT", "PAUSE", "300", "ALL"],
    ];
    let mut injected = 0;
    let mut i = 0;
    while Instant::now() < end && i < 1_000 {
        thread::sleep(Duration::from_millis(150));
        let _: redis::RedisResult<redis::Value> = redis::cmd(faults[i % faults.len()][0])
            .arg(&faults[i % faults.len()][1..])
            .query(&mut admin);
        injected += 1;
        i += 1;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for w in workers {
        assert!(Instant::now() < deadline, "a worker hung");
        w.join().unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), CLIENTS * THREADS);

    let mut accepted = 0;
    let mut rejected = 0;
    for which in 0..LOCKS {
        accepted += redis::cmd("GET")
            .arg(format!("res:{which}:accepted"))
            .query::<Option<i64>>(&mut admin)
            .unwrap()
            .unwrap_or(0);
        rejected += redis::cmd("GET")
            .arg(format!("res:{which}:rejected"))
            .query::<Option<i64>>(&mut admin)
            .unwrap()
            .unwrap_or(0);
    }
    eprintln!("{injected} faults, {accepted} fenced writes accepted");
    assert!(
        injected >= 10 && accepted > 50,
        "too little happened: {injected} faults, {accepted} writes"
    );
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    assert_eq!(rejected, 0, "a fenced write was rejected");
    assert_eq!(lost.load(Ordering::SeqCst), 0, "a guard was reported lost");
    assert_eq!(errors.load(Ordering::SeqCst), 0, "unexpected errors");
}

/// One critical section as the checker saw it.
struct Section {
    /// Another holder entered while this one was still inside.
    overtaken: Arc<std::sync::atomic::AtomicBool>,
    rejected: bool,
    reported_lost: bool,
    /// What the holder saw, for the failure message.
    seen: String,
}

#[test]
fn every_overlap_under_faults_that_lose_the_lock_state_is_reported() {
    use parking_lot::Mutex;
    use std::sync::atomic::AtomicBool;

    let mut server = RedisServer::start();
    // The protected resource is another system: it does not restart with the lock server.
    let resource = RedisServer::start();
    let url = server.url();
    const CLIENTS: usize = 3;
    const THREADS: usize = 2;
    let end = Instant::now() + Duration::from_secs(6);
    let watchdog = Duration::from_millis(900);

    // Who is inside the resource now, and every finished critical section.
    let insiders: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::new(Mutex::new(Vec::new()));
    let sections: Arc<Mutex<Vec<Section>>> = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for _ in 0..CLIENTS {
        let client = Client::builder(&url)
            .watchdog_timeout(watchdog)
            .response_timeout(Duration::from_millis(500))
            .build()
            .unwrap();
        for _ in 0..THREADS {
            let (lock, resource_url) = (client.lock("resource"), resource.url());
            let (insiders, sections) = (insiders.clone(), sections.clone());
            workers.push(thread::spawn(move || {
                let data_client = redis::Client::open(resource_url).unwrap();
                let write = redis::Script::new(FENCED_WRITE);
                for _ in 0..100_000 {
                    if Instant::now() >= end {
                        break;
                    }
                    let Ok(Some(guard)) = lock.try_lock(Duration::from_secs(3), None) else {
                        thread::sleep(Duration::from_millis(20)); // Redis is down: expected
                        continue;
                    };
                    let me = Arc::new(AtomicBool::new(false));
                    {
                        let mut inside = insiders.lock();
                        for other in inside.iter() {
                            other.store(true, Ordering::SeqCst);
                        }
                        inside.push(me.clone());
                    }
                    // Hold for a while, so that faults land inside critical sections.
                    thread::sleep(Duration::from_millis(300));
                    let rejected = data_client
                        .get_connection_with_timeout(Duration::from_millis(500))
                        .and_then(|mut con| {
                            write
                                .key("res:last")
                                .key("res:accepted")
                                .key("res:rejected")
                                .arg(guard.fencing_token())
                                .invoke::<i64>(&mut con)
                        })
                        .is_ok_and(|accepted| accepted == 0);
                    insiders.lock().retain(|x| !Arc::ptr_eq(x, &me));
                    let lost_at_end = guard.is_lost();
                    let released = guard.unlock();
                    sections.lock().push(Section {
                        overtaken: me,
                        rejected,
                        reported_lost: lost_at_end
                            || matches!(released, Err(redlatch::Error::LockLost { .. })),
                        seen: format!("lost at end {lost_at_end}, release {released:?}"),
                    });
                }
            }));
        }
    }

    // Faults that lose the lock state: kill -9 and restart; SIGSTOP past the watchdog.
    let mut faults = 0;
    while Instant::now() + Duration::from_secs(2) < end && faults < 6 {
        thread::sleep(Duration::from_millis(500));
        if faults % 2 == 0 {
            server.restart();
        } else {
            let pid = server.pid().to_string();
            let signal = |sig: &str| {
                std::process::Command::new("kill")
                    .args([sig, &pid])
                    .status()
                    .unwrap()
            };
            signal("-STOP");
            thread::sleep(watchdog + Duration::from_millis(400));
            signal("-CONT");
        }
        faults += 1;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    for w in workers {
        assert!(Instant::now() < deadline, "a worker hung");
        w.join().unwrap();
    }

    let sections = sections.lock();
    let unreported: Vec<_> = sections
        .iter()
        .filter(|s| (s.overtaken.load(Ordering::SeqCst) || s.rejected) && !s.reported_lost)
        .collect();
    let overtaken = sections
        .iter()
        .filter(|s| s.overtaken.load(Ordering::SeqCst))
        .count();
    eprintln!(
        "{faults} faults, {} critical sections, {overtaken} overtaken, {} reported lost",
        sections.len(),
        sections.iter().filter(|s| s.reported_lost).count()
    );
    assert!(faults >= 3 && sections.len() > 10, "too little happened");
    assert!(
        unreported.is_empty(),
        "overlaps or rejected writes never reported: {:?}",
        unreported
            .iter()
            .map(|s| (s.rejected, &s.seen))
            .collect::<Vec<_>>()
    );
}
