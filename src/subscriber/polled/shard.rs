//! One pub/sub connection of the subscriber thread, a [`Shard`]: made to each address of its
//! server in turn, read into whole frames, written from an outbox as the socket takes it, and
//! every command sent kept with the time its answer is due. What it subscribes and what its
//! frames mean is for the task in [`super`] to decide.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::time::{Duration, Instant};

use mio::{Interest, Registry, Token};

use crate::backend::Backend;
use crate::subscriber::resp::{self, Frame};
use crate::subscriber::socket::{Dial, Stream};

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

/// A command sent on a connection, kept until its answer comes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Sent {
    /// The first command, when there are credentials.
    Auth,
    /// SUBSCRIBE or SSUBSCRIBE of these channels, in one command: an object's grant channel,
    /// if it has one, then its channel, which [`Shard::channels`] tracks. The server answers
    /// each in order, or refuses them all with one error; a channel leaves the list as its
    /// answer comes.
    Subscribe(VecDeque<String>),
    /// UNSUBSCRIBE or SUNSUBSCRIBE of these channels, in one command, as above.
    Unsubscribe(VecDeque<String>),
    /// The first command without credentials, or a heartbeat.
    Ping,
    /// CLIENT SETNAME, after the first command: see `ClientBuilder::name`.
    Name,
}

impl Sent {
    /// The channels whose answers are still due, for a command that names channels.
    pub(super) fn channels_mut(&mut self) -> Option<&mut VecDeque<String>> {
        match self {
            Sent::Subscribe(channels) | Sent::Unsubscribe(channels) => Some(channels),
            Sent::Auth | Sent::Ping | Sent::Name => None,
        }
    }
}

/// What the thread knows about one channel of its connection.
#[derive(Default)]
pub(super) struct ChannelState {
    /// SUBSCRIBE (sharded: SSUBSCRIBE) commands sent for it and not yet answered.
    pub(super) pending: u32,
    /// We want it subscribed (the last command sent for it was a subscription).
    pub(super) wanted: bool,
    /// The object's grant channel, subscribed and unsubscribed with it.
    pub(super) grant: Option<String>,
}

impl ChannelState {
    /// `channel`, this state's, with its grant channel before it: what one (S)SUBSCRIBE or
    /// (S)UNSUBSCRIBE names.
    pub(super) fn with_grant(&self, channel: &str) -> VecDeque<String> {
        self.grant
            .iter()
            .cloned()
            .chain([channel.to_string()])
            .collect()
    }
}

/// One connection, to one server (a Cluster: the master of one shard).
pub(super) struct Shard {
    /// The server, as the routes name it: `host:port`, or a unix socket's path.
    pub(super) node: String,
    /// Its events in the thread's poll.
    pub(super) token: Token,
    pub(super) stream: Stream,
    /// The socket's connection was made (a TLS handshake may still be under way).
    pub(super) established: bool,
    /// Until the connection is made, TLS handshake included: the addresses of `node` not
    /// tried yet, and when the one being tried is given up for the next.
    dial: Dial,
    connect_by: Instant,
    reader: resp::Reader,
    outbox: Vec<u8>,
    /// Registered for writable events too (the outbox did not drain).
    want_writable: bool,
    /// Commands sent and not answered, oldest first, with the time each must be answered by.
    pub(super) sent: VecDeque<(Sent, Instant)>,
    pub(super) channels: HashMap<String, ChannelState>,
    /// When the last frame came (or the connection was started).
    pub(super) last_heard: Instant,
    /// When its last subscription went; it is closed after
    /// [`IDLE_TIMEOUT`](crate::subscriber::IDLE_TIMEOUT) without one.
    pub(super) empty_since: Option<Instant>,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl Shard {
    /// Starts a connection to `node`, reached as `dial` says, its events under `token`. Its
    /// handshake and first command (`auth`, or a PING without credentials) go out as the
    /// socket allows.
    pub(super) fn open(
        node: &str,
        mut dial: Dial,
        token: Token,
        registry: &Registry,
        auth: Option<&[u8]>,
        backend: &Backend,
        now: Instant,
    ) -> io::Result<Shard> {
        let mut stream = dial.next()?;
        stream.register(registry, token)?;
        let (connect_timeout, response_timeout) =
            (backend.connect_timeout(), backend.response_timeout());
        let mut shard = Shard {
            node: node.to_string(),
            token,
            stream,
            established: false,
            dial,
            connect_by: now + connect_timeout,
            reader: resp::Reader::default(),
            outbox: Vec::new(),
            want_writable: true,
            sent: VecDeque::new(),
            channels: HashMap::new(),
            last_heard: now,
            empty_since: None,
            connect_timeout,
            response_timeout,
        };
        // The first answer may take the handshake as well as a command.
        let deadline = now + connect_timeout + response_timeout;
        shard.outbox.extend_from_slice(auth.unwrap_or(PING));
        let first = if auth.is_some() {
            Sent::Auth
        } else {
            Sent::Ping
        };
        shard.sent.push_back((first, deadline));
        if let Some(name) = backend.connection_name() {
            let setname = redis::cmd("CLIENT")
                .arg("SETNAME")
                .arg(name)
                .get_packed_command();
            shard.outbox.extend_from_slice(&setname);
            shard.sent.push_back((Sent::Name, deadline));
        }
        Ok(shard)
    }

    /// Queues `command`, to be answered within the response timeout.
    pub(super) fn send(&mut self, command: &[u8], sent: Sent, now: Instant) {
        self.outbox.extend_from_slice(command);
        self.sent.push_back((sent, now + self.response_timeout));
    }

    /// Queues a PING, whose answer shows that the server still listens.
    pub(super) fn ping(&mut self, now: Instant) {
        self.send(PING, Sent::Ping, now);
    }

    /// When the connection is given up for the next address, while it is being made (TLS
    /// handshake included).
    pub(super) fn connect_deadline(&self) -> Option<Instant> {
        (!self.established || self.stream.handshaking()).then_some(self.connect_by)
    }

    /// When the oldest command unanswered must be answered by.
    pub(super) fn answer_deadline(&self) -> Option<Instant> {
        self.sent.front().map(|(_, by)| *by)
    }

    /// The connection attempt failed with `e` (refused, unreachable, or no handshake within
    /// the connect timeout): start one to the next address, on the same token and with the
    /// same commands waiting, or give `e` back when none is left.
    pub(super) fn try_next_address(
        &mut self,
        e: io::Error,
        registry: &Registry,
        now: Instant,
    ) -> io::Result<()> {
        if self.dial.exhausted() {
            return Err(e);
        }
        log::debug!(
            "redlatch: pub/sub connection to {} failed: {e}; trying its next address",
            self.node
        );
        let mut stream = self.dial.next()?;
        self.stream.deregister(registry);
        stream.register(registry, self.token)?;
        self.stream = stream;
        self.established = false;
        self.want_writable = true;
        self.connect_by = now + self.connect_timeout;
        // The first answer may take this handshake as well as a command.
        let deadline = now + self.connect_timeout + self.response_timeout;
        for (_, by) in &mut self.sent {
            *by = (*by).max(deadline);
        }
        Ok(())
    }

    /// The socket is ready: whether its connection is made, so that it can be read. A refused
    /// one goes on to the next address; the error is the last address's.
    pub(super) fn connect(&mut self, registry: &Registry) -> io::Result<bool> {
        if self.established {
            return Ok(true);
        }
        match self.stream.connected() {
            Ok(true) => {
                self.established = true;
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => self
                .try_next_address(e, registry, Instant::now())
                .map(|()| false),
        }
    }

    /// Every whole frame that has come, and what ended the connection, if anything did: the
    /// frames read before a failure are still the server's, and worth serving.
    pub(super) fn read(&mut self) -> (Vec<Frame>, Option<io::Error>) {
        let mut buf = [0u8; 8192];
        let mut frames = Vec::new();
        let mut failure = None;
        'read: loop {
            match self.stream.read(&mut buf) {
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
                    self.reader.feed(&buf[..n]);
                    loop {
                        match self.reader.next() {
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
            self.last_heard = Instant::now();
        }
        (frames, failure)
    }

    /// Writes what the socket takes of the outbox, and watches for room for the rest.
    pub(super) fn flush(&mut self, registry: &Registry) -> io::Result<()> {
        if !self.established {
            return Ok(());
        }
        self.stream.push()?;
        while !self.outbox.is_empty() {
            match self.stream.write(&self.outbox) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.outbox.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let want_writable = !self.outbox.is_empty() || self.stream.wants_write();
        if want_writable != self.want_writable {
            let interest = if want_writable {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            self.stream.reregister(registry, self.token, interest)?;
            self.want_writable = want_writable;
        }
        Ok(())
    }

    /// Takes the socket out of the poll; dropping the shard closes it.
    pub(super) fn close(&mut self, registry: &Registry) {
        self.stream.deregister(registry);
    }
}
