//! Pub/sub: the subscriber thread drives its own sockets, one per server that has waiters,
//! all in one `mio` poll: plain TCP, TLS (rustls over the non-blocking socket, see
//! [`super::socket`]) or a unix socket, whichever the URL names.
//!
//! # Where a channel is subscribed ([`Routing`])
//! - One server, or the master Sentinel names: there, with classic SUBSCRIBE. When Sentinel
//!   names another master (the [generation](crate::backend::Backend::generation) moves),
//!   the channels move to it.
//! - A Redis 7 Cluster: with SSUBSCRIBE, on the master of the shard that owns the lock's slot
//!   (found with CLUSTER SLOTS). A release publishes with SPUBLISH, which Redis delivers only
//!   inside that shard instead of broadcasting it over the cluster bus to every node.
//! - A Cluster without sharded pub/sub (older than Redis 7): with classic SUBSCRIBE, on one
//!   seed node, as on one server; a release's PUBLISH reaches every node over the cluster
//!   bus. A node that fails or goes silent makes the thread go on to the next seed.
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

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::net::ToSocketAddrs;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token, Waker};
use redis::ConnectionAddr;

use super::resp::{self, Frame};
use super::socket::{Dial, Stream, TlsStart};
use super::waiters::Entry;
use super::{BACKOFF_MAX, BACKOFF_MIN, IDLE_TIMEOUT, Shared};
use crate::backend::{Backend, SlotMap};
use crate::keys::{MAX_NAME_LEN, MAX_PREFIX_LEN};

/// The longest channel whose subscription confirmation and messages the reader keeps whole.
const MAX_CHANNEL: usize = resp::MAX_BULK;

// The name and prefix limits exist so that every lock's channel can be read back.
const _: () =
    assert!(MAX_PREFIX_LEN + ":{".len() + MAX_NAME_LEN + "}:unlocked".len() <= MAX_CHANNEL);

/// A connection with subscriptions and nothing to say for this long sends a PING.
pub(super) const HEARTBEAT: Duration = Duration::from_secs(5);

const WAKER: Token = Token(0);

/// What the thread knows about one channel of its connection.
#[derive(Default)]
struct ChannelState {
    /// SUBSCRIBE (sharded: SSUBSCRIBE) commands sent for it and not yet answered.
    pending: u32,
    /// We want it subscribed (the last command sent for it was a subscription).
    wanted: bool,
}

/// The thread's poll, made before the task so that the handle can hold its waker.
pub(super) struct Poller(Poll);

impl Poller {
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
    routing: Routing,
    /// AUTH for every connection: from the seed URLs, or the server's credentials.
    auth: Option<Vec<u8>>,
    /// [`Routing::Slots`]: the cluster's slot map (shared with the renewal thread).
    slots: Option<Arc<SlotMap>>,
    /// [`Routing::Slots`]: the nodes are reached over TLS (as the seed nodes are).
    nodes_over_tls: bool,
    /// [`Routing::Server`]: the server, the name its connection goes by (`host:port` or the
    /// socket's path), and the generation it belongs to.
    server: Option<(ConnectionAddr, String, u64)>,
    /// Something said `slots` or `server` is out of date since it was read.
    stale: bool,
    shards: Vec<Shard>,
    /// Channels of entries that are never subscribed, because their confirmations and
    /// messages would be too long to read (see [`MAX_CHANNEL`]); kept to warn once.
    unreadable: HashSet<String>,
    next_token: usize,
    /// After a failure, no new connection, subscription or slot map before this.
    paused_until: Option<Instant>,
    backoff: Duration,
}

/// One connection, to one server (a Cluster: the master of one shard).
struct Shard {
    node: String,
    token: Token,
    stream: Stream,
    /// The socket's connection was made (a TLS handshake may still be under way).
    established: bool,
    /// Until the connection is made, TLS handshake included: the addresses of `node` not
    /// tried yet, and when the one being tried is given up for the next.
    dial: Dial,
    connect_by: Instant,
    reader: resp::Reader,
    outbox: Vec<u8>,
    /// Registered for writable events too (the outbox did not drain).
    want_writable: bool,
    /// Commands sent and not answered, oldest first, with the time each must be answered by.
    sent: VecDeque<(Sent, Instant)>,
    channels: HashMap<String, ChannelState>,
    last_heard: Instant,
    /// When its last subscription went; it is closed after [`IDLE_TIMEOUT`] without one.
    empty_since: Option<Instant>,
}

/// Where a lock's channel is subscribed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Routing {
    /// A Redis 7 Cluster: on the master of the lock's slot, with sharded pub/sub.
    Slots,
    /// One server, the master Sentinel names, or one node of a Cluster without sharded
    /// pub/sub: there, with classic pub/sub.
    Server,
}

/// The commands and frame kinds of one kind of pub/sub.
struct Verbs {
    subscribe: &'static str,
    unsubscribe: &'static str,
    message: &'static [u8],
    subscribed: &'static [u8],
    unsubscribed: &'static [u8],
}

const SHARDED: Verbs = Verbs {
    subscribe: "SSUBSCRIBE",
    unsubscribe: "SUNSUBSCRIBE",
    message: b"smessage",
    subscribed: b"ssubscribe",
    unsubscribed: b"sunsubscribe",
};

const CLASSIC: Verbs = Verbs {
    subscribe: "SUBSCRIBE",
    unsubscribe: "UNSUBSCRIBE",
    message: b"message",
    subscribed: b"subscribe",
    unsubscribed: b"unsubscribe",
};

impl Routing {
    fn verbs(self) -> &'static Verbs {
        match self {
            Routing::Slots => &SHARDED,
            Routing::Server => &CLASSIC,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Sent {
    Auth,
    Subscribe(String),
    Unsubscribe(String),
    Ping,
}

impl PolledTask {
    pub(super) fn new(shared: Arc<Shared>, backend: Arc<Backend>, poller: Poller) -> Self {
        let (routing, auth) = if backend.sharded_pubsub() {
            let (username, password) = backend.node_credentials();
            (Routing::Slots, auth_command(username, password))
        } else {
            (Routing::Server, None) // read with the server's address
        };
        PolledTask {
            nodes_over_tls: backend.nodes_over_tls(),
            shared,
            backend,
            poll: poller.0,
            routing,
            auth,
            slots: None,
            server: None,
            stale: true,
            shards: Vec::new(),
            unreadable: HashSet::new(),
            next_token: 1,
            paused_until: None,
            backoff: BACKOFF_MIN,
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
        let entries: Vec<(String, Arc<Entry>)> = self
            .shared
            .entries
            .lock()
            .iter()
            .map(|(channel, entry)| (channel.clone(), entry.clone()))
            .collect();
        let verbs = self.routing.verbs();
        if self
            .server
            .as_ref()
            .is_some_and(|(_, _, generation)| *generation != self.backend.generation())
        {
            self.stale = true; // Sentinel named another master
        }
        let paused = self.paused_until.is_some_and(|until| now < until);
        if !paused {
            self.paused_until = None;
        }
        if !entries.is_empty() && self.stale && !paused {
            self.read_routes();
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
            match self.node_of(entry.keys.slot()) {
                Some(node) => {
                    wanted.insert(channel, (node.to_string(), entry));
                }
                None => unserved = true,
            }
        }
        if unserved && !paused {
            // A slot nobody serves (the map was read mid-failover): read it again in a while.
            self.stale = true;
            self.pause(now);
        }
        for shard in &mut self.shards {
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
                    let command = redis::cmd(verbs.unsubscribe)
                        .arg(channel)
                        .get_packed_command();
                    let deadline = now + self.backend.response_timeout();
                    shard.outbox.extend_from_slice(&command);
                    shard
                        .sent
                        .push_back((Sent::Unsubscribe(channel.clone()), deadline));
                }
                // Keep a channel whose subscription is unanswered: its answer must not
                // confirm a later subscription.
                state.wanted || state.pending > 0
            });
        }
        for (channel, (node, entry)) in wanted {
            let i = match self.shards.iter().position(|s| s.node == node) {
                Some(i) => i,
                None if paused => continue,
                None => match self.open(&node, now) {
                    Ok(i) => i,
                    Err(e) => {
                        log::warn!(
                            "redlatch cannot reach {node} for pub/sub: {e}; \
                             its waiters wake at their lock's TTL until it is back"
                        );
                        self.stale = true;
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
                let command = redis::cmd(verbs.subscribe)
                    .arg(channel)
                    .get_packed_command();
                shard.outbox.extend_from_slice(&command);
                let deadline = now + self.backend.response_timeout();
                shard
                    .sent
                    .push_back((Sent::Subscribe(channel.to_string()), deadline));
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
                    shard.outbox.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
                    let deadline = now + self.backend.response_timeout();
                    shard.sent.push_back((Sent::Ping, deadline));
                }
            }
            if (!shard.established || shard.stream.handshaking()) && now >= shard.connect_by {
                let e = io::Error::new(io::ErrorKind::TimedOut, "no handshake in time");
                match self.try_next_address(i, e, now) {
                    Ok(()) => i += 1,
                    Err(e) => self.fail(i, &e), // removes it: `i` is the next one now
                }
                continue;
            }
            let failure = if shard.sent.front().is_some_and(|(_, by)| now >= *by) {
                Some(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no answer within the response timeout",
                ))
            } else if shard.sent.is_empty()
                && shard
                    .empty_since
                    .is_some_and(|since| now >= since + IDLE_TIMEOUT)
            {
                let mut shard = self.shards.swap_remove(i);
                shard.stream.deregister(self.poll.registry());
                continue;
            } else {
                self.flush(i).err()
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
        for shard in &self.shards {
            if !shard.established || shard.stream.handshaking() {
                consider(shard.connect_by);
            }
            if let Some((_, by)) = shard.sent.front() {
                consider(*by);
            } else if !shard.channels.is_empty() {
                consider(shard.last_heard + HEARTBEAT);
            } else if let Some(since) = shard.empty_since {
                consider(since + IDLE_TIMEOUT);
            }
        }
        next
    }

    /// Finds out again where channels are subscribed: the slot map (CLUSTER SLOTS, through
    /// the command connections), or the server (Sentinel: the master it names now).
    fn read_routes(&mut self) {
        if self.routing == Routing::Server {
            match self.backend.pubsub_server() {
                Ok((addr, username, password, generation)) => {
                    self.auth = auth_command(username, password);
                    let node = match &addr {
                        ConnectionAddr::Tcp(host, port)
                        | ConnectionAddr::TcpTls { host, port, .. } => host_port(host, *port),
                        ConnectionAddr::Unix(path) => path.display().to_string(),
                        other => format!("{other:?}"), // `dial` refuses it
                    };
                    self.server = Some((addr, node, generation));
                    self.stale = false;
                }
                Err(e) => {
                    log::warn!("redlatch cannot find the server for pub/sub: {e}");
                    self.pause(Instant::now());
                }
            }
            return;
        }
        self.backend.forget_slot_map();
        match self.backend.slot_map() {
            Ok(map) if !map.is_empty() => {
                self.slots = Some(map);
                self.stale = false;
            }
            Ok(_) => {
                log::warn!("redlatch: CLUSTER SLOTS lists no slots; will ask again");
                self.pause(Instant::now());
            }
            Err(e) => {
                log::warn!("redlatch cannot read the cluster's slots for pub/sub: {e}");
                self.pause(Instant::now());
            }
        }
    }

    /// Where a lock in `slot` has its channel subscribed, as last read.
    fn node_of(&self, slot: u16) -> Option<&str> {
        match self.routing {
            Routing::Slots => self.slots.as_ref()?.node_of(slot),
            Routing::Server => self.server.as_ref().map(|(_, node, _)| node.as_str()),
        }
    }

    /// How to reach `node`, as [`PolledTask::node_of`] named it. Over TCP, to each address
    /// its name resolves to in turn: a name such as `localhost` may resolve to `::1` first
    /// while the server listens on 127.0.0.1 only, and the `redis` crate's command
    /// connections would reach it through the next one.
    fn dial(&self, node: &str) -> io::Result<Dial> {
        let tcp = |host: &str, port: u16, tls: bool| -> io::Result<Dial> {
            let tls = if tls {
                Some(TlsStart::new(self.backend.tls(), host)?)
            } else {
                None
            };
            let untried = (host, port).to_socket_addrs()?.collect();
            Ok(Dial::Tcp { untried, tls })
        };
        match self.routing {
            Routing::Slots => {
                let (host, port) = split_host_port(node).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, "not a host:port")
                })?;
                tcp(host, port, self.nodes_over_tls)
            }
            Routing::Server => match self.server.as_ref().map(|(addr, _, _)| addr) {
                Some(ConnectionAddr::Tcp(host, port)) => tcp(host, *port, false),
                Some(ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: false,
                    ..
                }) => tcp(host, *port, true),
                Some(ConnectionAddr::TcpTls { insecure: true, .. }) => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "rediss://...#insecure is refused",
                )),
                #[cfg(unix)]
                Some(ConnectionAddr::Unix(path)) => Ok(Dial::Unix(Some(path.clone()))),
                #[cfg(not(unix))]
                Some(ConnectionAddr::Unix(_)) => Err(io::ErrorKind::Unsupported.into()),
                Some(_) => Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "this build cannot connect to that kind of address",
                )),
                None => Err(io::Error::new(io::ErrorKind::NotFound, "no server known")),
            },
        }
    }

    /// Starts a connection to `node`; its handshake, AUTH and first subscription go out as the
    /// socket allows. The index of the new shard.
    fn open(&mut self, node: &str, now: Instant) -> io::Result<usize> {
        let dial = self.dial(node)?;
        self.open_dial(node, dial, now)
    }

    /// [`PolledTask::open`] for `node`, reached as `dial` says.
    fn open_dial(&mut self, node: &str, mut dial: Dial, now: Instant) -> io::Result<usize> {
        let mut stream = dial.next()?;
        let token = Token(self.next_token);
        self.next_token += 1;
        stream.register(self.poll.registry(), token)?;
        let mut shard = Shard {
            node: node.to_string(),
            token,
            stream,
            established: false,
            dial,
            connect_by: now + self.backend.connect_timeout(),
            reader: resp::Reader::default(),
            outbox: Vec::new(),
            want_writable: true,
            sent: VecDeque::new(),
            channels: HashMap::new(),
            last_heard: now,
            empty_since: None,
        };
        // The first answer may take the handshake as well as a command.
        let deadline = now + self.backend.connect_timeout() + self.backend.response_timeout();
        shard
            .outbox
            .extend_from_slice(self.auth.as_deref().unwrap_or(b"*1\r\n$4\r\nPING\r\n"));
        let first = if self.auth.is_some() {
            Sent::Auth
        } else {
            Sent::Ping
        };
        shard.sent.push_back((first, deadline));
        self.shards.push(shard);
        Ok(self.shards.len() - 1)
    }

    /// Shard `i`'s connection attempt failed with `e` (refused, unreachable, or no handshake
    /// within the connect timeout): start one to its next address, on the same token and
    /// with the same commands waiting, or give `e` back when none is left.
    fn try_next_address(&mut self, i: usize, e: io::Error, now: Instant) -> io::Result<()> {
        let shard = &mut self.shards[i];
        if shard.dial.exhausted() {
            return Err(e);
        }
        log::debug!(
            "redlatch: pub/sub connection to {} failed: {e}; trying its next address",
            shard.node
        );
        let mut stream = shard.dial.next()?;
        let registry = self.poll.registry();
        shard.stream.deregister(registry);
        stream.register(registry, shard.token)?;
        shard.stream = stream;
        shard.established = false;
        shard.want_writable = true;
        shard.connect_by = now + self.backend.connect_timeout();
        // The first answer may take this handshake as well as a command.
        let deadline = now + self.backend.connect_timeout() + self.backend.response_timeout();
        for (_, by) in &mut shard.sent {
            *by = (*by).max(deadline);
        }
        Ok(())
    }

    /// A socket is ready: finish the handshake, read and handle every whole frame, write.
    fn serve(&mut self, i: usize) -> io::Result<()> {
        let shard = &mut self.shards[i];
        if !shard.established {
            match shard.stream.connected() {
                Ok(true) => shard.established = true,
                Ok(false) => return Ok(()),
                Err(e) => return self.try_next_address(i, e, Instant::now()),
            }
        }
        let shard = &mut self.shards[i];
        let mut buf = [0u8; 8192];
        let mut frames = Vec::new();
        let mut failure = None;
        'read: loop {
            match shard.stream.read(&mut buf) {
                Ok(0) => {
                    failure = Some(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the node closed the connection",
                    ));
                    break;
                }
                Ok(n) => {
                    // Frames are taken out as the bytes come, so that a huge message being
                    // read past is never held whole.
                    shard.reader.feed(&buf[..n]);
                    loop {
                        match shard.reader.next() {
                            Ok(Some(frame)) => frames.push(frame),
                            Ok(None) => break,
                            Err(e) => {
                                failure = Some(io::Error::new(io::ErrorKind::InvalidData, e));
                                break 'read;
                            }
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if !frames.is_empty() {
            shard.last_heard = Instant::now();
        }
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
            None => self.flush(i),
        }
    }

    /// Delivers `frame` if it is a message on a channel; whether it was one. A message whose
    /// channel or payload was too long to keep is dropped: it cannot be one of ours.
    fn deliver_message(&self, frame: &Frame) -> bool {
        let Frame::Array(Some(items)) = frame else {
            return false;
        };
        if items.first().and_then(Frame::bytes) != Some(self.routing.verbs().message) {
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
        let verbs = self.routing.verbs();
        match kind.as_slice() {
            k if k == verbs.unsubscribed
                && !matches!(shard.sent.front(), Some((Sent::Unsubscribe(c), _))
                    if c.as_bytes() == channel) =>
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
                    self.stale = true;
                }
                return Ok(());
            }
            _ => {}
        }
        let Some((sent, _)) = shard.sent.pop_front() else {
            log::debug!("redlatch subscriber: unexpected frame from {}", shard.node);
            return Ok(());
        };
        match (sent, frame) {
            (Sent::Auth, Frame::Error(e)) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("AUTH refused: {e}"),
            )),
            (Sent::Subscribe(channel), Frame::Error(e)) => {
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
                    log::warn!(
                        "redlatch: subscribing {channel} refused by {}: {e}; its waiters wake \
                         at the lock's TTL",
                        shard.node
                    );
                }
                self.stale = true;
                self.pause(Instant::now());
                Ok(())
            }
            // The answer must name the channel: a slot that leaves the node as we unsubscribe
            // one of its channels makes the node push sunsubscribe, which we take for our
            // answer, and then answer MOVED, which we take for the next command's: every
            // later answer would be filed one command early. Any other answer is out of step:
            // the last arm fails the connection, and the next one starts in step.
            (Sent::Subscribe(ours), _)
                if kind == verbs.subscribed && ours.as_bytes() == channel =>
            {
                let channel = ours;
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
                let entry = self.shared.entries.lock().get(&channel).cloned();
                // Not if the channel has moved to another connection since it was sent.
                let node = &self.shards[i].node;
                if let Some(entry) = entry
                    && self.node_of(entry.keys.slot()) == Some(node.as_str())
                {
                    entry.confirm();
                }
                Ok(())
            }
            (Sent::Unsubscribe(_) | Sent::Ping, Frame::Error(e)) => {
                log::debug!("redlatch subscriber: {} answered {e}", shard.node);
                Ok(())
            }
            (Sent::Unsubscribe(_), _) | (Sent::Ping, _) | (Sent::Auth, _) => Ok(()),
            (sent, frame) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("answer {frame:?} to {sent:?} from {}", shard.node),
            )),
        }
    }

    /// Writes what the socket takes of shard `i`'s outbox, and watches for room for the rest.
    fn flush(&mut self, i: usize) -> io::Result<()> {
        let shard = &mut self.shards[i];
        if !shard.established {
            return Ok(());
        }
        shard.stream.push()?;
        while !shard.outbox.is_empty() {
            match shard.stream.write(&shard.outbox) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    shard.outbox.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let want_writable = !shard.outbox.is_empty() || shard.stream.wants_write();
        if want_writable != shard.want_writable {
            let interest = if want_writable {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            shard
                .stream
                .reregister(self.poll.registry(), shard.token, interest)?;
            shard.want_writable = want_writable;
        }
        Ok(())
    }

    /// Shard `i`'s connection failed: drop it. Its locks' entries are unconfirmed until a
    /// new subscription says otherwise, after the slot map was read again.
    fn fail(&mut self, i: usize, e: &io::Error) {
        let mut shard = self.shards.swap_remove(i);
        shard.stream.deregister(self.poll.registry());
        if self.shared.stop.load(Ordering::SeqCst) {
            return;
        }
        log::warn!(
            "redlatch pub/sub connection to {} failed: {e}; its waiters wake at their lock's \
             TTL until it is back",
            shard.node
        );
        let entries = self.shared.entries.lock();
        for channel in shard.channels.keys() {
            // Not those that have moved to another connection since.
            if let Some(entry) = entries.get(channel)
                && self.node_of(entry.keys.slot()) == Some(shard.node.as_str())
            {
                unconfirm(entry);
            }
        }
        drop(entries);
        self.backend.pubsub_failed(); // Sentinel: ask which server is the master now
        self.stale = true;
        self.pause(Instant::now());
    }

    /// Nothing new is tried for a while, longer after each failure in a row.
    fn pause(&mut self, now: Instant) {
        self.paused_until = Some(now + self.backoff);
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
    }
}

/// `host:port`, with an IPv6 host in brackets, as the slot map names nodes.
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The host (without brackets) and port of a `host:port` the slot map gave.
fn split_host_port(node: &str) -> Option<(&str, u16)> {
    let (host, port) = node.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host, port.parse().ok()?))
}

/// AUTH with these credentials, if there is a password.
fn auth_command(username: Option<String>, password: Option<String>) -> Option<Vec<u8>> {
    let mut auth = redis::cmd("AUTH");
    auth.arg(username).arg(password?);
    Some(auth.get_packed_command())
}

/// The entry's channel is no longer known to be subscribed: a joiner cannot rely on it, and
/// the next confirmation wakes its waiters.
fn unconfirm(entry: &Entry) {
    entry.state.lock().confirmed = false;
}

#[cfg(test)]
mod tests;
