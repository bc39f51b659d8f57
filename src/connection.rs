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
//! One policy, [`Backend::retry_pause`]. A command whose connection fails fast (refused,
//! reset, closed) is retried on a fresh connection, at most [`ATTEMPTS`] times. That is safe
//! only because every script the crate runs is idempotent (see `lua/`): a retry after a reply
//! was lost changes nothing. A command that *timed out* is not retried: the server is there but
//! not answering (paused, stopped, overloaded), and another full timeout would only make the
//! caller wait longer. So every call waits at most one response timeout for an unresponsive
//! server, plus connect time.
//!
//! On a Cluster, a command refused because its slot is migrating (`TRYAGAIN`) or because the
//! cluster is between a master's failure and its replica's promotion (`CLUSTERDOWN`) did not
//! run, and will run once the operator's reshard or the election is done: a wait whose length
//! no fixed count of retries fits. It is retried after short pauses until one response
//! timeout has passed since the call started ([`Backend::retry_pause`]): the longest the call
//! would have waited for a server that does not answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{
    ConnectionAddr, ConnectionInfo, ConnectionLike, ErrorKind, IntoConnectionInfo, RedisError,
    RedisResult, ServerErrorKind, Value,
};

use crate::error::{Error, Result};
use crate::keys::SLOTS;
use crate::link::{Link, LinkSettings};
use crate::sentinel::{SentinelSpec, Sentinels};

/// Attempts per command when its connection fails at the transport level.
const ATTEMPTS: usize = 3;
/// Pause before the second and third attempt: long enough for a restarting server's port to
/// answer, short against any lease.
const BACKOFF: [Duration; ATTEMPTS - 1] = [Duration::from_millis(20), Duration::from_millis(200)];

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

/// A Redis Cluster: command connections are `redis::cluster::ClusterConnection`s (they route
/// each command by its first key and follow MOVED and ASK). Pub/sub is sharded where the
/// cluster has it (see `subscriber::polled`); otherwise it is a connection to one seed node,
/// since classic PUBLISH reaches every node of a cluster.
struct ClusterTarget {
    client: ClusterClient,
    /// One client per seed node, for [`Backend::check`] and the classic pub/sub connection.
    nodes: Vec<redis::Client>,
    /// The seed node to try first for the next connection to one node: the last one that
    /// worked.
    next_node: AtomicUsize,
    /// The node [`Backend::check`] reached knows SPUBLISH (Redis 7).
    sharded: AtomicBool,
}

/// Retries inside `ClusterConnection` for one command: it follows MOVED and ASK (each
/// redirect counts as a retry) and pauses before retrying TRYAGAIN and CLUSTERDOWN. Kept low
/// so that our own policy ([`Backend::retry_pause`]) stays in charge: with the `redis` crate's
/// defaults, a script refused with TRYAGAIN during a slot migration was measured to block for
/// 154-219 s, and a timed-out command is retried at once by that crate.
const CLUSTER_RETRIES: u32 = 2;
/// The shortest and the longest pause, in milliseconds, before retrying a command that a
/// moving slot or a failing-over cluster refused: inside `ClusterConnection` (at random,
/// below a bound that doubles from 20 ms) and in [`Backend::retry_pause`] (doubling from the
/// shortest). A reshard moves a slot in milliseconds; under load it takes longer, and the cap
/// keeps the load of a waiting call low (about thirty commands a second were measured, the
/// connection's own tries included).
const CLUSTER_RETRY_WAIT_MS: (u64, u64) = (10, 100);

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

/// Which master serves each slot of a Cluster, as CLUSTER SLOTS said.
pub(crate) struct SlotMap {
    nodes: Vec<String>,
    /// An index into `nodes` per slot; `u16::MAX` for a slot nobody serves.
    owners: Vec<u16>,
}

impl SlotMap {
    pub(crate) fn new(ranges: Vec<(u16, u16, String)>) -> SlotMap {
        let mut nodes: Vec<String> = Vec::new();
        let mut owners = vec![u16::MAX; usize::from(SLOTS)];
        for (first, last, node) in ranges {
            let index = match nodes.iter().position(|n| *n == node) {
                Some(index) => index,
                None => {
                    nodes.push(node);
                    nodes.len() - 1
                }
            };
            for slot in first..=last.min(SLOTS - 1) {
                owners[usize::from(slot)] = index as u16;
            }
        }
        SlotMap { nodes, owners }
    }

    /// The `host:port` of the master serving `slot`, if any does.
    pub fn node_of(&self, slot: u16) -> Option<&str> {
        let owner = *self.owners.get(usize::from(slot))?;
        self.nodes.get(usize::from(owner)).map(String::as_str)
    }

    /// Whether the map knows of no slot at all.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
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
                    let pinged = cluster.connect_node(&self.settings).and_then(|mut con| {
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
                            cluster.sharded.store(has_spublish, Ordering::Relaxed);
                            return Ok(());
                        }
                        Err(e) => failure = Some(e),
                    }
                    cluster.skip_node();
                }
                Err(failure.expect("at least one seed node").into())
            }
            _ => Ok(self.run(|con| redis::cmd("PING").query::<()>(con))?),
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

    /// Whether wake-ups go through sharded pub/sub (a Redis 7 Cluster; known once
    /// [`Backend::check`] has run).
    pub fn sharded_pubsub(&self) -> bool {
        match &self.target {
            Target::Cluster(cluster) => cluster.sharded.load(Ordering::Relaxed),
            _ => false,
        }
    }

    /// The TLS configuration every connection of this client uses, the subscriber's too.
    pub fn tls(&self) -> &crate::tls::TlsConfig {
        &self.settings.link.tls
    }

    /// Cluster: whether the seed nodes are reached over TLS (`rediss://`), and so every node
    /// the slot map names. The subscriber's connections to those nodes do the same.
    pub fn nodes_over_tls(&self) -> bool {
        match &self.target {
            Target::Cluster(cluster) => cluster.nodes.iter().any(|n| {
                matches!(
                    n.get_connection_info().addr(),
                    ConnectionAddr::TcpTls { .. }
                )
            }),
            _ => false,
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

    /// The cluster's slot map as last read, read now if it never was or was [forgotten]
    /// since. Shared by the renewal thread (which groups its calls by master) and the
    /// subscriber (which subscribes where a lock's slot lives).
    ///
    /// [forgotten]: Backend::forget_slot_map
    pub fn slot_map(&self) -> RedisResult<Arc<SlotMap>> {
        if let (Some(map), true) = &*self.slot_map.lock() {
            return Ok(map.clone());
        }
        let map = Arc::new(SlotMap::new(self.cluster_slots()?));
        *self.slot_map.lock() = (Some(map.clone()), true);
        Ok(map)
    }

    /// Something said the slot map is out of date (a MOVED, a connection to a master that
    /// failed): the next [`Backend::slot_map`] reads it again.
    pub fn forget_slot_map(&self) {
        self.slot_map.lock().1 = false;
    }

    /// The slot map as last read, even if [forgotten](Backend::forget_slot_map) since: for
    /// when reading it again failed and an old map is still better than none (the renewal
    /// thread groups its calls by it; a call it sends to the wrong master is refused, not
    /// run).
    pub fn last_slot_map(&self) -> Option<Arc<SlotMap>> {
        self.slot_map.lock().0.clone()
    }

    /// Installs `map` as if CLUSTER SLOTS had just said it.
    #[cfg(test)]
    pub fn set_slot_map(&self, map: SlotMap) {
        *self.slot_map.lock() = (Some(Arc::new(map)), true);
    }

    /// Records whether the master at `node` answered a call: the renewal thread calls the
    /// silent ones last (see [`Backend::is_silent`]).
    pub fn note_answer(&self, node: &str, answered: bool) {
        let mut silent = self.silent.lock();
        silent.retain(|n| n != node);
        if !answered {
            silent.push(node.to_string());
        }
    }

    /// Whether the last call to the master at `node` went unanswered.
    pub fn is_silent(&self, node: &str) -> bool {
        self.silent.lock().iter().any(|n| n == node)
    }

    /// The indices of `slots` grouped so that each group may go in one script call: on a
    /// Cluster, where a script may only touch keys of one slot (else CROSSSLOT), one group
    /// per slot, in the order each slot first appears, indices ascending; on one server, one
    /// group of all. The one place calls are grouped by slot.
    pub fn group_by_slot(&self, slots: impl IntoIterator<Item = u16>) -> Vec<Vec<usize>> {
        let slots = slots.into_iter().enumerate();
        if !self.is_cluster() {
            let all: Vec<usize> = slots.map(|(i, _)| i).collect();
            return if all.is_empty() {
                Vec::new()
            } else {
                vec![all]
            };
        }
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, slot) in slots {
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, group)) => group.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        groups.into_iter().map(|(_, group)| group).collect()
    }

    /// The indices of calls (each given by the slot it goes to) grouped by the server that
    /// serves them, with that master's `host:port` on a Cluster: all of them on one server;
    /// those of each master on a Cluster, by the slot map (one each if the map cannot be
    /// read). Masters that did not answer last time ([`Backend::note_answer`]) go last, so
    /// that the time they cost does not delay the calls to the others.
    pub fn group_by_master(
        &self,
        slots: impl IntoIterator<Item = u16>,
    ) -> Vec<(Option<String>, Vec<usize>)> {
        let slots: Vec<u16> = slots.into_iter().collect();
        if !self.is_cluster() {
            return vec![(None, (0..slots.len()).collect())];
        }
        // Read again when forgotten; if that fails, the last map read: it is likely still
        // right (CLUSTER SLOTS goes to a node at random, and fails when that one is the
        // stopped master that had the map forgotten), and a call it sends to the wrong
        // master is refused and run again on its own. Without a map, one call per slot, each
        // waiting out its timeouts on a stopped master, would hold a renewal round up until
        // the locks on the others expired.
        let map = match self.slot_map() {
            Ok(map) => map,
            Err(e) => match self.last_slot_map() {
                Some(map) => {
                    log::debug!("cannot read the slot map again ({e}); grouping by the last one");
                    map
                }
                None => {
                    log::debug!("cannot read the slot map ({e}); one call at a time");
                    return (0..slots.len()).map(|i| (None, vec![i])).collect();
                }
            },
        };
        let mut by_node: Vec<(Option<String>, Vec<usize>)> = Vec::new();
        for (i, slot) in slots.into_iter().enumerate() {
            let node = map.node_of(slot);
            match by_node
                .iter_mut()
                .find(|(n, _)| n.is_some() && n.as_deref() == node)
            {
                Some((_, group)) => group.push(i),
                None => by_node.push((node.map(str::to_string), vec![i])),
            }
        }
        by_node.sort_by_key(|(node, _)| node.as_deref().is_some_and(|n| self.is_silent(n)));
        by_node
    }

    /// Who serves which slots: `(first, last, "host:port" of the master)` (CLUSTER SLOTS).
    fn cluster_slots(&self) -> RedisResult<Vec<(u16, u16, String)>> {
        let ranges: Vec<Value> = self.run(|con| redis::cmd("CLUSTER").arg("SLOTS").query(con))?;
        Ok(master_ranges(ranges))
    }

    /// A pub/sub connection failed or never answered: on a Cluster, the next connection to
    /// one seed node starts with the following one. A node stopped with SIGSTOP still accepts
    /// TCP connections (the kernel completes the handshake), so starting with "the last one
    /// that worked" would go back to it for as long as it stays stopped.
    pub fn pubsub_failed(&self) {
        match &self.target {
            Target::Cluster(cluster) => cluster.skip_node(),
            // It may have failed over: ask the sentinels before the next connection.
            Target::Sentinel(sentinels) => sentinels.suspect(),
            Target::Direct(_) => {}
        }
    }

    /// The server a subscriber with classic pub/sub connects to: the one server, the master
    /// Sentinel names, or on a Cluster without sharded pub/sub the seed node that worked
    /// last (a PUBLISH reaches every node; [`Backend::pubsub_failed`] moves on to the next).
    /// With its credentials (see [`Backend::node_credentials`]) and the
    /// [generation](Backend::generation) it belongs to.
    pub fn pubsub_server(
        &self,
    ) -> RedisResult<(ConnectionAddr, Option<String>, Option<String>, u64)> {
        let (client, generation) = match &self.target {
            Target::Direct(client) => ((**client).clone(), 0),
            Target::Sentinel(sentinels) => sentinels.master()?,
            Target::Cluster(cluster) => {
                let n = cluster.next_node.load(Ordering::Relaxed) % cluster.nodes.len();
                (cluster.nodes[n].clone(), 0)
            }
        };
        let info = client.get_connection_info();
        let redis = info.redis_settings();
        Ok((
            info.addr().clone(),
            redis.username().map(str::to_string),
            redis.password().map(str::to_string),
            generation,
        ))
    }

    /// A new command connection to one server, authenticated and on the right database. On
    /// a Cluster, a connection to one node: the seed that worked last, else the next one that
    /// answers.
    pub fn connect(&self) -> RedisResult<Link> {
        let settings = &self.settings;
        match &self.target {
            Target::Direct(client) => link_to(client, settings),
            Target::Cluster(cluster) => cluster.connect_node(settings),
            Target::Sentinel(sentinels) => {
                let (master, _) = sentinels.master()?;
                self.drop_stale_connections();
                link_to(&master, settings).inspect_err(|_| sentinels.suspect())
            }
        }
    }
}

/// The ranges of a CLUSTER SLOTS reply with their master's `host:port`; a range whose master
/// does not know its own address (`""` or `"?"`) or that is malformed is left out.
fn master_ranges(ranges: Vec<Value>) -> Vec<(u16, u16, String)> {
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
    slots
}

/// A new [`Link`] to the server `client` names, with the builder's timeouts.
fn link_to(client: &redis::Client, settings: &Settings) -> RedisResult<Link> {
    Link::connect(client.get_connection_info(), &settings.link)
}

impl ClusterTarget {
    fn new(seeds: &[String], settings: &LinkSettings) -> Result<ClusterTarget> {
        if seeds.is_empty() {
            return Err(Error::invalid(
                "a Cluster client needs at least one seed node",
            ));
        }
        let nodes = seeds
            .iter()
            .map(|url| direct_client(url))
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
    fn connect_node(&self, settings: &Settings) -> RedisResult<Link> {
        let first = self.next_node.load(Ordering::Relaxed);
        let mut failure = None;
        for i in 0..self.nodes.len() {
            let n = (first + i) % self.nodes.len();
            match link_to(&self.nodes[n], settings) {
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
fn direct_client(url: &str) -> Result<redis::Client> {
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
    let info = info.set_redis_settings(redis_settings);
    redis::Client::open(info).map_err(|e| Error::invalid(e.to_string()))
}

impl Backend {
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

    /// How long a latch that makes a retried script idempotent must live: longer than the
    /// slowest retry can arrive (every attempt waiting for a pooled connection, connecting and
    /// timing out, plus the pauses).
    pub fn latch_ttl(&self) -> Duration {
        let mut attempt =
            self.settings.link.connect_timeout * 2 + self.settings.link.response_timeout;
        let mut refusals = Duration::ZERO;
        if self.is_cluster() {
            // The cluster connection tries each command up to CLUSTER_RETRIES more times.
            attempt *= CLUSTER_RETRIES + 1;
            // A refusal (TRYAGAIN, CLUSTERDOWN) is retried only within one response timeout
            // of the call's start; after that, only transport failures, as many as are left.
            refusals = self.settings.link.response_timeout;
        }
        attempt * ATTEMPTS as u32
            + BACKOFF.iter().sum::<Duration>()
            + refusals
            + Duration::from_secs(1)
    }

    fn run_once<T>(
        &self,
        op: &mut impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let (mut con, epoch) = match self
            .pool
            .take(Instant::now() + self.settings.link.connect_timeout)?
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
        // The cluster connection may connect to a node inside `op` (see `tls`).
        let result = self.settings.link.tls.scoped(|| op(&mut *con));
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
                .tls
                .scoped(|| cluster.client.get_generic_connection::<Link>())?;
            return Ok(Box::new(connection));
        }
        Ok(Box::new(self.connect()?))
    }
}

impl Backend {
    /// A write refused because the server we know as the master is a replica now: Sentinel
    /// moved the master. Nothing was written, so the command can run again on the new one.
    fn master_moved(&self, e: &RedisError) -> bool {
        matches!(self.target, Target::Sentinel(_)) && is_readonly(e)
    }

    /// The retry policy: after an attempt failed with `e`, how long to pause before the next
    /// one, or `None` to give up and return `e`.
    ///
    /// - A connection that failed fast (refused, reset, closed), or a master that Sentinel
    ///   moved: at most [`ATTEMPTS`] attempts, after the [`BACKOFF`] pauses. A timeout (or a
    ///   pool that stayed exhausted) is not retried: it would cost the caller another one.
    /// - A Cluster refusal ([`Backend::slot_moving`]): the server answered "not now", and how
    ///   long that lasts is up to the reshard or the election, so a fixed count either gives
    ///   up during a slow reshard (and a failed release leaves the lock held until its lease
    ///   runs out) or waits for nothing. Retried after pauses doubling from 10 ms to 100 ms
    ///   until one response timeout has passed since the call started: a call never waits
    ///   longer for a moving slot than it would for a server that does not answer. The last
    ///   pause is cut so that the last attempt still starts within that budget.
    fn retry_pause(&self, e: &RedisError, retries: &mut Retries) -> Option<Duration> {
        if self.slot_moving(e) {
            let left = self
                .settings
                .link
                .response_timeout
                .checked_sub(retries.started.elapsed())
                .filter(|left| !left.is_zero())?;
            let (shortest, longest) = CLUSTER_RETRY_WAIT_MS;
            let pause = (shortest << retries.refused.min(8)).min(longest);
            retries.refused += 1;
            return Some(Duration::from_millis(pause).min(left));
        }
        if (is_transport_error(e) && !e.is_timeout()) || self.master_moved(e) {
            let pause = BACKOFF.get(retries.transport)?;
            retries.transport += 1;
            return Some(*pause);
        }
        None
    }

    /// A Cluster refusal that means the command did not run and may well run after a pause:
    /// the slot is migrating (TRYAGAIN; ASK or MOVED left over after the connection's own
    /// redirects), or the cluster is between a master's failure and its replica's promotion
    /// (CLUSTERDOWN). While a slot migrates, Redis runs a command of several keys only where
    /// all of them exist there, and a release names its latch (not there yet) and its channel
    /// (no key at all): so releases of the slot's locks are refused from `SETSLOT MIGRATING`
    /// until the slot is handed over (`SETSLOT NODE`), not only once its keys are split.
    fn slot_moving(&self, e: &RedisError) -> bool {
        self.is_cluster()
            && matches!(
                e.kind(),
                ErrorKind::Server(
                    ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::Ask
                        | ServerErrorKind::Moved
                )
            )
    }
}

/// What one call to [`Backend::run`] has retried so far.
struct Retries {
    /// When the call started: refusals are retried for one response timeout from here.
    started: Instant,
    /// Attempts retried after a transport failure.
    transport: usize,
    /// Attempts retried after a Cluster refusal.
    refused: u32,
}

impl Retries {
    fn new() -> Retries {
        Retries {
            started: Instant::now(),
            transport: 0,
            refused: 0,
        }
    }
}

/// A `READONLY` refusal, from a command or from a write inside a script (Redis 7 keeps the
/// code of an error raised inside a script, and our scripts pass refusals on as they came).
fn is_readonly(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
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

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{ErrorKind, ServerErrorKind};

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// One range of a CLUSTER SLOTS reply: master first, then a replica.
    fn range(first: i64, last: i64, host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::Int(first),
            Value::Int(last),
            Value::Array(vec![bulk(host), Value::Int(port), bulk("id")]),
            Value::Array(vec![bulk("10.0.0.9"), Value::Int(7009), bulk("replica")]),
        ])
    }

    #[test]
    fn the_slot_map_names_each_slots_master_and_skips_what_it_cannot_use() {
        let reply = vec![
            range(0, 99, "10.0.0.1", 7000),
            range(100, 199, "::1", 7001),
            range(200, 299, "?", 7002), // a master that does not know its address
            range(300, 399, "10.0.0.1", 7000), // a second range of the first master
            range(70_000, 70_001, "10.0.0.3", 1), // not a slot
            Value::Int(3),              // not a range
        ];
        let map = SlotMap::new(master_ranges(reply));
        assert_eq!(map.node_of(0), Some("10.0.0.1:7000"));
        assert_eq!(map.node_of(99), Some("10.0.0.1:7000"));
        assert_eq!(map.node_of(150), Some("[::1]:7001"));
        assert_eq!(map.node_of(250), None);
        assert_eq!(map.node_of(350), Some("10.0.0.1:7000"));
        assert_eq!(map.node_of(16383), None);
        assert_eq!(map.node_of(u16::MAX), None);
        assert_eq!(map.nodes.len(), 2, "one entry per master");
        assert!(SlotMap::new(Vec::new()).is_empty());
    }

    /// A backend with the builder's default timeouts (5 s connect, 3 s response); no I/O.
    fn backend(deployment: Deployment) -> Backend {
        let settings = Settings {
            pool_size: 1,
            link: LinkSettings {
                connect_timeout: Duration::from_secs(5),
                response_timeout: Duration::from_secs(3),
                tls: Default::default(),
            },
        };
        Backend::new(&deployment, settings).unwrap()
    }

    fn single() -> Backend {
        backend(Deployment::Url("redis://127.0.0.1:6379/".into()))
    }

    fn cluster() -> Backend {
        backend(Deployment::Cluster(vec!["redis://127.0.0.1:7000/".into()]))
    }

    fn refusal(kind: ServerErrorKind) -> RedisError {
        RedisError::from((ErrorKind::Server(kind), "refused"))
    }

    fn io_error(kind: std::io::ErrorKind) -> RedisError {
        RedisError::from(std::io::Error::from(kind))
    }

    /// `retries`, as if its call had started `ago`.
    fn started(retries: &mut Retries, ago: Duration) {
        retries.started = Instant::now()
            .checked_sub(ago)
            .expect("the clock runs that long");
    }

    #[test]
    fn a_cluster_refusal_is_retried_until_one_response_timeout_from_the_calls_start() {
        let cluster = cluster();
        let mut retries = Retries::new();
        let pauses: Vec<Option<Duration>> = (0..7)
            .map(|_| cluster.retry_pause(&refusal(ServerErrorKind::TryAgain), &mut retries))
            .collect();
        let ms = |n| Some(Duration::from_millis(n));
        assert_eq!(
            pauses,
            [ms(10), ms(20), ms(40), ms(80), ms(100), ms(100), ms(100)]
        );
        // Whatever the count so far, the time since the call's start decides: the last pause
        // is cut so that the last attempt starts within the budget, and none follows it.
        started(&mut retries, Duration::from_millis(2_950));
        let last = cluster.retry_pause(&refusal(ServerErrorKind::ClusterDown), &mut retries);
        assert!(
            last.is_some_and(|p| p <= Duration::from_millis(50)),
            "{last:?}"
        );
        started(&mut retries, Duration::from_secs(3));
        assert_eq!(
            cluster.retry_pause(&refusal(ServerErrorKind::TryAgain), &mut retries),
            None
        );
        // Redirections the connection could not follow to the end count as refusals.
        let mut retries = Retries::new();
        let moved = RedisError::from((
            ErrorKind::Server(ServerErrorKind::Moved),
            "moved",
            "1 127.0.0.1:7001".to_string(),
        ));
        assert_eq!(cluster.retry_pause(&moved, &mut retries), ms(10));
    }

    #[test]
    fn transport_failures_keep_their_count_and_timeouts_are_not_retried() {
        for backend in [single(), cluster()] {
            let mut retries = Retries::new();
            let reset = io_error(std::io::ErrorKind::ConnectionReset);
            let pauses: Vec<Option<Duration>> = (0..3)
                .map(|_| backend.retry_pause(&reset, &mut retries))
                .collect();
            assert_eq!(pauses, [Some(BACKOFF[0]), Some(BACKOFF[1]), None]);
            let timeout = io_error(std::io::ErrorKind::TimedOut);
            assert_eq!(backend.retry_pause(&timeout, &mut Retries::new()), None);
        }
        // One server never sends a Cluster refusal; if it did, it would not be one.
        let tryagain = refusal(ServerErrorKind::TryAgain);
        assert_eq!(single().retry_pause(&tryagain, &mut Retries::new()), None);
    }

    /// A cluster client whose seed refuses connections: every read of the slot map fails
    /// at once.
    fn unreachable_cluster() -> Backend {
        let settings = Settings {
            pool_size: 1,
            link: LinkSettings {
                connect_timeout: Duration::from_millis(200),
                response_timeout: Duration::from_millis(200),
                tls: Default::default(),
            },
        };
        let seeds = vec!["redis://127.0.0.1:1/".to_string()];
        Backend::new(&Deployment::Cluster(seeds), settings).unwrap()
    }

    /// A slot map that cannot be read again (a master stopped, and CLUSTER SLOTS went to it:
    /// the cluster connection sends it to a node at random) must not undo the grouping by
    /// master: one call per slot, each waiting out its timeouts on the stopped master, held
    /// a renewal round up until the locks on the other masters expired.
    #[test]
    fn a_map_that_cannot_be_read_again_still_groups_the_calls_by_master() {
        let backend = unreachable_cluster();
        backend.set_slot_map(SlotMap::new(vec![
            (0, 8191, "10.0.0.1:7000".to_string()),
            (8192, 16383, "10.0.0.2:7000".to_string()),
        ]));
        let slots = [10, 20, 30, 9000, 9001, 16000];
        backend.note_answer("10.0.0.1:7000", false);
        assert_eq!(
            backend.group_by_master(slots).len(),
            2,
            "one group per master"
        );

        // Something said the map is out of date; reading it again fails.
        backend.forget_slot_map();
        assert_eq!(
            backend.group_by_master(slots),
            [
                (Some("10.0.0.2:7000".to_string()), vec![3, 4, 5]),
                (Some("10.0.0.1:7000".to_string()), vec![0, 1, 2]),
            ],
            "grouped by the last map read, the silent master last"
        );
    }

    #[test]
    fn calls_are_grouped_by_slot_on_a_cluster_only() {
        let slots = [7, 3, 7, 9, 3];
        assert_eq!(
            cluster().group_by_slot(slots),
            [vec![0, 2], vec![1, 4], vec![3]],
            "one group per slot, in order of first appearance"
        );
        assert_eq!(single().group_by_slot(slots), [vec![0, 1, 2, 3, 4]]);
        assert!(single().group_by_slot([]).is_empty());
    }

    /// The retry policy reads the `redis` crate's classification of the server's reply, as it
    /// comes off the wire (also from inside a script, where Redis 7 keeps the code).
    #[test]
    fn refusals_are_classified_from_the_reply_code() {
        let reply = |wire: &[u8]| -> RedisError {
            match redis::parse_redis_value(wire).unwrap() {
                Value::ServerError(e) => e.into(),
                other => panic!("not an error reply: {other:?}"),
            }
        };
        let readonly = reply(b"-READONLY You can't write against a read only replica. script: f_1, on @user_script:9.\r\n");
        assert!(is_readonly(&readonly));
        assert!(!is_readonly(&reply(b"-ERR something else\r\n")));
        let cluster = cluster();
        let mut retries = Retries::new();
        for wire in [
            &b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"[..],
            b"-CLUSTERDOWN The cluster is down\r\n",
            b"-MOVED 3999 127.0.0.1:6381\r\n",
            b"-ASK 3999 127.0.0.1:6381\r\n",
        ] {
            assert!(cluster.slot_moving(&reply(wire)), "{wire:?}");
            assert!(cluster.retry_pause(&reply(wire), &mut retries).is_some());
        }
        assert!(!single().slot_moving(&reply(b"-TRYAGAIN x\r\n")));
    }

    #[test]
    fn the_release_latch_outlives_every_retry() {
        // 3 attempts of (2 connects + 1 response timeout), the pauses, a second of slack.
        assert_eq!(single().latch_ttl(), Duration::from_millis(40_220));
        // Each attempt up to 3 tries inside the cluster connection, and one response timeout
        // of retried refusals.
        assert_eq!(cluster().latch_ttl(), Duration::from_millis(121_220));
    }
}
