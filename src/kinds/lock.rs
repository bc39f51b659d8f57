//! [`Lock`], the handle on one named lock, and the engine's view of it; its guards are in
//! [`guards`]: [`LockGuard`], proof that the current thread holds it, and [`OwnedLockGuard`],
//! proof that one acquisition holds it, whichever thread has the guard.

use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::fair::FairWait;
use super::held::Held;
use crate::cancel::Cancel;
use crate::core::{Core, Runtime};
use crate::engine::{self, Acquired, Kind, Terms, validate_duration, validate_lease};
use crate::error::{Error, Result};
use crate::keys::{Family, LockKeys};
use crate::scripts::{self, Acquire, Dialect, Freeing, Queueing, Release, Releasing};

mod guards;
pub use guards::{LockGuard, OwnedLockGuard};

/// A handle on the lock called [`name`](Lock::name), made by [`Client::lock`](crate::Client::lock).
///
/// Cheap to clone and to make; holds no lock itself. `Send + Sync`: share it between threads.
/// Ownership belongs to a thread: the same thread may acquire again (re-entry, with a new
/// guard), and another thread, of this client or any other, waits.
///
/// # Re-entry and leases
/// A re-entry succeeds at once, keeps the first acquisition's fencing token, and never
/// shortens the lease: Redis keeps the longer of the current lease and the new one. Once any
/// guard of a hold was taken without a lease, the watchdog renews the hold until its last
/// guard is gone. A re-entry into a hold that was [lost](LockGuard::is_lost) fails with
/// [`Error::LockLost`](crate::Error::LockLost) until the thread has dropped the lost guards.
///
/// # Pooled worker threads
/// Because a hold belongs to a thread, a thread that holds the lock re-enters it at once. On
/// a worker pool that is a trap: a guard kept past its request (in a session, a cache, a
/// task handed to another thread) lets the next request that lands on the same worker
/// re-enter, and both think they hold the lock alone. Where a guard may outlive the request
/// or the thread that took it, use [`lock_owned`](Lock::lock_owned) or
/// [`try_lock_owned`](Lock::try_lock_owned): the [`OwnedLockGuard`] holds the lock under an
/// owner id of its own, is `Send`, never re-enters, and any thread may release it. It is the
/// same lock in Redis: owned and thread-owned acquisitions exclude each other and queue in the
/// one line.
///
/// # Waiting
/// Waiters queue in Redis in arrival order, across all clients, and the release that frees
/// the lock hands it to the first of them still waiting: that thread returns holding it
/// without another round trip, and no other thread is woken. A thread that releases and asks
/// again queues behind those already waiting. A waiter whose time runs out leaves the queue
/// (one command); a waiter that dies in the queue can be handed the lock, which then frees
/// itself when the lease that waiter asked for runs out.
///
/// # In [`Layout::Redisson`](crate::Layout::Redisson)
/// It is Java's `getLock(name)` (and `getFencedLock(name)`): the hash `name`, `<client
/// id>:<thread>` → hold count, tokens from `redisson_lock_token:{name}`. There is no queue:
/// a release publishes `0` on `redisson_lock__channel:{name}`, which wakes one waiter in
/// every client, Java's and ours, and they race; a release whose client has a thread waiting
/// hands the lock to it instead (at most three times in a row).
/// [`Client::fair_lock`](crate::Client::fair_lock) gives Redisson's fair lock.
///
/// # Time
/// Every Redis round trip is bounded by the client's response timeout (3 s by default), so a
/// call may overrun its `wait` by up to that much when Redis stops answering, and then fails
/// with [`Error::Redis`](crate::Error::Redis). On a Cluster, a call also retries a command refused while the lock's
/// slot migrates or a replica takes over, for up to one response timeout from its start.
///
/// ```no_run
/// # fn main() -> redlatch::Result<()> {
/// use std::time::Duration;
/// let client = redlatch::Client::open("redis://127.0.0.1/")?;
/// let lock = client.lock("report:daily");
/// match lock.try_lock(Duration::from_secs(2), None)? {
///     Some(guard) => println!("got it, token {}", guard.fencing_token()),
///     None => println!("busy"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    /// Keeps the client's threads alive while the handle lives.
    runtime: Arc<Runtime>,
    keys: Arc<LockKeys>,
    /// Ends this handle's waits ([`Lock::cancel_on`]).
    cancel: Option<Cancel>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.keys.name())
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(runtime: Arc<Runtime>, name: &str) -> Lock {
        let keys = Arc::new(runtime.core.keys(Family::Lock, name));
        Lock {
            runtime,
            keys,
            cancel: None,
        }
    }

    /// Redisson's fair lock called `name` (Java's `getFairLock`): see
    /// [`Client::fair_lock`](crate::Client::fair_lock).
    pub(crate) fn fair(runtime: Arc<Runtime>, name: &str) -> Lock {
        let keys = Arc::new(LockKeys::redisson_fair(&runtime.core.stored_name(name)));
        Lock {
            runtime,
            keys,
            cancel: None,
        }
    }

    /// The same handle, whose waits end with
    /// [`Error::Cancelled`](crate::Error::Cancelled) once `cancel` is cancelled (at once if it
    /// already is): the waiter leaves the queue in Redis and holds nothing. See [`Cancel`].
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let shutdown = redlatch::Cancel::new();
    /// let lock = client.lock("orders").cancel_on(&shutdown);
    /// // Another thread calls `shutdown.cancel()`: this returns Err(Cancelled) at once.
    /// match lock.lock() {
    ///     Ok(_guard) => { /* work */ }
    ///     Err(e) if e.is_cancelled() => return Ok(()),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn cancel_on(&self, cancel: &Cancel) -> Lock {
        Lock {
            cancel: Some(cancel.clone()),
            ..self.clone()
        }
    }

    /// The lock's name, as given to [`Client::lock`](crate::Client::lock).
    pub fn name(&self) -> &str {
        self.keys.name()
    }

    /// Waits as long as it takes, then holds the lock with the watchdog: the renewal thread
    /// extends it until the guard is dropped.
    pub fn lock(&self) -> Result<LockGuard> {
        self.acquire(None, None)
            .map(|g| g.expect("an unbounded wait only ends with the lock"))
    }

    /// Waits as long as it takes, then holds the lock for at most `lease` (no renewal).
    pub fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(None, Some(lease))
            .map(|g| g.expect("an unbounded wait only ends with the lock"))
    }

    /// Waits at most `wait` for the lock; `Ok(None)` if it did not come free in time.
    ///
    /// `wait == Duration::ZERO` makes exactly one attempt. `lease: None` holds the lock with
    /// the watchdog; `Some(lease)` lets it expire after `lease` unless released before.
    /// Waiting costs no Redis command while nothing happens: the release that frees the lock
    /// hands it to the oldest waiter in the fleet and tells it through pub/sub, and a waiter
    /// also wakes when the lock's lease would run out, so a crashed holder or a lost message
    /// costs time, never a hang.
    pub fn try_lock(&self, wait: Duration, lease: Option<Duration>) -> Result<Option<LockGuard>> {
        validate_duration("wait", wait, Duration::ZERO)?;
        self.acquire(Some(wait), lease)
    }

    /// Waits as long as it takes, then holds the lock with the watchdog under an owner id of
    /// this acquisition's own: see [`OwnedLockGuard`].
    ///
    /// A thread that holds the lock through a [`LockGuard`] would wait here for itself (that
    /// guard cannot move to another thread to be released), so it gets
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) at once, whatever the guard's
    /// lease: release first. Under the watchdog the wait would never end; under a fixed lease
    /// it would end only by that lease running out under its own guard, which is a lost hold,
    /// not a hand-over. One that holds it through an [`OwnedLockGuard`] waits, since that
    /// guard may be released by another thread.
    pub fn lock_owned(&self) -> Result<OwnedLockGuard> {
        self.lock_owned_waiting(None)
    }

    /// [`lock_owned`](Lock::lock_owned), holding the lock for at most `lease` (no renewal).
    pub fn lock_owned_with_lease(&self, lease: Duration) -> Result<OwnedLockGuard> {
        self.lock_owned_waiting(Some(lease))
    }

    fn lock_owned_waiting(&self, lease: Option<Duration>) -> Result<OwnedLockGuard> {
        // Any live hold of this thread's: a wait without end could only end by losing it.
        let core = self.core();
        let own = core.holds.get(self.keys.lock(), &core.thread_owner());
        if own.is_some_and(|hold| !hold.is_lost()) {
            return Err(Error::WouldDeadlock {
                name: self.name().to_string(),
            });
        }
        self.acquire_owned(None, lease)
            .map(|g| g.expect("an unbounded wait only ends with the lock"))
    }

    /// [`try_lock`](Lock::try_lock) under an owner id of this acquisition's own: waits at most
    /// `wait` (`ZERO`: one attempt), `lease: None` for the watchdog; `Ok(None)` if the lock
    /// did not come free in time. Never a re-entry: while anybody holds the lock, this very
    /// thread included, it waits like any other thread.
    pub fn try_lock_owned(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<OwnedLockGuard>> {
        validate_duration("wait", wait, Duration::ZERO)?;
        self.acquire_owned(Some(wait), lease)
    }

    /// Whether anybody holds the lock.
    pub fn is_locked(&self) -> Result<bool> {
        Ok(self.inspect()?.locked)
    }

    /// Whether the calling thread holds the lock (according to Redis). An
    /// [`OwnedLockGuard`] is no thread's hold, so it does not count.
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        Ok(self.inspect()?.holds > 0)
    }

    /// Whether the owner `owner_id` holds the lock (according to Redis): Java's
    /// `isHeldByThread`. An owner id is what a guard's `owner_id()` shows (an
    /// [`OwnedLockGuard`]'s counts here, being its own owner) and what
    /// [`Client::current_thread_owner_id`](crate::Client::current_thread_owner_id) answers
    /// on a thread, of this client or any other. `Err(Error::InvalidArgument)` for an empty
    /// id.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let lock = client.lock("report:daily");
    /// let guard = lock.lock_owned()?;
    /// assert!(lock.is_held_by(guard.owner_id())?);
    /// assert!(!lock.is_held_by(&client.current_thread_owner_id())?);
    /// # Ok(()) }
    /// ```
    pub fn is_held_by(&self, owner_id: &str) -> Result<bool> {
        if owner_id.is_empty() {
            return Err(Error::invalid("an owner id must not be empty".to_string()));
        }
        Ok(self.inspect_for(owner_id)?.holds > 0)
    }

    /// How many holds the calling thread has on the lock (according to Redis): 0 if none. An
    /// [`OwnedLockGuard`] is no thread's hold, so it does not count.
    pub fn hold_count(&self) -> Result<u32> {
        Ok(self.inspect()?.holds)
    }

    /// How long until the lock's current lease runs out; `None` when it is not locked.
    pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
        Ok(self.inspect()?.ttl)
    }

    /// Deletes the lock whoever holds it and wakes every waiter. `true` if it was locked.
    ///
    /// What it deletes, and what it refuses with [`Error::WrongType`](crate::Error::WrongType)
    /// (leaving the key as it is, byte for byte and with its TTL):
    /// - In our layout, the hash `<prefix>:{name}` if it has a lease (every lock of ours has
    ///   one while held); a key of another type, or a hash without a lease, is refused.
    ///   Only keys under the client's prefix are touched.
    /// - In [`Layout::Redisson`](crate::Layout::Redisson), the hash `name` only if it looks
    ///   like a lock: exactly one field `<owner>:<thread>` (Java's `<uuid>:<thread id>`, ours
    ///   `<client id>:<n>`) whose value is a positive hold count, with or without a lease (a
    ///   lock whose expiry somebody cleared is still freed: that is what a force-unlock is
    ///   for). Anything else, an application's hash of the same name (`HSET user:2 name
    ///   bob`), a read-write lock's hash (it has `mode`), another type, is refused. Java's
    ///   `forceUnlock` deletes whatever key has the name; ours never deletes data that is not
    ///   a lock. A fair lock's queue is not deleted: its head is woken.
    ///
    /// The holder is not interrupted: its guard reports the loss at its next renewal
    /// (watchdog), when its lease runs out, or when it releases (at once if it is a thread
    /// of this client). The loss is announced through
    /// [`on_lock_lost`](crate::ClientBuilder::on_lock_lost) with
    /// [`LossCause::ForceUnlocked`](crate::LossCause::ForceUnlocked).
    pub fn force_unlock(&self) -> Result<bool> {
        self.validate_name()?;
        let keys = &self.keys;
        // Names this call, so that a retry after a lost reply answers the same rather than
        // deleting a lock somebody took in the meantime.
        let request = uuid::Uuid::new_v4().simple().to_string();
        let dialect = self.core().dialect;
        let was_locked = engine::call(self.core(), keys, |con, freeing| {
            (dialect.force_unlock)(con, keys, &request, freeing)
        })?;
        if was_locked {
            engine::forced(self.core(), keys);
        }
        Ok(was_locked)
    }

    fn inspect(&self) -> Result<scripts::Inspection> {
        self.inspect_for(&self.core().thread_owner())
    }

    /// The lock's state, with the holds of `owner`.
    fn inspect_for(&self, owner: &str) -> Result<scripts::Inspection> {
        self.validate_name()?;
        let keys = &self.keys;
        engine::call(self.core(), keys, |con, _| {
            scripts::inspect(con, keys, owner)
        })
    }

    /// Whether the calling thread holds the lock, by this client's registry (no I/O).
    pub(crate) fn is_held_here(&self) -> bool {
        let core = self.core();
        core.holds
            .get(self.keys.lock(), &core.thread_owner())
            .is_some()
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.runtime.core
    }

    pub(crate) fn validate_name(&self) -> Result<()> {
        engine::check_name(self.core(), self.keys.family, self.keys.name())
    }

    /// What ends this handle's waits, besides the client's `cancel_all_waits`.
    pub(crate) fn cancelled_by(&self) -> Option<&Cancel> {
        self.cancel.as_ref()
    }

    /// The lease terms of an acquisition asking for `lease`.
    pub(crate) fn terms(&self, lease: Option<Duration>) -> Terms {
        Terms {
            asked: lease,
            watchdog: self.core().watchdog_timeout,
        }
    }

    /// Acquires through the engine; `wait: None` waits forever.
    pub(crate) fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        let owner = self.core().thread_owner();
        let acquired = self.acquire_as(owner, wait, lease)?;
        Ok(acquired.map(|acquired| self.guard(acquired)))
    }

    /// Acquires for an owner id of the acquisition's own; `wait: None` waits forever. The
    /// fresh owner has no hold for the engine to re-enter, so it waits as another thread would.
    fn acquire_owned(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<OwnedLockGuard>> {
        let owner = self.core().fresh_numbered_owner();
        let acquired = self.acquire_as(owner, wait, lease)?;
        Ok(acquired.map(|acquired| OwnedLockGuard::new(self.held(acquired))))
    }

    fn acquire_as(
        &self,
        owner: Arc<str>,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<Acquired>> {
        self.validate_name()?;
        validate_lease(lease)?;
        let terms = self.terms(lease);
        if self.keys.fair {
            let unbounded = self.core().fair_wait_timeout;
            let fair = FairWait::new(self.name(), &owner, wait, unbounded);
            return engine::acquire(self.core(), &fair, owner, wait, terms, self.cancelled_by());
        }
        engine::acquire(self.core(), self, owner, wait, terms, self.cancelled_by())
    }

    /// The guard of a hold the engine registered (and counted the guard of).
    pub(crate) fn guard(&self, acquired: Acquired) -> LockGuard {
        LockGuard::new(self.held(acquired))
    }

    fn held(&self, acquired: Acquired) -> Held<Lock> {
        Held::new(self.clone(), &self.runtime, acquired)
    }
}

/// The engine's view of a lock: its keys and its scripts. The release grants the lock to
/// the oldest waiter still waiting (`release.lua`).
impl Kind for Lock {
    fn keys(&self) -> &Arc<LockKeys> {
        &self.keys
    }

    fn attempt(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        held: Option<(u32, u64)>,
        lease: Duration,
        queueing: &Queueing,
    ) -> RedisResult<Acquire> {
        self.scripts().attempt(con, owner, held, lease, queueing)
    }

    fn withdraw(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        lease: Duration,
        queueing: &Queueing,
    ) -> RedisResult<Option<u64>> {
        self.scripts().withdraw(con, owner, lease, queueing)
    }

    fn may_hold(&self, con: &mut dyn ConnectionLike, owner: &str) -> RedisResult<bool> {
        self.scripts().may_hold(con, owner)
    }

    fn detached(&self) -> Arc<dyn Kind + Send + Sync> {
        Arc::new(self.scripts())
    }

    fn release(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        token: u64,
        how: Releasing,
        freeing: Freeing,
    ) -> RedisResult<Release> {
        self.scripts().release(con, owner, token, how, freeing)
    }
}

impl Lock {
    /// The lock's scripts, as this client's layout and settings call them.
    fn scripts(&self) -> LockScripts {
        let core = self.core();
        LockScripts {
            keys: self.keys.clone(),
            dialect: core.dialect,
            retention: core.fence_retention,
        }
    }
}

/// A lock's scripts without the handle: its keys, the client's dialect and fence retention.
/// It keeps nothing of the client's alive, which is what the renewal thread needs to settle
/// an attempt whose reply was lost.
#[derive(Clone)]
struct LockScripts {
    keys: Arc<LockKeys>,
    dialect: &'static Dialect,
    retention: Duration,
}

/// What a [`Lock`]'s engine calls run.
impl Kind for LockScripts {
    fn keys(&self) -> &Arc<LockKeys> {
        &self.keys
    }

    fn attempt(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        held: Option<(u32, u64)>,
        lease: Duration,
        queueing: &Queueing,
    ) -> RedisResult<Acquire> {
        let (keys, retention) = (&self.keys, self.retention);
        (self.dialect.acquire)(con, keys, owner, held, lease, queueing, retention)
    }

    fn withdraw(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        lease: Duration,
        queueing: &Queueing,
    ) -> RedisResult<Option<u64>> {
        let (keys, retention) = (&self.keys, self.retention);
        (self.dialect.withdraw)(con, keys, owner, lease, queueing, retention)
    }

    fn may_hold(&self, con: &mut dyn ConnectionLike, owner: &str) -> RedisResult<bool> {
        Ok(scripts::inspect(con, &self.keys, owner)?.holds > 0)
    }

    fn detached(&self) -> Arc<dyn Kind + Send + Sync> {
        Arc::new(self.clone())
    }

    fn release(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        token: u64,
        how: Releasing,
        freeing: Freeing,
    ) -> RedisResult<Release> {
        (self.dialect.release)(con, &self.keys, owner, token, how, freeing)
    }
}
