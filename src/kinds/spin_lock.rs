//! [`SpinLock`]: the lock itself, waited for by backoff instead of pub/sub.

use std::sync::Arc;
use std::time::Duration;

use super::lock::{Lock, LockGuard};
use crate::core::Runtime;
use crate::engine::{self, Backoff, validate_duration, validate_lease};
use crate::error::Result;

/// A handle on the lock called [`name`](SpinLock::name) that waits by capped exponential
/// backoff with jitter instead of a subscription, made by
/// [`Client::spin_lock`](crate::Client::spin_lock).
///
/// It is the same lock in Redis as [`Client::lock`](crate::Client::lock) of the same name
/// (`p:{name}`), with the same guard: the two exclude each other, a thread re-enters a hold
/// taken through either, and a spin lock's release hands the lock to the oldest queued
/// [`Lock`] waiter as a lock's release does. What differs is only how it waits: each attempt
/// is one script call that takes no place in the queue, and between attempts the thread
/// sleeps from 2 ms, doubling to 128 ms ([`with_backoff`](SpinLock::with_backoff) changes
/// that), each sleep drawn between half and all of the step, so waiters that started
/// together do not come back in step. A sleep never outlasts the holder's remaining lease
/// or the caller's deadline.
///
/// For fleets where pub/sub is unwanted (no subscriber connection, no channel in the ACL):
/// the seed articles' `SET NX` plus retry, done right (owner-checked, re-entrant, leased,
/// fenced, renewed). The price is latency and commands: a spinning waiter learns of a
/// release at its next attempt, and a queued [`Lock`] waiter goes before it, since a release
/// hands the lock to the queue.
///
/// In [`Layout::Redisson`](crate::Layout::Redisson) it is Java's `getSpinLock(name)`, the
/// lock's hash: it excludes, and is excluded by, Java's spin lock and Java's lock of the name.
///
/// ```no_run
/// # fn main() -> redlatch::Result<()> {
/// use std::time::Duration;
/// let client = redlatch::Client::open("redis://127.0.0.1/")?;
/// let lock = client.spin_lock("nightly-job");
/// if let Some(guard) = lock.try_lock(Duration::from_secs(2), None)? {
///     println!("got it, token {}", guard.fencing_token());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SpinLock {
    lock: Lock,
    backoff: Backoff,
}

impl std::fmt::Debug for SpinLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinLock")
            .field("name", &self.lock.name())
            .field("backoff", &self.backoff)
            .finish()
    }
}

impl SpinLock {
    pub(crate) fn new(runtime: Arc<Runtime>, name: &str) -> SpinLock {
        SpinLock {
            lock: Lock::new(runtime, name),
            backoff: Backoff::DEFAULT,
        }
    }

    /// The same handle, whose waits end with
    /// [`Error::Cancelled`](crate::Error::Cancelled) once `cancel` is cancelled (at once if it
    /// already is): the waiter leaves the queue in Redis and holds nothing. See [`Cancel`](crate::Cancel).
    pub fn cancel_on(&self, cancel: &crate::Cancel) -> SpinLock {
        SpinLock {
            lock: self.lock.cancel_on(cancel),
            backoff: self.backoff,
        }
    }

    /// The same handle, sleeping from `min` between attempts, doubling up to `max`. Checked
    /// when the lock is acquired: `min` of at least 1 ms, `max` not below `min` nor above an
    /// hour, else [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    pub fn with_backoff(self, min: Duration, max: Duration) -> SpinLock {
        self.with_exponential_backoff(min, max, 2.0)
    }

    /// The same handle, sleeping from `min` between attempts, growing by `multiplier` each
    /// time up to `max` (Java's `ExponentialBackOff` with its `initialDelay`, `maxDelay`
    /// and `multiplier`). Each sleep is drawn between half and all of the step, so that
    /// waiters that started together drift apart. Checked when the lock is acquired: as
    /// [`with_backoff`](SpinLock::with_backoff), and a `multiplier` from 1 to 100.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// use std::time::Duration;
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let lock = client.spin_lock("cron:nightly").with_exponential_backoff(
    ///     Duration::from_millis(5),
    ///     Duration::from_secs(1),
    ///     3.0,
    /// );
    /// let _guard = lock.lock()?;
    /// # Ok(()) }
    /// ```
    pub fn with_exponential_backoff(
        mut self,
        min: Duration,
        max: Duration,
        multiplier: f64,
    ) -> SpinLock {
        self.backoff = Backoff {
            min,
            max,
            multiplier,
        };
        self
    }

    /// The same handle, sleeping about `delay` between attempts (Java's `ConstantBackOff`):
    /// each sleep drawn between half and all of it. At least 1 ms and at most an hour,
    /// checked when the lock is acquired.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// use std::time::Duration;
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let lock = client.spin_lock("cron:nightly").with_constant_backoff(Duration::from_millis(50));
    /// let _guard = lock.lock()?;
    /// # Ok(()) }
    /// ```
    pub fn with_constant_backoff(self, delay: Duration) -> SpinLock {
        self.with_exponential_backoff(delay, delay, 1.0)
    }

    /// The lock's name, as given to [`Client::spin_lock`](crate::Client::spin_lock).
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// Waits as long as it takes, then holds the lock with the watchdog.
    pub fn lock(&self) -> Result<LockGuard> {
        self.acquire(None, None)
            .map(|g| g.expect("an unbounded wait only ends with the lock"))
    }

    /// Waits as long as it takes, then holds the lock for at most `lease` (no renewal).
    pub fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(None, Some(lease))
            .map(|g| g.expect("an unbounded wait only ends with the lock"))
    }

    /// Waits at most `wait` for the lock, by backoff; `Ok(None)` if it did not come free in
    /// time. `wait == Duration::ZERO` makes exactly one attempt; `lease` as
    /// [`Lock::try_lock`].
    pub fn try_lock(&self, wait: Duration, lease: Option<Duration>) -> Result<Option<LockGuard>> {
        validate_duration("wait", wait, Duration::ZERO)?;
        self.acquire(Some(wait), lease)
    }

    /// Whether anybody holds the lock.
    pub fn is_locked(&self) -> Result<bool> {
        self.lock.is_locked()
    }

    /// Whether the calling thread holds the lock (according to Redis).
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        self.lock.is_held_by_current_thread()
    }

    /// How many holds the calling thread has on the lock (according to Redis): 0 if none.
    pub fn hold_count(&self) -> Result<u32> {
        self.lock.hold_count()
    }

    /// How long until the lock's current lease runs out; `None` when it is not locked.
    pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.lock.remaining_ttl()
    }

    /// Deletes the lock whoever holds it, as [`Lock::force_unlock`].
    pub fn force_unlock(&self) -> Result<bool> {
        self.lock.force_unlock()
    }

    fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        self.lock.validate_name()?;
        validate_lease(lease)?;
        let backoff = self.backoff.validate()?;
        let lock = &self.lock;
        let core = lock.core();
        let terms = lock.terms(lease);
        let owner = core.thread_owner();
        let cancel = lock.cancelled_by();
        let acquired = engine::spin(core, lock, owner, wait, terms, backoff, cancel)?;
        Ok(acquired.map(|acquired| lock.guard(acquired)))
    }
}
