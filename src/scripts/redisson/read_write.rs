//! The read-write lock of Redisson's layout (Java's `getReadWriteLock`,
//! in Redisson's format): typed calls of `lua/redisson/read_*.lua`, `write_*.lua` and `rw_renew.lua`.
//!
//! One hash, `name`: `mode` (`read` or `write`), each reader's field (its thread's owner id)
//! with its count of reads, the writer's field (`<owner>:write`) with its count of writes
//! ([`LockKeys::rw_owner`]). Each read hold `k` of a reader also has a key of its own,
//! `{name}:<owner>:rwlock_timeout:<k>`, with the hold's lease: Java counts a reader alive by
//! those keys alone, so ours are renewed with the hash.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::super::read_write::{RwInspection, ttl};
use super::super::{Acquire, Freeing, Invocation, Lua, Release, Releasing, Renewal, millis};
use super::{attempt, free};
use crate::keys::LockKeys;

static READ_ACQUIRE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/read_acquire.lua")));
static WRITE_ACQUIRE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/write_acquire.lua")));
static READ_RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/read_release.lua")));
static WRITE_RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/write_release.lua")));
static RENEW: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/rw_renew.lua")));
static EXTEND: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/rw_extend.lua")));
static INSPECT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/rw_inspect.lua")));
static FORCE_UNLOCK: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/rw_force_unlock.lua")));

/// The timeout keys of reader `owner` of lock `keys`, without the hold's number:
/// `{name}:<owner>:rwlock_timeout`.
fn timeouts(keys: &LockKeys, owner: &str) -> String {
    keys.suffixed(&format!("{owner}:rwlock_timeout"))
}

/// Takes or re-enters a read of lock `keys` for `owner` if `writer` is given (the write
/// owner of the reading thread, which may read while it writes), else its write; `hold` is
/// the owner's guard count and token if it holds it already (`redisson/read_acquire.lua`,
/// `redisson/write_acquire.lua`).
pub(crate) fn acquire(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    hold: Option<(u32, u64)>,
    lease: Duration,
    writer: Option<&str>,
) -> RedisResult<Acquire> {
    let mut invocation = match writer {
        Some(writer) => {
            let mut invocation = READ_ACQUIRE.key(keys.lock());
            invocation
                .key(timeouts(keys, owner))
                .key(keys.fence())
                .arg(owner)
                .arg(writer);
            invocation
        }
        None => {
            let mut invocation = WRITE_ACQUIRE.key(keys.lock());
            invocation.key(keys.fence()).arg(owner);
            invocation
        }
    };
    invocation.arg(millis(lease));
    attempt(con, invocation, hold)
}

/// Releases one of `owner`'s read or write holds (taken with `token`) of lock `keys`, as
/// `how` says (`redisson/read_release.lua`, `redisson/write_release.lua`).
pub(crate) fn release(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    token: u64,
    how: Releasing,
    freeing: Freeing,
) -> RedisResult<Release> {
    let mut invocation = if keys.reads(owner) {
        let mut invocation = READ_RELEASE.key(keys.lock());
        invocation
            .key(keys.channel())
            .key(timeouts(keys, owner))
            .key(keys.tagged_name());
        invocation
    } else {
        let mut invocation = WRITE_RELEASE.key(keys.lock());
        invocation.key(keys.channel());
        invocation
    };
    invocation.arg(owner);
    free(con, invocation, keys, owner, token, how.holds, freeing)
}

/// Gives `owner`'s read or write hold of lock `keys` (a write's taken with `token`) a lease
/// of `lease` from now: `true` if it is still ours (`redisson/rw_extend.lua`).
pub(in crate::scripts) fn extend(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    token: u64,
    lease: Duration,
) -> RedisResult<bool> {
    let mut invocation = EXTEND.key(keys.lock());
    if keys.reads(owner) {
        invocation
            .key(keys.tagged_name())
            .arg(millis(lease))
            .arg(owner)
            .arg("read");
    } else {
        // The thread's reads, which the hash carries too, are under its owner id itself.
        let reader = owner.strip_suffix(":write").unwrap_or(owner);
        invocation
            .key(keys.fence())
            .key(timeouts(keys, reader))
            .arg(millis(lease))
            .arg(owner)
            .arg(token)
            .arg(reader);
    }
    Ok(invocation.invoke::<i64>(con)? == 1)
}

/// The call of `redisson/rw_renew.lua` that renews the read and write holds in `batch`.
pub(in crate::scripts) fn renewal<'a>(batch: &[Renewal<'_>], lease: Duration) -> Invocation<'a> {
    let mut invocation = RENEW.prepare_invoke();
    invocation.arg(millis(lease));
    for r in batch {
        invocation.key(r.keys.lock());
        if r.keys.reads(r.owner) {
            invocation
                .key(timeouts(r.keys, r.owner))
                .arg(r.owner)
                .arg("read");
        } else {
            invocation.key(r.keys.fence()).arg(r.owner).arg(r.token);
        }
    }
    invocation
}

/// Reads read-write lock `keys`'s state, changing nothing (`redisson/rw_inspect.lua`).
pub(in crate::scripts) fn inspect(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
) -> RedisResult<RwInspection> {
    let (mode, pttl): (i64, i64) = INSPECT.key(keys.lock()).invoke(con)?;
    Ok(RwInspection {
        locked: mode != 0,
        writing: mode == 2,
        ttl: if mode == 0 { None } else { ttl(pttl) },
    })
}

/// Frees read-write lock `keys` whoever holds it and wakes its waiters; `true` if it was
/// held. `request` names the call, so that a retry answers the same
/// (`redisson/rw_force_unlock.lua`).
pub(in crate::scripts) fn force_unlock(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    request: &str,
    freeing: Freeing,
) -> RedisResult<bool> {
    let reply: i64 = FORCE_UNLOCK
        .key(keys.lock())
        .key(keys.channel())
        .key(keys.tagged_name())
        .key(keys.unlock_latch(request))
        .arg(freeing.publish)
        .arg(millis(freeing.latch_ttl))
        .invoke(con)?;
    Ok(reply == 1)
}
