//! The lock family at work, each kind in a small scene: a read-write lock guarding a
//! configuration, a semaphore limiting uploads, a count-down latch gathering workers, and a
//! spin lock sharing one lock with a `Lock`.
//!
//! ```text
//! cargo run --example family
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example family
//! ```
//!
//! Without `REDIS_URL` it starts a private `redis-server` (from `PATH`) on a free loopback
//! port and stops it at the end. Each scene checks its kind's promise (never a writer with a
//! reader, never more uploads than permits, nobody through the latch before zero, one holder
//! of the lock at a time) and the program exits non-zero if one breaks.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlatch::Client;

// The test support starts the private redis-server.
#[path = "../tests/support/mod.rs"]
mod support;

fn main() -> ExitCode {
    // RUST_LOG=redlatch=debug shows what the crate logs; warnings are on by default.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    // Declared before the client, so that it is dropped (stopped) after it.
    let (_private, url) = support::RedisServer::unless_redis_url();
    let run = || -> redlatch::Result<Vec<String>> {
        let mut broken = Vec::new();
        broken.extend(read_write_lock(&url)?);
        broken.extend(semaphore(&url)?);
        broken.extend(count_down_latch(&url)?);
        broken.extend(spin_lock(&url)?);
        Ok(broken)
    };
    match run() {
        Ok(broken) if broken.is_empty() => {
            println!("\nevery promise held");
            ExitCode::SUCCESS
        }
        Ok(broken) => {
            for b in broken {
                eprintln!("BROKEN: {b}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Four readers in two clients read a configuration while a writer updates it: readers
/// share, the writer is alone, and readers arriving behind the waiting writer wait for it.
fn read_write_lock(url: &str) -> redlatch::Result<Vec<String>> {
    println!("== ReadWriteLock: 4 readers, 1 writer");
    let name = format!("family-config-{}", std::process::id());
    // +1 per reader inside, +1000 for the writer: a writer must see 1000, a reader < 1000.
    let inside = Arc::new(AtomicI64::new(0));
    let broken = Arc::new(AtomicU32::new(0));
    let started = Instant::now();
    let clients = [Client::open(url)?, Client::open(url)?];
    let mut threads = Vec::new();
    for i in 0..4 {
        let lock = clients[i % 2].read_write_lock(&name);
        let (inside, broken) = (inside.clone(), broken.clone());
        threads.push(thread::spawn(move || -> redlatch::Result<()> {
            for _ in 0..5 {
                let read = lock.read()?;
                if inside.fetch_add(1, Ordering::SeqCst) + 1 >= 1000 {
                    broken.fetch_add(1, Ordering::SeqCst);
                }
                thread::sleep(Duration::from_millis(30));
                inside.fetch_sub(1, Ordering::SeqCst);
                drop(read);
            }
            Ok(())
        }));
    }
    let lock = clients[0].read_write_lock(&name);
    let (inside_w, broken_w) = (inside.clone(), broken.clone());
    threads.push(thread::spawn(move || -> redlatch::Result<()> {
        thread::sleep(Duration::from_millis(50));
        let asked = Instant::now();
        let write = lock.write()?;
        println!(
            "   writer in after {:?} behind the readers, token {}",
            asked.elapsed(),
            write.fencing_token()
        );
        if inside_w.fetch_add(1000, Ordering::SeqCst) != 0 {
            broken_w.fetch_add(1, Ordering::SeqCst);
        }
        thread::sleep(Duration::from_millis(50));
        inside_w.fetch_sub(1000, Ordering::SeqCst);
        // A downgrade: the writer reads, then lets the write go and keeps reading.
        let read = lock.read()?;
        write.unlock()?;
        println!("   downgraded: reading with token {}", read.fencing_token());
        Ok(())
    }));
    for t in threads {
        t.join().expect("a thread panicked")?;
    }
    println!("   done in {:?}", started.elapsed());
    let n = broken.load(Ordering::SeqCst);
    Ok((n > 0)
        .then(|| format!("the read-write lock let a writer in beside readers {n} times"))
        .into_iter()
        .collect())
}

/// Eight uploaders in two clients share three permits; one holds two at a time.
fn semaphore(url: &str) -> redlatch::Result<Vec<String>> {
    println!("== Semaphore: 8 uploaders, 3 permits");
    let name = format!("family-uploads-{}", std::process::id());
    let clients = [Client::open(url)?, Client::open(url)?];
    clients[0].semaphore(&name).set_permits(3)?;
    let in_use = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let mut threads = Vec::new();
    for i in 0..8u32 {
        let semaphore = clients[i as usize % 2].semaphore(&name);
        let (in_use, most) = (in_use.clone(), most.clone());
        threads.push(thread::spawn(move || -> redlatch::Result<()> {
            let n = if i == 0 { 2 } else { 1 };
            for _ in 0..4 {
                let permits = semaphore.acquire(n)?;
                let now = in_use.fetch_add(i64::from(n), Ordering::SeqCst) + i64::from(n);
                most.fetch_max(now, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(20));
                in_use.fetch_sub(i64::from(n), Ordering::SeqCst);
                // Permits are Send: give them back from another thread.
                thread::spawn(move || permits.release())
                    .join()
                    .expect("released")?;
            }
            Ok(())
        }));
    }
    for t in threads {
        t.join().expect("a thread panicked")?;
    }
    let most = most.load(Ordering::SeqCst);
    println!(
        "   at most {most} permits in use; {} available now",
        clients[0].semaphore(&name).available()?
    );
    Ok((most > 3)
        .then(|| format!("{most} permits were in use, more than the 3 set"))
        .into_iter()
        .collect())
}

/// A coordinator waits until four workers, in another client, have each counted down.
fn count_down_latch(url: &str) -> redlatch::Result<Vec<String>> {
    println!("== CountDownLatch: 4 workers, 1 coordinator");
    let name = format!("family-ready-{}", std::process::id());
    let coordinator = Client::open(url)?;
    let workers = Client::open(url)?;
    let latch = coordinator.count_down_latch(&name);
    latch.try_set_count(4)?;
    let done = Arc::new(AtomicU32::new(0));
    let mut threads = Vec::new();
    for i in 0..4u64 {
        let latch = workers.count_down_latch(&name);
        let done = done.clone();
        threads.push(thread::spawn(move || -> redlatch::Result<()> {
            thread::sleep(Duration::from_millis(40 * (i + 1)));
            done.fetch_add(1, Ordering::SeqCst);
            let left = latch.count_down()?;
            println!("   worker {i} done, {left} to go");
            Ok(())
        }));
    }
    let started = Instant::now();
    let reached = latch.wait(Duration::from_secs(10))?;
    let seen = done.load(Ordering::SeqCst);
    println!(
        "   coordinator through after {:?} ({seen} workers done)",
        started.elapsed()
    );
    for t in threads {
        t.join().expect("a thread panicked")?;
    }
    let mut broken = Vec::new();
    if !reached {
        broken.push("the latch never reached zero".to_string());
    }
    if seen < 4 {
        broken.push(format!(
            "the coordinator got through after {seen} of 4 workers"
        ));
    }
    Ok(broken)
}

/// Two spinning threads and one `Lock` waiter share one lock in Redis.
fn spin_lock(url: &str) -> redlatch::Result<Vec<String>> {
    println!("== SpinLock: 2 spinners and a Lock waiter on one lock");
    let name = format!("family-spin-{}", std::process::id());
    let clients = [Client::open(url)?, Client::open(url)?, Client::open(url)?];
    let inside = Arc::new(AtomicI64::new(0));
    let broken = Arc::new(AtomicU32::new(0));
    let mut threads = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        let spin = client.spin_lock(&name);
        let lock = client.lock(&name);
        let (inside, broken) = (inside.clone(), broken.clone());
        threads.push(thread::spawn(move || -> redlatch::Result<u64> {
            let mut last = 0;
            for _ in 0..10 {
                // The third thread waits as a Lock does: queued, woken by the release.
                let guard = if i < 2 { spin.lock()? } else { lock.lock()? };
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    broken.fetch_add(1, Ordering::SeqCst);
                }
                last = last.max(guard.fencing_token());
                thread::sleep(Duration::from_millis(5));
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock()?;
            }
            Ok(last)
        }));
    }
    let mut tokens = Vec::new();
    for t in threads {
        tokens.push(t.join().expect("a thread panicked")?);
    }
    println!("   30 sections; last tokens {tokens:?}");
    let n = broken.load(Ordering::SeqCst);
    Ok((n > 0)
        .then(|| format!("two holders of the spin lock at once, {n} times"))
        .into_iter()
        .collect())
}
