//! The Redis key layout (DESIGN.md section 3, binding: operators and ACLs depend on it).
//!
//! For lock `name` under prefix `p`:
//! - `p:{name}`            the lock hash: owner id -> hold count, with a PEXPIRE lease
//! - `p:{name}:fence`      the fencing counter; never expires
//! - `p:{name}:unlocked`   the channel a release publishes on
//! - `p:{name}:released:<owner>:<token>`  a latch that makes a retried release idempotent;
//!   lives a few seconds
//! - `p:control:<client id>`  the channel a client uses to wake its own subscriber thread
//!
//! The lock's keys share the hash tag `{name}`, so each script touches one Cluster slot.
//! Lock keys always begin `p:{`; the control channel begins `p:control:`, so no lock name can
//! collide with it.

use std::time::Duration;

/// How long a release latch outlives the release it records. It only has to cover the retry
/// of a release whose reply was lost, which happens within a second.
pub(crate) const RELEASE_LATCH_TTL: Duration = Duration::from_secs(10);

/// The keys and channel of one lock.
#[derive(Debug)]
pub(crate) struct LockKeys {
    pub name: String,
    pub lock: String,
    pub fence: String,
    pub channel: String,
}

impl LockKeys {
    pub fn new(prefix: &str, name: &str) -> LockKeys {
        let lock = format!("{prefix}:{{{name}}}");
        LockKeys {
            name: name.to_string(),
            fence: format!("{lock}:fence"),
            channel: format!("{lock}:unlocked"),
            lock,
        }
    }

    /// The latch that records the final release of the hold `owner` took with `token`.
    pub fn release_latch(&self, owner: &str, token: u64) -> String {
        format!("{}:released:{owner}:{token}", self.lock)
    }
}

/// The channel a client's requesters publish on to wake its subscriber thread.
pub(crate) fn control_channel(prefix: &str, client_id: &str) -> String {
    format!("{prefix}:control:{client_id}")
}
