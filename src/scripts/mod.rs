//! The Lua scripts in `lua/` and typed calls to them.
//!
//! Every change to a lock goes through one of these scripts. They run with EVALSHA and, on
//! `NOSCRIPT` (a `SCRIPT FLUSH`, a restarted or failed-over server), with EVAL, which runs the
//! text and caches it again, so a flushed script cache never surfaces to the user. The text is
//! fixed; keys and values travel as KEYS and ARGV, so user data never becomes code.
//!
//! This module holds what every kind shares: the replies the engine understands
//! ([`Acquire`], [`Release`]), the error a refusal means ([`failure`]), and renewal. How a
//! script is called is in [`call`], the parsed form of every message a script publishes in
//! [`message`]; each family's scripts have a file of their own ([`lock`], [`shares`],
//! [`latch`], [`counting`], [`read_write`]), and Redisson's layout a directory
//! ([`redisson`]).
//!
//! The rest of the client calls them through a [`Dialect`], a table of them per layout
//! ([`ours::OURS`], [`redisson::REDISSON`]), which it chooses once from its layout
//! ([`dialect`]): no call here asks which layout its keys are in.

use std::time::Duration;

use redis::{ConnectionLike, RedisError, RedisResult};

use crate::backend::Backend;
use crate::error::Error;
use crate::keys::{Layout, LockKeys};

/// The text of `lua/<file>` with `lua/<prelude>` in it: a prelude is code that several scripts
/// share (`shares.lua`, `places.lua`), not a script of its own. It goes where the file has the
/// line `-- <prelude> goes here`, else in front. A script places it further down so that its
/// usual case returns before the prelude's functions are made (`acquire.lua`).
macro_rules! with_prelude {
    ($prelude:literal, $file:literal) => {
        $crate::scripts::splice(
            include_str!(concat!("../../lua/", $prelude)),
            include_str!(concat!("../../lua/", $file)),
            concat!("-- ", $prelude, " goes here"),
        )
    };
}

/// `file` with `prelude` in place of `marker`, or in front of it. The marker's line end stays
/// (a checkout with CRLF line ends finds it too).
fn splice(prelude: &str, file: &str, marker: &str) -> String {
    match file.split_once(marker) {
        Some((before, after)) => [before, prelude, after].concat(),
        None => [prelude, "\n", file].concat(),
    }
}

mod call;
pub(crate) mod counting;
mod dialect;
pub(crate) mod latch;
mod lock;
mod message;
mod ours;
pub(crate) mod read_write;
pub(crate) mod redisson;
pub(crate) mod shares;

use call::{Invocation, Lua, Optional};
pub(crate) use dialect::Dialect;
pub(crate) use message::{Grants, Message};

pub(crate) use lock::{AcquireMany, Inspection, Place, inspect};

/// The dialect of `layout`: the one place that chooses what a client runs and how it reads
/// its channels by its layout. A client calls it once, when it is built, and keeps the
/// answer (`Core::dialect`).
pub(crate) fn dialect(layout: Layout) -> &'static Dialect {
    match layout {
        Layout::Redlatch => &ours::OURS,
        Layout::Redisson => &redisson::REDISSON,
    }
}

/// The error a failed script call on the lock `keys` means. Our scripts refuse foreign data
/// with `WRONGTYPE <which>`, naming which of the lock's keys holds it (`lock`, `fence`,
/// `queue`, `waiters`, and for the kinds with shares `leases` or `permits`): the key itself may be any text, so the reply names its role and
/// the key is put back here. Anything else is a failure of Redis or of the way to it.
pub(crate) fn failure(keys: &LockKeys, e: RedisError) -> Error {
    // Unwrapped where the reply came back (`Backend::run`), as every error is.
    if e.code() != Some("WRONGTYPE") {
        return Error::Redis(e);
    }
    let key = match e.detail().and_then(|d| d.split_whitespace().next()) {
        Some("fence") => keys.fence().to_string(),
        Some("queue") => keys.queue().to_string(),
        Some("waiters") => keys.waiters().to_string(),
        Some("leases") => keys.leases(),
        Some("permits") => keys.permits(),
        _ => keys.lock().to_string(),
    };
    Error::WrongType { key }
}

/// What the scripts that free a lock (release, give-back, force-unlock) need to know of the
/// deployment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Freeing {
    /// How long the latch that makes a retry of the same call answer the same must live.
    pub latch_ttl: Duration,
    /// The command the message that frees the lock goes out with: PUBLISH, or SPUBLISH where
    /// the subscribers listen sharded.
    pub publish: &'static str,
    /// How long a fencing counter outlives the lease of its latest token (a hand-over sets
    /// one): [`ClientBuilder::fence_retention`](crate::ClientBuilder::fence_retention).
    pub fence_retention: Duration,
    /// Whether the connection retries a command out of the caller's sight (a Cluster's
    /// does, after a transport failure): then a release cannot know whether an earlier
    /// attempt of its own reached Redis, and leaves a latch for its retry to find.
    pub retries_unseen: bool,
}

impl Freeing {
    /// For `backend`'s deployment: its latch lifetime, and SPUBLISH where the subscribers
    /// listen sharded (a Redis 7 Cluster); and the client's fence retention.
    pub fn of(backend: &Backend, fence_retention: Duration) -> Freeing {
        Freeing {
            fence_retention,
            latch_ttl: backend.latch_ttl(),
            retries_unseen: backend.is_cluster(),
            publish: if backend.sharded_pubsub() {
                "SPUBLISH"
            } else {
                "PUBLISH"
            },
        }
    }
}

/// What `acquire.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Ours, with this fencing token.
    Acquired { token: u64 },
    /// Held by another owner for at most this much longer; the fencing counter stood at
    /// `fence` (a hand-over issued later carries a larger token). `place` is the caller's
    /// place in a lock's queue, for the wait's next attempt and its withdrawal to name.
    Busy {
        ttl: Duration,
        fence: u64,
        place: Option<QueuePlace>,
    },
    /// We believed we held it, but our hold is gone.
    Lost,
}

/// How an attempt treats the queue of waiters.
#[derive(Debug, Clone)]
pub(crate) struct Queueing {
    /// If the lock is busy, queue for this long (ZERO: don't queue).
    pub queue_for: Duration,
    /// An earlier attempt of the same wait may have queued the caller.
    pub queued: bool,
    /// The caller's place in a lock's queue, as the wait's last attempt named it.
    pub place: Option<QueuePlace>,
    /// The lease a release hands the lock over with.
    pub handover_lease: Duration,
    /// Places in a lock's queue that earlier waits of the same owner left behind when they
    /// failed: the attempt voids them (`engine/leftover.rs`).
    pub leftovers: Vec<Leftover>,
}

/// A place in a lock's queue (`acquire.lua`): it arrived at `arrival_us` (server clock), which
/// names it while it lasts, and is valid `valid_ms` after that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueuePlace {
    /// 0 when not known: a first attempt whose reply was lost.
    pub arrival_us: u64,
    pub valid_ms: u64,
}

/// A place in a lock's queue that a failed wait left, with the hand-over lease its wait asked
/// for (part of the place's member).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Leftover {
    pub place: QueuePlace,
    pub handover_lease: Duration,
}

impl Queueing {
    pub const NONE: Queueing = Queueing {
        queue_for: Duration::ZERO,
        queued: false,
        place: None,
        handover_lease: Duration::ZERO,
        leftovers: Vec::new(),
    };

    /// The place an attempt of a lock's wait takes at the back of the queue (its first, or
    /// one that found its place gone: `acquire.lua`), named without its arrival: what an
    /// attempt that got no reply may leave behind.
    pub fn first_place(&self) -> Leftover {
        Leftover {
            place: QueuePlace {
                arrival_us: 0,
                valid_ms: millis(self.queue_for),
            },
            handover_lease: self.handover_lease,
        }
    }
}

/// What `release.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// Deleted, or handed to the next waiter.
    Released,
    StillHeld,
    NotOurs,
    /// Not in Redis, and nothing says it went otherwise than by an earlier run of this same
    /// release whose reply was lost (`release.lua`); the caller knows whether there was one.
    Gone,
}

/// What a semaphore's count reads (`shares::count`): shared by both layouts' scripts, so
/// that neither imports the other's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// The total (Java's `getPermits`).
    Permits,
    /// The permits held now (Java's `acquiredPermits`).
    Acquired,
}

/// How a hold was taken, which says what its final release must clean up (a kind with
/// shares; a lock's hand-over mark needs no cleaning: the next hand-over overwrites it, or it
/// expires with the lease it recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TakenBy {
    /// An attempt of the owner's own, which removed any record of a hand-over to it (a place
    /// left from an earlier wait that failed may remain: a lock's is voided by the owner's
    /// next attempt, `engine/leftover.rs`; a kind with shares drops its terms at the release
    /// when others queue).
    Attempt,
    /// A hand-over's message, without a round trip: the record of the hand-over ("granted"
    /// terms) is still in Redis.
    Message,
}

/// What a release script is told of the hold it frees, besides its owner and token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Releasing {
    /// The owner's holds before this release (at least 1): the last one frees the object.
    pub holds: u32,
    /// How the hold was taken; `None` for a hand-over nobody took up, being given back,
    /// which acts only while Redis still records that hand-over as not taken up (a lock's
    /// mark `"<owner> <token>"`, a shares kind's terms `"granted <token>"`).
    pub taken_by: Option<TakenBy>,
    /// The longest lease the hold ever set: no more than this is left of it. A lock's
    /// release that hands the lock over for a shorter lease tells every waiter
    /// (`release.lua`).
    pub lease: Duration,
}

impl Releasing {
    /// A give-back: one hold of a hand-over nobody took up, for at most `lease`.
    pub fn given_back(lease: Duration) -> Releasing {
        Releasing {
            holds: 1,
            taken_by: None,
            lease,
        }
    }
}

impl Releasing {
    /// How `shares_release.lua` is told the hold was taken (its ARGV[8], left off for "0"): "0" by an attempt,
    /// "2" from a message, "1" not taken up. (`release.lua` tells only "1" apart.)
    fn mode(&self) -> &'static str {
        match self.taken_by {
            Some(TakenBy::Attempt) => "0",
            Some(TakenBy::Message) => "2",
            None => "1",
        }
    }
}

/// One hold to renew: the lock, the owner whose field must still be there, and the fencing
/// token the hold was taken with.
pub(crate) struct Renewal<'a> {
    pub keys: &'a LockKeys,
    pub owner: &'a str,
    pub token: u64,
}

/// Renews every hold in `batch` in one script call of `dialect`; `true` where the lock is
/// still ours.
pub(crate) fn renew(
    con: &mut dyn ConnectionLike,
    dialect: &Dialect,
    batch: &[Renewal<'_>],
    lease: Duration,
    fence_retention: Duration,
) -> RedisResult<Vec<bool>> {
    let replies: Vec<i64> = (dialect.renewal)(batch, lease, fence_retention).invoke(con)?;
    Ok(replies.into_iter().map(|r| r == 1).collect())
}

/// Renews each batch of `batches` with one script call, all sent at once (one round trip).
/// The caller makes sure one server serves every key: on a Cluster, the connection sends
/// them all to the master of the first call's slot. Fails as a whole if any call fails (a
/// `NOSCRIPT` too: run the batches one by one with [`renew`] then, which loads the script).
pub(crate) fn renew_pipelined(
    con: &mut dyn ConnectionLike,
    dialect: &Dialect,
    batches: &[&[Renewal<'_>]],
    lease: Duration,
    fence_retention: Duration,
) -> RedisResult<Vec<Vec<bool>>> {
    let mut pipeline = Vec::new();
    for batch in batches {
        pipeline.extend((dialect.renewal)(batch, lease, fence_retention).packed_sha());
    }
    // Straight to the connection: `Pipeline::query` refuses a cluster connection, which sends
    // a pipeline to the node of its first command.
    let replies = con.req_packed_commands(&pipeline, 0, batches.len())?;
    replies
        .into_iter()
        .map(|reply| {
            let reply: Vec<i64> = redis::from_redis_value(reply)?;
            Ok(reply.into_iter().map(|r| r == 1).collect())
        })
        .collect()
}

/// Milliseconds for Redis; callers validated that the value fits.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error a server sends as `line` (without its `-` and CRLF).
    fn server_error(line: &str) -> RedisError {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).unwrap() {
            redis::Value::ServerError(e) => e.into(),
            other => panic!("{line}: not an error but {other:?}"),
        }
    }

    #[test]
    fn a_wrapped_refusal_of_foreign_data_names_its_key() {
        let keys = crate::keys::LockKeys::new("p", "n");
        let wrapped = server_error(
            "ERR Error running script (call to f_1): @user_script:1: user_script:1: WRONGTYPE \
             queue",
        );
        // As it reaches `failure`: unwrapped where the reply came back (`Backend::run`).
        let refused = failure(&keys, crate::error::unwrapped(wrapped));
        assert!(matches!(refused, Error::WrongType { key } if key == keys.queue()));
    }

    #[test]
    fn a_prelude_goes_where_its_script_says_else_in_front() {
        assert_eq!(
            splice("P", "a\n-- p goes here\nb\n", "-- p goes here"),
            "a\nP\nb\n"
        );
        assert_eq!(splice("P", "a\nb\n", "-- p goes here"), "P\na\nb\n");
        // acquire.lua's usual case returns before places.lua's helpers are made.
        let acquire = with_prelude!("places.lua", "acquire.lua");
        let usual_case = acquire.find("return taken\n").unwrap();
        let helpers = acquire.find("local function place_member").unwrap();
        assert!(usual_case < helpers && !acquire.contains("goes here"));
        let withdraw = with_prelude!("places.lua", "withdraw.lua");
        assert!(withdraw.starts_with(include_str!("../../lua/places.lua")));
    }
}
