//! The semaphore of Redisson's layout (Java's `getPermitExpirableSemaphore`,
//! in Redisson's format): typed calls of `lua/redisson/semaphore_*.lua`, and the
//! permit ids an acquisition holds its permits under.
//!
//! The string `name` counts the permits free; the zset `{name}:timeout` holds each permit
//! taken under an id of 16 random bytes, scored by the end of its lease in epoch ms by the
//! clock of the client that took or renewed it (so the clients' clocks must agree, as Java's
//! must). An acquisition of `n` permits is `n` ids, which its owner id carries
//! ([`owner`]), so that its release and its renewal know them.

use std::fmt::Write as _;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::super::{Acquire, Freeing, Invocation, Lua, Release, Renewal, millis, splice};
use super::{acquire_reply, epoch_ms, release_reply};
use crate::keys::LockKeys;
use crate::scripts::Count;

/// The text of `lua/redisson/<file>` with the semaphore's shared part in front.
macro_rules! semaphore_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Lua::new(splice(
                include_str!("../../../lua/redisson/semaphore.lua"),
                include_str!(concat!("../../../lua/redisson/", $file)),
                "-- redisson/semaphore.lua goes here",
            ))
        })
    };
}

static ACQUIRE: LazyLock<Lua> = semaphore_script!("semaphore_acquire.lua");
static RELEASE: LazyLock<Lua> = semaphore_script!("semaphore_release.lua");
static SET_PERMITS: LazyLock<Lua> = semaphore_script!("semaphore_set.lua");
static AVAILABLE: LazyLock<Lua> = semaphore_script!("semaphore_available.lua");
static TRY_SET_PERMITS: LazyLock<Lua> = semaphore_script!("semaphore_try_set.lua");
static ADD_PERMITS: LazyLock<Lua> = semaphore_script!("semaphore_add.lua");
static COUNTS: LazyLock<Lua> = semaphore_script!("semaphore_counts.lua");
static FORCE_UNLOCK: LazyLock<Lua> = semaphore_script!("semaphore_force_unlock.lua");
static EXTEND: LazyLock<Lua> = semaphore_script!("semaphore_extend.lua");
static RENEW: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../../lua/redisson/semaphore_renew.lua")));

/// The most permits one acquisition may ask for in this layout: Redisson keeps a zset member
/// per permit, and every acquisition, release and renewal sends all of an acquisition's ids.
pub(crate) const MAX_PERMITS: u32 = 65_536;

/// A fresh owner id for an acquisition of `n` permits: its `n` permit ids, each in hex as
/// Java shows a permit id (32 digits), separated by commas. The ids are 16 random bytes each
/// (Redis keeps them raw), so no other acquisition anywhere has one of them.
pub(crate) fn owner(n: u32) -> Arc<str> {
    let mut owner = String::with_capacity(33 * n as usize);
    for i in 0..n {
        if i > 0 {
            owner.push(',');
        }
        push_hex(&mut owner, &permit_id());
    }
    owner.into()
}

/// Appends `bytes` in lowercase hex to `out`: how Java shows a permit id.
pub(crate) fn push_hex(out: &mut String, bytes: &[u8]) {
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
}

/// 16 random bytes: a v4 UUID's, with the six bits it fixes (version, variant) drawn too.
fn permit_id() -> [u8; 16] {
    let mut id = uuid::Uuid::new_v4().into_bytes();
    let more = uuid::Uuid::new_v4().into_bytes();
    id[6] = (id[6] & 0x0f) | (more[0] & 0xf0);
    id[8] = (id[8] & 0x3f) | (more[1] & 0xc0);
    id
}

/// The permit ids of the acquisition whose owner id is `owner` ([`owner`] made it).
fn ids(owner: &str) -> impl Iterator<Item = [u8; 16]> + '_ {
    owner.split(',').map(|hex| {
        let mut id = [0; 16];
        for (i, byte) in id.iter_mut().enumerate() {
            *byte = hex
                .get(2 * i..2 * i + 2)
                .and_then(|digits| u8::from_str_radix(digits, 16).ok())
                .unwrap_or(0);
        }
        id
    })
}

/// A call of one of the scripts that start with `redisson/semaphore.lua`, with its three
/// keys.
fn invocation<'a>(lua: &'a Lua, keys: &LockKeys) -> Invocation<'a> {
    let mut invocation = lua.key(keys.lock());
    invocation.key(keys.leases()).key(keys.channel());
    invocation
}

/// Takes the permits of acquisition `owner` of semaphore `keys` for `lease`
/// (`redisson/semaphore_acquire.lua`).
pub(crate) fn acquire(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    lease: Duration,
    freeing: Freeing,
) -> RedisResult<Acquire> {
    let now = epoch_ms();
    let mut invocation = invocation(&ACQUIRE, keys);
    invocation
        .key(keys.fence())
        .arg(now.saturating_add(millis(lease)))
        .arg(now)
        .arg(freeing.publish);
    for id in ids(owner) {
        invocation.arg(&id[..]);
    }
    acquire_reply(invocation.invoke(con)?)
}

/// Gives back the permits of acquisition `owner` of semaphore `keys`
/// (`redisson/semaphore_release.lua`).
pub(crate) fn release(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    freeing: Freeing,
) -> RedisResult<Release> {
    let mut invocation = invocation(&RELEASE, keys);
    invocation.arg(freeing.publish);
    for id in ids(owner) {
        invocation.arg(&id[..]);
    }
    Ok(release_reply(invocation.invoke(con)?))
}

/// The call of `redisson/semaphore_renew.lua` that moves the lease end of the acquisitions
/// in `batch` to `lease` from now.
pub(in crate::scripts) fn renewal<'a>(batch: &[Renewal<'_>], lease: Duration) -> Invocation<'a> {
    let now = epoch_ms();
    let mut invocation = RENEW.prepare_invoke();
    invocation.arg(now.saturating_add(millis(lease))).arg(now);
    for r in batch {
        invocation
            .key(r.keys.leases())
            .arg(r.owner.split(',').count());
        for id in ids(r.owner) {
            invocation.arg(&id[..]);
        }
    }
    invocation
}

/// Sets the total of semaphore `keys` as Java's `setPermits` does
/// (`redisson/semaphore_set.lua`).
pub(crate) fn set_permits(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    total: u32,
    freeing: Freeing,
) -> RedisResult<()> {
    let _: i64 = invocation(&SET_PERMITS, keys)
        .arg(total)
        .arg(freeing.publish)
        .invoke(con)?;
    Ok(())
}

/// The permits of semaphore `keys` free now, once those whose lease ended are given back
/// (`redisson/semaphore_available.lua`); 0 while the total is lowered under what is held.
pub(crate) fn available(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    freeing: Freeing,
) -> RedisResult<u32> {
    let free: i64 = invocation(&AVAILABLE, keys)
        .arg(epoch_ms())
        .arg(freeing.publish)
        .invoke(con)?;
    Ok(free.clamp(0, i64::from(u32::MAX)) as u32)
}

/// Sets the count of semaphore `keys` if none is there yet, as Java's `trySetPermits` does
/// (`redisson/semaphore_try_set.lua`): `true` if it was set.
pub(crate) fn try_set_permits(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    total: u32,
    freeing: Freeing,
) -> RedisResult<bool> {
    let set: i64 = invocation(&TRY_SET_PERMITS, keys)
        .arg(total)
        .arg(freeing.publish)
        .invoke(con)?;
    Ok(set == 1)
}

/// Moves the count of semaphore `keys` by `delta`, as Java's `addPermits` does
/// (`redisson/semaphore_add.lua`): (1, the new total), or (0, the total as it is) when the
/// new total would leave `0..=u32::MAX`.
pub(crate) fn add_permits(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    delta: i64,
    freeing: Freeing,
) -> RedisResult<(i64, i64)> {
    invocation(&ADD_PERMITS, keys)
        .arg(delta)
        .arg(freeing.publish)
        .invoke(con)
}

/// The total of semaphore `keys` (Java's `getPermits`) or the permits held (Java's
/// `acquiredPermits`), once those whose lease ended are given back
/// (`redisson/semaphore_counts.lua`).
pub(crate) fn count(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    which: Count,
    freeing: Freeing,
) -> RedisResult<i64> {
    invocation(&COUNTS, keys)
        .arg(epoch_ms())
        .arg(freeing.publish)
        .arg(match which {
            Count::Permits => "permits",
            Count::Acquired => "acquired",
        })
        .invoke(con)
}

/// Puts every permit of semaphore `keys` back, whoever holds it, and publishes the new count
/// (`redisson/semaphore_force_unlock.lua`): `true` if a permit was held under a live lease.
/// `request` names the call, so that a retry answers the same.
pub(crate) fn force_unlock(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    request: &str,
    freeing: Freeing,
) -> RedisResult<bool> {
    let reply: i64 = invocation(&FORCE_UNLOCK, keys)
        .key(keys.unlock_latch(request))
        .arg(freeing.publish)
        .arg(millis(freeing.latch_ttl))
        .arg(epoch_ms())
        .invoke(con)?;
    Ok(reply == 1)
}

/// Gives the permits of acquisition `owner` of semaphore `keys` a lease of `lease` from now,
/// by this client's clock (Java's `updateLeaseTime` for each id): `true` if they are still
/// ours (`redisson/semaphore_extend.lua`).
pub(in crate::scripts) fn extend(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    lease: Duration,
    publish: &str,
) -> RedisResult<bool> {
    let now = epoch_ms();
    let mut invocation = invocation(&EXTEND, keys);
    invocation
        .arg(now.saturating_add(millis(lease)))
        .arg(now)
        .arg(publish);
    for id in ids(owner) {
        invocation.arg(&id[..]);
    }
    Ok(invocation.invoke::<i64>(con)? == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_carries_its_permit_ids() {
        let one = owner(1);
        assert_eq!(one.len(), 32);
        assert!(
            one.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        let three = owner(3);
        let parsed: Vec<[u8; 16]> = ids(&three).collect();
        assert_eq!(parsed.len(), 3);
        let hex: Vec<String> = parsed
            .iter()
            .map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
            .collect();
        assert_eq!(hex.join(","), *three);
        assert_ne!(parsed[0], parsed[1], "every id is drawn anew");
        assert_ne!(owner(1), one);
    }
}
