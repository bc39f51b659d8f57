//! A client's counters ([`Counters`], atomics the threads bump as they go) and their snapshot
//! ([`Stats`], from [`Client::stats`](crate::Client::stats), no I/O).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::words::Words;

/// What a client has done since it was built, and what it is doing now: a snapshot from
/// [`Client::stats`](crate::Client::stats), taken without I/O.
///
/// Its `Display` is one line, for a log (durations in words, the wait quantiles as the
/// bounds they are):
///
/// ```text
/// acquisitions 100 (at once 98, after wait 1, handed over 1), timeouts 1, cancelled 0, wait p50 <= 300 µs, p99 <= 40 ms, renewals ok 12 failed 0, lost 0, reconnects 0, waiting threads 3, subscriptions 1, lost replies settled 0
/// ```
///
/// Its `Debug` is the struct, field by field, durations exact.
#[derive(Clone, Debug, Default, PartialEq)]
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
    /// Waits that were cancelled: calls that returned
    /// [`Error::Cancelled`](crate::Error::Cancelled), of every kind (a latch's `wait` and a
    /// counting semaphore's `acquire` included, though they are not acquisitions), whether
    /// the cancel came while the call waited or before it began.
    ///
    /// One call is one cancelled wait: a `MultiLock` or `Redlock` whose wait is cancelled
    /// counts once, not once per member (a `Redlock`'s on the client of the master it was
    /// waiting for).
    pub cancelled: u64,
    /// At most how long the median acquisition took, over every acquisition since the
    /// client was built (those that timed out not counted).
    ///
    /// Not the exact median but the upper bound of the histogram bucket it falls in: the
    /// median took this long or less, and more than the bound below. The bounds are 1,
    /// 1.25, 1.5, 2, 2.5, 3, 4, 5, 6 and 8 times a power of ten microseconds (the
    /// fractional ones only from 100 µs on), up to 50 min, then 1 h: from 100 µs on, each
    /// is at most a third above the one before, so the median is at least three quarters of
    /// this. [`Duration::ZERO`] before the first acquisition, [`Duration::MAX`] when the
    /// median took over an hour.
    pub wait_p50: Duration,
    /// At most how long the 99th percentile of acquisitions took: the upper bound of its
    /// bucket in the same histogram, as for [`wait_p50`](Stats::wait_p50).
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
    /// Attempts whose reply was lost (a timeout, a connection that failed after the request
    /// was sent), settled once the server answered again: whatever they took in Redis,
    /// should they have run after all, was given back (see the guide's reliability page).
    pub lost_replies_settled: u64,
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "acquisitions {} (at once {}, after wait {}, handed over {}), timeouts {}, \
             cancelled {}, wait p50 {}, p99 {}, renewals ok {} failed {}, lost {}, \
             reconnects {}, waiting threads {}, subscriptions {}, lost replies settled {}",
            self.acquisitions,
            self.acquired_at_once,
            self.acquired_after_wait,
            self.handed_over,
            self.timeouts,
            self.cancelled,
            Bound(self.wait_p50),
            Bound(self.wait_p99),
            self.renewals_ok,
            self.renewals_failed,
            self.locks_lost,
            self.reconnects,
            self.waiting_threads,
            self.subscriptions,
            self.lost_replies_settled
        )
    }
}

/// A quantile of the wait histogram as what it is: `<= 300 µs`, `> 1 h` past the last
/// bound, `-` before the first acquisition.
struct Bound(Duration);

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Duration::ZERO => f.write_str("-"),
            Duration::MAX => write!(f, "> {}", Words(Duration::from_micros(LAST_BOUND))),
            bound => write!(f, "<= {}", Words(bound)),
        }
    }
}

/// The upper bounds of the wait histogram's buckets, in µs: 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6
/// and 8 times each power of ten (those that are whole microseconds) up to 3,000 s, then an
/// hour. Every one is exact in [`Words`]; a bucket holds the waits above the bound before it
/// and up to its own, and one more bucket those over an hour.
const BOUNDS: [u64; 93] = bounds();

/// The last bound: an hour.
const LAST_BOUND: u64 = 3_600_000_000;

const fn bounds() -> [u64; 93] {
    const HUNDREDTHS: [u64; 10] = [100, 125, 150, 200, 250, 300, 400, 500, 600, 800];
    let mut bounds = [0; 93];
    let (mut n, mut scale) = (0, 1);
    while n < bounds.len() - 1 {
        let mut i = 0;
        while i < HUNDREDTHS.len() && n < bounds.len() - 1 {
            let hundredths = HUNDREDTHS[i] * scale;
            if hundredths.is_multiple_of(100) {
                bounds[n] = hundredths / 100;
                n += 1;
            }
            i += 1;
        }
        scale *= 10;
    }
    bounds[n] = LAST_BOUND;
    bounds
}

// The series ends where it should: 3,000 s, then the hour.
const _: () = assert!(BOUNDS[BOUNDS.len() - 2] == 3_000_000_000);

/// Buckets of the wait histogram: one per bound, and one for waits over the last.
const BUCKETS: usize = BOUNDS.len() + 1;

/// How an acquisition ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    AtOnce,
    AfterWait,
    HandedOver,
    TimedOut,
    Cancelled,
}

/// The counters a client's threads bump: relaxed atomics, since a snapshot needs no order
/// between them.
#[derive(Debug)]
pub(crate) struct Counters {
    at_once: AtomicU64,
    after_wait: AtomicU64,
    handed_over: AtomicU64,
    timeouts: AtomicU64,
    cancelled: AtomicU64,
    waits: [AtomicU64; BUCKETS],
    pub renewals_ok: AtomicU64,
    pub renewals_failed: AtomicU64,
    pub locks_lost: AtomicU64,
    pub reconnects: AtomicU64,
    pub lost_replies_settled: AtomicU64,
    /// Whether the log was told that Redis cannot be reached (see [`Outage`]).
    pub outage: Outage,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters {
            at_once: AtomicU64::new(0),
            after_wait: AtomicU64::new(0),
            handed_over: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            waits: std::array::from_fn(|_| AtomicU64::new(0)),
            renewals_ok: AtomicU64::new(0),
            renewals_failed: AtomicU64::new(0),
            locks_lost: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            lost_replies_settled: AtomicU64::new(0),
            outage: Outage::default(),
        }
    }
}

/// What the log was told of Redis being out of reach, so that one outage is one WARN line
/// however many threads and retries meet it: a server restart had the subscriber warn at
/// each reconnect attempt and the renewal thread at each retry, six lines in 2 s, which buried
/// what an operator needs (that it happened, and that it recovered). The first failure of a
/// streak is a WARN that says what is done meanwhile; the failures after it are at debug
/// (every one is still there, for whoever looks); the first success after it is an INFO
/// saying how long it lasted. One streak per client, whichever server (a Cluster's node) it
/// met: a second node failing meanwhile is at debug too.
#[derive(Debug, Default)]
pub(crate) struct Outage {
    /// When the streak began, how many failures it has had, and when the last one was.
    since: parking_lot::Mutex<Option<(std::time::Instant, u64, std::time::Instant)>>,
}

/// A failure this long after the streak's last one starts a new streak (a WARN again): a
/// client with nothing held and nothing waited for has no success to end the old one with,
/// and its next outage must not go to debug.
const STREAK_QUIET: Duration = Duration::from_secs(60);

impl Outage {
    /// A failure to reach Redis, said by `what` (the server and the error in it).
    pub fn failed(&self, what: fmt::Arguments<'_>) {
        let now = std::time::Instant::now();
        let mut since = self.since.lock();
        match &mut *since {
            Some((_, failures, last)) if now.duration_since(*last) < STREAK_QUIET => {
                *failures += 1;
                *last = now;
                log::debug!("{what}");
            }
            _ => {
                *since = Some((now, 1, now));
                log::warn!(
                    "{what}. Until Redis answers again, calls fail or retry and holds go \
                     unrenewed (lost if their lease runs out); the failures meanwhile are logged \
                     at debug"
                );
            }
        }
    }

    /// Redis answered (a renewal round, a subscription or a settlement went through): the
    /// end of a streak, if one was under way.
    pub fn answered(&self) {
        if let Some((began, failures, _)) = self.since.lock().take() {
            log::info!(
                "Redis answers again, after {} and {failures} failure{} to reach it",
                Words(began.elapsed()),
                if failures == 1 { "" } else { "s" }
            );
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
            Outcome::Cancelled => &self.cancelled,
        };
        bump(counter, 1);
        if !matches!(outcome, Outcome::TimedOut | Outcome::Cancelled) {
            // The first bucket whose bound the wait does not exceed (seven comparisons).
            let bucket = BOUNDS.partition_point(|&bound| Duration::from_micros(bound) < took);
            bump(&self.waits[bucket], 1);
        }
    }

    /// A snapshot; `waiting` and `subscriptions` come from the subscriber.
    pub fn snapshot(&self, waiting: u64, subscriptions: u64) -> Stats {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let waits: [u64; BUCKETS] = std::array::from_fn(|i| read(&self.waits[i]));
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
            cancelled: read(&self.cancelled),
            wait_p50: quantile(&waits, 0.5),
            wait_p99: quantile(&waits, 0.99),
            renewals_ok: read(&self.renewals_ok),
            renewals_failed: read(&self.renewals_failed),
            locks_lost: read(&self.locks_lost),
            reconnects: read(&self.reconnects),
            waiting_threads: waiting,
            subscriptions,
            lost_replies_settled: read(&self.lost_replies_settled),
        }
    }
}

/// Adds `n`.
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// The upper bound of the bucket that holds quantile `q` of `buckets`: zero when they are
/// empty, `Duration::MAX` in the last bucket, which has none.
fn quantile(buckets: &[u64; BUCKETS], q: f64) -> Duration {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return Duration::ZERO;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return BOUNDS
                .get(i)
                .map_or(Duration::MAX, |&bound| Duration::from_micros(bound));
        }
    }
    Duration::MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_one_streak_until_redis_answers_or_it_has_been_quiet_a_while() {
        let outage = Outage::default();
        let failures = |o: &Outage| o.since.lock().map(|(_, n, _)| n);
        outage.failed(format_args!("first"));
        outage.failed(format_args!("second"));
        assert_eq!(failures(&outage), Some(2));
        outage.answered();
        assert_eq!(failures(&outage), None);
        // A streak whose last failure was long ago, with no success to end it (a client
        // with nothing held): the next failure is a new outage, said as a WARN again.
        let Some(long_ago) = std::time::Instant::now().checked_sub(STREAK_QUIET * 2) else {
            return; // a machine up for less than two minutes has no such past
        };
        *outage.since.lock() = Some((long_ago, 5, long_ago));
        outage.failed(format_args!("later"));
        assert_eq!(failures(&outage), Some(1));
    }

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
        // 300 µs is a bound: its bucket holds (250 µs, 300 µs].
        assert_eq!(stats.wait_p50, Duration::from_micros(300));
        assert_eq!(stats.wait_p99, Duration::from_millis(40));
        assert_eq!((stats.waiting_threads, stats.subscriptions), (3, 1));

        // Just over a bound is the next bucket; over an hour, the last, which has no bound.
        let counters = Counters::default();
        counters.acquisition(Outcome::AtOnce, Duration::from_nanos(300_001));
        assert_eq!(counters.snapshot(0, 0).wait_p50, Duration::from_micros(400));
        counters.acquisition(Outcome::AtOnce, Duration::from_secs(3601));
        counters.acquisition(Outcome::AtOnce, Duration::from_secs(7200));
        assert_eq!(counters.snapshot(0, 0).wait_p50, Duration::MAX);
        let counters = Counters::default();
        counters.acquisition(Outcome::AtOnce, Duration::ZERO);
        assert_eq!(counters.snapshot(0, 0).wait_p99, Duration::from_micros(1));
    }

    #[test]
    fn the_bounds_rise_by_at_most_a_third_and_read_exactly() {
        assert_eq!(&BOUNDS[..8], &[1, 2, 3, 4, 5, 6, 8, 10]);
        assert_eq!(&BOUNDS[16..20], &[100, 125, 150, 200]);
        assert_eq!(BOUNDS[BOUNDS.len() - 1], LAST_BOUND);
        for pair in BOUNDS.windows(2) {
            assert!(pair[0] < pair[1], "{pair:?}");
            if pair[0] >= 100 {
                assert!(pair[1] * 3 <= pair[0] * 4, "{pair:?}");
            }
        }
        for bound in BOUNDS {
            let words = Words(Duration::from_micros(bound)).to_string();
            assert!(!words.starts_with("over"), "{bound} µs: {words}");
        }
        assert_eq!(Words(Duration::from_micros(BOUNDS[26])).to_string(), "1 ms");
        assert_eq!(
            Words(Duration::from_micros(1_250_000)).to_string(),
            "1 s 250 ms"
        );
    }

    #[test]
    fn the_display_is_one_line_to_log() {
        let stats = Stats {
            acquisitions: 100,
            acquired_at_once: 98,
            acquired_after_wait: 1,
            handed_over: 1,
            timeouts: 1,
            cancelled: 0,
            wait_p50: Duration::from_micros(300),
            wait_p99: Duration::from_micros(1_250),
            renewals_ok: 12,
            renewals_failed: 2,
            locks_lost: 1,
            reconnects: 0,
            waiting_threads: 3,
            subscriptions: 1,
            lost_replies_settled: 0,
        };
        assert_eq!(
            stats.to_string(),
            "acquisitions 100 (at once 98, after wait 1, handed over 1), timeouts 1, \
             cancelled 0, wait p50 <= 300 µs, p99 <= 1 ms 250 µs, renewals ok 12 failed 2, lost 1, \
             reconnects 0, waiting threads 3, subscriptions 1, lost replies settled 0"
        );
        let fresh = Stats::default().to_string();
        assert!(fresh.contains(", wait p50 -, p99 -, "), "{fresh}");
        let slow = Stats {
            wait_p50: Duration::from_secs(90),
            wait_p99: Duration::MAX,
            ..stats
        };
        assert!(
            slow.to_string()
                .contains(", wait p50 <= 1 min 30 s, p99 > 1 h, "),
            "{slow}"
        );
        // Debug is the struct, every duration exact.
        let debug = format!("{:?}", Stats::default());
        assert!(debug.starts_with("Stats { acquisitions: 0"), "{debug}");
    }
}
