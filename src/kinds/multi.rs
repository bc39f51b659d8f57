//! [`MultiLock`]: several named locks taken all or none, with one wait and one lease.

use std::time::{Duration, Instant};

use crate::client::Client;
use crate::engine::{self, Acquired, Hold, Kind, Terms, deadline_after, validate_duration};
use crate::error::{Error, Result};
use crate::kinds::lock::{Lock, LockGuard};
use crate::kinds::{check_composite, drop_lost};
use crate::scripts::{AcquireMany, Queueing, TakenBy};

/// Several locks taken together, made by [`Client::multi_lock`].
///
/// A [`MultiLockGuard`] holds every one of them, or the call returns without holding any.
/// Each member is an ordinary lock: single-lock users of the same names wait for it and are
/// waited for, members are renewed by the watchdog like any lock, and each has its own
/// fencing token.
///
/// # How it waits, and why it cannot deadlock
/// An attempt takes every free member in one script call, or none. When a member is busy, the
/// thread waits for that member as a [`Lock`] would (queued, handed over on release) and then
/// tries the rest again, keeping only the members that come *before* the one it waits for in
/// name order. Every thread waits for locks in that one order, so two multi-locks over
/// overlapping names, asked for in whatever order, cannot wait for each other.
///
/// In [`Layout::Redisson`](crate::Layout::Redisson) its members are Redisson's locks (RLock
/// hashes), as Java's `getMultiLock(getLock(a), getLock(b))`, taken all or none in one call.
///
/// ```no_run
/// # fn main() -> redlatch::Result<()> {
/// use std::time::Duration;
/// let client = redlatch::Client::open("redis://127.0.0.1/")?;
/// let transfer = client.multi_lock(&["account:17", "account:4"]);
/// if let Some(guard) = transfer.try_lock(Duration::from_secs(2), None)? {
///     println!("both held, tokens {:?}", guard.fencing_tokens());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MultiLock {
    /// In name order.
    locks: Vec<Lock>,
    /// A name given twice, refused when the handle is used.
    repeated: Option<String>,
}

impl Client {
    /// A handle on the locks called `names`, to take all at once. No I/O; the names are
    /// checked when it is used: a name given twice (or two that the
    /// [name mapper](crate::ClientBuilder::name_mapper) makes one) fails every call with
    /// [`Error::InvalidArgument`] naming it, since the caller meant two locks and would hold
    /// one.
    pub fn multi_lock(&self, names: &[&str]) -> MultiLock {
        let mut locks: Vec<Lock> = names.iter().map(|name| self.lock(name)).collect();
        locks.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        let mut keys = std::collections::HashSet::new();
        let repeated = locks
            .iter()
            .find(|l| !keys.insert(l.keys().lock().to_string()))
            .map(|l| l.name().to_string());
        MultiLock { locks, repeated }
    }
}

impl MultiLock {
    /// The same handle, whose waits end with
    /// [`Error::Cancelled`](crate::Error::Cancelled) once `cancel` is cancelled (at once if it
    /// already is): the member waited for is left in Redis and nothing is held. See [`Cancel`](crate::Cancel).
    pub fn cancel_on(&self, cancel: &crate::Cancel) -> MultiLock {
        MultiLock {
            locks: self.locks.iter().map(|l| l.cancel_on(cancel)).collect(),
            repeated: self.repeated.clone(),
        }
    }

    /// The members' names, in the order they are taken.
    pub fn names(&self) -> Vec<&str> {
        self.locks.iter().map(Lock::name).collect()
    }

    /// Waits as long as it takes, then holds every member with the watchdog.
    pub fn lock(&self) -> Result<MultiLockGuard> {
        self.acquire(None, None)
            .map(|g| g.expect("an unbounded wait only ends with the locks"))
    }

    /// Waits at most `wait` for all the members; `Ok(None)` if they were not all free in time,
    /// and then none is held. `lease` as for [`Lock::try_lock`], for every member.
    pub fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<MultiLockGuard>> {
        validate_duration("wait", wait, Duration::ZERO)?;
        self.acquire(Some(wait), lease)
    }

    fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<MultiLockGuard>> {
        check_composite(&self.locks, lease, "multi-lock")?;
        if let Some(name) = &self.repeated {
            return Err(Error::invalid(format!(
                "a multi-lock of lock {name:?} twice: give each lock once (it would hold one \
                 lock where two were meant)"
            )));
        }
        let first = &self.locks[0];
        let core = first.core();
        // A cancelled handle takes nothing, even members that are free. Counted here, once:
        // a wait cancelled later is counted by the one member's wait it ends.
        if first.cancelled_by().is_some_and(|c| c.is_cancelled()) {
            core.counters
                .acquisition(crate::stats::Outcome::Cancelled, Duration::ZERO);
            return Err(Error::Cancelled {
                name: self.names().join(", "),
            });
        }
        let deadline = deadline_after(wait);
        let terms = first.terms(lease);
        let mut held: Vec<Option<LockGuard>> = self.locks.iter().map(|_| None).collect();
        loop {
            // A member kept while waiting for a later one may have been lost meanwhile (its
            // fixed lease ran out, or it was taken): it is not held, so take it again, in order.
            drop_lost(&mut held);
            let missing: Vec<usize> = (0..held.len()).filter(|&i| held[i].is_none()).collect();
            let mut busy = None;
            let mut last: (&[usize], Instant) = (&[], Instant::now());
            let groups =
                engine::group_by_slot(core, missing.iter().map(|&i| self.locks[i].keys().slot()));
            let groups: Vec<Vec<usize>> = groups
                .into_iter()
                .map(|g| g.into_iter().map(|j| missing[j]).collect())
                .collect();
            for group in &groups {
                let sent = Instant::now();
                match self.attempt_all(group, terms, &mut held)? {
                    None => last = (group, sent),
                    Some(index) => {
                        busy = Some(group[index]);
                        break;
                    }
                }
            }
            let Some(busy) = busy else {
                // With a fixed lease, the members taken before the last call (while others
                // were awaited, or in an earlier slot's call) get theirs again, so that all
                // of them end together.
                let (last_group, _) = last;
                if lease.is_some() {
                    let holds: Vec<&Hold> = held
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| !last_group.contains(i))
                        .filter_map(|(_, g)| g.as_ref().map(|g| &**g.hold()))
                        .collect();
                    if !holds.is_empty()
                        && !engine::extend_all(core, &holds, terms.lease_set())?
                            .into_iter()
                            .all(|ours| ours)
                    {
                        // Its lease ran out while we waited for the others: we do not hold
                        // them all. The top of the loop takes the lost ones again.
                        continue;
                    }
                }
                return Ok(Some(MultiLockGuard {
                    guards: held.into_iter().flatten().collect(),
                }));
            };
            // Keep only what comes before the lock we wait for: the order that prevents
            // deadlocks. Dropping a guard releases it.
            for guard in &mut held[busy + 1..] {
                drop(guard.take());
            }
            let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if remaining.is_some_and(|r| r.is_zero()) {
                return Ok(None);
            }
            match self.locks[busy].acquire(remaining, lease)? {
                Some(guard) => held[busy] = Some(guard),
                None => return Ok(None), // out of time; `held` is released
            }
        }
    }

    /// One attempt at the members `group` (indices, all in one slot), in one script call
    /// (`acquire_many.lua`): every one of them taken into `held`, and `None`; or none taken,
    /// and the position in `group` of the first busy one.
    fn attempt_all(
        &self,
        group: &[usize],
        terms: Terms,
        held: &mut [Option<LockGuard>],
    ) -> Result<Option<usize>> {
        let core = self.locks[0].core();
        let lease = terms.lease_set();
        let owner = core.thread_owner();
        let keys: Vec<_> = group.iter().map(|&i| &**self.locks[i].keys()).collect();
        let lock_keys: Vec<&str> = keys.iter().map(|k| k.lock()).collect();
        // This call takes up whatever a lost one of the thread's took (`engine::doubt`).
        for key in &lock_keys {
            core.doubts.forget(key, &owner);
        }
        let sent = Instant::now();
        // Failed waits of this thread for a member may have left places in its queue: the
        // call voids them, as the lock's own attempt does.
        let reply = core.leftovers.voiding(&lock_keys, &owner, |places| {
            engine::acquisition(
                core,
                |con| {
                    let retention = core.fence_retention;
                    let dialect = core.dialect;
                    (dialect.acquire_many)(con, &keys, &owner, lease, retention, places)
                },
                |reply| matches!(reply, AcquireMany::Acquired(_)),
            )
        });
        let (reply, acknowledged) = reply.inspect_err(|e| {
            // It may still run, and take every member: each is settled on its own.
            for &i in group {
                engine::in_doubt(core, &self.locks[i], &owner, lease, &Queueing::NONE, e);
            }
        })?;
        let tokens = match reply {
            AcquireMany::Acquired(tokens) => tokens,
            AcquireMany::Busy { index, .. } => return Ok(Some(index)),
            AcquireMany::Foreign { index, fence } => {
                let keys = self.locks[group[index]].keys();
                let key = if fence { keys.fence() } else { keys.lock() };
                return Err(Error::WrongType {
                    key: key.to_string(),
                }); // `held` is released
            }
        };
        engine::count_taken_at_once(core, group.len(), sent.elapsed());
        // Guards first: any failure below releases what was just taken.
        for (&i, token) in group.iter().zip(tokens) {
            let lock = &self.locks[i];
            let hold = engine::register(core, lock.keys(), owner.clone(), token, TakenBy::Attempt);
            hold.extend(sent, lease, terms.renew_every());
            held[i] = Some(lock.guard(Acquired { hold }));
        }
        match (acknowledged, core.replicas) {
            (Some(acknowledged), Some(replicas)) if acknowledged < replicas.count => {
                // Not safe against a failover, as asked: the caller drops everything.
                Err(Error::NotReplicated {
                    name: self.locks[group[0]].name().to_string(),
                    acknowledged,
                    wanted: replicas.count,
                })
            }
            _ => Ok(None),
        }
    }
}

/// Proof of holding every lock of a [`MultiLock`]; dropping it releases them all.
///
/// Not `Send`, like [`LockGuard`]: the locks belong to the thread that took them.
#[derive(Debug)]
#[must_use = "dropping the guard releases the locks at once"]
pub struct MultiLockGuard {
    /// In name order.
    guards: Vec<LockGuard>,
}

impl MultiLockGuard {
    /// Releases every lock. `Err(Error::LockLost)` if any of them was no longer ours (the
    /// others are released all the same); the first other error otherwise.
    pub fn unlock(self) -> Result<()> {
        let mut outcome = Ok(());
        for guard in self.guards {
            let released = guard.unlock();
            outcome = match (outcome, released) {
                (Err(e @ Error::LockLost { .. }), _) => Err(e),
                (_, Err(e @ Error::LockLost { .. })) => Err(e),
                (Err(e), _) | (Ok(()), Err(e)) => Err(e),
                (Ok(()), Ok(())) => Ok(()),
            };
        }
        outcome
    }

    /// Whether any of the locks is known to be lost (see [`LockGuard::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// The shortest [`remaining_lease`](LockGuard::remaining_lease) of the members: how long
    /// all of them are known to be held, with no round trip.
    pub fn remaining_lease(&self) -> Duration {
        self.guards
            .iter()
            .map(LockGuard::remaining_lease)
            .min()
            .unwrap_or(Duration::ZERO)
    }

    /// `Err(Error::LockLost)` naming the first lock lost, if any.
    pub fn check(&self) -> Result<()> {
        self.guards.iter().try_for_each(LockGuard::check)
    }

    /// The fencing token of each lock, in name order ([`MultiLock::names`]).
    pub fn fencing_tokens(&self) -> Vec<u64> {
        self.guards.iter().map(LockGuard::fencing_token).collect()
    }

    /// The guards of the single locks, in name order.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }
}
