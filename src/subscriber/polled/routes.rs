//! Where the subscriber thread subscribes each lock's channel, as last read, and how it
//! reaches that node ([`Routes`]).
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

use std::io;
use std::net::ToSocketAddrs;
use std::sync::Arc;

use redis::ConnectionAddr;

use crate::backend::{Backend, SlotMap};
use crate::subscriber::socket::{Dial, TlsStart};

/// Where a lock's channel is subscribed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Routing {
    /// A Redis 7 Cluster: on the master of the lock's slot, with sharded pub/sub.
    Slots,
    /// One server, the master Sentinel names, or one node of a Cluster without sharded
    /// pub/sub: there, with classic pub/sub.
    Server,
}

/// The commands and frame kinds of one kind of pub/sub.
pub(super) struct Verbs {
    pub(super) subscribe: &'static str,
    pub(super) unsubscribe: &'static str,
    pub(super) message: &'static [u8],
    pub(super) subscribed: &'static [u8],
    pub(super) unsubscribed: &'static [u8],
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

/// Where channels are subscribed, as last read, and what a connection there needs.
pub(super) struct Routes {
    backend: Arc<Backend>,
    pub(super) routing: Routing,
    /// AUTH for every connection: from the seed URLs, or the server's credentials.
    pub(super) auth: Option<Vec<u8>>,
    /// [`Routing::Slots`]: the cluster's slot map (shared with the renewal thread).
    pub(super) slots: Option<Arc<SlotMap>>,
    /// [`Routing::Slots`]: the nodes are reached over TLS (as the seed nodes are).
    nodes_over_tls: bool,
    /// [`Routing::Server`]: the server, the name its connection goes by (`host:port` or the
    /// socket's path), and the generation it belongs to.
    pub(super) server: Option<(ConnectionAddr, String, u64)>,
    /// Something said `slots` or `server` is out of date since it was read.
    pub(super) stale: bool,
}

impl Routes {
    /// Not read yet: by slots on a Cluster that has sharded pub/sub, else on one server.
    pub(super) fn new(backend: Arc<Backend>) -> Routes {
        let (routing, auth) = if backend.sharded_pubsub() {
            let (username, password) = backend.node_credentials();
            (Routing::Slots, auth_command(username, password))
        } else {
            (Routing::Server, None) // read with the server's address
        };
        Routes {
            nodes_over_tls: backend.nodes_over_tls(),
            backend,
            routing,
            auth,
            slots: None,
            server: None,
            stale: true,
        }
    }

    /// The commands and frame kinds of the pub/sub used here.
    pub(super) fn verbs(&self) -> &'static Verbs {
        match self.routing {
            Routing::Slots => &SHARDED,
            Routing::Server => &CLASSIC,
        }
    }

    /// Marks the routes stale if Sentinel named another master since the server was read.
    pub(super) fn follow_sentinel(&mut self) {
        if self
            .server
            .as_ref()
            .is_some_and(|(_, _, generation)| *generation != self.backend.generation())
        {
            self.stale = true;
        }
    }

    /// Finds out again where channels are subscribed: the slot map (CLUSTER SLOTS, through
    /// the command connections), or the server (Sentinel: the master it names now). Whether
    /// that worked; if not, it is logged and the routes stay stale.
    pub(super) fn read(&mut self) -> bool {
        if self.routing == Routing::Server {
            return match self.backend.pubsub_server() {
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
                    true
                }
                Err(e) => {
                    log::warn!("redlatch cannot find the server for pub/sub: {e}");
                    false
                }
            };
        }
        self.backend.forget_slot_map();
        match self.backend.slot_map() {
            Ok(map) if !map.is_empty() => {
                self.slots = Some(map);
                self.stale = false;
                true
            }
            Ok(_) => {
                log::warn!("redlatch: CLUSTER SLOTS lists no slots; will ask again");
                false
            }
            Err(e) => {
                log::warn!("redlatch cannot read the cluster's slots for pub/sub: {e}");
                false
            }
        }
    }

    /// Where a lock in `slot` has its channel subscribed, as last read.
    pub(super) fn node_of(&self, slot: u16) -> Option<&str> {
        match self.routing {
            Routing::Slots => self.slots.as_ref()?.node_of(slot),
            Routing::Server => self.server.as_ref().map(|(_, node, _)| node.as_str()),
        }
    }

    /// How to reach `node`, as [`Routes::node_of`] named it. Over TCP, to each address its
    /// name resolves to in turn: a name such as `localhost` may resolve to `::1` first while
    /// the server listens on 127.0.0.1 only, and the `redis` crate's command connections
    /// would reach it through the next one.
    pub(super) fn dial(&self, node: &str) -> io::Result<Dial> {
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
pub(super) fn split_host_port(node: &str) -> Option<(&str, u16)> {
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
