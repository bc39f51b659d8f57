//! [`CountDownLatch`]: threads anywhere wait until a count, counted down anywhere, is zero.

use std::sync::Arc;
use std::time::Duration;

use crate::core::Runtime;
use crate::engine::{self, Look, validate_duration};
use crate::error::{Error, Result};
use crate::keys::{Family, LockKeys};
use crate::scripts::latch;
use crate::words::Count;

/// The largest count: Redis keeps a count as a 64-bit signed integer.
const MAX_COUNT: u64 = i64::MAX as u64;

/// A handle on the count-down latch called [`name`](CountDownLatch::name), made by
/// [`Client::count_down_latch`](crate::Client::count_down_latch).
///
/// Cheap to clone and to make; `Send + Sync`. Nothing of it is held, so there is no guard.
///
/// # Rules
/// - A latch never set counts 0, and [`wait`](CountDownLatch::wait) at 0 returns `true` at
///   once.
/// - [`try_set_count`](CountDownLatch::try_set_count) starts a round only when no count is
///   running (0 or never set); `try_set_count(0)` is `InvalidArgument`.
/// - [`count_down`](CountDownLatch::count_down) at 0 changes nothing. The count-down that
///   reaches zero wakes every waiter of every client with one message; waiters are released
///   only at zero.
/// - [`delete`](CountDownLatch::delete) ends a round early: every waiter wakes and finds
///   the latch open.
/// - These are idempotent under a lost reply: each call carries a request id, and a retry
///   answers what the first run did instead of counting down twice.
/// - Waiting ([`wait`](CountDownLatch::wait) with a timeout,
///   [`await_zero`](CountDownLatch::await_zero) without) costs no command while nothing
///   happens; a waiter checks again at least every watchdog timeout, so a lost message costs
///   at most that long, never a hang.
/// - At zero the latch's key expires after a short retention (40 s with the default
///   timeouts), so nothing is left behind; that is safe because an absent latch counts 0,
///   which is what it said before it expired.
///
/// Its count lives in Redis without a lease: a round whose counters die keeps its waiters
/// waiting until someone counts it down or [`delete`](CountDownLatch::delete)s it.
///
/// # In [`Layout::Redisson`](crate::Layout::Redisson)
/// It is Java's `getCountDownLatch(name)`: the string `name`, deleted at zero, and the
/// channel `redisson_countdownlatch__channel__{name}` (braces always), on which the
/// count-down that reaches zero publishes `0`, a new round `1`, and a delete `0` (see
/// [`delete`](CountDownLatch::delete)). A count-down's retry
/// answers the same through a marker under `redisson_unlock_latch:{name}:`, which Java never
/// reads.
///
/// ```no_run
/// # fn main() -> redlatch::Result<()> {
/// use std::time::Duration;
/// let client = redlatch::Client::open("redis://127.0.0.1/")?;
/// let ready = client.count_down_latch("shards-loaded");
/// ready.try_set_count(3)?;
/// // ... three workers, anywhere, each call ready.count_down() ...
/// if ready.wait(Duration::from_secs(60))? {
///     println!("all three loaded");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    runtime: Arc<Runtime>,
    keys: Arc<LockKeys>,
    /// Ends this handle's waits (`cancel_on`).
    cancel: Option<crate::Cancel>,
}

impl std::fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", &self.keys.name())
            .finish()
    }
}

impl CountDownLatch {
    pub(crate) fn new(runtime: Arc<Runtime>, name: &str) -> CountDownLatch {
        let keys = runtime.core.keys(Family::Latch, name);
        CountDownLatch {
            runtime,
            keys: Arc::new(keys),
            cancel: None,
        }
    }

    /// The same handle, whose waits end with
    /// [`Error::Cancelled`](crate::Error::Cancelled) once `cancel` is cancelled (at once if it
    /// already is): the count is left as it is. See
    /// [`Cancel`](crate::Cancel).
    pub fn cancel_on(&self, cancel: &crate::Cancel) -> CountDownLatch {
        CountDownLatch {
            cancel: Some(cancel.clone()),
            ..self.clone()
        }
    }

    /// The latch's name, as given to
    /// [`Client::count_down_latch`](crate::Client::count_down_latch).
    pub fn name(&self) -> &str {
        self.keys.name()
    }

    /// Starts a round of `n`: `true` if it did, `false` if a count is already running
    /// (nothing changed then). `n` must be between 1 and 2^63 - 1.
    pub fn try_set_count(&self, n: u64) -> Result<bool> {
        self.check_name()?;
        if n == 0 || n > MAX_COUNT {
            return Err(Error::invalid(format!(
                "a latch's count must be between 1 and {} (2^63 - 1), not {}",
                Count(MAX_COUNT),
                Count(n)
            )));
        }
        let request = request_id();
        let keys = &self.keys;
        let dialect = self.runtime.core.dialect;
        engine::call(&self.runtime.core, keys, |con, freeing| {
            (dialect.latch_set)(con, keys, n, &request, freeing)
        })
    }

    /// Counts down by one and answers what remains; at 0 it stays 0. The call that reaches
    /// zero wakes every waiter.
    pub fn count_down(&self) -> Result<u64> {
        self.check_name()?;
        let request = request_id();
        let keys = &self.keys;
        let dialect = self.runtime.core.dialect;
        engine::call(&self.runtime.core, keys, |con, freeing| {
            (dialect.latch_count_down)(con, keys, &request, freeing)
        })
    }

    /// The count now: 0 for a latch never set.
    pub fn count(&self) -> Result<u64> {
        self.check_name()?;
        let keys = &self.keys;
        engine::call(&self.runtime.core, keys, |con, _| latch::count(con, keys))
    }

    /// Waits at most `timeout` for the count to reach zero: `true` when it did (at once if
    /// it is 0), `false` when the time ran out.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        self.check_name()?;
        validate_duration("timeout", timeout, Duration::ZERO)?;
        self.watch_zero(Some(timeout))
    }

    /// Waits as long as it takes for the count to reach zero (at once if it is 0): Java's
    /// `await()`. It still looks again at least every watchdog timeout, so a lost message
    /// costs at most that long, never a hang. Ends with
    /// [`Error::Cancelled`](crate::Error::Cancelled) if the handle's
    /// [`cancel_on`](CountDownLatch::cancel_on) fires (or the client's
    /// [`cancel_all_waits`](crate::Client::cancel_all_waits)): the count is left as it is.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let stop = redlatch::Cancel::new();
    /// let ready = client.count_down_latch("shards-loaded").cancel_on(&stop);
    /// // ... another thread may call stop.cancel() at shutdown ...
    /// match ready.await_zero() {
    ///     Ok(()) => println!("all loaded"),
    ///     Err(e) if e.is_cancelled() => println!("shutting down"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn await_zero(&self) -> Result<()> {
        self.watch_zero(None).map(|_| ())
    }

    /// Deletes the latch, its count running or not: `true` if a count was running. Every
    /// waiter of every client wakes and finds the latch open (an absent latch counts 0),
    /// and a new round may start at once. Idempotent under a lost reply, as the other calls.
    ///
    /// In [`Layout::Redisson`](crate::Layout::Redisson) it is Java's `delete()`, but it
    /// publishes `0` (Java's "zero count") where Java's publishes `1`: `1` only closes a
    /// Java waiter's latch again, and Java's `await()` would wait on; `0` opens it, and the
    /// waiter finds the key gone. Our waiters wake on Java's `1` as well.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let ready = client.count_down_latch("shards-loaded");
    /// // The round is abandoned: let everybody waiting go on.
    /// if ready.delete()? {
    ///     println!("a count was running; its waiters are released");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn delete(&self) -> Result<bool> {
        self.check_name()?;
        let request = request_id();
        let keys = &self.keys;
        let dialect = self.runtime.core.dialect;
        engine::call(&self.runtime.core, keys, |con, freeing| {
            (dialect.latch_delete)(con, keys, &request, freeing)
        })
    }

    /// Waits at most `wait` (`None`: as long as it takes) for the count to reach zero.
    fn watch_zero(&self, wait: Option<Duration>) -> Result<bool> {
        self.check_name()?;
        let core = &self.runtime.core;
        let keys = &self.keys;
        let cancel = self.cancel.as_ref();
        engine::watch(core, keys, core.thread_owner(), wait, cancel, |con| {
            let (count, at_us) = latch::count_at(con, keys)?;
            Ok(Look {
                holds: count == 0,
                at_us: Some(at_us),
            })
        })
    }

    fn check_name(&self) -> Result<()> {
        engine::check_name(&self.runtime.core, self.keys.family, self.keys.name())
    }
}

/// Names one call, so that its retry after a lost reply answers the same.
fn request_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
