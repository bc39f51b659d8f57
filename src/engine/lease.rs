//! Durations the caller gives and the leases they become: checked once, in whole
//! milliseconds as Redis keeps them.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::words::Words;

/// The longest lease or wait the crate accepts: far beyond any sensible value, far below
/// where milliseconds overflow in Redis or `Instant` arithmetic.
const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Checks a duration the caller gave: at least `min`, and small enough for the crate's
/// millisecond arithmetic.
pub(crate) fn validate_duration(what: &str, d: Duration, min: Duration) -> Result<()> {
    if d > MAX_DURATION {
        return Err(Error::invalid(format!(
            "{what} of {} is too long: at most {}",
            Words(d),
            Words(MAX_DURATION)
        )));
    }
    if d < min {
        return Err(Error::invalid(format!(
            "{what} of {} is shorter than the minimum of {}",
            Words(d),
            Words(min)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(what: &str, d: Duration, min: Duration) -> String {
        match validate_duration(what, d, min) {
            Err(Error::InvalidArgument(message)) => message,
            other => panic!("{what} {d:?}: expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn refusals_say_the_value_and_the_limit_in_words() {
        let ms = Duration::from_millis;
        assert_eq!(
            refusal("lease", MAX_DURATION + Duration::from_secs(1), ms(1)),
            "lease of 100 years and 1 s is too long: at most 100 years"
        );
        assert_eq!(
            refusal("lease", MAX_DURATION + Duration::from_nanos(1), ms(1)),
            "lease of over 100 years is too long: at most 100 years"
        );
        assert_eq!(
            refusal("wait", Duration::MAX, Duration::ZERO),
            "wait of over 584,942,417,355 years and 26 days is too long: at most 100 years"
        );
        assert_eq!(
            refusal("watchdog_timeout", ms(10), ms(30)),
            "watchdog_timeout of 10 ms is shorter than the minimum of 30 ms"
        );
        assert_eq!(
            refusal("watchdog_timeout", ms(30) - Duration::from_nanos(1), ms(30)),
            "watchdog_timeout of over 29 ms 999 µs is shorter than the minimum of 30 ms"
        );
        assert_eq!(
            refusal("lease", Duration::from_micros(500), ms(1)),
            "lease of 500 µs is shorter than the minimum of 1 ms"
        );
        assert!(validate_duration("lease", MAX_DURATION, ms(1)).is_ok());
        assert!(validate_duration("watchdog_timeout", ms(30), ms(30)).is_ok());
    }
}
