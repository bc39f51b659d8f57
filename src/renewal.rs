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
//! - A hold with a fixed lease still registered when its lease ends is lost: the thread
//!   wakes then to find it.
//! - Every loss, whichever thread found it, comes here once, and the user's
//!   [`on_lock_lost`](crate::ClientBuilder::on_lock_lost) callback is called with it.
//!
//! The thread also carries out the subscriber's [errands](Errand) (the engine's
//! [`give_back`](engine::give_back)), so that neither a waiter nor the subscriber thread
//! spends a round trip on them, and no thread is added for them; and it settles the
//! attempts whose reply was lost ([`engine::doubt`]) once the server answers again.
//!
//! None of its round trips outlasts the first lease deadline among the holds (see
//! `answer_by`): whatever a server that stopped answering costs, a hold whose lease runs out
//! is found lost, and announced, when it does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, select};

use crate::core::Core;
use crate::engine::{self, Hold, Renewed};
use crate::lost::{LossCause, LossHook, Notice};
use crate::stats::bump;
use crate::subscriber::Errand;
use crate::words::Words;

/// Pause between attempts while Redis cannot be reached.
const RETRY: Duration = Duration::from_millis(250);

/// The least time a round trip of this thread is given, however close the next lease
/// deadline: a healthy server answers well within it.
const LEAST_BUDGET: Duration = Duration::from_millis(20);

/// The least time a settlement of lost replies is given (see `engine::doubt`): it makes a
/// few round trips, and one cut short may still run later.
const SETTLING_BUDGET: Duration = Duration::from_millis(250);

/// The latest instant this thread's round trips may last until: the first lease deadline
/// among `holds` (it must be free then to find that hold lost and announce it, not a response
/// timeout later), but no sooner than [`LEAST_BUDGET`] from now; `None` when nothing is held.
fn answer_by(holds: &[Arc<Hold>]) -> Option<Instant> {
    let first = holds
        .iter()
        .filter(|hold| hold.lease_known() && !hold.is_lost())
        .map(|hold| hold.lease_deadline())
        .min()?;
    Some(first.max(Instant::now() + LEAST_BUDGET))
}

/// Runs `f` (round trips of this thread) answered by the first lease deadline of the holds
/// there are, if any.
fn by_first_deadline<T>(holds: &[Arc<Hold>], f: impl FnOnce() -> T) -> T {
    match answer_by(holds) {
        Some(deadline) => crate::backend::link::answer_by(deadline, f),
        None => f(),
    }
}

/// What the thread listens to.
pub(crate) struct Inbox {
    /// Disconnected when the client is dropped.
    pub stop: Receiver<()>,
    /// The subscriber's errands.
    pub errands: Receiver<Errand>,
    /// Every hold's loss, once (`Hold::mark_lost`), and when fixed leases end.
    pub notices: Receiver<Notice>,
    /// The user's callback for them, if any.
    pub on_lost: Option<LossHook>,
}

/// The thread's body; returns when `inbox.stop` is disconnected.
pub(crate) fn run(core: Arc<Core>, inbox: Inbox) {
    let Inbox {
        stop,
        errands,
        notices,
        on_lost,
    } = inbox;
    let lease = core.watchdog_timeout;
    let period = lease / 3;
    let mut next = Instant::now();
    loop {
        if Instant::now() >= next {
            core.to_renewal.in_round();
            next = round(&core, lease, period, &stop);
        }
        // Settling waits for announcements (their lease ended: they are due now), and never
        // runs past the next round or a lease deadline.
        let due = core.doubts.next_due();
        if notices.is_empty() && due.is_some_and(|due| due <= Instant::now()) {
            let until = answer_by(&core.holds.live()).map_or(next, |first| first.min(next));
            let until = until.max(Instant::now() + SETTLING_BUDGET);
            crate::backend::link::answer_by(until, || engine::settle_due(&core));
        }
        if let Some(due) = core.doubts.next_due() {
            next = next.min(due);
        }
        // A lease end sent meanwhile is in the inbox, and lowers `next` below.
        core.to_renewal.wakes_at(next);
        select! {
            recv(stop) -> _ => {
                // The client is going: what a lost reply may have taken is given back now,
                // within one response timeout in all, or it would stay held for its lease.
                let within = Instant::now() + core.backend.response_timeout();
                crate::backend::link::answer_by(within, || engine::settle_now(&core));
                return;
            }
            recv(errands) -> errand => match errand {
                Ok(Errand::GiveBack { keys, owner, token, lease }) => {
                    by_first_deadline(&core.holds.live(), || {
                        engine::give_back(&core, &keys, &owner, token, lease)
                    })
                }
                Err(_) => {}
            },
            recv(notices) -> notice => match notice {
                Ok(Notice::Lost(lost)) => {
                    bump(&core.counters.locks_lost, 1);
                    if let Some(hook) = &on_lost {
                        hook.announce(&lost);
                    }
                }
                // A little after the end, so that the hold's own clock agrees it has passed.
                Ok(Notice::Expires(end)) => next = next.min(end + Duration::from_millis(1)),
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
    let live = core.holds.live();
    for hold in &live {
        if !hold.lease_known() {
            continue; // being registered: its acquisition records the lease in a moment
        }
        if hold.is_lost() {
            continue; // its lease ran out: is_lost() marked, logged and announced it
        }
        if !hold.is_watchdog() {
            // A fixed lease: nothing to renew, but its end is a loss to announce if the
            // hold is still registered then.
            next = next.min(hold.lease_deadline());
            continue;
        }
        let renew_at = hold.renew_at();
        if renew_at <= horizon {
            due.push(hold.clone());
        } else {
            next = next.min(renew_at);
        }
    }
    let holds: Vec<&Hold> = due.iter().map(|hold| &**hold).collect();
    let stopping = || !matches!(stop.try_recv(), Err(crossbeam_channel::TryRecvError::Empty));
    let Renewed { outcome, failure } =
        by_first_deadline(&live, || engine::renew(core, &holds, lease, &stopping));
    let counters = &core.counters;
    for (hold, outcome) in due.iter().zip(outcome) {
        match outcome {
            Some((sent, true)) => {
                bump(&counters.renewals_ok, 1);
                hold.renewed(sent, lease, period)
            }
            Some((_, false)) => {
                bump(&counters.renewals_failed, 1);
                // Not registered any more means its owner released it meanwhile.
                if core.holds.contains(hold) && !hold.is_lost() {
                    let cause = engine::why_gone(core, &hold.keys, hold.token, LossCause::Taken);
                    if hold.mark_lost(cause) {
                        log::warn!(
                            "{} {} no longer held by us ({cause:?}); marked lost",
                            hold.kind().of(hold.keys.name()),
                            hold.kind().is()
                        );
                    }
                }
            }
            None => bump(&counters.renewals_failed, 1),
        }
    }
    if let Some(e) = failure {
        let retry = Words(RETRY);
        counters.outage.failed(format_args!(
            "lock renewal failed ({e}); retrying in {retry}"
        ));
        next = next.min(Instant::now() + RETRY);
        // A renewal cut short by a hold's deadline: wake at that deadline to announce it.
        if let Some(first) = answer_by(&live) {
            next = next.min(first + Duration::from_millis(1));
        }
    } else if !due.is_empty() {
        counters.outage.answered();
    }
    next
}
