//! Redis Cluster: the seed nodes, the slot map, and grouping calls by slot and by master.
//!
//! Command connections are `redis::cluster::ClusterConnection`s over our own links: they
//! route each command by its first key and follow MOVED and ASK. What they cannot do for us
//! is group: a script may touch one slot only, and a round of many calls should cost one round
//! trip per master, with a master that does not answer called last. That is here, once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::{ConnectionAddr, ConnectionInfo, RedisResult, Value};

use super::link::{Link, LinkSettings};
use super::{Backend, Settings, Target, direct_client, link_to};
use crate::error::{Error, Result};
use crate::keys::SLOTS;

/// A Redis Cluster: command connections are `redis::cluster::ClusterConnection`s (they route
/// each command by its first key and follow MOVED and ASK). Pub/sub is sharded where the
/// cluster has it (see `subscriber::polled`); otherwise it is a connection to one seed node,
/// since classic PUBLISH reaches every node of a cluster.
pub(super) struct ClusterTarget {
    pub(super) client: ClusterClient,
    /// One client per seed node, for [`Backend::check`] and the classic pub/sub connection.
    pub(super) nodes: Vec<redis::Client>,
    /// The seed node to try first for the next connection to one node: the last one that
    /// worked.
    pub(super) next_node: AtomicUsize,
    /// The node [`Backend::check`] reached knows SPUBLISH (Redis 7).
    pub(super) sharded: AtomicBool,
}

/// Retries inside `ClusterConnection` for one command: it follows MOVED and ASK (each
/// redirect counts as a retry) and pauses before retrying TRYAGAIN and CLUSTERDOWN. Kept low
/// so that our own policy ([`Backend::retry_pause`]) stays in charge: with the `redis` crate's
/// defaults, a script refused with TRYAGAIN during a slot migration was measured to block for
/// 154-219 s, and a timed-out command is retried at once by that crate.
pub(super) const CLUSTER_RETRIES: u32 = 2;

/// The shortest and the longest pause, in milliseconds, before retrying a command that a
/// moving slot or a failing-over cluster refused: inside `ClusterConnection` (at random,
/// below a bound that doubles from 20 ms) and in [`Backend::retry_pause`] (doubling from the
/// shortest). A reshard moves a slot in milliseconds; under load it takes longer, and the cap
/// keeps the load of a waiting call low (about thirty commands a second were measured, the
/// connection's own tries included).
pub(super) const CLUSTER_RETRY_WAIT_MS: (u64, u64) = (10, 100);

/// Which master serves each slot of a Cluster, as CLUSTER SLOTS said.
pub(crate) struct SlotMap {
    pub(super) nodes: Vec<String>,
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
    /// Whether wake-ups go through sharded pub/sub (a Redis 7 Cluster; known once
    /// [`Backend::check`] has run).
    pub fn sharded_pubsub(&self) -> bool {
        match &self.target {
            Target::Cluster(cluster) => cluster.sharded.load(Ordering::Relaxed),
            _ => false,
        }
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
}

/// The ranges of a CLUSTER SLOTS reply with their master's `host:port`; a range whose master
/// does not know its own address (`""` or `"?"`) or that is malformed is left out.
pub(crate) fn master_ranges(ranges: Vec<Value>) -> Vec<(u16, u16, String)> {
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

impl ClusterTarget {
    pub(super) fn new(seeds: &[String], settings: &LinkSettings) -> Result<ClusterTarget> {
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
    pub(super) fn connect_node(&self, settings: &Settings) -> RedisResult<Link> {
        let first = self.next_node.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        for i in 0..self.nodes.len() {
            let n = (first + i) % self.nodes.len();
            match link_to(&self.nodes[n], settings) {
                Ok(con) => {
                    self.next_node.store(n, Ordering::Relaxed);
                    return Ok(con);
                }
                Err(e) => failures.push(e),
            }
        }
        Err(super::failure::all_failed(failures))
    }

    /// The next pub/sub connection starts with the seed after the one that worked last.
    pub(super) fn skip_node(&self) {
        let len = self.nodes.len();
        let _ = self
            .next_node
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some((n + 1) % len)
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Deployment;
    use crate::backend::test_support::*;
    use std::time::Duration;

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

    /// A cluster client whose seed refuses connections: every read of the slot map fails
    /// at once.
    fn unreachable_cluster() -> Backend {
        let settings = Settings {
            pool_size: 1,
            link: LinkSettings {
                connect_timeout: Duration::from_millis(200),
                response_timeout: Duration::from_millis(200),
                tls: Default::default(),
                name: None,
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
}
