//! The retry policy: which failures are retried, how often, and after what pause.
//!
//! A command whose connection fails fast (refused, reset, closed) is retried on a fresh
//! connection, at most [`ATTEMPTS`] times. That is safe only because every script the crate
//! runs is idempotent (see `lua/`): a retry after a reply was lost changes nothing. A command
//! that *timed out* is not retried: the server is there but not answering (paused, stopped,
//! overloaded), and another full timeout would only make the caller wait longer. So every
//! call waits at most one response timeout for an unresponsive server, plus connect time.
//!
//! On a Cluster, a command refused because its slot is migrating (`TRYAGAIN`) or because the
//! cluster is between a master's failure and its replica's promotion (`CLUSTERDOWN`) did not
//! run, and will run once the operator's reshard or the election is done: a wait whose length
//! no fixed count of retries fits. It is retried after short pauses until one response
//! timeout has passed since the call started: the longest the call would have waited for a
//! server that does not answer.
//!
//! Every decision reads the `redis` crate's own classification of the error (its kind, and
//! whether it is an I/O failure or a timeout), never the error's text.

use std::time::{Duration, Instant};

use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::cluster::{CLUSTER_RETRIES, CLUSTER_RETRY_WAIT_MS};
use super::{Backend, Target};

/// Attempts per command when its connection fails at the transport level.
pub(super) const ATTEMPTS: usize = 3;

/// Pause before the second and third attempt: long enough for a restarting server's port to
/// answer, short against any lease.
const BACKOFF: [Duration; ATTEMPTS - 1] = [Duration::from_millis(20), Duration::from_millis(200)];

impl Backend {
    /// How long a latch that makes a retried script idempotent must live: longer than the
    /// slowest retry can arrive (every attempt waiting for a pooled connection, connecting and
    /// timing out, plus the pauses).
    pub fn latch_ttl(&self) -> Duration {
        let mut attempt =
            self.settings.link.connect_timeout * 2 + self.settings.link.response_timeout;
        let mut refusals = Duration::ZERO;
        if self.is_cluster() {
            // The cluster connection tries each command up to CLUSTER_RETRIES more times.
            attempt *= CLUSTER_RETRIES + 1;
            // A refusal (TRYAGAIN, CLUSTERDOWN) is retried only within one response timeout
            // of the call's start; after that, only transport failures, as many as are left.
            refusals = self.settings.link.response_timeout;
        }
        attempt * ATTEMPTS as u32
            + BACKOFF.iter().sum::<Duration>()
            + refusals
            + Duration::from_secs(1)
    }

    /// A write refused because the server we know as the master is a replica now: Sentinel
    /// moved the master. Nothing was written, so the command can run again on the new one.
    pub(super) fn master_moved(&self, e: &RedisError) -> bool {
        matches!(self.target, Target::Sentinel(_)) && is_readonly(e)
    }

    /// The retry policy: after an attempt failed with `e`, how long to pause before the next
    /// one, or `None` to give up and return `e`.
    ///
    /// - A connection that failed fast (refused, reset, closed), or a master that Sentinel
    ///   moved: at most [`ATTEMPTS`] attempts, after the [`BACKOFF`] pauses. A timeout (or a
    ///   pool that stayed exhausted) is not retried: it would cost the caller another one.
    /// - A Cluster refusal ([`Backend::slot_moving`]), or a server busy with another client's
    ///   long script or loading its data ([`server_busy`]): the server answered "not now", and how
    ///   long that lasts is up to the reshard or the election, so a fixed count either gives
    ///   up during a slow reshard (and a failed release leaves the lock held until its lease
    ///   runs out) or waits for nothing. Retried after pauses doubling from 10 ms to 100 ms
    ///   until one response timeout has passed since the call started: a call never waits
    ///   longer for a moving slot than it would for a server that does not answer. The last
    ///   pause is cut so that the last attempt still starts within that budget.
    pub(super) fn retry_pause(&self, e: &RedisError, retries: &mut Retries) -> Option<Duration> {
        if self.slot_moving(e) || server_busy(e) {
            let left = self
                .settings
                .link
                .response_timeout
                .checked_sub(retries.started.elapsed())
                .filter(|left| !left.is_zero())?;
            let (shortest, longest) = CLUSTER_RETRY_WAIT_MS;
            let pause = (shortest << retries.refused.min(8)).min(longest);
            retries.refused += 1;
            return Some(Duration::from_millis(pause).min(left));
        }
        if (is_transport_error(e) && !e.is_timeout()) || self.master_moved(e) {
            let pause = BACKOFF.get(retries.transport)?;
            retries.transport += 1;
            return Some(*pause);
        }
        None
    }

    /// A Cluster refusal that means the command did not run and may well run after a pause:
    /// the slot is migrating (TRYAGAIN; ASK or MOVED left over after the connection's own
    /// redirects), or the cluster is between a master's failure and its replica's promotion
    /// (CLUSTERDOWN). While a slot migrates, Redis runs a command of several keys only where
    /// all of them exist there, and a release names its latch (not there yet) and its channel
    /// (no key at all): so releases of the slot's locks are refused from `SETSLOT MIGRATING`
    /// until the slot is handed over (`SETSLOT NODE`), not only once its keys are split.
    pub(super) fn slot_moving(&self, e: &RedisError) -> bool {
        self.is_cluster()
            && matches!(
                e.kind(),
                ErrorKind::Server(
                    ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::Ask
                        | ServerErrorKind::Moved
                )
            )
    }
}

/// The server did not run the command and will once it is free: `BUSY` (another client's
/// script has run past the busy threshold, 5 s by default) or `LOADING` (a restarted server
/// reading its data).
fn server_busy(e: &RedisError) -> bool {
    matches!(e.code(), Some("BUSY" | "LOADING"))
}

/// What one call to [`Backend::run`] has retried so far.
pub(super) struct Retries {
    /// When the call started: refusals are retried for one response timeout from here.
    started: Instant,
    /// Attempts retried after a transport failure.
    transport: usize,
    /// Attempts retried after a Cluster refusal.
    refused: u32,
}

impl Retries {
    pub(super) fn new() -> Retries {
        Retries {
            started: Instant::now(),
            transport: 0,
            refused: 0,
        }
    }
}

/// A `READONLY` refusal, from a command or from a write inside a script (Redis 7 keeps the
/// code of an error raised inside a script, and our scripts pass refusals on as they came;
/// 6.2's wrapping is taken off before the policy looks: `error::unwrapped`).
fn is_readonly(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

/// Errors after which the connection cannot be trusted: the transport failed, so the command
/// may or may not have run.
pub(crate) fn is_transport_error(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::test_support::*;
    use redis::Value;

    fn refusal(kind: ServerErrorKind) -> RedisError {
        RedisError::from((ErrorKind::Server(kind), "refused"))
    }

    fn io_error(kind: std::io::ErrorKind) -> RedisError {
        RedisError::from(std::io::Error::from(kind))
    }

    /// `retries`, as if its call had started `ago`.
    fn started(retries: &mut Retries, ago: Duration) {
        retries.started = Instant::now()
            .checked_sub(ago)
            .expect("the clock runs that long");
    }

    #[test]
    fn a_cluster_refusal_is_retried_until_one_response_timeout_from_the_calls_start() {
        let cluster = cluster();
        let mut retries = Retries::new();
        let pauses: Vec<Option<Duration>> = (0..7)
            .map(|_| cluster.retry_pause(&refusal(ServerErrorKind::TryAgain), &mut retries))
            .collect();
        let ms = |n| Some(Duration::from_millis(n));
        assert_eq!(
            pauses,
            [ms(10), ms(20), ms(40), ms(80), ms(100), ms(100), ms(100)]
        );
        // Whatever the count so far, the time since the call's start decides: the last pause
        // is cut so that the last attempt starts within the budget, and none follows it.
        started(&mut retries, Duration::from_millis(2_950));
        let last = cluster.retry_pause(&refusal(ServerErrorKind::ClusterDown), &mut retries);
        assert!(
            last.is_some_and(|p| p <= Duration::from_millis(50)),
            "{last:?}"
        );
        started(&mut retries, Duration::from_secs(3));
        assert_eq!(
            cluster.retry_pause(&refusal(ServerErrorKind::TryAgain), &mut retries),
            None
        );
        // Redirections the connection could not follow to the end count as refusals.
        let mut retries = Retries::new();
        let moved = RedisError::from((
            ErrorKind::Server(ServerErrorKind::Moved),
            "moved",
            "1 127.0.0.1:7001".to_string(),
        ));
        assert_eq!(cluster.retry_pause(&moved, &mut retries), ms(10));
    }

    #[test]
    fn transport_failures_keep_their_count_and_timeouts_are_not_retried() {
        for backend in [single(), cluster()] {
            let mut retries = Retries::new();
            let reset = io_error(std::io::ErrorKind::ConnectionReset);
            let pauses: Vec<Option<Duration>> = (0..3)
                .map(|_| backend.retry_pause(&reset, &mut retries))
                .collect();
            assert_eq!(pauses, [Some(BACKOFF[0]), Some(BACKOFF[1]), None]);
            let timeout = io_error(std::io::ErrorKind::TimedOut);
            assert_eq!(backend.retry_pause(&timeout, &mut Retries::new()), None);
        }
        // One server never sends a Cluster refusal; if it did, it would not be one.
        let tryagain = refusal(ServerErrorKind::TryAgain);
        assert_eq!(single().retry_pause(&tryagain, &mut Retries::new()), None);
    }

    /// The retry policy reads the `redis` crate's classification of the server's reply, as it
    /// comes off the wire (also from inside a script, where Redis 7 keeps the code).
    #[test]
    fn refusals_are_classified_from_the_reply_code() {
        let reply = |wire: &[u8]| -> RedisError {
            match redis::parse_redis_value(wire).unwrap() {
                Value::ServerError(e) => e.into(),
                other => panic!("not an error reply: {other:?}"),
            }
        };
        let readonly = reply(b"-READONLY You can't write against a read only replica. script: f_1, on @user_script:9.\r\n");
        assert!(is_readonly(&readonly));
        assert!(!is_readonly(&reply(b"-ERR something else\r\n")));
        let cluster = cluster();
        let mut retries = Retries::new();
        for wire in [
            &b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"[..],
            b"-CLUSTERDOWN The cluster is down\r\n",
            b"-MOVED 3999 127.0.0.1:6381\r\n",
            b"-ASK 3999 127.0.0.1:6381\r\n",
        ] {
            assert!(cluster.slot_moving(&reply(wire)), "{wire:?}");
            assert!(cluster.retry_pause(&reply(wire), &mut retries).is_some());
        }
        assert!(!single().slot_moving(&reply(b"-TRYAGAIN x\r\n")));
        // A busy server, anywhere: retried within the same budget.
        for backend in [single(), cluster] {
            let mut retries = Retries::new();
            for wire in [
                &b"-BUSY Valkey is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n"[..],
                b"-LOADING Redis is loading the dataset in memory\r\n",
            ] {
                assert!(server_busy(&reply(wire)), "{wire:?}");
                assert!(backend.retry_pause(&reply(wire), &mut retries).is_some());
            }
            started(&mut retries, Duration::from_secs(3));
            let busy = reply(b"-BUSY x\r\n");
            assert_eq!(backend.retry_pause(&busy, &mut retries), None);
        }
    }

    #[test]
    fn the_release_latch_outlives_every_retry() {
        // 3 attempts of (2 connects + 1 response timeout), the pauses, a second of slack.
        assert_eq!(single().latch_ttl(), Duration::from_millis(40_220));
        // Each attempt up to 3 tries inside the cluster connection, and one response timeout
        // of retried refusals.
        assert_eq!(cluster().latch_ttl(), Duration::from_millis(121_220));
    }
}
