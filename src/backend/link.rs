//! One command connection to one server, on which every round trip has a deadline.
//!
//! # Why not `redis::Connection`
//! Its response timeout is a socket read timeout (`SO_RCVTIMEO`): it bounds each `read`, not
//! the reply. A server that trickles a reply one byte per 100 ms (a broken proxy, a server
//! swapping to death, a hostile peer) keeps every read inside its timeout and the caller
//! waiting forever; measured: `build()` with 1 s timeouts had not returned after 8 s. The
//! same holds for its handshake (AUTH, SELECT), and a pipeline's replies are read with one
//! full timeout each even after the first one timed out.
//!
//! A [`Link`] instead fixes a deadline when a request is sent, and before every read or write
//! of the socket sets the socket's timeout to what is left of it. A reply that is not
//! complete by then fails with a timeout, however the bytes trickle in, and the link is
//! closed: a late reply must never be read as the answer to the next request.
//!
//! - Making a link (TCP connect to each resolved address in turn, the TLS handshake, AUTH,
//!   SELECT, CLIENT SETNAME) must finish within the connect timeout, and its AUTH, SELECT
//!   and CLIENT SETNAME, one request, within the response timeout too.
//! - A request (one command, or a pipeline of them) must be answered in full within the
//!   response timeout from when it was sent.
//!
//! It speaks RESP2 only and reads replies as the `redis` crate's `Value`s (with a reader of its
//! own, `reply`, that is several times cheaper than the crate's parser), so a `Link` is a
//! `redis::ConnectionLike` that every script call and command runs on unchanged, and a
//! `redis::cluster::Connect`, so the cluster connection routes over links too.

use std::cell::{Cell, RefCell};
use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{
    Cmd, ConnectionInfo, ConnectionLike, ErrorKind, IntoConnectionInfo, RedisError, RedisResult,
    Value,
};

use super::failure::with_context;
use super::reply::Replies;
use super::stream::Socket;
use crate::backend::tls::TlsConfig;

/// How links are made: the builder's timeouts, TLS settings and connection name.
#[derive(Clone, Debug)]
pub(crate) struct LinkSettings {
    /// For making a link: connect, TLS handshake, AUTH, SELECT, CLIENT SETNAME.
    pub connect_timeout: Duration,
    /// For each request, from when it is sent until its reply is complete.
    pub response_timeout: Duration,
    /// For `rediss://` servers.
    pub tls: TlsConfig,
    /// What every connection is called on the server (`CLIENT SETNAME`), so that `CLIENT
    /// LIST` says whose it is: `<name>:<client id>` (see `ClientBuilder::name`).
    pub name: Option<Arc<str>>,
}

thread_local! {
    static LENT: RefCell<Option<LinkSettings>> = const { RefCell::new(None) };
    /// The latest instant by which every request of this thread must be answered, whatever
    /// the timeouts: see [`answer_by`].
    static ANSWER_BY: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Runs `f` with every link request made on this thread meanwhile (connecting included)
/// answered by `deadline` at the latest, on top of the link's own timeouts; a request that
/// is not fails as a timeout would, and [`Backend::run`](super::Backend::run) does not retry
/// past it.
///
/// For the renewal thread: it must be free to announce a lost hold when the hold's lease
/// deadline passes, not when a round trip to a server that stopped answering gives up, up to
/// a response timeout later.
pub(crate) fn answer_by<T>(deadline: Instant, f: impl FnOnce() -> T) -> T {
    let previous = ANSWER_BY.with(|cap| cap.replace(Some(deadline)));
    // Put back even if `f` panics: a later call on this thread must not see it.
    struct Restore(Option<Instant>);
    impl Drop for Restore {
        fn drop(&mut self) {
            ANSWER_BY.with(|cap| cap.set(self.0));
        }
    }
    let _restore = Restore(previous);
    f()
}

/// `deadline`, or this thread's [`answer_by`] if that comes first.
pub(crate) fn capped(deadline: Instant) -> Instant {
    ANSWER_BY
        .with(Cell::get)
        .map_or(deadline, |cap| cap.min(deadline))
}

/// Whether this thread's [`answer_by`] has passed.
pub(crate) fn answer_by_passed() -> bool {
    ANSWER_BY
        .with(Cell::get)
        .is_some_and(|cap| Instant::now() >= cap)
}

impl LinkSettings {
    /// Runs `f` with these settings lent to the links made on this thread meanwhile.
    ///
    /// The cluster connection of the `redis` crate makes its node connections itself, through
    /// `redis::cluster::Connect`, which is given a URL and a timeout only. It makes them
    /// inside our calls, on our thread, so the client's TLS configuration and connection name
    /// reach them through a thread-local ([`LinkSettings::lent`]).
    pub fn scoped<T>(&self, f: impl FnOnce() -> T) -> T {
        let previous = LENT.with(|lent| lent.replace(Some(self.clone())));
        // Given back even if `f` panics: a later call on this thread must not see it.
        struct Restore(Option<LinkSettings>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let previous = self.0.take();
                LENT.with(|lent| *lent.borrow_mut() = previous);
            }
        }
        let _restore = Restore(previous);
        f()
    }

    /// The settings [lent](LinkSettings::scoped) to this thread, if any.
    fn lent() -> Option<LinkSettings> {
        LENT.with(|lent| lent.borrow().clone())
    }
}

/// A connection to one Redis server whose every request has a deadline (see the module docs).
pub(crate) struct Link {
    /// The server, `host:port` or a socket's path, for the errors that name it.
    addr: String,
    socket: Socket,
    replies: Replies,
    db: i64,
    /// Cleared by any transport or protocol failure: the stream may be out of step.
    open: bool,
    /// How long a request may take to be answered in full; `None`: no limit. A `Cell` because
    /// `redis::cluster::Connect` sets it through `&self`.
    response_timeout: Cell<Option<Duration>>,
}

impl Link {
    /// Connects to the server `info` names, authenticates and names the connection, all within
    /// the connect timeout. Requests are then answered within the response timeout each. A
    /// failure names the server and the step (see `stream::with_context`), once.
    pub fn connect(info: &ConnectionInfo, settings: &LinkSettings) -> RedisResult<Link> {
        let deadline = capped(Instant::now() + settings.connect_timeout);
        let addr = info.addr().to_string();
        let socket = Socket::connect(info.addr(), deadline, &settings.tls)
            .map_err(|e| with_context(e, &addr))?;
        let mut link = Link {
            addr,
            socket,
            replies: Replies::default(),
            db: info.redis_settings().db(),
            open: true,
            response_timeout: Cell::new(Some(settings.response_timeout)),
        };
        // The handshake is part of making the link and a request of its own: both bounds.
        let answer_by = deadline.min(Instant::now() + settings.response_timeout);
        link.handshake(info, answer_by, settings.name.as_deref())?;
        Ok(link)
    }

    /// The server, `host:port` or a unix socket's path.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `e`, a failure of this link, said with the server's address; a reply that is not
    /// RESP2 says that the server is not Redis.
    pub fn failed(&self, e: RedisError) -> RedisError {
        match e.kind() {
            ErrorKind::Parse => with_context(
                e,
                format!("{}: answered something that is not Redis", self.addr),
            ),
            _ => with_context(e, &self.addr),
        }
    }

    /// `e`, an error from a command on this link, with the server's address if it has none
    /// yet: the link names its own failures (transport, protocol) as they happen, a server's
    /// refusal it hands on as it came.
    pub fn refused(&self, e: RedisError) -> RedisError {
        match e.kind() {
            ErrorKind::Server(_) | ErrorKind::Extension => self.failed(e),
            _ => e,
        }
    }

    /// AUTH, SELECT and CLIENT SETNAME, in one round trip that must be over by `deadline`.
    fn handshake(
        &mut self,
        info: &ConnectionInfo,
        deadline: Instant,
        name: Option<&str>,
    ) -> RedisResult<()> {
        let (setup, steps) = handshake_steps(info, name);
        if steps.is_empty() {
            return Ok(());
        }
        let packed = setup.get_packed_pipeline();
        self.socket.set_deadline(Some(deadline));
        let replies = self.send_and_read(&packed, 0, steps.len()).map_err(|e| {
            self.open = false;
            // The steps actually sent: a failure that names one not sent misleads (AUTH, with
            // no password set, reads as a credentials problem).
            let sent: Vec<&str> = steps
                .iter()
                .map(|step| match step {
                    Step::Auth => "AUTH",
                    Step::Select(_) => "SELECT",
                    Step::Name => "CLIENT SETNAME",
                })
                .collect();
            let handshake = format!("handshake ({})", sent.join(", "));
            let e = match e.kind() {
                ErrorKind::Parse => e,
                // A TLS port reads plain RESP as a broken TLS record and hangs up: the most
                // likely reason a server closes the connection at its first request.
                _ if e.is_connection_dropped() && matches!(self.socket, Socket::Tcp(_)) => {
                    with_context(
                        e,
                        format!(
                            "{handshake}: the server closed the connection (if this is a TLS \
                             port, use rediss://)"
                        ),
                    )
                }
                _ => with_context(e, handshake),
            };
            self.failed(e)
        })?;
        for (step, reply) in steps.into_iter().zip(replies) {
            let Value::ServerError(e) = reply else {
                continue;
            };
            let e = RedisError::from(e);
            if e.code() == Some("NOAUTH") {
                self.open = false;
                return Err(password_needed(&self.addr));
            }
            match step {
                Step::Auth => {
                    self.open = false;
                    // Classified as the `redis` crate does, so callers can tell a wrong
                    // password (`ErrorKind::AuthenticationFailed`) from a refused command.
                    let detail = format!("{}: AUTH refused: {e}", self.addr);
                    return Err((
                        ErrorKind::AuthenticationFailed,
                        "authentication failed",
                        detail,
                    )
                        .into());
                }
                Step::Select(db) => {
                    self.open = false;
                    return Err(with_context(
                        e,
                        format!("{}: SELECT {db} refused", self.addr),
                    ));
                }
                // A name only helps operators: an ACL that forbids `CLIENT` (the least
                // privilege the README shows) must not cost the connection.
                Step::Name => log::debug!("{}: CLIENT SETNAME refused ({e})", self.addr),
            }
        }
        Ok(())
    }

    /// Sends `packed` and reads `offset + count` replies, keeping the last `count`; all of it
    /// by `deadline`. Any failure but a server's error reply closes the link.
    fn request(
        &mut self,
        packed: &[u8],
        offset: usize,
        count: usize,
        deadline: Option<Instant>,
    ) -> RedisResult<Vec<Value>> {
        if !self.open {
            return Err(closed());
        }
        self.socket.set_deadline(deadline);
        self.send_and_read(packed, offset, count)
            .map_err(|e| self.broken(e))
    }

    /// Closes the link after `e` (the stream may be out of step). A failure of the transport
    /// or of the protocol names the server; a refusal (MULTI's) is the server's own words.
    fn broken(&mut self, e: RedisError) -> RedisError {
        self.open = false;
        match e.kind() {
            ErrorKind::Server(_) | ErrorKind::Extension => e,
            _ => self.failed(e),
        }
    }

    fn send_and_read(
        &mut self,
        packed: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.socket.write_all(packed)?;
        self.socket.flush()?;
        let mut replies = Vec::with_capacity(count);
        for index in 0..offset + count {
            let reply = self.replies.next(&mut self.socket)?;
            if index >= offset {
                replies.push(reply);
            } else if let Value::ServerError(e) = reply {
                // A command queued ahead of the ones asked for (MULTI) was refused.
                return Err(e.into());
            }
        }
        Ok(replies)
    }

    /// When a request sent now must be answered by.
    fn deadline(&self) -> Option<Instant> {
        match self.response_timeout.get() {
            Some(t) => Some(capped(Instant::now() + t)),
            None => ANSWER_BY.with(Cell::get),
        }
    }
}

/// A request of a link's handshake.
enum Step {
    Auth,
    Select(i64),
    Name,
}

/// The handshake `info` and the connection's `name` ask for, as one pipeline, with what each
/// of its requests is; none when the server needs nothing said.
fn handshake_steps(info: &ConnectionInfo, name: Option<&str>) -> (redis::Pipeline, Vec<Step>) {
    let settings = info.redis_settings();
    let mut setup = redis::pipe();
    let mut steps = Vec::new();
    if let Some(password) = settings.password() {
        let auth = setup.cmd("AUTH");
        if let Some(username) = settings.username() {
            auth.arg(username);
        }
        auth.arg(password);
        steps.push(Step::Auth);
    }
    if settings.db() != 0 {
        setup.cmd("SELECT").arg(settings.db());
        steps.push(Step::Select(settings.db()));
    }
    if let Some(name) = name {
        setup.cmd("CLIENT").arg("SETNAME").arg(name);
        steps.push(Step::Name);
    }
    (setup, steps)
}

/// The refusal of a server that wants a password the URL did not give (`NOAUTH`), said so.
pub(crate) fn password_needed(addr: &str) -> RedisError {
    RedisError::from((
        ErrorKind::AuthenticationFailed,
        "authentication failed",
        format!(
            "{addr} requires a password: give it in the URL, \
             redis://[user:]password@host:port (for Sentinel, master_credentials)"
        ),
    ))
}

fn closed() -> RedisError {
    RedisError::from(io::Error::new(
        io::ErrorKind::NotConnected,
        "this connection failed earlier and was closed",
    ))
}

impl ConnectionLike for Link {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let mut replies = self.request(cmd, 0, 1, self.deadline())?;
        Ok(replies.pop().unwrap_or(Value::Nil))
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.request(cmd, offset, count, self.deadline())
    }

    fn req_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        self.req_packed_command(&cmd.get_packed_command())
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<()>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}

/// Lets `redis::cluster::ClusterConnection` make its node connections as links: its own would
/// have the per-read timeout (see the module docs).
impl redis::cluster::Connect for Link {
    fn connect<T>(info: T, timeout: Option<Duration>) -> RedisResult<Self>
    where
        T: IntoConnectionInfo,
    {
        // The cluster connection sets the response timeout right after connecting; until
        // then (its first PING) the connect timeout bounds the answer too.
        let timeout = timeout.unwrap_or(Duration::from_secs(5));
        let lent = LinkSettings::lent();
        let settings = LinkSettings {
            connect_timeout: timeout,
            response_timeout: timeout,
            tls: lent.as_ref().map(|s| s.tls.clone()).unwrap_or_default(),
            name: lent.and_then(|s| s.name),
        };
        Link::connect(&info.into_connection_info()?, &settings)
    }

    fn send_packed_command(&mut self, cmd: &[u8]) -> RedisResult<()> {
        self.send(cmd)
    }

    fn set_write_timeout(&self, _: Option<Duration>) -> RedisResult<()> {
        // Writes are bounded by the response timeout too.
        Ok(())
    }

    fn set_read_timeout(&self, dur: Option<Duration>) -> RedisResult<()> {
        self.set_response_timeout(dur);
        Ok(())
    }

    fn recv_response(&mut self) -> RedisResult<Value> {
        self.receive()
    }
}

/// For a pub/sub connection (and the cluster connection's pipelines), which send and read
/// apart.
impl Link {
    /// Sends `packed` without reading a reply; within the response timeout.
    pub fn send(&mut self, packed: &[u8]) -> RedisResult<()> {
        if !self.open {
            return Err(closed());
        }
        self.socket.set_deadline(self.deadline());
        let sent = self
            .socket
            .write_all(packed)
            .and_then(|()| self.socket.flush());
        sent.map_err(|e| self.broken(e.into()))
    }

    /// Reads one reply or pushed message, which must be complete within the response
    /// timeout from now.
    pub fn receive(&mut self) -> RedisResult<Value> {
        if !self.open {
            return Err(closed());
        }
        self.socket.set_deadline(self.deadline());
        self.replies
            .next(&mut self.socket)
            .map_err(|e| self.broken(e))
    }

    /// Sets how long a request, a send or a receive may take from now on; `None`: no limit.
    pub fn set_response_timeout(&self, timeout: Option<Duration>) {
        self.response_timeout.set(timeout);
    }
}
