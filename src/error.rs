//! The crate's error type.

use std::fmt;

/// What went wrong. Every fallible call in the crate returns this; none of them panics.
#[non_exhaustive]
#[derive(Debug)]
pub enum Error {
    /// Redis could not be reached, refused the request, or answered with an error:
    /// connection refused or reset, timeout, wrong password, missing ACL permission,
    /// `READONLY` replica, a peer that is not Redis ... The inner error says which, and a
    /// failure to connect or of a connection names the server and the step
    /// (`127.0.0.1:6379: cannot connect: Connection refused`, `...: TLS handshake failed: ...`,
    /// `...: AUTH refused: ...`, `...: answered something that is not Redis: ...`). The inner
    /// error is the `redis` crate's, re-exported as [`redlatch::redis`](crate::redis) so that
    /// its version is always the one you name.
    Redis(redis::RedisError),
    /// An argument can never work: an empty lock name or one over
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN), a zero lease, a duration too long, a malformed
    /// URL, a bad client name. Nothing was sent to Redis. Also, from `build()` after one
    /// exchange with the server, a setting the deployment cannot serve: a Cluster node given
    /// to [`Client::open`](crate::Client::open) (or a plain server to
    /// [`Client::cluster_builder`](crate::Client::cluster_builder), a sentinel to either),
    /// or [`wait_for_replicas`](crate::ClientBuilder::wait_for_replicas) on a server that
    /// refuses `WAIT`.
    InvalidArgument(String),
    /// The lock expired or was taken from its holder (released by `force_unlock`, its lease
    /// ran out while the holder was paused or Redis was unreachable, Redis restarted). Work
    /// done under it may have overlapped with another holder's: the fencing token is how the
    /// protected resource tells.
    LockLost {
        /// The lock's name.
        name: String,
    },
    /// Waiting would never end: a thread that holds only a read of a
    /// [`ReadWriteLock`](crate::ReadWriteLock) asked to write it, and would wait for its own
    /// read to go; or a thread holding a [`LockGuard`](crate::LockGuard) taken with the
    /// watchdog asked for an
    /// [`OwnedLockGuard`](crate::OwnedLockGuard) of the same lock with
    /// [`lock_owned`](crate::Lock::lock_owned), and would wait for its own hold. Nothing was
    /// sent to Redis; what was held is still held.
    WouldDeadlock {
        /// The lock's name.
        name: String,
    },
    /// A key that the lock uses holds data that is not a lock of ours (another type, a
    /// hash without a lease, in either layout, or a number that is not a decimal integer
    /// in its range, such as a semaphore's total of `"1.5"` or `"inf"`; in
    /// [`Layout::Redisson`](crate::Layout::Redisson), where objects of different kinds share
    /// the key of their name, another kind's data, such as a read-write lock's hash where a
    /// lock is asked for, and for `force_unlock` a hash whose fields are not a lock's). It
    /// was left untouched.
    WrongType {
        /// The Redis key in question.
        key: String,
    },
    /// Fewer replicas than asked for with
    /// [`wait_for_replicas`](crate::ClientBuilder::wait_for_replicas) acknowledged an
    /// acquisition in time. The lock was released again (or expires with its lease if that
    /// release failed). From `build()`, with an empty `name`: its one `WAIT` found fewer
    /// replicas than asked for, so every lock would fail so; try again once they are back.
    NotReplicated {
        /// The lock's name; empty when `build()` found too few replicas.
        name: String,
        /// Replicas that acknowledged the acquisition.
        acknowledged: u32,
        /// Replicas asked for.
        wanted: u32,
    },
    /// The wait was cancelled: through the [`Cancel`](crate::Cancel) its handle was made
    /// with ([`cancel_on`](crate::Lock::cancel_on)), or by
    /// [`Client::cancel_all_waits`](crate::Client::cancel_all_waits). Nothing is held: the
    /// waiter left the queue in Redis, and a hand-over that reached it as it left went on to
    /// the next waiter.
    Cancelled {
        /// The name of the object waited for.
        name: String,
    },
    /// The operating system refused to start one of the client's threads, or the event poll
    /// of its subscriber.
    Thread(std::io::Error),
    /// The server is older than redlatch needs ([`MIN_REDIS_VERSION`]): found when the
    /// client is built, before anything is locked.
    UnsupportedServer {
        /// The version the server reported (`"5.0.14"`, say; `"older than 6.0"` when it does
        /// not know `HELLO`).
        version: String,
    },
}

/// The oldest Redis redlatch works with: its scripts use `SET ... GET` and `ZADD ... GT`.
pub const MIN_REDIS_VERSION: (u32, u32) = (6, 2);

/// `std::result::Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Redis(e) => write!(f, "redis: {e}"),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::LockLost { name } => {
                write!(f, "lock {name:?} was lost: it expired or was taken")
            }
            Error::WouldDeadlock { name } => write!(
                f,
                "lock {name:?}: this thread holds it and asked for it in a way that does not \
                 re-enter (a write over its read, or an owned guard over its own hold), which \
                 would wait for itself; release what it holds first"
            ),
            Error::WrongType { key } => {
                write!(
                    f,
                    "key {key:?} holds data that is not a redlatch lock; left untouched"
                )
            }
            Error::NotReplicated {
                name,
                acknowledged,
                wanted,
            } if name.is_empty() => write!(
                f,
                "{acknowledged} of {wanted} replicas acknowledged the client's first WAIT in \
                 time: every lock would fail with NotReplicated until they do"
            ),
            Error::NotReplicated {
                name,
                acknowledged,
                wanted,
            } => write!(
                f,
                "lock {name:?}: {acknowledged} of {wanted} replicas acknowledged the \
                 acquisition in time; released it again"
            ),
            Error::Cancelled { name } => {
                write!(f, "the wait for {name:?} was cancelled; nothing is held")
            }
            Error::Thread(e) => write!(f, "cannot start a redlatch thread or its poll: {e}"),
            Error::UnsupportedServer { version } => write!(
                f,
                "redis-server {version} is too old: redlatch needs {}.{} or later",
                MIN_REDIS_VERSION.0, MIN_REDIS_VERSION.1
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            Error::Thread(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Error {
    /// A failure of Redis or of the way to it (already `unwrapped` where its reply came back,
    /// `Backend::run`). A script's refusal of foreign data is not built here but where the
    /// script's keys are known (`scripts::failure`).
    fn from(e: redis::RedisError) -> Self {
        Error::Redis(e)
    }
}

/// A script's refusal, as its code and the text after it (`("WRONGTYPE", "fence")`), however
/// the server passed it on: Redis 7 and Valkey pass an error reply a script returns or raises
/// as it is, and a failed `redis.call` as Redis's own error; Redis 6.2 wraps both of the last
/// two in its own text (`ERR Error running script (call to f_…): @user_script:51: WRONGTYPE
/// Operation against …`, or `… @user_script:1: @user_script: 1: -OOM command not allowed …`),
/// and Redis 7 wraps an error raised as a string (`ERR user_script:1: WRONGTYPE fence script:
/// …, on @user_script:1.`). `None` for an error with no code (a lost connection); an `ERR`
/// that wraps no code stays as it is.
pub(crate) fn refusal(e: &redis::RedisError) -> Option<(String, String)> {
    let is_code = |c: &str| !c.is_empty() && c.bytes().all(|b| b.is_ascii_uppercase());
    let (code, detail) = (e.code()?, e.detail().unwrap_or("").trim());
    if is_code(code) && code != "ERR" {
        return Some((code.to_string(), detail.to_string()));
    }
    // The first `user_script:<line>: ` (6.2 may put a space before the line) followed by an
    // error code of capitals (6.2 keeps a failed call's leading `-`). On 6.2 a script that
    // returns a failed `redis.pcall`'s error replies `@user_script: 35: -OOM …`, which has no
    // code of its own at all.
    let whole = format!("{code} {detail}");
    let mut rest = whole.as_str();
    while let Some(at) = rest.find("user_script:") {
        rest = &rest[at + "user_script:".len()..];
        let after_line = rest
            .trim_start()
            .trim_start_matches(|c: char| c.is_ascii_digit());
        let Some(message) = after_line.strip_prefix(": ") else {
            continue;
        };
        let message = message.strip_prefix('-').unwrap_or(message);
        let (code, detail) = message.split_once(' ').unwrap_or((message, ""));
        if is_code(code) {
            // Redis 7's wrapping of a raised string ends with where it was raised.
            let detail = detail.split(" script: ").next().unwrap_or(detail);
            return Some((code.to_string(), detail.trim().to_string()));
        }
    }
    Some((code.to_string(), detail.to_string()))
}

/// `e` as the server's own error when a script's wrapping hid it (see [`refusal`]): the same
/// code and kind on every server (an `OOM` is `OOM` on 6.2 too), the text kept.
pub(crate) fn unwrapped(e: redis::RedisError) -> redis::RedisError {
    let Some((code, detail)) = refusal(&e).filter(|(code, _)| e.code() != Some(code.as_str()))
    else {
        return e;
    };
    // Parsed by the `redis` crate, so that the kind is the one it gives that code.
    let line = format!("-{code} {detail}\r\n").replace(['\r', '\n'], " ");
    let line = format!("{}\r\n", line.trim_end());
    match redis::parse_redis_value(line.as_bytes()) {
        Ok(redis::Value::ServerError(server)) => server.into(),
        _ => e,
    }
}

impl Error {
    pub(crate) fn invalid(what: impl Into<String>) -> Self {
        Error::InvalidArgument(what.into())
    }

    /// Whether this is [`Error::LockLost`]: the hold is gone, and work done under it may have
    /// overlapped another holder's.
    pub fn is_lock_lost(&self) -> bool {
        matches!(self, Error::LockLost { .. })
    }

    /// Whether Redis did not answer in time (connect or response timeout): the call may or
    /// may not have taken effect, and trying again later may work.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Redis(e) if e.is_timeout())
    }

    /// Whether the connection to Redis failed (refused, reset, closed, timed out): the
    /// server is away, not refusing; trying again later may work.
    pub fn is_connection_error(&self) -> bool {
        matches!(self, Error::Redis(e)
            if e.is_timeout() || e.is_io_error() || e.is_connection_dropped()
                || e.is_connection_refusal())
    }

    /// Whether this is [`Error::Cancelled`]: a wait ended by a [`Cancel`](crate::Cancel) or
    /// by [`Client::cancel_all_waits`](crate::Client::cancel_all_waits), holding nothing.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled { .. })
    }

    /// Whether the call can never succeed as made: [`Error::InvalidArgument`].
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, Error::InvalidArgument(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error a server sends as `line` (without its `-` and CRLF).
    fn server_error(line: &str) -> redis::RedisError {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).unwrap() {
            redis::Value::ServerError(e) => e.into(),
            other => panic!("{line}: not an error but {other:?}"),
        }
    }

    #[test]
    fn a_refusal_is_found_however_the_server_wrapped_it() {
        let cases = [
            // Returned as a reply, or raised as a table on Redis 7 and Valkey: as it is.
            ("WRONGTYPE fence", Some(("WRONGTYPE", "fence"))),
            ("RANGE -3", Some(("RANGE", "-3"))),
            // A failed redis.call on Redis 7: Redis's own error, with where it failed.
            (
                "WRONGTYPE Operation against a key holding the wrong kind of value script: \
                 3b64a469b71295f66c36745e2afb6594ac9aaed3, on @user_script:1.",
                Some((
                    "WRONGTYPE",
                    "Operation against a key holding the wrong kind of value script: \
                     3b64a469b71295f66c36745e2afb6594ac9aaed3, on @user_script:1.",
                )),
            ),
            // Redis 6.2.14: a failed redis.call, and an error raised as a string.
            (
                "ERR Error running script (call to f_3b64a469b71295f66c36745e2afb6594ac9aaed3): \
                 @user_script:51: WRONGTYPE Operation against a key holding the wrong kind of value",
                Some((
                    "WRONGTYPE",
                    "Operation against a key holding the wrong kind of value",
                )),
            ),
            (
                "ERR Error running script (call to f_35a26457acfeeff2c4de2e9523453b9b716ef0dc): \
                 @user_script:1: user_script:1: WRONGTYPE fence",
                Some(("WRONGTYPE", "fence")),
            ),
            // Redis 7: an error raised as a string.
            (
                "ERR user_script:1: WRONGTYPE fence script: \
                 35a26457acfeeff2c4de2e9523453b9b716ef0dc, on @user_script:1.",
                Some(("WRONGTYPE", "fence")),
            ),
            // A script's own failure names no code: ERR stays ERR.
            (
                "ERR Error running script (call to f_8d80): @user_script:9: user_script:9: \
                 attempt to compare nil with number",
                Some((
                    "ERR",
                    "Error running script (call to f_8d80): @user_script:9: user_script:9: \
                     attempt to compare nil with number",
                )),
            ),
        ];
        for (line, expected) in cases {
            let e = server_error(line);
            let expected = expected.map(|(c, d): (&str, &str)| (c.to_string(), d.to_string()));
            assert_eq!(refusal(&e), expected, "{line}");
        }
        // 6.2: a script that returns a failed pcall's error.
        let returned = server_error(
            "@user_script: 35: -OOM command not allowed when used memory > 'maxmemory'.",
        );
        assert_eq!(unwrapped(returned).code(), Some("OOM"));
        // 6.2's OOM of a failed call, unwrapped to the server's own OOM.
        let oom = unwrapped(server_error(
            "ERR Error running script (call to f_d223): @user_script:1: @user_script: 1: -OOM \
             command not allowed when used memory > 'maxmemory'.",
        ));
        assert_eq!(oom.code(), Some("OOM"));
        assert_eq!(
            oom.detail(),
            Some("command not allowed when used memory > 'maxmemory'.")
        );
        // 6.2: a script that returns a failed pcall's error.
        let returned = server_error(
            "@user_script: 35: -OOM command not allowed when used memory > 'maxmemory'.",
        );
        assert_eq!(unwrapped(returned).code(), Some("OOM"));
        // 6.2's OOM of a failed call, unwrapped to the server's own OOM.
        let oom = unwrapped(server_error(
            "ERR Error running script (call to f_d223): @user_script:1: @user_script: 1: -OOM \
             command not allowed when used memory > 'maxmemory'.",
        ));
        assert_eq!(oom.code(), Some("OOM"));
        assert_eq!(
            oom.detail(),
            Some("command not allowed when used memory > 'maxmemory'.")
        );
    }
}
