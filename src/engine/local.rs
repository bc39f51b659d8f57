//! Handing a released lock to a waiting thread of the same client, where the layout has no
//! hand-over of its own (Redisson's: a release wakes one waiter per client, and they race).
//!
//! One script call moves the hold from the releasing owner to the waiter in Redis, and the
//! waiter is told in process: no message, no other client's waiter woken only to fail, no
//! attempt of the waiter's own. The lock stays held throughout, so to Java it is an RLock
//! whose field changed. After [`MAX_LOCAL_STREAK`](crate::subscriber) such releases in a row
//! the next one frees the lock for everybody, so that the lock's other users still get their
//! turn.

use std::sync::Arc;

use super::acquire::{give_back, lost, why_gone};
use super::hold::Hold;
use crate::core::Core;
use crate::error::Result;
use crate::keys::{Family, Layout, LockKeys};
use crate::lost::LossCause;
use crate::scripts::{self, redisson::Transfer};

/// Releases `hold` (its last guard, not lost) to a waiting thread of this client, if the
/// lock is one that takes such hand-overs and a thread waits for it; `None` when the
/// release must go the usual way.
pub(super) fn hand_over(core: &Core, keys: &LockKeys, hold: &Arc<Hold>) -> Option<Result<()>> {
    // A fair lock keeps Redisson's queue; with replicas to wait for, only an attempt of the
    // waiter's own can WAIT for them.
    let eligible = keys.layout == Layout::Redisson
        && keys.family == Family::Lock
        && !keys.fair
        && core.replicas.is_none();
    if !eligible {
        return None;
    }
    let successor = core.subscriber.local_successor(keys)?;
    let (to, lease) = (successor.owner().clone(), successor.lease());
    let reply = core
        .backend
        .run(|con| scripts::redisson::transfer(con, keys, &hold.owner, &to, lease));
    Some(match reply {
        Ok(Transfer::To { token }) => {
            if !successor.deliver(token, lease) {
                // It stopped waiting meanwhile: free the lock for the others.
                give_back(core, keys, &to, token, lease);
            }
            Ok(())
        }
        Ok(Transfer::NotOurs | Transfer::Gone) => {
            hold.mark_lost(why_gone(core, keys, hold.token, LossCause::FoundGone));
            Err(lost(keys))
        }
        Err(e) => Err(scripts::failure(keys, e)),
    })
}
