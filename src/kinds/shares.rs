//! What the kinds with shares ([`ReadWriteLock`](crate::ReadWriteLock),
//! [`Semaphore`](crate::Semaphore)) have in common: the engine's view of one acquisition
//! ([`Share`]), which their guards hold as a [`Held<Share>`](super::held::Held).
//!
//! Their data and grant rule are in `lua/shares.lua`: many holders, each with its own lease;
//! a release admits, in one message, the waiters at the head of the queue while each fits.

use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::held::Held;
use crate::cancel::Cancel;
use crate::core::{Core, Runtime};
use crate::engine::{self, Kind, Terms};
use crate::error::Result;
use crate::keys::LockKeys;
use crate::scripts::shares::Need;
use crate::scripts::{Acquire, Dialect, Freeing, Queueing, Release, Releasing};

/// What one acquisition of a share asks for.
#[derive(Debug, Clone)]
pub(crate) enum Wants {
    /// A read by a thread whose write owner id is `writer` (a thread may read while it
    /// writes, and never waits to); `writing` if the thread holds the write in this client.
    Read {
        writer: Arc<str>,
        writing: bool,
    },
    Write,
    Permits(u32),
}

/// The engine's view of one acquisition of a share: the object's keys, what is asked for,
/// the client's dialect, and what its scripts must know of the deployment (how grants are
/// published, how long a fence is kept).
#[derive(Clone)]
pub(crate) struct Share {
    pub keys: Arc<LockKeys>,
    pub wants: Wants,
    dialect: &'static Dialect,
    freeing: Freeing,
}

impl Share {
    pub fn new(core: &Core, keys: Arc<LockKeys>, wants: Wants) -> Share {
        Share {
            keys,
            wants,
            dialect: core.dialect,
            freeing: engine::freeing(core),
        }
    }

    fn need(&self) -> Need<'_> {
        match &self.wants {
            Wants::Read { writer, writing } => Need::Read {
                writer,
                writing: *writing,
            },
            Wants::Write => Need::Write,
            Wants::Permits(n) => Need::Permits(*n),
        }
    }

    /// Acquires through the engine for `owner`; `wait: None` waits forever, `cancel` ends the
    /// wait.
    pub fn acquire(
        self,
        runtime: &Arc<Runtime>,
        owner: Arc<str>,
        wait: Option<Duration>,
        lease: Option<Duration>,
        cancel: Option<&Cancel>,
    ) -> Result<Option<Held<Share>>> {
        let core = &runtime.core;
        let terms = Terms {
            asked: lease,
            watchdog: core.watchdog_timeout,
        };
        let acquired = engine::acquire(core, &self, owner, wait, terms, cancel)?;
        Ok(acquired.map(|acquired| Held::new(self, runtime, acquired)))
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
        (self.dialect.share_acquire)(
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
        (self.dialect.share_withdraw)(con, &self.keys, owner, lease, self.freeing)
    }

    fn detached(&self) -> Arc<dyn Kind + Send + Sync> {
        Arc::new(self.clone())
    }

    fn release(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        token: u64,
        how: Releasing,
        freeing: Freeing,
    ) -> RedisResult<Release> {
        (self.dialect.share_release)(con, &self.keys, owner, token, how, freeing)
    }
}
