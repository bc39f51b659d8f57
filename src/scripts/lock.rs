//! The lock's scripts (`Lock`, and the members of `MultiLock` and `Redlock`): take, queue,
//! withdraw, release, renew, force-unlock and read one lock.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult, Value};

use super::{
    Acquire, Freeing, Invocation, Leftover, Lua, Optional, QueuePlace, Queueing, Release,
    Releasing, Renewal, millis,
};
use crate::keys::LockKeys;

static ACQUIRE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(with_prelude!("places.lua", "acquire.lua")));
static RELEASE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../../lua/release.lua")));
static RENEW: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../../lua/renew.lua")));
static EXTEND: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../../lua/extend.lua")));
static FORCE_UNLOCK: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../../lua/force_unlock.lua")));
static WITHDRAW: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(with_prelude!("places.lua", "withdraw.lua")));
static INSPECT: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../../lua/inspect.lua")));
static ACQUIRE_MANY: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(with_prelude!("places.lua", "acquire_many.lua")));

pub(super) fn acquire(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    hold: Option<(u32, u64)>,
    lease: Duration,
    queueing: &Queueing,
    fence_retention: Duration,
) -> RedisResult<Acquire> {
    let (holds, token) = hold.unwrap_or((0, 0));
    let place = place_arg(queueing.place);
    let leftovers = leftovers_arg(&queueing.leftovers);
    let (lease_ms, handover_ms) = (millis(lease), millis(queueing.handover_lease));
    let queue_for = millis(queueing.queue_for);
    // The hand-over lease matters only to an attempt that queues, or names its place.
    let queues = queue_for > 0 || !place.is_empty();
    let mut invocation = ACQUIRE.key(keys.lock());
    invocation.key(keys.fence());
    if queues || !leftovers.is_empty() {
        invocation.key(keys.queue());
    }
    if !place.is_empty() {
        invocation.key(keys.granted());
    }
    invocation
        .arg(owner)
        .arg(lease_ms)
        // The fence's life, added here: a sum made in Lua costs Redis a number's conversion.
        .arg(lease_ms.saturating_add(millis(fence_retention)))
        .optional_args(&[
            (queue_for > 0, Optional::Number(queue_for)),
            (!place.is_empty(), Optional::Text(&place)),
            (holds > 0, Optional::Number(holds.into())),
            (holds > 0, Optional::Number(token)),
            (
                queues && handover_ms != lease_ms,
                Optional::Number(handover_ms),
            ),
            (!leftovers.is_empty(), Optional::Text(&leftovers)),
        ]);
    let reply: Value = invocation.invoke(con)?;
    acquire_reply(reply)
}

/// A place as `acquire.lua` and `withdraw.lua` take it: `"<arrival µs> <valid ms>"`, or "".
fn place_arg(place: Option<QueuePlace>) -> String {
    place.map_or(String::new(), |p| {
        format!("{} {}", p.arrival_us, p.valid_ms)
    })
}

/// Leftovers as `acquire.lua` and `acquire_many.lua` take them (one argument per lock):
/// `"<arrival µs> <hand-over lease ms> <valid ms>"` each, space-separated.
fn leftovers_arg(leftovers: &[Leftover]) -> String {
    let each = leftovers.iter().map(|l| {
        let (p, lease) = (l.place, millis(l.handover_lease));
        format!("{} {lease} {}", p.arrival_us, p.valid_ms)
    });
    each.collect::<Vec<_>>().join(" ")
}

/// An attempt's reply (`acquire.lua`, `shares_acquire.lua`): the token alone (`acquire.lua`,
/// as text) or `{1, token}` (`shares_acquire.lua`) when acquired, else
/// `{0, ttl, fence[, arrival, valid]}` or `{-1, 0}`.
pub(super) fn acquire_reply(reply: Value) -> RedisResult<Acquire> {
    if !matches!(reply, Value::Array(_)) {
        return Ok(Acquire::Acquired {
            token: redis::from_redis_value(reply)?,
        });
    }
    let reply: Vec<i64> = redis::from_redis_value(reply)?;
    Ok(match reply.as_slice() {
        [1, token, ..] => Acquire::Acquired {
            token: *token as u64,
        },
        [0, pttl, rest @ ..] => Acquire::Busy {
            ttl: Duration::from_millis((*pttl).max(0) as u64),
            fence: rest.first().map_or(0, |f| (*f).max(0) as u64),
            place: match rest {
                [_, arrival, valid, ..] if *arrival > 0 => Some(QueuePlace {
                    arrival_us: *arrival as u64,
                    valid_ms: (*valid).max(0) as u64,
                }),
                _ => None,
            },
        },
        _ => Acquire::Lost,
    })
}

/// One place in a lock's queue, as `acquire.lua` writes it: the member
/// `"<owner> <hand-over lease ms> <valid ms>"`, scored with its arrival (µs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place<'a> {
    pub owner: &'a str,
    pub handover_lease_ms: u64,
    /// Server time (ms) until which a release may hand the lock to it.
    pub valid_until_ms: u64,
}

impl<'a> Place<'a> {
    /// The place `member` names, which arrived at `arrival_us`; `None` for a member no
    /// script of ours wrote.
    pub fn parse(member: &'a str, arrival_us: u64) -> Option<Place<'a>> {
        let (rest, valid_ms) = member.rsplit_once(' ')?;
        let (owner, lease) = rest.rsplit_once(' ')?;
        let valid_ms: u64 = valid_ms.parse().ok()?;
        Some(Place {
            owner: (!owner.is_empty()).then_some(owner)?,
            handover_lease_ms: lease.parse().ok()?,
            // Saturating: the member is whatever the key holds, and a foreign one's number
            // near u64::MAX overflowed (a panic in a debug build), where it means "valid
            // for ever".
            valid_until_ms: (arrival_us / 1000).saturating_add(valid_ms),
        })
    }
}

/// What `acquire_many.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AcquireMany {
    /// All of them ours, with these fencing tokens (in the order asked).
    Acquired(Vec<u64>),
    /// Lock `index` (from 0) is held, for at most `ttl` more; nothing was taken.
    Busy { index: usize, ttl: Duration },
    /// Lock `index`'s hash (or, with `fence`, its fencing counter) holds data that is not a
    /// lock of ours; nothing was taken.
    Foreign { index: usize, fence: bool },
}

/// Takes every lock of `locks` that is free for `owner`, or none of them; and voids
/// `leftovers[i]`, places that earlier waits of the owner left in the queue of `locks[i]`,
/// whatever the reply (`acquire_many.lua`).
pub(super) fn acquire_many(
    con: &mut dyn ConnectionLike,
    locks: &[&LockKeys],
    owner: &str,
    lease: Duration,
    fence_retention: Duration,
    leftovers: &[Vec<Leftover>],
) -> RedisResult<AcquireMany> {
    let mut invocation = ACQUIRE_MANY.prepare_invoke();
    for keys in locks {
        invocation
            .key(keys.lock())
            .key(keys.fence())
            .key(keys.queue());
    }
    invocation
        .arg(owner)
        .arg(millis(lease))
        .arg(millis(fence_retention));
    for each in leftovers {
        invocation.arg(leftovers_arg(each));
    }
    many_reply(invocation.invoke(con))
}

/// What a script that takes many locks at once answered (`acquire_many.lua`, and Redisson's
/// `redisson/acquire_many.lua`, which answers alike).
pub(super) fn many_reply(reply: RedisResult<Vec<i64>>) -> RedisResult<AcquireMany> {
    let reply = match reply {
        Ok(reply) => reply,
        Err(e) if crate::error::refusal(&e).is_some_and(|(code, _)| code == "WRONGTYPE") => {
            let detail = crate::error::refusal(&e)
                .map(|(_, detail)| detail)
                .unwrap_or_default();
            let mut words = detail.split_whitespace();
            let fence = words.next() == Some("fence");
            let index = words.next().and_then(|i| i.parse::<usize>().ok());
            return match index {
                Some(i) if i >= 1 => Ok(AcquireMany::Foreign {
                    index: i - 1,
                    fence,
                }),
                _ => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    Ok(match reply.as_slice() {
        [0, index, pttl] => AcquireMany::Busy {
            index: (*index as usize).saturating_sub(1),
            ttl: Duration::from_millis((*pttl).max(0) as u64),
        },
        [1, tokens @ ..] => AcquireMany::Acquired(tokens.iter().map(|t| *t as u64).collect()),
        _ => {
            return Err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "acquire_many.lua answered something else",
                format!("{reply:?}"),
            )));
        }
    })
}

/// Takes the caller out of the queue (its place as `queueing` names it); `Some(token)` if the
/// lock had been handed to it, which then holds it with at least `lease` and the hand-over's
/// token.
pub(super) fn withdraw(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    lease: Duration,
    queueing: &Queueing,
    fence_retention: Duration,
) -> RedisResult<Option<u64>> {
    let (granted, token): (i64, i64) = WITHDRAW
        .key(keys.lock())
        .key(keys.fence())
        .key(keys.queue())
        .key(keys.granted())
        .arg(owner)
        .arg(millis(lease))
        .arg(millis(fence_retention))
        .arg(place_arg(queueing.place))
        .arg(millis(queueing.handover_lease))
        .invoke(con)?;
    Ok((granted == 1).then_some(token as u64))
}

/// Releases one of `owner`'s holds of the lock taken with `token`, as `how` says.
pub(super) fn release(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    token: u64,
    how: Releasing,
    freeing: Freeing,
) -> RedisResult<Release> {
    let mut invocation = RELEASE.key(keys.lock());
    invocation
        .key(keys.fence())
        .key(keys.queue())
        .key(keys.granted());
    let latch_ttl = if freeing.retries_unseen {
        invocation.key(keys.release_latch(owner, token));
        millis(freeing.latch_ttl)
    } else {
        0
    };
    let gives_back = how.taken_by.is_none();
    invocation
        .arg(owner)
        .arg(token)
        .arg(millis(freeing.fence_retention))
        .arg(millis(how.lease))
        .optional_args(&[
            (how.holds != 1, Optional::Number(how.holds.into())),
            // release.lua tells only a give-back ("1") apart.
            (
                gives_back,
                Optional::Text(if gives_back { "1" } else { "0" }),
            ),
            (latch_ttl > 0, Optional::Number(latch_ttl)),
            (
                freeing.publish != "PUBLISH",
                Optional::Text(freeing.publish),
            ),
        ]);
    let reply: i64 = invocation.invoke(con)?;
    Ok(match reply {
        1 => Release::Released,
        2 => Release::StillHeld,
        3 => Release::Gone,
        _ => Release::NotOurs,
    })
}

/// The call of `renew.lua` that renews the lock holds in `batch`.
pub(super) fn renewal<'a>(
    batch: &[Renewal<'_>],
    lease: Duration,
    fence_retention: Duration,
) -> Invocation<'a> {
    let mut invocation = RENEW.prepare_invoke();
    invocation.arg(millis(lease)).arg(millis(fence_retention));
    for r in batch {
        invocation
            .key(r.keys.lock())
            .key(r.keys.fence())
            .arg(r.owner)
            .arg(r.token);
    }
    invocation
}

/// Gives `owner`'s hold of lock `keys`, taken with `token`, a lease of `lease` from now:
/// `true` if it is still ours (`extend.lua`).
pub(super) fn extend(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    token: u64,
    lease: Duration,
    fence_retention: Duration,
) -> RedisResult<bool> {
    let reply: i64 = EXTEND
        .key(keys.lock())
        .key(keys.fence())
        .arg(millis(lease))
        .arg(millis(fence_retention))
        .arg(owner)
        .arg(token)
        .invoke(con)?;
    Ok(reply == 1)
}

/// Deletes the lock whoever holds it; `request` names this call so a retry answers the same.
pub(super) fn force_unlock(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    request: &str,
    freeing: Freeing,
) -> RedisResult<bool> {
    let reply: i64 = FORCE_UNLOCK
        .key(keys.lock())
        .key(keys.channel())
        .key(keys.force_latch(request))
        .key(keys.forced_mark())
        .key(keys.fence())
        .arg(freeing.publish)
        .arg(millis(freeing.latch_ttl))
        .invoke(con)?;
    Ok(reply == 1)
}

/// A lock's state as `inspect.lua` reads it.
pub(crate) struct Inspection {
    pub locked: bool,
    pub holds: u32,
    pub ttl: Option<Duration>,
}

pub(crate) fn inspect(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
) -> RedisResult<Inspection> {
    let (locked, holds, pttl): (i64, i64, i64) = INSPECT.key(keys.lock()).arg(owner).invoke(con)?;
    Ok(Inspection {
        locked: locked == 1,
        holds: holds.clamp(0, u32::MAX as i64) as u32,
        ttl: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
    })
}

/// Whether lock `keys` was force-unlocked lately (its mark is there): why a hold of it is
/// gone.
pub(super) fn was_forced(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    token: u64,
) -> RedisResult<bool> {
    let freed: Option<String> = redis::cmd("GET").arg(keys.forced_mark()).query(con)?;
    // "<token>" (a lock, a read-write lock: every hold freed had it) or "<lowest> <highest>"
    // (a semaphore: each holder had a token of its own).
    let mut bounds = freed
        .iter()
        .flat_map(|f| f.split(' ').map(str::parse::<u64>));
    Ok(match (bounds.next(), bounds.next()) {
        (Some(Ok(only)), None) => token == only,
        (Some(Ok(low)), Some(Ok(high))) => (low..=high).contains(&token),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue member as `acquire.lua` writes it, and a foreign one whose valid ms is near
    /// `u64::MAX`: its sum with the arrival overflowed (a panic in a debug build) before it
    /// saturated.
    #[test]
    fn a_place_is_read_from_its_member_and_an_endless_one_saturates() {
        assert_eq!(
            Place::parse("c0ffee:1 30000 29800", 1_795_548_688_566_984),
            Some(Place {
                owner: "c0ffee:1",
                handover_lease_ms: 30_000,
                valid_until_ms: 1_795_548_688_566 + 29_800,
            })
        );
        let endless = Place::parse("c:1 1 18446744073709551615", 1_795_548_688_566_984);
        assert_eq!(endless.map(|p| p.valid_until_ms), Some(u64::MAX));
        assert_eq!(Place::parse(" 1 2", 0), None);
        assert_eq!(Place::parse("c:1 x 2", 0), None);
    }
}
