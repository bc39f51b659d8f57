//! The smallest useful program: take a lock, use its fencing token, release it.
//!
//! ```text
//! cargo run --example quickstart
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example quickstart
//! ```
//!
//! Without `REDIS_URL` it starts a private `redis-server` (from `PATH`) on a free loopback
//! port and stops it at the end, as the `contention` and `family` examples do, so that a
//! first run needs no Redis of one's own.

use std::time::Duration;

// The test support starts the private redis-server.
#[path = "../tests/support/mod.rs"]
mod support;

fn main() -> redlatch::Result<()> {
    // RUST_LOG=redlatch=debug shows what the crate logs; warnings are on by default.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    // Declared before the client, so that it is dropped (stopped) after it.
    let (_private, url) = support::RedisServer::unless_redis_url();
    let client = redlatch::Client::open(&url)?;
    let lock = client.lock("quickstart");

    // Wait up to 5 s; no lease, so the watchdog keeps the lock alive while we hold it.
    match lock.try_lock(Duration::from_secs(5), None)? {
        Some(guard) => {
            println!(
                "acquired {:?} with fencing token {}",
                guard.name(),
                guard.fencing_token()
            );
            // Who holds it, in the words `redlatch inspect quickstart` would use.
            println!("held by {}", guard.owner_id());
            // Re-entry from the same thread: a second guard, the same token.
            let inner = lock.lock()?;
            println!("re-entered: hold count {}", lock.hold_count()?);
            drop(inner);
            guard.check()?; // still ours?
            guard.unlock()?;
            println!("released; locked now: {}", lock.is_locked()?);
            println!("{}", client.stats()); // the one-line snapshot to log
        }
        None => println!("somebody else held {:?} for 5 s", lock.name()),
    }
    Ok(())
}
