//! Which objects exist: [`Client::list`] and [`Client::listing`], by SCAN on every master,
//! each kind of our layout told by its own keys (Redisson's by its shapes, `redisson`).

use redis::{ConnectionLike, RedisResult};

use super::{Listed, Listeners, Listing, ObjectKind, redisson, scan};
use crate::client::Client;
use crate::core::Core;
use crate::error::{Error, Result};
use crate::keys::{Layout, redisson_tagged};

impl Client {
    /// The objects under this client's prefix whose name matches `pattern` (a Redis glob:
    /// `*` for all, `invoice:*`), found with SCAN, on a Cluster on every master; sorted. Never
    /// `KEYS`, so it is safe on a server in use, and costs one SCAN step per thousand keys.
    /// [`listing`](Client::listing)'s objects: fencing counters kept after their object
    /// went are not objects.
    pub fn list(&self, pattern: &str) -> Result<Vec<Listed>> {
        Ok(self.listing(pattern)?.objects)
    }

    /// [`list`](Client::list), with what is left of objects that went: their fencing
    /// counters, and in [`Layout::Redisson`] how many bare counts could be latches or
    /// anyone's counters ([`Listing`]).
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let listing = client.listing("invoice:*")?;
    /// for object in &listing.objects {
    ///     println!("{} {}", object.kind.as_str(), object.name);
    /// }
    /// println!("{} fencing counters kept", listing.kept_fences.len());
    /// # Ok(()) }
    /// ```
    pub fn listing(&self, pattern: &str) -> Result<Listing> {
        let core = self.core();
        let mut listing = if core.layout == Layout::Redisson {
            let listeners = Listeners::of(core);
            let per_master = core
                .backend
                .on_every_master(|con| redisson::list(con, pattern, listeners))
                .map_err(Error::Redis)?;
            let mut all = Listing::default();
            for one in per_master {
                all.objects.extend(one.objects);
                all.kept_fences.extend(one.kept_fences);
                all.unattributed_counts += one.unattributed_counts;
            }
            // Java's RSemaphore waits on a count never set, so a counting semaphore may be
            // only its waiters, who leave no key for SCAN: they are found by the channels
            // listened to, and each such name is read as `detect` reads it (the key may be
            // there after all, or be an application's).
            let listened_for = redisson_tagged("redisson_sc", pattern);
            for channel in listened_channels(core, &listened_for)? {
                let Some(name) = channel
                    .strip_prefix("redisson_sc:{")
                    .and_then(|c| c.strip_suffix('}'))
                else {
                    continue;
                };
                if all.objects.iter().any(|o| o.name == name) {
                    continue;
                }
                all.objects.extend(self.detect(name)?.found);
            }
            all
        } else {
            let scan_for = format!("{}:{{{pattern}}}*", core.prefix);
            // A counting semaphore's waiters leave no key (no queue: they only listen), so
            // whether one is waited for is read from the channels with listeners.
            let counting = ObjectKind::CountingSemaphore.suffix();
            let listened_for = format!("{}:{{{pattern}{counting}:unlocked", core.prefix);
            let keys = core
                .backend
                .on_every_master(|con| scan(con, &scan_for))
                .map_err(Error::Redis)?;
            let listened = listened_channels(core, &listened_for)?;
            ours(
                keys.into_iter().flatten(),
                listened.into_iter(),
                &format!("{}:{{", core.prefix),
            )
        };
        listing.objects.sort();
        listing.objects.dedup();
        listing.kept_fences.sort();
        listing.kept_fences.dedup();
        Ok(listing)
    }
}

/// The objects of our layout among `keys` (each starting with `tag`, `<prefix>:{`): each kind
/// by its own keys (ObjectKind::suffix); in use by its main key, idle by a semaphore's total,
/// and a fencing counter alone is kept, not an object. A counting semaphore is an object by
/// its count or by a channel of `listened` (its waiters'), and in use only by the latter:
/// its count stays for good, whoever uses it.
fn ours(
    keys: impl Iterator<Item = String>,
    listened: impl Iterator<Item = String>,
    tag: &str,
) -> Listing {
    // (kind, name) -> (main key seen, total seen, fence seen)
    let mut seen: std::collections::BTreeMap<(ObjectKind, String), (bool, bool, bool)> =
        std::collections::BTreeMap::new();
    let counting = ObjectKind::CountingSemaphore;
    let mut waited = std::collections::BTreeSet::new();
    for channel in listened {
        if let Some(name) = channel
            .strip_prefix(tag)
            .and_then(|c| c.strip_suffix(":unlocked"))
            .and_then(|c| c.strip_suffix(counting.suffix()))
        {
            seen.entry((counting, name.to_string())).or_default();
            waited.insert(name.to_string());
        }
    }
    for key in keys {
        let Some(tagged) = key.strip_prefix(tag) else {
            continue;
        };
        for kind in ObjectKind::ALL {
            let (rest, role) = match tagged.strip_suffix(":fence") {
                Some(rest) => (rest, 2),
                None => match tagged.strip_suffix(":permits") {
                    Some(rest) if kind == ObjectKind::Semaphore => (rest, 1),
                    _ => (tagged, 0),
                },
            };
            if let Some(name) = rest.strip_suffix(kind.suffix()) {
                let flags = seen.entry((kind, name.to_string())).or_default();
                match role {
                    0 => flags.0 = true,
                    1 => flags.1 = true,
                    _ => flags.2 = true,
                }
            }
        }
    }
    let mut listing = Listing::default();
    for ((kind, name), (main, total, _)) in seen {
        let (object, active) = match kind {
            ObjectKind::CountingSemaphore => {
                let waited = waited.contains(&name);
                (main || waited, waited)
            }
            _ => (main || total, main),
        };
        let listed = Listed { kind, name, active };
        if object {
            listing.objects.push(listed);
        } else {
            listing.kept_fences.push(listed);
        }
    }
    listing
}

/// The channels with listeners matching `pattern`, wherever a client may listen: every
/// master's shard channels where the cluster publishes that way, else every node a classic
/// subscriber may use.
fn listened_channels(core: &Core, pattern: &str) -> Result<Vec<String>> {
    let sharded = core.backend.sharded_pubsub();
    let listened = if sharded {
        core.backend
            .on_every_master(|con| channels(con, pattern, sharded))
    } else {
        core.backend
            .on_every_listening_node(|con| channels(con, pattern, sharded))
    }
    .map_err(Error::Redis)?;
    Ok(listened.into_iter().flatten().collect())
}

/// The channels with listeners matching `pattern` on one server (its shard channels where
/// the cluster publishes that way).
fn channels(
    con: &mut dyn ConnectionLike,
    pattern: &str,
    sharded: bool,
) -> RedisResult<Vec<String>> {
    let which = if sharded { "SHARDCHANNELS" } else { "CHANNELS" };
    redis::cmd("PUBSUB").arg(which).arg(pattern).query(con)
}
