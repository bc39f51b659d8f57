//! The subscriber thread: one pub/sub connection per client, waking waiting threads.
//!
//! # Entries and waiters
//! Threads waiting for the same lock share one [`Entry`] keyed by the lock's channel. Each
//! waiter owns a [`Slot`] in the entry's FIFO queue and parks on it; a slot holds at most one
//! *permit* (a wake-up). Together the slots form a fair counting semaphore:
//! - an `unlock` message grants one permit, to the oldest waiter that has none (one release
//!   wakes one local waiter: no herd);
//! - a `force` message (force-unlock), a confirmed subscription and a reconnect grant a permit
//!   to every waiter, so each retries once;
//! - a permit granted while its waiter is busy stays set, so a message that arrives between a
//!   waiter's attempt and its sleep is not lost;
//! - a waiter that leaves with a permit it never used passes it to the next one.
//!
//! # Waking the thread without polling
//! The thread blocks on a read of the pub/sub connection and uses no CPU while idle. To make it
//! (un)subscribe, a waiter records what it wants in the entry map and rings the thread:
//! through Redis, by publishing on the client's own control channel (to which the connection
//! is subscribed), and through an in-process doorbell for when it is not connected. The thread
//! then reconciles the connection's subscriptions with the entry map. The sync `redis`
//! connection cannot be written by one thread while another blocks reading it, so this costs
//! a PUBLISH round trip plus the SUBSCRIBE round trip; concurrent requests share one ring. A
//! joining waiter rings itself (it is about to wait anyway); a leaving one has the renewal
//! thread ring for it, so that a thread that just got its lock returns at once.
//!
//! Only the answer to the *last* SUBSCRIBE sent for a channel confirms it: an older answer can
//! arrive after the channel was unsubscribed and wanted again, before the server has seen the
//! new SUBSCRIBE.
//!
//! # Failure
//! When the connection fails the thread reconnects with backoff, resubscribes every channel
//! that has waiters, and the confirmations give every waiter a permit. Meanwhile, and whenever
//! a message is lost, waiters still wake when the lock's TTL or their deadline says so. A
//! refused SUBSCRIBE (an ACL without our channels) is logged and retried with backoff; waiting
//! then degrades to waking at the lock's TTL. A connection that carried nothing for
//! [`IDLE_TIMEOUT`] is given up, and made anew only if threads still wait.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::{Condvar, Mutex};
use redis::{Connection, PushKind, RedisResult, Value};

use crate::connection::Backend;

/// Payload of a release's message: wake one waiter.
const UNLOCK: &[u8] = b"unlock";
/// Payload of a force-unlock's message: wake every waiter.
const FORCE: &[u8] = b"force";

const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// A pub/sub connection with no traffic for this long is given up (and made anew if threads
/// still wait, which wakes each of them once).
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The handle the rest of the client uses; the thread runs [`Subscriber::run`].
pub(crate) struct Subscriber {
    shared: Arc<Shared>,
    backend: Arc<Backend>,
    /// To the renewal thread, which rings on behalf of leaving waiters.
    ring_requests: Sender<()>,
}

struct Shared {
    /// Channels that have waiters. The thread subscribes exactly these (plus control).
    entries: Mutex<HashMap<String, Arc<Entry>>>,
    control_channel: String,
    /// The connection is up and subscribed to the control channel, so a PUBLISH reaches it.
    connected: AtomicBool,
    /// A control message is on its way; later requests need not send another.
    ring_in_flight: AtomicBool,
    stop: AtomicBool,
    doorbell: Sender<()>,
}

impl Shared {
    /// A message on a lock's channel: a release wakes one waiter, a force-unlock all.
    fn deliver(&self, channel: &[u8], payload: &[u8]) {
        let entry = std::str::from_utf8(channel)
            .ok()
            .and_then(|ch| self.entries.lock().get(ch).cloned());
        if let Some(entry) = entry {
            let state = entry.state.lock();
            if payload == UNLOCK {
                Entry::wake_one(&state);
            } else if payload == FORCE {
                Entry::wake_all(&state);
            }
        }
    }
}

/// The waiters of one lock in this client.
struct Entry {
    channel: String,
    state: Mutex<EntryState>,
}

struct EntryState {
    /// Redis confirmed the subscription for this entry's current connection.
    confirmed: bool,
    /// Until when the lock was last seen held by someone else, by any of these waiters.
    busy_until: Instant,
    queue: VecDeque<Arc<Slot>>,
}

/// Where one waiting thread parks.
#[derive(Default)]
struct Slot {
    permit: Mutex<bool>,
    wake: Condvar,
}

impl Slot {
    fn grant(&self) -> bool {
        let mut permit = self.permit.lock();
        if *permit {
            return false;
        }
        *permit = true;
        self.wake.notify_one();
        true
    }
}

impl Entry {
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

    fn confirm(&self) {
        let mut state = self.state.lock();
        if !state.confirmed {
            state.confirmed = true;
            Entry::wake_all(&state);
        }
    }
}

impl Subscriber {
    /// Creates the handle and the task for the subscriber thread. `ring_requests` goes to the
    /// thread that will call [`Subscriber::ring`] for waiters that leave.
    pub fn new(
        backend: Arc<Backend>,
        control_channel: String,
        ring_requests: Sender<()>,
    ) -> (Subscriber, SubscriberTask) {
        let (doorbell, rung) = crossbeam_channel::bounded(1);
        let shared = Arc::new(Shared {
            entries: Mutex::new(HashMap::new()),
            control_channel,
            connected: AtomicBool::new(false),
            ring_in_flight: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            doorbell,
        });
        let task = SubscriberTask {
            shared: shared.clone(),
            backend: backend.clone(),
            rung,
        };
        (
            Subscriber {
                shared,
                backend,
                ring_requests,
            },
            task,
        )
    }

    /// Registers the calling thread, whose attempt just found the lock busy for `ttl`, as a
    /// waiter on `channel`, subscribing the channel if this is its first waiter. The waiter's
    /// first [`Waiter::wait`] returns once the subscription is confirmed (at once if it
    /// already is), so its next attempt cannot miss a release.
    pub fn join(&self, channel: &str, ttl: Duration) -> Waiter<'_> {
        let slot = Arc::new(Slot::default());
        let busy_until = Instant::now() + ttl;
        let (entry, created) = {
            let mut entries = self.shared.entries.lock();
            let (entry, created) = match entries.get(channel) {
                Some(entry) => (entry.clone(), false),
                None => {
                    let entry = Arc::new(Entry {
                        channel: channel.to_string(),
                        state: Mutex::new(EntryState {
                            confirmed: false,
                            busy_until,
                            queue: VecDeque::new(),
                        }),
                    });
                    entries.insert(channel.to_string(), entry.clone());
                    (entry, true)
                }
            };
            let mut state = entry.state.lock();
            state.busy_until = busy_until;
            if state.confirmed {
                // Subscribed already: the attempt after joining may go at once.
                *slot.permit.lock() = true;
            }
            state.queue.push_back(slot.clone());
            drop(state);
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
        }
    }

    /// Queues the calling thread behind the threads of this client already waiting on
    /// `channel`, without a permit: it will be woken in its turn. `None` if nobody waits.
    ///
    /// This is what keeps a client fair to its own threads. A thread that has just released
    /// a lock and asks for it again would otherwise reach Redis before the waiter its release
    /// woke (which first needs the message, a thread wake-up and a round trip), and take the
    /// lock straight back, again and again, while the waiters time out.
    pub fn join_behind_waiters(&self, channel: &str) -> Option<(Waiter<'_>, Duration)> {
        let slot = Arc::new(Slot::default());
        let entries = self.shared.entries.lock();
        let entry = entries.get(channel)?.clone();
        let mut state = entry.state.lock();
        if state.queue.is_empty() {
            return None;
        }
        state.queue.push_back(slot.clone());
        // Nobody ahead may ever be woken (a holder that died sends no message): sleep no
        // longer than the lock was last seen to be busy for.
        let ttl = state.busy_until.saturating_duration_since(Instant::now());
        drop(state);
        drop(entries);
        Some((
            Waiter {
                subscriber: self,
                entry,
                slot,
                used: false,
            },
            ttl,
        ))
    }

    /// Makes the thread reconcile its subscriptions with the entry map: publishes on the
    /// control channel and waits for Redis to take it (one round trip).
    pub fn ring(&self) {
        let _ = self.shared.doorbell.try_send(());
        if self.shared.connected.load(Ordering::SeqCst)
            && !self.shared.ring_in_flight.swap(true, Ordering::SeqCst)
        {
            match self.publish_control("reconcile", true) {
                // 0 receivers: the connection is gone; the thread reconciles on reconnect.
                Ok(receivers) if receivers > 0 => {}
                Ok(_) => self.shared.ring_in_flight.store(false, Ordering::SeqCst),
                Err(e) => {
                    log::debug!("could not wake the subscriber thread: {e}");
                    self.shared.ring_in_flight.store(false, Ordering::SeqCst);
                }
            }
        }
    }

    /// Publishes `what` on the control channel; the number of receivers.
    fn publish_control(&self, what: &str, retry: bool) -> crate::Result<i64> {
        let channel = &self.shared.control_channel;
        let publish = |con: &mut Connection| {
            redis::cmd("PUBLISH")
                .arg(channel)
                .arg(what)
                .query::<i64>(con)
        };
        if retry {
            self.backend.run(publish)
        } else {
            self.backend.run_once_only(publish)
        }
    }

    /// Has the client's renewal thread ring for us: for a waiter leaving, which has just got
    /// the lock or run out of time and should not spend a round trip on housekeeping. The
    /// renewal thread calls [`Subscriber::ring`] when it receives this.
    fn ring_later(&self) {
        let _ = self.shared.doorbell.try_send(());
        let _ = self.ring_requests.try_send(());
    }

    /// Asks the thread to end; it does at its next wake-up, which this causes if Redis answers
    /// (one attempt: a drop must not wait on a server that does not), else within
    /// [`IDLE_TIMEOUT`].
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = self.shared.doorbell.try_send(());
        if self.shared.connected.load(Ordering::SeqCst) {
            let _ = self.publish_control("stop", false);
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
}

impl Waiter<'_> {
    /// Sleeps until a permit arrives or `timeout` passes; `true` if woken by a permit.
    ///
    /// A sleep that ends without a permit while the channel is still not subscribed rings
    /// the subscriber thread again: the ring that should have subscribed it may have failed,
    /// and no later waiter of this lock would ring.
    pub fn wait(&self, timeout: Duration) -> bool {
        let woken = {
            let mut permit = self.slot.permit.lock();
            if !*permit {
                // Spurious wake-ups re-check the permit; the timeout is absolute.
                let _ = self.slot.wake.wait_while_for(&mut permit, |p| !*p, timeout);
            }
            std::mem::replace(&mut *permit, false)
        };
        if !woken && !self.entry.state.lock().confirmed {
            self.subscriber.ring();
        }
        woken
    }

    /// Records that the lock was found held for `ttl` more, for threads queueing behind.
    pub fn saw_busy(&self, ttl: Duration) {
        self.entry.state.lock().busy_until = Instant::now() + ttl;
    }

    /// The waiter got the lock: nothing to pass on when it leaves.
    pub fn acquired(&mut self) {
        self.used = true;
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let shared = &self.subscriber.shared;
        let mut entries = shared.entries.lock();
        let mut state = self.entry.state.lock();
        state.queue.retain(|s| !Arc::ptr_eq(s, &self.slot));
        let unused_permit = std::mem::replace(&mut *self.slot.permit.lock(), false);
        if unused_permit && !self.used {
            Entry::wake_one(&state);
        }
        let last = state.queue.is_empty();
        drop(state);
        if last {
            if entries
                .get(&self.entry.channel)
                .is_some_and(|e| Arc::ptr_eq(e, &self.entry))
            {
                entries.remove(&self.entry.channel);
            }
            drop(entries);
            self.subscriber.ring_later();
        }
    }
}

/// What the subscriber thread owns.
pub(crate) struct SubscriberTask {
    shared: Arc<Shared>,
    backend: Arc<Backend>,
    rung: Receiver<()>,
}

/// What the thread knows about one channel of its connection.
#[derive(Default)]
struct ChannelState {
    /// SUBSCRIBE commands sent for it and not yet answered.
    pending: u32,
    /// We want it subscribed (the last command sent for it was SUBSCRIBE).
    wanted: bool,
}

impl SubscriberTask {
    /// The thread's body: connect when there are waiters, serve, reconnect, until stopped.
    pub fn run(self) {
        let mut backoff = BACKOFF_MIN;
        while !self.stopping() {
            if self.shared.entries.lock().is_empty() {
                // Nobody waits: hold no connection until somebody does (or we stop).
                if self.rung.recv().is_err() {
                    return;
                }
                continue;
            }
            // Rings that came while we served or slept are answered by connecting now.
            while self.rung.try_recv().is_ok() {}
            let started = Instant::now();
            let failure = match self.backend.connect() {
                Ok(con) => self.serve(con).err(),
                Err(e) => Some(e),
            };
            self.disconnected();
            let Some(e) = failure else {
                backoff = BACKOFF_MIN;
                continue; // given up on purpose (idle, or stopping)
            };
            if self.stopping() {
                return;
            }
            if started.elapsed() > BACKOFF_MAX * 2 {
                backoff = BACKOFF_MIN; // it had worked for a while
            }
            log::warn!(
                "redlatch pub/sub connection failed: {e}; waiters wake at their lock's TTL \
                 until it is back; retrying in {backoff:?}"
            );
            // Failing fast, again and again (refused, or closed at once): back off. Rings
            // do not cut the pause short; only a stop does.
            let until = Instant::now() + backoff;
            loop {
                match self.rung.recv_deadline(until) {
                    Ok(()) if self.stopping() => return,
                    Ok(()) => {}
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    fn stopping(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }

    /// Reads the connection until it fails, falls idle, or the client stops. `Ok` when it
    /// ended on purpose.
    fn serve(&self, mut con: Connection) -> RedisResult<()> {
        // Idle, the thread sleeps in the kernel. The long timeout bounds how long it outlives a
        // stopped client whose stop message could not be sent, and lets it give the connection
        // up when nobody has waited for a while; TCP keepalive finds a dead peer sooner.
        con.set_read_timeout(Some(IDLE_TIMEOUT))?;
        let control = self.shared.control_channel.clone();
        let mut channels: HashMap<String, ChannelState> = HashMap::new();
        con.send_packed_command(&redis::cmd("SUBSCRIBE").arg(&control).get_packed_command())?;
        while !self.stopping() {
            let value = match con.recv_response() {
                Ok(value) => value,
                // Quiet for IDLE_TIMEOUT: give the connection up (a timed-out read leaves it
                // out of step anyway). `run` makes a new one if threads still wait.
                Err(e) if e.is_timeout() => return Ok(()),
                Err(e) => return Err(e),
            };
            if let Value::ServerError(e) = value {
                // A refused SUBSCRIBE (an ACL without our channels, say): `run` says so and
                // tries again later.
                return Err(e.into());
            }
            let Some((kind, channel, payload)) = parse_push(value) else {
                continue;
            };
            match kind.as_slice() {
                b"message" if channel == control.as_bytes() => {
                    self.shared.ring_in_flight.store(false, Ordering::SeqCst);
                    self.reconcile(&mut con, &mut channels)?;
                }
                b"message" => self.shared.deliver(&channel, &payload),
                b"subscribe" if channel == control.as_bytes() => {
                    self.shared.connected.store(true, Ordering::SeqCst);
                    self.shared.ring_in_flight.store(false, Ordering::SeqCst);
                    self.reconcile(&mut con, &mut channels)?;
                }
                b"subscribe" => {
                    let Ok(channel) = String::from_utf8(channel) else {
                        continue;
                    };
                    let Some(state) = channels.get_mut(&channel) else {
                        continue;
                    };
                    state.pending = state.pending.saturating_sub(1);
                    // Only the answer to the *last* SUBSCRIBE confirms: an older one may
                    // precede an UNSUBSCRIBE that the server has not processed yet.
                    if state.pending > 0 {
                        continue;
                    }
                    if !state.wanted {
                        channels.remove(&channel);
                        continue;
                    }
                    let entry = self.shared.entries.lock().get(&channel).cloned();
                    if let Some(entry) = entry {
                        entry.confirm();
                    }
                }
                _ => {} // unsubscribe confirmations, pongs
            }
        }
        Ok(())
    }

    /// Subscribes channels that gained waiters, unsubscribes those that lost them, and
    /// confirms new entries whose channel was subscribed all along.
    fn reconcile(
        &self,
        con: &mut Connection,
        channels: &mut HashMap<String, ChannelState>,
    ) -> RedisResult<()> {
        let mut to_subscribe = Vec::new();
        let mut to_unsubscribe = Vec::new();
        {
            let entries = self.shared.entries.lock();
            for (channel, entry) in entries.iter() {
                let state = channels.entry(channel.clone()).or_default();
                if !state.wanted {
                    state.wanted = true;
                    state.pending += 1;
                    to_subscribe.push(channel.clone());
                } else if state.pending == 0 {
                    entry.confirm(); // subscribed all along
                }
            }
            channels.retain(|channel, state| {
                if state.wanted && !entries.contains_key(channel) {
                    state.wanted = false;
                    to_unsubscribe.push(channel.clone());
                }
                // Keep a channel whose SUBSCRIBE is unanswered: its answer must not confirm
                // a later entry.
                state.wanted || state.pending > 0
            });
        }
        if !to_subscribe.is_empty() {
            con.send_packed_command(
                &redis::cmd("SUBSCRIBE")
                    .arg(&to_subscribe)
                    .get_packed_command(),
            )?;
        }
        if !to_unsubscribe.is_empty() {
            con.send_packed_command(
                &redis::cmd("UNSUBSCRIBE")
                    .arg(&to_unsubscribe)
                    .get_packed_command(),
            )?;
        }
        Ok(())
    }

    /// The connection is gone: nothing is confirmed until the next one says so.
    fn disconnected(&self) {
        self.shared.connected.store(false, Ordering::SeqCst);
        self.shared.ring_in_flight.store(false, Ordering::SeqCst);
        for entry in self.shared.entries.lock().values() {
            entry.state.lock().confirmed = false;
        }
    }
}

/// Splits a pub/sub frame into kind, channel and payload (or count). RESP2 sends an array
/// `[kind, channel, payload]`; RESP3 a push whose kind is separate from `[channel, payload]`.
fn parse_push(value: Value) -> Option<(Vec<u8>, Vec<u8>, Vec<u8>)> {
    let (kind, items) = match value {
        Value::Array(items) => {
            let mut items = items.into_iter();
            let kind = bytes(items.next()?)?;
            (kind, items.collect::<Vec<_>>())
        }
        Value::Push { kind, data } => {
            let kind = match kind {
                PushKind::Message => "message",
                PushKind::Subscribe => "subscribe",
                PushKind::Unsubscribe => "unsubscribe",
                _ => return None,
            };
            (kind.as_bytes().to_vec(), data)
        }
        _ => return None,
    };
    let mut items = items.into_iter();
    let channel = bytes(items.next()?)?;
    let payload = items.next().and_then(bytes).unwrap_or_default();
    Some((kind, channel, payload))
}

fn bytes(v: Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    //! The in-process half of waking: which waiter gets which permit. No Redis is involved:
    //! messages are handed to the entries as the subscriber thread would hand them.
    use super::*;
    use crate::connection::Settings;

    fn subscriber() -> Subscriber {
        let settings = Settings {
            pool_size: 1,
            connect_timeout: Duration::from_millis(10),
            response_timeout: Duration::from_millis(10),
        };
        // Never connected: rings go to the doorbell only, and nothing here does I/O.
        let backend = Arc::new(Backend::new("redis://127.0.0.1:1/", settings).unwrap());
        Subscriber::new(
            backend,
            "p:control:test".into(),
            crossbeam_channel::bounded(1).0,
        )
        .0
    }

    const NOW: Duration = Duration::ZERO;
    const TTL: Duration = Duration::from_secs(30);

    #[test]
    fn one_release_wakes_the_oldest_waiter_only() {
        let sub = subscriber();
        let first = sub.join("ch", TTL);
        let second = sub.join("ch", TTL);
        sub.deliver(b"ch", UNLOCK);
        assert!(first.wait(NOW));
        assert!(!second.wait(NOW));
        sub.deliver(b"ch", UNLOCK);
        assert!(first.wait(NOW) || second.wait(NOW));
    }

    #[test]
    fn a_permit_waits_for_a_busy_waiter_and_does_not_pile_up() {
        let sub = subscriber();
        let waiter = sub.join("ch", TTL);
        sub.deliver(b"ch", UNLOCK);
        sub.deliver(b"ch", UNLOCK); // a second release while the first permit is unused
        assert!(waiter.wait(NOW), "a permit granted before the wait is kept");
        assert!(!waiter.wait(NOW), "one waiter holds at most one permit");
    }

    #[test]
    fn a_waiter_leaving_with_an_unused_permit_passes_it_on() {
        let sub = subscriber();
        let leaving = sub.join("ch", TTL);
        let staying = sub.join("ch", TTL);
        sub.deliver(b"ch", UNLOCK);
        drop(leaving); // its deadline passed before it used the wake-up
        assert!(staying.wait(NOW));
    }

    #[test]
    fn a_waiter_that_acquired_keeps_its_permit_to_itself() {
        let sub = subscriber();
        let mut winner = sub.join("ch", TTL);
        let other = sub.join("ch", TTL);
        sub.deliver(b"ch", UNLOCK);
        winner.acquired();
        drop(winner);
        assert!(!other.wait(NOW));
    }

    #[test]
    fn force_unlock_and_confirmation_wake_everyone_once() {
        let sub = subscriber();
        let waiters: Vec<_> = (0..3).map(|_| sub.join("ch", TTL)).collect();
        sub.deliver(b"ch", FORCE);
        assert!(waiters.iter().all(|w| w.wait(NOW)));
        assert!(waiters.iter().all(|w| !w.wait(NOW)));

        let entry = sub.shared.entries.lock().get("ch").cloned().unwrap();
        entry.confirm();
        assert!(waiters.iter().all(|w| w.wait(NOW)));
        // Once confirmed, a newcomer may try at once.
        let late = sub.join("ch", TTL);
        assert!(late.wait(NOW));
    }

    #[test]
    fn a_newcomer_queues_behind_waiters_without_a_permit() {
        let sub = subscriber();
        assert!(
            sub.join_behind_waiters("ch").is_none(),
            "nobody waits: go to Redis"
        );
        let first = sub.join("ch", Duration::from_millis(500));
        let entry = sub.shared.entries.lock().get("ch").cloned().unwrap();
        entry.confirm();
        assert!(first.wait(NOW));
        let (late, ttl) = sub.join_behind_waiters("ch").expect("queued");
        assert!(ttl <= Duration::from_millis(500) && ttl > Duration::from_millis(100));
        assert!(!late.wait(NOW), "a newcomer waits its turn");
        sub.deliver(b"ch", UNLOCK);
        assert!(
            first.wait(NOW) && !late.wait(NOW),
            "the older waiter goes first"
        );
        drop(first);
        sub.deliver(b"ch", UNLOCK);
        assert!(late.wait(NOW));
    }

    #[test]
    fn messages_for_other_channels_wake_nobody() {
        let sub = subscriber();
        let waiter = sub.join("ch", TTL);
        sub.deliver(b"other", UNLOCK);
        sub.deliver(b"ch", b"something else");
        assert!(!waiter.wait(NOW));
    }

    #[test]
    fn the_entry_goes_when_its_last_waiter_leaves() {
        let sub = subscriber();
        let a = sub.join("ch", TTL);
        let b = sub.join("ch", TTL);
        drop(a);
        assert!(sub.shared.entries.lock().contains_key("ch"));
        drop(b);
        assert!(!sub.shared.entries.lock().contains_key("ch"));
    }

    #[test]
    fn a_parked_waiter_is_woken_by_a_release() {
        let sub = Arc::new(subscriber());
        let waiter = sub.join("ch", TTL);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                sub.deliver(b"ch", UNLOCK);
            });
            assert!(waiter.wait(Duration::from_secs(10)));
        });
    }
}
