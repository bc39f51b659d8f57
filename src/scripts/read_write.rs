//! The read-write lock's queries and force-unlock in our layout: `lua/shares_inspect.lua`
//! and `lua/shares_force_unlock.lua` (after `lua/shares.lua`); Redisson's are in
//! `scripts::redisson::read_write`, with the same replies.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::{Freeing, Lua, millis};
use crate::keys::LockKeys;

static INSPECT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/shares_inspect.lua")));
/// Also a semaphore's (`shares::force_unlock`): the script serves both kinds with shares.
pub(super) static FORCE_UNLOCK: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(with_prelude!("shares.lua", "shares_force_unlock.lua")));

/// A read-write lock's state, as one read-only script reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RwInspection {
    /// Anybody holds it, reading or writing.
    pub locked: bool,
    /// A writer holds it.
    pub writing: bool,
    /// How long until the last lease of its holders ends; `None` when free.
    pub ttl: Option<Duration>,
}

/// A remaining lease as a script answers it, `None` for none (below 0).
pub(super) fn ttl(pttl: i64) -> Option<Duration> {
    (pttl >= 0).then(|| Duration::from_millis(pttl as u64))
}

/// Reads read-write lock `keys`'s state, changing nothing.
pub(super) fn inspect(con: &mut dyn ConnectionLike, keys: &LockKeys) -> RedisResult<RwInspection> {
    let (held, writing, pttl): (i64, i64, i64) =
        INSPECT.key(keys.lock()).key(keys.leases()).invoke(con)?;
    Ok(RwInspection {
        locked: held > 0,
        writing: writing == 1,
        ttl: if held > 0 { ttl(pttl) } else { None },
    })
}

/// Frees read-write lock `keys` whoever holds it and grants its waiters; `true` if it was
/// held. `request` names the call, so that a retry answers the same.
pub(super) fn force_unlock(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    request: &str,
    freeing: Freeing,
) -> RedisResult<bool> {
    let reply: i64 = FORCE_UNLOCK
        .key(keys.lock())
        .key(keys.force_latch(request))
        .key(keys.forced_mark())
        .arg("rw")
        .arg(freeing.publish)
        .arg(millis(freeing.fence_retention))
        .arg(millis(freeing.latch_ttl))
        .invoke(con)?;
    Ok(reply == 1)
}
