//! Reaching particular servers of a deployment, where a command has no key to route it by
//! (`SCAN`, `PUBSUB`) or a connection is for pub/sub: the server a classic subscriber goes
//! to, the master of a slot, every master, every node a listener may be on.

use std::sync::atomic::Ordering;

use redis::{ConnectionAddr, ConnectionLike, RedisError, RedisResult};

use super::{Backend, Link, Target, link_to};

impl Backend {
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

    /// Runs `op` once on each server that holds keys: the one server, the master Sentinel
    /// names, or every master of a Cluster (from its slot map). For commands without a key
    /// (SCAN), which a cluster connection cannot route.
    pub fn on_every_master<T>(
        &self,
        op: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> RedisResult<Vec<T>> {
        self.on_every_node(false, op)
    }

    /// Runs `op` once on each server where a classic subscriber may listen: as
    /// [`Backend::on_every_master`], and on a Cluster the seed nodes too, replicas among them.
    /// Without sharded pub/sub our subscribers listen on a seed node
    /// ([`Backend::pubsub_server`]) and Redisson's on the master of the channel's slot, and
    /// `PUBSUB NUMSUB` and `PUBSUB CHANNELS` count only the node asked.
    pub fn on_every_listening_node<T>(
        &self,
        op: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> RedisResult<Vec<T>> {
        self.on_every_node(true, op)
    }

    /// Runs `op` on every master of a Cluster, and on its seed nodes `with_seeds`, each once;
    /// once elsewhere.
    fn on_every_node<T>(
        &self,
        with_seeds: bool,
        mut op: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> RedisResult<Vec<T>> {
        let Target::Cluster(cluster) = &self.target else {
            return Ok(vec![self.run(op)?]);
        };
        let map = self.slot_map()?;
        let mut nodes: Vec<String> = (0..crate::keys::SLOTS)
            .filter_map(|slot| map.node_of(slot).map(str::to_string))
            .collect();
        let seeds = cluster.nodes.iter().filter(|_| with_seeds);
        nodes.extend(
            seeds.filter_map(|seed| match seed.get_connection_info().addr() {
                ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                    Some(format!("{host}:{port}"))
                }
                _ => None,
            }),
        );
        nodes.sort_unstable();
        nodes.dedup();
        nodes
            .iter()
            .map(|node| op(&mut self.link_to_node(node)?))
            .collect()
    }

    /// A connection of its own to the server that owns `slot`: the one server, the master
    /// Sentinel names, or the Cluster master of that slot. For a keyless command about a key
    /// of that slot (PUBSUB SHARDNUMSUB), or a subscription (SSUBSCRIBE).
    pub fn link_for_slot(&self, slot: u16) -> RedisResult<Link> {
        match &self.target {
            Target::Cluster(_) => {
                let map = self.slot_map()?;
                let node = map.node_of(slot).ok_or_else(|| {
                    RedisError::from((redis::ErrorKind::Io, "no master serves the slot"))
                })?;
                self.link_to_node(node)
            }
            _ => self.connect(),
        }
    }

    /// A connection to Cluster node `node` (`host:port`), with the seeds' credentials and TLS.
    fn link_to_node(&self, node: &str) -> RedisResult<Link> {
        let Target::Cluster(cluster) = &self.target else {
            return self.connect();
        };
        let (host, port) = node
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
            .ok_or_else(|| {
                RedisError::from((redis::ErrorKind::Io, "a node without a port", node.into()))
            })?;
        let seed = cluster.nodes[0].get_connection_info().clone();
        let addr = match seed.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        Link::connect(&seed.set_addr(addr), &self.settings.link)
    }
}
