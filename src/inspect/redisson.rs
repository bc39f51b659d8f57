//! The operator's view of objects in Redisson's layout: what [`Client::list`] and
//! [`Client::inspect`] read when the client speaks [`Layout::Redisson`], so that `redlatch
//! --layout redisson inspect orders` shows who holds a Java service's lock.
//!
//! Redisson keeps no prefix and no registry of its objects: a listed object is found by its
//! name and recognised by its shape (a hash of owners with a lease, a hash with `mode`, a
//! count with permits out or waiters listening). A count with no permit out and nobody
//! waiting could be a semaphore, a counting semaphore, a latch or an application's counter,
//! which nothing in Redis tells apart: it is not listed as an object, only counted.
//!
//! [`Client::list`]: crate::Client::list
//! [`Client::inspect`]: crate::Client::inspect
//! [`Layout::Redisson`]: crate::Layout::Redisson

use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::{Detected, Holder, Listed, Listeners, Listing, ObjectKind, Report, Waiter};
use crate::keys::{Family, LockKeys, redisson_tagged};
use crate::scripts;
use crate::words::Words;

/// The score Java gives a permit taken without a lease (`Long.MAX_VALUE / 10000`).
const NO_LEASE: u64 = 922_337_203_685_477;

/// Reads object `keys` (Redisson's layout) of `kind`: everything but the subscribers.
pub(super) fn read_report(
    con: &mut dyn ConnectionLike,
    kind: ObjectKind,
    keys: &LockKeys,
) -> RedisResult<Report> {
    // Java's deadlines and permit leases are in the clients' wall clock, and so is this.
    let now_ms = scripts::redisson::epoch_ms();
    let pttl: i64 = redis::cmd("PTTL").arg(keys.lock()).query(con)?;
    let ttl = u64::try_from(pttl).ok().map(Duration::from_millis);
    let fence: Option<String> = redis::cmd("GET")
        .arg(keys.fence())
        .query(con)
        .unwrap_or(None);
    let mut report = Report {
        kind,
        name: keys.name().to_string(),
        key: keys.lock().to_string(),
        holders: Vec::new(),
        ttl,
        fence: fence.and_then(|f| f.parse().ok()),
        queue: Vec::new(),
        subscribers: 0,
        count: None,
        available: None,
    };
    let holder = |owner: String, count: u64, lease_left: Option<Duration>| Holder {
        owner,
        count,
        token: None,
        lease_left,
        writer: false,
        client_name: None,
        client_addr: None,
    };
    match kind {
        ObjectKind::CountingSemaphore => {
            // The token counter of the name is a lock's or a leased semaphore's: Java's
            // RSemaphore hands out no tokens.
            report.fence = None;
            report.available = Some(super::report::read_available(con, keys)?);
        }
        ObjectKind::CountDownLatch => {
            let count: Option<String> = redis::cmd("GET").arg(keys.lock()).query(con)?;
            report.count = Some(count.and_then(|c| c.parse().ok()).unwrap_or(0));
        }
        ObjectKind::Lock => {
            let holders: Vec<(String, u64)> = redis::cmd("HGETALL").arg(keys.lock()).query(con)?;
            for (owner, count) in holders {
                report.holders.push(Holder {
                    token: report.fence,
                    ..holder(owner, count, ttl)
                });
            }
            report.queue = fair_queue(con, keys, now_ms)?;
        }
        ObjectKind::ReadWriteLock => {
            let fields: Vec<(String, String)> =
                redis::cmd("HGETALL").arg(keys.lock()).query(con)?;
            for (field, count) in fields.into_iter().filter(|(f, _)| f != "mode") {
                let count: u64 = count.parse().unwrap_or(0);
                let Some(owner) = field.strip_suffix(":write") else {
                    // A read hold lives as long as its latest timeout key.
                    let timeout = keys.suffixed(&format!("{field}:rwlock_timeout:{count}"));
                    let left: i64 = redis::cmd("PTTL").arg(timeout).query(con)?;
                    let left = u64::try_from(left).ok().map(Duration::from_millis);
                    report.holders.push(holder(field, count, left));
                    continue;
                };
                report.holders.push(Holder {
                    writer: true,
                    token: report.fence,
                    ..holder(owner.to_string(), count, ttl)
                });
            }
        }
        ObjectKind::Semaphore => {
            let available: Option<String> = redis::cmd("GET").arg(keys.lock()).query(con)?;
            // Signed: Java's RSemaphore shares the count and may take it below 0.
            let available: i64 = available.and_then(|a| a.parse().ok()).unwrap_or(0);
            let permits: Vec<(Vec<u8>, u64)> = redis::cmd("ZRANGE")
                .arg(keys.leases())
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(con)?;
            let total = available.saturating_add(permits.len() as i64);
            report.count = Some(u64::try_from(total).unwrap_or(0));
            report.available = Some(available);
            for (id, end) in permits {
                let left =
                    (end != NO_LEASE).then(|| Duration::from_millis(end.saturating_sub(now_ms)));
                let mut shown = String::with_capacity(32);
                scripts::redisson::semaphore::push_hex(&mut shown, &id);
                report.holders.push(holder(shown, 1, left));
            }
        }
    }
    Ok(report)
}

/// The waiters of a fair lock (`getFairLock`) on `keys`, head first, each with how long its
/// place stays valid by its deadline.
fn fair_queue(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    now_ms: u64,
) -> RedisResult<Vec<Waiter>> {
    let queued: Vec<String> = redis::cmd("LRANGE")
        .arg(keys.queue())
        .arg(0)
        .arg(-1)
        .query(con)?;
    let mut waiters = Vec::with_capacity(queued.len());
    for owner in queued {
        let deadline: Option<f64> = redis::cmd("ZSCORE")
            .arg(keys.waiters())
            .arg(&owner)
            .query(con)?;
        let valid_for = deadline.map(|d| Duration::from_millis((d as u64).saturating_sub(now_ms)));
        let terms = match valid_for {
            Some(left) => format!("valid for {} more (fair lock)", Words(left)),
            None => "no deadline (fair lock)".to_string(),
        };
        waiters.push(Waiter {
            valid_for,
            ..Waiter::unread(&owner, &terms)
        });
    }
    Ok(waiters)
}

/// What the key of a name holds, read as Redisson's objects are shaped.
pub(super) enum Shape {
    /// An object of that kind; whether it is held, waited for or counting.
    Object(ObjectKind, bool),
    /// A count with no permit out and nobody waiting: a semaphore or counting semaphore
    /// nobody uses, a latch, or anyone's counter; nothing in Redis tells which.
    Count,
    /// Data that is not Redisson's: its Redis type.
    Foreign(String),
    /// No key.
    Absent,
}

/// Reads what `key` holds as Redisson would have written it (Redisson's format): a hash
/// with a lease whose fields are owners (`<id>:<thread>`) with hold counts is a lock, with a
/// `mode` too a read-write lock; a decimal string is a semaphore when permits are out in
/// `{key}:timeout`, a counting semaphore when none are and a waiter listens on
/// `redisson_sc:{key}`, a latch when one listens on its latch channel, and otherwise a
/// [`Shape::Count`]. A hash of our own layout (it has a
/// `<key>:fence` beside it) and anything else is [`Shape::Foreign`], so an application's
/// hashes and counters on a shared server are not taken for locks and latches.
pub(super) fn shape_of(
    con: &mut dyn ConnectionLike,
    key: &str,
    listeners: Listeners,
) -> RedisResult<Shape> {
    let found: String = redis::cmd("TYPE").arg(key).query(con)?;
    match found.as_str() {
        "none" => Ok(Shape::Absent),
        "hash" => {
            let fields: Vec<(String, String)> = redis::cmd("HGETALL").arg(key).query(con)?;
            let pttl: i64 = redis::cmd("PTTL").arg(key).query(con)?;
            let ours: bool = redis::cmd("EXISTS")
                .arg(format!("{key}:fence"))
                .query(con)?;
            Ok(match hash_kind(&fields) {
                Some(kind) if pttl > 0 && !ours => Shape::Object(kind, true),
                _ => Shape::Foreign(found),
            })
        }
        "string" => {
            let count: Option<String> = redis::cmd("GET").arg(key).query(con)?;
            if count.and_then(|c| c.parse::<i64>().ok()).is_none() {
                return Ok(Shape::Foreign(found));
            }
            let permits = LockKeys::redisson(Family::Semaphore, key);
            let out: u64 = match redis::cmd("ZCARD").arg(permits.leases()).query(con) {
                // Not a zset: no permits of Redisson's.
                Err(e) if matches!(e.kind(), redis::ErrorKind::Server(_)) => 0,
                out => out?,
            };
            if out > 0 {
                return Ok(Shape::Object(ObjectKind::Semaphore, true));
            }
            // Java's RSemaphore and RPermitExpirableSemaphore share the key and the channel;
            // only the latter has permits out in `{key}:timeout`. Waiters with none out are
            // how a counting semaphore is used (the other's waiters with nothing out wait on
            // a semaphore never set): the likelier one is named, and the two read the same
            // count and channel, so `inspect` and `watch` show the same either way.
            if listeners.on(con, permits.channel())? > 0 {
                return Ok(Shape::Object(ObjectKind::CountingSemaphore, true));
            }
            let latch = LockKeys::redisson(Family::Latch, key);
            if listeners.on(con, latch.channel())? > 0 {
                return Ok(Shape::Object(ObjectKind::CountDownLatch, true));
            }
            Ok(Shape::Count)
        }
        _ => Ok(Shape::Foreign(found)),
    }
}

/// The kind of a Redisson hash by its fields: owners (`<id>:<thread>`, a writer's with
/// `:write`) with hold counts, and a read-write lock's `mode`; `None` for anything else.
fn hash_kind(fields: &[(String, String)]) -> Option<ObjectKind> {
    let owner = |field: &str| {
        let field = field.strip_suffix(":write").unwrap_or(field);
        field.rsplit_once(':').is_some_and(|(id, thread)| {
            !id.is_empty() && !thread.is_empty() && thread.bytes().all(|b| b.is_ascii_digit())
        })
    };
    let mut kind = ObjectKind::Lock;
    for (field, value) in fields {
        if field == "mode" && (value == "read" || value == "write") {
            kind = ObjectKind::ReadWriteLock;
        } else if !owner(field) || value.parse::<u64>().map_or(true, |n| n == 0) {
            return None;
        }
    }
    let writers = fields.iter().filter(|(f, _)| f.ends_with(":write")).count();
    match kind {
        ObjectKind::Lock if fields.is_empty() || writers > 0 => None,
        kind => Some(kind),
    }
}

/// Whether `key` is named as our own layout names its keys, `<prefix>:{<name>}` and a
/// suffix of ours (keys.rs): what a count there is, is known, and not Redisson's.
fn looks_ours(key: &str) -> bool {
    const OURS: [&str; 9] = [
        "rwlock",
        "semaphore",
        "latch",
        "counting",
        "fence",
        "permits",
        "forced",
        "released",
        "granted",
    ];
    key.contains(":{")
        && key.rsplit_once('}').is_some_and(|(_, rest)| {
            rest.strip_prefix(':')
                .is_some_and(|rest| OURS.contains(&rest.split(':').next().unwrap_or_default()))
        })
}

/// What `name` is in Redisson's layout ([`Client::detect`](crate::Client::detect)); `con`
/// is the server that keeps it.
pub(super) fn detect(
    con: &mut dyn ConnectionLike,
    name: &str,
    listeners: Listeners,
) -> RedisResult<Detected> {
    let mut detected = Detected::default();
    let listed = |kind, active| Listed {
        kind,
        name: name.to_string(),
        active,
    };
    match shape_of(con, name, listeners)? {
        Shape::Object(kind, active) => detected.found.push(listed(kind, active)),
        Shape::Count => {
            detected.could_be = vec![
                ObjectKind::Semaphore,
                ObjectKind::CountDownLatch,
                ObjectKind::CountingSemaphore,
            ];
        }
        Shape::Foreign(found) => detected.foreign = Some(found),
        // Java's RSemaphore waits on a count never set (0 permits), so its waiters may be
        // all there is of it.
        Shape::Absent
            if listeners.on(con, LockKeys::redisson(Family::Counting, name).channel())? > 0 =>
        {
            detected
                .found
                .push(listed(ObjectKind::CountingSemaphore, true));
        }
        Shape::Absent => {
            // Only the token counter left by a lock (or a write, or permits) that went.
            let counter = redisson_tagged("redisson_lock_token", name);
            let kept: bool = redis::cmd("EXISTS").arg(counter).query(con)?;
            if kept {
                detected.found.push(listed(ObjectKind::Lock, false));
            }
        }
    }
    Ok(detected)
}

/// Every object in Redisson's layout on one server whose name matches `pattern` (a Redis
/// glob), recognised by its shape ([`shape_of`]); the fencing counters of objects that went
/// (Java never deletes them), and how many bare counts could not be told from anyone's.
pub(super) fn list(
    con: &mut dyn ConnectionLike,
    pattern: &str,
    listeners: Listeners,
) -> RedisResult<Listing> {
    let mut listing = Listing::default();
    for key in super::scan(con, pattern)? {
        if key.starts_with("redisson_") || key.contains(":rwlock_timeout:") {
            continue; // Redisson's own keys beside an object, not objects
        }
        match shape_of(con, &key, listeners)? {
            Shape::Object(kind, active) => listing.objects.push(Listed {
                kind,
                name: key,
                active,
            }),
            // Our own layout's counters (fences, totals, latches) are none of Redisson's.
            Shape::Count if !looks_ours(&key) => listing.unattributed_counts += 1,
            Shape::Count => {}
            Shape::Foreign(_) | Shape::Absent => {}
        }
    }
    // Counters of names without braces only: the counter of `a{b}` is
    // `redisson_lock_token:a{b}`, which no pattern of the name finds.
    let counters = redisson_tagged("redisson_lock_token", pattern);
    for counter in super::scan(con, &counters)? {
        if let Some(name) = counter
            .strip_prefix("redisson_lock_token:{")
            .and_then(|n| n.strip_suffix('}'))
            && !listing.objects.iter().any(|l| l.name == name)
        {
            listing.kept_fences.push(Listed {
                kind: ObjectKind::Lock,
                name: name.to_string(),
                active: false,
            });
        }
    }
    Ok(listing)
}
