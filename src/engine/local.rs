//! Handing a released lock to a waiting thread of the same client, where the layout has no
//! hand-over of its own (Redisson's: a release wakes one waiter per client, and they race).
//!
//! One script call moves the hold from the releasing owner to the waiter in Redis, and the
//! waiter is told in process: no message, no other client's waiter woken only to fail, no
//! attempt of the waiter's own. The lock stays held throughout, so to Java it is an RLock
//! whose field changed. After `MAX_LOCAL_STREAK` (`subscriber::waiters`) such releases in a
//! row the next one frees the lock for everybody, so that the lock's other users still get
//! their turn; while another client waits for the lock, after fewer (`engine::turn`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::RedisResult;

use super::hold::Hold;
use crate::cancel::Watched;
use crate::core::Core;
use crate::keys::LockKeys;
use crate::scripts::redisson::{self, Transfer};

/// Whether releases of `keys` go to a waiting thread of the client: the one rule a release
/// (`hand_over`) and a waiter signing up for them (`engine::acquire`) both follow. Where the
/// client's dialect says so ([`Dialect::hands_over_in_client`](crate::scripts::Dialect)),
/// and not with replicas to wait for: only an attempt of the waiter's own can WAIT for them.
pub(super) fn takes_place(core: &Core, keys: &LockKeys) -> bool {
    (core.dialect.hands_over_in_client)(keys) && core.replicas.is_none()
}

/// What became of a release handed to a waiting thread.
pub(super) enum Handed {
    /// The thread has it.
    Delivered,
    /// Redis gave it to `to` with `token` for `lease`, but the thread stopped waiting
    /// meanwhile (it gave up, or took the lock by an attempt of its own): the caller gives
    /// it back.
    Undelivered {
        to: Arc<str>,
        token: u64,
        lease: Duration,
    },
    /// The hold was no longer ours (another owner's, or gone): nothing was changed.
    NotOurs,
}

/// Releases `hold` (its last guard, not lost) to a waiting thread of this client, if the
/// lock is one that takes such hand-overs, a thread waits for it, and the streak allows it
/// (`engine::turn` shortens it while another client waits); `None` when the release must go
/// the usual way.
pub(super) fn hand_over(core: &Core, keys: &LockKeys, hold: &Hold) -> Option<RedisResult<Handed>> {
    if !takes_place(core, keys) || !core.holds.turns.may_hand_over(keys.lock()) {
        return None;
    }
    let successor = core.subscriber.local_successor(keys)?;
    let (to, lease) = (successor.owner().clone(), successor.lease());
    let reply = core
        .backend
        .run(|con| redisson::transfer(con, keys, &hold.owner, &to, lease));
    Some(reply.map(|transfer| match transfer {
        Transfer::To { token } if successor.deliver(token, lease) => Handed::Delivered,
        Transfer::To { token } => Handed::Undelivered { to, token, lease },
        Transfer::NotOurs | Transfer::Gone => Handed::NotOurs,
    }))
}

// Other clients' turns (`engine::turn` keeps what the client knows of them; these make the
// calls to Redis and the decisions that need the client's `Core`, which `turn` must not
// import: `Core` holds the turns).

/// Whether releases of `keys` may open turns: where they may go to a thread of this client
/// (the turns give the other clients theirs; a layout that hands the lock to the oldest
/// waiter in the fleet needs none), not on a Cluster (see `engine::turn`).
pub(crate) fn takes_turns(core: &Core, keys: &LockKeys) -> bool {
    (core.dialect.hands_over_in_client)(keys) && !core.backend.is_cluster()
}

/// Sleeps while this client leaves lock `keys` to the others (a turn of theirs is open), but
/// not past `deadline`, nor past a cancel of the wait: the caller attempts (or leaves) next.
pub(crate) fn let_others_go_first(
    core: &Core,
    keys: &LockKeys,
    deadline: Option<Instant>,
    watched: &Watched,
) {
    if !takes_turns(core, keys) {
        return;
    }
    if let Some(until) = core.holds.turns.open_until(keys.lock()) {
        let until = deadline.map_or(until, |d| d.min(until));
        watched.sleep(until.saturating_duration_since(Instant::now()));
    }
}

/// A release of ours freed lock `keys`: a turn for the other clients, if they wait for it
/// (see `engine::turn`).
pub(crate) fn freed(core: &Core, keys: &LockKeys) {
    if !takes_turns(core, keys) {
        return;
    }
    core.holds.turns.freed(keys.lock(), || {
        // One attempt: a turn is a courtesy, not worth a retry.
        core.backend
            .run_once_only(|con| {
                redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(keys.channel())
                    .query::<(String, u64)>(con)
            })
            .map(|(_, n)| n)
            .ok()
    });
}
