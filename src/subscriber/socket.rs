//! The byte streams under the polled subscriber's connections: plain TCP, TLS over TCP, and
//! unix sockets, all non-blocking and registered in the thread's one `mio` poll.
//!
//! TLS is rustls driven by hand over the non-blocking socket (`read_tls`, `write_tls`,
//! `process_new_packets`), not a blocking stream wrapper: the thread must never block on one
//! connection while the others wait. The handshake makes progress as the poll reports the
//! socket readable or writable, like any other traffic; commands written before it is over
//! wait in rustls and go out once it is. A refused certificate shows as an error from
//! [`Stream::read`], and the connection fails like one that was refused.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
#[cfg(unix)]
use std::path::PathBuf;
#[cfg(feature = "tls")]
use std::sync::Arc;

use mio::net::TcpStream;
#[cfg(unix)]
use mio::net::UnixStream;
use mio::{Interest, Registry, Token};

/// What a TLS connection to one server needs: the client's rustls configuration and the
/// name its certificate must carry (a host name or an IP address, as the URL or the slot map
/// gives it).
#[cfg(feature = "tls")]
#[derive(Clone)]
pub(super) struct TlsStart {
    config: Arc<rustls::ClientConfig>,
    name: rustls::pki_types::ServerName<'static>,
}

/// Without the `tls` feature no TLS connection is ever started (`rediss://` URLs are refused
/// when the client is built), so there is nothing to hold.
#[cfg(not(feature = "tls"))]
#[derive(Clone)]
pub(super) enum TlsStart {}

impl TlsStart {
    /// For the server `host`, checked against the certificate the server shows.
    #[cfg(feature = "tls")]
    pub fn new(tls: &crate::backend::tls::TlsConfig, host: &str) -> io::Result<TlsStart> {
        let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{host} is not a TLS server name: {e}"),
            )
        })?;
        Ok(TlsStart {
            config: tls.rustls(),
            name,
        })
    }

    /// Refuses: this build has no TLS.
    #[cfg(not(feature = "tls"))]
    pub fn new(_: &crate::backend::tls::TlsConfig, _: &str) -> io::Result<TlsStart> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "rediss:// needs the `tls` feature of redlatch",
        ))
    }
}

/// How to reach one server, and what is left to try of it.
pub(super) enum Dial {
    /// The addresses its name resolved to, not tried yet, in order; with TLS on top if set.
    Tcp {
        untried: VecDeque<SocketAddr>,
        tls: Option<TlsStart>,
    },
    /// A unix socket; `None` once tried.
    #[cfg(unix)]
    Unix(Option<PathBuf>),
}

impl Dial {
    /// Whether an address is left to try after the current one failed.
    pub fn exhausted(&self) -> bool {
        match self {
            Dial::Tcp { untried, .. } => untried.is_empty(),
            #[cfg(unix)]
            Dial::Unix(path) => path.is_none(),
        }
    }

    /// Starts a connection to the first address left that takes one, removing the addresses
    /// it tried. A refusal that comes later, on the socket, shows when the connection is
    /// [served](Stream::connected).
    pub fn next(&mut self) -> io::Result<Stream> {
        match self {
            Dial::Tcp { untried, tls } => {
                let mut failure = io::Error::new(io::ErrorKind::NotFound, "no address");
                while let Some(addr) = untried.pop_front() {
                    let tcp = TcpStream::connect(addr).and_then(|stream| {
                        crate::backend::stream::configure_socket(&stream).map(|()| stream)
                    });
                    match tcp {
                        Ok(tcp) => return Stream::over(tcp, tls.as_ref()),
                        Err(e) => failure = e,
                    }
                }
                Err(failure)
            }
            #[cfg(unix)]
            Dial::Unix(path) => match path.take() {
                Some(path) => UnixStream::connect(path).map(Stream::Unix),
                None => Err(io::Error::new(io::ErrorKind::NotFound, "no address")),
            },
        }
    }
}

/// One connection's stream. Reads and writes never block: they end with `WouldBlock`, and
/// the poll says when to go on.
pub(super) enum Stream {
    Tcp(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<TlsStream>),
    #[cfg(unix)]
    Unix(UnixStream),
}

/// rustls's state beside the socket it drives.
#[cfg(feature = "tls")]
pub(super) struct TlsStream {
    tcp: TcpStream,
    tls: rustls::ClientConnection,
}

impl Stream {
    fn over(tcp: TcpStream, tls: Option<&TlsStart>) -> io::Result<Stream> {
        match tls {
            None => Ok(Stream::Tcp(tcp)),
            #[cfg(feature = "tls")]
            Some(start) => {
                let tls = rustls::ClientConnection::new(start.config.clone(), start.name.clone())
                    .map_err(tls_error)?;
                Ok(Stream::Tls(Box::new(TlsStream { tcp, tls })))
            }
            #[cfg(not(feature = "tls"))]
            Some(never) => match *never {},
        }
    }

    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Tcp(s) => s,
            #[cfg(feature = "tls")]
            Stream::Tls(s) => &mut s.tcp,
            #[cfg(unix)]
            Stream::Unix(s) => s,
        }
    }

    pub fn register(&mut self, registry: &Registry, token: Token) -> io::Result<()> {
        registry.register(
            self.source(),
            token,
            Interest::READABLE | Interest::WRITABLE,
        )
    }

    pub fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interest: Interest,
    ) -> io::Result<()> {
        registry.reregister(self.source(), token, interest)
    }

    pub fn deregister(&mut self, registry: &Registry) {
        let _ = registry.deregister(self.source());
    }

    /// Whether the socket's connection was made: `Ok(false)` while it is still under way, an
    /// error if it was refused. (The TLS handshake comes after; see [`Stream::handshaking`].)
    pub fn connected(&mut self) -> io::Result<bool> {
        let (error, peer) = match self {
            Stream::Tcp(s) => (s.take_error(), s.peer_addr().map(drop)),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => (s.tcp.take_error(), s.tcp.peer_addr().map(drop)),
            #[cfg(unix)]
            Stream::Unix(s) => (s.take_error(), s.peer_addr().map(drop)),
        };
        match error? {
            Some(e) => Err(e),
            None => match peer {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
                Err(e) => Err(e),
            },
        }
    }

    /// Whether a TLS handshake is still under way: the connect timeout still runs.
    pub fn handshaking(&self) -> bool {
        match self {
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.tls.is_handshaking(),
            _ => false,
        }
    }

    /// Reads what has come, decrypted; `Ok(0)` when the server closed the connection,
    /// `WouldBlock` when nothing more is there for now.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.read(buf),
        }
    }

    /// Takes what the socket (or, over TLS, rustls's buffer) accepts of `buf`; `WouldBlock`
    /// when it accepts nothing now.
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.write(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.write(buf),
        }
    }

    /// Over TLS, writes the records rustls has ready (handshake messages, encrypted
    /// commands) as far as the socket takes them.
    pub fn push(&mut self) -> io::Result<()> {
        match self {
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.push(),
            _ => Ok(()),
        }
    }

    /// Whether bytes wait to be written once the socket has room (TLS records).
    pub fn wants_write(&self) -> bool {
        match self {
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.tls.wants_write(),
            _ => false,
        }
    }

    /// The TCP peer, for tests that check which address a connection went to.
    #[cfg(test)]
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Stream::Tcp(s) => s.peer_addr(),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.tcp.peer_addr(),
            #[cfg(unix)]
            Stream::Unix(_) => Err(io::ErrorKind::Unsupported.into()),
        }
    }
}

#[cfg(feature = "tls")]
impl TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // Plaintext already decrypted first; `Ok(0)` is the server's close_notify, and an
            // end of the socket without one is `UnexpectedEof`.
            match self.tls.reader().read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => return done,
            }
            // Then more records from the socket (`WouldBlock` ends the read), one batch at a
            // time, so that rustls's buffer of received plaintext never fills up.
            match self.tls.read_tls(&mut self.tcp) {
                Ok(_) => {
                    self.tls.process_new_packets().map_err(tls_error)?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // rustls keeps what it accepts (until the handshake is over, too) up to its buffer
        // limit; past it, it accepts nothing until the socket took some.
        let n = self.tls.writer().write(buf)?;
        self.push()?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn push(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// A TLS failure (a certificate that does not check out, a broken record) as an I/O error:
/// the connection fails as a refused one does.
#[cfg(feature = "tls")]
fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}"))
}
