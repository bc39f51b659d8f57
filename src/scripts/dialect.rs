//! What differs between the two data layouts beyond the keys' names: which script each call
//! runs, how a message on an object's channel reads, and how a release treats the waiters.
//!
//! A client speaks one [`Dialect`], chosen once from its [`Layout`](crate::Layout) when it is
//! built ([`dialect`](super::dialect)) and kept in its `Core` (and its subscriber's state):
//! the kinds and the engine call through it and never ask which layout they are in. A
//! dialect is a table, as a `RawWakerVTable` is: each field names the function that the
//! layout runs for that call (or a short closure where the layout's function takes other
//! arguments), and the rules that take no argument are plain values. Our dialect is
//! [`OURS`](super::ours::OURS), Redisson's is [`REDISSON`](super::redisson::REDISSON); a
//! third layout is a third table and a line in that one choice.
//!
//! The fields are grouped by family, in the order the lock, the kinds with shares, the
//! latch and the counting semaphore; the replies are the typed ones of `scripts`, the same
//! in every dialect, so that the engine serves all of them alike. Each field's docs name its
//! arguments in order, and `keys` is always an object's keys in the same layout: the client
//! that chose the dialect made them.

use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::counting::Scripts;
use super::read_write::RwInspection;
use super::shares::Need;
use super::{
    Acquire, AcquireMany, Count, Freeing, Invocation, Leftover, Message, Queueing, Release,
    Releasing, Renewal,
};
use crate::error::Result;
use crate::keys::{Family, LockKeys};

/// The calls and rules of one data layout (see the module's docs). A call is
/// `(dialect.field)(con, …)`.
// Each field's type is its call's signature, spelled out where no other field shares it
// (the aliases below).
#[allow(clippy::type_complexity)]
pub(crate) struct Dialect {
    // The lock (`Lock`, `SpinLock`, the members of `MultiLock` and `Redlock`).
    /// `(con, keys, owner, hold, lease, queueing, fence_retention)`: takes or re-enters lock
    /// `keys` for `owner` (who holds `hold`: its guard count and token, if it holds it
    /// already) with `lease`, or queues it as `queueing` says, where the layout keeps a
    /// queue.
    pub acquire: fn(
        &mut dyn ConnectionLike,
        &LockKeys,
        &str,
        Option<(u32, u64)>,
        Duration,
        &Queueing,
        Duration,
    ) -> RedisResult<Acquire>,

    /// `(con, locks, owner, lease, fence_retention, leftovers)`: takes every lock of `locks`
    /// that is free for `owner`, or none of them; voids `leftovers[i]`, places earlier
    /// waits left in the queue of `locks[i]`, where the layout keeps queues.
    pub acquire_many: fn(
        &mut dyn ConnectionLike,
        &[&LockKeys],
        &str,
        Duration,
        Duration,
        &[Vec<Leftover>],
    ) -> RedisResult<AcquireMany>,

    /// `(con, keys, owner, lease, queueing, fence_retention)`: takes `owner` out of lock
    /// `keys`'s queue; `Some(token)` if the lock had been handed to it meanwhile (then it
    /// holds it with at least `lease`).
    pub withdraw: fn(
        &mut dyn ConnectionLike,
        &LockKeys,
        &str,
        Duration,
        &Queueing,
        Duration,
    ) -> RedisResult<Option<u64>>,

    /// `(con, keys, owner, token, how, freeing)`: releases one of `owner`'s holds of lock
    /// `keys`, taken with `token`, as `how` says.
    pub release: ReleaseFn,

    /// `(con, keys, request, freeing)`: deletes lock `keys` whoever holds it; `request`
    /// names the call so a retry answers the same.
    pub force_unlock: RequestFn<bool>,

    /// `(con, keys, token)`: whether a force-unlock freed the hold of `keys` taken with
    /// `token`: why it is gone (`false` where the layout keeps no mark of one).
    pub was_forced: fn(&mut dyn ConnectionLike, &LockKeys, u64) -> RedisResult<bool>,

    // Every family held under a lease (a lock, a read-write lock, a semaphore).
    /// `(con, keys, owner, token, lease, freeing)`: gives back a hand-over of `keys` to
    /// `owner` with `token` for `lease` that nobody took up (its thread no longer waited);
    /// changes nothing if it was taken up.
    pub give_back: HoldFn<Release>,

    /// `(batch, lease, fence_retention)`: the call that renews `batch`, whose holds are all
    /// of one family, for `lease`.
    pub renewal: fn(&[Renewal<'_>], Duration, Duration) -> Invocation<'static>,

    /// `(con, keys, owner, token, lease, freeing)`: gives the hold `owner` took of `keys`
    /// with `token` a lease of `lease` from now: `true` if it is still ours (nothing is
    /// written otherwise: a hold is never revived).
    pub extend: HoldFn<bool>,

    // The kinds with shares (`ReadWriteLock`, `Semaphore`).
    /// `(con, keys, owner, held, lease, queueing, need, freeing)`: takes or re-enters the
    /// share `need` says for `owner`, or queues it where the layout keeps a queue.
    pub share_acquire: fn(
        &mut dyn ConnectionLike,
        &LockKeys,
        &str,
        Option<(u32, u64)>,
        Duration,
        &Queueing,
        Need<'_>,
        Freeing,
    ) -> RedisResult<Acquire>,

    /// `(con, keys, owner, lease, freeing)`: takes `owner` out of the queue of `keys`;
    /// `Some(token)` if it had been granted its share.
    pub share_withdraw:
        fn(&mut dyn ConnectionLike, &LockKeys, &str, Duration, Freeing) -> RedisResult<Option<u64>>,

    /// `(con, keys, owner, token, how, freeing)`: releases one of `owner`'s holds of the
    /// share taken with `token`, as `how` says.
    pub share_release: ReleaseFn,

    /// `(con, keys)`: reads read-write lock `keys`'s state, changing nothing.
    pub rw_inspect: fn(&mut dyn ConnectionLike, &LockKeys) -> RedisResult<RwInspection>,

    /// `(con, keys, request, freeing)`: frees read-write lock `keys` whoever holds it and
    /// wakes its waiters: `true` if it was held. `request` names the call, so that a retry
    /// answers the same.
    pub rw_force_unlock: RequestFn<bool>,

    /// `(n, fresh)`: the owner id of an acquisition of `n` permits of a semaphore: `fresh()`
    /// where an owner id names nothing but the acquisition; refused where the layout cannot
    /// carry `n`.
    pub permits_owner: fn(u32, &dyn Fn() -> Arc<str>) -> Result<Arc<str>>,

    /// `(con, keys, total, freeing)`: sets semaphore `keys`'s total and grants (or wakes)
    /// the waiters that now fit.
    pub set_permits: PermitsFn<u32, ()>,

    /// `(con, keys, total, freeing)`: sets semaphore `keys`'s total if none is set yet:
    /// `true` if it was set.
    pub try_set_permits: PermitsFn<u32, bool>,

    /// `(con, keys, delta, freeing)`: moves semaphore `keys`'s total by `delta`: `Ok(the new
    /// total)`, or `Err(the total as it is)` when the new one would leave `0..=u32::MAX`
    /// (nothing written then).
    pub add_permits: PermitsFn<i64, std::result::Result<u32, i64>>,

    /// `(con, keys, freeing)`: the permits of semaphore `keys` free now.
    pub available: fn(&mut dyn ConnectionLike, &LockKeys, Freeing) -> RedisResult<u32>,

    /// `(con, keys, which, freeing)`: semaphore `keys`'s total or the permits held now, as
    /// `which` says; below 0 reads as 0.
    pub count: PermitsFn<Count, u32>,

    /// `(con, keys, request, freeing)`: frees semaphore `keys` whoever holds its permits:
    /// `true` if a permit was held. `request` names the call, so that a retry answers the
    /// same.
    pub semaphore_force_unlock: RequestFn<bool>,

    // The count-down latch. `request` names each call, so that a retry answers the same.
    /// `(con, keys, n, request, freeing)`: sets latch `keys`'s count to `n` unless a count is
    /// running: `true` if set.
    pub latch_set: fn(&mut dyn ConnectionLike, &LockKeys, u64, &str, Freeing) -> RedisResult<bool>,

    /// `(con, keys, request, freeing)`: counts latch `keys` down by one (opening it at
    /// zero): what remains.
    pub latch_count_down: RequestFn<u64>,

    /// `(con, keys, request, freeing)`: deletes latch `keys`, waking its waiters: `true` if
    /// a count was running.
    pub latch_delete: RequestFn<bool>,

    /// The counting semaphore: its calls are the same in both layouts, with the layout's
    /// scripts and request markers.
    pub counting: Scripts,

    // How the layout treats waiters.
    /// `(family, payload)`: what `payload`, on the channel of an object of `family` that
    /// this client waits for (`None`: it waits for none there), asks of its waiters; `None`
    /// for a payload that asks nothing (a foreign one).
    pub message: for<'a> fn(Option<Family>, &'a [u8]) -> Option<Message<'a>>,

    /// `(keys)`: whether a release of `keys` goes to a waiting thread of the same client
    /// (one script call moves the hold, and the thread is told in process): where the
    /// layout's release only wakes waiters, who race (`engine::local`); and so whether the
    /// client gives the other clients their turns at it (`engine::turn`).
    pub hands_over_in_client: fn(&LockKeys) -> bool,

    /// `(keys)`: whether an attempt at `keys` that queues takes a place named by its terms,
    /// which an attempt that got no reply leaves behind for the owner's next attempt to
    /// void (`engine::leftover`).
    pub queues_by_place: fn(&LockKeys) -> bool,

    /// Whether a release wakes waiters that race for the object rather than hand it to
    /// one: then a retried release may find the object another's by an earlier attempt of
    /// its own, and no fence tells that hold from one that was there before.
    pub release_wakes_racers: bool,
}

/// A release of one hold: `(con, keys, owner, token, how, freeing)`.
type ReleaseFn =
    fn(&mut dyn ConnectionLike, &LockKeys, &str, u64, Releasing, Freeing) -> RedisResult<Release>;

/// A call on one hold under a lease: `(con, keys, owner, token, lease, freeing)`.
type HoldFn<T> =
    fn(&mut dyn ConnectionLike, &LockKeys, &str, u64, Duration, Freeing) -> RedisResult<T>;

/// A call named by its `request`, so that a retry answers the same: `(con, keys, request,
/// freeing)`.
type RequestFn<T> = fn(&mut dyn ConnectionLike, &LockKeys, &str, Freeing) -> RedisResult<T>;

/// A call on a semaphore's permits with one argument `A`: `(con, keys, a, freeing)`.
type PermitsFn<A, T> = fn(&mut dyn ConnectionLike, &LockKeys, A, Freeing) -> RedisResult<T>;
