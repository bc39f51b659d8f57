//! The scripts of Redisson's layout (`lua/redisson/`), and the messages Redisson's channels
//! carry: what a client in [`Layout::Redisson`](crate::Layout::Redisson) runs instead of our
//! own scripts, with the same typed replies, so the engine serves both layouts alike.
//!
//! The data each script reads and writes is Redisson 4.x's (Redisson's format); the
//! scripts, and so their replies, are our own. Redisson's layout has no hand-over: a release
//! publishes a wake-up ("0", or "1" for all; a semaphore's count), and waiters attempt again.
//!
//! This file has the lock's scripts and the messages ([`Wakes`]); [`read_write`] and
//! [`semaphore`] those of the kinds with shares, `latch` and `counting` those of the latch
//! and the counting semaphore. The [`REDISSON`] dialect calls them for a client in this
//! layout, so the kinds and the engine need not know.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult, Value};

use super::{
    Acquire, AcquireMany, Freeing, Invocation, Lua, Optional, Release, Releasing, Renewal, millis,
};
use crate::keys::{Family, LockKeys};

mod counting;
mod dialect;
mod latch;
pub(crate) mod read_write;
pub(crate) mod semaphore;

pub(crate) use dialect::REDISSON;

static ACQUIRE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/acquire.lua")));
static RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/release.lua")));
static RENEW: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/renew.lua")));
static EXTEND: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/extend.lua")));
static FORCE_UNLOCK: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/force_unlock.lua")));
static TRANSFER: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/transfer.lua")));
static FAIR_ACQUIRE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/fair_acquire.lua")));
static FAIR_WITHDRAW: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/fair_withdraw.lua")));
static FAIR_RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/fair_release.lua")));
static ACQUIRE_MANY: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/acquire_many.lua")));

/// Takes or re-enters lock `keys` for `owner` (who holds `hold`: its guard count and token,
/// if it holds it already) with `lease` (`redisson/acquire.lua`).
pub(in crate::scripts) fn acquire(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    hold: Option<(u32, u64)>,
    lease: Duration,
) -> RedisResult<Acquire> {
    let mut invocation = ACQUIRE.key(keys.lock());
    invocation.key(keys.fence()).arg(owner).arg(millis(lease));
    attempt(con, invocation, hold)
}

/// Takes every lock of `locks` that is free for `owner`, or none of them
/// (`redisson/acquire_many.lua`, which answers as our `acquire_many.lua` does).
fn acquire_many(
    con: &mut dyn ConnectionLike,
    locks: &[&LockKeys],
    owner: &str,
    lease: Duration,
) -> RedisResult<AcquireMany> {
    let mut invocation = ACQUIRE_MANY.prepare_invoke();
    for keys in locks {
        invocation.key(keys.lock()).key(keys.fence());
    }
    invocation.arg(owner).arg(millis(lease));
    super::lock::many_reply(invocation.invoke(con))
}

/// Runs an acquisition script of this layout, after the re-entry's arguments (the guard
/// count and token `hold` of a holder), which every one of them takes last.
fn attempt(
    con: &mut dyn ConnectionLike,
    mut invocation: Invocation<'_>,
    hold: Option<(u32, u64)>,
) -> RedisResult<Acquire> {
    if let Some((holds, token)) = hold {
        invocation.arg(holds).arg(token);
    }
    acquire_reply(invocation.invoke(con)?)
}

/// What an acquisition script of this layout answered (`redisson/acquire.lua` says how;
/// `redisson/fair_acquire.lua` and the kinds with shares answer alike): a token, `{0, ms}`
/// busy, `{-1, 0}` a re-entry whose hold is gone.
fn acquire_reply(reply: Value) -> RedisResult<Acquire> {
    if !matches!(reply, Value::Array(_)) {
        return Ok(Acquire::Acquired {
            token: redis::from_redis_value(reply)?,
        });
    }
    let reply: Vec<i64> = redis::from_redis_value(reply)?;
    Ok(match reply.as_slice() {
        [0, ms, ..] => Acquire::Busy {
            // A holder without a lease (only a foreign client leaves one) frees the object
            // by a message alone: sleep as long as the engine lets a waiter sleep, no
            // shorter.
            ttl: u64::try_from(*ms).map_or(Duration::MAX, Duration::from_millis),
            fence: 0,
            place: None,
        },
        _ => Acquire::Lost,
    })
}

/// Takes, re-enters or queues for fair lock `keys` for `owner` (`redisson/fair_acquire.lua`);
/// `slot` is how long a queued place stays valid past its predecessor's (ZERO: one attempt,
/// no queueing).
pub(crate) fn fair_acquire(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    hold: Option<(u32, u64)>,
    lease: Duration,
    slot: Duration,
) -> RedisResult<Acquire> {
    let mut invocation = FAIR_ACQUIRE.key(keys.lock());
    invocation
        .key(keys.fence())
        .key(keys.queue())
        .key(keys.waiters())
        .arg(owner)
        .arg(millis(lease))
        .arg(epoch_ms())
        .arg(millis(slot));
    attempt(con, invocation, hold)
}

/// Takes `owner` out of fair lock `keys`'s queue, moving those behind it up by `slot`
/// (`redisson/fair_withdraw.lua`).
pub(crate) fn fair_withdraw(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    slot: Duration,
) -> RedisResult<()> {
    let _: i64 = FAIR_WITHDRAW
        .key(keys.queue())
        .key(keys.waiters())
        .arg(owner)
        .arg(millis(slot))
        .invoke(con)?;
    Ok(())
}

/// The wall clock in epoch milliseconds: Redisson keeps a fair lock's deadlines and a
/// semaphore's permit leases in it (a client whose clock is off drops live waiters or keeps
/// dead ones: as Java's), and `inspect` reads them by it.
pub(crate) fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, millis)
}

/// The lock's channel, whatever channel `keys` name (a fair waiter's keys name its own): a
/// fair lock's release wakes its head on it followed by `:<head>`.
fn lock_channel(keys: &LockKeys) -> String {
    crate::keys::redisson_tagged("redisson_lock__channel", keys.name())
}

/// Releases one of `owner`'s holds (taken with `token`) of lock `keys`, as `how` says
/// (`redisson/release.lua`, `redisson/fair_release.lua`).
pub(crate) fn release(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    token: u64,
    how: Releasing,
    freeing: Freeing,
) -> RedisResult<Release> {
    let invocation = if keys.fair {
        let mut invocation = FAIR_RELEASE.key(keys.lock());
        invocation
            .key(keys.queue())
            .key(keys.waiters())
            .key(lock_channel(keys))
            .arg(owner)
            .arg(epoch_ms());
        invocation
    } else {
        let mut invocation = RELEASE.key(keys.lock());
        invocation.key(keys.channel()).arg(owner);
        invocation
    };
    free(con, invocation, keys, owner, token, how.holds, freeing)
}

/// Runs a release script of this layout with the arguments every one of them takes last, as
/// far as one differs from what the script takes for its absence: the owner's `holds` before
/// this release (1), the publish command (PUBLISH), and, where the connection retries out of
/// sight, the unlock latch's life, with the latch (Redisson's
/// `redisson_unlock_latch:{name}:<request id>`) that its retry finds as its last key. A
/// usual release leaves all three off: every argument costs Redis about 1,300 instructions.
fn free(
    con: &mut dyn ConnectionLike,
    mut invocation: Invocation<'_>,
    keys: &LockKeys,
    owner: &str,
    token: u64,
    holds: u32,
    freeing: Freeing,
) -> RedisResult<Release> {
    invocation.optional_args(&[
        (holds != 1, Optional::Number(holds.into())),
        (
            freeing.publish != "PUBLISH",
            Optional::Text(freeing.publish),
        ),
        (
            freeing.retries_unseen,
            Optional::Number(millis(freeing.latch_ttl)),
        ),
    ]);
    if freeing.retries_unseen {
        invocation.key(keys.unlock_latch(&request_id(owner, token, holds)));
    }
    Ok(release_reply(invocation.invoke(con)?))
}

/// What a release script of this layout answered (`redisson/release.lua` says how).
fn release_reply(reply: i64) -> Release {
    match reply {
        1 => Release::Released,
        2 => Release::StillHeld,
        3 => Release::Gone,
        _ => Release::NotOurs,
    }
}

/// What `redisson/transfer.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transfer {
    /// The successor holds it, with this token.
    To { token: u64 },
    /// Another owner holds it.
    NotOurs,
    /// Not in Redis.
    Gone,
}

/// Releases `owner`'s last hold of lock `keys` straight to `successor`, which then holds it
/// for `lease` (`redisson/transfer.lua`).
pub(crate) fn transfer(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    successor: &str,
    lease: Duration,
) -> RedisResult<Transfer> {
    let reply: Vec<i64> = TRANSFER
        .key(keys.lock())
        .key(keys.fence())
        .arg(owner)
        .arg(successor)
        .arg(millis(lease))
        .invoke(con)?;
    Ok(match reply.as_slice() {
        [1, token] => Transfer::To {
            token: *token as u64,
        },
        [3] => Transfer::Gone,
        _ => Transfer::NotOurs,
    })
}

/// The request id of Redisson's unlock latch for the release of `owner`'s hold taken with
/// `token`, from `holds` to `holds - 1`: 32 hex digits, as Java's, the same for every retry
/// of one release and different for every other (a token is never taken twice while the
/// counter lives; the owner's digest tells apart the rest).
fn request_id(owner: &str, token: u64, holds: u32) -> String {
    // FNV-1a: a stable digest, not a secret; the latch only answers this owner's retry.
    let digest = owner.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{token:016x}{holds:08x}{:08x}", digest as u32)
}

/// The call of `redisson/renew.lua` that renews the lock holds in `batch`.
pub(in crate::scripts) fn renewal<'a>(batch: &[Renewal<'_>], lease: Duration) -> Invocation<'a> {
    let mut invocation = RENEW.prepare_invoke();
    invocation.arg(millis(lease));
    for r in batch {
        invocation
            .key(r.keys.lock())
            .key(r.keys.fence())
            .arg(r.owner)
            .arg(r.token);
    }
    invocation
}

/// Gives `owner`'s hold of lock `keys` (plain or fair), taken with `token`, a lease of
/// `lease` from now: `true` if it is still ours (`redisson/extend.lua`).
pub(in crate::scripts) fn extend(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    token: u64,
    lease: Duration,
) -> RedisResult<bool> {
    let reply: i64 = EXTEND
        .key(keys.lock())
        .key(keys.fence())
        .arg(millis(lease))
        .arg(owner)
        .arg(token)
        .invoke(con)?;
    Ok(reply == 1)
}

/// Deletes lock `keys` (plain or fair: one hash) whoever holds it and wakes every waiter of
/// either; `request` names this call so a retry answers the same
/// (`redisson/force_unlock.lua`).
pub(crate) fn force_unlock(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    request: &str,
    freeing: Freeing,
) -> RedisResult<bool> {
    let reply: i64 = FORCE_UNLOCK
        .key(keys.lock())
        .key(keys.queue())
        .key(keys.waiters())
        .key(lock_channel(keys))
        .key(keys.unlock_latch(request))
        .arg(epoch_ms())
        .arg(freeing.publish)
        .arg(millis(freeing.latch_ttl))
        .invoke(con)?;
    Ok(reply == 1)
}

/// What a message on a channel of Redisson's layout asks of this client's waiters there.
/// Java parses every payload as a decimal integer, and so do we.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wakes {
    /// Wake one waiter: it attempts again (a lock's "0", which Java's final unlock
    /// publishes; Java wakes one thread per client for it too).
    One,
    /// Wake them all (a lock's "1": a write unlock or a force-unlock; a latch's "0" at
    /// zero, and its "1": a new count, or Java's delete; a semaphore's count of permits
    /// free, when above 0).
    All,
}

impl Wakes {
    /// Whom `payload`, on a channel of an object of `family`, wakes; `None` for a payload
    /// that wakes nobody (anything not a number, or no number the family publishes).
    pub fn parse(family: Family, payload: &[u8]) -> Option<Wakes> {
        let n: i64 = std::str::from_utf8(payload).ok()?.parse().ok()?;
        match (family, n) {
            (Family::Lock | Family::ReadWrite, 0) => Some(Wakes::One),
            (Family::Lock | Family::ReadWrite, 1) => Some(Wakes::All),
            // A new count ("1", also what Java's delete publishes) wakes our waiters to look
            // again: after a delete they find the latch open. Java's close their latch.
            (Family::Latch, 0 | 1) => Some(Wakes::All),
            // `redisson_sc:{n}` is one channel for Java's getSemaphore and
            // getPermitExpirableSemaphore, so one entry may hold waiters of both kinds, each
            // wanting its own number of permits: a waiter woken that wants more than `n`
            // cannot pass its wake-up on to one that wants fewer, so every waiter tries
            // (Java wakes min(waiters, n), and may leave a small request asleep).
            (Family::Semaphore | Family::Counting, n) if n > 0 => Some(Wakes::All),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_wake_as_java_wakes() {
        assert_eq!(Wakes::parse(Family::Lock, b"0"), Some(Wakes::One));
        assert_eq!(Wakes::parse(Family::Lock, b"1"), Some(Wakes::All));
        assert_eq!(Wakes::parse(Family::ReadWrite, b"1"), Some(Wakes::All));
        assert_eq!(Wakes::parse(Family::Lock, b"2"), None);
        assert_eq!(Wakes::parse(Family::Latch, b"0"), Some(Wakes::All));
        assert_eq!(
            Wakes::parse(Family::Latch, b"1"),
            Some(Wakes::All),
            "a new count, or Java's delete: look again"
        );
        assert_eq!(Wakes::parse(Family::Latch, b"2"), None);
        assert_eq!(Wakes::parse(Family::Semaphore, b"3"), Some(Wakes::All));
        assert_eq!(Wakes::parse(Family::Semaphore, b"0"), None);
        assert_eq!(Wakes::parse(Family::Semaphore, b"-2"), None);
        assert_eq!(Wakes::parse(Family::Counting, b"2"), Some(Wakes::All));
        assert_eq!(Wakes::parse(Family::Counting, b"0"), None);
        assert_eq!(Wakes::parse(Family::Counting, b"-1"), None);
        for foreign in [&b"unlock"[..], b"grant 1 2 o:1", b"", b" 0", b"0x1"] {
            assert_eq!(Wakes::parse(Family::Lock, foreign), None, "{foreign:?}");
        }
    }

    #[test]
    fn a_release_keeps_its_request_id_and_no_other_has_it() {
        let a = request_id("u:1", 7, 2);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(a, request_id("u:1", 7, 2));
        assert_ne!(a, request_id("u:1", 7, 1));
        assert_ne!(a, request_id("u:1", 8, 2));
        assert_ne!(a, request_id("u:2", 7, 2));
    }
}
