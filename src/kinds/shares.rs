//! What the kinds with shares ([`ReadWriteLock`](crate::ReadWriteLock),
//! [`Semaphore`](crate::Semaphore)) have in common: the engine's view of one acquisition
//! ([`Share`]) and the hold a guard wraps ([`Held`]).
//!
//! Their data and grant rule are in `lua/shares.lua`: many holders, each with its own lease;
//! a release admits, in one message, the waiters at the head of the queue while each fits.

use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use crate::core::{Core, Runtime};
use crate::engine::{self, Acquired, Hold, Kind, Terms};
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::scripts::shares::{self, Need};
use crate::scripts::{Acquire, Freeing, Queueing, Release, Releasing};

/// What one acquisition of a share asks for.
#[derive(Debug, Clone)]
pub(crate) enum Wants {
    /// A read by a thread whose write owner id is `writer` (a thread may read while it
    /// writes, and never waits to).
    Read {
        writer: Arc<str>,
    },
    Write,
    Permits(u32),
}

/// The engine's view of one acquisition of a share: the object's keys, what is asked for,
/// and what its scripts must know of the deployment (how grants are published, how long a
/// fence is kept).
pub(crate) struct Share {
    pub keys: Arc<LockKeys>,
    pub wants: Wants,
    freeing: Freeing,
}

impl Share {
    pub fn new(core: &Core, keys: Arc<LockKeys>, wants: Wants) -> Share {
        Share {
            keys,
            wants,
            freeing: engine::freeing(core),
        }
    }

    fn need(&self) -> Need<'_> {
        match &self.wants {
            Wants::Read { writer } => Need::Read { writer },
            Wants::Write => Need::Write,
            Wants::Permits(n) => Need::Permits(*n),
        }
    }

    /// Acquires through the engine for `owner`; `wait: None` waits forever.
    pub fn acquire(
        self,
        runtime: &Arc<Runtime>,
        owner: Arc<str>,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<Held>> {
        let core = &runtime.core;
        let terms = Terms {
            asked: lease,
            watchdog: core.watchdog_timeout,
        };
        let acquired = engine::acquire(core, &self, owner, wait, terms)?;
        Ok(acquired.map(|Acquired { hold }| Held {
            share: self,
            runtime: runtime.clone(),
            hold,
            released: false,
        }))
    }
}

/// Shares' scripts (`lua/shares_*.lua`): a release admits the waiters that now fit.
impl Kind for Share {
    fn keys(&self) -> &Arc<LockKeys> {
        &self.keys
    }

    fn attempt(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        held: Option<(u32, u64)>,
        lease: Duration,
        queueing: &Queueing,
    ) -> RedisResult<Acquire> {
        let need = self.need();
        shares::acquire(
            con,
            &self.keys,
            owner,
            held,
            lease,
            queueing,
            need,
            self.freeing,
        )
    }

    fn withdraw(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        lease: Duration,
        _queueing: &Queueing,
    ) -> RedisResult<Option<u64>> {
        shares::withdraw(con, &self.keys, owner, lease, self.freeing)
    }

    fn release(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        token: u64,
        how: Releasing,
        freeing: Freeing,
    ) -> RedisResult<Release> {
        shares::release(con, &self.keys, owner, token, how, freeing)
    }
}

/// One guard's hold of a share; released at most once, on [`Held::release`] or on drop.
pub(crate) struct Held {
    share: Share,
    /// Keeps the client's threads alive while the guard lives.
    runtime: Arc<Runtime>,
    hold: Arc<Hold>,
    released: bool,
}

impl Held {
    pub fn token(&self) -> u64 {
        self.hold.token
    }

    pub fn name(&self) -> &str {
        self.share.keys.name()
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

    pub fn check(&self) -> Result<()> {
        if self.is_lost() {
            Err(Error::LockLost {
                name: self.name().to_string(),
            })
        } else {
            Ok(())
        }
    }

    /// Releases this guard's hold (see `engine::release` for what each error means).
    pub fn release(mut self) -> Result<()> {
        self.release_once()
    }

    fn release_once(&mut self) -> Result<()> {
        self.released = true;
        engine::release(&self.runtime.core, &self.share, &self.hold)
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("name", &self.share.keys.name())
            .field("wants", &self.share.wants)
            .field("fencing_token", &self.hold.token)
            .finish()
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let released = self.release_once();
        let what = match self.share.wants {
            Wants::Permits(_) => "permits of semaphore",
            Wants::Read { .. } | Wants::Write => "read-write lock",
        };
        super::log_dropped_release(what, self.share.keys.name(), released);
    }
}
