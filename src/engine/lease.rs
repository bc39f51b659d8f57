//! Durations the caller gives and the leases they become: checked once, in whole
//! milliseconds as Redis keeps them.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The longest lease or wait the crate accepts: far beyond any sensible value, far below
/// where milliseconds overflow in Redis or `Instant` arithmetic.
const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Checks a duration the caller gave: at least `min`, and small enough for the crate's
/// millisecond arithmetic.
pub(crate) fn validate_duration(what: &str, d: Duration, min: Duration) -> Result<()> {
    if d > MAX_DURATION {
        return Err(Error::invalid(format!(
            "{what} {d:?} is too long (at most {MAX_DURATION:?})"
        )));
    }
    if d < min {
        return Err(Error::invalid(format!(
            "{what} {d:?} is shorter than the minimum {min:?}"
        )));
    }
    Ok(())
}

/// Checks a lease the caller gave: Redis keeps whole milliseconds, so at least one.
pub(crate) fn validate_lease(lease: Option<Duration>) -> Result<()> {
    match lease {
        Some(lease) => validate_duration("lease", lease, Duration::from_millis(1)),
        None => Ok(()),
    }
}

/// When a wait that starts now ends; `None` for no end (none given, or too long to
/// represent).
pub(crate) fn deadline_after(wait: Option<Duration>) -> Option<Instant> {
    wait.and_then(|w| Instant::now().checked_add(w))
}

/// The lease terms of one acquisition: a fixed lease, or the watchdog's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Terms {
    /// What the caller asked for: `None` is the watchdog.
    pub asked: Option<Duration>,
    /// The client's watchdog timeout.
    pub watchdog: Duration,
}

impl Terms {
    /// The lease an acquisition sets, in whole milliseconds as Redis keeps it.
    pub fn lease_set(&self) -> Duration {
        Duration::from_millis(self.asked.unwrap_or(self.watchdog).as_millis() as u64)
    }

    /// How often the watchdog renews such a hold; `None` for a fixed lease.
    pub fn renew_every(&self) -> Option<Duration> {
        self.asked.is_none().then(|| self.watchdog / 3)
    }

    /// The lease a release hands the lock over with: a waiter that dies in the queue may be
    /// handed the lock, and then holds it no longer than a dead holder would. A longer lease
    /// is set when the hand-over is taken up.
    pub fn handover_lease(&self) -> Duration {
        self.lease_set().min(self.watchdog)
    }
}
