//! A client's counters ([`Counters`], atomics the threads bump as they go) and their snapshot
//! ([`Stats`], from [`Client::stats`](crate::Client::stats), no I/O).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a client has done since it was built, and what it is doing now: a snapshot from
/// [`Client::stats`](crate::Client::stats), taken without I/O.
///
/// Its `Debug` is one line, for a log.
#[derive(Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// Acquisitions of every kind (re-entries included; a `MultiLock` or `Redlock` counts
    /// each member it takes).
    pub acquisitions: u64,
    /// ... of which at the first attempt, without waiting.
    pub acquired_at_once: u64,
    /// ... of which after waiting, by an attempt of the waiter's own.
    pub acquired_after_wait: u64,
    /// ... of which handed over by a release's message, without a round trip.
    pub handed_over: u64,
    /// Acquisitions that waited and gave up (`Ok(None)`).
    pub timeouts: u64,
    /// The median time an acquisition took, over every acquisition since the client was
    /// built (from a histogram with buckets a factor of two apart: a bucket's upper bound).
    pub wait_p50: Duration,
    /// The 99th percentile of the same.
    pub wait_p99: Duration,
    /// Holds the watchdog renewed.
    pub renewals_ok: u64,
    /// Renewals that failed: the hold was no longer ours, or Redis could not be reached.
    pub renewals_failed: u64,
    /// Holds lost, however found (each announced once through
    /// [`on_lock_lost`](crate::ClientBuilder::on_lock_lost)).
    pub locks_lost: u64,
    /// Times the subscriber connected again after losing a connection.
    pub reconnects: u64,
    /// Threads waiting now for a hand-over or a wake-up.
    pub waiting_threads: u64,
    /// Channels subscribed now (one per object some thread waits for).
    pub subscriptions: u64,
}

impl fmt::Debug for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "acquisitions {} (at once {}, after wait {}, handed over {}), timeouts {}, \
             wait p50 {:?} p99 {:?}, renewals ok {} failed {}, lost {}, reconnects {}, \
             waiting {}, subscriptions {}",
            self.acquisitions,
            self.acquired_at_once,
            self.acquired_after_wait,
            self.handed_over,
            self.timeouts,
            self.wait_p50,
            self.wait_p99,
            self.renewals_ok,
            self.renewals_failed,
            self.locks_lost,
            self.reconnects,
            self.waiting_threads,
            self.subscriptions
        )
    }
}

/// Buckets of the wait histogram: bucket `i` counts waits under 2^i µs (the last, anything
/// longer): up to about 73 minutes.
const BUCKETS: usize = 33;

/// How an acquisition ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    AtOnce,
    AfterWait,
    HandedOver,
    TimedOut,
}

/// The counters a client's threads bump: relaxed atomics, since a snapshot needs no order
/// between them.
#[derive(Debug)]
pub(crate) struct Counters {
    at_once: AtomicU64,
    after_wait: AtomicU64,
    handed_over: AtomicU64,
    timeouts: AtomicU64,
    waits: [AtomicU64; BUCKETS],
    pub renewals_ok: AtomicU64,
    pub renewals_failed: AtomicU64,
    pub locks_lost: AtomicU64,
    pub reconnects: AtomicU64,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            at_once: AtomicU64::new(0),
            after_wait: AtomicU64::new(0),
            handed_over: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            waits: std::array::from_fn(|_| AtomicU64::new(0)),
            renewals_ok: AtomicU64::new(0),
            renewals_failed: AtomicU64::new(0),
            locks_lost: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
        }
    }
}

impl Counters {
    /// An acquisition that took `took` ended as `outcome`.
    pub fn acquisition(&self, outcome: Outcome, took: Duration) {
        let counter = match outcome {
            Outcome::AtOnce => &self.at_once,
            Outcome::AfterWait => &self.after_wait,
            Outcome::HandedOver => &self.handed_over,
            Outcome::TimedOut => &self.timeouts,
        };
        bump(counter, 1);
        if outcome != Outcome::TimedOut {
            let micros = took.as_micros().min(u64::MAX as u128) as u64;
            let bucket = (u64::BITS - micros.leading_zeros()) as usize;
            bump(&self.waits[bucket.min(BUCKETS - 1)], 1);
        }
    }

    /// A snapshot; `waiting` and `subscriptions` come from the subscriber.
    pub fn snapshot(&self, waiting: u64, subscriptions: u64) -> Stats {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let waits: Vec<u64> = self.waits.iter().map(read).collect();
        let (at_once, after_wait, handed_over) = (
            read(&self.at_once),
            read(&self.after_wait),
            read(&self.handed_over),
        );
        Stats {
            acquisitions: at_once + after_wait + handed_over,
            acquired_at_once: at_once,
            acquired_after_wait: after_wait,
            handed_over,
            timeouts: read(&self.timeouts),
            wait_p50: quantile(&waits, 0.5),
            wait_p99: quantile(&waits, 0.99),
            renewals_ok: read(&self.renewals_ok),
            renewals_failed: read(&self.renewals_failed),
            locks_lost: read(&self.locks_lost),
            reconnects: read(&self.reconnects),
            waiting_threads: waiting,
            subscriptions,
        }
    }
}

/// Adds `n`.
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// The upper bound of the bucket that holds quantile `q` of `buckets`; zero when empty.
fn quantile(buckets: &[u64], q: f64) -> Duration {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return Duration::ZERO;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Duration::from_micros(if i == 0 { 0 } else { 1u64 << i });
        }
    }
    Duration::from_micros(1u64 << (BUCKETS - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_the_histogram() {
        let counters = Counters::default();
        assert_eq!(counters.snapshot(0, 0).wait_p50, Duration::ZERO);
        for _ in 0..98 {
            counters.acquisition(Outcome::AtOnce, Duration::from_micros(300));
        }
        counters.acquisition(Outcome::HandedOver, Duration::from_millis(40));
        counters.acquisition(Outcome::AfterWait, Duration::from_secs(2));
        counters.acquisition(Outcome::TimedOut, Duration::from_secs(9));
        let stats = counters.snapshot(3, 1);
        assert_eq!(stats.acquisitions, 100);
        assert_eq!((stats.acquired_at_once, stats.handed_over), (98, 1));
        assert_eq!((stats.acquired_after_wait, stats.timeouts), (1, 1));
        // 300 µs lies in [256, 512): the bucket's bound is 512 µs.
        assert_eq!(stats.wait_p50, Duration::from_micros(512));
        assert_eq!(stats.wait_p99, Duration::from_micros(65_536));
        assert_eq!((stats.waiting_threads, stats.subscriptions), (3, 1));
        let line = format!("{stats:?}");
        assert!(
            !line.contains('\n') && line.contains("acquisitions 100"),
            "{line}"
        );
    }
}
