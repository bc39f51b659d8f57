//! The subscriber thread: one per client, listening for releases and waking waiting threads.
//!
//! This module is the handle ([`Subscriber`]) the rest of the client holds and what it shares
//! with the thread. Which thread wakes for which message, the in-process semaphore of the
//! waiters, is [`waiters`] (no I/O); the thread's connections are [`polled`] (over the
//! streams of [`socket`], the frames of [`resp`]).
//!
//! # Connections
//! The thread drives its own non-blocking sockets in one poll ([`polled`]), over plain TCP,
//! TLS or a unix socket ([`socket`]), with a heartbeat on each. On a Redis 7 Cluster it uses
//! sharded pub/sub, one connection per shard that has waiters, so a release's SPUBLISH
//! reaches only the shard that owns the lock; elsewhere one connection with SUBSCRIBE.
//!
//! Each lock (or read-write lock, or semaphore) with waiters here is subscribed with two
//! channels in one command: the object's own, and its grant channel for this client, on
//! which a release hands the object to our waiters
//! ([`LockKeys::grant_channel`](crate::keys::LockKeys::grant_channel)), so that a hand-off
//! wakes one client's subscriber however many clients wait. A latch has only its channel.
//!
//! A waiter records what it wants in the entry map and *rings* the thread (in process,
//! through the poll's waker: no round trip), which reconciles its subscriptions with the map.
//! An entry whose last waiter left lingers ([`LINGER`]) before the thread
//! drops it and unsubscribes, so that threads that queue for the same lock again and again do
//! not subscribe each time.
//!
//! # Failure
//! When a connection fails the thread reconnects with backoff, resubscribes every channel
//! that has waiters, and the confirmations give every waiter a permit. Meanwhile, and whenever
//! a message is lost, waiters still wake when the lock's TTL or their deadline says so. A
//! refused subscription (an ACL without our channels) is retried with backoff, and logged
//! as a warning once per channel pattern to grant, then at debug level; waiting then
//! degrades to waking at the lock's TTL (the releases' publishes cannot fail the release:
//! the scripts send them with `redis.pcall`). A frame the thread cannot use (a
//! message too big to keep, which anyone with PUBLISH on the channel can send) is read past
//! and costs only itself; a connection fails only on bytes that are not RESP, which no answer
//! to our commands can be, since no channel we subscribe is too long to read back. A
//! connection that carried nothing for [`IDLE_TIMEOUT`] is given up, and made anew only if
//! threads still wait.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::backend::Backend;
use crate::keys::LockKeys;
use crate::scripts::Dialect;
use crate::stats::Counters;

mod polled;
mod resp;
mod socket;
mod waiters;

/// The fuzz targets (`fuzz/`) read the subscriber's frames through `crate::fuzzing`.
#[cfg(fuzzing)]
pub(crate) use resp::{Frame, Reader};
use waiters::{Arriving, Entry};
pub(crate) use waiters::{Expecting, Wake, last_message_wake};

const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// A pub/sub connection with no traffic for this long is given up (and made anew if threads
/// still wait, which wakes each of them once).
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A lock's channel stays subscribed this long after its last waiter in this client left. A thread that queues again meanwhile (a busy lock handed round) finds it
/// subscribed since before its attempt, so it needs no SUBSCRIBE and no second attempt after
/// the confirmation; and the waiter that leaves with the lock does not ring the thread just as
/// the lock changes hands: the thread, which handed it over, looks again once this has
/// passed. A waiter that leaves otherwise (its time ran out, an error, an attempt of its own)
/// rings it, so that it looks then too. The cost is a subscription kept a moment longer.
pub(crate) const LINGER: Duration = Duration::from_millis(100);

/// Work the subscriber hands to the renewal thread, so that neither it nor a waiter spends
/// a round trip on it.
pub(crate) enum Errand {
    /// The lock was handed to `owner` of ours, which no longer waits: give it back, unless
    /// it was taken up after all (by an attempt or a withdrawal of that owner, which remove
    /// the record of the hand-over in Redis, or from the message, which registers the hold
    /// here).
    GiveBack {
        keys: Arc<LockKeys>,
        owner: Arc<str>,
        token: u64,
        /// The hand-over's lease.
        lease: Duration,
    },
}

/// The handle the rest of the client uses; the thread runs [`SubscriberTask::run`].
pub(crate) struct Subscriber {
    shared: Arc<Shared>,
}

struct Shared {
    /// Channels that have waiters. The thread subscribes exactly these.
    entries: Mutex<HashMap<String, Arc<Entry>>>,
    /// `<client id>:`, the start of every owner id of this client.
    owner_prefix: String,
    /// The client's id, which names its grant channels ([`LockKeys::grant_channel`]).
    client_id: String,
    /// The key prefix, to name a lock from its channel.
    key_prefix: String,
    /// The client's dialect, which reads the messages on its channels.
    dialect: &'static Dialect,
    stop: AtomicBool,
    /// Wakes the thread out of its poll, in process (no round trip).
    waker: mio::Waker,
    /// To the renewal thread, which runs errands.
    errands: Sender<Errand>,
    /// What the client counts (the thread counts lost connections).
    counters: Arc<Counters>,
    /// Owners about to queue for a lock (their attempt is in flight), by owner id: a
    /// hand-over that arrives before the owner's thread has joined the entry waits here for
    /// it.
    arriving: Mutex<HashMap<Arc<str>, Arriving>>,
    /// The thread handed something over since it last looked at the entries: a waiter is
    /// about to leave, perhaps the entry's last, without a ring (see [`LINGER`]).
    handed_over: AtomicBool,
    /// By lock channel, how many releases in a row handed the lock to a thread of this
    /// client ([`Subscriber::local_successor`]); only locks in such a streak have one.
    local_streaks: Mutex<HashMap<String, u32>>,
}

impl Subscriber {
    /// Creates the handle and the task for the subscriber thread. `errands` goes to the
    /// thread that runs them (the renewal thread): see [`Errand`].
    pub fn new(
        backend: Arc<Backend>,
        key_prefix: &str,
        client_id: &str,
        dialect: &'static Dialect,
        errands: Sender<Errand>,
        counters: Arc<Counters>,
    ) -> crate::error::Result<(Subscriber, SubscriberTask)> {
        let poll = polled::Poller::new().map_err(crate::error::Error::Thread)?;
        let shared = Arc::new(Shared {
            entries: Mutex::new(HashMap::new()),
            owner_prefix: format!("{client_id}:"),
            client_id: client_id.to_string(),
            key_prefix: key_prefix.to_string(),
            dialect,
            stop: AtomicBool::new(false),
            waker: poll.waker().map_err(crate::error::Error::Thread)?,
            errands,
            counters,
            arriving: Mutex::new(HashMap::new()),
            handed_over: AtomicBool::new(false),
            local_streaks: Mutex::new(HashMap::new()),
        });
        let task = SubscriberTask(polled::PolledTask::new(shared.clone(), backend, poll));
        Ok((Subscriber { shared }, task))
    }
    /// Makes the thread reconcile its subscriptions with the entry map: wakes it in process,
    /// which costs no round trip, so a leaving waiter rings on its way out too.
    pub fn ring(&self) {
        if let Err(e) = self.shared.waker.wake() {
            log::warn!("could not wake the subscriber thread: {e}");
        }
    }

    /// Threads waiting now, and channels that have waiters (which the thread subscribes).
    pub fn waiting(&self) -> (u64, u64) {
        let entries = self.shared.entries.lock();
        let threads = entries.values().map(|e| e.waiters()).sum();
        (threads, entries.len() as u64)
    }

    /// Asks the thread to end; it does at once, woken out of its poll.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.ring();
    }
}

/// The thread's work: see [`polled`].
pub(crate) struct SubscriberTask(polled::PolledTask);

impl SubscriberTask {
    /// The thread's body: until the client stops.
    pub fn run(self) {
        self.0.run()
    }
}
