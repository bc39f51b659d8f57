//! A counting semaphore's scripts (Java's `RSemaphore`): take, give back or add, set once,
//! drain, read. Each mutating call carries a request marker, so that a retry after a lost
//! reply answers what the first run did: ours under the semaphore's key
//! ([`LockKeys::request_marker`]), Redisson's under its unlock-latch prefix, which Java never
//! reads ([`LockKeys::unlock_latch`]).
//!
//! The calls take the script to run where the layouts' differ: our scripts are here,
//! Redisson's in `scripts::redisson::counting`, and each [`Dialect`](super::Dialect) passes
//! its own.

use std::sync::LazyLock;

use redis::{ConnectionLike, RedisResult};

use super::{Freeing, Lua, millis};
use crate::keys::LockKeys;

static ACQUIRE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/counting_acquire.lua")));
static AVAILABLE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/counting_available.lua")));
pub(super) static ADD: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/counting_add.lua")));
pub(super) static TRY_SET: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/counting_try_set.lua")));
pub(super) static DRAIN: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/counting_drain.lua")));

/// Takes `n` permits if that many are free: `true` if taken. The same script serves both
/// layouts (only the keys differ).
pub(super) fn acquire(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    marker: &str,
    n: u32,
    freeing: Freeing,
) -> RedisResult<bool> {
    let taken: i64 = ACQUIRE
        .key(keys.lock())
        .key(marker)
        .arg(n)
        .arg(millis(freeing.latch_ttl))
        .invoke(con)?;
    Ok(taken == 1)
}

/// The permits free now (below 0 after permits were taken away while in use).
pub(crate) fn available(con: &mut dyn ConnectionLike, keys: &LockKeys) -> RedisResult<i64> {
    AVAILABLE.key(keys.lock()).invoke(con)
}

/// Moves the count by `delta` (a release's `n`, or `add_permits`'s delta) with `script`,
/// and wakes the waiters: the new count, or `Err(count)` when it would leave what Lua counts
/// exactly (nothing changed then).
pub(super) fn add(
    con: &mut dyn ConnectionLike,
    script: &Lua,
    keys: &LockKeys,
    marker: &str,
    delta: i64,
    freeing: Freeing,
) -> RedisResult<Result<i64, i64>> {
    let reply: RedisResult<i64> = script
        .key(keys.lock())
        .key(keys.channel())
        .key(marker)
        .arg(delta)
        .arg(millis(freeing.latch_ttl))
        .arg(freeing.publish)
        .invoke(con);
    match reply {
        Ok(count) => Ok(Ok(count)),
        Err(e) if crate::error::refusal(&e).is_some_and(|(code, _)| code == "RANGE") => {
            let count = crate::error::refusal(&e)
                .and_then(|(_, detail)| detail.parse().ok())
                .unwrap_or(0);
            Ok(Err(count))
        }
        Err(e) => Err(e),
    }
}

/// Sets the count to `n` with `script` unless one is there: `true` if this call set it.
pub(super) fn try_set(
    con: &mut dyn ConnectionLike,
    script: &Lua,
    keys: &LockKeys,
    marker: &str,
    n: u32,
    freeing: Freeing,
) -> RedisResult<bool> {
    let set: i64 = script
        .key(keys.lock())
        .key(keys.channel())
        .key(marker)
        .arg(n)
        .arg(millis(freeing.latch_ttl))
        .arg(freeing.publish)
        .invoke(con)?;
    Ok(set == 1)
}

/// Takes every permit free with `script`: how many.
pub(super) fn drain(
    con: &mut dyn ConnectionLike,
    script: &Lua,
    keys: &LockKeys,
    marker: &str,
    freeing: Freeing,
) -> RedisResult<i64> {
    script
        .key(keys.lock())
        .key(marker)
        .arg(millis(freeing.latch_ttl))
        .invoke(con)
}
