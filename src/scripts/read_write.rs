//! The read-write lock's queries and force-unlock, in both layouts: `lua/shares_inspect.lua`
//! and `lua/shares_force_unlock.lua` (after `lua/shares.lua`) in ours,
//! `lua/redisson/rw_inspect.lua` and `lua/redisson/rw_force_unlock.lua` in Redisson's.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::{Freeing, Lua, millis};
use crate::keys::{Layout, LockKeys};

static INSPECT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/shares_inspect.lua")));
/// Also a semaphore's (`shares::force_unlock`): the script serves both kinds with shares.
pub(super) static FORCE_UNLOCK: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(with_prelude!("shares.lua", "shares_force_unlock.lua")));
static REDISSON_INSPECT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/redisson/rw_inspect.lua")));
static REDISSON_FORCE_UNLOCK: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/redisson/rw_force_unlock.lua")));

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

fn ttl(pttl: i64) -> Option<Duration> {
    (pttl >= 0).then(|| Duration::from_millis(pttl as u64))
}

/// Reads read-write lock `keys`'s state, changing nothing.
pub(crate) fn inspect(con: &mut dyn ConnectionLike, keys: &LockKeys) -> RedisResult<RwInspection> {
    if keys.layout == Layout::Redisson {
        let (mode, pttl): (i64, i64) = REDISSON_INSPECT.key(keys.lock()).invoke(con)?;
        return Ok(RwInspection {
            locked: mode != 0,
            writing: mode == 2,
            ttl: if mode == 0 { None } else { ttl(pttl) },
        });
    }
    let (held, writing, pttl): (i64, i64, i64) =
        INSPECT.key(keys.lock()).key(keys.leases()).invoke(con)?;
    Ok(RwInspection {
        locked: held > 0,
        writing: writing == 1,
        ttl: if held > 0 { ttl(pttl) } else { None },
    })
}

/// Frees read-write lock `keys` whoever holds it and wakes (ours: grants) its waiters; `true`
/// if it was held. `request` names the call, so that a retry answers the same.
pub(crate) fn force_unlock(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    request: &str,
    freeing: Freeing,
) -> RedisResult<bool> {
    let reply: i64 = if keys.layout == Layout::Redisson {
        REDISSON_FORCE_UNLOCK
            .key(keys.lock())
            .key(keys.channel())
            .key(keys.tagged_name())
            .key(keys.unlock_latch(request))
            .arg(freeing.publish)
            .arg(millis(freeing.latch_ttl))
            .invoke(con)?
    } else {
        FORCE_UNLOCK
            .key(keys.lock())
            .key(keys.force_latch(request))
            .key(keys.forced_mark())
            .arg("rw")
            .arg(freeing.publish)
            .arg(millis(freeing.fence_retention))
            .arg(millis(freeing.latch_ttl))
            .invoke(con)?
    };
    Ok(reply == 1)
}
