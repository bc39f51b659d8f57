//! Releasing a hold, giving back a hand-over nobody took up, and telling why a hold is gone:
//! the end of what `acquire` begins.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::hold::Hold;
use super::local::{self, Handed};
use super::{Kind, renew};
use crate::core::Core;
use crate::error::{Error, Result};
use crate::keys::{Family, LockKeys};
use crate::lost::LossCause;
use crate::scripts::{self, Release, Releasing};

/// Releases one guard of `hold`, a hold of `kind`. `Err(Error::LockLost)`
/// if it was no longer ours (then nothing in Redis was changed) or had already been reported
/// lost (then a hold Redis still had is released all the same); `Err(Error::Redis)` if
/// Redis could not be reached, and then the object expires with its lease: renewal stopped
/// before the release was sent, since a hold nobody wants must not be kept alive.
pub(crate) fn release(core: &Core, kind: &dyn Kind, hold: &Arc<Hold>) -> Result<()> {
    let holds = hold.guards();
    if holds == 1 {
        // Stop renewal before the lock is released, never after.
        core.holds.remove(hold);
    }
    hold.remove_guard();
    let was_lost = hold.is_lost();
    let keys = kind.keys();
    if holds == 1
        && !was_lost
        && let Some(handed) = local::hand_over(core, keys, hold)
    {
        return match handed {
            Ok(Handed::Delivered) => Ok(()),
            Ok(Handed::Undelivered { to, token, lease }) => {
                // Free the lock for the others.
                give_back(core, keys, &to, token, lease);
                Ok(())
            }
            Ok(Handed::NotOurs) => {
                hold.mark_lost(why_gone(core, keys, hold.token, LossCause::FoundGone));
                Err(lost(keys))
            }
            Err(e) => Err(scripts::failure(keys, e)),
        };
    }
    let freeing = super::freeing(core);
    let mut attempts = 0;
    let reply = core.backend.run(|con| {
        attempts += 1;
        let how = Releasing {
            holds,
            taken_by: Some(hold.taken_by),
            lease: hold.longest_lease(),
        };
        kind.release(con, &hold.owner, hold.token, how, freeing)
    });
    match reply {
        // Whatever Redis said, the holder was told it had lost the lock: stay consistent.
        _ if was_lost => Err(lost(keys)),
        Ok(reply @ (Release::NotOurs | Release::Gone)) => {
            let cause = why_gone(core, keys, hold.token, LossCause::FoundGone);
            // The hold is gone the way an earlier attempt of this call leaves it, and there
            // was one, whose reply was lost: that attempt released it. It cannot have expired
            // instead, as its lease had not run out when this call began (release.lua says
            // what else the script rules out, and what it cannot), unless a force-unlock
            // freed it: release.lua leaves reading that mark to `why_gone`, off the usual
            // path. A mark that cannot be read leaves the release standing, as the retry
            // found it. Where a release wakes waiters that race for the lock (Redisson's
            // layout), an earlier attempt may also leave it another's, and no fence tells
            // their hold from one that was there before (ours was, by its lease, when the
            // call began).
            let as_left = reply == Release::Gone || core.dialect.release_wakes_racers;
            if as_left && attempts > 1 && cause != LossCause::ForceUnlocked {
                return Ok(());
            }
            hold.mark_lost(cause);
            Err(lost(keys))
        }
        Ok(Release::Released) => {
            local::freed(core, keys);
            Ok(())
        }
        Ok(Release::StillHeld) => Ok(()),
        Err(e) => Err(scripts::failure(keys, e)),
    }
}

/// Gives back a lock that a release handed to an owner of ours that had stopped waiting.
/// Only a hand-over nobody took up is given back: the owner may have taken it up with an
/// attempt of its own (same token) and be using it now.
pub(crate) fn give_back(core: &Core, keys: &LockKeys, owner: &str, token: u64, lease: Duration) {
    // An owner that took the hand-over from its message holds it without Redis knowing yet:
    // the registry of holds does know.
    if core
        .holds
        .get(keys.lock(), owner)
        .is_some_and(|hold| hold.token == token)
    {
        return;
    }
    let freeing = super::freeing(core);
    // One attempt: the renewal thread must not stall on an errand.
    match core
        .backend
        .run_once_only(|con| (core.dialect.give_back)(con, keys, owner, token, lease, freeing))
    {
        Ok(Release::Released) => {
            log::debug!(
                "gave back lock {:?}, handed to a thread that no longer waited",
                keys.name()
            )
        }
        Ok(_) => {}
        Err(e) => log::warn!(
            "could not give back lock {:?}, handed to a thread that no longer waited ({e}); \
             it expires with its lease",
            keys.name()
        ),
    }
}

/// Gives `holds` (taken at different times, each for `lease`) the same lease again from
/// now, so that they all end together; `true` where the object is still ours. Those no
/// longer ours are marked lost.
pub(crate) fn extend_all(core: &Core, holds: &[&Hold], lease: Duration) -> Result<Vec<bool>> {
    let sent = Instant::now();
    let ours = renew::renew_now(core, holds, lease)?;
    for (hold, ours) in holds.iter().zip(&ours) {
        if *ours {
            hold.extend(sent, lease, None);
        } else {
            hold.mark_lost(why_gone(core, &hold.keys, hold.token, LossCause::Taken));
        }
    }
    Ok(ours)
}

/// Why a hold of `keys` that Redis no longer has is gone: a force-unlock, if one left its mark
/// lately (a lock or a read-write lock), else `otherwise`. One command, once per loss;
/// a failure to ask answers `otherwise`.
pub(crate) fn why_gone(
    core: &Core,
    keys: &LockKeys,
    token: u64,
    otherwise: LossCause,
) -> LossCause {
    if !matches!(
        keys.family,
        Family::Lock | Family::ReadWrite | Family::Semaphore
    ) {
        return otherwise;
    }
    match core
        .backend
        .run_once_only(|con| (core.dialect.was_forced)(con, keys, token))
    {
        Ok(true) => LossCause::ForceUnlocked,
        _ => otherwise,
    }
}

/// This client's holds of lock `keys`, which it just force-unlocked: lost, and told so at
/// once (other clients' holders learn it from Redis).
pub(crate) fn forced(core: &Core, keys: &LockKeys) {
    for hold in core.holds.of_lock(keys.lock()) {
        if hold.mark_lost(LossCause::ForceUnlocked) {
            log::warn!("lock {:?} was force-unlocked under its holder", keys.name());
        }
    }
}

pub(super) fn lost(keys: &LockKeys) -> Error {
    Error::LockLost {
        name: keys.name().to_string(),
    }
}
