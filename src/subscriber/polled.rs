//! Pub/sub: the subscriber thread drives its own sockets, one per server that has waiters,
//! all in one `mio` poll: plain TCP, TLS (rustls over the non-blocking socket, see
//! [`super::socket`]) or a unix socket, whichever the URL names. This task decides what each
//! connection subscribes and hands what comes to the waiters; where a channel belongs is
//! [`routes`], and each connection's own work (dialling, reading, writing, answer deadlines)
//! is a [`shard`].
//!
//! # Following the server or the slots
//! A connection that fails, a subscription refused (MOVED, while a slot moves), one that the
//! server ends by itself (Redis unsubscribes a slot's shard channels when the slot leaves the
//! node), or a new Sentinel generation makes the thread find out again where each channel
//! belongs and subscribe it there. Until the new subscription is confirmed the lock's entry
//! is unconfirmed; the confirmation gives its waiters a permit, so a release missed meanwhile
//! costs one attempt, and waiters never sleep past the lock's TTL in any case.
//!
//! # One thread, no blocking
//! The thread serves every connection at once: they are non-blocking sockets in one poll,
//! which a waiter's ring wakes in process (no round trip). We drive these connections
//! ourselves (AUTH, (S)SUBSCRIBE, PING, and the RESP2 frames in [`super::resp`]) because the
//! `redis` crate's sync connection cannot be polled, and because after a read of it times out
//! it drops the next frame as a late reply, so a heartbeat cannot be added to a blocking read
//! of it either.
//!
//! # Liveness
//! Every command must be answered within the response timeout (a connection still being
//! made, TLS handshake included, gets the connect timeout on top): a server stopped with
//! SIGSTOP accepts connections and says nothing. A connection with subscriptions that was
//! quiet for [`HEARTBEAT`] sends a PING, so a server that went silent is noticed while
//! threads wait on it, whatever the transport (Sentinel then names the new master; a
//! Cluster's slot map shows the promoted replica). A connection with no subscriptions for
//! [`IDLE_TIMEOUT`] is closed.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};

use super::resp::{self, Frame};
use super::socket::Dial;
use super::waiters::Entry;
use super::{BACKOFF_MAX, BACKOFF_MIN, IDLE_TIMEOUT, LINGER, Shared};
use crate::backend::Backend;
use crate::keys::{MAX_NAME_LEN, MAX_PREFIX_LEN};
use refusals::Refusals;
use routes::Routes;
use shard::{Sent, Shard};

mod refusals;
mod routes;
mod shard;

/// The longest channel whose subscription confirmation and messages the reader keeps whole.
const MAX_CHANNEL: usize = resp::MAX_BULK;

// The name and prefix limits exist so that every lock's channel can be read back.
// A grant channel adds `:<client id>`, a UUID.
const _: () =
    assert!(MAX_PREFIX_LEN + ":{".len() + MAX_NAME_LEN + "}:unlocked:".len() + 36 <= MAX_CHANNEL);

/// A connection with subscriptions and nothing to say for this long sends a PING.
pub(super) const HEARTBEAT: Duration = Duration::from_secs(5);

const WAKER: Token = Token(0);

/// The thread's poll, made before the task so that the handle can hold its waker.
pub(super) struct Poller(Poll);

impl Poller {
    /// A poll with no socket in it yet.
    pub fn new() -> io::Result<Poller> {
        Poll::new().map(Poller)
    }

    /// The one waker of this poll: rings the thread.
    pub fn waker(&self) -> io::Result<Waker> {
        Waker::new(self.0.registry(), WAKER)
    }
}

/// The thread's side of polled pub/sub.
pub(super) struct PolledTask {
    shared: Arc<Shared>,
    backend: Arc<Backend>,
    poll: Poll,
    routes: Routes,
    shards: Vec<Shard>,
    /// Channels of entries that are never subscribed, because their confirmations and
    /// messages would be too long to read (see [`MAX_CHANNEL`]); kept to warn once.
    unreadable: HashSet<String>,
    /// Subscriptions the ACL refused, said once per pattern to grant.
    refusals: Refusals,
    next_token: usize,
    /// After a failure, no new connection, subscription or slot map before this.
    paused_until: Option<Instant>,
    backoff: Duration,
    /// When to look at the entries again: one that lingers without waiters may be due to go.
    linger_ends: Option<Instant>,
}

impl PolledTask {
    pub(super) fn new(shared: Arc<Shared>, backend: Arc<Backend>, poller: Poller) -> Self {
        PolledTask {
            routes: Routes::new(backend.clone()),
            shared,
            backend,
            poll: poller.0,
            shards: Vec::new(),
            unreadable: HashSet::new(),
            refusals: Refusals::default(),
            next_token: 1,
            paused_until: None,
            backoff: BACKOFF_MIN,
            linger_ends: None,
        }
    }

    /// The thread's body: reconcile the connections with the entry map, sleep in the poll
    /// until a socket, a ring or a timer wakes it, serve what came; until the client stops.
    pub(super) fn run(mut self) {
        let mut events = Events::with_capacity(64);
        while !self.shared.stop.load(Ordering::SeqCst) {
            let now = Instant::now();
            self.reconcile(now);
            let timeout = self.next_timer().map(|t| t.saturating_duration_since(now));
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    log::error!("redlatch subscriber cannot poll its sockets: {e}");
                    std::thread::sleep(BACKOFF_MAX);
                }
                continue;
            }
            for event in events.iter() {
                let token = event.token();
                if token == WAKER {
                    continue;
                }
                let Some(i) = self.shards.iter().position(|s| s.token == token) else {
                    continue;
                };
                if let Err(e) = self.serve(i) {
                    self.fail(i, &e);
                }
            }
        }
    }

    /// Makes the connections match the entry map: subscribes the channels of locks that
    /// gained waiters on their slot's shard, unsubscribes those that lost them or moved, and
    /// confirms entries whose channel was subscribed all along. Also sends heartbeats, drops
    /// connections that did not answer in time, and closes idle ones.
    fn reconcile(&mut self, now: Instant) {
        self.linger_ends = self.shared.drop_idle_entries(now, LINGER);
        let entries: Vec<(String, Arc<Entry>)> = self
            .shared
            .entries
            .lock()
            .iter()
            .map(|(channel, entry)| (channel.clone(), entry.clone()))
            .collect();
        let verbs = self.routes.verbs();
        self.routes.follow_sentinel();
        let paused = self.paused_until.is_some_and(|until| now < until);
        if !paused {
            self.paused_until = None;
        }
        if !entries.is_empty() && self.routes.stale && !paused && !self.routes.read() {
            self.pause(Instant::now());
        }
        let paused = self.paused_until.is_some();

        // Where each channel should be subscribed now.
        let mut wanted: HashMap<&str, (String, &Arc<Entry>)> = HashMap::new();
        let mut unserved = false;
        self.unreadable
            .retain(|channel| entries.iter().any(|(c, _)| c == channel));
        for (channel, entry) in &entries {
            if channel.len() > MAX_CHANNEL {
                // Its confirmation could not be read, and the connection would fail again at
                // each try, taking every other lock's wake-ups with it. The name limits keep
                // our own locks' channels short; this guards the thread itself.
                if self.unreadable.insert(channel.clone()) {
                    log::warn!(
                        "redlatch: a channel of {} bytes is too long to subscribe; its waiters \
                         wake at the lock's TTL",
                        channel.len()
                    );
                }
                continue;
            }
            match self.routes.node_of(entry.keys.slot()) {
                Some(node) => {
                    wanted.insert(channel, (node.to_string(), entry));
                }
                None => unserved = true,
            }
        }
        if unserved && !paused {
            // A slot nobody serves (the map was read mid-failover): read it again in a while.
            self.routes.stale = true;
            self.pause(now);
        }
        for shard in &mut self.shards {
            let mut leaving = Vec::new();
            shard.channels.retain(|channel, state| {
                let here = wanted
                    .get(channel.as_str())
                    .filter(|(node, _)| *node == shard.node);
                if state.wanted && here.is_none() {
                    state.wanted = false;
                    // Still waited for: moved to another shard, or to no shard the map knows.
                    if let Some((_, entry)) = entries.iter().find(|(c, _)| c == channel) {
                        unconfirm(entry);
                    }
                    leaving.push(state.with_grant(channel));
                }
                // Keep a channel whose subscription is unanswered: its answer must not
                // confirm a later subscription.
                state.wanted || state.pending > 0
            });
            for channels in leaving {
                let command = redis::cmd(verbs.unsubscribe)
                    .arg(Vec::from(channels.clone()))
                    .get_packed_command();
                shard.send(&command, Sent::Unsubscribe(channels), now);
            }
        }
        for (channel, (node, entry)) in wanted {
            let i = match self.shards.iter().position(|s| s.node == node) {
                Some(i) => i,
                None if paused => continue,
                None => match self.open(&node, now) {
                    Ok(i) => i,
                    Err(e) => {
                        self.shared.counters.outage.failed(format_args!(
                            "redlatch cannot reach {node} for pub/sub: {e}; \
                             its waiters wake at their lock's TTL until it is back"
                        ));
                        self.routes.stale = true;
                        self.pause(now);
                        continue;
                    }
                },
            };
            let shard = &mut self.shards[i];
            let state = shard.channels.entry(channel.to_string()).or_default();
            if !state.wanted {
                if paused {
                    continue;
                }
                state.wanted = true;
                state.pending += 1;
                state.grant = entry.keys.grant_channel(&self.shared.client_id);
                let channels = state.with_grant(channel);
                let command = redis::cmd(verbs.subscribe)
                    .arg(Vec::from(channels.clone()))
                    .get_packed_command();
                shard.send(&command, Sent::Subscribe(channels), now);
            } else if state.pending == 0 {
                entry.confirm(); // subscribed all along
            }
        }

        let mut i = 0;
        while i < self.shards.len() {
            let shard = &mut self.shards[i];
            if shard.channels.is_empty() {
                shard.empty_since.get_or_insert(now);
            } else {
                shard.empty_since = None;
                if shard.sent.is_empty() && now >= shard.last_heard + HEARTBEAT {
                    shard.ping(now);
                }
            }
            if shard.connect_deadline().is_some_and(|by| now >= by) {
                let e = io::Error::new(io::ErrorKind::TimedOut, "no handshake in time");
                match shard.try_next_address(e, self.poll.registry(), now) {
                    Ok(()) => i += 1,
                    Err(e) => self.fail(i, &e), // removes it: `i` is the next one now
                }
                continue;
            }
            let failure = if shard.answer_deadline().is_some_and(|by| now >= by) {
                Some(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no answer within the response timeout",
                ))
            } else if shard.sent.is_empty()
                && shard
                    .empty_since
                    .is_some_and(|since| now >= since + IDLE_TIMEOUT)
            {
                self.shards.swap_remove(i).close(self.poll.registry());
                continue;
            } else {
                shard.flush(self.poll.registry()).err()
            };
            match failure {
                Some(e) => self.fail(i, &e), // removes it: `i` is the next one now
                None => i += 1,
            }
        }
    }

    /// The earliest time the thread must look again without being woken.
    fn next_timer(&self) -> Option<Instant> {
        let mut next = self.paused_until;
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        if let Some(ends) = self.linger_ends {
            consider(ends);
        }
        for shard in &self.shards {
            if let Some(by) = shard.connect_deadline() {
                consider(by);
            }
            if let Some(by) = shard.answer_deadline() {
                consider(by);
            } else if !shard.channels.is_empty() {
                consider(shard.last_heard + HEARTBEAT);
            } else if let Some(since) = shard.empty_since {
                consider(since + IDLE_TIMEOUT);
            }
        }
        next
    }

    /// Starts a connection to `node`; its handshake, AUTH and first subscription go out as the
    /// socket allows. The index of the new shard.
    fn open(&mut self, node: &str, now: Instant) -> io::Result<usize> {
        let dial = self.routes.dial(node)?;
        self.open_dial(node, dial, now)
    }

    /// [`PolledTask::open`] for `node`, reached as `dial` says.
    fn open_dial(&mut self, node: &str, dial: Dial, now: Instant) -> io::Result<usize> {
        let token = Token(self.next_token);
        self.next_token += 1;
        let auth = self.routes.auth.as_deref();
        let registry = self.poll.registry();
        let shard = Shard::open(node, dial, token, registry, auth, &self.backend, now)?;
        self.shards.push(shard);
        Ok(self.shards.len() - 1)
    }

    /// A socket is ready: finish the handshake, read and handle every whole frame, write.
    fn serve(&mut self, i: usize) -> io::Result<()> {
        if !self.shards[i].connect(self.poll.registry())? {
            return Ok(());
        }
        let (frames, mut failure) = self.shards[i].read();
        // Whatever ends the connection, the frames read before it are served: one bad frame
        // costs no other lock its wake-up. Once answers are out of step, messages still
        // name their channel and are still delivered; answers are not trusted.
        for frame in frames {
            if failure.is_none() {
                if let Err(e) = self.handle(i, frame) {
                    failure = Some(e);
                }
            } else {
                self.deliver_message(&frame);
            }
        }
        match failure {
            Some(e) => Err(e),
            None => self.shards[i].flush(self.poll.registry()),
        }
    }

    /// Delivers `frame` if it is a message on a channel; whether it was one. A message whose
    /// channel or payload was too long to keep is dropped: it cannot be one of ours.
    fn deliver_message(&self, frame: &Frame) -> bool {
        let Frame::Array(Some(items)) = frame else {
            return false;
        };
        if items.first().and_then(Frame::bytes) != Some(self.routes.verbs().message) {
            return false;
        }
        match (
            items.get(1).and_then(Frame::bytes),
            items.get(2).and_then(Frame::bytes),
        ) {
            (Some(channel), Some(payload)) => self.shared.deliver(channel, payload),
            _ => log::debug!("redlatch subscriber: a message it cannot read, dropped"),
        }
        true
    }

    /// One frame from shard `i`.
    fn handle(&mut self, i: usize, frame: Frame) -> io::Result<()> {
        if self.deliver_message(&frame) {
            return Ok(());
        }
        let shard = &mut self.shards[i];
        let part = |n: usize| match &frame {
            Frame::Array(Some(items)) => items.get(n).and_then(Frame::bytes).unwrap_or_default(),
            _ => &[],
        };
        let (kind, channel) = (part(0).to_vec(), part(1).to_vec());
        let verbs = self.routes.verbs();
        match kind.as_slice() {
            k if k == verbs.unsubscribed
                && !matches!(shard.sent.front(), Some((Sent::Unsubscribe(cs), _))
                    if cs.front().is_some_and(|c| c.as_bytes() == channel)) =>
            {
                // Not our request: the slot left this node, and its subscriptions with it.
                let channel = String::from_utf8_lossy(&channel).into_owned();
                if let Some(state) = shard.channels.get_mut(&channel) {
                    state.wanted = false;
                    if state.pending == 0 {
                        shard.channels.remove(&channel);
                    }
                    if let Some(entry) = self.shared.entries.lock().get(&channel) {
                        unconfirm(entry);
                    }
                    self.routes.stale = true;
                }
                return Ok(());
            }
            _ => {}
        }
        let Some((mut sent, by)) = shard.sent.pop_front() else {
            log::debug!("redlatch subscriber: unexpected frame from {}", shard.node);
            return Ok(());
        };
        // One answer per channel of a command that named several: the earlier ones (a grant
        // channel's) only need to name their channel; the command's last answer is handled
        // below, with the channel that `channels` tracks.
        let expected = match sent {
            Sent::Subscribe(_) => verbs.subscribed,
            _ => verbs.unsubscribed,
        };
        if let Some(channels) = sent.channels_mut().filter(|c| c.len() > 1)
            && !matches!(frame, Frame::Error(_))
        {
            if kind != expected || channels.front().map(String::as_bytes) != Some(&channel[..]) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("answer {frame:?} to {sent:?} from {}", shard.node),
                ));
            }
            channels.pop_front();
            shard.sent.push_front((sent, by));
            return Ok(());
        }
        match (sent, frame) {
            (Sent::Auth, Frame::Error(e)) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("AUTH refused: {e}"),
            )),
            (Sent::Subscribe(mut channels), Frame::Error(e)) => {
                let channel = channels.pop_back().unwrap_or_default();
                if let Some(state) = shard.channels.get_mut(&channel) {
                    state.pending = state.pending.saturating_sub(1);
                    if state.pending == 0 {
                        // Not subscribed: the next reconcile asks again, where the slot map
                        // says, after a pause.
                        shard.channels.remove(&channel);
                    }
                }
                if e.starts_with("MOVED") || e.starts_with("ASK") || e.starts_with("TRYAGAIN") {
                    log::debug!("redlatch: subscribing {channel} on {}: {e}", shard.node);
                } else {
                    self.refusals.said(&self.shared, &shard.node, &channel, &e);
                }
                self.routes.stale = true;
                self.pause(Instant::now());
                Ok(())
            }
            // The answer must name the channel: a slot that leaves the node as we unsubscribe
            // one of its channels makes the node push sunsubscribe, which we take for our
            // answer, and then answer MOVED, which we take for the next command's: every
            // later answer would be filed one command early. Any other answer is out of step:
            // the last arm fails the connection, and the next one starts in step.
            (Sent::Subscribe(mut ours), _)
                if kind == verbs.subscribed
                    && ours.back().is_some_and(|c| c.as_bytes() == channel) =>
            {
                let channel = ours.pop_back().unwrap_or_default();
                let Some(state) = shard.channels.get_mut(&channel) else {
                    return Ok(());
                };
                state.pending = state.pending.saturating_sub(1);
                // Only the answer to the *last* subscription confirms: an older one may precede
                // an SUNSUBSCRIBE that the server has not processed yet.
                if state.pending > 0 {
                    return Ok(());
                }
                if !state.wanted {
                    shard.channels.remove(&channel);
                    return Ok(());
                }
                self.backoff = BACKOFF_MIN;
                self.shared.counters.outage.answered();
                let entry = self.shared.entries.lock().get(&channel).cloned();
                // Not if the channel has moved to another connection since it was sent.
                let node = &self.shards[i].node;
                if let Some(entry) = entry
                    && self.routes.node_of(entry.keys.slot()) == Some(node.as_str())
                {
                    entry.confirm();
                }
                Ok(())
            }
            // A name refused (an ACL without CLIENT) only leaves the connection unnamed.
            (Sent::Unsubscribe(_) | Sent::Ping | Sent::Name, Frame::Error(e)) => {
                log::debug!("redlatch subscriber: {} answered {e}", shard.node);
                Ok(())
            }
            (Sent::Unsubscribe(_) | Sent::Ping | Sent::Auth | Sent::Name, _) => Ok(()),
            (sent, frame) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("answer {frame:?} to {sent:?} from {}", shard.node),
            )),
        }
    }

    /// Shard `i`'s connection failed: drop it. Its locks' entries are unconfirmed until a
    /// new subscription says otherwise, after the slot map was read again.
    fn fail(&mut self, i: usize, e: &io::Error) {
        let mut shard = self.shards.swap_remove(i);
        shard.close(self.poll.registry());
        if self.shared.stop.load(Ordering::SeqCst) {
            return;
        }
        self.shared.counters.outage.failed(format_args!(
            "redlatch pub/sub connection to {} failed: {e}; its waiters wake at their lock's \
             TTL until it is back",
            shard.node
        ));
        crate::stats::bump(&self.shared.counters.reconnects, 1);
        let entries = self.shared.entries.lock();
        for channel in shard.channels.keys() {
            // Not those that have moved to another connection since.
            if let Some(entry) = entries.get(channel)
                && self.routes.node_of(entry.keys.slot()) == Some(shard.node.as_str())
            {
                unconfirm(entry);
            }
        }
        drop(entries);
        self.backend.pubsub_failed(); // Sentinel: ask which server is the master now
        self.routes.stale = true;
        self.pause(Instant::now());
    }

    /// Nothing new is tried for a while, longer after each failure in a row.
    fn pause(&mut self, now: Instant) {
        self.paused_until = Some(now + self.backoff);
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
    }
}

/// The entry's channel is no longer known to be subscribed: a joiner cannot rely on it, and
/// the next confirmation wakes its waiters.
fn unconfirm(entry: &Entry) {
    entry.state.lock().confirmed = false;
}

#[cfg(test)]
mod tests;
