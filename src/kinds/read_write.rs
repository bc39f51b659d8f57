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
/// In Redis it is `p:{name}:rwlock` and its companions (see the README's data layout): a
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

    fn check(&self, lease: Option<Duration>) -> Result<()> {
        engine::check_name(&self.runtime.core, self.keys.name())?;
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
        let held = share.acquire(&self.runtime, owner, wait, lease)?;
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
        let held = share.acquire(&self.runtime, owner, wait, lease)?;
        Ok(held.map(|held| WriteGuard {
            held,
            _not_send: PhantomData,
        }))
    }
}

macro_rules! guard {
    ($(#[$doc:meta])* $guard:ident, $what:literal, $owner:literal) => {
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
     reader field)"
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
     writer field)"
);
