//! The in-process half of waking (no I/O): which waiting thread gets which hand-over or
//! permit when the subscriber thread hands it a message, and the handle's methods by which a
//! thread joins and leaves the waiters of a lock ([`Subscriber::expect`],
//! [`Subscriber::join`], [`Waiter`]).
//!
//! # Hand-overs
//! A thread whose attempt finds a lock busy is queued in Redis, and the release that frees
//! the lock hands it to the oldest waiter still waiting, anywhere in the fleet, publishing
//! `grant <token> <lease> <owner>` on the owner's client's grant channel
//! ([`LockKeys::grant_channel`]; on the lock's channel when the new lease is shorter than the
//! old, see `release.lua`; a kind with shares likewise, see `shares.lua`). The subscriber of that client gives the token to that thread,
//! which returns holding the lock without a round trip of its own. No other thread is woken,
//! and no other client's subscriber. A hand-over that overtakes the reply to the thread's own
//! attempt waits for it ([`Subscriber::expect`]); one that comes for a thread that no longer
//! waits is given back through the renewal thread ([`Errand::GiveBack`]). Every waiter
//! learns the new holder's lease from the message and sleeps no longer than that: a holder
//! that died in the queue is not waited for beyond its lease.
//!
//! # Entries and waiters
//! Threads waiting for the same lock share one [`Entry`] keyed by the lock's channel. Each
//! waiter owns a [`Slot`] in the entry's FIFO queue and parks on it; a slot holds a
//! hand-over, or at most one *permit* (a wake-up to try again). Together the slots form a
//! fair counting semaphore for the cases a hand-over does not cover:
//! - an `unlock` message (a release that found only stale places queued) grants one permit,
//!   to the oldest waiter that has none (one release wakes one local waiter: no herd);
//! - a `force` message (force-unlock), an `open` message (a count-down latch at zero), a
//!   confirmed subscription and a reconnect grant a permit to every waiter, so each retries
//!   (or checks) once;
//! - a permit granted while its waiter is busy stays set, so a message that arrives between a
//!   waiter's attempt and its sleep is not lost;
//! - a waiter that leaves with a permit it never used passes it to the next one.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::{Shared, Subscriber};
use crate::keys::LockKeys;

mod deliver;
mod local;
#[cfg(test)]
mod tests;

thread_local! {
    /// The last message this thread was woken by for itself (a hand-over, or a latch that
    /// opened): when the subscriber thread had it, and when this thread ran again. Two clock
    /// reads per wake-up, for the benchmark's breakdown of a hand-off into its stages.
    static LAST_MESSAGE_WAKE: std::cell::Cell<Option<(Instant, Instant)>> =
        const { std::cell::Cell::new(None) };
}

/// The last hand-over or latch opening the calling thread was woken by, taken: when the
/// subscriber thread had its message, and when this thread ran again.
pub(crate) fn last_message_wake() -> Option<(Instant, Instant)> {
    LAST_MESSAGE_WAKE.take()
}

/// A thread about to join the waiters of `keys`; `handed` is a hand-over that came early.
pub(super) struct Arriving {
    keys: Arc<LockKeys>,
    handed: Option<HandOver>,
}

/// The object handed to an owner of ours: its token, and the lease it was handed for (to give
/// it back with, should nobody take it up).
#[derive(Debug, Clone, Copy)]
struct HandOver {
    token: u64,
    lease: Duration,
}

/// The waiters of one lock in this client.
pub(super) struct Entry {
    pub(super) keys: Arc<LockKeys>,
    pub(super) state: Mutex<EntryState>,
}

pub(super) struct EntryState {
    /// Redis confirmed the subscription for this entry's current connection.
    pub(super) confirmed: bool,
    /// Counts the times `confirmed` became true: a [`Watching`] taken at one count proves
    /// the channel has been subscribed without a gap while it stays the same.
    confirmations: u64,
    /// Counts the wake-ups (`unlock`, `force`) delivered to this entry: one that came between
    /// an attempt and the join makes the joiner try again.
    wakes: u64,
    /// Counts the hand-overs seen, and when the last one's lease ends: a joiner that missed
    /// one sleeps no longer than that.
    handovers: u64,
    handover_ends: Option<Instant>,
    queue: VecDeque<Arc<Slot>>,
    /// Since when the queue has been empty: the subscriber thread drops the entry once it
    /// lingered [`LINGER`](super::LINGER).
    idle_since: Option<Instant>,
}

/// Proof that a lock's channel was subscribed at some moment (see [`Subscriber::expect`]).
struct Watching {
    entry: Arc<Entry>,
    confirmations: u64,
    wakes: u64,
    handovers: u64,
}

/// A thread between announcing an attempt and joining the waiters ([`Subscriber::expect`]).
pub(crate) struct Expecting<'a> {
    subscriber: &'a Subscriber,
    keys: Arc<LockKeys>,
    owner: Arc<str>,
    watching: Option<Watching>,
    joined: bool,
}

impl Drop for Expecting<'_> {
    fn drop(&mut self) {
        if self.joined {
            return;
        }
        let shared = &self.subscriber.shared;
        let arriving = shared.arriving.lock().remove(&self.owner);
        if let Some(Arriving {
            keys,
            handed: Some(handed),
        }) = arriving
        {
            // Handed over to a thread that then did not wait (its attempt got the lock by
            // itself, or its time was up): give it back.
            shared.give_back(keys, self.owner.clone(), handed.token, handed.lease);
        }
    }
}

/// How often a waiter that a release in this client is handing the lock to looks whether
/// the hand-over is done (it is woken when it is: this only bounds a missed wake-up).
const INCOMING_LOOK: Duration = Duration::from_millis(50);

/// Where one waiting thread parks, waiting for `owner`.
struct Slot {
    owner: Arc<str>,
    /// The lease its thread takes a lock with, once it said it takes one handed over by a
    /// release in this client ([`Waiter::take_local_hand_overs`]).
    local_lease: Mutex<Option<Duration>>,
    state: Mutex<SlotState>,
    wake: Condvar,
}

#[derive(Default)]
struct SlotState {
    /// A wake-up to use: try again.
    permit: bool,
    /// The lock was handed to this slot's owner.
    handed: Option<HandOver>,
    /// When the subscriber thread had the message of a hand-over or a latch's opening (for
    /// [`last_message_wake`]).
    message_at: Option<Instant>,
    /// The hand-over came from a release in this client ([`LocalHandOff`](local::LocalHandOff)), not through the
    /// subscriber thread, which therefore must be rung when the waiter leaves.
    handed_locally: bool,
    /// A release in this client chose this waiter and is moving the hold to it in Redis
    /// ([`Subscriber::local_successor`]); [`LocalHandOff`](local::LocalHandOff) hands it
    /// over or calls it off. Until then the thread attempts nothing of its own: its attempt
    /// would find its own field there, take it, and leave the hand-over nobody to take it.
    incoming: bool,
    /// The thread woke to attempt, or to give up, on its own: no release may choose it until
    /// it waits again (the same race, the other way round).
    attempting: bool,
    /// The latest time (server µs) a latch was said to open at, with the permit that woke
    /// the waiter for it.
    opened_at: Option<u64>,
    /// Wake no later than this to try again: the lock's lease changed hands and ends then.
    wake_by: Option<Instant>,
    /// The wait was cancelled ([`Waiter::cancel_bell`]): it leaves, unless a hand-over is
    /// there or coming.
    cancelled: bool,
}

impl Slot {
    fn new(owner: Arc<str>) -> Slot {
        Slot {
            owner,
            local_lease: Mutex::new(None),
            state: Mutex::new(SlotState::default()),
            wake: Condvar::new(),
        }
    }

    fn grant(&self) -> bool {
        let mut state = self.state.lock();
        if state.permit {
            return false;
        }
        state.permit = true;
        self.wake.notify_one();
        true
    }

    /// A latch opened at `at` (server µs), as the subscriber thread heard at `received`: a
    /// permit, and the time.
    fn open(&self, at: u64, received: Instant) {
        let mut state = self.state.lock();
        state.message_at = Some(received);
        state.opened_at = Some(state.opened_at.map_or(at, |was| was.max(at)));
        state.permit = true;
        self.wake.notify_one();
    }

    fn wake_by(&self, when: Instant) {
        let mut state = self.state.lock();
        if state.wake_by.is_none_or(|w| w > when) {
            state.wake_by = Some(when);
            self.wake.notify_one();
        }
    }

    fn hand_over(&self, handed: HandOver, received: Option<Instant>) {
        let mut state = self.state.lock();
        state.handed = Some(handed);
        state.message_at = received;
        self.wake.notify_one();
    }
}

impl Entry {
    /// Threads waiting on this entry now.
    pub(super) fn waiters(&self) -> u64 {
        self.state.lock().queue.len() as u64
    }

    /// Gives a permit to the oldest waiter without one.
    fn wake_one(state: &EntryState) {
        for slot in &state.queue {
            if slot.grant() {
                return;
            }
        }
    }

    fn wake_all(state: &EntryState) {
        for slot in &state.queue {
            slot.grant();
        }
    }

    pub(super) fn confirm(&self) {
        let mut state = self.state.lock();
        if !state.confirmed {
            state.confirmed = true;
            state.confirmations += 1;
            Entry::wake_all(&state);
        }
    }
}

/// Why [`Waiter::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A release (or a confirmed subscription, a reconnect): try again.
    Permit,
    /// The lock was handed to this thread with this token (if it is news: see `Lock`).
    HandedOver { token: u64 },
    /// A latch opened at this server time (µs): a waiter whose last look came before it is
    /// through, without another.
    Opened { at_us: u64 },
    /// The time asked for passed.
    Timeout,
    /// The wait was cancelled ([`Waiter::cancel_bell`]).
    Cancelled,
}

impl Subscriber {
    /// Announces that the calling thread is about to attempt `keys`'s lock for `owner` and,
    /// if it is busy, queue for it. Call before the attempt; then [`Subscriber::join`] (or drop the result,
    /// which gives back a hand-over that came for nothing).
    ///
    /// It notes whether the lock's channel is subscribed now: if the subscription holds until
    /// the thread joins, no release since the attempt can have been missed, and the attempt
    /// that otherwise follows joining is spared. And it catches a hand-over that overtakes the
    /// attempt's own reply.
    pub fn expect(&self, keys: &Arc<LockKeys>, owner: &Arc<str>) -> Expecting<'_> {
        let watching = self
            .shared
            .entries
            .lock()
            .get(keys.channel())
            .and_then(|entry| {
                let state = entry.state.lock();
                let confirmations = state.confirmed.then_some(state.confirmations)?;
                Some(Watching {
                    entry: entry.clone(),
                    confirmations,
                    wakes: state.wakes,
                    handovers: state.handovers,
                })
            });
        self.shared.arriving.lock().insert(
            owner.clone(),
            Arriving {
                keys: keys.clone(),
                handed: None,
            },
        );
        Expecting {
            subscriber: self,
            keys: keys.clone(),
            owner: owner.clone(),
            watching,
            joined: false,
        }
    }

    /// Registers the thread of `expecting`, whose attempt just found the lock busy (and
    /// queued it in Redis), as a waiter on the lock's channel, subscribing the channel if this
    /// is its first waiter. Unless the channel was subscribed since before that attempt and
    /// carried no message since, the waiter's first [`Waiter::wait`] returns once the
    /// subscription is confirmed (at once if it already is), so that its next attempt cannot
    /// miss a release.
    pub fn join(&self, mut expecting: Expecting<'_>) -> Waiter<'_> {
        expecting.joined = true;
        let owner = expecting.owner.clone();
        let keys = expecting.keys.clone();
        let slot = Arc::new(Slot::new(owner.clone()));
        let (entry, created) = {
            // Lock order: arriving, entries, entry state (as in `Shared::deliver_grant`).
            let mut arriving = self.shared.arriving.lock();
            let handed = arriving.remove(&owner).and_then(|a| a.handed);
            let mut entries = self.shared.entries.lock();
            let (entry, created) = match entries.get(keys.channel()) {
                Some(entry) => (entry.clone(), false),
                None => {
                    let entry = Arc::new(Entry {
                        keys: keys.clone(),
                        state: Mutex::new(EntryState {
                            confirmed: false,
                            confirmations: 0,
                            wakes: 0,
                            handovers: 0,
                            handover_ends: None,
                            queue: VecDeque::new(),
                            idle_since: None,
                        }),
                    });
                    entries.insert(keys.channel().to_string(), entry.clone());
                    (entry, true)
                }
            };
            let mut state = entry.state.lock();
            let watching = expecting.watching.take().filter(|w| {
                Arc::ptr_eq(&w.entry, &entry)
                    && state.confirmed
                    && w.confirmations == state.confirmations
            });
            if let Some(handed) = handed {
                slot.hand_over(handed, None);
            } else if state.confirmed && watching.as_ref().is_none_or(|w| w.wakes != state.wakes) {
                // Subscribed already, but perhaps not since before the attempt, or a wake-up
                // came since: the attempt after joining may go at once.
                slot.state.lock().permit = true;
            } else if let Some(w) = &watching
                && w.handovers != state.handovers
            {
                // The lock changed hands since the attempt: sleep no longer than the new
                // holder's lease, in case it never takes it up.
                slot.state.lock().wake_by = state.handover_ends;
            }
            state.queue.push_back(slot.clone());
            state.idle_since = None;
            drop(state);
            drop(entries);
            drop(arriving);
            (entry, created)
        };
        if created {
            self.ring();
        }
        Waiter {
            subscriber: self,
            entry,
            slot,
            used: false,
            handed_over: Cell::new(false),
        }
    }

    /// Hands a message on `channel` to its waiters, as the thread does when one arrives.
    #[cfg(test)]
    fn deliver(&self, channel: &[u8], payload: &[u8]) {
        self.shared.deliver(channel, payload)
    }
}

/// A thread's place in the queue of one lock's waiters. Leaves the queue on drop.
pub(crate) struct Waiter<'a> {
    subscriber: &'a Subscriber,
    entry: Arc<Entry>,
    slot: Arc<Slot>,
    /// The waiter acquired the lock, so a permit it still holds has served its purpose.
    used: bool,
    /// The last wait ended with a hand-over from the subscriber thread, which then looks at
    /// the entries again (see [`LINGER`](super::LINGER)).
    handed_over: Cell<bool>,
}

impl Waiter<'_> {
    /// Sleeps until the lock is handed over, a permit arrives, or `timeout` passes.
    ///
    /// A sleep that ends without either while the channel is still not subscribed rings the
    /// subscriber thread again: the ring that should have subscribed it may have failed, and
    /// no later waiter of this lock would ring.
    pub fn wait(&self, timeout: Duration) -> Wake {
        let deadline = Instant::now() + timeout;
        let (wake, local) = {
            let mut state = self.slot.state.lock();
            state.attempting = false;
            let wake = loop {
                if let Some(handed) = state.handed.take() {
                    break Wake::HandedOver {
                        token: handed.token,
                    };
                }
                if state.incoming {
                    // A release here is handing the lock over: its outcome comes within the
                    // one script call it makes, deadline or not.
                    let _ = self.slot.wake.wait_for(&mut state, INCOMING_LOOK);
                    continue;
                }
                if state.cancelled {
                    state.attempting = true;
                    break Wake::Cancelled;
                }
                if std::mem::replace(&mut state.permit, false) {
                    state.attempting = true;
                    break match state.opened_at.take() {
                        Some(at_us) => Wake::Opened { at_us },
                        None => Wake::Permit,
                    };
                }
                let until = state.wake_by.map_or(deadline, |w| w.min(deadline));
                if Instant::now() >= until {
                    state.attempting = true;
                    break Wake::Timeout;
                }
                // Woken early (a message, or spuriously): look again.
                let _ = self.slot.wake.wait_until(&mut state, until);
            };
            // Set only with a hand-over or a latch's opening, so taken only by the wake it came
            // with.
            if let Some(received) = state.message_at.take() {
                LAST_MESSAGE_WAKE.set(Some((received, Instant::now())));
            }
            state.wake_by = None; // the attempt that follows learns the lease afresh
            (wake, std::mem::take(&mut state.handed_locally))
        };
        if wake == Wake::Timeout && !self.entry.state.lock().confirmed {
            self.subscriber.ring();
        }
        self.handed_over
            .set(matches!(wake, Wake::HandedOver { .. }) && !local);
        wake
    }

    /// Lets a release in this client hand the lock to this waiter
    /// ([`Subscriber::local_successor`]), which then holds it with `lease`: for a lock whose
    /// layout has no hand-over of its own.
    pub fn take_local_hand_overs(&self, lease: Duration) {
        *self.slot.local_lease.lock() = Some(lease);
    }

    /// What ends this waiter's sleep for good when its wait is cancelled: [`Waiter::wait`]
    /// then returns [`Wake::Cancelled`], unless the lock is handed over (or being handed
    /// over in this client) to it, which wins. Rings in process; safe from any thread.
    pub fn cancel_bell(&self) -> Arc<dyn Fn() + Send + Sync> {
        let slot = self.slot.clone();
        Arc::new(move || {
            let mut state = slot.state.lock();
            state.cancelled = true;
            slot.wake.notify_one();
        })
    }

    /// The waiter got the lock: nothing to pass on when it leaves.
    pub fn acquired(&mut self) {
        self.used = true;
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let shared = &self.subscriber.shared;
        // The entry stays in the map (see below), so the map's lock is not needed: an entry
        // is only dropped from it with no waiter queued, under its state's lock.
        let mut state = self.entry.state.lock();
        state.queue.retain(|s| !Arc::ptr_eq(s, &self.slot));
        let (unused_permit, unused_hand_over) = {
            let mut slot = self.slot.state.lock();
            (
                std::mem::replace(&mut slot.permit, false),
                slot.handed.take(),
            )
        };
        if unused_permit && !self.used {
            Entry::wake_one(&state);
        }
        if let Some(handed) = unused_hand_over {
            // Handed over while the thread was leaving (an error, or an attempt of its own got
            // the lock): nobody will use this hold.
            let (keys, owner) = (self.entry.keys.clone(), self.slot.owner.clone());
            shared.give_back(keys, owner, handed.token, handed.lease);
        }
        if state.queue.is_empty() {
            state.idle_since = Some(Instant::now());
            drop(state);
            // The entry lingers, and the thread must look again when that is over: it will
            // after a hand-over it made (`Shared::drop_idle_entries`), so a waiter leaving
            // with one does not ring it just as the lock changes hands; any other rings.
            if !(self.used && self.handed_over.get()) {
                self.subscriber.ring();
            }
        }
    }
}

impl Shared {
    /// Drops the entries that lingered `linger` without waiters, and says when to look
    /// again: when the first that still lingers is due; or, if the thread handed something
    /// over since it last looked, once a waiter that leaves with it now would be due (it
    /// does not ring). The thread unsubscribes the channels of dropped entries as it
    /// reconciles.
    pub(super) fn drop_idle_entries(&self, now: Instant, linger: Duration) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        if self.handed_over.swap(false, Ordering::Relaxed) {
            // The waiter leaves a moment after its wake-up; allow for that moment.
            consider(now + linger + linger / 10);
        }
        self.entries.lock().retain(|_, entry| {
            let state = entry.state.lock();
            match state.idle_since.filter(|_| state.queue.is_empty()) {
                Some(since) if now >= since + linger => false,
                Some(since) => {
                    consider(since + linger);
                    true
                }
                None => true,
            }
        });
        next
    }
}
