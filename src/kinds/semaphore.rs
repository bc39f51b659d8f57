//! [`Semaphore`]: a number of leased permits, and [`Permits`], proof of holding some.

use std::sync::Arc;
use std::time::Duration;

use super::held::Held;
use super::shares::{Share, Wants};
use crate::core::Runtime;
use crate::engine::{self, validate_duration, validate_lease};
use crate::error::{Error, Result};
use crate::keys::{Family, LockKeys};
use crate::scripts;

/// A handle on the semaphore called [`name`](Semaphore::name), made by
/// [`Client::semaphore`](crate::Client::semaphore): at most [`set_permits`] permits in use at
/// once, across every client.
///
/// Cheap to clone and to make; `Send + Sync`.
///
/// # Rules
/// - **Leased permits**: every acquisition holds its permits under a lease of its own,
///   watchdog-renewed (`lease: None`) or fixed, so the permits of a holder that crashed come
///   back when its lease ends. (Redisson needs a second type for that; this one is both.)
/// - **The total** is 0 until [`set_permits`], [`try_set_permits`](Semaphore::try_set_permits)
///   or [`add_permits`](Semaphore::add_permits) sets it. Changing it never takes permits
///   from their holders: when it falls below what is held, nobody is admitted until enough
///   come back; when it rises, the waiters that now fit are granted at once.
/// - **Arrival order**: waiters are granted in the order they came, across clients; the
///   first one that does not fit stops the run, so a large request at the head is not
///   overtaken by small ones behind it. A request for more than the total cannot be granted
///   by any release, so it waits aside, keeping its place in line, and does not hold up
///   the others; when the total is raised enough it is served in its turn. `acquire` with
///   such a request waits until then, however long; `try_acquire` gives `Ok(None)` at its
///   deadline.
/// - **One message per release**: a release grants, in one message, as many waiters at the
///   head of the queue as now fit; each returns holding its permits without a round trip.
/// - **No waiter sleeps past the earliest lease** among the holders, so a crashed holder
///   costs its lease, never a hang.
/// - **Tokens**: each acquisition takes the next fencing token of the semaphore's name.
///
/// In Redis it is `p:{name}:semaphore` and its companions (see the guide's [data layout](crate::guide::data_layout)): a
/// semaphore and a [`Lock`](crate::Lock) of the same name are two objects.
///
/// # In [`Layout::Redisson`](crate::Layout::Redisson)
/// It is Java's `getPermitExpirableSemaphore(name)`: the string `name` counts the permits
/// free, and the zset `{name}:timeout` keeps each permit held under an id of 16 random bytes,
/// scored by the end of its lease in epoch ms by the acquiring client's clock (so the clients'
/// clocks must agree, as Java's must); `n` permits are `n` ids (at most 65,536 in one
/// acquisition). Leases and tokens are as above (Java takes no token for a semaphore; ours
/// come from `redisson_lock_token:{name}`), but the rest is Redisson's: [`set_permits`] sets
/// the total as Java's `setPermits` (the permits free become the total less those held, below
/// zero until enough come back), [`available`](Semaphore::available) gives back the permits
/// whose lease ended first, and there is no queue: a release publishes the new count and the
/// waiters it wakes race, in no order, small requests before large ones. A waiter sleeps
/// until a message or the earliest lease end among the holders. Redisson's plain
/// `getSemaphore` (permits with no owner and no lease) is a
/// [`CountingSemaphore`](crate::CountingSemaphore), on the same key.
///
/// [`set_permits`]: Semaphore::set_permits
///
/// ```no_run
/// # fn main() -> redlatch::Result<()> {
/// use std::time::Duration;
/// let client = redlatch::Client::open("redis://127.0.0.1/")?;
/// let uploads = client.semaphore("uploads");
/// uploads.set_permits(8)?;
/// if let Some(permits) = uploads.try_acquire(2, Duration::from_secs(5), None)? {
///     // Send: another thread may give them back.
///     std::thread::spawn(move || permits.release()).join().unwrap()?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    runtime: Arc<Runtime>,
    keys: Arc<LockKeys>,
    /// Ends this handle's waits (`cancel_on`).
    cancel: Option<crate::Cancel>,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.keys.name())
            .finish()
    }
}

impl Semaphore {
    pub(crate) fn new(runtime: Arc<Runtime>, name: &str) -> Semaphore {
        let keys = runtime.core.keys(Family::Semaphore, name);
        Semaphore {
            runtime,
            keys: Arc::new(keys),
            cancel: None,
        }
    }

    /// The same handle, whose waits end with
    /// [`Error::Cancelled`](crate::Error::Cancelled) once `cancel` is cancelled (at once if it
    /// already is): the waiter leaves the queue in Redis and holds nothing. See
    /// [`Cancel`](crate::Cancel).
    pub fn cancel_on(&self, cancel: &crate::Cancel) -> Semaphore {
        Semaphore {
            cancel: Some(cancel.clone()),
            ..self.clone()
        }
    }

    /// The semaphore's name, as given to [`Client::semaphore`](crate::Client::semaphore).
    pub fn name(&self) -> &str {
        self.keys.name()
    }

    /// Sets the total number of permits. Holders keep theirs; waiters that now fit are
    /// granted at once. The total never expires.
    pub fn set_permits(&self, total: u32) -> Result<()> {
        self.check_name()?;
        let keys = &self.keys;
        let dialect = self.runtime.core.dialect;
        engine::call(&self.runtime.core, keys, |con, freeing| {
            (dialect.set_permits)(con, keys, total, freeing)
        })
    }

    /// How many permits are free now: the total less those held under a live lease (0 when
    /// the total was lowered below what is held).
    pub fn available(&self) -> Result<u32> {
        self.check_name()?;
        let keys = &self.keys;
        let dialect = self.runtime.core.dialect;
        engine::call(&self.runtime.core, keys, |con, freeing| {
            (dialect.available)(con, keys, freeing)
        })
    }

    /// Sets the total number of permits only if none is set yet: `Ok(true)` if this call set
    /// it, `Ok(false)` if a total was there (it is left as it is). Every service may call it
    /// at start-up without resetting a count in use. When it sets the total, waiters that
    /// now fit are granted at once. In [`Layout::Redisson`](crate::Layout::Redisson) it is Java's `trySetPermits`.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let uploads = client.semaphore("uploads");
    /// if uploads.try_set_permits(8)? {
    ///     println!("the first service up set the limit");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_set_permits(&self, total: u32) -> Result<bool> {
        self.check_name()?;
        let keys = &self.keys;
        let dialect = self.runtime.core.dialect;
        engine::call(&self.runtime.core, keys, |con, freeing| {
            (dialect.try_set_permits)(con, keys, total, freeing)
        })
    }

    /// Grows (`delta > 0`) or shrinks (`delta < 0`) the total by `delta` in one atomic step
    /// and returns the new total; a total not set yet counts as 0. What is held stays held:
    /// when the total falls below it, nobody is admitted until enough comes back; when it
    /// rises, the waiters that now fit are granted at once.
    ///
    /// `Err(Error::InvalidArgument)`, with nothing changed, when the new total would fall
    /// below 0 or rise above `u32::MAX`. In [`Layout::Redisson`](crate::Layout::Redisson) it is Java's `addPermits`,
    /// whose count of permits free goes below 0 while more is held than the new total (Java's
    /// does the same); Java would also let the total itself go below 0, which is refused here.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let uploads = client.semaphore("uploads");
    /// let total = uploads.add_permits(2)?; // two more uploads at once, from now on
    /// println!("{total} uploads at once");
    /// uploads.add_permits(-1)?;
    /// # Ok(()) }
    /// ```
    pub fn add_permits(&self, delta: i64) -> Result<u32> {
        self.check_name()?;
        if delta.unsigned_abs() > u64::from(u32::MAX) {
            return Err(Error::invalid(format!(
                "add_permits({delta}): a total is at most {}",
                u32::MAX
            )));
        }
        let keys = &self.keys;
        let dialect = self.runtime.core.dialect;
        engine::call(&self.runtime.core, keys, |con, freeing| {
            (dialect.add_permits)(con, keys, delta, freeing)
        })?
        .map_err(|total| {
            Error::invalid(format!(
                "add_permits({delta}) on semaphore {:?} with a total of {total}: a total is \
                 from 0 to {}; nothing was changed",
                self.name(),
                u32::MAX
            ))
        })
    }

    /// The total number of permits: those free and those held (0 when none is set). In
    /// [`Layout::Redisson`](crate::Layout::Redisson) it is Java's `getPermits` (which gives back first the permits
    /// whose lease ended; a total Java's `addPermits` took below 0 reads as 0).
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let uploads = client.semaphore("uploads");
    /// println!("{} of {} in use", uploads.acquired()?, uploads.permits()?);
    /// # Ok(()) }
    /// ```
    pub fn permits(&self) -> Result<u32> {
        self.count(scripts::Count::Permits)
    }

    /// How many permits are held now, by every holder (those whose lease ended are not). In
    /// [`Layout::Redisson`](crate::Layout::Redisson) it is Java's `acquiredPermits`.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let in_use = client.semaphore("uploads").acquired()?;
    /// # Ok(()) }
    /// ```
    pub fn acquired(&self) -> Result<u32> {
        self.count(scripts::Count::Acquired)
    }

    /// Takes every holder's permits back, whoever holds them, in one script, and wakes the
    /// waiters: `true` if any permit was held. The total stays as it is. For an operator
    /// freeing permits a stuck holder keeps (`redlatch force-unlock NAME --kind semaphore`).
    ///
    /// In our layout the waiters that now fit are granted their permits in arrival order, as
    /// after a release. In [`Layout::Redisson`](crate::Layout::Redisson) (where Java has no such call) every permit id
    /// goes from `{name}:timeout` and its permit is added back to the count `name`, and the
    /// new count is published on `redisson_sc:{name}`, as Java's release does, so Java's
    /// waiters wake too. The total (or Redisson's count) is never deleted; foreign data (a
    /// count that is not a decimal integer, keys of other types) is
    /// [`Error::WrongType`](crate::Error::WrongType), left untouched.
    ///
    /// The holders are not interrupted: their [`Permits`] report the loss at their next
    /// renewal, when their lease runs out, or when they release (at once for this client's,
    /// through [`on_lock_lost`](crate::ClientBuilder::on_lock_lost) with
    /// [`LossCause::ForceUnlocked`](crate::LossCause::ForceUnlocked)); other clients' holders
    /// learn it at their watchdog's next look as
    /// [`LossCause::Taken`](crate::LossCause::Taken), as if their lease had run out.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let uploads = client.semaphore("uploads");
    /// if uploads.force_unlock()? {
    ///     println!("{} permits free again", uploads.available()?);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        self.check_name()?;
        let core = &self.runtime.core;
        let keys = &self.keys;
        // Names this call, so that a retry after a lost reply answers the same rather than
        // taking back permits acquired in the meantime.
        let request = uuid::Uuid::new_v4().simple().to_string();
        let was_held = engine::call(core, keys, |con, freeing| {
            (core.dialect.semaphore_force_unlock)(con, keys, &request, freeing)
        })?;
        if was_held {
            engine::forced(core, keys);
        }
        Ok(was_held)
    }

    fn count(&self, which: scripts::Count) -> Result<u32> {
        self.check_name()?;
        let keys = &self.keys;
        let dialect = self.runtime.core.dialect;
        engine::call(&self.runtime.core, keys, |con, freeing| {
            (dialect.count)(con, keys, which, freeing)
        })
    }

    /// Waits as long as it takes for `n` permits, then holds them with the watchdog. With
    /// `n` above the total, that is until the total is raised enough.
    pub fn acquire(&self, n: u32) -> Result<Permits> {
        self.take(n, None, None)
            .map(|p| p.expect("an unbounded wait only ends with the permits"))
    }

    /// Waits at most `wait` for `n` permits (`ZERO`: one attempt); `lease: None` holds them
    /// with the watchdog. `Ok(None)`: not granted in time.
    pub fn try_acquire(
        &self,
        n: u32,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<Permits>> {
        validate_duration("wait", wait, Duration::ZERO)?;
        self.take(n, Some(wait), lease)
    }

    fn check_name(&self) -> Result<()> {
        engine::check_name(&self.runtime.core, self.keys.family, self.keys.name())
    }

    fn take(
        &self,
        n: u32,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<Permits>> {
        self.check_name()?;
        validate_lease(lease)?;
        if n == 0 {
            return Err(Error::invalid(
                "a semaphore acquisition needs at least one permit",
            ));
        }
        let core = &self.runtime.core;
        let owner = (core.dialect.permits_owner)(n, &|| core.fresh_owner())?;
        let share = Share::new(core, self.keys.clone(), Wants::Permits(n));
        let held = share.acquire(&self.runtime, owner, wait, lease, self.cancel.as_ref())?;
        Ok(held.map(|held| Permits { held, count: n }))
    }
}

/// Proof of holding some permits of a [`Semaphore`]; gives them back when dropped (also
/// during a panic; a failure is logged).
///
/// `Send`: each acquisition has an owner id of its own, not its thread's, so another thread
/// may give the permits back.
///
/// ```
/// fn send<T: Send>() {}
/// send::<redlatch::Permits>();
/// ```
#[must_use = "the permits are given back as soon as the guard is dropped"]
#[derive(Debug)]
pub struct Permits {
    held: Held<Share>,
    count: u32,
}

impl Permits {
    /// How many permits this guard holds.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Gives the permits back. `Err(Error::LockLost)` if they were no longer ours (their
    /// lease ran out, or were reported lost); `Err(Error::Redis)` if Redis could not be
    /// reached, and then they come back when their lease runs out.
    pub fn release(self) -> Result<()> {
        self.held.release()
    }

    /// The fencing token of this acquisition: increasing per semaphore name.
    pub fn fencing_token(&self) -> u64 {
        self.held.token()
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// The owner id these permits are held under in Redis: `<client id>:p<n>`, this
    /// acquisition's own, never a thread's. For tracing and for matching what the operator's
    /// tools show. In [`Layout::Redisson`](crate::Layout::Redisson), the permit ids in hex as
    /// Java shows them (32 digits each), separated by commas.
    pub fn owner_id(&self) -> &str {
        self.held.owner_id()
    }

    /// Whether the permits are known to be lost: renewal found them gone, or the last lease
    /// Redis confirmed has run out. Advisory, as
    /// [`LockGuard::is_lost`](crate::LockGuard::is_lost).
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// How long the lease Redis last confirmed has left, by this client's clock, with no
    /// round trip: zero once the hold is lost. A watchdog hold's lease is renewed every third
    /// of the watchdog timeout, so it stays between two and three thirds of it while Redis
    /// answers; a fixed lease only runs down. Advisory, like [`is_lost`](Permits::is_lost).
    pub fn remaining_lease(&self) -> Duration {
        self.held.remaining_lease()
    }

    /// `Err(Error::LockLost)` when [`is_lost`](Permits::is_lost).
    pub fn check(&self) -> Result<()> {
        self.held.check()
    }

    /// Gives the permits a new lease: it now ends `lease` from now (set, not added to: it may
    /// end sooner than before; Redis keeps whole milliseconds). [`remaining_lease`](Self::remaining_lease),
    /// [`is_lost`](Self::is_lost) and the [`on_lock_lost`](crate::ClientBuilder::on_lock_lost)
    /// notice of an expiry follow the new lease. In [`Layout::Redisson`](crate::Layout::Redisson) it is Java's
    /// `updateLeaseTime` for each of the acquisition's permit ids.
    ///
    /// `Err(Error::LockLost)` if the permits are already gone (their lease ran out): it is never revived. `Err(Error::InvalidArgument)` for permits the
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
    /// let jobs = client.semaphore("render-slots");
    /// if let Some(permits) = jobs.try_acquire(1, Duration::ZERO, Some(Duration::from_secs(30)))? {
    ///     // ... the render needs longer ...
    ///     permits.extend(Duration::from_secs(120))?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn extend(&self, lease: Duration) -> Result<()> {
        self.held.extend(lease)
    }
}
