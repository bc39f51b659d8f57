//! The scripts of the kinds with shares (`ReadWriteLock`, `Semaphore`): take, queue,
//! withdraw, release and renew a share, and set or read a semaphore's total.
//!
//! Their common Lua (`lua/shares.lua`: the keys, the purge of ended leases, the grant rule)
//! is put in front of each script's own text (`with_prelude!`), so every script stays one
//! EVALSHA with no library to load first.
//!
//! These are our layout's; Redisson's are in `scripts::redisson`, with the same replies
//! (each [`Dialect`](super::Dialect) calls its own).

use std::sync::LazyLock;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::{
    Acquire, Count, Freeing, Invocation, Lua, Optional, Queueing, Release, Releasing, Renewal,
    millis,
};
use crate::keys::{Family, LockKeys};

static ACQUIRE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(with_prelude!("shares.lua", "shares_acquire.lua")));
static RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(with_prelude!("shares.lua", "shares_release.lua")));
static WITHDRAW: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(with_prelude!("shares.lua", "shares_withdraw.lua")));
static SET_PERMITS: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(with_prelude!("shares.lua", "semaphore_set.lua")));
static TRY_SET_PERMITS: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(with_prelude!("shares.lua", "semaphore_try_set.lua")));
static ADD_PERMITS: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(with_prelude!("shares.lua", "semaphore_add.lua")));
static RENEW: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/shares_renew.lua")));
static EXTEND: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/shares_extend.lua")));
static COUNTS: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/semaphore_counts.lua")));

/// What an acquisition of a share asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Need<'a> {
    /// A read; `writer` is the write owner of the reading thread, which may read while it
    /// writes; `writing` if the thread holds the write in this client (in our layout the
    /// script hears of `writer` only then: an argument it cannot use costs Redis as much as
    /// one it uses).
    Read {
        writer: &'a str,
        writing: bool,
    },
    Write,
    /// Permits of a semaphore.
    Permits(u32),
}

/// An invocation of one of the scripts that start with `shares.lua`: the object's main key
/// (the scripts make its other keys from it) and three arguments.
fn prelude<'a>(lua: &'a Lua, keys: &LockKeys, freeing: Freeing) -> Invocation<'a> {
    let mut invocation = lua.key(keys.lock());
    invocation
        .arg(match keys.family {
            Family::Semaphore => "sem",
            _ => "rw",
        })
        .arg(freeing.publish)
        .arg(millis(freeing.fence_retention));
    invocation
}

/// Takes or re-enters a share for `owner`, or queues it (see `lua/shares_acquire.lua`).
#[allow(clippy::too_many_arguments)]
pub(super) fn acquire(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    held: Option<(u32, u64)>,
    lease: Duration,
    queueing: &Queueing,
    need: Need<'_>,
    freeing: Freeing,
) -> RedisResult<Acquire> {
    let (holds, token) = held.unwrap_or((0, 0));
    let (need, writer) = match need {
        Need::Read { writer, writing } => ("r".to_string(), if writing { writer } else { "" }),
        Need::Write => ("w".to_string(), ""),
        Need::Permits(n) => (n.to_string(), ""),
    };
    let (lease_ms, queue_for) = (millis(lease), millis(queueing.queue_for));
    let handover_ms = millis(queueing.handover_lease);
    let reply: redis::Value = prelude(&ACQUIRE, keys, freeing)
        .arg(owner)
        .arg(holds)
        .arg(lease_ms)
        .arg(need)
        .optional_args(&[
            (token != 0, Optional::Number(token)),
            (queue_for != 0, Optional::Number(queue_for)),
            (
                queueing.queued,
                Optional::Text(if queueing.queued { "1" } else { "0" }),
            ),
            // The hand-over lease matters only to an attempt that queues, or queued.
            (
                (queue_for != 0 || queueing.queued) && handover_ms != lease_ms,
                Optional::Number(handover_ms),
            ),
            (!writer.is_empty(), Optional::Text(writer)),
        ])
        .invoke(con)?;
    super::lock::acquire_reply(reply)
}

/// Takes `owner` out of the queue; `Some(token)` if it had been granted its share.
pub(super) fn withdraw(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    lease: Duration,
    freeing: Freeing,
) -> RedisResult<Option<u64>> {
    let (granted, token): (i64, i64) = prelude(&WITHDRAW, keys, freeing)
        .arg(owner)
        .arg(millis(lease))
        .invoke(con)?;
    Ok((granted == 1).then_some(token as u64))
}

/// Releases one of `owner`'s holds of the share taken with `token`, as `how` says (a share
/// hands over on the object's channel whatever the lease: see `lua/shares.lua`).
pub(super) fn release(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    token: u64,
    how: Releasing,
    freeing: Freeing,
) -> RedisResult<Release> {
    let reply: i64 = prelude(&RELEASE, keys, freeing)
        .arg(owner)
        .arg(how.holds)
        .arg(token)
        .arg(if freeing.retries_unseen {
            millis(freeing.latch_ttl)
        } else {
            0
        })
        .optional_args(&[(how.mode() != "0", Optional::Text(how.mode()))])
        .invoke(con)?;
    Ok(match reply {
        1 => Release::Released,
        2 => Release::StillHeld,
        3 => Release::Gone,
        _ => Release::NotOurs,
    })
}

/// The call of `shares_renew.lua` that renews the holds in `batch`.
pub(super) fn renewal<'a>(batch: &[Renewal<'_>], lease: Duration) -> Invocation<'a> {
    let mut invocation = RENEW.prepare_invoke();
    invocation.arg(millis(lease));
    for r in batch {
        invocation
            .key(r.keys.lock())
            .key(r.keys.leases())
            .arg(r.owner)
            .arg(r.token);
    }
    invocation
}

/// Gives `owner`'s share of `keys`, taken with `token`, a lease of `lease` from now: `true`
/// if it is still ours (`shares_extend.lua`).
pub(super) fn extend(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    token: u64,
    lease: Duration,
) -> RedisResult<bool> {
    let reply: i64 = EXTEND
        .key(keys.lock())
        .key(keys.leases())
        .arg(millis(lease))
        .arg(owner)
        .arg(token)
        .invoke(con)?;
    Ok(reply == 1)
}

/// Sets a semaphore's total and grants the waiters that now fit.
pub(super) fn set_permits(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    total: u32,
    freeing: Freeing,
) -> RedisResult<()> {
    let _: i64 = prelude(&SET_PERMITS, keys, freeing)
        .arg(total)
        .invoke(con)?;
    Ok(())
}

/// The permits of a semaphore free now.
pub(super) fn available(con: &mut dyn ConnectionLike, keys: &LockKeys) -> RedisResult<u32> {
    // The total less what is held under a live lease, never below 0: the counts' one read.
    let (total, held): (i64, i64) = COUNTS
        .key(keys.lock())
        .key(keys.leases())
        .key(keys.permits())
        .invoke(con)?;
    Ok((total - held).clamp(0, u32::MAX as i64) as u32)
}

/// Sets a semaphore's total if none is set yet, and grants the waiters that now fit: `true`
/// if it was set.
pub(super) fn try_set_permits(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    total: u32,
    freeing: Freeing,
) -> RedisResult<bool> {
    let set: i64 = prelude(&TRY_SET_PERMITS, keys, freeing)
        .arg(total)
        .invoke(con)?;
    Ok(set == 1)
}

/// Moves a semaphore's total by `delta` and grants the waiters that now fit:
/// `Ok(the new total)`, or `Err(the total as it is)` when the new one would leave
/// `0..=u32::MAX` (nothing written then).
pub(super) fn add_permits(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    delta: i64,
    freeing: Freeing,
) -> RedisResult<std::result::Result<u32, i64>> {
    let (done, total): (i64, i64) = prelude(&ADD_PERMITS, keys, freeing)
        .arg(delta)
        .invoke(con)?;
    Ok(moved(done, total))
}

/// What a script that moves a semaphore's total answered, `(1, the new total)` or `(0, the
/// total as it is)`, as [`add_permits`] tells it (Redisson's `semaphore_add.lua` answers
/// alike).
pub(super) fn moved(done: i64, total: i64) -> std::result::Result<u32, i64> {
    match u32::try_from(total) {
        Ok(total) if done == 1 => Ok(total),
        _ => Err(total),
    }
}

/// A semaphore's total or the permits held now.
pub(super) fn count(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    which: Count,
) -> RedisResult<u32> {
    let (total, held): (i64, i64) = COUNTS
        .key(keys.lock())
        .key(keys.leases())
        .key(keys.permits())
        .invoke(con)?;
    Ok(clamped(match which {
        Count::Permits => total,
        Count::Acquired => held,
    }))
}

/// A count as a number of permits: a total below 0, which only Java's `addPermits` can make,
/// reads as 0.
pub(super) fn clamped(n: i64) -> u32 {
    n.clamp(0, i64::from(u32::MAX)) as u32
}

/// Frees semaphore `keys` whoever holds its permits and grants its waiters that now fit;
/// `true` if a permit was held. `request` names the call, so that a retry answers the same.
pub(super) fn force_unlock(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    request: &str,
    freeing: Freeing,
) -> RedisResult<bool> {
    let reply: i64 = prelude(&super::read_write::FORCE_UNLOCK, keys, freeing)
        .key(keys.force_latch(request))
        .key(keys.forced_mark())
        .arg(millis(freeing.latch_ttl))
        .invoke(con)?;
    Ok(reply == 1)
}
