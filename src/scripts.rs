//! The Lua scripts in `lua/` and typed calls to them.
//!
//! Every change to a lock goes through one of these scripts. They run with EVALSHA and, on
//! `NOSCRIPT` (a `SCRIPT FLUSH`, a restarted or failed-over server), with EVAL, which runs the
//! text and caches it again, so a flushed script cache never surfaces to the user. The text is
//! fixed; keys and values travel as KEYS and ARGV, so user data never becomes code.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{
    Cmd, ConnectionLike, ErrorKind, FromRedisValue, RedisError, RedisResult, Script,
    ServerErrorKind, ToRedisArgs,
};

use crate::backend::Backend;
use crate::error::Error;
use crate::keys::LockKeys;

static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../lua/acquire.lua")));
static RELEASE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../lua/release.lua")));
static RENEW: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../lua/renew.lua")));
static FORCE_UNLOCK: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../lua/force_unlock.lua")));
static WITHDRAW: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../lua/withdraw.lua")));
static INSPECT: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../lua/inspect.lua")));
static ACQUIRE_MANY: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../lua/acquire_many.lua")));

/// One script of `lua/`: EVALSHA, then EVAL on `NOSCRIPT`.
///
/// Not `redis::Script`, which answers `NOSCRIPT` with SCRIPT LOAD and then EVALSHA again: a
/// flush between those two (flushes back to back, say) reached the caller as a `NOSCRIPT`
/// error, and a release that failed so left its lock held until the lease ran out. EVAL loads
/// and runs in one command, so nothing can come between; it is also one round trip fewer.
struct Lua {
    code: &'static str,
    hash: String,
}

impl Lua {
    fn new(code: &'static str) -> Lua {
        Lua {
            code,
            hash: Script::new(code).get_hash().to_string(),
        }
    }

    fn key<T: ToRedisArgs>(&self, key: T) -> Invocation<'_> {
        let mut invocation = self.prepare_invoke();
        invocation.key(key);
        invocation
    }

    fn prepare_invoke(&self) -> Invocation<'_> {
        Invocation {
            lua: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }
}

/// A call of a [`Lua`] script with its KEYS and ARGV.
struct Invocation<'a> {
    lua: &'a Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation<'_> {
    fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    fn invoke<T: FromRedisValue>(&self, con: &mut dyn ConnectionLike) -> RedisResult<T> {
        match self.command("EVALSHA", &self.lua.hash).query(con) {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.command("EVAL", self.lua.code).query(con)
            }
            other => other,
        }
    }

    fn command(&self, eval: &str, script: &str) -> Cmd {
        let mut cmd = redis::cmd(eval);
        cmd.arg(script)
            .arg(self.keys.len())
            .arg(&self.keys[..])
            .arg(&self.args[..]);
        cmd
    }
}

/// The error a failed script call on the lock `keys` means. Our scripts refuse foreign data
/// with `WRONGTYPE <which>`, naming which of the lock's keys holds it (`lock`, `fence`,
/// `queue` or `waiters`): the key itself may be any text, so the reply names its role and
/// the key is put back here. Anything else is a failure of Redis or of the way to it.
pub(crate) fn failure(keys: &LockKeys, e: RedisError) -> Error {
    if e.code() != Some("WRONGTYPE") {
        return Error::Redis(e);
    }
    let key = match e.detail().and_then(|d| d.split_whitespace().next()) {
        Some("fence") => &keys.fence,
        Some("queue") => &keys.queue,
        Some("waiters") => &keys.waiters,
        _ => &keys.lock,
    };
    Error::WrongType { key: key.clone() }
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
}

impl Freeing {
    /// For `backend`'s deployment: its latch lifetime, and SPUBLISH where the subscribers
    /// listen sharded (a Redis 7 Cluster).
    pub fn of(backend: &Backend) -> Freeing {
        Freeing {
            latch_ttl: backend.latch_ttl(),
            publish: if backend.sharded_pubsub() {
                "SPUBLISH"
            } else {
                "PUBLISH"
            },
        }
    }
}

/// What the scripts that free a lock publish on its channel (`release.lua`,
/// `force_unlock.lua`), parsed: the one place that knows the messages' text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Message<'a> {
    /// `grant <token> <lease ms> <owner>`: the lock was handed to `owner`, the oldest waiter
    /// still waiting, with fencing token `token`, for `lease` unless renewed.
    Grant {
        token: u64,
        lease: Duration,
        owner: &'a str,
    },
    /// `unlock`: freed, with only stale places queued: one waiter should try.
    Unlock,
    /// `force`: deleted by a force-unlock: every waiter should try.
    Force,
}

impl<'a> Message<'a> {
    /// The message `payload` carries; `None` for anything our scripts never publish.
    pub fn parse(payload: &'a [u8]) -> Option<Message<'a>> {
        match payload {
            b"unlock" => return Some(Message::Unlock),
            b"force" => return Some(Message::Force),
            _ => {}
        }
        let grant = std::str::from_utf8(payload.strip_prefix(b"grant ")?).ok()?;
        let mut parts = grant.splitn(3, ' ');
        let token = parts.next()?.parse().ok()?;
        let lease = Duration::from_millis(parts.next()?.parse().ok()?);
        let owner = parts.next().filter(|o| !o.is_empty())?;
        Some(Message::Grant {
            token,
            lease,
            owner,
        })
    }

    /// The payload as the scripts publish it: for tests that play a release's part.
    #[cfg(test)]
    pub fn payload(&self) -> Vec<u8> {
        match self {
            Message::Grant {
                token,
                lease,
                owner,
            } => format!("grant {token} {} {owner}", lease.as_millis()).into_bytes(),
            Message::Unlock => b"unlock".to_vec(),
            Message::Force => b"force".to_vec(),
        }
    }
}

/// What `acquire.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Ours, with this fencing token.
    Acquired { token: u64 },
    /// Held by another owner for at most this much longer; the fencing counter stood at
    /// `fence` (a hand-over issued later carries a larger token).
    Busy { ttl: Duration, fence: u64 },
    /// We believed we held it, but our hold is gone.
    Lost,
}

/// How an attempt treats the queue of waiters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Queueing {
    /// If the lock is busy, queue for this long (ZERO: don't queue).
    pub queue_for: Duration,
    /// An earlier attempt of the same wait may have queued the caller.
    pub queued: bool,
    /// The lease a release hands the lock over with.
    pub handover_lease: Duration,
}

impl Queueing {
    pub const NONE: Queueing = Queueing {
        queue_for: Duration::ZERO,
        queued: false,
        handover_lease: Duration::ZERO,
    };
}

pub(crate) fn acquire(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    hold: Option<(u32, u64)>,
    lease: Duration,
    queueing: Queueing,
) -> RedisResult<Acquire> {
    let (holds, token) = hold.unwrap_or((0, 0));
    let reply: Vec<i64> = ACQUIRE
        .key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.queue)
        .key(&keys.waiters)
        .arg(owner)
        .arg(holds)
        .arg(millis(lease))
        .arg(token)
        .arg(millis(queueing.queue_for))
        .arg(if queueing.queued { "1" } else { "0" })
        .arg(millis(queueing.handover_lease))
        .invoke(con)?;
    Ok(match reply.as_slice() {
        [1, token, ..] => Acquire::Acquired {
            token: *token as u64,
        },
        [0, pttl, rest @ ..] => Acquire::Busy {
            ttl: Duration::from_millis((*pttl).max(0) as u64),
            fence: rest.first().map_or(0, |f| (*f).max(0) as u64),
        },
        _ => Acquire::Lost,
    })
}

/// What `acquire_many.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AcquireMany {
    /// All of them ours, with these fencing tokens (in the order asked).
    Acquired(Vec<u64>),
    /// Lock `index` (from 0) is held, for at most `ttl` more; nothing was taken.
    Busy { index: usize, ttl: Duration },
    /// Lock `index`'s hash (or, with `fence`, its fencing counter) holds data that is not a
    /// lock of ours; nothing was taken.
    Foreign { index: usize, fence: bool },
}

/// Takes every lock of `locks` that is free for `owner`, or none of them.
pub(crate) fn acquire_many(
    con: &mut dyn ConnectionLike,
    locks: &[&LockKeys],
    owner: &str,
    lease: Duration,
) -> RedisResult<AcquireMany> {
    let mut invocation = ACQUIRE_MANY.prepare_invoke();
    for keys in locks {
        invocation.key(&keys.lock).key(&keys.fence);
    }
    let reply: RedisResult<Vec<i64>> = invocation.arg(owner).arg(millis(lease)).invoke(con);
    let reply = match reply {
        Ok(reply) => reply,
        Err(e) if e.code() == Some("WRONGTYPE") => {
            let mut words = e.detail().unwrap_or("").split_whitespace();
            let fence = words.next() == Some("fence");
            let index = words.next().and_then(|i| i.parse::<usize>().ok());
            return match index {
                Some(i) if i >= 1 => Ok(AcquireMany::Foreign {
                    index: i - 1,
                    fence,
                }),
                _ => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    Ok(match reply.as_slice() {
        [0, index, pttl] => AcquireMany::Busy {
            index: (*index as usize).saturating_sub(1),
            ttl: Duration::from_millis((*pttl).max(0) as u64),
        },
        [1, tokens @ ..] => AcquireMany::Acquired(tokens.iter().map(|t| *t as u64).collect()),
        _ => {
            return Err(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "acquire_many.lua answered something else",
                format!("{reply:?}"),
            )));
        }
    })
}

/// Takes the caller out of the queue; `Some(token)` if the lock had been handed to it, which
/// then holds it with at least `lease` and the hand-over's token.
pub(crate) fn withdraw(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    lease: Duration,
) -> RedisResult<Option<u64>> {
    let (granted, token): (i64, i64) = WITHDRAW
        .key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.queue)
        .key(&keys.waiters)
        .arg(owner)
        .arg(millis(lease))
        .invoke(con)?;
    Ok((granted == 1).then_some(token as u64))
}

/// What `release.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// Deleted, or handed to the next waiter.
    Released,
    StillHeld,
    NotOurs,
}

/// How a hold was taken, which says what its final release must clean up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TakenBy {
    /// An attempt of the owner's own, which removed any "granted" terms (a place left from an
    /// earlier wait that failed may remain; the release removes it when others queue).
    Attempt,
    /// A hand-over's message, without a round trip: the owner's "granted" terms are still in
    /// the waiters' hash.
    Message,
}

pub(crate) fn release(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    holds: u32,
    token: u64,
    freeing: Freeing,
    taken_by: TakenBy,
) -> RedisResult<Release> {
    let mode = match taken_by {
        TakenBy::Attempt => "0",
        TakenBy::Message => "2",
    };
    run_release(con, keys, owner, holds, token, freeing, mode)
}

/// Gives back a hand-over to `owner` with `token` that nobody took up; changes nothing if it
/// was taken up (by an attempt, a withdrawal, or from the message).
pub(crate) fn give_back(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    token: u64,
    freeing: Freeing,
) -> RedisResult<Release> {
    run_release(con, keys, owner, 1, token, freeing, "1")
}

fn run_release(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
    holds: u32,
    token: u64,
    freeing: Freeing,
    mode: &str,
) -> RedisResult<Release> {
    let reply: i64 = RELEASE
        .key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.channel)
        .key(keys.release_latch(owner, token))
        .key(&keys.queue)
        .key(&keys.waiters)
        .arg(owner)
        .arg(holds)
        .arg(token)
        .arg(millis(freeing.latch_ttl))
        .arg(freeing.publish)
        .arg(mode)
        .invoke(con)?;
    Ok(match reply {
        1 => Release::Released,
        2 => Release::StillHeld,
        _ => Release::NotOurs,
    })
}

/// One hold to renew: the lock, the owner whose field must still be there, and the fencing
/// token the hold was taken with.
pub(crate) struct Renewal<'a> {
    pub keys: &'a LockKeys,
    pub owner: &'a str,
    pub token: u64,
}

/// Renews every hold in `batch` in one script call; `true` where the lock is still ours.
pub(crate) fn renew(
    con: &mut dyn ConnectionLike,
    batch: &[Renewal<'_>],
    lease: Duration,
) -> RedisResult<Vec<bool>> {
    let replies: Vec<i64> = renewal(batch, lease).invoke(con)?;
    Ok(replies.into_iter().map(|r| r == 1).collect())
}

/// Renews each batch of `batches` with one script call, all sent at once (one round trip).
/// The caller makes sure one server serves every key: on a Cluster, the connection sends
/// them all to the master of the first call's slot. Fails as a whole if any call fails (a
/// `NOSCRIPT` too: run the batches one by one with [`renew`] then, which loads the script).
pub(crate) fn renew_pipelined(
    con: &mut dyn ConnectionLike,
    batches: &[&[Renewal<'_>]],
    lease: Duration,
) -> RedisResult<Vec<Vec<bool>>> {
    let mut pipeline = redis::pipe();
    for batch in batches {
        pipeline.add_command(renewal(batch, lease).command("EVALSHA", &RENEW.hash));
    }
    // Straight to the connection: `Pipeline::query` refuses a cluster connection, which sends
    // a pipeline to the node of its first command.
    let replies = con.req_packed_commands(&pipeline.get_packed_pipeline(), 0, batches.len())?;
    replies
        .into_iter()
        .map(|reply| {
            let reply: Vec<i64> = redis::from_redis_value(reply)?;
            Ok(reply.into_iter().map(|r| r == 1).collect())
        })
        .collect()
}

fn renewal<'a>(batch: &[Renewal<'_>], lease: Duration) -> Invocation<'a> {
    let mut invocation = RENEW.prepare_invoke();
    invocation.arg(millis(lease));
    for r in batch {
        invocation
            .key(&r.keys.lock)
            .key(&r.keys.fence)
            .arg(r.owner)
            .arg(r.token);
    }
    invocation
}

/// Deletes the lock whoever holds it; `request` names this call so a retry answers the same.
pub(crate) fn force_unlock(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    request: &str,
    freeing: Freeing,
) -> RedisResult<bool> {
    let reply: i64 = FORCE_UNLOCK
        .key(&keys.lock)
        .key(&keys.channel)
        .key(keys.force_latch(request))
        .arg(freeing.publish)
        .arg(millis(freeing.latch_ttl))
        .invoke(con)?;
    Ok(reply == 1)
}

/// A lock's state as `inspect.lua` reads it.
pub(crate) struct Inspection {
    pub locked: bool,
    pub holds: u32,
    pub ttl: Option<Duration>,
}

pub(crate) fn inspect(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    owner: &str,
) -> RedisResult<Inspection> {
    let (locked, holds, pttl): (i64, i64, i64) = INSPECT.key(&keys.lock).arg(owner).invoke(con)?;
    Ok(Inspection {
        locked: locked == 1,
        holds: holds.clamp(0, u32::MAX as i64) as u32,
        ttl: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
    })
}

/// Milliseconds for Redis; callers validated that the value fits.
fn millis(d: Duration) -> u64 {
    d.as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text `release.lua` and `force_unlock.lua` publish (their `string.format` and
    /// literals), and what is not theirs.
    #[test]
    fn messages_parse_as_the_scripts_publish_them() {
        assert_eq!(
            Message::parse(b"grant 42 30000 c0ffee:7"),
            Some(Message::Grant {
                token: 42,
                lease: Duration::from_secs(30),
                owner: "c0ffee:7",
            })
        );
        assert_eq!(Message::parse(b"unlock"), Some(Message::Unlock));
        assert_eq!(Message::parse(b"force"), Some(Message::Force));
        for foreign in [
            &b"grant"[..],
            b"grant 42",
            b"grant 42 30000",
            b"grant 42 30000 ",
            b"grant x 30000 o:1",
            b"grant 42 -1 o:1",
            b"unlock ",
            b"hello",
            b"",
        ] {
            assert_eq!(Message::parse(foreign), None, "{foreign:?}");
        }
        let grant = Message::Grant {
            token: 9,
            lease: Duration::from_millis(1500),
            owner: "id:3",
        };
        assert_eq!(Message::parse(&grant.payload()), Some(grant));
    }
}
