//! [`Held`]: the one hold every guard wraps, whatever its kind, the way `lock_api`'s guards
//! wrap one raw lock. The public guards ([`LockGuard`](crate::LockGuard),
//! [`OwnedLockGuard`](crate::OwnedLockGuard), [`ReadGuard`](crate::ReadGuard),
//! [`WriteGuard`](crate::WriteGuard), [`Permits`](crate::Permits)) add only their type's
//! promises: whether they are `Send`, their docs, and what is theirs alone.

use std::sync::Arc;
use std::time::Duration;

use crate::core::Runtime;
use crate::engine::{self, Acquired, Hold, Kind};
use crate::error::{Error, Result};

/// One guard's hold of an object of kind `K`; released at most once, by
/// [`Held::release`] or on drop.
///
/// Invariant: the engine registered `hold` and counted this guard in it before the `Held`
/// was made, so that the release takes back exactly this guard.
pub(crate) struct Held<K: Kind> {
    kind: K,
    /// Keeps the client's threads alive while the guard lives.
    runtime: Arc<Runtime>,
    hold: Arc<Hold>,
    released: bool,
}

impl<K: Kind> Held<K> {
    /// Wraps the hold the engine acquired of `kind`.
    pub fn new(kind: K, runtime: &Arc<Runtime>, acquired: Acquired) -> Self {
        Held {
            kind,
            runtime: runtime.clone(),
            hold: acquired.hold,
            released: false,
        }
    }

    pub fn hold(&self) -> &Arc<Hold> {
        &self.hold
    }

    pub fn token(&self) -> u64 {
        self.hold.token
    }

    pub fn name(&self) -> &str {
        self.kind.keys().name()
    }

    pub fn owner_id(&self) -> &str {
        &self.hold.owner
    }

    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    pub fn remaining_lease(&self) -> Duration {
        self.hold.remaining_lease()
    }

    /// `Err(Error::LockLost)` when the hold is known to be lost.
    pub fn check(&self) -> Result<()> {
        if self.is_lost() {
            Err(Error::LockLost {
                name: self.name().to_string(),
            })
        } else {
            Ok(())
        }
    }

    /// Gives this guard's hold (a fixed lease's) a lease of `lease` from now (see
    /// `engine::extend` for what each error means).
    pub fn extend(&self, lease: Duration) -> Result<()> {
        engine::extend(&self.runtime.core, &self.hold, lease)
    }

    /// Releases this guard's hold (see `engine::release` for what each error means).
    pub fn release(mut self) -> Result<()> {
        self.release_once()
    }

    fn release_once(&mut self) -> Result<()> {
        self.released = true;
        engine::release(&self.runtime.core, &self.kind, &self.hold)
    }
}

impl<K: Kind> std::fmt::Debug for Held<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("name", &self.name())
            .field("owner_id", &self.hold.owner)
            .field("fencing_token", &self.hold.token)
            .finish()
    }
}

impl<K: Kind> Drop for Held<K> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let released = self.release_once();
        super::log_dropped_release(self.hold.kind(), self.kind.keys().name(), released);
    }
}
