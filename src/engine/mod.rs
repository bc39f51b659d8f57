//! The acquisition engine: every kind of lock is a policy over it.
//!
//! A [`Kind`] says what is in Redis: its keys and its scripts (attempt, withdraw, release,
//! each idempotent under retry) and, through what its release script publishes, whom a
//! release grants. The engine does the rest, once, for every kind:
//!
//! - attempt, and on a busy object queue in Redis and wait on the subscriber for a hand-over
//!   or a wake-up, then attempt again ([`acquire()`]); or, for a kind that wants no pub/sub,
//!   attempt again after capped, jittered backoff ([`spin()`]);
//! - wait for a condition on an object, woken by its channel and checking again at least
//!   every watchdog timeout ([`watch()`]: a count-down latch's wait, and a counting
//!   semaphore's, whose check takes the permits);
//! - end any of these waits when it is cancelled ([`Cancel`](crate::Cancel)), out of the
//!   queue and holding nothing;
//! - withdraw from the queue when the wait is over, taking up a hand-over that came
//!   meanwhile;
//! - `WAIT` for replicas after an acquisition, when the client asks for it;
//! - register every hold with the client's registry *before* its first guard exists, so the
//!   renewal thread renews it from that moment ([`Holds`]);
//! - lease deadlines and the lost signal ([`Hold::is_lost`]);
//! - release ([`release`]) and renewal ([`renew()`]), grouped by slot or master on a Cluster;
//! - a fixed lease set anew by its holder ([`extend()`]).
//!
//! Kinds (`kinds/`) add only what their users see: typed handles and guards, and their rules
//! (re-entry, composition). None of them reaches the transport, the subscriber or the
//! renewal thread.

mod acquire;
pub(crate) mod doubt;
mod extend;
pub(crate) mod hold;
mod lease;
pub(crate) mod leftover;
mod local;
mod release;
mod renew;
mod settle;
mod spin;
mod turn;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use crate::core::Core;
use crate::error::Result;
use crate::keys::{Family, LockKeys};
use crate::scripts::{self, Acquire, Freeing, Queueing, Release, Releasing};

pub(crate) use acquire::{Acquired, acquire, acquisition, check_replicas, in_doubt, register};
pub(crate) use extend::extend;
pub(crate) use hold::Hold;
pub(crate) use lease::{Terms, deadline_after, validate_duration, validate_lease};
pub(crate) use release::{extend_all, forced, give_back, release, why_gone};
pub(crate) use renew::{Renewed, renew};
pub(crate) use settle::{settle_due, settle_now};
pub(crate) use spin::{Backoff, spin};
pub(crate) use watch::{Look, watch};

/// What one kind of lock does in Redis. The engine calls these inside its retry policy, so
/// each must be idempotent: a call whose reply was lost runs again.
pub(crate) trait Kind {
    /// The object's keys and channel (all in one slot).
    fn keys(&self) -> &Arc<LockKeys>;

    /// Takes or re-enters the object for `owner` (who holds `held`: its guard count and
    /// token, if it holds it already), setting `lease`; if another owner holds it, answers
    /// how long for, and queues `owner` as `queueing` says.
    fn attempt(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        held: Option<(u32, u64)>,
        lease: Duration,
        queueing: &Queueing,
    ) -> RedisResult<Acquire>;

    /// Takes `owner` out of the queue (where the wait's last attempt, as `queueing`, left
    /// it); `Some(token)` if the object had been handed to it, which then holds it with at
    /// least `lease`.
    fn withdraw(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        lease: Duration,
        queueing: &Queueing,
    ) -> RedisResult<Option<u64>>;

    /// Whether `owner` may hold the object now, for a settlement ([`doubt`]) to take up and
    /// give back: `false` only when it surely does not, so that a settlement never takes a
    /// free object (and hands it to a waiter) on its own account. A kind that cannot tell
    /// cheaply answers `true`: its take-up attempt then finds out, taking free capacity only
    /// to give it back at once.
    fn may_hold(&self, _con: &mut dyn ConnectionLike, _owner: &str) -> RedisResult<bool> {
        Ok(true)
    }

    /// The same scripts on their own, holding nothing that keeps the client's threads alive:
    /// what the renewal thread keeps to settle an attempt whose reply was lost
    /// ([`doubt`]).
    fn detached(&self) -> Arc<dyn Kind + Send + Sync>;

    /// Releases one of `owner`'s guards of the hold taken with `token`, as `how` says; the
    /// last one frees the object and grants it as the kind grants (see the module docs).
    fn release(
        &self,
        con: &mut dyn ConnectionLike,
        owner: &str,
        token: u64,
        how: Releasing,
        freeing: Freeing,
    ) -> RedisResult<Release>;
}

/// Runs one of a kind's other scripts (a read of the object's state, a force-unlock) under
/// the retry policy, so that kinds never reach the transport: `op` gets a connection and
/// what a script that frees the object must know of the deployment. A refusal of foreign
/// data is [`Error::WrongType`](crate::Error::WrongType) naming the key. `op` must be
/// idempotent: it may run again after a lost reply.
pub(crate) fn call<T>(
    core: &Core,
    keys: &LockKeys,
    mut op: impl FnMut(&mut dyn ConnectionLike, Freeing) -> RedisResult<T>,
) -> Result<T> {
    let freeing = freeing(core);
    core.backend
        .run(|con| op(con, freeing))
        .map_err(|e| scripts::failure(keys, e))
}

/// Counts `n` holds a composite kind took with one attempt of its own (`acquire_many.lua`),
/// which [`acquire()`] did not see: each member is an acquisition, at once.
pub(crate) fn count_taken_at_once(core: &Core, n: usize, took: std::time::Duration) {
    for _ in 0..n {
        core.counters
            .acquisition(crate::stats::Outcome::AtOnce, took);
    }
}

/// What a script that frees or grants an object must know of this client's deployment.
pub(crate) fn freeing(core: &Core) -> Freeing {
    Freeing::of(&core.backend, core.fence_retention)
}

/// Checks the name of an object of `family` for this client's deployment (see
/// `keys::check_name`); a refusal names the kind.
pub(crate) fn check_name(core: &Core, family: Family, name: &str) -> Result<()> {
    crate::keys::check_name(family.noun(), name, core.backend.is_cluster())
}

/// The indices of `slots` in groups that may each go in one script call: one group per slot
/// on a Cluster, one of all elsewhere (`Backend::group_by_slot`).
pub(crate) fn group_by_slot(core: &Core, slots: impl IntoIterator<Item = u16>) -> Vec<Vec<usize>> {
    core.backend.group_by_slot(slots)
}
