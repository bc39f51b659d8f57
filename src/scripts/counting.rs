//! A counting semaphore's scripts (Java's `RSemaphore`): take, give back or add, set once,
//! drain, read. Each mutating call carries a request id, so that a retry after a lost reply
//! answers what the first run did.

use std::sync::LazyLock;

use redis::{ConnectionLike, RedisResult};

use super::{Freeing, Lua, millis};
use crate::keys::{Layout, LockKeys};

static ACQUIRE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/counting_acquire.lua")));
static AVAILABLE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/counting_available.lua")));
static ADD: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../../lua/counting_add.lua")));
static TRY_SET: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/counting_try_set.lua")));
static DRAIN: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/counting_drain.lua")));
static REDISSON_RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/redisson/counting_release.lua")));
static REDISSON_ADD: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/redisson/counting_add.lua")));
static REDISSON_TRY_SET: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/redisson/counting_try_set.lua")));
static REDISSON_DRAIN: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/redisson/counting_drain.lua")));

/// The marker that records the reply to call `request`: ours under the semaphore's key,
/// Redisson's under its unlock-latch prefix (which Java never reads), as a latch's.
fn marker(keys: &LockKeys, request: &str) -> String {
    match keys.layout {
        Layout::Redlatch => keys.request_marker(request),
        Layout::Redisson => keys.unlock_latch(request),
    }
}

/// Takes `n` permits if that many are free: `true` if taken. The same script serves both
/// layouts (only the keys differ).
pub(crate) fn acquire(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    n: u32,
    request: &str,
    freeing: Freeing,
) -> RedisResult<bool> {
    let taken: i64 = ACQUIRE
        .key(keys.lock())
        .key(marker(keys, request))
        .arg(n)
        .arg(millis(freeing.latch_ttl))
        .invoke(con)?;
    Ok(taken == 1)
}

/// The permits free now (below 0 after permits were taken away while in use).
pub(crate) fn available(con: &mut dyn ConnectionLike, keys: &LockKeys) -> RedisResult<i64> {
    AVAILABLE.key(keys.lock()).invoke(con)
}

/// Moves the count by `delta` (a release's `n`, or `add_permits`'s delta) and wakes the
/// waiters: the new count, or `Err(count)` when it would leave what Lua counts exactly
/// (nothing changed then). In Redisson's layout a release is Java's `release` (INCRBY) and
/// anything else Java's `addPermits` (SET), which differ in what they do to a TTL.
pub(crate) fn add(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    delta: i64,
    release: bool,
    request: &str,
    freeing: Freeing,
) -> RedisResult<Result<i64, i64>> {
    let script = match (keys.layout, release) {
        (Layout::Redlatch, _) => &ADD,
        (Layout::Redisson, true) => &REDISSON_RELEASE,
        (Layout::Redisson, false) => &REDISSON_ADD,
    };
    let reply: RedisResult<i64> = script
        .key(keys.lock())
        .key(keys.channel())
        .key(marker(keys, request))
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

/// Sets the count to `n` unless one is there: `true` if this call set it.
pub(crate) fn try_set(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    n: u32,
    request: &str,
    freeing: Freeing,
) -> RedisResult<bool> {
    let script = match keys.layout {
        Layout::Redlatch => &TRY_SET,
        Layout::Redisson => &REDISSON_TRY_SET,
    };
    let set: i64 = script
        .key(keys.lock())
        .key(keys.channel())
        .key(marker(keys, request))
        .arg(n)
        .arg(millis(freeing.latch_ttl))
        .arg(freeing.publish)
        .invoke(con)?;
    Ok(set == 1)
}

/// Takes every permit free: how many. In Redisson's layout, Java's `drainPermits`: a count
/// below 0 is answered as it is, and set to 0.
pub(crate) fn drain(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    request: &str,
    freeing: Freeing,
) -> RedisResult<i64> {
    let script = match keys.layout {
        Layout::Redlatch => &DRAIN,
        Layout::Redisson => &REDISSON_DRAIN,
    };
    script
        .key(keys.lock())
        .key(marker(keys, request))
        .arg(millis(freeing.latch_ttl))
        .invoke(con)
}
