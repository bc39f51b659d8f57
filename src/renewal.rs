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
//! The thread also carries out the subscriber's [errands](Errand) (the engine's
//! [`give_back`](engine::give_back)), so that neither a waiter nor the subscriber thread
//! spends a round trip on them, and no thread is added for them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, select};

use crate::core::Core;
use crate::engine::{self, Hold, Renewed};
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
                Ok(Errand::GiveBack { keys, owner, token }) => engine::give_back(&core, &keys, &owner, token),
                Err(_) => {}
            },
            default(next.saturating_duration_since(Instant::now())) => {}
        }
    }
}

/// Renews what is due; returns when the next round should start. Checks `stop` between
/// batches, so a closing client waits for one round trip at most.
fn round(core: &Core, lease: Duration, period: Duration, stop: &Receiver<()>) -> Instant {
    let now = Instant::now();
    let horizon = now + period / 4;
    let mut next = now + period;
    let mut due: Vec<Arc<Hold>> = Vec::new();
    for hold in core.holds.watchdog_holds() {
        if hold.is_lost() {
            continue; // its lease ran out: is_lost() marked and logged it
        }
        let renew_at = hold.renew_at();
        if renew_at <= horizon {
            due.push(hold);
        } else {
            next = next.min(renew_at);
        }
    }
    let holds: Vec<&Hold> = due.iter().map(|hold| &**hold).collect();
    let stopping = || !matches!(stop.try_recv(), Err(crossbeam_channel::TryRecvError::Empty));
    let Renewed { outcome, failure } = engine::renew(core, &holds, lease, &stopping);
    for (hold, outcome) in due.iter().zip(outcome) {
        match outcome {
            Some((sent, true)) => hold.renewed(sent, lease, period),
            Some((_, false)) if core.holds.contains(hold) && hold.mark_lost() => {
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
