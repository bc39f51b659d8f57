//! Redisson's fair lock ([`Client::fair_lock`](crate::Client::fair_lock) in
//! [`Layout::Redisson`](crate::Layout::Redisson)): the engine's view of one acquisition,
//! which queues in Redisson's list and waits on a channel of its own.
//!
//! A fair lock is a [`Lock`](super::lock::Lock) whose keys say `fair`: its guards, release and
//! renewal are the lock's (the scripts pick the fair variant from the keys). Only waiting
//! differs, since Java wakes the head of the queue on that waiter's own channel
//! (`redisson_lock__channel:{name}:<owner>`): each acquisition gets keys naming its channel,
//! so that the subscriber keeps its waiter apart, and the slot Java's deadlines are made of.

use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use crate::engine::Kind;
use crate::keys::LockKeys;
use crate::scripts::{Acquire, Freeing, Queueing, Release, Releasing, redisson};

/// The longest slot: a year.
const LONGEST_SLOT: Duration = Duration::from_secs(365 * 24 * 3600);

/// One acquisition of a fair lock: its waiter's keys, and its slot.
#[derive(Clone)]
pub(crate) struct FairWait {
    keys: Arc<LockKeys>,
    /// Java's `wait` for the deadlines: the caller's wait, or the client's
    /// `fair_wait_timeout` (Redisson's `fairLockWaitTimeout`, which Java's `lock()` uses).
    slot: Duration,
}

impl FairWait {
    /// For `owner` waiting at most `wait` (`None`: as long as it takes, keeping its place for
    /// `unbounded` past its predecessor's) for fair lock `name`.
    pub fn new(name: &str, owner: &str, wait: Option<Duration>, unbounded: Duration) -> FairWait {
        FairWait {
            keys: Arc::new(LockKeys::redisson_fair_waiter(name, owner)),
            // As Java's tryLock(wait) does (a zero wait never queues, so its slot is unused);
            // capped at a year, so that deadlines stay exact in Lua's numbers.
            slot: wait.map_or(unbounded, |w| w).min(LONGEST_SLOT),
        }
    }
}

impl Kind for FairWait {
    fn keys(&self) -> &Arc<LockKeys> {
        &self.keys
    }

    fn attempt(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        held: Option<(u32, u64)>,
        lease: Duration,
        queueing: &Queueing,
    ) -> RedisResult<Acquire> {
        let slot = if queueing.queue_for.is_zero() {
            Duration::ZERO
        } else {
            self.slot
        };
        redisson::fair_acquire(con, &self.keys, owner, held, lease, slot)
    }

    fn withdraw(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        _lease: Duration,
        _queueing: &Queueing,
    ) -> RedisResult<Option<u64>> {
        redisson::fair_withdraw(con, &self.keys, owner, self.slot)?;
        Ok(None)
    }

    fn may_hold(&self, con: &mut dyn ConnectionLike, owner: &str) -> RedisResult<bool> {
        Ok(crate::scripts::inspect(con, &self.keys, owner)?.holds > 0)
    }

    fn detached(&self) -> Arc<dyn Kind + Send + Sync> {
        Arc::new(self.clone())
    }

    fn release(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        token: u64,
        how: Releasing,
        freeing: Freeing,
    ) -> RedisResult<Release> {
        redisson::release(con, &self.keys, owner, token, how, freeing)
    }
}
