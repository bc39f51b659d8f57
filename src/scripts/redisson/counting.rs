//! The counting semaphore of Redisson's layout (Java's `getSemaphore`): the scripts of
//! `lua/redisson/counting_*.lua`, which `scripts::counting`'s calls run. Taking permits and
//! reading the count are our own scripts, which serve both layouts.

use std::sync::LazyLock;

use super::super::Lua;

/// Java's `release`: INCRBY, which leaves a TTL as it is.
pub(in crate::scripts) static RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/counting_release.lua")));
/// Java's `addPermits`: a SET of the new count (it and `release` differ in what they do to
/// a TTL).
pub(in crate::scripts) static ADD: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/counting_add.lua")));
/// Java's `trySetPermits`.
pub(in crate::scripts) static TRY_SET: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/counting_try_set.lua")));
/// Java's `drainPermits`: a count below 0 is answered as it is, and set to 0.
pub(in crate::scripts) static DRAIN: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/counting_drain.lua")));
