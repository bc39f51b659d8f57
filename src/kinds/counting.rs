//! [`CountingSemaphore`]: permits with no owner and no lease (Java's `RSemaphore`), taken and
//! given back by anyone.

use std::sync::Arc;
use std::time::Duration;

use crate::core::Runtime;
use crate::engine::{self, Look, validate_duration};
use crate::error::{Error, Result};
use crate::keys::{Family, LockKeys};
use crate::scripts::counting;

/// The largest count, and the largest step: what the scripts' Lua counts exactly (2^53 - 1).
const MAX_COUNT: i64 = (1 << 53) - 1;

/// A handle on the counting semaphore called [`name`](CountingSemaphore::name), made by
/// [`Client::counting_semaphore`](crate::Client::counting_semaphore): a number of permits in
/// Redis that anyone takes ([`acquire`](CountingSemaphore::acquire)) and anyone gives back
/// ([`release`](CountingSemaphore::release)). Java's `RSemaphore`.
///
/// Cheap to clone and to make; `Send + Sync`. Nothing of it is held by an owner, so there is
/// no guard: a permit taken is gone from the count until some call gives one back.
///
/// # Which semaphore to pick
/// - **Permits here have no owner and no lease.** A holder that dies (a crash, a kill, a lost
///   network) leaks its permits *for good*: nothing gives them back but a
///   [`release`](CountingSemaphore::release) or [`add_permits`](CountingSemaphore::add_permits)
///   by someone else. Use it where permits are handed from one party to another (a producer
///   releases what a consumer acquires), counted like a resource pool that an operator
///   tops up, or shared with Java services that use Redisson's `getSemaphore`.
/// - [`Semaphore`](crate::Semaphore) holds each acquisition under a lease, renewed while its
///   holder lives, so a dead holder's permits come back by themselves; its waiters are
///   served in arrival order. Pick it to bound concurrency among processes that may die.
///
/// # Rules
/// - A semaphore never set has 0 permits. [`try_set_permits`](CountingSemaphore::try_set_permits)
///   sets the count once; [`add_permits`](CountingSemaphore::add_permits) moves it either
///   way, and may take it below 0 while permits are out (then
///   [`available`](CountingSemaphore::available) is negative and nobody gets any until enough
///   come back), as Java's does. The count stays within ±(2^53 - 1).
/// - **Not fair.** There is no queue: each call that gives permits (a release, an add, a
///   first set) publishes the new count, which wakes every waiter of every client; they try
///   again and race, so a large request may be overtaken by small ones for as long as they
///   keep coming. A waiter that finds too few sleeps again.
/// - Waiting costs no command while nothing happens; a waiter also tries again at least
///   every watchdog timeout, so a lost message costs at most that long, never a hang.
/// - Every call is one script, and idempotent under a lost reply: each carries a request id,
///   and a retry answers what the first run did instead of taking or giving twice.
///
/// In Redis it is the string `p:{name}:counting` (the permits free) and its channel
/// `p:{name}:counting:unlocked` (see the guide's [data layout](crate::guide::data_layout)): it shares no key with the
/// other kinds of the same name.
///
/// # In [`Layout::Redisson`](crate::Layout::Redisson)
/// It is Java's `getSemaphore(name)`: the string `name`, and the channel `redisson_sc:{name}`
/// on which every release, add and first set publishes the new count, with Java's steps for
/// each call. Java's `getPermitExpirableSemaphore(name)` (our
/// [`Client::semaphore`](crate::Client::semaphore)) uses the same key and channel, as in
/// Java. A retry's answer is kept under `redisson_unlock_latch:{name}:`, which Java never
/// reads.
///
/// ```no_run
/// # fn main() -> redlatch::Result<()> {
/// use std::time::Duration;
/// let client = redlatch::Client::open("redis://127.0.0.1/")?;
/// let slots = client.counting_semaphore("render-slots");
/// slots.try_set_permits(4)?; // only the first service up sets it
/// if slots.try_acquire(1, Duration::from_secs(5))? {
///     // ... render; then give the slot back, from this thread or any other
///     slots.release(1)?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountingSemaphore {
    runtime: Arc<Runtime>,
    keys: Arc<LockKeys>,
    /// Ends this handle's waits (`cancel_on`).
    cancel: Option<crate::Cancel>,
}

impl std::fmt::Debug for CountingSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountingSemaphore")
            .field("name", &self.keys.name())
            .finish()
    }
}

impl CountingSemaphore {
    pub(crate) fn new(runtime: Arc<Runtime>, name: &str) -> CountingSemaphore {
        let keys = runtime.core.keys(Family::Counting, name);
        CountingSemaphore {
            runtime,
            keys: Arc::new(keys),
            cancel: None,
        }
    }

    /// The same handle, whose waits end with
    /// [`Error::Cancelled`](crate::Error::Cancelled) once `cancel` is cancelled (at once if it
    /// already is), holding no permit. See [`Cancel`](crate::Cancel).
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let stop = redlatch::Cancel::new();
    /// let slots = client.counting_semaphore("render-slots").cancel_on(&stop);
    /// // another thread: stop.cancel();
    /// match slots.acquire(1) {
    ///     Err(e) if e.is_cancelled() => println!("told to stop; nothing taken"),
    ///     other => other?,
    /// }
    /// # Ok(()) }
    /// ```
    pub fn cancel_on(&self, cancel: &crate::Cancel) -> CountingSemaphore {
        CountingSemaphore {
            cancel: Some(cancel.clone()),
            ..self.clone()
        }
    }

    /// The semaphore's name, as given to
    /// [`Client::counting_semaphore`](crate::Client::counting_semaphore).
    pub fn name(&self) -> &str {
        self.keys.name()
    }

    /// Waits as long as it takes for `n` permits and takes them. `n` must be at least 1.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let jobs = client.counting_semaphore("jobs-ready");
    /// jobs.acquire(1)?; // a producer somewhere calls jobs.release(1) per job
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self, n: u32) -> Result<()> {
        self.take(n, None).map(|_| ())
    }

    /// Waits at most `wait` for `n` permits (`ZERO`: one attempt): `true` if it took them,
    /// `false` if not in time (nothing taken). `n` must be at least 1.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// use std::time::Duration;
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let slots = client.counting_semaphore("render-slots");
    /// if !slots.try_acquire(2, Duration::from_millis(500))? {
    ///     println!("busy, try later");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire(&self, n: u32, wait: Duration) -> Result<bool> {
        validate_duration("wait", wait, Duration::ZERO)?;
        self.take(n, Some(wait))
    }

    /// Gives `n` permits back (at least 1), from any thread or process, whoever took them;
    /// waiters of every client try again. Nothing checks that they were taken: a release
    /// without an acquisition adds permits.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// client.counting_semaphore("jobs-ready").release(1)?;
    /// # Ok(()) }
    /// ```
    pub fn release(&self, n: u32) -> Result<()> {
        self.check_name()?;
        check_permits("release", n)?;
        self.add(i64::from(n), true)
    }

    /// The permits free now: 0 for a semaphore never set, below 0 when
    /// [`add_permits`](CountingSemaphore::add_permits) took away more than was free.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// println!("{} free", client.counting_semaphore("render-slots").available()?);
    /// # Ok(()) }
    /// ```
    pub fn available(&self) -> Result<i64> {
        self.check_name()?;
        let keys = &self.keys;
        engine::call(&self.runtime.core, keys, |con, _| {
            counting::available(con, keys)
        })
    }

    /// Sets the permits to `n` (at least 1) only if no count is there yet: `true` if this
    /// call set it (waiters try again), `false` if one was there (nothing changed). Every
    /// service may call it at start-up without resetting a count in use.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// if client.counting_semaphore("render-slots").try_set_permits(4)? {
    ///     println!("the first service up set the limit");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_set_permits(&self, n: u32) -> Result<bool> {
        self.check_name()?;
        check_permits("try_set_permits", n)?;
        let request = request_id();
        let keys = &self.keys;
        let dialect = self.runtime.core.dialect;
        engine::call(&self.runtime.core, keys, |con, freeing| {
            dialect.counting.try_set(con, keys, n, &request, freeing)
        })
    }

    /// Moves the count by `delta` in one atomic step: up adds permits (waiters try again),
    /// down takes them away, even below 0 while permits are out (as Java's). A count never
    /// set counts 0. `Err(InvalidArgument)`, with nothing changed, for a delta of 0 or one
    /// that would take the count beyond ±(2^53 - 1).
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let slots = client.counting_semaphore("render-slots");
    /// slots.add_permits(2)?; // two more machines joined
    /// slots.add_permits(-1)?; // one left
    /// # Ok(()) }
    /// ```
    pub fn add_permits(&self, delta: i64) -> Result<()> {
        self.check_name()?;
        if delta == 0 || delta.unsigned_abs() > MAX_COUNT as u64 {
            return Err(Error::invalid(format!(
                "add_permits({delta}): a delta is from 1 to {MAX_COUNT} either way"
            )));
        }
        self.add(delta, false)
    }

    /// Takes every permit free now and answers how many (0 when none is). A count below 0
    /// stays as it is and gives 0. In [`Layout::Redisson`](crate::Layout::Redisson) it is
    /// Java's `drainPermits`, which answers a count below 0 as it is and sets it to 0.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let taken = client.counting_semaphore("render-slots").drain()?;
    /// println!("took the last {taken} slots for maintenance");
    /// # Ok(()) }
    /// ```
    pub fn drain(&self) -> Result<i64> {
        self.check_name()?;
        let request = request_id();
        let keys = &self.keys;
        let dialect = self.runtime.core.dialect;
        engine::call(&self.runtime.core, keys, |con, freeing| {
            dialect.counting.drain(con, keys, &request, freeing)
        })
    }

    fn add(&self, delta: i64, release: bool) -> Result<()> {
        let request = request_id();
        let keys = &self.keys;
        let dialect = self.runtime.core.dialect;
        engine::call(&self.runtime.core, keys, |con, freeing| {
            dialect
                .counting
                .add(con, keys, delta, release, &request, freeing)
        })?
        .map(|_| ())
        .map_err(|count| {
            Error::invalid(format!(
                "counting semaphore {:?} with {count} permits free: moving it by {delta} \
                 would leave ±{MAX_COUNT}; nothing was changed",
                self.name()
            ))
        })
    }

    /// Takes `n` permits, waiting at most `wait` (`None`: as long as it takes): every
    /// attempt is the taking script, run again after each message on the channel.
    fn take(&self, n: u32, wait: Option<Duration>) -> Result<bool> {
        self.check_name()?;
        check_permits("an acquisition", n)?;
        let core = &self.runtime.core;
        let keys = &self.keys;
        // One id for every attempt of this wait: only the one that takes leaves a marker,
        // and the wait ends with it.
        let request = request_id();
        let freeing = engine::freeing(core);
        engine::watch(
            core,
            keys,
            core.thread_owner(),
            wait,
            self.cancel.as_ref(),
            |con| {
                Ok(Look {
                    holds: core
                        .dialect
                        .counting
                        .acquire(con, keys, n, &request, freeing)?,
                    at_us: None,
                })
            },
        )
    }

    fn check_name(&self) -> Result<()> {
        engine::check_name(&self.runtime.core, self.keys.family, self.keys.name())
    }
}

/// `n` permits for `what`: at least 1.
fn check_permits(what: &str, n: u32) -> Result<()> {
    if n == 0 {
        return Err(Error::invalid(format!(
            "{what} of a counting semaphore needs at least one permit"
        )));
    }
    Ok(())
}

/// Names one call, so that its retry after a lost reply answers the same.
fn request_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
