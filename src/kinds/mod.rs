//! The kinds of lock users hold, each a thin policy over the engine (`engine`): typed
//! handles and guards, and each kind's own rules.
//!
//! - [`lock`]: the reentrant, owner-checked, leased lock;
//! - [`read_write`]: many readers or one writer;
//! - [`semaphore`]: leased permits;
//! - [`counting`]: permits with no owner and no lease (Java's `RSemaphore`);
//! - [`spin_lock`]: the lock, waited for by backoff instead of pub/sub;
//! - [`latch`]: a count-down latch;
//! - [`multi`]: several locks taken all or none;
//! - [`redlock`]: one lock over independent masters, held by majority;
//! - [`fair`]: Redisson's fair lock, as one acquisition waits for it;
//! - [`shares`]: what the read-write lock and the semaphore share;
//! - [`held`]: the hold every guard wraps.

pub(crate) mod counting;
mod fair;
mod held;
pub(crate) mod latch;
pub(crate) mod lock;
pub(crate) mod multi;
pub(crate) mod read_write;
pub(crate) mod redlock;
pub(crate) mod semaphore;
mod shares;
pub(crate) mod spin_lock;

use std::time::Duration;

use crate::engine::validate_lease;
use crate::error::{Error, Result};
use crate::lost::HoldKind;
use lock::{Lock, LockGuard};

/// The checks an acquisition over several locks (a [`MultiLock`](crate::MultiLock), a
/// [`Redlock`](crate::Redlock)) starts with: every name and the lease are valid, and the
/// calling thread holds none of the locks, since `what` does not re-enter and the thread
/// would wait for itself.
pub(crate) fn check_composite(locks: &[Lock], lease: Option<Duration>, what: &str) -> Result<()> {
    if locks.is_empty() {
        return Err(Error::invalid(format!("a {what} needs at least one lock")));
    }
    for lock in locks {
        lock.validate_name()?;
    }
    validate_lease(lease)?;
    match locks.iter().find(|l| l.is_held_here()) {
        Some(held) => Err(Error::invalid(format!(
            "this thread already holds lock {:?}; a {what} does not re-enter it",
            held.name()
        ))),
        None => Ok(()),
    }
}

/// Releases the guards of `held` whose lock is known lost: a composite acquisition takes those
/// again rather than count them.
pub(crate) fn drop_lost(held: &mut [Option<LockGuard>]) {
    for guard in held {
        if guard.as_ref().is_some_and(LockGuard::is_lost) {
            drop(guard.take());
        }
    }
}

/// What a guard dropped without `unlock` does with its release's outcome: nothing can be
/// raised from a drop, so a loss is a warning and a failure an error in the log. `kind` names
/// the hold for the reader of the log (`permits of semaphore "x"`, ...).
pub(crate) fn log_dropped_release(kind: HoldKind, name: &str, released: Result<()>) {
    let what = kind.of(name);
    match released {
        Ok(()) => {}
        Err(Error::LockLost { .. }) => {
            log::warn!("{what} {} lost before the guard was dropped", kind.was())
        }
        Err(e) => {
            log::error!("releasing {what} failed ({e}); it frees itself when its lease runs out")
        }
    }
}
