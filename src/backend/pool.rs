//! The command connections: our own pool, without threads or PINGs.
//!
//! Why not r2d2: `redis`'s r2d2 integration either PINGs every connection at checkout (one
//! extra round trip per lock operation, doubling the cost of an uncontended acquisition) or,
//! without that test, hands out connections that died with a restarted server, one failed
//! command each. It also runs upkeep threads. This pool has no threads, never PINGs, and
//! forgets every idle connection at once when any connection fails at the transport level
//! (an *epoch* bump), so a server restart costs one failed attempt, which the retry policy
//! absorbs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use redis::{ConnectionLike, RedisError, RedisResult};

/// A command connection: the scripts and the closures given to [`Backend::run`](super::Backend::run) see only
/// `ConnectionLike`, so they run unchanged on whatever kind of connection the target makes.
pub(super) type PooledConnection = Box<dyn ConnectionLike + Send>;

/// Idle connections plus a count of connections in existence, capped at `max`.
pub(super) struct Pool {
    state: Mutex<PoolState>,
    returned: Condvar,
    epoch: AtomicU64,
    max: u32,
}

struct PoolState {
    idle: Vec<(PooledConnection, u64)>,
    open: u32,
}

impl Pool {
    pub(super) fn new(max: u32) -> Pool {
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

    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    pub(super) fn invalidate(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// An idle connection of the current epoch, or `None` with a slot reserved for a new one.
    pub(super) fn take(&self, deadline: Instant) -> RedisResult<Option<(PooledConnection, u64)>> {
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

    /// Takes in a connection made outside the pool (the one `build()` checked the server
    /// on), if there is room: the first lock then needs no connection of its own.
    pub(super) fn adopt(&self, con: PooledConnection, epoch: u64) {
        let mut state = self.state.lock();
        if state.open < self.max {
            state.open += 1;
            state.idle.push((con, epoch));
            drop(state);
            self.returned.notify_one();
        }
    }

    pub(super) fn give_back(&self, con: PooledConnection, epoch: u64) {
        self.state.lock().idle.push((con, epoch));
        self.returned.notify_one();
    }

    pub(super) fn release_slot(&self) {
        self.state.lock().open -= 1;
        self.returned.notify_one();
    }
}
