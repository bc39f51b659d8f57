//! Our own layout's [`Dialect`]: the scripts of `lua/` (each family's calls are in its own
//! file: [`lock`](super::lock), [`shares`](super::shares), [`read_write`](super::read_write),
//! [`latch`](super::latch), [`counting`](super::counting)), our messages
//! ([`Message::parse`]), and releases that hand the object over in Redis.

use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::read_write::{self, RwInspection};
use super::shares::{self, Need};
use super::{
    Acquire, AcquireMany, Count, Dialect, Freeing, Invocation, Leftover, Message, Queueing,
    Release, Releasing, Renewal, counting, latch, lock,
};
use crate::error::Result;
use crate::keys::{Family, LockKeys};

/// Our own layout: keys under the client's prefix, a fair hand-over queue, fencing tokens on
/// every kind.
pub(crate) struct Ours;

impl Dialect for Ours {
    fn acquire(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        hold: Option<(u32, u64)>,
        lease: Duration,
        queueing: &Queueing,
        fence_retention: Duration,
    ) -> RedisResult<Acquire> {
        lock::acquire(con, keys, owner, hold, lease, queueing, fence_retention)
    }

    fn acquire_many(
        &self,
        con: &mut dyn ConnectionLike,
        locks: &[&LockKeys],
        owner: &str,
        lease: Duration,
        fence_retention: Duration,
        leftovers: &[Vec<Leftover>],
    ) -> RedisResult<AcquireMany> {
        lock::acquire_many(con, locks, owner, lease, fence_retention, leftovers)
    }

    fn withdraw(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        lease: Duration,
        queueing: &Queueing,
        fence_retention: Duration,
    ) -> RedisResult<Option<u64>> {
        lock::withdraw(con, keys, owner, lease, queueing, fence_retention)
    }

    fn release(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        token: u64,
        how: Releasing,
        freeing: Freeing,
    ) -> RedisResult<Release> {
        lock::release(con, keys, owner, token, how, freeing)
    }

    fn force_unlock(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        lock::force_unlock(con, keys, request, freeing)
    }

    fn was_forced(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: u64,
    ) -> RedisResult<bool> {
        lock::was_forced(con, keys, token)
    }

    /// With the release script of `keys`'s family, told that the hold is a hand-over nobody
    /// took up: it acts only while Redis still records it so.
    fn give_back(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        token: u64,
        lease: Duration,
        freeing: Freeing,
    ) -> RedisResult<Release> {
        let how = Releasing {
            holds: 1,
            taken_by: None,
            lease,
        };
        match keys.family {
            Family::Lock => lock::release(con, keys, owner, token, how, freeing),
            Family::ReadWrite | Family::Semaphore => {
                shares::release(con, keys, owner, token, how, freeing)
            }
            // A latch or a counting semaphore grants nothing, so nothing is handed to an
            // owner that no longer waits.
            Family::Latch | Family::Counting => Ok(Release::NotOurs),
        }
    }

    fn renewal<'a>(
        &self,
        batch: &[Renewal<'_>],
        lease: Duration,
        fence_retention: Duration,
    ) -> Invocation<'a> {
        match batch.first().map(|r| r.keys.family) {
            // A holder's token is kept in its field, not checked against the fence.
            Some(Family::ReadWrite | Family::Semaphore) => shares::renewal(batch, lease),
            // Nothing of a latch or a counting semaphore is held, so nothing of it is ever
            // registered for renewal; were it, the lock's script would find no hold of it
            // and answer "not ours".
            Some(Family::Lock | Family::Latch | Family::Counting) | None => {
                lock::renewal(batch, lease, fence_retention)
            }
        }
    }

    fn extend(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        token: u64,
        lease: Duration,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        match keys.family {
            Family::Lock => lock::extend(con, keys, owner, token, lease, freeing.fence_retention),
            Family::ReadWrite | Family::Semaphore => shares::extend(con, keys, owner, token, lease),
            // Nothing of a latch or a counting semaphore is held under a lease.
            Family::Latch | Family::Counting => Ok(false),
        }
    }

    fn share_acquire(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        held: Option<(u32, u64)>,
        lease: Duration,
        queueing: &Queueing,
        need: Need<'_>,
        freeing: Freeing,
    ) -> RedisResult<Acquire> {
        shares::acquire(con, keys, owner, held, lease, queueing, need, freeing)
    }

    fn share_withdraw(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        lease: Duration,
        freeing: Freeing,
    ) -> RedisResult<Option<u64>> {
        shares::withdraw(con, keys, owner, lease, freeing)
    }

    fn share_release(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        token: u64,
        how: Releasing,
        freeing: Freeing,
    ) -> RedisResult<Release> {
        shares::release(con, keys, owner, token, how, freeing)
    }

    fn rw_inspect(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
    ) -> RedisResult<RwInspection> {
        read_write::inspect(con, keys)
    }

    fn rw_force_unlock(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        read_write::force_unlock(con, keys, request, freeing)
    }

    /// An owner id of its own: the permits are counted in its field.
    fn permits_owner(&self, _n: u32, fresh: &dyn Fn() -> Arc<str>) -> Result<Arc<str>> {
        Ok(fresh())
    }

    fn set_permits(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        total: u32,
        freeing: Freeing,
    ) -> RedisResult<()> {
        shares::set_permits(con, keys, total, freeing)
    }

    fn try_set_permits(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        total: u32,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        shares::try_set_permits(con, keys, total, freeing)
    }

    fn add_permits(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        delta: i64,
        freeing: Freeing,
    ) -> RedisResult<std::result::Result<u32, i64>> {
        shares::add_permits(con, keys, delta, freeing)
    }

    fn available(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        _freeing: Freeing,
    ) -> RedisResult<u32> {
        shares::available(con, keys)
    }

    fn count(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        which: Count,
        _freeing: Freeing,
    ) -> RedisResult<u32> {
        shares::count(con, keys, which)
    }

    fn semaphore_force_unlock(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        shares::force_unlock(con, keys, request, freeing)
    }

    fn latch_set(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        n: u64,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        latch::set_count(con, keys, n, request, freeing)
    }

    fn latch_count_down(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<u64> {
        latch::count_down(con, keys, request, freeing)
    }

    fn latch_delete(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        latch::delete(con, keys, request, freeing)
    }

    fn counting_acquire(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        n: u32,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        counting::acquire(con, keys, &keys.request_marker(request), n, freeing)
    }

    /// A release and `add_permits` are one script here (Redisson's differ).
    fn counting_add(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        delta: i64,
        _release: bool,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<std::result::Result<i64, i64>> {
        let marker = keys.request_marker(request);
        counting::add(con, &counting::ADD, keys, &marker, delta, freeing)
    }

    fn counting_try_set(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        n: u32,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        let marker = keys.request_marker(request);
        counting::try_set(con, &counting::TRY_SET, keys, &marker, n, freeing)
    }

    fn counting_drain(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<i64> {
        let marker = keys.request_marker(request);
        counting::drain(con, &counting::DRAIN, keys, &marker, freeing)
    }

    fn message<'a>(&self, _family: Option<Family>, payload: &'a [u8]) -> Option<Message<'a>> {
        Message::parse(payload)
    }

    /// Never: a release hands the object to the oldest waiter in the fleet, in its script.
    fn hands_over_in_client(&self, _keys: &LockKeys) -> bool {
        false
    }

    /// A lock's attempt does (`acquire.lua`); a kind with shares names a place by its owner.
    fn queues_by_place(&self, keys: &LockKeys) -> bool {
        keys.family == Family::Lock
    }

    /// Never: a release hands the object over in its script.
    fn release_wakes_racers(&self) -> bool {
        false
    }
}
