//! The renewal thread (the watchdog): keeps every lock taken without a lease alive.
//!
//! It reads the client's [`Holds`] registry, the same one the acquiring and releasing threads
//! write, so a hold is renewed from the moment its first guard exists until its last guard
//! starts releasing. Holds are renewed `watchdog_timeout / 3` after their last renewal; each
//! round takes every hold due within the next quarter period too, so renewals bunch into few
//! rounds, and renews them with one script call per [`BATCH`] locks.
//!
//! - Redis says a lock is no longer ours: the hold is marked lost and a warning logged.
//! - Redis cannot be reached: the thread retries every [`RETRY`] and a hold becomes lost once
//!   its last confirmed lease has run out (the holder's `is_lost()` sees that on its own too).
//!
//! With Sentinel, a third thread ([`follow`]) asks the sentinels every second whether the
//! master moved: a master that lost a failover stays writable until Sentinel demotes it, and
//! renewals that kept going there would keep locks alive that the new master does not have.
//!
//! It also runs the subscriber's [errands](Errand), so that no waiter and not the subscriber
//! thread spends a round trip on them: when the last waiter of a lock leaves (it got the lock,
//! or its time ran out), the subscription should go, which takes a PUBLISH to wake the
//! subscriber thread; and a lock handed to a thread that had stopped waiting is given back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, select};

use crate::client::Core;
use crate::hold::Hold;
use crate::keys::LockKeys;
use crate::scripts::{self, Release, Renewal};
use crate::subscriber::Errand;

/// Locks per renewal script call.
pub(crate) const BATCH: usize = 500;
/// Pause between attempts while Redis cannot be reached.
const RETRY: Duration = Duration::from_millis(250);

/// The thread's body; returns when `stop` is disconnected.
pub(crate) fn run(core: Arc<Core>, stop: Receiver<()>, errands: Receiver<Errand>) {
    let lease = core.watchdog_timeout;
    let period = lease / 3;
    let mut next = Instant::now();
    loop {
        if Instant::now() >= next {
            next = round(&core, lease, period, &stop);
        }
        select! {
            recv(stop) -> _ => return,
            recv(errands) -> errand => match errand {
                // One attempt: the renewal thread must not stall on an errand.
                Ok(Errand::Ring) => core.subscriber.ring(false),
                Ok(Errand::GiveBack { keys, thread, token }) => give_back(&core, &keys, thread, token),
                Err(_) => {}
            },
            default(next.saturating_duration_since(Instant::now())) => {}
        }
    }
}

/// The Sentinel follower's body: asks the sentinels every [`Backend::follow_interval`]
/// whether the master moved, until `stop` is disconnected.
///
/// Its own thread, not a step of the renewal loop: asking costs up to a connect and a
/// response timeout per sentinel when they do not answer, and renewals of a healthy master
/// must not wait for that (with three stopped sentinels and a 1 s response timeout, a 2 s
/// watchdog lost every lock). Renewal keeps using the master last found meanwhile.
///
/// [`Backend::follow_interval`]: crate::connection::Backend::follow_interval
pub(crate) fn follow(core: Arc<Core>, stop: Receiver<()>, every: Duration) {
    loop {
        if core.backend.follow_master() {
            // Renewals now go to the new master and find there which locks the failover
            // lost; the subscriber reconnects when it sees the change.
            core.subscriber.ring(false);
        }
        match stop.recv_timeout(every) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

/// Gives back a lock that a release handed to a thread of ours that had stopped waiting.
/// Only a hand-over nobody took up is given back: the thread may have taken it up with an
/// attempt of its own (same token) and be using it now.
fn give_back(core: &Core, keys: &LockKeys, thread: u64, token: u64) {
    // A thread that took the hand-over from its message holds it without Redis knowing yet:
    // the registry of holds does know.
    if core
        .holds
        .get(&keys.lock, thread)
        .is_some_and(|hold| hold.token == token)
    {
        return;
    }
    let owner = core.owner(thread);
    let freeing = core.backend.freeing();
    // One attempt: the renewal thread must not stall on an errand.
    match core
        .backend
        .run_once_only(|con| scripts::give_back(con, keys, &owner, token, freeing))
    {
        Ok(Release::Released) => {
            log::debug!(
                "gave back lock {:?}, handed to a thread that no longer waited",
                keys.name
            )
        }
        Ok(_) => {}
        Err(e) => log::warn!(
            "could not give back lock {:?}, handed to a thread that no longer waited ({e}); \
             it expires with its lease",
            keys.name
        ),
    }
}

/// Splits `due` into script calls of at most [`BATCH`] locks. On a Cluster, a script may only
/// touch keys of one slot (else CROSSSLOT), so each call renews locks of one slot only: one
/// call per slot that has locks due, whatever the batch size.
fn batches(due: &mut [(u64, Arc<Hold>)], cluster: bool) -> Vec<&[(u64, Arc<Hold>)]> {
    if !cluster {
        return due.chunks(BATCH).collect();
    }
    due.sort_by_key(|(_, hold)| hold.keys.slot());
    due.chunk_by(|(_, a), (_, b)| a.keys.slot() == b.keys.slot())
        .flat_map(|same_slot| same_slot.chunks(BATCH))
        .collect()
}

/// Renews `holds` with `lease`, in as few script calls as the deployment allows (one, or one
/// per slot on a Cluster); `true` where the lock is still ours, in the order given.
pub(crate) fn renew_now(core: &Core, holds: &[&Hold], lease: Duration) -> crate::Result<Vec<bool>> {
    let mut order: Vec<usize> = (0..holds.len()).collect();
    let cluster = core.backend.is_cluster();
    if cluster {
        order.sort_by_key(|&i| holds[i].keys.slot());
    }
    let mut ours = vec![false; holds.len()];
    let groups: Vec<&[usize]> = if cluster {
        order
            .chunk_by(|&a, &b| holds[a].keys.slot() == holds[b].keys.slot())
            .collect()
    } else {
        vec![&order[..]]
    };
    for group in groups {
        let renewals: Vec<Renewal<'_>> = group
            .iter()
            .map(|&i| Renewal {
                keys: &holds[i].keys,
                owner: &holds[i].owner,
                token: holds[i].token,
            })
            .collect();
        let replies = core
            .backend
            .run(|con| scripts::renew(con, &renewals, lease))?;
        for (&i, reply) in group.iter().zip(replies) {
            ours[i] = reply;
        }
    }
    Ok(ours)
}

/// Renews what is due; returns when the next round should start. Checks `stop` between
/// batches, so a closing client waits for one round trip at most.
fn round(core: &Core, lease: Duration, period: Duration, stop: &Receiver<()>) -> Instant {
    let now = Instant::now();
    let horizon = now + period / 4;
    let mut next = now + period;
    let mut due: Vec<(u64, Arc<Hold>)> = Vec::new();
    for (thread, hold) in core.holds.watchdog_holds() {
        if hold.is_lost() {
            continue; // its lease ran out: is_lost() marked and logged it
        }
        let renew_at = hold.renew_at();
        if renew_at <= horizon {
            due.push((thread, hold));
        } else {
            next = next.min(renew_at);
        }
    }
    for batch in batches(&mut due, core.backend.is_cluster()) {
        if !matches!(stop.try_recv(), Err(crossbeam_channel::TryRecvError::Empty)) {
            break;
        }
        let sent = Instant::now();
        let renewals: Vec<Renewal<'_>> = batch
            .iter()
            .map(|(_, h)| Renewal {
                keys: &h.keys,
                owner: &h.owner,
                token: h.token,
            })
            .collect();
        match core
            .backend
            .run(|con| scripts::renew(con, &renewals, lease))
        {
            Ok(still_ours) => {
                for ((thread, hold), ours) in batch.iter().zip(still_ours) {
                    if ours {
                        hold.renewed(sent, lease, period);
                    } else if core.holds.contains(*thread, hold) && hold.mark_lost() {
                        // Not registered any more means its owner released it meanwhile.
                        log::warn!(
                            "lock {:?} is no longer held by us; marked lost",
                            hold.keys.name
                        );
                    }
                }
            }
            Err(e) => {
                log::warn!("lock renewal failed ({e}); retrying in {RETRY:?}");
                next = next.min(Instant::now() + RETRY);
            }
        }
    }
    next
}
