//! What differs between the two data layouts beyond the keys' names: which script each call
//! runs, how a message on an object's channel reads, and how a release treats the waiters.
//!
//! A client speaks one [`Dialect`], chosen once from its [`Layout`](crate::Layout) when it is
//! built ([`dialect`](super::dialect)) and kept in its `Core` (and its subscriber's state):
//! the kinds and the engine call through it and never ask which layout they are in. Our
//! dialect is [`Ours`](super::ours::Ours), Redisson's is
//! [`Redisson`](super::redisson::Redisson); a third layout is a third implementation and a
//! line in that one choice.
//!
//! The methods are grouped by family, in the order the lock, the kinds with shares, the
//! latch and the counting semaphore; the replies are the typed ones of `scripts`, the same
//! in every dialect, so that the engine serves all of them alike.

use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::read_write::RwInspection;
use super::shares::Need;
use super::{
    Acquire, AcquireMany, Count, Freeing, Invocation, Leftover, Message, Queueing, Release,
    Releasing, Renewal,
};
use crate::error::Result;
use crate::keys::{Family, LockKeys};

/// The calls and rules of one data layout (see the module's docs). `keys` is always an
/// object's keys in the same layout: the client that chose the dialect made them.
#[allow(clippy::too_many_arguments)]
pub(crate) trait Dialect: Send + Sync {
    // The lock (`Lock`, `SpinLock`, the members of `MultiLock` and `Redlock`).

    /// Takes or re-enters lock `keys` for `owner` (who holds `hold`: its guard count and
    /// token, if it holds it already) with `lease`, or queues it as `queueing` says, where
    /// the layout keeps a queue.
    fn acquire(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        hold: Option<(u32, u64)>,
        lease: Duration,
        queueing: &Queueing,
        fence_retention: Duration,
    ) -> RedisResult<Acquire>;

    /// Takes every lock of `locks` that is free for `owner`, or none of them; voids
    /// `leftovers[i]`, places earlier waits left in the queue of `locks[i]`, where the layout
    /// keeps queues.
    fn acquire_many(
        &self,
        con: &mut dyn ConnectionLike,
        locks: &[&LockKeys],
        owner: &str,
        lease: Duration,
        fence_retention: Duration,
        leftovers: &[Vec<Leftover>],
    ) -> RedisResult<AcquireMany>;

    /// Takes `owner` out of lock `keys`'s queue; `Some(token)` if the lock had been handed
    /// to it meanwhile (then it holds it with at least `lease`).
    fn withdraw(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        lease: Duration,
        queueing: &Queueing,
        fence_retention: Duration,
    ) -> RedisResult<Option<u64>>;

    /// Releases one of `owner`'s holds of lock `keys`, taken with `token`, as `how` says.
    fn release(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        token: u64,
        how: Releasing,
        freeing: Freeing,
    ) -> RedisResult<Release>;

    /// Deletes lock `keys` whoever holds it; `request` names the call so a retry answers
    /// the same.
    fn force_unlock(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool>;

    /// Whether a force-unlock freed the hold of `keys` taken with `token`: why it is gone
    /// (`false` where the layout keeps no mark of one).
    fn was_forced(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: u64,
    ) -> RedisResult<bool>;

    // Every family held under a lease (a lock, a read-write lock, a semaphore).

    /// Gives back a hand-over of `keys` to `owner` with `token` for `lease` that nobody took
    /// up (its thread no longer waited); changes nothing if it was taken up.
    fn give_back(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        token: u64,
        lease: Duration,
        freeing: Freeing,
    ) -> RedisResult<Release>;

    /// The call that renews `batch`, whose holds are all of one family, for `lease`.
    fn renewal<'a>(
        &self,
        batch: &[Renewal<'_>],
        lease: Duration,
        fence_retention: Duration,
    ) -> Invocation<'a>;

    /// Gives the hold `owner` took of `keys` with `token` a lease of `lease` from now:
    /// `true` if it is still ours (nothing is written otherwise: a hold is never revived).
    fn extend(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        token: u64,
        lease: Duration,
        freeing: Freeing,
    ) -> RedisResult<bool>;

    // The kinds with shares (`ReadWriteLock`, `Semaphore`).

    /// Takes or re-enters the share `need` says for `owner`, or queues it where the layout
    /// keeps a queue.
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
    ) -> RedisResult<Acquire>;

    /// Takes `owner` out of the queue of `keys`; `Some(token)` if it had been granted its
    /// share.
    fn share_withdraw(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        lease: Duration,
        freeing: Freeing,
    ) -> RedisResult<Option<u64>>;

    /// Releases one of `owner`'s holds of the share taken with `token`, as `how` says.
    fn share_release(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        token: u64,
        how: Releasing,
        freeing: Freeing,
    ) -> RedisResult<Release>;

    /// Reads read-write lock `keys`'s state, changing nothing.
    fn rw_inspect(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
    ) -> RedisResult<RwInspection>;

    /// Frees read-write lock `keys` whoever holds it and wakes its waiters: `true` if it was
    /// held. `request` names the call, so that a retry answers the same.
    fn rw_force_unlock(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool>;

    /// The owner id of an acquisition of `n` permits of a semaphore: `fresh()` where an
    /// owner id names nothing but the acquisition; refused where the layout cannot carry
    /// `n`.
    fn permits_owner(&self, n: u32, fresh: &dyn Fn() -> Arc<str>) -> Result<Arc<str>>;

    /// Sets semaphore `keys`'s total and grants (or wakes) the waiters that now fit.
    fn set_permits(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        total: u32,
        freeing: Freeing,
    ) -> RedisResult<()>;

    /// Sets semaphore `keys`'s total if none is set yet: `true` if it was set.
    fn try_set_permits(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        total: u32,
        freeing: Freeing,
    ) -> RedisResult<bool>;

    /// Moves semaphore `keys`'s total by `delta`: `Ok(the new total)`, or `Err(the total as
    /// it is)` when the new one would leave `0..=u32::MAX` (nothing written then).
    fn add_permits(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        delta: i64,
        freeing: Freeing,
    ) -> RedisResult<std::result::Result<u32, i64>>;

    /// The permits of semaphore `keys` free now.
    fn available(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        freeing: Freeing,
    ) -> RedisResult<u32>;

    /// Semaphore `keys`'s total or the permits held now, as `which` says; below 0 reads as
    /// 0.
    fn count(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        which: Count,
        freeing: Freeing,
    ) -> RedisResult<u32>;

    /// Frees semaphore `keys` whoever holds its permits: `true` if a permit was held.
    /// `request` names the call, so that a retry answers the same.
    fn semaphore_force_unlock(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool>;

    // The count-down latch. `request` names each call, so that a retry answers the same.

    /// Sets latch `keys`'s count to `n` unless a count is running: `true` if set.
    fn latch_set(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        n: u64,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool>;

    /// Counts latch `keys` down by one (opening it at zero): what remains.
    fn latch_count_down(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<u64>;

    /// Deletes latch `keys`, waking its waiters: `true` if a count was running.
    fn latch_delete(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool>;

    // The counting semaphore. `request` names each call, so that a retry answers the same.

    /// Takes `n` permits of `keys` if that many are free: `true` if taken.
    fn counting_acquire(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        n: u32,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool>;

    /// Moves the count of `keys` by `delta` (a release's `n` when `release`, else
    /// `add_permits`'s delta) and wakes the waiters: the new count, or `Err(count)` when it
    /// would leave what Lua counts exactly.
    fn counting_add(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        delta: i64,
        release: bool,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<std::result::Result<i64, i64>>;

    /// Sets the count of `keys` to `n` unless one is there: `true` if this call set it.
    fn counting_try_set(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        n: u32,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool>;

    /// Takes every permit of `keys` free: how many.
    fn counting_drain(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<i64>;

    // How the layout treats waiters.

    /// What `payload`, on the channel of an object of `family` that this client waits for
    /// (`None`: it waits for none there), asks of its waiters; `None` for a payload that
    /// asks nothing (a foreign one).
    fn message<'a>(&self, family: Option<Family>, payload: &'a [u8]) -> Option<Message<'a>>;

    /// Whether a release of `keys` goes to a waiting thread of the same client (one script
    /// call moves the hold, and the thread is told in process): where the layout's release
    /// only wakes waiters, who race (`engine::local`); and so whether the client gives the
    /// other clients their turns at it (`engine::turn`).
    fn hands_over_in_client(&self, keys: &LockKeys) -> bool;

    /// Whether an attempt at `keys` that queues takes a place named by its terms, which an
    /// attempt that got no reply leaves behind for the owner's next attempt to void
    /// (`engine::leftover`).
    fn queues_by_place(&self, keys: &LockKeys) -> bool;

    /// Whether a release wakes waiters that race for the object rather than hand it to
    /// one: then a retried release may find the object another's by an earlier attempt of
    /// its own, and no fence tells that hold from one that was there before.
    fn release_wakes_racers(&self) -> bool;
}
