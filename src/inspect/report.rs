//! One object's report in our own layout ([`Client::inspect`](crate::Client::inspect)): read
//! from Redis, and printed as `redlatch inspect` shows it.

use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::{Holder, ObjectKind, Report, Waiter, lock_places};
use crate::keys::LockKeys;
use crate::scripts;
use crate::words::Words;

/// Reads object `keys` of `kind`: everything but the subscribers.
pub(super) fn read_report(
    con: &mut dyn ConnectionLike,
    kind: ObjectKind,
    keys: &LockKeys,
) -> RedisResult<Report> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con)?;
    let now_ms = secs * 1000 + micros / 1000;
    let pttl: i64 = redis::cmd("PTTL").arg(keys.lock()).query(con)?;
    let ttl = (pttl >= 0).then(|| Duration::from_millis(pttl as u64));
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
    match kind {
        ObjectKind::CountingSemaphore => {
            report.available = Some(read_available(con, keys)?);
            return Ok(report);
        }
        ObjectKind::CountDownLatch => {
            let count: Option<String> = redis::cmd("GET").arg(keys.lock()).query(con)?;
            report.count = Some(count.and_then(|c| c.parse().ok()).unwrap_or(0));
            return Ok(report);
        }
        ObjectKind::Lock => {
            let holders: Vec<(String, u64)> = redis::cmd("HGETALL").arg(keys.lock()).query(con)?;
            report.holders = holders
                .into_iter()
                .map(|(owner, count)| Holder {
                    owner,
                    count,
                    token: report.fence,
                    lease_left: ttl,
                    writer: false,
                    client_name: None,
                    client_addr: None,
                })
                .collect();
        }
        ObjectKind::ReadWriteLock | ObjectKind::Semaphore => {
            let fields: Vec<(String, String)> =
                redis::cmd("HGETALL").arg(keys.lock()).query(con)?;
            let writer = fields
                .iter()
                .find(|(f, _)| f == "writer")
                .map(|(_, v)| v.clone());
            let leases: Vec<(String, u64)> = redis::cmd("ZRANGE")
                .arg(keys.leases())
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(con)?;
            for (owner, value) in fields.into_iter().filter(|(f, _)| f != "writer") {
                let mut parts = value.split(' ');
                let count = parts.next().and_then(|c| c.parse().ok()).unwrap_or(0);
                let token = parts.next().and_then(|t| t.parse().ok());
                let lease_left = leases
                    .iter()
                    .find(|(o, _)| *o == owner)
                    .map(|(_, end)| Duration::from_millis(end.saturating_sub(now_ms)));
                report.holders.push(Holder {
                    writer: writer.as_deref() == Some(owner.as_str()),
                    owner,
                    count,
                    token,
                    lease_left,
                    client_name: None,
                    client_addr: None,
                });
            }
            if kind == ObjectKind::Semaphore {
                let total: Option<String> = redis::cmd("GET").arg(keys.permits()).query(con)?;
                report.count = Some(total.and_then(|t| t.parse().ok()).unwrap_or(0));
            }
        }
    }
    if kind == ObjectKind::Lock {
        report.queue = lock_places(con, keys)?
            .iter()
            .map(
                |(member, arrival)| match scripts::Place::parse(member, *arrival) {
                    Some(place) => Waiter::waiting(
                        place.owner,
                        place.valid_until_ms,
                        place.handover_lease_ms,
                        now_ms,
                    ),
                    None => Waiter::unread(member, ""),
                },
            )
            .collect();
        return Ok(report);
    }
    let queued: Vec<String> = redis::cmd("ZRANGE")
        .arg(keys.queue())
        .arg(0)
        .arg(-1)
        .query(con)?;
    if !queued.is_empty() {
        let terms: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(keys.waiters())
            .arg(&queued)
            .query(con)?;
        report.queue = queued
            .into_iter()
            .zip(terms)
            .map(|(owner, terms)| Waiter::of_shares(&owner, &terms.unwrap_or_default(), now_ms))
            .collect();
    }
    Ok(report)
}

/// A counting semaphore's permits free, in either layout: 0 when it was never set, and signed,
/// since `add_permits` may take it below 0. A key of another type fails the read
/// (`WRONGTYPE`), as the semaphore's own calls do, rather than show a count it does not hold.
pub(super) fn read_available(con: &mut dyn ConnectionLike, keys: &LockKeys) -> RedisResult<i64> {
    let count: Option<String> = redis::cmd("GET").arg(keys.lock()).query(con)?;
    let Some(count) = count else {
        return Ok(0);
    };
    count.parse().map_err(|_| {
        redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "not a counting semaphore's count",
            format!("{} holds {count:?}", keys.lock()),
        ))
    })
}

/// The report as `redlatch inspect` prints it, a line per fact, each holder and waiter on a
/// line of its own with its client's name and address where known:
///
/// ```text
/// lock "invoice:42" (redlatch:{invoice:42})
///   lease 21 s 400 ms left; fencing counter 1795548688566984; 1 client(s) subscribed
///   holders:
///     1b4e28ba-2fa1-11d2-883f-0016d3cca427:7  count 1  token 1795548688566984  lease 21 s 400 ms left  client api@host-7 at 10.0.0.21:51234
///   queue, oldest first:
///     1. 6fa459ea-ee8a-3ca4-894e-db77e160355e:3  valid for 29 s 800 ms more, hand-over lease 30 s  client worker@host-2 at 10.0.0.34:40112
/// ```
///
/// A counting semaphore has no lease, token, holder or queue, so its report says what it has:
///
/// ```text
/// counting "render-slots" (redlatch:{render-slots}:counting)
///   permits free -2; 3 client(s) subscribed
///   permits have no owner: nobody holds them, so none are listed and none can be freed
///   no queue: its waiters listen on its channel, and each release wakes them all to race
/// ```
impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} {:?} ({})", self.kind.as_str(), self.name, self.key)?;
        if self.kind == ObjectKind::CountingSemaphore {
            // The lines of the other kinds (lease, fence, holders, queue) would read as
            // "none" where the kind has no such thing, as if something were missing.
            match self.available {
                Some(free) => write!(f, "  permits free {free}")?,
                None => write!(f, "  permits free unknown")?,
            }
            writeln!(f, "; {} client(s) subscribed", self.subscribers)?;
            writeln!(
                f,
                "  permits have no owner: nobody holds them, so none are listed and none can \
                 be freed"
            )?;
            return writeln!(
                f,
                "  no queue: its waiters listen on its channel, and each release wakes them all \
                 to race"
            );
        }
        match self.ttl {
            Some(ttl) => write!(f, "  lease {} left", Words(ttl))?,
            None => write!(f, "  no lease")?,
        }
        match self.fence {
            Some(fence) => write!(f, "; fencing counter {fence}")?,
            None => write!(f, "; fencing counter none")?,
        }
        writeln!(f, "; {} client(s) subscribed", self.subscribers)?;
        if let Some(count) = self.count {
            let what = match self.kind {
                ObjectKind::Semaphore => "total permits",
                _ => "count",
            };
            write!(f, "  {what} {count}")?;
            match self.available {
                Some(free) => writeln!(f, ", {free} free")?,
                None => writeln!(f)?,
            }
        }
        if self.holders.is_empty() {
            writeln!(f, "  held by nobody")?;
        } else {
            writeln!(f, "  holders:")?;
        }
        for h in &self.holders {
            write!(f, "    {}  count {}", h.owner, h.count)?;
            if let Some(token) = h.token {
                write!(f, "  token {token}")?;
            }
            if let Some(left) = h.lease_left {
                write!(f, "  lease {} left", Words(left))?;
            }
            if h.writer {
                write!(f, "  (writer)")?;
            }
            writeln!(f, "{}", ClientOf(&h.client_name, &h.client_addr))?;
        }
        if self.queue.is_empty() {
            writeln!(f, "  nobody queued")?;
        } else {
            writeln!(f, "  queue, oldest first:")?;
        }
        for (i, w) in self.queue.iter().enumerate() {
            let client = ClientOf(&w.client_name, &w.client_addr);
            writeln!(f, "    {}. {}  {}{client}", i + 1, w.owner, w.terms)?;
        }
        Ok(())
    }
}

/// The end of a holder's or waiter's line: `  client api@host-7 at 10.0.0.7:53422`, or
/// nothing where the client is not known.
struct ClientOf<'a>(&'a Option<String>, &'a Option<String>);

impl std::fmt::Display for ClientOf<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.0, self.1) {
            (Some(name), Some(addr)) => write!(f, "  client {name} at {addr}"),
            (Some(name), None) => write!(f, "  client {name}"),
            _ => Ok(()),
        }
    }
}

impl Waiter {
    /// A waiter whose terms no script of ours wrote: shown as Redis has them.
    pub(super) fn unread(owner: &str, terms: &str) -> Waiter {
        Waiter {
            owner: owner.to_string(),
            terms: terms.to_string(),
            valid_for: None,
            handover_lease: None,
            permits: None,
            writer: false,
            granted: None,
            client_name: None,
            client_addr: None,
        }
    }

    /// A waiter in the queue whose place is valid until `valid_until_ms` (the server's clock,
    /// which reads `now_ms`) and who is handed the object with `handover_lease_ms`.
    pub(super) fn waiting(
        owner: &str,
        valid_until_ms: u64,
        handover_lease_ms: u64,
        now_ms: u64,
    ) -> Waiter {
        let valid_for = Duration::from_millis(valid_until_ms.saturating_sub(now_ms));
        let handover_lease = Duration::from_millis(handover_lease_ms);
        Waiter {
            terms: format!(
                "valid for {} more, hand-over lease {}",
                Words(valid_for),
                Words(handover_lease)
            ),
            valid_for: Some(valid_for),
            handover_lease: Some(handover_lease),
            ..Waiter::unread(owner, "")
        }
    }

    /// A read-write lock's or a semaphore's waiter, whose terms are `"<valid until ms>
    /// <hand-over lease ms> <need>"` or `"granted <token>"` (`lua/shares.lua`).
    pub(super) fn of_shares(owner: &str, terms: &str, now_ms: u64) -> Waiter {
        let words: Vec<&str> = terms.split(' ').collect();
        match words.as_slice() {
            ["granted", token] => match token.parse() {
                Ok(token) => Waiter {
                    terms: format!("granted token {token}, not taken up yet"),
                    granted: Some(token),
                    ..Waiter::unread(owner, terms)
                },
                Err(_) => Waiter::unread(owner, terms),
            },
            [valid, lease, need] => match (valid.parse(), lease.parse()) {
                (Ok(valid), Ok(lease)) => {
                    let mut waiter = Waiter::waiting(owner, valid, lease, now_ms);
                    match *need {
                        "w" => waiter.writer = true,
                        "r" => {}
                        n => waiter.permits = n.parse().ok(),
                    }
                    let asks = match (*need, waiter.permits) {
                        ("w", _) => ", to write".to_string(),
                        ("r", _) => ", to read".to_string(),
                        (_, Some(1)) => ", 1 permit".to_string(),
                        (_, Some(n)) => format!(", {n} permits"),
                        (_, None) => format!(", asks {need}"),
                    };
                    waiter.terms.push_str(&asks);
                    waiter
                }
                _ => Waiter::unread(owner, terms),
            },
            _ => Waiter::unread(owner, terms),
        }
    }
}
