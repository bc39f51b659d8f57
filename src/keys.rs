//! The Redis key layout (DESIGN.md section 3, binding: operators and ACLs depend on it).
//!
//! For lock `name` under prefix `p`:
//! - `p:{name}`            the lock hash: owner id -> hold count, with a PEXPIRE lease
//! - `p:{name}:fence`      the fencing counter; never expires; a new one starts from the
//!   server's clock in µs, so tokens keep increasing across a restart that lost it
//! - `p:{name}:unlocked`   the channel a release publishes on
//! - `p:{name}:queue`      the waiters, oldest first (zset: owner id -> arrival, µs)
//! - `p:{name}:waiters`    their terms (hash: owner id -> `"<expiry ms> <lease ms>"` while it
//!   waits, `"granted <token>"` once the lock was handed to it)
//! - `p:{name}:released:<owner>:<token>`  a latch that makes a retried release idempotent;
//!   lives a few seconds
//! - `p:{name}:forced:<request id>`  the same for a force-unlock
//! - `p:control:<client id>`  the channel a client uses to wake its own subscriber thread
//!
//! The lock's keys share the hash tag `{name}`, so each script touches one Cluster slot.
//! Lock keys always begin `p:{`; the control channel begins `p:control:`, so no lock name can
//! collide with it.

use crate::error::Error;

/// The keys and channel of one lock.
#[derive(Debug)]
pub(crate) struct LockKeys {
    pub name: String,
    pub lock: String,
    pub fence: String,
    pub channel: String,
    pub queue: String,
    pub waiters: String,
}

impl LockKeys {
    pub fn new(prefix: &str, name: &str) -> LockKeys {
        let lock = format!("{prefix}:{{{name}}}");
        LockKeys {
            name: name.to_string(),
            fence: format!("{lock}:fence"),
            channel: format!("{lock}:unlocked"),
            queue: format!("{lock}:queue"),
            waiters: format!("{lock}:waiters"),
            lock,
        }
    }

    /// The latch that records the final release of the hold `owner` took with `token`.
    pub fn release_latch(&self, owner: &str, token: u64) -> String {
        format!("{}:released:{owner}:{token}", self.lock)
    }

    /// The latch that records the outcome of force-unlock request `request`.
    pub fn force_latch(&self, request: &str) -> String {
        format!("{}:forced:{request}", self.lock)
    }

    /// Names the key in a [`Error::WrongType`]: the scripts say which of the lock's keys
    /// holds foreign data ("lock", "fence", "queue" or "waiters"), not the key itself, which
    /// may be any text.
    pub fn resolve(&self, e: Error) -> Error {
        match e {
            Error::WrongType { key } => Error::WrongType {
                key: match key.as_str() {
                    "fence" => self.fence.clone(),
                    "queue" => self.queue.clone(),
                    "waiters" => self.waiters.clone(),
                    _ => self.lock.clone(),
                },
            },
            other => other,
        }
    }
}

/// The channel a client's requesters publish on to wake its subscriber thread.
pub(crate) fn control_channel(prefix: &str, client_id: &str) -> String {
    format!("{prefix}:control:{client_id}")
}
