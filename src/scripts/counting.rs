//! A counting semaphore's scripts (Java's `RSemaphore`): take, give back or add, set once,
//! drain, read. Each mutating call carries a request marker, so that a retry after a lost
//! reply answers what the first run did: ours under the semaphore's key
//! ([`LockKeys::request_marker`]), Redisson's under its unlock-latch prefix, which Java never
//! reads ([`LockKeys::unlock_latch`]).
//!
//! The calls are the same in both layouts but for the scripts they run where the layouts'
//! differ and where they keep the marker: a layout says which in its [`Scripts`] (each
//! [`Dialect`](super::Dialect) has one). Our scripts are here, Redisson's in
//! `scripts::redisson::counting`.

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

/// The permits free now (below 0 after permits were taken away while in use).
pub(crate) fn available(con: &mut dyn ConnectionLike, keys: &LockKeys) -> RedisResult<i64> {
    AVAILABLE.key(keys.lock()).invoke(con)
}

/// A layout's counting semaphore: the scripts its calls run where the layouts' differ, and
/// where it keeps a call's request marker.
pub(crate) struct Scripts {
    /// Where the reply to the call `request` on `keys` is kept, so that its retry answers
    /// the same.
    pub(in crate::scripts) marker: fn(&LockKeys, &str) -> String,
    /// What a release runs.
    pub(in crate::scripts) release_script: &'static LazyLock<Lua>,
    /// What `add_permits` runs.
    pub(in crate::scripts) add_script: &'static LazyLock<Lua>,
    /// What `try_set_permits` runs.
    pub(in crate::scripts) try_set_script: &'static LazyLock<Lua>,
    /// What `drain_permits` runs.
    pub(in crate::scripts) drain_script: &'static LazyLock<Lua>,
}

impl Scripts {
    /// Takes `n` permits of `keys` if that many are free: `true` if taken. The same script
    /// serves both layouts (only the keys differ). `request` names the call, as in every
    /// call here, so that a retry answers the same.
    pub fn acquire(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        n: u32,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        let taken: i64 = ACQUIRE
            .key(keys.lock())
            .key((self.marker)(keys, request))
            .arg(n)
            .arg(millis(freeing.latch_ttl))
            .invoke(con)?;
        Ok(taken == 1)
    }

    /// Moves the count of `keys` by `delta` (a release's `n` when `release`, else
    /// `add_permits`'s delta) and wakes the waiters: the new count, or `Err(count)` when it
    /// would leave what Lua counts exactly (nothing changed then).
    pub fn add(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        delta: i64,
        release: bool,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<Result<i64, i64>> {
        let script = if release {
            self.release_script
        } else {
            self.add_script
        };
        let reply: RedisResult<i64> = script
            .key(keys.lock())
            .key(keys.channel())
            .key((self.marker)(keys, request))
            .arg(delta)
            .arg(millis(freeing.latch_ttl))
            .arg(freeing.publish)
            .invoke(con);
        match reply {
            Ok(count) => Ok(Ok(count)),
            Err(e) => match crate::error::refusal(&e) {
                Some((code, detail)) if code == "RANGE" => Ok(Err(detail.parse().unwrap_or(0))),
                _ => Err(e),
            },
        }
    }

    /// Sets the count of `keys` to `n` unless one is there: `true` if this call set it.
    pub fn try_set(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        n: u32,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        let set: i64 = self
            .try_set_script
            .key(keys.lock())
            .key(keys.channel())
            .key((self.marker)(keys, request))
            .arg(n)
            .arg(millis(freeing.latch_ttl))
            .arg(freeing.publish)
            .invoke(con)?;
        Ok(set == 1)
    }

    /// Takes every permit of `keys` free: how many.
    pub fn drain(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<i64> {
        self.drain_script
            .key(keys.lock())
            .key((self.marker)(keys, request))
            .arg(millis(freeing.latch_ttl))
            .invoke(con)
    }
}
