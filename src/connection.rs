//! Every byte the crate sends to Redis goes through here.
//!
//! [`Backend`] owns how to reach the server (a `redis::Client` built from the URL, or the
//! master that Sentinel names), a small pool of command connections, and the retry policy.
//! The lock, subscriber and renewal modules ask it to run a closure on a connection or to open
//! a dedicated pub/sub connection; none of them knows whether the server is a single node or a
//! Sentinel-managed master.
//!
//! # Why our own pool and not r2d2
//! `redis`'s r2d2 integration either PINGs every connection at checkout (one extra round trip
//! per lock operation, doubling the cost of an uncontended acquisition) or, without that test,
//! hands out connections that died with a restarted server, one failed command each. It also
//! runs upkeep threads. The pool below has no threads, never PINGs, and forgets every idle
//! connection at once when any connection fails at the transport level (an *epoch* bump), so a
//! server restart costs one failed attempt, which the retry policy absorbs.
//!
//! # Retries
//! A command whose connection fails fast (refused, reset, closed) is retried on a fresh
//! connection, at most [`ATTEMPTS`] times. That is safe only because every script the crate
//! runs is idempotent (see `lua/`): a retry after a reply was lost changes nothing. A command
//! that *timed out* is not retried: the server is there but not answering (paused, stopped,
//! overloaded), and another full timeout would only make the caller wait longer. So every
//! call waits at most one response timeout for an unresponsive server, plus connect time.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::io::tcp::{TcpSettings, socket2::TcpKeepalive};
use redis::{
    Connection, ConnectionAddr, ConnectionInfo, ConnectionLike, IntoConnectionInfo, RedisError,
    RedisResult, Value,
};

use crate::error::{Error, Result};
use crate::scripts::Freeing;
use crate::sentinel::{SentinelSpec, Sentinels};

/// Attempts per command when its connection fails at the transport level.
const ATTEMPTS: usize = 3;
/// Pause before the second and third attempt: long enough for a restarting server's port to
/// answer, short against any lease.
const BACKOFF: [Duration; 2] = [Duration::from_millis(20), Duration::from_millis(200)];

/// Connection settings, from the builder.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub pool_size: u32,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
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
    Direct(redis::Client),
    Sentinel(Box<Sentinels>),
    Cluster(Box<ClusterTarget>),
}

/// A Redis Cluster: command connections are `redis::cluster::ClusterConnection`s (they route
/// each command by its first key and follow MOVED and ASK). Pub/sub is sharded where the
/// cluster has it (see `subscriber::sharded`); otherwise it is a plain connection to one
/// node, since classic PUBLISH reaches every node of a cluster.
struct ClusterTarget {
    client: ClusterClient,
    /// One client per seed node, for the classic pub/sub connection.
    nodes: Vec<redis::Client>,
    /// The seed node to try first for the next pub/sub connection: the last one that worked.
    next_node: AtomicUsize,
    /// The node [`Backend::check`] reached knows SPUBLISH (Redis 7), and we reach the nodes
    /// without TLS: the sharded subscriber drives its own plain TCP connections.
    sharded: AtomicBool,
}

/// Retries inside `ClusterConnection` for one command: redirects (MOVED, ASK) count too.
/// Kept low so that our own policy ([`ATTEMPTS`], [`BACKOFF`]) stays in charge: with the
/// crate's defaults, a script refused with TRYAGAIN during a slot migration was measured to
/// block for 154-219 s, and a timed-out command is retried at once by the crate.
const CLUSTER_RETRIES: u32 = 2;
/// The crate's waits between its retries, in milliseconds.
const CLUSTER_RETRY_WAIT_MS: (u64, u64) = (10, 100);

/// How the crate reaches Redis: connection parameters, the command pool, the retry policy.
pub(crate) struct Backend {
    target: Target,
    settings: Settings,
    pool: Pool,
    /// The Sentinel generation the pool's connections were made in.
    pool_generation: AtomicU64,
}

impl Backend {
    /// Checks the URLs and that they name a transport this build supports. No I/O.
    pub fn new(deployment: &Deployment, settings: Settings) -> Result<Backend> {
        let tcp = tcp_settings();
        let target = match deployment {
            Deployment::Url(url) => Target::Direct(direct_client(url, tcp)?),
            Deployment::Sentinel(spec) => Target::Sentinel(Box::new(Sentinels::new(
                spec,
                tcp,
                settings.connect_timeout,
                settings.response_timeout,
            )?)),
            Deployment::Cluster(seeds) => {
                Target::Cluster(Box::new(ClusterTarget::new(seeds, tcp, &settings)?))
            }
        };
        Ok(Backend {
            target,
            pool: Pool::new(settings.pool_size),
            settings,
            pool_generation: AtomicU64::new(0),
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
            Target::Sentinel(_) => Some(crate::sentinel::FOLLOW_INTERVAL),
        }
    }

    fn drop_stale_connections(&self) {
        let generation = self.generation();
        if self.pool_generation.swap(generation, Ordering::AcqRel) != generation {
            self.pool.invalidate();
        }
    }

    /// Checks that the deployment answers and takes our credentials: one PING. On a Cluster,
    /// to one node only: the cluster connection would send it to every master, and a client
    /// must be able to start while a master is down (the locks of the other slots work).
    pub fn check(&self) -> Result<()> {
        match &self.target {
            Target::Cluster(cluster) => {
                let mut failure = None;
                // A stopped node accepts the connection and never answers: try the next.
                for _ in 0..cluster.nodes.len() {
                    let pinged = cluster
                        .connect_node(self.settings.connect_timeout)
                        .and_then(|mut con| {
                            con.set_read_timeout(Some(self.settings.response_timeout))?;
                            redis::cmd("PING").query::<()>(&mut con)?;
                            // One reply per name: nil for a command the server does not know.
                            let spublish: Vec<Value> = redis::cmd("COMMAND")
                                .arg("INFO")
                                .arg("SPUBLISH")
                                .query(&mut con)?;
                            Ok(matches!(spublish.first(), Some(Value::Array(_))))
                        });
                    match pinged {
                        Ok(has_spublish) => {
                            let plain = cluster.nodes.iter().all(|n| {
                                matches!(n.get_connection_info().addr(), ConnectionAddr::Tcp(..))
                            });
                            cluster
                                .sharded
                                .store(has_spublish && plain, Ordering::Relaxed);
                            return Ok(());
                        }
                        Err(e) => failure = Some(e),
                    }
                    cluster.skip_node();
                }
                Err(failure.expect("at least one seed node").into())
            }
            _ => self.run(|con| redis::cmd("PING").query::<()>(con)),
        }
    }

    /// Whether this is a Redis Cluster: a script may only touch keys of one slot.
    pub fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(_))
    }

    /// How long a server may take to answer one command.
    pub fn response_timeout(&self) -> Duration {
        self.settings.response_timeout
    }

    /// How long making a connection may take.
    pub fn connect_timeout(&self) -> Duration {
        self.settings.connect_timeout
    }

    /// Whether wake-ups go through sharded pub/sub (a Redis 7 Cluster reached without TLS;
    /// known once [`Backend::check`] has run).
    pub fn sharded_pubsub(&self) -> bool {
        match &self.target {
            Target::Cluster(cluster) => cluster.sharded.load(Ordering::Relaxed),
            _ => false,
        }
    }

    /// What the scripts that free a lock need to know of this deployment.
    pub fn freeing(&self) -> Freeing {
        Freeing {
            latch_ttl: self.latch_ttl(),
            publish: if self.sharded_pubsub() {
                "SPUBLISH"
            } else {
                "PUBLISH"
            },
        }
    }

    /// The username and password the seed URLs carry, for the connections the sharded
    /// subscriber makes to the cluster's nodes.
    pub fn node_credentials(&self) -> (Option<String>, Option<String>) {
        let info = match &self.target {
            Target::Cluster(cluster) => cluster.nodes[0].get_connection_info(),
            Target::Direct(client) => client.get_connection_info(),
            Target::Sentinel(_) => return (None, None),
        };
        let redis = info.redis_settings();
        (
            redis.username().map(str::to_string),
            redis.password().map(str::to_string),
        )
    }

    /// Who serves which slots: `(first, last, "host:port" of the master)` (CLUSTER SLOTS).
    pub fn cluster_slots(&self) -> Result<Vec<(u16, u16, String)>> {
        let ranges: Vec<Value> = self.run(|con| redis::cmd("CLUSTER").arg("SLOTS").query(con))?;
        let mut slots = Vec::with_capacity(ranges.len());
        for range in ranges {
            let Value::Array(range) = range else { continue };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
                (range.first(), range.get(1), range.get(2))
            else {
                continue;
            };
            let (Some(host), Some(Value::Int(port))) = (master.first(), master.get(1)) else {
                continue;
            };
            let host = match host {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => continue,
            };
            // An empty or "?" host: the node does not know its address (it was never told).
            if host.is_empty() || host == "?" {
                continue;
            }
            let (Ok(first), Ok(last)) = (u16::try_from(*first), u16::try_from(*last)) else {
                continue;
            };
            let node = if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            };
            slots.push((first, last, node));
        }
        Ok(slots)
    }

    /// The pub/sub connection made by [`Backend::connect`] failed or never answered: on a
    /// Cluster, the next one starts with the following seed node. A node stopped with SIGSTOP
    /// still accepts TCP connections (the kernel completes the handshake), so starting with
    /// "the last one that worked" would go back to it for as long as it stays stopped.
    pub fn pubsub_failed(&self) {
        if let Target::Cluster(cluster) = &self.target {
            cluster.skip_node();
        }
    }

    /// A new connection to one server, authenticated and on the right database. Used for the
    /// pub/sub connection, which the subscriber owns outright. On a Cluster, a connection to
    /// one node: the seed that worked last, else the next one that answers.
    pub fn connect(&self) -> RedisResult<Connection> {
        self.connect_in_generation().map(|(con, _)| con)
    }

    /// [`Backend::connect`], and the [generation](Backend::generation) of the server it
    /// reached: the subscriber reconnects when the generation moves on.
    pub fn connect_in_generation(&self) -> RedisResult<(Connection, u64)> {
        let timeout = self.settings.connect_timeout;
        match &self.target {
            Target::Direct(client) => Ok((client.get_connection_with_timeout(timeout)?, 0)),
            Target::Cluster(cluster) => Ok((cluster.connect_node(timeout)?, 0)),
            Target::Sentinel(sentinels) => {
                let (master, generation) = sentinels.master()?;
                self.drop_stale_connections();
                let con = master
                    .get_connection_with_timeout(timeout)
                    .inspect_err(|_| sentinels.suspect())?;
                Ok((con, generation))
            }
        }
    }
}

/// Applies [`tcp_settings`] to a socket made outside the `redis` crate (the sharded
/// subscriber's).
pub(crate) fn configure_socket(socket: &impl std::os::fd::AsFd) -> std::io::Result<()> {
    let tcp = tcp_settings();
    let socket = redis::io::tcp::socket2::SockRef::from(socket);
    socket.set_tcp_nodelay(tcp.nodelay())?;
    if let Some(keepalive) = tcp.keepalive() {
        socket.set_tcp_keepalive(keepalive)?;
    }
    if let Some(timeout) = tcp.user_timeout() {
        socket.set_tcp_user_timeout(Some(timeout))?;
    }
    Ok(())
}

/// TCP settings of every connection.
fn tcp_settings() -> TcpSettings {
    // Lock hand-offs are latency-bound: never let Nagle hold back a small command. The
    // keepalive finds a silently dead peer (pulled cable, blackholed route) on connections
    // that sit idle, the pub/sub connection above all.
    TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(
            TcpKeepalive::new()
                .with_time(Duration::from_secs(10))
                .with_interval(Duration::from_secs(5))
                .with_retries(3),
        )
        .set_user_timeout(Duration::from_secs(30))
}

impl ClusterTarget {
    fn new(seeds: &[String], tcp: TcpSettings, settings: &Settings) -> Result<ClusterTarget> {
        if seeds.is_empty() {
            return Err(Error::invalid(
                "a Cluster client needs at least one seed node",
            ));
        }
        let nodes = seeds
            .iter()
            .map(|url| direct_client(url, tcp.clone()))
            .collect::<Result<Vec<_>>>()?;
        let infos: Vec<ConnectionInfo> = nodes
            .iter()
            .map(|c| c.get_connection_info().clone())
            .collect();
        let (min_wait, max_wait) = CLUSTER_RETRY_WAIT_MS;
        let client = ClusterClientBuilder::new(infos)
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(min_wait)
            .max_retry_wait(max_wait)
            .connection_timeout(settings.connect_timeout)
            .response_timeout(settings.response_timeout)
            .tcp_settings(tcp)
            .build()
            .map_err(|e| Error::invalid(format!("cluster seeds: {e}")))?;
        Ok(ClusterTarget {
            client,
            nodes,
            next_node: AtomicUsize::new(0),
            sharded: AtomicBool::new(false),
        })
    }

    /// A plain connection to the first seed node that answers, starting with the one that
    /// worked last.
    fn connect_node(&self, timeout: Duration) -> RedisResult<Connection> {
        let first = self.next_node.load(Ordering::Relaxed);
        let mut failure = None;
        for i in 0..self.nodes.len() {
            let n = (first + i) % self.nodes.len();
            match self.nodes[n].get_connection_with_timeout(timeout) {
                Ok(con) => {
                    self.next_node.store(n, Ordering::Relaxed);
                    return Ok(con);
                }
                Err(e) => failure = Some(e),
            }
        }
        Err(failure.expect("at least one seed node"))
    }

    /// The next pub/sub connection starts with the seed after the one that worked last.
    fn skip_node(&self) {
        let len = self.nodes.len();
        let _ = self
            .next_node
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some((n + 1) % len)
            });
    }
}

/// A client for the server at `url`.
fn direct_client(url: &str, tcp: TcpSettings) -> Result<redis::Client> {
    let info: ConnectionInfo = url
        .into_connection_info()
        .map_err(|e| Error::invalid(format!("redis URL {url:?}: {e}")))?;
    if !info.addr().is_supported() {
        return Err(Error::invalid(format!(
            "redis URL {url:?}: this build has no TLS support (enable the `tls` feature)"
        )));
    }
    // No CLIENT SETINFO on connect: its replies are read one timeout each, so against a
    // stopped server a new connection would cost several timeouts instead of one.
    let redis_settings = info.redis_settings().clone().set_skip_set_lib_name();
    let info = info
        .set_tcp_settings(tcp)
        .set_redis_settings(redis_settings);
    redis::Client::open(info).map_err(|e| Error::invalid(e.to_string()))
}

impl Backend {
    /// Runs `op` on a pooled connection, retrying on a fresh one when the connection fails.
    /// `op` must be idempotent: it may run more than once if a reply was lost.
    pub fn run<T>(
        &self,
        mut op: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> Result<T> {
        let mut attempt = 0;
        loop {
            match self.run_once(&mut op) {
                Err(e) if self.is_retryable(&e) && attempt + 1 < ATTEMPTS => {
                    log::debug!("redis connection failed ({e}), retrying");
                    std::thread::sleep(BACKOFF[attempt]);
                    attempt += 1;
                }
                other => return other.map_err(Error::from),
            }
        }
    }

    /// Runs `op` once, without retries: for best-effort notifications.
    pub fn run_once_only<T>(
        &self,
        mut op: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> Result<T> {
        self.run_once(&mut op).map_err(Error::from)
    }

    /// How long a latch that makes a retried script idempotent must live: longer than the
    /// slowest retry can arrive (every attempt waiting for a pooled connection, connecting and
    /// timing out, plus the pauses).
    pub fn latch_ttl(&self) -> Duration {
        let mut attempt = self.settings.connect_timeout * 2 + self.settings.response_timeout;
        if self.is_cluster() {
            // The cluster connection tries each command up to CLUSTER_RETRIES more times.
            attempt *= CLUSTER_RETRIES + 1;
        }
        attempt * ATTEMPTS as u32 + BACKOFF.iter().sum::<Duration>() + Duration::from_secs(1)
    }

    fn run_once<T>(
        &self,
        op: &mut impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let (mut con, epoch) = match self
            .pool
            .take(Instant::now() + self.settings.connect_timeout)?
        {
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
        let result = op(&mut *con);
        match &result {
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

    fn connect_for_commands(&self) -> RedisResult<PooledConnection> {
        if let Target::Cluster(cluster) = &self.target {
            // Timeouts are set by the builder (ClusterTarget::new), for every node.
            return Ok(Box::new(cluster.client.get_connection()?));
        }
        let con = self.connect()?;
        // A command that gets no answer must fail, not hang its thread: the retry policy and
        // the idempotent scripts make failing safe.
        con.set_read_timeout(Some(self.settings.response_timeout))?;
        con.set_write_timeout(Some(self.settings.response_timeout))?;
        Ok(Box::new(con))
    }
}

impl Backend {
    /// A write refused because the server we know as the master is a replica now: Sentinel
    /// moved the master. Nothing was written, so the command can run again on the new one.
    fn master_moved(&self, e: &RedisError) -> bool {
        matches!(self.target, Target::Sentinel(_)) && is_readonly(e)
    }

    /// Failures worth a retry on a new connection: those that fail fast. A timeout (or a
    /// pool that stayed exhausted) would cost the caller another full timeout.
    fn is_retryable(&self, e: &RedisError) -> bool {
        (is_transport_error(e) && !e.is_timeout()) || self.master_moved(e) || self.slot_moving(e)
    }

    /// A Cluster refusal that means the command did not run and may well run after a pause:
    /// the slot is migrating (TRYAGAIN: its keys are split between two nodes; ASK or MOVED
    /// left over after the connection's own redirects), or the cluster is between a master's
    /// failure and its replica's promotion (CLUSTERDOWN).
    fn slot_moving(&self, e: &RedisError) -> bool {
        self.is_cluster() && matches!(e.code(), Some("TRYAGAIN" | "CLUSTERDOWN" | "ASK" | "MOVED"))
    }
}

/// A `READONLY` refusal, from a command or from a write inside a script.
fn is_readonly(e: &RedisError) -> bool {
    e.code() == Some("READONLY") || e.to_string().contains("READONLY")
}

/// Errors after which the connection cannot be trusted: the transport failed, so the command
/// may or may not have run.
fn is_transport_error(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout()
}

/// A command connection: the scripts and the closures given to [`Backend::run`] see only
/// `ConnectionLike`, so they run unchanged on whatever kind of connection the target makes.
type PooledConnection = Box<dyn ConnectionLike + Send>;

/// Idle connections plus a count of connections in existence, capped at `max`.
struct Pool {
    state: Mutex<PoolState>,
    returned: Condvar,
    epoch: AtomicU64,
    max: u32,
}

struct PoolState {
    idle: Vec<(PooledConnection, u64)>,
    open: u32,
}

impl Pool {
    fn new(max: u32) -> Pool {
        Pool {
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                open: 0,
            }),
            returned: Condvar::new(),
            epoch: AtomicU64::new(0),
            max,
        }
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn invalidate(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// An idle connection of the current epoch, or `None` with a slot reserved for a new one.
    fn take(&self, deadline: Instant) -> RedisResult<Option<(PooledConnection, u64)>> {
        let mut state = self.state.lock();
        loop {
            let epoch = self.epoch();
            while let Some((con, e)) = state.idle.pop() {
                if e == epoch {
                    return Ok(Some((con, e)));
                }
                state.open -= 1; // stale: dropped here
            }
            if state.open < self.max {
                state.open += 1;
                return Ok(None);
            }
            if self.returned.wait_until(&mut state, deadline).timed_out() {
                return Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no pooled redis connection became free in time (raise pool_size?)",
                )));
            }
        }
    }

    fn give_back(&self, con: PooledConnection, epoch: u64) {
        self.state.lock().idle.push((con, epoch));
        self.returned.notify_one();
    }

    fn release_slot(&self) {
        self.state.lock().open -= 1;
        self.returned.notify_one();
    }
}
