//! Looking at what is in Redis, for the people who run it: which objects exist
//! ([`Client::list`]), who holds one and who waits for it ([`Client::inspect`]), and what its
//! channel carries ([`Client::watch`]). The `redlatch` command-line tool is a thin face over
//! these.
//!
//! These read; none of them changes anything. They read with plain commands, several per
//! call, so a report is not one atomic snapshot: a hand-over between two of its reads can show
//! in one and not the other. That is fine for a person looking; nothing decides on it.
//! Unlike the kinds, this module talks to the servers directly (SCAN on every master, a
//! subscription of its own): an operator's view is not a policy over the engine.
//!
//! This file has the public types and `inspect`; `listing` finds the objects, `clients` who
//! is connected, `detect` tells a name's kind, `report` reads and prints one object of our
//! own layout, `redisson` one of Redisson's, `watch` follows a channel.

mod clients;
mod detect;
mod listing;
mod redisson;
mod report;
mod watch;

use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use crate::client::Client;
use crate::core::Core;
use crate::engine;
use crate::error::{Error, Result};
use crate::keys::{Family, Layout, LockKeys};

/// The fuzz targets read `CLIENT LIST` through `crate::fuzzing`.
#[cfg(fuzzing)]
pub(crate) use clients::parse_client_list;
use clients::{client_id_of, clients_by};
pub use detect::Detected;

/// The kinds of object [`Client::inspect`] can look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ObjectKind {
    /// A [`Lock`](crate::Lock) (or [`SpinLock`](crate::SpinLock), the same in Redis).
    Lock,
    /// A [`ReadWriteLock`](crate::ReadWriteLock).
    ReadWriteLock,
    /// A [`Semaphore`](crate::Semaphore).
    Semaphore,
    /// A [`CountDownLatch`](crate::CountDownLatch).
    CountDownLatch,
    /// A [`CountingSemaphore`](crate::CountingSemaphore): permits with no owner, so a report
    /// has its count and its waiters, never holders.
    CountingSemaphore,
}

impl ObjectKind {
    /// Every kind.
    pub const ALL: [ObjectKind; 5] = [
        ObjectKind::Lock,
        ObjectKind::ReadWriteLock,
        ObjectKind::Semaphore,
        ObjectKind::CountDownLatch,
        ObjectKind::CountingSemaphore,
    ];

    /// A short name: `lock`, `rwlock`, `semaphore`, `latch`, `counting`.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::Lock => "lock",
            ObjectKind::ReadWriteLock => "rwlock",
            ObjectKind::Semaphore => "semaphore",
            ObjectKind::CountDownLatch => "latch",
            ObjectKind::CountingSemaphore => "counting",
        }
    }

    /// The kind called `name` ([`as_str`](ObjectKind::as_str)).
    pub fn parse(name: &str) -> Option<ObjectKind> {
        ObjectKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    fn family(self) -> Family {
        match self {
            ObjectKind::Lock => Family::Lock,
            ObjectKind::ReadWriteLock => Family::ReadWrite,
            ObjectKind::Semaphore => Family::Semaphore,
            ObjectKind::CountDownLatch => Family::Latch,
            ObjectKind::CountingSemaphore => Family::Counting,
        }
    }

    /// What follows `{name}` in the object's main key.
    fn suffix(self) -> &'static str {
        match self {
            ObjectKind::Lock => "}",
            ObjectKind::ReadWriteLock => "}:rwlock",
            ObjectKind::Semaphore => "}:semaphore",
            ObjectKind::CountDownLatch => "}:latch",
            ObjectKind::CountingSemaphore => "}:counting",
        }
    }
}

/// An object [`Client::list`] found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub struct Listed {
    /// Its kind.
    pub kind: ObjectKind,
    /// Its name.
    pub name: String,
    /// Whether it is in use now: held (a lock, a read-write lock, a semaphore), waited for,
    /// or counting (a latch). A semaphore not in use is listed by its total, a counting
    /// semaphore nobody waits for by its count (its permits have no holder to tell use by,
    /// and its count stays for good); a fencing counter alone is no object
    /// ([`Listing::kept_fences`]).
    pub active: bool,
}

/// What [`Client::listing`] found: the objects, and what is left of objects that went.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Listing {
    /// The objects, sorted by kind and name.
    pub objects: Vec<Listed>,
    /// Fencing counters kept after their object went, with the kind and name they count for
    /// (never active), sorted. A counter outlives its object on purpose, so that tokens keep
    /// increasing across a re-creation: ours by the fence retention after the latest
    /// lease (an hour by default), Redisson's `redisson_lock_token:{name}` for ever. They
    /// are not objects: a shared server has many, and listing each as an idle lock buried
    /// the objects in use.
    ///
    /// In [`Layout::Redisson`](crate::Layout::Redisson) one counter per name serves every
    /// kind of that name that hands out tokens (its lock, its read-write lock, its
    /// semaphore's permits), and nothing in Redis says which took them: the kind given there
    /// is [`ObjectKind::Lock`], standing for any of [`Listing::REDISSON_FENCED`].
    pub kept_fences: Vec<Listed>,
    /// [`Layout::Redisson`]: keys holding a bare count, with no permit out and nobody
    /// waiting: a semaphore or counting semaphore nobody uses, a latch, or an application's
    /// counter, which nothing in Redis tells apart. Counted, not listed (`inspect NAME --kind
    /// latch` reads one).
    pub unattributed_counts: u64,
}

impl Listing {
    /// The kinds a kept fencing counter of [`Layout::Redisson`](crate::Layout::Redisson)
    /// may have counted for: one counter, `redisson_lock_token:{name}`, serves them all.
    pub const REDISSON_FENCED: [ObjectKind; 3] = [
        ObjectKind::Lock,
        ObjectKind::ReadWriteLock,
        ObjectKind::Semaphore,
    ];
}

/// What [`Client::inspect`] found for one object.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The object's kind.
    pub kind: ObjectKind,
    /// The object's name.
    pub name: String,
    /// Its main key (`<prefix>:{name}...`).
    pub key: String,
    /// Who holds it, with their counts.
    pub holders: Vec<Holder>,
    /// How long the main key lives (the latest lease), `None` when it has no expiry or is
    /// absent.
    pub ttl: Option<Duration>,
    /// The fencing counter: the last token handed out.
    pub fence: Option<u64>,
    /// The waiters queued in Redis, oldest first.
    pub queue: Vec<Waiter>,
    /// Clients subscribed to the object's channel: those with threads waiting.
    pub subscribers: u64,
    /// A semaphore's total; a latch's count. `None` for a counting semaphore, whose count
    /// may be below 0: see [`available`](Report::available).
    pub count: Option<u64>,
    /// A counting semaphore's permits free (0 when it was never set), below 0 after
    /// `add_permits` took away more than was free; in [`Layout::Redisson`] a semaphore's
    /// too, whose count Java's `RSemaphore` shares and may take below 0. `None` for every
    /// other kind. Its own field, signed, so that a negative count is shown as it is, never
    /// wrapped or lost.
    pub available: Option<i64>,
}

/// One holder in a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// Its owner id: `<client id>:<thread>` (a read adds `:r`; permits `<client id>:p<n>`;
    /// an [`OwnedLockGuard`](crate::OwnedLockGuard) `<client id>:<n>`, shaped like a thread's
    /// but no thread's). What the guards' `owner_id()` answer. In
    /// [`Layout::Redisson`](crate::Layout::Redisson), Redisson's fields as they are (a Java
    /// service's `<uuid>:<thread>` too), and a semaphore's holders one permit id (hex) each.
    pub owner: String,
    /// Its hold count (re-entries), or the permits it holds.
    pub count: u64,
    /// The token of its hold: per holder for a read-write lock or a semaphore; a lock's
    /// holder has the lock's latest token, its fencing counter.
    pub token: Option<u64>,
    /// Its lease left: its own for a read-write lock or a semaphore, the lock's for a lock.
    pub lease_left: Option<Duration>,
    /// Whether it is the writer of a read-write lock (never set for another kind).
    pub writer: bool,
    /// The [name](crate::ClientBuilder::name) of the client it belongs to, found through
    /// `CLIENT LIST`; `None` when that client has no connection open, or the ACL does not
    /// allow `CLIENT LIST`.
    pub client_name: Option<String>,
    /// The address (`ip:port`) of one of that client's connections, the same way.
    pub client_addr: Option<String>,
}

/// One waiter in a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// Its owner id.
    pub owner: String,
    /// Its terms in words: `valid for 29 s 800 ms more, hand-over lease 30 s` (and what it asks
    /// for: `to write`, `3 permits`), or `granted token 42, not taken up yet` for a read-write
    /// lock's or a semaphore's waiter that was handed the object and has not returned with
    /// it yet (a lock's waiter leaves the queue when it is handed the lock). What a script of
    /// ours did not write is shown as Redis has it.
    pub terms: String,
    /// How long its place stays valid, by the server's clock: a release passes over a waiter
    /// whose place ran out as gone. Zero once it ran out.
    pub valid_for: Option<Duration>,
    /// The lease it is handed the object with, if a release hands it over.
    pub handover_lease: Option<Duration>,
    /// A semaphore's waiter: the permits it asks for.
    pub permits: Option<u64>,
    /// A read-write lock's waiter: whether it waits to write (else to read).
    pub writer: bool,
    /// The token it was granted, when it was handed the object and has not taken it up.
    pub granted: Option<u64>,
    /// As [`Holder::client_name`].
    pub client_name: Option<String>,
    /// As [`Holder::client_addr`].
    pub client_addr: Option<String>,
}

/// A redlatch client with a connection open to Redis, as `CLIENT LIST` shows it (see
/// [`ClientBuilder::name`](crate::ClientBuilder::name)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectedClient {
    /// Its client id, the first half of its owner ids ([`Client::id`]).
    pub id: String,
    /// Its name (`redlatch` when it was given none).
    pub name: String,
    /// The address (`ip:port`) of one of its connections.
    pub addr: String,
}

impl Client {
    /// Who holds object `name` of `kind`, its lease, its fencing counter, who waits for it
    /// and how many clients listen on its channel, with the name and address of each
    /// holder's and waiter's client where `CLIENT LIST` (on the server that keeps the object)
    /// tells them; without them where it cannot. Reads only.
    pub fn inspect(&self, kind: ObjectKind, name: &str) -> Result<Report> {
        let core = self.core();
        engine::check_name(core, kind.family(), name)?;
        let keys = core.keys(kind.family(), name);
        let read = |con: &mut dyn ConnectionLike| match core.layout {
            Layout::Redlatch => report::read_report(con, kind, &keys),
            Layout::Redisson => redisson::read_report(con, kind, &keys),
        };
        let mut report = core.backend.run(read).map_err(Error::Redis)?;
        let clients = clients_by(core, &keys);
        let client_of = |owner: &str| {
            let id = client_id_of(owner);
            clients.iter().find(|c| c.id == id)
        };
        for holder in &mut report.holders {
            if let Some(client) = client_of(&holder.owner) {
                holder.client_name = Some(client.name.clone());
                holder.client_addr = Some(client.addr.clone());
            }
        }
        for waiter in &mut report.queue {
            if let Some(client) = client_of(&waiter.owner) {
                waiter.client_name = Some(client.name.clone());
                waiter.client_addr = Some(client.addr.clone());
            }
        }
        let listeners = Listeners::of(core);
        let listening = |con: &mut dyn ConnectionLike| listeners.on(con, keys.channel());
        // On a Cluster the slot's master (a cluster connection cannot route PUBSUB);
        // elsewhere a pooled connection, not one made for the call.
        report.subscribers = if core.backend.is_cluster() {
            listening(&mut core.backend.link_for_slot(keys.slot())?)?
        } else {
            core.backend.run(listening)?
        };
        Ok(report)
    }
}

/// A lock's places in its queue, oldest first: the member (`"<owner> <hand-over lease ms>
/// <valid ms>"`, `acquire.lua`) and its arrival, µs; [`scripts::Place::parse`] reads them.
fn lock_places(con: &mut dyn ConnectionLike, keys: &LockKeys) -> RedisResult<Vec<(String, u64)>> {
    redis::cmd("ZRANGE")
        .arg(keys.queue())
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(con)
}

/// How many clients listen on a channel, counted where they may listen. With sharded pub/sub
/// (a Redis 7 Cluster) every listener of a channel is on the master of its slot, which the
/// inspection asks anyway; on one server, or the master Sentinel names, there is one place.
/// A Cluster without sharded pub/sub (before Redis 7) has its listeners spread: ours on a
/// seed node, Redisson's on the master of the channel's slot, and `PUBSUB NUMSUB` counts only
/// the node asked, so there every such node is asked.
#[derive(Clone, Copy)]
pub(super) struct Listeners<'a> {
    backend: &'a crate::backend::Backend,
}

impl<'a> Listeners<'a> {
    pub(super) fn of(core: &'a Core) -> Listeners<'a> {
        Listeners {
            backend: &core.backend,
        }
    }

    fn sharded(&self) -> bool {
        self.backend.sharded_pubsub()
    }

    /// The clients listening on `channel`; `con` is a connection to the server that keeps
    /// the channel's object (on a Cluster, the master of its slot).
    pub(super) fn on(&self, con: &mut dyn ConnectionLike, channel: &str) -> RedisResult<u64> {
        let count = |con: &mut dyn ConnectionLike, which: &str| -> RedisResult<u64> {
            let (_, n): (String, u64) = redis::cmd("PUBSUB").arg(which).arg(channel).query(con)?;
            Ok(n)
        };
        if self.sharded() {
            count(con, "SHARDNUMSUB")
        } else if self.backend.is_cluster() {
            Ok(self
                .backend
                .on_every_listening_node(|con| count(con, "NUMSUB"))?
                .iter()
                .sum())
        } else {
            count(con, "NUMSUB")
        }
    }
}

/// Every key matching `pattern` on one server, by SCAN.
fn scan(con: &mut dyn ConnectionLike, pattern: &str) -> RedisResult<Vec<String>> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(con)?;
        keys.extend(batch);
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_read_in_words() {
        let now = 1_795_709_669_379;
        let w = Waiter::waiting("c:1", now + 29_800, 30_000, now);
        assert_eq!(w.terms, "valid for 29 s 800 ms more, hand-over lease 30 s");
        assert_eq!(w.valid_for, Some(Duration::from_millis(29_800)));
        let past = Waiter::waiting("c:1", now - 5, 250, now);
        assert_eq!(past.terms, "valid for 0 s more, hand-over lease 250 ms");
        let sem = Waiter::of_shares("c:p1", &format!("{} 30000 3", now + 1000), now);
        assert_eq!(sem.permits, Some(3));
        assert!(sem.terms.ends_with(", 3 permits"), "{}", sem.terms);
        let write = Waiter::of_shares("c:1", &format!("{} 30000 w", now + 1000), now);
        assert!(write.writer && write.terms.ends_with(", to write"));
        let granted = Waiter::of_shares("c:1", "granted 42", now);
        assert_eq!(granted.granted, Some(42));
        assert_eq!(granted.terms, "granted token 42, not taken up yet");
        let foreign = Waiter::of_shares("c:1", "what is this", now);
        assert_eq!(foreign.terms, "what is this");
    }
}
