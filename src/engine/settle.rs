//! Settling the attempts whose reply was lost ([`doubt`](super::doubt)): the scripts a
//! settlement runs, on the renewal thread.

use std::time::Duration;

use redis::RedisResult;

use super::Kind;
use super::doubt::{Doubt, Settled};
use crate::core::Core;
use crate::scripts::{Acquire, Queueing, Releasing, TakenBy};
use crate::stats::bump;

/// Settles this client's doubts that are due (see [`Doubts::settle_due`](super::doubt::Doubts::settle_due)).
pub(crate) fn settle_due(core: &Core) {
    let first = core
        .doubts
        .settle_due(core.watchdog_timeout / 3, |doubt| settle(core, doubt));
    if first > 0 {
        core.counters.outage.answered();
    }
    bump(&core.counters.lost_replies_settled, first);
}

/// Settles every doubt of this client once now: it is being dropped.
pub(crate) fn settle_now(core: &Core) {
    let first = core
        .doubts
        .settle_now(core.watchdog_timeout / 3, |doubt| settle(core, doubt));
    bump(&core.counters.lost_replies_settled, first);
}

/// One settlement of `doubt`: out of the queue (taking up a hand-over made to its place);
/// then, if the owner holds the object, one attempt that queues nowhere and takes up what the
/// lost run took; what either got is released at once, handing the object to the next
/// waiter.
pub(super) fn settle(core: &Core, doubt: &Doubt) -> RedisResult<Settled> {
    let (kind, owner, lease) = (&*doubt.kind, &*doubt.owner, doubt.lease);
    // A hold of the owner's in this client is its own, taken since (the owner's next attempt
    // forgets its doubts, so this is a guard against what nothing else rules out).
    if core.holds.get(kind.keys().lock(), owner).is_some() {
        return Ok(Settled::Nothing);
    }
    let backend = &core.backend;
    let mut settled = Settled::Nothing;
    for queueing in withdrawals(&doubt.queueing) {
        let handed = backend.run_once_only(|con| kind.withdraw(con, owner, lease, &queueing))?;
        if let Some(token) = handed {
            give_back(core, kind, owner, token, lease.max(queueing.handover_lease))?;
            settled = Settled::GaveBack;
        }
    }
    if !backend.run_once_only(|con| kind.may_hold(con, owner))? {
        return Ok(settled);
    }
    let once = Queueing {
        leftovers: doubt.queueing.leftovers.clone(),
        ..Queueing::NONE
    };
    let taken = backend.run_once_only(|con| kind.attempt(con, owner, None, lease, &once))?;
    if let Acquire::Acquired { token } = taken {
        // The lost run's hold, taken up (or, for a kind that cannot tell, free capacity,
        // given back as it was).
        give_back(core, kind, owner, token, lease)?;
        settled = Settled::GaveBack;
    }
    Ok(settled)
}

/// The withdrawals that take out every place the lost attempt may have left (`sent`, as it
/// treated the queue): the place it named, if any, and, if it queued, the place at the back
/// it takes when it names none or finds its own gone (named by its terms alone: its
/// arrival is what the lost reply would have said).
fn withdrawals(sent: &Queueing) -> Vec<Queueing> {
    let mut them = vec![sent.clone()];
    if !sent.queue_for.is_zero() {
        let back = Queueing {
            place: Some(sent.first_place().place),
            ..sent.clone()
        };
        match sent.place {
            None => them[0] = back,
            Some(_) => them.push(back),
        }
    }
    them
}

/// Releases the owner's one hold, taken with `token` for at most `lease`.
fn give_back(
    core: &Core,
    kind: &dyn Kind,
    owner: &str,
    token: u64,
    lease: Duration,
) -> RedisResult<()> {
    let freeing = super::freeing(core);
    let how = Releasing {
        holds: 1,
        taken_by: Some(TakenBy::Attempt),
        lease,
    };
    core.backend
        .run_once_only(|con| kind.release(con, owner, token, how, freeing))
        .map(drop)
}
