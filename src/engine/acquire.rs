//! Attempt, queue, wait, withdraw, release: the path every acquisition takes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::ConnectionLike;

use super::Kind;
use super::doubt::Doubt;
use super::hold::Hold;
use super::lease::{Terms, deadline_after};
use super::local;
use super::release::{lost, release, why_gone};
use crate::backend::is_transport_error;
use crate::cancel::{Cancel, Watched};
use crate::core::{Core, Replicas};
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lost::LossCause;
use crate::scripts::{self, Acquire, Leftover, QueuePlace, Queueing, TakenBy};
use crate::stats::Outcome;
use crate::subscriber::{Expecting, Wake};

/// How much longer than the waiter's own horizon its place in the queue stays valid: the
/// round trip of the attempt that renews it.
const QUEUE_SLACK: Duration = Duration::from_secs(2);

/// A hold, with one guard counted for the caller to wrap.
pub(crate) struct Acquired {
    pub hold: Arc<Hold>,
}

/// Another owner held the object when an attempt sent at `sent` ran: for `ttl` more, with
/// the fencing counter at `fence` (a hand-over issued later carries a larger token); the
/// attempt left the caller at `place` in the queue, if it queued.
#[derive(Clone, Copy)]
pub(super) struct Busy {
    pub ttl: Duration,
    fence: u64,
    place: Option<QueuePlace>,
    sent: Instant,
}

/// Acquires `kind` for `owner` (the calling thread's owner id, or one of an acquisition of its
/// own), waiting at most `wait` (`None`: as long as it takes; `ZERO`: one attempt, no
/// queueing), or until `cancel` (or the client's [`cancel_all_waits`](crate::Client::cancel_all_waits))
/// ends the wait: [`Error::Cancelled`], holding nothing and out of the queue. `Ok(None)`:
/// not acquired in time. An owner that holds it already re-enters at once (or learns its
/// hold was lost).
///
/// An attempt that finds the object busy also queues the thread in Redis, so that the
/// release which frees it hands it straight to the oldest waiter anywhere in the fleet: the
/// new holder learns it from the release's message and needs no attempt of its own, nobody
/// else is woken to race for it, and a thread that releases and asks again queues behind
/// those already waiting. Attempts after a sleep remain the fallback for every message lost
/// and every holder that died.
pub(crate) fn acquire(
    core: &Core,
    kind: &dyn Kind,
    owner: Arc<str>,
    wait: Option<Duration>,
    terms: Terms,
    cancel: Option<&Cancel>,
) -> Result<Option<Acquired>> {
    let started = Instant::now();
    let watched = Watched::new(&core.cancel, cancel);
    if watched.is_cancelled() {
        return Err(counted_cancel(core, kind.keys()));
    }
    let mut outcome = Outcome::AtOnce;
    let acquired = acquire_counted(core, kind, owner, wait, terms, &watched, &mut outcome)
        .inspect_err(|e| {
            if e.is_cancelled() {
                core.counters
                    .acquisition(Outcome::Cancelled, started.elapsed());
            }
        })?;
    let outcome = if acquired.is_some() {
        outcome
    } else {
        Outcome::TimedOut
    };
    core.counters.acquisition(outcome, started.elapsed());
    Ok(acquired)
}

/// [`acquire`], noting in `outcome` how an acquisition came about.
fn acquire_counted(
    core: &Core,
    kind: &dyn Kind,
    owner: Arc<str>,
    wait: Option<Duration>,
    terms: Terms,
    watched: &Watched,
    outcome: &mut Outcome,
) -> Result<Option<Acquired>> {
    let keys = kind.keys();
    // A wait too long to represent is a wait without end.
    let deadline = deadline_after(wait);
    let existing = core.holds.get(keys.lock(), &owner);
    // A re-entry never waits (it either succeeds or finds its hold lost), and a single
    // attempt does not queue.
    let queues = wait != Some(Duration::ZERO) && existing.is_none();
    if queues {
        // A thread that waits may wait for another client's turn, too.
        local::let_others_go_first(core, keys, deadline, watched);
        if watched.is_cancelled() {
            return Err(cancelled(keys));
        }
    }
    let expecting = queues.then(|| core.subscriber.expect(keys, &owner));
    let waiting = Wait {
        core,
        kind,
        owner,
        terms,
        deadline,
        watched,
    };

    let mut first = if queues {
        waiting.queueing(None)
    } else {
        Queueing::NONE
    };
    let reply = core
        .leftovers
        .voiding(&[keys.lock()], &waiting.owner, |places| {
            first.leftovers = places[0].clone();
            attempt(core, kind, &waiting.owner, existing, terms, &first)
        });
    let mut busy = match reply {
        Ok(Ok(acquired)) => return Ok(Some(acquired)),
        Ok(Err(busy)) => busy,
        Err(e) => {
            // A place this attempt took may be there too (its reply is lost): void it next
            // time.
            if queues {
                waiting.remember_place_taken(&first);
            }
            return Err(e);
        }
    };
    let Some(expecting) = expecting else {
        return Ok(None);
    };
    *outcome = Outcome::AfterWait;
    let waited = waiting.in_queue(&mut busy, expecting, outcome);
    if let (Err(_), Some(place)) = (&waited, busy.place) {
        // The wait failed, and may not have left the queue: void its place next time (named
        // by its arrival, should a lost reply have left us an older name). It was valid no
        // longer than one attempt's queueing after the last attempt.
        let leftover = Leftover {
            place,
            handover_lease: terms.handover_lease(),
        };
        let until = busy.sent + core.watchdog_timeout + QUEUE_SLACK + PLACE_MARGIN;
        core.leftovers
            .remember(keys.lock(), &waiting.owner, [(leftover, until)]);
    }
    waited
}

/// How much longer than its stated validity a leftover place is remembered: the clocks of
/// the client and the server are compared through a round trip.
const PLACE_MARGIN: Duration = Duration::from_secs(1);

/// One acquisition that waits in the queue: who waits for what, on which terms, until when.
struct Wait<'a> {
    core: &'a Core,
    kind: &'a dyn Kind,
    owner: Arc<str>,
    terms: Terms,
    /// `None`: as long as it takes.
    deadline: Option<Instant>,
    /// What ends the wait before its deadline.
    watched: &'a Watched<'a>,
}

impl Wait<'_> {
    /// The wait after an attempt found the object `busy` (which each later attempt updates)
    /// and queued the owner, until the object is the owner's or the deadline passes.
    fn in_queue(
        &self,
        busy: &mut Busy,
        expecting: Expecting<'_>,
        outcome: &mut Outcome,
    ) -> Result<Option<Acquired>> {
        let (core, keys, terms) = (self.core, self.kind.keys(), self.terms);
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            drop(expecting);
            // No time left: don't subscribe for nothing.
            return self.give_up(&self.queueing(Some(*busy)));
        }
        // Make sure the channel is subscribed: unless it was since before the attempt, the
        // first wait returns when it is, and the attempt after it cannot miss a release.
        let mut waiter = core.subscriber.join(expecting);
        if local::takes_place(core, keys) {
            waiter.take_local_hand_overs(terms.handover_lease());
        }
        let _waiting =
            local::takes_turns(core, keys).then(|| core.holds.turns.waiting(keys.lock()));
        let _on_cancel = self.watched.on_cancel(waiter.cancel_bell());

        // A sleep ends at a hand-over, a wake-up, the object's TTL (its holder may have died
        // without a message), the time to renew our place in the queue, or our deadline.
        loop {
            let bound = busy
                .ttl
                .clamp(Duration::from_millis(1), core.watchdog_timeout);
            let sleep = match self.deadline {
                Some(deadline) => bound.min(deadline.saturating_duration_since(Instant::now())),
                None => bound,
            };
            let mut confirm = false;
            if let Wake::HandedOver { token } = waiter.wait(sleep) {
                // Only a hand-over issued after our last attempt is news: an older one's hold
                // is gone (that attempt found someone else holding it). And since it came
                // after that attempt was sent, its lease ran from then at the latest.
                if token > busy.fence {
                    // With replicas to wait for, only an attempt of our own can WAIT for them.
                    if terms.handover_lease() == terms.lease_set()
                        && busy.sent.elapsed() < terms.handover_lease() / 3
                        && core.replicas.is_none()
                    {
                        waiter.acquired();
                        *outcome = Outcome::HandedOver;
                        let hold =
                            register(core, keys, self.owner.clone(), token, TakenBy::Message);
                        hold.extend(busy.sent, terms.lease_set(), terms.renew_every());
                        return Ok(Some(Acquired { hold }));
                    }
                    // Too little of the lease is known to be left, or it was handed over with
                    // a shorter lease than asked for: take it up with a round trip, which sets
                    // the full lease and confirms it is ours.
                    confirm = true;
                }
            }
            if !confirm && self.deadline.is_some_and(|d| Instant::now() >= d) {
                drop(waiter);
                return self.give_up(&self.queueing(Some(*busy)));
            }
            if !confirm {
                local::let_others_go_first(core, keys, self.deadline, self.watched);
            }
            // A hand-over taken up above wins over a cancel: it is held, and returned.
            if !confirm && self.watched.is_cancelled() {
                drop(waiter);
                return self.cancel(busy);
            }
            let sent = self.queueing(Some(*busy));
            let reply =
                attempt(core, self.kind, &self.owner, None, terms, &sent).inspect_err(|_| {
                    // Finding its place gone, the attempt queued at the back.
                    self.remember_place_taken(&sent);
                });
            match reply? {
                Ok(acquired) => {
                    waiter.acquired();
                    return Ok(Some(acquired));
                }
                Err(again) => *busy = again,
            }
        }
    }

    /// How an attempt of this wait (after the one that found the object `after`, if any)
    /// treats the queue: a place in it stays valid until the deadline, or for one watchdog
    /// timeout (the longest a waiter sleeps before its next attempt renews it), plus slack
    /// for the round trip.
    fn queueing(&self, after: Option<Busy>) -> Queueing {
        let refresh = self.core.watchdog_timeout;
        let until_deadline = self
            .deadline
            .map_or(refresh, |d| d.saturating_duration_since(Instant::now()));
        Queueing {
            queue_for: until_deadline.min(refresh) + QUEUE_SLACK,
            queued: after.is_some(),
            place: after.and_then(|busy| busy.place),
            leftovers: Vec::new(),
            handover_lease: self.terms.handover_lease(),
        }
    }

    /// An attempt that may have queued at the back of a lock's queue as `queueing` says failed
    /// without a reply: its place, named by its terms, is voided at the owner's next attempt.
    fn remember_place_taken(&self, queueing: &Queueing) {
        let keys = self.kind.keys();
        if (self.core.dialect.queues_by_place)(keys) {
            let until = Instant::now() + queueing.queue_for + PLACE_MARGIN;
            let place = [(queueing.first_place(), until)];
            self.core
                .leftovers
                .remember(keys.lock(), &self.owner, place);
        }
    }

    /// The wait was cancelled: leave the queue and, should the object have been handed to us
    /// meanwhile, hand it on (a release that grants it to the next waiter), so a cancel never
    /// strands it.
    fn cancel(&self, busy: &Busy) -> Result<Option<Acquired>> {
        let keys = self.kind.keys();
        if let Some(acquired) = self.give_up(&self.queueing(Some(*busy)))?
            && let Err(e) = release(self.core, self.kind, &acquired.hold)
        {
            log::warn!(
                "lock {:?}, handed over to a wait that was cancelled: handing it on \
                     failed ({e}); it frees itself when its lease runs out",
                keys.name()
            );
        }
        Err(cancelled(keys))
    }

    /// The wait is over: leave the queue, unless the object was handed to us meanwhile.
    fn give_up(&self, queueing: &Queueing) -> Result<Option<Acquired>> {
        let (core, keys, terms) = (self.core, self.kind.keys(), self.terms);
        let sent = Instant::now();
        let token = core
            .backend
            .run(|con| {
                self.kind
                    .withdraw(con, &self.owner, terms.lease_set(), queueing)
            })
            .map_err(|e| {
                // Its lost run may have taken up a hand-over, or not run yet.
                in_doubt(
                    core,
                    self.kind,
                    &self.owner,
                    terms.lease_set(),
                    queueing,
                    &e,
                );
                scripts::failure(keys, e)
            })?;
        Ok(token.map(|token| {
            let hold = register(core, keys, self.owner.clone(), token, TakenBy::Attempt);
            hold.extend(sent, terms.lease_set(), terms.renew_every());
            Acquired { hold }
        }))
    }
}

/// A call of `owner`'s on `kind` with `lease`, queueing as `queueing` says, failed with `e`:
/// if the request may have reached the server, it may still run there, and is remembered to
/// be settled ([`doubt`](super::doubt)).
pub(crate) fn in_doubt(
    core: &Core,
    kind: &dyn Kind,
    owner: &Arc<str>,
    lease: Duration,
    queueing: &Queueing,
    e: &redis::RedisError,
) {
    if is_transport_error(e) && !e.is_connection_refusal() {
        let doubt = Doubt::new(kind, owner, lease, queueing);
        core.doubts.remember(kind.keys().lock(), doubt);
        core.to_renewal.settle_soon();
    }
}

/// The error of a wait for `keys`'s object that was cancelled, counted in
/// [`Stats::cancelled`](crate::Stats::cancelled): for a wait that returns it straight away,
/// where no caller above counts it.
pub(super) fn counted_cancel(core: &Core, keys: &LockKeys) -> Error {
    core.counters
        .acquisition(Outcome::Cancelled, Duration::ZERO);
    cancelled(keys)
}

/// The error of a wait for `keys`'s object that was cancelled (not counted: see
/// [`counted_cancel`]).
pub(super) fn cancelled(keys: &LockKeys) -> Error {
    Error::Cancelled {
        name: keys.name().to_string(),
    }
}

/// One round trip: acquire or re-enter (`existing` is `owner`'s hold, if any), or learn how
/// long the holder has left (and, when `queueing` says so, take a place in the queue).
pub(super) fn attempt(
    core: &Core,
    kind: &dyn Kind,
    owner: &Arc<str>,
    existing: Option<Arc<Hold>>,
    terms: Terms,
    queueing: &Queueing,
) -> Result<std::result::Result<Acquired, Busy>> {
    let keys = kind.keys();
    if existing.as_ref().is_some_and(|h| h.is_lost()) {
        return Err(lost(keys));
    }
    // This attempt takes up whatever a lost one of the owner's took: no settling needed.
    core.doubts.forget(keys.lock(), owner);
    let held = existing.as_ref().map(|h| (h.guards(), h.token));
    let lease = terms.lease_set();
    let sent = Instant::now();
    let (reply, acknowledged) = acquisition(
        core,
        |con| kind.attempt(con, owner, held, lease, queueing),
        |reply| matches!(reply, Acquire::Acquired { .. }),
    )
    .map_err(|e| {
        // A re-entry's lost run only set a count that the hold's release sets again.
        if existing.is_none() {
            in_doubt(core, kind, owner, lease, queueing, &e);
        }
        scripts::failure(keys, e)
    })?;
    match reply {
        Acquire::Acquired { token } => {
            let hold = match existing {
                Some(hold) => {
                    hold.add_guard();
                    hold
                }
                None => register(core, keys, owner.clone(), token, TakenBy::Attempt),
            };
            hold.extend(sent, lease, terms.renew_every());
            replicated(core, kind, Acquired { hold }, acknowledged)
        }
        Acquire::Busy { ttl, fence, place } => {
            if local::takes_turns(core, keys) {
                core.holds.turns.found_busy(keys.lock());
            }
            Ok(Err(Busy {
                ttl,
                fence,
                place,
                sent,
            }))
        }
        Acquire::Lost => {
            if let Some(hold) = existing {
                let cause = why_gone(core, keys, hold.token, LossCause::FoundGone);
                if hold.mark_lost(cause) {
                    let kind = hold.kind();
                    log::warn!(
                        "{} {} lost under its holder",
                        kind.of(keys.name()),
                        kind.was()
                    );
                }
            }
            Err(lost(keys))
        }
    }
}

/// `acquired`, if as many replicas `acknowledged` it as the client asks for; else given back
/// (it is not safe against a failover, as asked) and `Err(NotReplicated)`.
fn replicated(
    core: &Core,
    kind: &dyn Kind,
    acquired: Acquired,
    acknowledged: Option<u32>,
) -> Result<std::result::Result<Acquired, Busy>> {
    let keys = kind.keys();
    match (acknowledged, core.replicas) {
        (Some(acknowledged), Some(replicas)) if acknowledged < replicas.count => {
            if let Err(e) = release(core, kind, &acquired.hold) {
                log::error!(
                    "giving back lock {:?}, not replicated as asked, failed ({e}); it expires \
                     when its lease runs out",
                    keys.name()
                );
            }
            Err(Error::NotReplicated {
                name: keys.name().to_string(),
                acknowledged,
                wanted: replicas.count,
            })
        }
        _ => Ok(Ok(acquired)),
    }
}

/// Runs an acquisition script (`op`) and, when it `took` something and the client asks for
/// replicas, `WAIT`s for them on the same connection, so that WAIT counts this write: the
/// reply, and how many replicas acknowledged it (`None` when not asked).
pub(crate) fn acquisition<R>(
    core: &Core,
    mut op: impl FnMut(&mut dyn ConnectionLike) -> redis::RedisResult<R>,
    took: impl Fn(&R) -> bool,
) -> redis::RedisResult<(R, Option<u32>)> {
    core.backend.run(|con| {
        let reply = op(con)?;
        let acknowledged = match core.replicas {
            Some(replicas) if took(&reply) => Some(replicas_acknowledging(con, replicas)?),
            _ => None,
        };
        Ok((reply, acknowledged))
    })
}

/// Registers a first hold, for renewal, before its guard exists; counts that guard.
pub(crate) fn register(
    core: &Core,
    keys: &Arc<LockKeys>,
    owner: Arc<str>,
    token: u64,
    taken_by: TakenBy,
) -> Arc<Hold> {
    let to_renewal = core.to_renewal.clone();
    let hold = Arc::new(Hold::new(
        keys.clone(),
        owner,
        token,
        taken_by,
        core.epoch,
        to_renewal,
    ));
    hold.add_guard();
    core.holds.insert(hold.clone());
    hold
}

/// Checks at `build()` that `replicas` can be had at all: one `WAIT`, on a connection of its
/// own (it has written nothing, so every connected replica acknowledges at once). With fewer,
/// or with WAIT refused, every acquisition would fail with [`Error::NotReplicated`]; better
/// said once, at the start: `NotReplicated` (with no lock's name) for too few, which may
/// change, `InvalidArgument` for WAIT refused, which will not.
pub(crate) fn check_replicas(backend: &crate::backend::Backend, replicas: Replicas) -> Result<()> {
    let mut con = backend.connect()?;
    let asked = format!(
        "wait_for_replicas({}, {})",
        replicas.count,
        crate::words::Words(replicas.timeout)
    );
    let reply = redis::cmd("WAIT")
        .arg(replicas.count)
        .arg(replicas.timeout.as_millis() as u64)
        .query::<u32>(&mut con);
    match reply {
        Ok(acknowledged) if acknowledged >= replicas.count => Ok(()),
        // Replicas come and go (one restarting with a deploy): not an argument that can
        // never work, but the error every lock would meet, met once, now.
        Ok(acknowledged) => {
            log::warn!(
                "{asked}: {acknowledged} of the replicas of {} acknowledged in time",
                con.addr()
            );
            Err(Error::NotReplicated {
                name: String::new(),
                acknowledged,
                wanted: replicas.count,
            })
        }
        Err(e)
            if matches!(
                e.kind(),
                redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
            ) =>
        {
            Err(Error::invalid(format!(
                "{asked}: {} refused WAIT ({e}); every lock would fail with NotReplicated",
                con.addr()
            )))
        }
        // The link named its own failure.
        Err(e) => Err(Error::Redis(e)),
    }
}

/// `WAIT` for `replicas` on the connection that just wrote. A refusal (an ACL without WAIT,
/// say) counts as no replica, so that the caller gives the lock back instead of leaving it
/// held without a guard; a failed connection is an error, retried with the acquisition.
fn replicas_acknowledging(
    con: &mut dyn ConnectionLike,
    replicas: Replicas,
) -> redis::RedisResult<u32> {
    let reply = redis::cmd("WAIT")
        .arg(replicas.count)
        .arg(replicas.timeout.as_millis() as u64)
        .query::<u32>(con);
    match reply {
        Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() => Err(e),
        Err(e) => {
            log::warn!("WAIT refused ({e}): the acquisition counts as not replicated");
            Ok(0)
        }
        ok => ok,
    }
}
