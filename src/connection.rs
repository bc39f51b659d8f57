//! Every byte the crate sends to Redis goes through here.
//!
//! [`Backend`] owns how to reach the server (a `redis::Client` built from the URL), a small pool
//! of command connections, and the retry policy. The lock, subscriber and renewal modules ask
//! it to run a closure on a connection or to open a dedicated pub/sub connection; none of them
//! knows whether the server is a single node (today) or, later, a Sentinel-managed master or a
//! Cluster.
//!
//! # Why our own pool and not r2d2
//! `redis`'s r2d2 integration either PINGs every connection at checkout (one extra round trip
//! per lock operation, doubling the cost of an uncontended acquisition) or, without that test,
//! hands out connections that died with a restarted server, one failed command each. It also
//! runs upkeep threads. The pool below has no threads, never PINGs, and forgets every idle
//! connection at once when any connection fails at the transport level (an *epoch* bump), so a
//! server restart costs one failed attempt, which the retry policy absorbs.
//!
//! # Retries
//! A command whose connection fails fast (refused, reset, closed) is retried on a fresh
//! connection, at most [`ATTEMPTS`] times. That is safe only because every script the crate
//! runs is idempotent (see `lua/`): a retry after a reply was lost changes nothing. A command
//! that *timed out* is not retried: the server is there but not answering (paused, stopped,
//! overloaded), and another full timeout would only make the caller wait longer. So every
//! call waits at most one response timeout for an unresponsive server, plus connect time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::io::tcp::{TcpSettings, socket2::TcpKeepalive};
use redis::{
    Connection, ConnectionInfo, ConnectionLike, IntoConnectionInfo, RedisError, RedisResult,
};

use crate::error::{Error, Result};

/// Attempts per command when its connection fails at the transport level.
const ATTEMPTS: usize = 3;
/// Pause before the second and third attempt: long enough for a restarting server's port to
/// answer, short against any lease.
const BACKOFF: [Duration; 2] = [Duration::from_millis(20), Duration::from_millis(200)];

/// Connection settings, from the builder.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub pool_size: u32,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
}

/// How the crate reaches Redis: connection parameters, the command pool, the retry policy.
pub(crate) struct Backend {
    client: redis::Client,
    settings: Settings,
    pool: Pool,
}

impl Backend {
    /// Parses `url` and checks it names a transport this build supports. No I/O.
    pub fn new(url: &str, settings: Settings) -> Result<Backend> {
        let info: ConnectionInfo = url
            .into_connection_info()
            .map_err(|e| Error::invalid(format!("redis URL {url:?}: {e}")))?;
        if !info.addr().is_supported() {
            return Err(Error::invalid(format!(
                "redis URL {url:?}: this build has no TLS support (enable the `tls` feature)"
            )));
        }
        // Lock hand-offs are latency-bound: never let Nagle hold back a small command. The
        // keepalive finds a silently dead peer (pulled cable, blackholed route) on connections
        // that sit idle, the pub/sub connection above all.
        let tcp = TcpSettings::default()
            .set_nodelay(true)
            .set_keepalive(
                TcpKeepalive::new()
                    .with_time(Duration::from_secs(10))
                    .with_interval(Duration::from_secs(5))
                    .with_retries(3),
            )
            .set_user_timeout(Duration::from_secs(30));
        // No CLIENT SETINFO on connect: its replies are read one timeout each, so against a
        // stopped server a new connection would cost several timeouts instead of one.
        let redis_settings = info.redis_settings().clone().set_skip_set_lib_name();
        let info = info
            .set_tcp_settings(tcp)
            .set_redis_settings(redis_settings);
        let client = redis::Client::open(info).map_err(|e| Error::invalid(e.to_string()))?;
        Ok(Backend {
            client,
            pool: Pool::new(settings.pool_size),
            settings,
        })
    }

    /// A new connection, authenticated and on the right database. Used for the pub/sub
    /// connection, which the subscriber owns outright.
    pub fn connect(&self) -> RedisResult<Connection> {
        self.client
            .get_connection_with_timeout(self.settings.connect_timeout)
    }

    /// Runs `op` on a pooled connection, retrying on a fresh one when the connection fails.
    /// `op` must be idempotent: it may run more than once if a reply was lost.
    pub fn run<T>(&self, mut op: impl FnMut(&mut Connection) -> RedisResult<T>) -> Result<T> {
        let mut attempt = 0;
        loop {
            match self.run_once(&mut op) {
                Err(e) if is_retryable(&e) && attempt + 1 < ATTEMPTS => {
                    log::debug!("redis connection failed ({e}), retrying");
                    std::thread::sleep(BACKOFF[attempt]);
                    attempt += 1;
                }
                other => return other.map_err(Error::from),
            }
        }
    }

    /// Runs `op` once, without retries: for best-effort notifications.
    pub fn run_once_only<T>(
        &self,
        mut op: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> Result<T> {
        self.run_once(&mut op).map_err(Error::from)
    }

    /// How long a latch that makes a retried script idempotent must live: longer than the
    /// slowest retry can arrive (every attempt waiting for a pooled connection, connecting and
    /// timing out, plus the pauses).
    pub fn latch_ttl(&self) -> Duration {
        let attempt = self.settings.connect_timeout * 2 + self.settings.response_timeout;
        attempt * ATTEMPTS as u32 + BACKOFF.iter().sum::<Duration>() + Duration::from_secs(1)
    }

    fn run_once<T>(
        &self,
        op: &mut impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let (mut con, epoch) = match self
            .pool
            .take(Instant::now() + self.settings.connect_timeout)?
        {
            Some(idle) => idle,
            None => match self.connect_for_commands() {
                Ok(con) => (con, self.pool.epoch()),
                Err(e) => {
                    self.pool.release_slot();
                    return Err(e);
                }
            },
        };
        let result = op(&mut con);
        match &result {
            Err(e) if is_transport_error(e) => {
                // The server may have restarted: every idle connection is suspect.
                self.pool.invalidate();
                self.pool.release_slot();
            }
            _ if !con.is_open() => self.pool.release_slot(),
            _ => self.pool.give_back(con, epoch),
        }
        result
    }

    fn connect_for_commands(&self) -> RedisResult<Connection> {
        let con = self.connect()?;
        // A command that gets no answer must fail, not hang its thread: the retry policy and
        // the idempotent scripts make failing safe.
        con.set_read_timeout(Some(self.settings.response_timeout))?;
        con.set_write_timeout(Some(self.settings.response_timeout))?;
        Ok(con)
    }
}

/// Errors after which the connection cannot be trusted: the transport failed, so the command
/// may or may not have run.
fn is_transport_error(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

/// Transport errors worth a retry on a new connection: those that fail fast. A timeout (or a
/// pool that stayed exhausted) would cost the caller another full timeout.
fn is_retryable(e: &RedisError) -> bool {
    is_transport_error(e) && !e.is_timeout()
}

/// Idle connections plus a count of connections in existence, capped at `max`.
struct Pool {
    state: Mutex<PoolState>,
    returned: Condvar,
    epoch: AtomicU64,
    max: u32,
}

struct PoolState {
    idle: Vec<(Connection, u64)>,
    open: u32,
}

impl Pool {
    fn new(max: u32) -> Pool {
        Pool {
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                open: 0,
            }),
            returned: Condvar::new(),
            epoch: AtomicU64::new(0),
            max,
        }
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn invalidate(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// An idle connection of the current epoch, or `None` with a slot reserved for a new one.
    fn take(&self, deadline: Instant) -> RedisResult<Option<(Connection, u64)>> {
        let mut state = self.state.lock();
        loop {
            let epoch = self.epoch();
            while let Some((con, e)) = state.idle.pop() {
                if e == epoch {
                    return Ok(Some((con, e)));
                }
                state.open -= 1; // stale: dropped here
            }
            if state.open < self.max {
                state.open += 1;
                return Ok(None);
            }
            if self.returned.wait_until(&mut state, deadline).timed_out() {
                return Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no pooled redis connection became free in time (raise pool_size?)",
                )));
            }
        }
    }

    fn give_back(&self, con: Connection, epoch: u64) {
        self.state.lock().idle.push((con, epoch));
        self.returned.notify_one();
    }

    fn release_slot(&self) {
        self.state.lock().open -= 1;
        self.returned.notify_one();
    }
}
