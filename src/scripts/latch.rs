//! A count-down latch's scripts in our layout: start a round, count down, delete; and read
//! the count, which one script does for both layouts. Redisson's others are in
//! `scripts::redisson::latch`.

use std::sync::LazyLock;

use redis::{ConnectionLike, RedisResult};

use super::{Freeing, Lua, millis};
use crate::keys::LockKeys;

static SET: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../../lua/latch_set.lua")));
static COUNT_DOWN: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/latch_count_down.lua")));
static DELETE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/latch_delete.lua")));
static COUNT: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../../lua/latch_count.lua")));

/// Sets the count to `n` unless a count is running; `request` names this call, so that a
/// retry answers the same.
pub(super) fn set_count(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    n: u64,
    request: &str,
    freeing: Freeing,
) -> RedisResult<bool> {
    let reply: i64 = SET
        .key(keys.lock())
        .key(keys.request_marker(request))
        .arg(n)
        .arg(millis(freeing.latch_ttl))
        .invoke(con)?;
    Ok(reply == 1)
}

/// Counts down by one (opening the latch at zero); what remains. `request` as in
/// [`set_count`].
pub(super) fn count_down(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    request: &str,
    freeing: Freeing,
) -> RedisResult<u64> {
    let marker = keys.request_marker(request);
    let left: String = opening(con, &COUNT_DOWN, keys, &marker, freeing)?;
    parse(&left)
}

/// Deletes the latch, waking its waiters: `true` if a count was running. `request` as in
/// [`set_count`].
pub(super) fn delete(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    request: &str,
    freeing: Freeing,
) -> RedisResult<bool> {
    let marker = keys.request_marker(request);
    let reply: i64 = opening(con, &DELETE, keys, &marker, freeing)?;
    Ok(reply == 1)
}

/// Runs `script`, a call that may open the latch: ours and Redisson's all take the latch,
/// its channel and the call's request `marker` (where its reply is kept for a retry), then
/// the marker's life and the publish command.
pub(super) fn opening<T: redis::FromRedisValue>(
    con: &mut dyn ConnectionLike,
    script: &Lua,
    keys: &LockKeys,
    marker: &str,
    freeing: Freeing,
) -> RedisResult<T> {
    script
        .key(keys.lock())
        .key(keys.channel())
        .key(marker)
        .arg(millis(freeing.latch_ttl))
        .arg(freeing.publish)
        .invoke(con)
}

/// The count now: 0 for a latch never set (the same script reads both layouts: a string of
/// digits, absent at zero).
pub(crate) fn count(con: &mut dyn ConnectionLike, keys: &LockKeys) -> RedisResult<u64> {
    let count: String = COUNT.key(keys.lock()).invoke(con)?;
    parse(&count)
}

/// The count now and the server time of this look (µs): what a waiter holds against an
/// `open` message's time ([`Message::Open`](super::Message::Open)).
pub(crate) fn count_at(con: &mut dyn ConnectionLike, keys: &LockKeys) -> RedisResult<(u64, u64)> {
    let reply: String = COUNT.key(keys.lock()).arg("t").invoke(con)?;
    match reply.split_once(' ') {
        Some((count, at)) => Ok((parse(count)?, parse(at)?)),
        None => Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "latch_count.lua answered without a time",
            reply,
        ))),
    }
}

pub(super) fn parse(count: &str) -> RedisResult<u64> {
    count.parse().map_err(|_| {
        redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "a latch script answered something else",
            count.to_string(),
        ))
    })
}
