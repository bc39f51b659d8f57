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

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::client::Core;
use crate::hold::Hold;
use crate::scripts::{self, Renewal};

/// Locks per renewal script call.
pub(crate) const BATCH: usize = 500;
/// Pause between attempts while Redis cannot be reached.
const RETRY: Duration = Duration::from_millis(250);

/// The thread's body; returns when `stop` is disconnected.
pub(crate) fn run(core: Arc<Core>, stop: Receiver<()>) {
    let lease = core.watchdog_timeout;
    let period = lease / 3;
    loop {
        let next = round(&core, lease, period);
        let now = Instant::now();
        match stop.recv_timeout(next.saturating_duration_since(now)) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Renews what is due; returns when the next round should start.
fn round(core: &Core, lease: Duration, period: Duration) -> Instant {
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
    for batch in due.chunks(BATCH) {
        let sent = Instant::now();
        let renewals: Vec<Renewal<'_>> = batch
            .iter()
            .map(|(_, h)| Renewal {
                lock_key: &h.keys.lock,
                owner: &h.owner,
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
