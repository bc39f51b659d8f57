//! The byte stream under a link: TCP, a unix socket or TLS over TCP, each read and write of
//! which must be over by one deadline.
//!
//! The socket's own timeout (`SO_RCVTIMEO`, `SO_SNDTIMEO`) bounds each call, not a reply: a
//! peer that trickles a reply one byte at a time keeps every call inside it. So before a call
//! the socket's timeout is set to what is left of the request's deadline ([`Deadlined`]), and
//! a reply that is not complete by then fails with a timeout however the bytes come.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ErrorKind, RedisError, RedisResult};

use super::failure::with_context;
use crate::backend::tls::TlsConfig;

/// The byte stream under a link; every read and write of the network is [`Deadlined`].
pub(super) enum Socket {
    Tcp(Deadlined<TcpStream>),
    #[cfg(unix)]
    Unix(Deadlined<UnixStream>),
    #[cfg(feature = "tls")]
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, Deadlined<TcpStream>>>),
}

impl Socket {
    /// Connects to `addr` by `deadline`, TLS handshake included: over TCP, to each address
    /// the name resolves to in turn (as `redis::Connection` does: `localhost` may resolve to
    /// `::1` first while the server listens on 127.0.0.1 only).
    pub(super) fn connect(
        addr: &ConnectionAddr,
        deadline: Instant,
        tls: &TlsConfig,
    ) -> RedisResult<Socket> {
        let _ = tls; // used with the `tls` feature only
        match addr {
            ConnectionAddr::Tcp(host, port) => Ok(Socket::Tcp(Deadlined::new(
                connect_tcp(host, *port, deadline).map_err(cannot_connect)?,
                deadline,
            ))),
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => {
                let unix = UnixStream::connect(path).map_err(|e| cannot_connect(e.into()))?;
                Ok(Socket::Unix(Deadlined::new(unix, deadline)))
            }
            #[cfg(feature = "tls")]
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                ..
            } => {
                if *insecure {
                    return Err(RedisError::from((
                        ErrorKind::InvalidClientConfig,
                        "rediss://...#insecure is refused: give the server's CA to \
                         ClientBuilder::tls_certificates instead",
                    )));
                }
                let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| {
                    RedisError::from((
                        ErrorKind::InvalidClientConfig,
                        "not a TLS server name",
                        format!("{host}: {e}"),
                    ))
                })?;
                let session = rustls::ClientConnection::new(tls.rustls(), name).map_err(|e| {
                    RedisError::from((ErrorKind::InvalidClientConfig, "TLS", e.to_string()))
                })?;
                let tcp = connect_tcp(host, *port, deadline).map_err(cannot_connect)?;
                let mut stream = rustls::StreamOwned::new(session, Deadlined::new(tcp, deadline));
                // The handshake now, within the connect timeout, rather than inside the first
                // request; a refused certificate shows here.
                while stream.conn.is_handshaking() {
                    stream
                        .conn
                        .complete_io(&mut stream.sock)
                        .map_err(|e| with_context(e.into(), "TLS handshake failed"))?;
                }
                Ok(Socket::Tls(Box::new(stream)))
            }
            #[cfg(not(feature = "tls"))]
            ConnectionAddr::TcpTls { .. } => Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "rediss:// needs the `tls` feature of redlatch",
            ))),
            _ => Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "this build cannot connect to that kind of address",
            ))),
        }
    }

    /// Every read and write of the network from now on must be over by `deadline`.
    pub(super) fn set_deadline(&mut self, deadline: Option<Instant>) {
        match self {
            Socket::Tcp(s) => s.deadline = deadline,
            #[cfg(unix)]
            Socket::Unix(s) => s.deadline = deadline,
            #[cfg(feature = "tls")]
            Socket::Tls(s) => s.sock.deadline = deadline,
        }
    }
}

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.read(buf),
            #[cfg(unix)]
            Socket::Unix(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Socket::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => s.write(buf),
            #[cfg(unix)]
            Socket::Unix(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Socket::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.flush(),
            #[cfg(unix)]
            Socket::Unix(s) => s.flush(),
            // Pushes the TLS records of what was written onto the network.
            #[cfg(feature = "tls")]
            Socket::Tls(s) => s.flush(),
        }
    }
}

fn cannot_connect(e: RedisError) -> RedisError {
    with_context(e, "cannot connect")
}

/// Connects to each address `host` resolves to, in order, until one accepts by `deadline`.
fn connect_tcp(host: &str, port: u16, deadline: Instant) -> RedisResult<TcpStream> {
    let mut failure = None;
    for addr in (host, port).to_socket_addrs()? {
        let Some(left) = remaining(deadline) else {
            break;
        };
        match TcpStream::connect_timeout(&addr, left) {
            Ok(stream) => {
                configure_socket(&stream)?;
                return Ok(stream);
            }
            Err(e) => failure = Some(e),
        }
    }
    Err(failure
        .unwrap_or_else(|| timed_out("connecting took longer than the connect timeout"))
        .into())
}

/// Sets up a TCP socket, ours or the polled subscriber's. Lock hand-offs are latency-bound:
/// never let Nagle hold back a small command. The keepalive finds a silently dead peer (a
/// pulled cable, a blackholed route) on connections that sit idle, the pub/sub connection
/// above all; the user timeout gives up on one whose sent data goes unacknowledged.
pub(crate) fn configure_socket(socket: &impl std::os::fd::AsFd) -> io::Result<()> {
    use redis::io::tcp::socket2::{SockRef, TcpKeepalive};
    let socket = SockRef::from(socket);
    socket.set_tcp_nodelay(true)?;
    socket.set_tcp_keepalive(
        &TcpKeepalive::new()
            .with_time(Duration::from_secs(10))
            .with_interval(Duration::from_secs(5))
            .with_retries(3),
    )?;
    socket.set_tcp_user_timeout(Some(Duration::from_secs(30)))
}

/// What is left until `deadline`, if anything.
fn remaining(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|left| !left.is_zero())
}

fn timed_out(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what)
}

/// A socket whose every read and write must be over by one deadline: before each, the
/// socket's own timeout is set to what is left, so a reply that trickles in a byte at a time
/// still fails when the deadline passes.
///
/// Setting a socket timeout is a syscall, and on the hot path every request would pay two.
/// So the socket's timeout is left as it is while it is within [`REARM_MARGIN`] of what is
/// left: a request's first write and read find nearly the whole response timeout left, as the
/// last request's did. The socket's timeout may then end a blocking call up to that margin
/// after the deadline, or before it, and then the call is made again with the rest.
pub(super) struct Deadlined<S> {
    inner: S,
    deadline: Option<Instant>,
    /// What the socket's read and write timeouts are set to; `None` before the first set.
    read_armed: Option<Option<Duration>>,
    write_armed: Option<Option<Duration>>,
}

/// How far a socket's timeout may be from what is left of the deadline before it is set
/// again (see [`Deadlined`]).
const REARM_MARGIN: Duration = Duration::from_millis(5);

/// Whether a socket timeout set to `armed` must be set to `left` again.
fn needs_rearm(armed: Option<Option<Duration>>, left: Option<Duration>) -> bool {
    match (armed, left) {
        (Some(Some(armed)), Some(left)) => armed.abs_diff(left) > REARM_MARGIN,
        (Some(None), None) => false,
        _ => true,
    }
}

/// The socket timeouts [`Deadlined`] re-arms.
trait Timeouts {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl Timeouts for TcpStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_write_timeout(self, timeout)
    }
}

#[cfg(unix)]
impl Timeouts for UnixStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, timeout)
    }
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_write_timeout(self, timeout)
    }
}

impl<S> Deadlined<S> {
    fn new(inner: S, deadline: Instant) -> Deadlined<S> {
        Deadlined {
            inner,
            deadline: Some(deadline),
            read_armed: None,
            write_armed: None,
        }
    }

    /// Whether the deadline is still ahead: a socket timeout that ended a call before it
    /// was the socket's, set within [`REARM_MARGIN`], and the call is made again.
    fn before_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| remaining(d).is_some())
    }

    /// What is left of the deadline for the next read or write (`None`: no deadline), or a
    /// timeout if nothing is.
    fn left(&self) -> io::Result<Option<Duration>> {
        match self.deadline {
            None => Ok(None),
            Some(deadline) => remaining(deadline).map(Some).ok_or_else(|| {
                timed_out("redis did not answer in time (connect or response timeout)")
            }),
        }
    }
}

impl<S: Read + Timeouts> Read for Deadlined<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let left = self.left()?;
            if needs_rearm(self.read_armed, left) {
                self.inner.set_read_timeout(left)?;
                self.read_armed = Some(left);
            }
            match self.inner.read(buf) {
                Err(e) if is_socket_timeout(&e) && self.before_deadline() => continue,
                done => return done.map_err(name_timeout),
            }
        }
    }
}

impl<S: Write + Timeouts> Write for Deadlined<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            let left = self.left()?;
            if needs_rearm(self.write_armed, left) {
                self.inner.set_write_timeout(left)?;
                self.write_armed = Some(left);
            }
            match self.inner.write(buf) {
                Err(e) if is_socket_timeout(&e) && self.before_deadline() => continue,
                done => return done.map_err(name_timeout),
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A socket timeout: `WouldBlock` on Unix, `TimedOut` elsewhere.
fn is_socket_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A socket timeout shows as `WouldBlock` on Unix; it is a timeout to everyone above
/// (`RedisError::is_timeout`, the retry policy).
fn name_timeout(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock {
        timed_out("redis did not answer in time (connect or response timeout)")
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_timeout_is_set_again_only_when_it_strays_from_the_deadline() {
        let ms = Duration::from_millis;
        assert!(needs_rearm(None, Some(ms(3000))), "never set");
        assert!(needs_rearm(None, None), "never set");
        assert!(
            !needs_rearm(Some(Some(ms(3000))), Some(ms(2999))),
            "a request's first read"
        );
        assert!(
            needs_rearm(Some(Some(ms(3000))), Some(ms(1200))),
            "a reply that trickles"
        );
        assert!(
            needs_rearm(Some(Some(ms(10))), Some(ms(3000))),
            "the next request"
        );
        assert!(
            needs_rearm(Some(Some(ms(3000))), None),
            "no deadline any more"
        );
        assert!(!needs_rearm(Some(None), None));
    }
}
