//! Waiting by backoff: attempts with capped, jittered exponential sleeps between them, and
//! no queue and no subscription. For fleets that do not want pub/sub; the price is a hand-off
//! that comes at the next attempt instead of with the release.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Kind;
use super::acquire::{Acquired, attempt, counted_cancel};
use super::lease::{Terms, deadline_after, validate_duration};
use crate::cancel::{Cancel, Watched};
use crate::core::Core;
use crate::error::{Error, Result};
use crate::scripts::Queueing;
use crate::stats::Outcome;
use crate::words::Words;

/// The longest backoff step a user may ask for.
const MAX_CAP: Duration = Duration::from_secs(3600);

/// How long a spinning waiter sleeps between attempts: from `min`, growing by `multiplier`
/// up to `max` (`1.0`, or `min == max`: constant), each sleep drawn at random between half
/// and all of the current step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Backoff {
    pub min: Duration,
    pub max: Duration,
    pub multiplier: f64,
}

/// The largest growth per attempt a user may ask for.
const MAX_MULTIPLIER: f64 = 100.0;

impl Backoff {
    /// 2 ms, doubling to 128 ms: a few attempts in the first tens of milliseconds (most
    /// holds are short), then about eight a second, whatever the number of waiters.
    pub const DEFAULT: Backoff = Backoff {
        min: Duration::from_millis(2),
        max: Duration::from_millis(128),
        multiplier: 2.0,
    };

    /// Checks a backoff a user gave: at least 1 ms to start, a cap not below it, no cap
    /// beyond an hour, and a multiplier from 1 to 100.
    pub fn validate(self) -> Result<Backoff> {
        if !(1.0..=MAX_MULTIPLIER).contains(&self.multiplier) {
            return Err(Error::invalid(format!(
                "backoff multiplier of {} is out of range: from 1 to {MAX_MULTIPLIER}",
                self.multiplier
            )));
        }
        validate_duration("backoff cap", self.max, Duration::from_millis(1))?;
        if self.min.is_zero() || self.min > self.max {
            return Err(Error::invalid(format!(
                "backoff from {} to {}: the start must be at least 1 ms and at most the cap",
                Words(self.min),
                Words(self.max)
            )));
        }
        if self.max > MAX_CAP {
            return Err(Error::invalid(format!(
                "backoff cap of {} is too long: at most {}",
                Words(self.max),
                Words(MAX_CAP)
            )));
        }
        Ok(self)
    }
}

/// Acquires `kind` for `owner` as [`acquire`](super::acquire()) does, but waits by backoff:
/// each attempt takes no place in the queue, so a release never hands the object to a
/// spinning waiter and nobody publishes to it. A sleep never outlasts the holder's remaining
/// lease (a dead holder costs no more than its lease) nor the caller's deadline.
pub(crate) fn spin(
    core: &Core,
    kind: &dyn Kind,
    owner: Arc<str>,
    wait: Option<Duration>,
    terms: Terms,
    backoff: Backoff,
    cancel: Option<&Cancel>,
) -> Result<Option<Acquired>> {
    let started = Instant::now();
    let deadline = deadline_after(wait);
    let keys = kind.keys();
    let watched = Watched::new(&core.cancel, cancel);
    if watched.is_cancelled() {
        return Err(counted_cancel(core, keys));
    }
    let existing = core.holds.get(keys.lock(), &owner);
    let mut jitter = Jitter::new();
    let mut step = backoff.min;
    let mut outcome = Outcome::AtOnce;
    loop {
        // A wait of the lock's own that failed may have left places of this owner in the
        // queue (a spin lock is that lock): an attempt voids them, as the lock's does.
        let reply = core.leftovers.voiding(&[keys.lock()], &owner, |places| {
            let voiding = Queueing {
                leftovers: places[0].clone(),
                ..Queueing::NONE
            };
            attempt(core, kind, &owner, existing.clone(), terms, &voiding)
        })?;
        let busy = match reply {
            Ok(acquired) => {
                core.counters.acquisition(outcome, started.elapsed());
                return Ok(Some(acquired));
            }
            Err(busy) => busy,
        };
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            core.counters
                .acquisition(Outcome::TimedOut, started.elapsed());
            return Ok(None);
        }
        outcome = Outcome::AfterWait;
        // Between half and all of the step: waiters that started together drift apart
        // instead of arriving at the lock in step.
        let half = step / 2;
        let sleep = (half + jitter.up_to(step - half))
            .min(busy.ttl.max(Duration::from_millis(1)))
            .min(left.unwrap_or(Duration::MAX));
        if watched.sleep(sleep) {
            // Nothing to leave: a spinning waiter takes no place in the queue.
            return Err(counted_cancel(core, keys));
        }
        step = step.mul_f64(backoff.multiplier).min(backoff.max);
    }
}

/// A small random source for the sleeps' jitter (xorshift64): spread, not secrecy.
struct Jitter(u64);

impl Jitter {
    fn new() -> Jitter {
        // The standard library's per-process random keys, without a crate for it.
        let seed = RandomState::new().build_hasher().finish();
        Jitter(seed | 1)
    }

    fn up_to(&mut self, max: Duration) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let micros = max.as_micros() as u64;
        Duration::from_micros(if micros == 0 {
            0
        } else {
            self.0 % (micros + 1)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_its_bound_and_spreads() {
        let mut jitter = Jitter::new();
        let max = Duration::from_millis(10);
        let draws: Vec<Duration> = (0..1000).map(|_| jitter.up_to(max)).collect();
        assert!(draws.iter().all(|d| *d <= max));
        let low = draws.iter().filter(|d| **d < max / 2).count();
        assert!((300..700).contains(&low), "{low} of 1000 below the middle");
        assert_eq!(jitter.up_to(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn a_backoff_is_checked() {
        let ms = Duration::from_millis;
        assert!(Backoff::DEFAULT.validate().is_ok());
        for bad in [
            (ms(0), ms(10)),
            (ms(20), ms(10)),
            (ms(1), Duration::from_secs(7200)),
        ] {
            let backoff = Backoff {
                min: bad.0,
                max: bad.1,
                multiplier: 2.0,
            };
            assert!(matches!(backoff.validate(), Err(Error::InvalidArgument(_))));
        }
        for multiplier in [0.5, 0.0, -2.0, 101.0, f64::NAN, f64::INFINITY] {
            let backoff = Backoff {
                multiplier,
                ..Backoff::DEFAULT
            };
            assert!(
                matches!(backoff.validate(), Err(Error::InvalidArgument(_))),
                "{multiplier}"
            );
        }
    }
}
