//! The transport: runs a command on the right server. Knows no kind of lock and no waiter.
//!
//! [`Backend`] owns how to reach the server (one server by URL, the master that Sentinel
//! names, or a Cluster's masters by slot), a small pool of command connections (`pool`), and
//! the retry policy (`retry`). The engine, the renewal thread and the subscriber ask it to run
//! a closure on a connection, to group calls by slot or master (`cluster`), or to name the
//! server a pub/sub connection should go to; none of them knows which deployment it is.
//!
//! - `link`: one connection, whose every request has a deadline;
//! - `reply`: the replies a link reads;
//! - `stream`: the bytes under a link (TCP, unix, TLS), each read and write bounded by it;
//! - `failure`: what a failure says: the server and the step, before the `redis` error;
//! - `tls`: the TLS configuration all connections of a client share;
//! - `pool`: the command connections, without threads or PINGs;
//! - `retry`: which failures are retried, how often, after what pause;
//! - `cluster`: the slot map, grouping by slot and by master, the seed nodes;
//! - `sentinel`: finding the master, and following it through failovers;
//! - `nodes`: reaching one server or every server of the deployment by name, for commands
//!   without a key to route by and for pub/sub connections;
//! - `hello`: what `build()` reads from the server's `HELLO`: Redis, its version, its mode.

mod cluster;
mod failure;
mod hello;
pub(crate) mod link;
mod nodes;
mod pool;
pub(crate) mod reply;
mod retry;
pub(crate) mod sentinel;
pub(crate) mod stream;
pub(crate) mod tls;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{
    ConnectionAddr, ConnectionInfo, ConnectionLike, IntoConnectionInfo, RedisResult, Value,
};

use crate::error::{Error, Result};
use cluster::ClusterTarget;
pub(crate) use cluster::SlotMap;
use hello::{Mode, check_hello};
pub(crate) use link::{Link, LinkSettings};
use pool::{Pool, PooledConnection};
use retry::Retries;
pub(crate) use retry::is_transport_error;
use sentinel::{SentinelSpec, Sentinels};
/// The fuzz targets (`fuzz/`) read HELLO and CLUSTER SLOTS replies through `crate::fuzzing`.
#[cfg(fuzzing)]
pub(crate) use {
    cluster::master_ranges,
    hello::{Mode as HelloMode, hello_fields, supported},
};

/// Connection settings, from the builder.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub pool_size: u32,
    /// Timeouts and TLS of every connection.
    pub link: LinkSettings,
}

/// Where the builder said Redis is.
#[derive(Clone, Debug)]
pub(crate) enum Deployment {
    /// One server, by URL.
    Url(String),
    /// The master a set of sentinels names.
    Sentinel(SentinelSpec),
    /// A Redis Cluster, found through these seed nodes.
    Cluster(Vec<String>),
}

/// How connections find their server.
enum Target {
    Direct(Box<redis::Client>),
    Sentinel(Box<Sentinels>),
    Cluster(Box<ClusterTarget>),
}

/// How the crate reaches Redis: connection parameters, the command pool, the retry policy.
pub(crate) struct Backend {
    target: Target,
    settings: Settings,
    pool: Pool,
    /// The Sentinel generation the pool's connections were made in.
    pool_generation: AtomicU64,
    /// Cluster only: the slot map last read, and whether it is still trusted (see
    /// [`Backend::slot_map`] and [`Backend::last_slot_map`]).
    slot_map: Mutex<(Option<Arc<SlotMap>>, bool)>,
    /// Cluster only: masters whose last call went unanswered (see [`Backend::note_answer`]).
    silent: Mutex<Vec<String>>,
}

impl Backend {
    /// Checks the URLs and that they name a transport this build supports. No I/O.
    pub fn new(deployment: &Deployment, settings: Settings) -> Result<Backend> {
        let target = match deployment {
            Deployment::Url(url) => Target::Direct(Box::new(direct_client(url)?)),
            Deployment::Sentinel(spec) => {
                Target::Sentinel(Box::new(Sentinels::new(spec, &settings.link)?))
            }
            Deployment::Cluster(seeds) => {
                Target::Cluster(Box::new(ClusterTarget::new(seeds, &settings.link)?))
            }
        };
        Ok(Backend {
            target,
            pool: Pool::new(settings.pool_size),
            settings,
            pool_generation: AtomicU64::new(0),
            slot_map: Mutex::new((None, false)),
            silent: Mutex::new(Vec::new()),
        })
    }

    /// Counts the changes of server (a Sentinel failover) so far; always 0 for one server.
    pub fn generation(&self) -> u64 {
        match &self.target {
            Target::Direct(_) | Target::Cluster(_) => 0,
            Target::Sentinel(sentinels) => sentinels.generation(),
        }
    }

    /// Asks the sentinels whether the master moved (nothing to do for one server); when it
    /// did, pooled connections to the old one are dropped. Whether it moved.
    pub fn follow_master(&self) -> bool {
        let Target::Sentinel(sentinels) = &self.target else {
            return false;
        };
        match sentinels.follow() {
            Ok(moved) => {
                self.drop_stale_connections();
                moved
            }
            Err(e) => {
                log::warn!("cannot ask the sentinels for the master: {e}");
                false
            }
        }
    }

    /// How often [`Backend::follow_master`] should run, if at all.
    pub fn follow_interval(&self) -> Option<Duration> {
        match &self.target {
            Target::Direct(_) | Target::Cluster(_) => None,
            Target::Sentinel(_) => Some(crate::backend::sentinel::FOLLOW_INTERVAL),
        }
    }

    fn drop_stale_connections(&self) {
        let generation = self.generation();
        if self.pool_generation.swap(generation, Ordering::AcqRel) != generation {
            self.pool.invalidate();
        }
    }

    /// Checks that the deployment answers, takes our credentials, is Redis, new enough, and
    /// of the topology the builder was for (a Cluster node given to `Client::open` would
    /// refuse every lock with MOVED; a plain server given to `cluster_builder` has no slots).
    /// One HELLO, on a connection of its own so that a failure names the server. On a
    /// Cluster, to one node only: the cluster connection would send it to every master, and
    /// a client must be able to start while a master is down (the locks of the other slots
    /// work).
    pub fn check(&self) -> Result<()> {
        match &self.target {
            Target::Cluster(cluster) => {
                let mut failures = Vec::new();
                // A stopped node accepts the connection and never answers: try the next.
                for _ in 0..cluster.nodes.len() {
                    let n = cluster.next_node.load(Ordering::Relaxed) % cluster.nodes.len();
                    let checked = link_to(&cluster.nodes[n], &self.settings).and_then(|mut con| {
                        let hello = check_hello(&mut con, Mode::Cluster)?;
                        // One reply per name: nil for a command the server does not know.
                        let spublish: Vec<Value> = redis::cmd("COMMAND")
                            .arg("INFO")
                            .arg("SPUBLISH")
                            .query(&mut con)
                            .map_err(|e| con.refused(e))?;
                        Ok((hello, matches!(spublish.first(), Some(Value::Array(_)))))
                    });
                    match checked {
                        Ok((Ok(()), has_spublish)) => {
                            cluster.sharded.store(has_spublish, Ordering::Relaxed);
                            return Ok(());
                        }
                        // The node answered: what it said holds for the whole cluster.
                        Ok((Err(refusal), _)) => return Err(refusal),
                        Err(e) => failures.push(e),
                    }
                    cluster.skip_node();
                }
                Err(Error::Redis(failure::all_failed(failures)))
            }
            Target::Direct(_) | Target::Sentinel(_) => {
                let epoch = self.pool.epoch();
                let mut con = self.connect()?;
                check_hello(&mut con, Mode::Standalone)??;
                self.pool.adopt(Box::new(con), epoch);
                Ok(())
            }
        }
    }

    /// The servers this client was told of, each as another client's equals when the two
    /// were told of the same one (no I/O, nothing resolved): one server's address, a
    /// Cluster's seed nodes, or the master name at each sentinel. What a
    /// [`RedlockClient`](crate::RedlockClient) compares to refuse one master given twice.
    pub fn servers(&self) -> Vec<Server> {
        match &self.target {
            Target::Direct(client) => vec![Server::at(client.get_connection_info().addr())],
            Target::Cluster(cluster) => cluster
                .nodes
                .iter()
                .map(|node| Server::at(node.get_connection_info().addr()))
                .collect(),
            Target::Sentinel(sentinels) => sentinels
                .sentinel_addrs()
                .iter()
                .map(|addr| {
                    let sentinel = Server::at(addr);
                    let master = format!("master {:?} of sentinel ", sentinels.master_name());
                    Server {
                        key: format!("{master}{}", sentinel.key),
                        shown: format!("{master}{}", sentinel.shown),
                    }
                })
                .collect(),
        }
    }

    /// Whether this is a Redis Cluster: a script may only touch keys of one slot.
    pub fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(_))
    }

    /// How long a server may take to answer one command.
    pub fn response_timeout(&self) -> Duration {
        self.settings.link.response_timeout
    }

    /// How long making a connection may take.
    pub fn connect_timeout(&self) -> Duration {
        self.settings.link.connect_timeout
    }

    /// What every connection of this client is called on the server (`CLIENT SETNAME`), the
    /// subscriber's too.
    pub fn connection_name(&self) -> Option<&str> {
        self.settings.link.name.as_deref()
    }

    /// The TLS configuration every connection of this client uses, the subscriber's too.
    pub fn tls(&self) -> &crate::backend::tls::TlsConfig {
        &self.settings.link.tls
    }

    /// Runs `op` on a pooled connection, again as [`Backend::retry_pause`] says when it fails
    /// (on a fresh connection if the connection failed). `op` must be idempotent: it may run
    /// more than once if a reply was lost.
    pub fn run<T>(
        &self,
        mut op: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let mut retries = Retries::new();
        loop {
            match self.run_once(&mut op) {
                // Past the thread's own deadline (the renewal thread's), no retry can help.
                Err(e) if link::answer_by_passed() => return Err(e),
                Err(e) => match self.retry_pause(&e, &mut retries) {
                    Some(pause) => {
                        log::debug!("redis command failed ({e}), retrying in {pause:?}");
                        std::thread::sleep(pause);
                    }
                    None => return Err(e),
                },
                Ok(value) => return Ok(value),
            }
        }
    }

    /// Runs `op` once, without retries: for best-effort notifications.
    pub fn run_once_only<T>(
        &self,
        mut op: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> RedisResult<T> {
        self.run_once(&mut op)
    }

    fn run_once<T>(
        &self,
        op: &mut impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let (mut con, epoch) = match self.pool.take(link::capped(
            Instant::now() + self.settings.link.connect_timeout,
        ))? {
            Some(idle) => idle,
            // The epoch from before connecting: a failover noticed meanwhile must not adopt a
            // connection that may have gone to the old master.
            None => match (self.pool.epoch(), self.connect_for_commands()) {
                (epoch, Ok(con)) => (con, epoch),
                (_, Err(e)) => {
                    self.pool.release_slot();
                    return Err(e);
                }
            },
        };
        // The cluster connection may connect to a node inside `op` (see `LinkSettings::scoped`).
        let result = match &self.target {
            Target::Cluster(_) => self.settings.link.scoped(|| op(&mut *con)),
            _ => op(&mut *con),
        }
        // The server's own error however a script wrapped it (Redis 6.2 does), before anything
        // looks at its kind: the retry policy's READONLY, a kind's WRONGTYPE, a caller's OOM.
        .map_err(crate::error::unwrapped);
        match &result {
            // On a Cluster a timeout says one node does not answer, not that the others are
            // gone: drop this connection (a late reply would put it out of step), keep the
            // rest. Remaking them all would touch the silent node again, a timeout each time.
            Err(e) if self.is_cluster() && e.is_timeout() => self.pool.release_slot(),
            Err(e) if is_transport_error(e) || self.master_moved(e) => {
                // The server may have restarted, or a failover moved the master: every idle
                // connection is suspect.
                if let Target::Sentinel(sentinels) = &self.target {
                    sentinels.suspect();
                }
                self.pool.invalidate();
                self.pool.release_slot();
            }
            _ if !con.is_open() => self.pool.release_slot(),
            _ => self.pool.give_back(con, epoch),
        }
        result
    }

    /// A command that gets no answer in time fails, never hangs its thread (see `link`): the
    /// retry policy and the idempotent scripts make failing safe.
    fn connect_for_commands(&self) -> RedisResult<PooledConnection> {
        if let Target::Cluster(cluster) = &self.target {
            // Timeouts are set by the builder (ClusterTarget::new), for every node.
            let connection = self
                .settings
                .link
                .scoped(|| cluster.client.get_generic_connection::<Link>())?;
            return Ok(Box::new(connection));
        }
        Ok(Box::new(self.connect()?))
    }
}

/// A new [`Link`] to the server `client` names, with the builder's timeouts.
fn link_to(client: &redis::Client, settings: &Settings) -> RedisResult<Link> {
    Link::connect(client.get_connection_info(), &settings.link)
}

/// The server `url` names; `what` says whose URL it is in the error ("redis URL",
/// "sentinel URL"). A URL the `redis` crate cannot read is refused with what was expected.
pub(crate) fn parse_url(what: &str, url: &str) -> Result<ConnectionInfo> {
    const EXPECTED: &str = "expected redis://[user:password@]host:port[/db], \
                            rediss://host:port (TLS) or redis+unix:///path";
    let scheme = match url.split_once("://") {
        None => {
            return Err(Error::invalid(format!(
                "{what} {url:?} has no scheme: {EXPECTED}"
            )));
        }
        Some((scheme, _)) => scheme.to_ascii_lowercase(),
    };
    match scheme.as_str() {
        "redis" | "redis+unix" | "unix" | "valkey" | "valkey+unix" => {}
        "rediss" | "valkeys" if cfg!(feature = "tls") => {}
        "rediss" | "valkeys" => {
            return Err(Error::invalid(format!(
                "{what} {url:?}: this build has no TLS support (enable the `tls` feature)"
            )));
        }
        _ => {
            return Err(Error::invalid(format!(
                "{what} {url:?}: {scheme}:// is not a Redis scheme; {EXPECTED}"
            )));
        }
    }
    url.into_connection_info()
        .map_err(|e| Error::invalid(format!("{what} {url:?} cannot be read ({e}); {EXPECTED}")))
}

/// One server a client was told of ([`Backend::servers`]).
#[derive(Clone, Debug)]
pub(crate) struct Server {
    /// Equal for two mentions of one server: `host:port` with the host in lower case and
    /// the loopback names (`localhost`, `127.0.0.1`, `::1`) as one, or `unix:path`. No
    /// database number: another database of one process fails with it.
    pub key: String,
    /// As it was given, for a message.
    pub shown: String,
}

impl Server {
    fn at(addr: &ConnectionAddr) -> Server {
        let (host, port) = match addr {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                (host, port)
            }
            ConnectionAddr::Unix(path) => {
                let shown = format!("unix:{}", path.display());
                return Server {
                    key: shown.clone(),
                    shown,
                };
            }
            // A transport of a later `redis` version: its own text, compared as it is.
            other => {
                return Server {
                    key: other.to_string(),
                    shown: other.to_string(),
                };
            }
        };
        let bare = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let key_host = match bare.as_str() {
            "127.0.0.1" | "::1" | "localhost" => "localhost",
            other => other,
        };
        Server {
            key: format!("{key_host}:{port}"),
            shown: format!("{host}:{port}"),
        }
    }
}

/// A client for the server at `url`.
fn direct_client(url: &str) -> Result<redis::Client> {
    let info = parse_url("redis URL", url)?;
    if matches!(info.addr(), ConnectionAddr::TcpTls { insecure: true, .. }) {
        return Err(Error::invalid(format!(
            "redis URL {url:?}: #insecure (no certificate check) is refused; give the \
             server's CA to ClientBuilder::tls_certificates instead"
        )));
    }
    // No CLIENT SETINFO on connect: its replies are read one timeout each, so against a
    // stopped server a new connection would cost several timeouts instead of one.
    let redis_settings = info.redis_settings().clone().set_skip_set_lib_name();
    let info = info.set_redis_settings(redis_settings);
    redis::Client::open(info).map_err(|e| Error::invalid(e.to_string()))
}

#[cfg(test)]
mod test_support {
    use super::*;

    /// A backend with the builder's default timeouts (5 s connect, 3 s response); no I/O.
    pub(crate) fn backend(deployment: Deployment) -> Backend {
        let settings = Settings {
            pool_size: 1,
            link: LinkSettings {
                connect_timeout: Duration::from_secs(5),
                response_timeout: Duration::from_secs(3),
                tls: Default::default(),
                name: None,
            },
        };
        Backend::new(&deployment, settings).unwrap()
    }

    pub(crate) fn single() -> Backend {
        backend(Deployment::Url("redis://127.0.0.1:6379/".into()))
    }

    pub(crate) fn cluster() -> Backend {
        backend(Deployment::Cluster(vec!["redis://127.0.0.1:7000/".into()]))
    }
}

#[cfg(test)]
mod tests {
    use super::hello::{hello_fields, supported};
    use super::*;

    #[test]
    fn versions_are_read_and_compared() {
        for (v, ok) in [
            ("7.0.15", true),
            ("6.2.0", true),
            ("6.10.1", true),
            ("10.0.0", true),
            ("6.0.9", false),
            ("5.0.14", false),
            ("unstable", true),
        ] {
            assert_eq!(supported(v), ok, "{v}");
        }
        let pairs = Value::Array(vec![
            Value::BulkString(b"server".to_vec()),
            Value::BulkString(b"redis".to_vec()),
            Value::BulkString(b"version".to_vec()),
            Value::BulkString(b"7.0.15".to_vec()),
            Value::BulkString(b"proto".to_vec()),
            Value::Int(2),
        ]);
        let fields = hello_fields(&pairs);
        assert!(fields.contains(&("version".into(), "7.0.15".into())));
        assert!(fields.contains(&("proto".into(), "2".into())));
        assert!(hello_fields(&Value::Okay).is_empty());
        assert!(hello_fields(&Value::Nil).is_empty());
        assert_eq!(Mode::parse("cluster"), Some(Mode::Cluster));
        assert_eq!(Mode::parse("replica"), None);
    }
}
