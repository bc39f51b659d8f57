//! [`ReadWriteLock`]: many readers or one writer, and its guards [`ReadGuard`] and
//! [`WriteGuard`].

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use super::held::Held;
use super::shares::{Share, Wants};
use crate::core::Runtime;
use crate::engine::{self, validate_duration, validate_lease};
use crate::error::{Error, Result};
use crate::keys::{Family, LockKeys};
use crate::scripts;

/// A handle on the read-write lock called [`name`](ReadWriteLock::name), made by
/// [`Client::read_write_lock`](crate::Client::read_write_lock): many readers at once, or one
/// writer.
///
/// Cheap to clone and to make; `Send + Sync`. As with [`Lock`](crate::Lock), a hold belongs
/// to the thread that took it, so the guards are not `Send`.
///
/// # Rules
/// - **Re-entrant both ways**: a thread that reads may read again, one that writes may
///   write again; each acquisition returns a guard and the last guard gone releases.
/// - **Downgrade**: the writer may also read, at once (it never waits for that), and keeps
///   reading after it unlocks its write.
/// - **No upgrade**: a thread that holds only a read and asks to write gets
///   [`Error::WouldDeadlock`] at once: it would wait for its own read to go.
/// - **Writers are not starved**: waiters are served in arrival order, so readers who come
///   after a waiting writer wait behind it. A release grants the next writer alone, or the
///   whole run of readers at the head of the queue, in one message; they return without a
///   round trip of their own, except readers, which confirm with one.
/// - **Tokens**: one fencing counter per name. A write takes the next value, above every
///   earlier token of the name; a read does not move the counter and carries the value it
///   found (the last write's token).
/// - **Leases**: each hold, read or write, has a lease of its own: watchdog-renewed
///   (`lease: None`) or fixed. A reader that dies frees its share when its own lease ends,
///   whoever else reads.
///
/// In Redis it is `p:{name}:rwlock` and its companions (see the guide's [data layout](crate::guide::data_layout)): a
/// read-write lock and a [`Lock`](crate::Lock) of the same name are two objects.
///
/// # In [`Layout::Redisson`](crate::Layout::Redisson)
/// It is Java's `getReadWriteLock(name)`, so Rust and Java readers share it and writers of
/// either exclude the other: the hash `name` (the same key as Redisson's lock called `name`,
/// as in Java; while a lock holds it, a read or write of it is
/// [`Error::WrongType`](crate::Error::WrongType), and a lock attempt on a read-write lock's
/// hash too, with nothing written), a reader's field its thread's owner id, the writer's that with `:write`, and
/// per read hold a key `{name}:<reader>:rwlock_timeout:<k>` with the hold's lease, which the
/// watchdog renews with the hash (Java keeps a reader only while such a key lives). The rules
/// above hold but for two, which are Redisson's: there is no queue, so **readers enter while
/// a writer waits** and a release wakes waiters, which race (a write unlock wakes them all, a
/// final read unlock one per client); and a read does not move the counter
/// `redisson_lock_token:{name}` the writes take their tokens from.
///
/// ```no_run
/// # fn main() -> redlatch::Result<()> {
/// use std::time::Duration;
/// let client = redlatch::Client::open("redis://127.0.0.1/")?;
/// let config = client.read_write_lock("config");
/// {
///     let read = config.read()?; // many threads and processes may read at once
///     println!("reading with token {}", read.fencing_token());
/// }
/// if let Some(write) = config.try_write(Duration::from_secs(1), None)? {
///     println!("writing with token {}", write.fencing_token());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadWriteLock {
    runtime: Arc<Runtime>,
    keys: Arc<LockKeys>,
    /// Ends this handle's waits (`cancel_on`).
    cancel: Option<crate::Cancel>,
}

impl std::fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.keys.name())
            .finish()
    }
}

impl ReadWriteLock {
    pub(crate) fn new(runtime: Arc<Runtime>, name: &str) -> ReadWriteLock {
        let keys = runtime.core.keys(Family::ReadWrite, name);
        ReadWriteLock {
            runtime,
            keys: Arc::new(keys),
            cancel: None,
        }
    }

    /// The same handle, whose waits end with
    /// [`Error::Cancelled`](crate::Error::Cancelled) once `cancel` is cancelled (at once if it
    /// already is): the waiter leaves the queue in Redis and holds nothing. See
    /// [`Cancel`](crate::Cancel).
    pub fn cancel_on(&self, cancel: &crate::Cancel) -> ReadWriteLock {
        ReadWriteLock {
            cancel: Some(cancel.clone()),
            ..self.clone()
        }
    }

    /// The lock's name, as given to
    /// [`Client::read_write_lock`](crate::Client::read_write_lock).
    pub fn name(&self) -> &str {
        self.keys.name()
    }

    /// Waits as long as it takes, then reads with the watchdog.
    pub fn read(&self) -> Result<ReadGuard> {
        self.acquire_read(None, None)
            .map(|g| g.expect("an unbounded wait only ends with the lock"))
    }

    /// Waits at most `wait` to read (`ZERO`: one attempt); `lease: None` holds with the
    /// watchdog. `Ok(None)`: a writer held it or waited, until the end.
    pub fn try_read(&self, wait: Duration, lease: Option<Duration>) -> Result<Option<ReadGuard>> {
        validate_duration("wait", wait, Duration::ZERO)?;
        self.acquire_read(Some(wait), lease)
    }

    /// Waits as long as it takes, then writes with the watchdog. [`Error::WouldDeadlock`] if
    /// this thread holds only a read of it.
    pub fn write(&self) -> Result<WriteGuard> {
        self.acquire_write(None, None)
            .map(|g| g.expect("an unbounded wait only ends with the lock"))
    }

    /// Waits at most `wait` to write (`ZERO`: one attempt); `lease: None` holds with the
    /// watchdog. `Ok(None)`: not free in time. [`Error::WouldDeadlock`] at once if this
    /// thread holds only a read of it.
    pub fn try_write(&self, wait: Duration, lease: Option<Duration>) -> Result<Option<WriteGuard>> {
        validate_duration("wait", wait, Duration::ZERO)?;
        self.acquire_write(Some(wait), lease)
    }

    /// Whether anybody holds the lock, reading or writing (one read-only script; a hold whose
    /// lease has ended counts as gone). In [`Layout::Redisson`](crate::Layout::Redisson),
    /// whether the hash has a `mode`, as Java's `readLock().isLocked()` or
    /// `writeLock().isLocked()` would say for a read or a write; a plain lock's hash there is
    /// [`Error::WrongType`].
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let config = client.read_write_lock("config");
    /// let _read = config.read()?;
    /// assert!(config.is_locked()? && !config.is_write_locked()?);
    /// # Ok(()) }
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        Ok(self.inspect()?.locked)
    }

    /// Whether a writer holds the lock (it may be reading too). Java's
    /// `writeLock().isLocked()` in [`Layout::Redisson`](crate::Layout::Redisson).
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let config = client.read_write_lock("config");
    /// let _write = config.write()?;
    /// assert!(config.is_write_locked()?);
    /// # Ok(()) }
    /// ```
    pub fn is_write_locked(&self) -> Result<bool> {
        Ok(self.inspect()?.writing)
    }

    /// How many read holds the calling thread has on the lock: its live [`ReadGuard`]s, by
    /// this client's own records (no round trip); 0 once the hold is known lost
    /// ([`ReadGuard::is_lost`]), as after a [`force_unlock`](Self::force_unlock) by this
    /// client.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let config = client.read_write_lock("config");
    /// let (_a, _b) = (config.read()?, config.read()?);
    /// assert_eq!(config.read_hold_count()?, 2);
    /// # Ok(()) }
    /// ```
    pub fn read_hold_count(&self) -> Result<u32> {
        self.hold_count(true)
    }

    /// How many write holds the calling thread has on the lock: its live [`WriteGuard`]s, by
    /// this client's own records (no round trip); 0 once the hold is known lost.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let config = client.read_write_lock("config");
    /// let _write = config.write()?;
    /// assert_eq!(config.write_hold_count()?, 1);
    /// assert_eq!(config.read_hold_count()?, 0);
    /// # Ok(()) }
    /// ```
    pub fn write_hold_count(&self) -> Result<u32> {
        self.hold_count(false)
    }

    /// How long until the last lease of the lock's holders runs out; `None` when nobody holds
    /// it. In [`Layout::Redisson`](crate::Layout::Redisson), the hash's TTL, as Java's
    /// `remainTimeToLive()`.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// use std::time::Duration;
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let config = client.read_write_lock("config");
    /// let _read = config.try_read(Duration::ZERO, Some(Duration::from_secs(10)))?;
    /// println!("free in at most {:?}", config.remaining_ttl()?);
    /// # Ok(()) }
    /// ```
    pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
        Ok(self.inspect()?.ttl)
    }

    /// Frees the lock whoever holds it, every reader and the writer, in one script, and
    /// wakes its waiters, readers and writers, at once. `true` if anybody held it.
    ///
    /// In our layout the waiters that now fit are granted the lock in arrival order, as after
    /// a release. In [`Layout::Redisson`](crate::Layout::Redisson) it deletes the hash and
    /// the readers' `rwlock_timeout` keys and publishes `1` on `redisson_rwlock:{name}`, which
    /// wakes every waiter, Java's too (Java's `readLock().forceUnlock()` frees only a hash in
    /// read mode, its `writeLock().forceUnlock()` only one in write mode); a plain lock's hash
    /// there is [`Error::WrongType`], left untouched, and so is a hash that is no read-write
    /// lock's: `mode` other than `read` or `write`, a field other than `<owner>:<thread>` (or
    /// `<owner>:<thread>:write`), or a count that is not 1 to 99999 (an application's hash
    /// with a `mode` field stays, where Java's would delete it). In our layout only keys
    /// under the client's prefix are touched, and foreign data there is refused the same way.
    ///
    /// The holders are not interrupted: their guards report the loss at their next renewal,
    /// when their lease runs out, or when they release (at once for this client's), through
    /// [`on_lock_lost`](crate::ClientBuilder::on_lock_lost) with
    /// [`LossCause::ForceUnlocked`](crate::LossCause::ForceUnlocked) (in Redisson's layout,
    /// other clients' holders report [`LossCause::Taken`](crate::LossCause::Taken): it keeps
    /// no mark of a force-unlock).
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// if client.read_write_lock("config").force_unlock()? {
    ///     println!("freed a stuck lock");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        engine::check_name(&self.runtime.core, self.keys.family, self.keys.name())?;
        let core = &self.runtime.core;
        let keys = &self.keys;
        // Names this call, so that a retry after a lost reply answers the same rather than
        // freeing holds taken in the meantime.
        let request = uuid::Uuid::new_v4().simple().to_string();
        let was_locked = engine::call(core, keys, |con, freeing| {
            (core.dialect.rw_force_unlock)(con, keys, &request, freeing)
        })?;
        if was_locked {
            engine::forced(core, keys);
        }
        Ok(was_locked)
    }

    fn inspect(&self) -> Result<scripts::read_write::RwInspection> {
        let core = &self.runtime.core;
        engine::check_name(core, self.keys.family, self.keys.name())?;
        let keys = &self.keys;
        engine::call(core, keys, |con, _| (core.dialect.rw_inspect)(con, keys))
    }

    fn hold_count(&self, read: bool) -> Result<u32> {
        let core = &self.runtime.core;
        engine::check_name(core, self.keys.family, self.keys.name())?;
        let owner = self.keys.rw_owner(&core.thread_owner(), read);
        Ok(core
            .holds
            .get(self.keys.lock(), &owner)
            .filter(|hold| !hold.is_lost())
            .map_or(0, |hold| hold.guards()))
    }

    fn check(&self, lease: Option<Duration>) -> Result<()> {
        engine::check_name(&self.runtime.core, self.keys.family, self.keys.name())?;
        validate_lease(lease)
    }

    fn acquire_read(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<ReadGuard>> {
        self.check(lease)?;
        let core = &self.runtime.core;
        let thread = core.thread_owner();
        let writer = self.keys.rw_owner(&thread, false);
        let writing = core.holds.get(self.keys.lock(), &writer).is_some();
        let owner = self.keys.rw_owner(&thread, true);
        let share = Share::new(core, self.keys.clone(), Wants::Read { writer, writing });
        let held = share.acquire(&self.runtime, owner, wait, lease, self.cancel.as_ref())?;
        Ok(held.map(|held| ReadGuard {
            held,
            _not_send: PhantomData,
        }))
    }

    fn acquire_write(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<WriteGuard>> {
        self.check(lease)?;
        let core = &self.runtime.core;
        let thread = core.thread_owner();
        let owner = self.keys.rw_owner(&thread, false);
        let reads = core
            .holds
            .get(self.keys.lock(), &self.keys.rw_owner(&thread, true))
            .is_some();
        if reads && core.holds.get(self.keys.lock(), &owner).is_none() {
            return Err(Error::WouldDeadlock {
                name: self.keys.name().to_string(),
            });
        }
        let share = Share::new(core, self.keys.clone(), Wants::Write);
        let held = share.acquire(&self.runtime, owner, wait, lease, self.cancel.as_ref())?;
        Ok(held.map(|held| WriteGuard {
            held,
            _not_send: PhantomData,
        }))
    }
}

macro_rules! guard {
    ($(#[$doc:meta])* $guard:ident, $what:literal, $owner:literal, $take:literal) => {
        $(#[$doc])*
        #[must_use = "the hold is released as soon as the guard is dropped"]
        #[derive(Debug)]
        pub struct $guard {
            held: Held<Share>,
            _not_send: PhantomData<*const ()>,
        }

        impl $guard {
            #[doc = concat!("Releases this ", $what, " hold. `Err(Error::LockLost)` if it was no")]
            /// longer ours (or had been reported lost); `Err(Error::Redis)` if Redis could
            /// not be reached, and then it frees itself when its lease runs out.
            pub fn unlock(self) -> Result<()> {
                self.held.release()
            }

            /// The fencing token of this hold (see [`ReadWriteLock`]'s rules on tokens).
            pub fn fencing_token(&self) -> u64 {
                self.held.token()
            }

            /// The lock's name.
            pub fn name(&self) -> &str {
                self.held.name()
            }

            #[doc = concat!("The owner id this ", $what, " hold has in Redis: ", $owner, ".")]
            /// For tracing and for matching what the operator's tools show.
            pub fn owner_id(&self) -> &str {
                self.held.owner_id()
            }

            /// Whether the hold is known to be lost: renewal found it gone, or the last lease
            /// Redis confirmed has run out. Advisory, as
            /// [`LockGuard::is_lost`](crate::LockGuard::is_lost).
            pub fn is_lost(&self) -> bool {
                self.held.is_lost()
            }

            /// How long the lease Redis last confirmed has left, by this client's clock, with no
            /// round trip: zero once the hold is lost. A watchdog hold's lease is renewed every third
            /// of the watchdog timeout, so it stays between two and three thirds of it while Redis
            /// answers; a fixed lease only runs down. Advisory, like [`is_lost`](Self::is_lost).
            pub fn remaining_lease(&self) -> Duration {
                self.held.remaining_lease()
            }

            /// `Err(Error::LockLost)` when [`is_lost`](Self::is_lost).
            pub fn check(&self) -> Result<()> {
                self.held.check()
            }

            #[doc = concat!("Gives this ", $what, " hold a new lease: it now ends `lease` from now (set, not")]
            /// added to: it may end sooner than before; Redis keeps whole milliseconds).
            /// [`remaining_lease`](Self::remaining_lease), [`is_lost`](Self::is_lost) and the
            /// [`on_lock_lost`](crate::ClientBuilder::on_lock_lost) notice of an expiry follow
            /// the new lease. Re-entries share one hold: the thread's hold as a whole gets it.
            ///
            /// `Err(Error::LockLost)` if the hold is already gone (its lease ran out, or it was
            /// force-unlocked): it is never revived. `Err(Error::InvalidArgument)` for a hold
            /// the watchdog renews (taken, or re-entered, without a lease), and for a zero or
            /// absurd `lease`. `Err(Error::Redis)` if Redis could not be reached; the old lease
            /// then stands as far as this guard knows.
            ///
            /// In [`Layout::Redisson`](crate::Layout::Redisson) a write sets the hash's lease
            /// (never below what its thread's reads still have); a read sets its timeout keys,
            /// and the hash's lease to the longest any reader has left, as Java's read unlock
            /// does.
            ///
            /// ```no_run
            /// # fn main() -> redlatch::Result<()> {
            /// use std::time::Duration;
            /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
            /// let catalog = client.read_write_lock("catalog");
            #[doc = concat!("if let Some(guard) = catalog.try_", $take, "(Duration::ZERO, Some(Duration::from_secs(10)))? {")]
            ///     guard.extend(Duration::from_secs(60))?;
            /// }
            /// # Ok(()) }
            /// ```
            pub fn extend(&self, lease: Duration) -> Result<()> {
                self.held.extend(lease)
            }
        }
    };
}

guard!(
    /// Proof that the current thread reads a [`ReadWriteLock`]; releases the read when
    /// dropped (also during a panic; a failure is logged). Not `Send`.
    ReadGuard,
    "read",
    "the thread's owner id with `:r` after it, \
     [`Client::current_thread_owner_id`](crate::Client::current_thread_owner_id)`:r`, as \
     reads and the write of one thread are separate holders of the lock (in \
     [`Layout::Redisson`](crate::Layout::Redisson), the thread's owner id itself, as Java's \
     reader field)",
    "read"
);

guard!(
    /// Proof that the current thread writes a [`ReadWriteLock`]; releases the write when
    /// dropped (also during a panic; a failure is logged). Not `Send`. A read taken while
    /// writing stays held after this is gone (a downgrade).
    WriteGuard,
    "write",
    "the thread's, \
     [`Client::current_thread_owner_id`](crate::Client::current_thread_owner_id) (in \
     [`Layout::Redisson`](crate::Layout::Redisson), that with `:write` after it, as Java's \
     writer field)",
    "write"
);
