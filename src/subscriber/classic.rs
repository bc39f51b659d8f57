//! Classic pub/sub: one `redis` crate connection to one server (or to any node of a Cluster,
//! where PUBLISH reaches every node), read by the subscriber thread. Used where the polled
//! flavor cannot go: a server reached over TLS or a unix socket, a Cluster older than Redis 7
//! or built with `classic_pubsub`. It has no heartbeat (see `polled` for why one cannot be
//! added here): a server stopped with SIGSTOP keeps it until its idle timeout.
//!
//! The thread blocks on a read of the connection and uses no CPU while idle. To make it
//! (un)subscribe, a waiter records what it wants in the entry map and rings the thread:
//! through Redis, by publishing on the client's own control channel (to which the connection
//! is subscribed), and through an in-process doorbell for when it is not connected. The thread
//! then reconciles the connection's subscriptions with the entry map. The sync `redis`
//! connection cannot be written by one thread while another blocks reading it, so this costs
//! a PUBLISH round trip plus the SUBSCRIBE round trip; concurrent requests share one ring.
//!
//! Only the answer to the *last* SUBSCRIBE sent for a channel confirms it: an older answer can
//! arrive after the channel was unsubscribed and wanted again, before the server has seen the
//! new SUBSCRIBE.
//!
//! When the connection fails the thread reconnects with backoff, resubscribes every channel
//! that has waiters, and the confirmations give every waiter a permit. A connection that
//! carried nothing for [`IDLE_TIMEOUT`] is given up, and made anew only if threads still wait.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use redis::{PushKind, RedisResult, Value};

use super::{BACKOFF_MAX, BACKOFF_MIN, ChannelState, IDLE_TIMEOUT, Shared};
use crate::connection::Backend;
use crate::link::Link;

/// The thread's side of classic pub/sub.
pub(super) struct ClassicTask {
    pub(super) shared: Arc<Shared>,
    pub(super) backend: Arc<Backend>,
    pub(super) rung: Receiver<()>,
}

impl ClassicTask {
    /// The thread's body: connect when there are waiters, serve, reconnect, until stopped.
    pub(super) fn run(self) {
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
            let failure = match self.backend.connect_in_generation() {
                Ok((con, generation)) => self
                    .serve(con, generation)
                    .err()
                    .inspect(|_| self.backend.pubsub_failed()),
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
    fn serve(&self, mut con: Link, generation: u64) -> RedisResult<()> {
        // Idle, the thread sleeps in the kernel. The long timeout bounds how long it outlives a
        // stopped client whose stop message could not be sent, and lets it give the connection
        // up when nobody has waited for a while; TCP keepalive finds a dead peer sooner.
        //
        // On a Cluster, though, the node must first confirm the control channel within the
        // response timeout: a node stopped with SIGSTOP accepts the connection and then says
        // nothing, and any other node would do (PUBLISH reaches every node). Failing here
        // makes `run` try the next one instead of staying deaf on that node.
        let awaiting_first = self.backend.is_cluster();
        con.set_response_timeout(Some(if awaiting_first {
            self.backend.response_timeout()
        } else {
            IDLE_TIMEOUT
        }));
        // Once a failover moved the master past `generation`, messages are published there:
        // reconnecting wakes every waiter, to try again on the new master.
        let control = self.shared.control_channel.clone();
        let mut channels: HashMap<String, ChannelState> = HashMap::new();
        con.send(&redis::cmd("SUBSCRIBE").arg(&control).get_packed_command())?;
        while !self.stopping() && self.backend.generation() == generation {
            let value = match con.receive() {
                Ok(value) => value,
                // Quiet for IDLE_TIMEOUT: give the connection up (a timed-out read leaves it
                // out of step anyway). `run` makes a new one if threads still wait.
                Err(e) if e.is_timeout() => {
                    if awaiting_first && !self.shared.connected.load(Ordering::SeqCst) {
                        return Err(e); // never confirmed: `run` tries another node
                    }
                    return Ok(());
                }
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
                    if awaiting_first && !self.shared.connected.load(Ordering::SeqCst) {
                        con.set_response_timeout(Some(IDLE_TIMEOUT));
                    }
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
        con: &mut Link,
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
            con.send(
                &redis::cmd("SUBSCRIBE")
                    .arg(&to_subscribe)
                    .get_packed_command(),
            )?;
        }
        if !to_unsubscribe.is_empty() {
            con.send(
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
