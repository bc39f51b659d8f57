//! The renewal thread (the watchdog): keeps every lock taken without a lease alive.
//!
//! It reads the client's registry of holds, the same one the acquiring and releasing threads
//! write, so a hold is renewed from the moment its first guard exists until its last guard
//! starts releasing. Holds are renewed `watchdog_timeout / 3` after their last renewal; each
//! round takes every hold due within the next quarter period too, so renewals bunch into few
//! rounds, which the engine sends in few round trips ([`engine::renew`]).
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
//! thread spends a round trip on them: a lock handed to a thread that had stopped waiting is
//! given back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, select};

use crate::core::Core;
use crate::engine::{self, Hold, Renewed};
use crate::keys::LockKeys;
use crate::scripts::{self, Release};
use crate::subscriber::Errand;

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
/// [`Backend::follow_interval`]: crate::backend::Backend::follow_interval
pub(crate) fn follow(core: Arc<Core>, stop: Receiver<()>, every: Duration) {
    loop {
        if core.backend.follow_master() {
            // Renewals now go to the new master and find there which locks the failover
            // lost; the subscriber reconnects when it sees the change.
            core.subscriber.ring();
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
    let freeing = scripts::Freeing::of(&core.backend);
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
    let holds: Vec<&Hold> = due.iter().map(|(_, hold)| &**hold).collect();
    let stopping = || !matches!(stop.try_recv(), Err(crossbeam_channel::TryRecvError::Empty));
    let Renewed { outcome, failure } = engine::renew(core, &holds, lease, &stopping);
    for ((thread, hold), outcome) in due.iter().zip(outcome) {
        match outcome {
            Some((sent, true)) => hold.renewed(sent, lease, period),
            Some((_, false)) if core.holds.contains(*thread, hold) && hold.mark_lost() => {
                // Not registered any more means its owner released it meanwhile.
                log::warn!(
                    "lock {:?} is no longer held by us; marked lost",
                    hold.keys.name
                );
            }
            _ => {}
        }
    }
    if let Some(e) = failure {
        log::warn!("lock renewal failed ({e}); retrying in {RETRY:?}");
        next = next.min(Instant::now() + RETRY);
    }
    next
}
