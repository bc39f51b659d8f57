//! The count-down latch of Redisson's layout (Java's `getCountDownLatch`): typed calls of
//! `lua/redisson/latch_*.lua`. Each call's reply is kept for a retry under Redisson's
//! unlock-latch prefix ([`LockKeys::unlock_latch`]), which Java never reads; the count is
//! read by our own script, which reads both layouts (`scripts::latch::count`).

use std::sync::LazyLock;

use redis::{ConnectionLike, RedisResult};

use super::super::latch::{opening, parse};
use super::super::{Freeing, Lua, millis};
use crate::keys::LockKeys;

static SET: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/latch_set.lua")));
static COUNT_DOWN: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/latch_count_down.lua")));
static DELETE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/latch_delete.lua")));

/// Sets the count to `n` unless a count is running, as Java's `trySetCount` does
/// (`redisson/latch_set.lua`); `request` names this call, so that a retry answers the same.
pub(in crate::scripts) fn set_count(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    n: u64,
    request: &str,
    freeing: Freeing,
) -> RedisResult<bool> {
    let reply: i64 = SET
        .key(keys.lock())
        .key(keys.channel())
        .key(keys.unlock_latch(request))
        .arg(n)
        .arg(freeing.publish)
        .arg(millis(freeing.latch_ttl))
        .invoke(con)?;
    Ok(reply == 1)
}

/// Counts down by one (opening the latch at zero): what remains
/// (`redisson/latch_count_down.lua`). `request` as in [`set_count`].
pub(in crate::scripts) fn count_down(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    request: &str,
    freeing: Freeing,
) -> RedisResult<u64> {
    let marker = keys.unlock_latch(request);
    let left: String = opening(con, &COUNT_DOWN, keys, &marker, freeing)?;
    parse(&left)
}

/// Deletes the latch, waking its waiters, as Java's `delete` does: `true` if a count was
/// running (`redisson/latch_delete.lua`). `request` as in [`set_count`].
pub(in crate::scripts) fn delete(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    request: &str,
    freeing: Freeing,
) -> RedisResult<bool> {
    let marker = keys.unlock_latch(request);
    let reply: i64 = opening(con, &DELETE, keys, &marker, freeing)?;
    Ok(reply == 1)
}
