//! What a failure of the way to Redis says: which server and which step, in front of the
//! `redis` crate's own error (`127.0.0.1:6379: cannot connect: Connection refused`). Its kind
//! stays, so whatever the crate and its users ask of it (`is_timeout`, `is_connection_refusal`,
//! `ErrorKind::AuthenticationFailed`, the retry policy's questions) answers as before.

use std::error::Error as _;
use std::io;
use std::sync::Arc;

use redis::{ErrorKind, RedisError};

/// `e` told again with `what` before it. Contexts added one after the other read as one
/// (`127.0.0.1:6379: cannot connect: ...`), each said once.
pub(super) fn with_context(e: RedisError, what: impl Into<String>) -> RedisError {
    let what = what.into();
    if e.kind() == ErrorKind::Io
        && let Some(inner) = io_error_of(&e)
    {
        let kind = inner.kind();
        let context = match inner.get_ref().and_then(|i| i.downcast_ref::<Context>()) {
            Some(earlier) => Context {
                what: format!("{what}: {}", earlier.what),
                cause: earlier.cause.clone(),
            },
            None => Context { what, cause: e },
        };
        return io::Error::new(kind, context).into();
    }
    // The other errors carry a detail rather than an error of their own: the context goes in
    // front of it. A server's refusal keeps its code in the text (`NOAUTH ...`).
    let said = match (e.source(), e.detail()) {
        (None, Some(detail)) => detail.to_string(),
        _ => e.to_string(),
    };
    let description = match e.kind() {
        ErrorKind::AuthenticationFailed => "authentication failed",
        ErrorKind::Parse => "not a Redis server",
        ErrorKind::Server(_) | ErrorKind::Extension => "refused by the server",
        _ => "connection failed",
    };
    RedisError::from((e.kind(), description, format!("{what}: {said}")))
}

/// The I/O error inside `e`, if it has one. The `redis` crate keeps it behind an `Arc`, which
/// `source()` hands out as it is.
fn io_error_of(e: &RedisError) -> Option<&io::Error> {
    let shared = e
        .source()?
        .downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>()?;
    shared.downcast_ref::<io::Error>()
}

/// One error for every seed node that failed, each of which names its node, so that a user
/// with several seeds sees which is wrong. It is the failure of a node that answered (a
/// refused password, say) if any did, else the last, with the others' words before it: what
/// callers ask of it answers for that one.
pub(super) fn all_failed(mut failures: Vec<RedisError>) -> RedisError {
    let answered = failures.iter().position(|e| e.kind() != ErrorKind::Io);
    let carrier = failures.remove(answered.unwrap_or(failures.len() - 1));
    if failures.is_empty() {
        return carrier;
    }
    let others: Vec<String> = failures.iter().map(|e| e.to_string()).collect();
    with_context(
        carrier,
        format!("every seed failed ({}); and", others.join("; ")),
    )
}

/// What was being done, and where, before the error it led to (see [`with_context`]).
#[derive(Debug)]
struct Context {
    what: String,
    cause: RedisError,
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.cause)
    }
}

impl std::error::Error for Context {
    /// The error itself, not the `redis` error around it, which says the same words.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match io_error_of(&self.cause) {
            Some(io) => Some(io),
            None => Some(&self.cause),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(e: &RedisError) -> Vec<String> {
        let mut said = vec![e.to_string()];
        let mut next = e.source();
        while let Some(cause) = next {
            said.push(cause.to_string());
            next = cause.source();
        }
        said
    }

    #[test]
    fn contexts_read_as_one_and_keep_what_callers_ask() {
        let refused = RedisError::from(io::Error::from(io::ErrorKind::ConnectionRefused));
        let e = with_context(with_context(refused, "cannot connect"), "127.0.0.1:1");
        assert!(
            e.to_string().starts_with("127.0.0.1:1: cannot connect: "),
            "{e}"
        );
        assert!(e.is_connection_refusal() && e.is_io_error());
        // The refusal's own words come once after the context, not once per layer.
        let said = chain(&e);
        assert_eq!(
            said.iter().filter(|s| s.contains("cannot connect")).count(),
            2,
            "{said:?}"
        );

        let timeout = RedisError::from(io::Error::from(io::ErrorKind::TimedOut));
        let e = with_context(with_context(timeout, "handshake"), "127.0.0.1:1");
        assert!(e.is_timeout() && e.to_string().starts_with("127.0.0.1:1: handshake: "));

        let auth = RedisError::from((ErrorKind::AuthenticationFailed, "auth", "WRONGPASS".into()));
        let e = with_context(auth, "127.0.0.1:1: AUTH refused");
        assert_eq!(e.kind(), ErrorKind::AuthenticationFailed);
        assert!(
            e.to_string()
                .ends_with("127.0.0.1:1: AUTH refused: WRONGPASS"),
            "{e}"
        );
    }

    #[test]
    fn several_seeds_say_each_and_keep_the_kind_of_one_that_answered() {
        let refused = || RedisError::from(io::Error::from(io::ErrorKind::ConnectionRefused));
        let named = |e, at: &str| with_context(e, format!("{at}: cannot connect"));
        let auth = RedisError::from((
            ErrorKind::AuthenticationFailed,
            "auth",
            "x:2: AUTH refused".into(),
        ));
        let e = all_failed(vec![named(refused(), "x:1"), auth, named(refused(), "x:3")]);
        assert_eq!(e.kind(), ErrorKind::AuthenticationFailed);
        let text = e.to_string();
        assert!(
            text.contains("x:1: cannot connect")
                && text.contains("x:3")
                && text.contains("x:2: AUTH"),
            "{text}"
        );

        let e = all_failed(vec![named(refused(), "x:1"), named(refused(), "x:2")]);
        assert!(e.is_connection_refusal(), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("x:1: cannot connect") && text.contains("x:2: cannot connect"),
            "{text}"
        );
    }
}
