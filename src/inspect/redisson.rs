//! The operator's view of objects in Redisson's layout: what [`Client::list`] and
//! [`Client::inspect`] read when the client speaks [`Layout::Redisson`], so that `redlatch
//! --layout redisson inspect orders` shows who holds a Java service's lock.
//!
//! Redisson keeps no prefix and no registry of its objects: a listed object is found by its
//! name and recognised by its shape (a hash of owners, a hash with `mode`, a count with
//! permits out). A count with no permits out could be a semaphore or a latch, which nothing
//! in Redis tells apart; it is listed as a latch.
//!
//! [`Client::list`]: crate::Client::list
//! [`Client::inspect`]: crate::Client::inspect
//! [`Layout::Redisson`]: crate::Layout::Redisson

use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::{Holder, Listed, ObjectKind, Report, Waiter};
use crate::keys::{LockKeys, redisson_tagged};
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
            let available: u64 = available.and_then(|a| a.parse().ok()).unwrap_or(0);
            let permits: Vec<(Vec<u8>, u64)> = redis::cmd("ZRANGE")
                .arg(keys.leases())
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(con)?;
            report.count = Some(available + permits.len() as u64);
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

/// Every object in Redisson's layout on one server whose name matches `pattern` (a Redis
/// glob), recognised by its shape; locks no longer held by their fencing counters.
pub(super) fn list(con: &mut dyn ConnectionLike, pattern: &str) -> RedisResult<Vec<Listed>> {
    let mut found = Vec::new();
    for key in super::scan(con, pattern)? {
        if key.starts_with("redisson_") || key.contains(":rwlock_timeout:") {
            continue; // Redisson's own keys beside an object, not objects
        }
        let kind: String = redis::cmd("TYPE").arg(&key).query(con)?;
        let listed = match kind.as_str() {
            "hash" => {
                let rw: bool = redis::cmd("HEXISTS").arg(&key).arg("mode").query(con)?;
                let kind = if rw {
                    ObjectKind::ReadWriteLock
                } else {
                    ObjectKind::Lock
                };
                Some(kind)
            }
            "string" => {
                let count: Option<String> = redis::cmd("GET").arg(&key).query(con)?;
                let permits = LockKeys::redisson(crate::keys::Family::Semaphore, &key).leases();
                let out: u64 = redis::cmd("ZCARD").arg(permits).query(con).unwrap_or(0);
                match count.and_then(|c| c.parse::<i64>().ok()) {
                    Some(_) if out > 0 => Some(ObjectKind::Semaphore),
                    Some(_) => Some(ObjectKind::CountDownLatch),
                    None => None,
                }
            }
            _ => None,
        };
        if let Some(kind) = listed {
            found.push(Listed {
                kind,
                name: key,
                active: true,
            });
        }
    }
    // Locks not held now, known by their fencing counters (names without braces only: the
    // counter of `a{b}` is `redisson_lock_token:a{b}`, which no pattern of the name finds).
    let counters = redisson_tagged("redisson_lock_token", pattern);
    for counter in super::scan(con, &counters)? {
        if let Some(name) = counter
            .strip_prefix("redisson_lock_token:{")
            .and_then(|n| n.strip_suffix('}'))
            && !found.iter().any(|l| l.name == name)
        {
            found.push(Listed {
                kind: ObjectKind::Lock,
                name: name.to_string(),
                active: false,
            });
        }
    }
    Ok(found)
}
