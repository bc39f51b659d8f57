//! The guards of a [`Lock`]: [`LockGuard`], proof that the current thread holds it, and
//! [`OwnedLockGuard`], proof that one acquisition holds it, whichever thread has the guard.
//! Both are thin wrappers over [`Held`], which does the work.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::Lock;
use crate::engine::Hold;
use crate::error::Result;
use crate::kinds::held::Held;

/// Proof that the current thread holds a lock; releases it when dropped.
///
/// Not `Send`: the hold belongs to the thread that acquired it (its owner id is the client
/// id plus the thread number). Owns what it needs, so it can live in a request's state; but
/// where it may outlive the request on a pooled worker thread, take an [`OwnedLockGuard`]
/// instead (see [`Lock`]'s pooled worker threads).
/// Dropping it releases the lock, also during a panic; a failure is logged, never raised.
/// Use [`unlock`](LockGuard::unlock) to see the outcome.
///
/// A guard cannot move to another thread:
///
/// ```compile_fail
/// fn send<T: Send>(_: T) {}
/// let client = redlatch::Client::open("redis://127.0.0.1/").unwrap();
/// send(client.lock("x").lock().unwrap());
/// ```
///
/// while the client and lock handles can:
///
/// ```
/// fn send_sync<T: Send + Sync>() {}
/// send_sync::<redlatch::Client>();
/// send_sync::<redlatch::Lock>();
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    held: Held<Lock>,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("fencing_token", &self.fencing_token())
            .finish()
    }
}

impl LockGuard {
    pub(super) fn new(held: Held<Lock>) -> LockGuard {
        LockGuard {
            held,
            _not_send: PhantomData,
        }
    }

    /// Releases this hold. `Err(Error::LockLost)` if the lock was no longer ours (then nothing
    /// in Redis was changed) or had already been reported lost (then a hold Redis still had is
    /// released all the same); `Err(Error::Redis)` if Redis could not be reached, in which case
    /// the lock expires with its lease.
    pub fn unlock(self) -> Result<()> {
        self.held.release()
    }

    /// The fencing token of this hold: strictly increasing per lock name across all clients,
    /// never reused (as long as the server's clock never steps back by more than the
    /// [fence retention](crate::ClientBuilder::fence_retention)). Send it with every write the lock protects and have the resource reject
    /// tokens older than the newest it has seen; that, not the lock alone, is what makes the
    /// write safe against a holder that was paused past its lease. Re-entries share the first
    /// acquisition's token.
    pub fn fencing_token(&self) -> u64 {
        self.held.token()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// The owner id this hold has in Redis: the thread's, `<client id>:<thread number>`
    /// (what [`Client::current_thread_owner_id`](crate::Client::current_thread_owner_id)
    /// answers on the thread that took it). For tracing and for matching what the operator's
    /// tools show.
    pub fn owner_id(&self) -> &str {
        self.held.owner_id()
    }

    pub(crate) fn hold(&self) -> &Arc<Hold> {
        self.held.hold()
    }

    /// Whether the lock is known to be lost: renewal found it gone, or the last lease Redis
    /// confirmed has run out. Advisory: a pause can fall between this check and the write it
    /// guards, which is why writes carry the [fencing token](LockGuard::fencing_token).
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// How long the lease Redis last confirmed has left, by this client's clock, with no
    /// round trip: zero once the hold is lost. A watchdog hold's lease is renewed every third
    /// of the watchdog timeout, so it stays between two and three thirds of it while Redis
    /// answers; a fixed lease only runs down. Advisory, like [`is_lost`](LockGuard::is_lost).
    pub fn remaining_lease(&self) -> Duration {
        self.held.remaining_lease()
    }

    /// `Err(Error::LockLost)` when [`is_lost`](LockGuard::is_lost).
    pub fn check(&self) -> Result<()> {
        self.held.check()
    }

    /// Gives the hold a new lease: it now ends `lease` from now (set, not added to: it may
    /// end sooner than before; Redis keeps whole milliseconds). [`remaining_lease`](Self::remaining_lease),
    /// [`is_lost`](Self::is_lost) and the [`on_lock_lost`](crate::ClientBuilder::on_lock_lost)
    /// notice of an expiry follow the new lease. Re-entries share one
    /// hold: the thread's hold as a whole gets the new lease.
    ///
    /// `Err(Error::LockLost)` if the hold is already gone (its lease ran out, or it was
    /// force-unlocked): it is never revived. `Err(Error::InvalidArgument)` for a hold the
    /// watchdog renews (taken without a lease, or re-entered without one), and for a zero or absurd `lease`.
    /// `Err(Error::Redis)` if Redis could not be reached; the old lease then stands as far as
    /// this guard knows.
    ///
    /// A waiter that read the old lease may sleep until it would have ended, if the hold
    /// then ends sooner without a release (a release wakes waiters as usual).
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// use std::time::Duration;
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let guard = client.lock("batch:42").lock_with_lease(Duration::from_secs(10))?;
    /// // ... the batch turns out bigger than planned ...
    /// guard.extend(Duration::from_secs(60))?;
    /// # Ok(()) }
    /// ```
    pub fn extend(&self, lease: Duration) -> Result<()> {
        self.held.extend(lease)
    }
}

/// Proof that one acquisition holds a lock, whichever thread has the guard; releases it when
/// dropped. From [`Lock::lock_owned`] and [`Lock::try_lock_owned`].
///
/// A [`LockGuard`]'s hold belongs to its thread, which re-enters it at will. This guard's hold
/// belongs to the acquisition: it has an owner id of its own (`<client id>:<n>`, with an `n`
/// no thread and no other acquisition of the process ever has), so
/// - it is `Send`: keep it in a request's state, hand it to another thread or a pool's next
///   task, release it from any thread;
/// - it is not re-entrant: a second acquisition, owned or not and even on the same thread,
///   waits like any other while this guard holds the lock;
/// - it is the same lock in Redis as [`Lock`]'s: owned and thread-owned acquisitions exclude
///   each other, queue in one line, and a release hands the lock to the next waiter of either
///   kind;
/// - [`Lock::is_held_by_current_thread`] and [`Lock::hold_count`] do not count it, and a
///   [`MultiLock`](crate::MultiLock) that includes the lock waits for it, as it would for
///   another thread.
///
/// Renewal, losses ([`on_lock_lost`](crate::ClientBuilder::on_lock_lost)), fencing and the
/// release on drop (panics included; a failure is logged, never raised) are as
/// [`LockGuard`]'s. Use [`unlock`](OwnedLockGuard::unlock) to see the outcome.
///
/// ```
/// fn send<T: Send>() {}
/// send::<redlatch::OwnedLockGuard>();
/// ```
///
/// ```no_run
/// # fn main() -> redlatch::Result<()> {
/// use std::time::Duration;
/// let client = redlatch::Client::open("redis://127.0.0.1/")?;
/// let lock = client.lock("import:orders");
/// if let Some(guard) = lock.try_lock_owned(Duration::from_secs(2), None)? {
///     // The work, and the hold, go on elsewhere; this worker thread is free again.
///     std::thread::spawn(move || {
///         println!("importing under token {}", guard.fencing_token());
///         guard.unlock()
///     });
/// }
/// # Ok(()) }
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct OwnedLockGuard {
    held: Held<Lock>,
}

impl std::fmt::Debug for OwnedLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedLockGuard")
            .field("name", &self.name())
            .field("owner_id", &self.owner_id())
            .field("fencing_token", &self.fencing_token())
            .finish()
    }
}

impl OwnedLockGuard {
    pub(super) fn new(held: Held<Lock>) -> OwnedLockGuard {
        OwnedLockGuard { held }
    }

    /// Releases the lock, from whichever thread calls it. `Err(Error::LockLost)` if the lock
    /// was no longer ours (then nothing in Redis was changed) or had already been reported
    /// lost; `Err(Error::Redis)` if Redis could not be reached, in which case the lock expires
    /// with its lease.
    pub fn unlock(self) -> Result<()> {
        self.held.release()
    }

    /// The fencing token of this acquisition: strictly increasing per lock name across all
    /// clients and both kinds of guard, as [`LockGuard::fencing_token`] says.
    pub fn fencing_token(&self) -> u64 {
        self.held.token()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// The owner id this acquisition has in Redis: `<client id>:<n>`, its own, never a
    /// thread's. For tracing and for matching what the operator's tools show.
    pub fn owner_id(&self) -> &str {
        self.held.owner_id()
    }

    /// Whether the lock is known to be lost: renewal found it gone, or the last lease Redis
    /// confirmed has run out. Advisory, as [`LockGuard::is_lost`].
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// How long the lease Redis last confirmed has left, by this client's clock, with no
    /// round trip: zero once the hold is lost. Advisory, as [`LockGuard::remaining_lease`].
    pub fn remaining_lease(&self) -> Duration {
        self.held.remaining_lease()
    }

    /// `Err(Error::LockLost)` when [`is_lost`](OwnedLockGuard::is_lost).
    pub fn check(&self) -> Result<()> {
        self.held.check()
    }

    /// Gives the hold a new lease: it now ends `lease` from now (set, not added to: it may
    /// end sooner than before; Redis keeps whole milliseconds). [`remaining_lease`](Self::remaining_lease),
    /// [`is_lost`](Self::is_lost) and the [`on_lock_lost`](crate::ClientBuilder::on_lock_lost)
    /// notice of an expiry follow the new lease.
    ///
    /// `Err(Error::LockLost)` if the hold is already gone (its lease ran out, or it was
    /// force-unlocked): it is never revived. `Err(Error::InvalidArgument)` for a hold the
    /// watchdog renews (taken without a lease), and for a zero or absurd `lease`.
    /// `Err(Error::Redis)` if Redis could not be reached; the old lease then stands as far as
    /// this guard knows.
    ///
    /// A waiter that read the old lease may sleep until it would have ended, if the hold
    /// then ends sooner without a release (a release wakes waiters as usual).
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// use std::time::Duration;
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let lock = client.lock("import:orders");
    /// let guard = lock.lock_owned_with_lease(Duration::from_secs(10))?;
    /// guard.extend(Duration::from_secs(60))?;
    /// # Ok(()) }
    /// ```
    pub fn extend(&self, lease: Duration) -> Result<()> {
        self.held.extend(lease)
    }
}
