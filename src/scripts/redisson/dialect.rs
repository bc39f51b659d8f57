//! Redisson's layout as a [`Dialect`]: which of `lua/redisson/` each call runs, how its
//! channels' integers read, and the one hand-over it has, within a client.

use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::super::read_write::RwInspection;
use super::super::shares::{self, Need};
use super::super::{
    Acquire, AcquireMany, Count, Dialect, Freeing, Invocation, Leftover, Message, Queueing,
    Release, Releasing, Renewal, counting,
};
use super::{Wakes, counting as scripts, latch, read_write, semaphore};
use crate::error::{Error, Result};
use crate::keys::{Family, LockKeys};
use crate::words::Count as Shown;

/// Redisson 4.x's layout: its keys, fields, channels and messages. No queue but a fair
/// lock's (a kind of its own, `kinds::fair`, which calls its scripts itself), no
/// hand-over in Redis: a release publishes a wake-up, and waiters attempt again.
pub(crate) struct Redisson;

impl Dialect for Redisson {
    /// Queues nothing: `queueing` and `fence_retention` have no part here.
    fn acquire(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        hold: Option<(u32, u64)>,
        lease: Duration,
        _queueing: &Queueing,
        _fence_retention: Duration,
    ) -> RedisResult<Acquire> {
        super::acquire(con, keys, owner, hold, lease)
    }

    /// Redisson's locks keep no queue, so no wait leaves a place in one: `leftovers` is
    /// empty.
    fn acquire_many(
        &self,
        con: &mut dyn ConnectionLike,
        locks: &[&LockKeys],
        owner: &str,
        lease: Duration,
        _fence_retention: Duration,
        _leftovers: &[Vec<Leftover>],
    ) -> RedisResult<AcquireMany> {
        super::acquire_many(con, locks, owner, lease)
    }

    /// Redisson's lock keeps no queue: a waiter that gives up has nothing to leave.
    fn withdraw(
        &self,
        _con: &mut dyn ConnectionLike,
        _keys: &LockKeys,
        _owner: &str,
        _lease: Duration,
        _queueing: &Queueing,
        _fence_retention: Duration,
    ) -> RedisResult<Option<u64>> {
        Ok(None)
    }

    fn release(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        token: u64,
        how: Releasing,
        freeing: Freeing,
    ) -> RedisResult<Release> {
        super::release(con, keys, owner, token, how, freeing)
    }

    fn force_unlock(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        super::force_unlock(con, keys, request, freeing)
    }

    /// Redisson's layout keeps no mark of a force-unlock.
    fn was_forced(
        &self,
        _con: &mut dyn ConnectionLike,
        _keys: &LockKeys,
        _token: u64,
    ) -> RedisResult<bool> {
        Ok(false)
    }

    /// Only a lock's in-client hand-over (`redisson/transfer.lua`) hands anything over in
    /// this layout: it leaves the owner's field at one hold, which its release takes away.
    fn give_back(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        token: u64,
        lease: Duration,
        freeing: Freeing,
    ) -> RedisResult<Release> {
        let how = Releasing {
            holds: 1,
            taken_by: None,
            lease,
        };
        match keys.family {
            Family::Lock => super::release(con, keys, owner, token, how, freeing),
            _ => Ok(Release::NotOurs),
        }
    }

    fn renewal<'a>(
        &self,
        batch: &[Renewal<'_>],
        lease: Duration,
        _fence_retention: Duration,
    ) -> Invocation<'a> {
        match batch.first().map(|r| r.keys.family) {
            Some(Family::ReadWrite) => read_write::renewal(batch, lease),
            Some(Family::Semaphore) => semaphore::renewal(batch, lease),
            // Nothing of a latch or a counting semaphore is held, so nothing of it is ever
            // registered for renewal; were it, the lock's script would find no hold of it
            // and answer "not ours".
            Some(Family::Lock | Family::Latch | Family::Counting) | None => {
                super::renewal(batch, lease)
            }
        }
    }

    fn extend(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        token: u64,
        lease: Duration,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        match keys.family {
            Family::Lock => super::extend(con, keys, owner, token, lease),
            Family::ReadWrite => read_write::extend(con, keys, owner, token, lease),
            Family::Semaphore => semaphore::extend(con, keys, owner, lease, freeing.publish),
            // Nothing of a latch or a counting semaphore is held under a lease.
            Family::Latch | Family::Counting => Ok(false),
        }
    }

    /// Queues nothing; a read takes `writer` whether or not the thread writes in this
    /// client (Java's read script finds out itself).
    fn share_acquire(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        held: Option<(u32, u64)>,
        lease: Duration,
        _queueing: &Queueing,
        need: Need<'_>,
        freeing: Freeing,
    ) -> RedisResult<Acquire> {
        match need {
            Need::Read { writer, .. } => {
                read_write::acquire(con, keys, owner, held, lease, Some(writer))
            }
            Need::Write => read_write::acquire(con, keys, owner, held, lease, None),
            Need::Permits(_) => semaphore::acquire(con, keys, owner, lease, freeing),
        }
    }

    /// Redisson's layout keeps no queue: a waiter that gives up has nothing to leave.
    fn share_withdraw(
        &self,
        _con: &mut dyn ConnectionLike,
        _keys: &LockKeys,
        _owner: &str,
        _lease: Duration,
        _freeing: Freeing,
    ) -> RedisResult<Option<u64>> {
        Ok(None)
    }

    fn share_release(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        owner: &str,
        token: u64,
        how: Releasing,
        freeing: Freeing,
    ) -> RedisResult<Release> {
        match keys.family {
            Family::Semaphore => semaphore::release(con, keys, owner, freeing),
            _ => read_write::release(con, keys, owner, token, how, freeing),
        }
    }

    fn rw_inspect(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
    ) -> RedisResult<RwInspection> {
        read_write::inspect(con, keys)
    }

    fn rw_force_unlock(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        read_write::force_unlock(con, keys, request, freeing)
    }

    /// The acquisition's permit ids ([`semaphore::owner`]): Redisson keeps an id per permit,
    /// so at most [`semaphore::MAX_PERMITS`] of them.
    fn permits_owner(&self, n: u32, _fresh: &dyn Fn() -> Arc<str>) -> Result<Arc<str>> {
        if n > semaphore::MAX_PERMITS {
            return Err(Error::invalid(format!(
                "{n} permits in one acquisition: Layout::Redisson keeps an id per permit \
                 and allows at most {}",
                Shown(semaphore::MAX_PERMITS)
            )));
        }
        Ok(semaphore::owner(n))
    }

    fn set_permits(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        total: u32,
        freeing: Freeing,
    ) -> RedisResult<()> {
        semaphore::set_permits(con, keys, total, freeing)
    }

    fn try_set_permits(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        total: u32,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        semaphore::try_set_permits(con, keys, total, freeing)
    }

    fn add_permits(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        delta: i64,
        freeing: Freeing,
    ) -> RedisResult<std::result::Result<u32, i64>> {
        let (done, total) = semaphore::add_permits(con, keys, delta, freeing)?;
        Ok(shares::moved(done, total))
    }

    /// Once the permits whose lease ended are given back, which publishes the new count.
    fn available(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        freeing: Freeing,
    ) -> RedisResult<u32> {
        semaphore::available(con, keys, freeing)
    }

    /// Once the permits whose lease ended are given back, which publishes the new count.
    fn count(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        which: Count,
        freeing: Freeing,
    ) -> RedisResult<u32> {
        Ok(shares::clamped(semaphore::count(
            con, keys, which, freeing,
        )?))
    }

    /// Puts every permit back and publishes the new count.
    fn semaphore_force_unlock(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        semaphore::force_unlock(con, keys, request, freeing)
    }

    fn latch_set(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        n: u64,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        latch::set_count(con, keys, n, request, freeing)
    }

    fn latch_count_down(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<u64> {
        latch::count_down(con, keys, request, freeing)
    }

    fn latch_delete(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        latch::delete(con, keys, request, freeing)
    }

    /// Our own script, with the marker under Redisson's unlock-latch prefix.
    fn counting_acquire(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        n: u32,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        counting::acquire(con, keys, &keys.unlock_latch(request), n, freeing)
    }

    /// A release is Java's `release`, anything else Java's `addPermits`.
    fn counting_add(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        delta: i64,
        release: bool,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<std::result::Result<i64, i64>> {
        let script = if release {
            &scripts::RELEASE
        } else {
            &scripts::ADD
        };
        let marker = keys.unlock_latch(request);
        counting::add(con, script, keys, &marker, delta, freeing)
    }

    fn counting_try_set(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        n: u32,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<bool> {
        let marker = keys.unlock_latch(request);
        counting::try_set(con, &scripts::TRY_SET, keys, &marker, n, freeing)
    }

    fn counting_drain(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        request: &str,
        freeing: Freeing,
    ) -> RedisResult<i64> {
        let marker = keys.unlock_latch(request);
        counting::drain(con, &scripts::DRAIN, keys, &marker, freeing)
    }

    /// An integer, as Java reads it ([`Wakes`]): a wake-up of one waiter asks what our
    /// `unlock` asks, a wake-up of all what our `force` asks. Never a hand-over.
    fn message<'a>(&self, family: Option<Family>, payload: &'a [u8]) -> Option<Message<'a>> {
        match Wakes::parse(family?, payload)? {
            Wakes::One => Some(Message::Unlock),
            Wakes::All => Some(Message::Force),
        }
    }

    /// A plain lock's: its release only wakes waiters, one per client, who race; a fair
    /// lock keeps Redisson's queue, and the other kinds let their waiters race.
    fn hands_over_in_client(&self, keys: &LockKeys) -> bool {
        keys.family == Family::Lock && !keys.fair
    }

    /// No place is named by its terms here: a fair lock's waiter is named by its owner,
    /// which its next attempt finds.
    fn queues_by_place(&self, _keys: &LockKeys) -> bool {
        false
    }

    fn release_wakes_racers(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts::ours::Ours;

    /// The subscriber wakes waiters by what [`Dialect::message`] answers, with no branch of
    /// its own for Redisson: a wake-up of one must read as `unlock` does, of all as `force`
    /// does, and nothing of Redisson's may read as a grant, nor anything of ours.
    #[test]
    fn redissons_wake_ups_read_as_ours_and_never_grant() {
        let lock = Some(Family::Lock);
        assert_eq!(Redisson.message(lock, b"0"), Some(Message::Unlock));
        assert_eq!(Redisson.message(lock, b"1"), Some(Message::Force));
        let counting = Some(Family::Counting);
        assert_eq!(Redisson.message(counting, b"3"), Some(Message::Force));
        assert_eq!(Redisson.message(counting, b"0"), None);
        // No waiter of this client there: nothing to wake.
        assert_eq!(Redisson.message(None, b"0"), None);
        for ours in [
            &b"unlock"[..],
            b"force",
            b"grant 42 30000 c0ffee:7",
            b"free 3",
        ] {
            assert_eq!(Redisson.message(lock, ours), None, "{ours:?}");
        }
        // Ours reads its own text, whatever the family, and none of Redisson's.
        assert_eq!(Ours.message(None, b"unlock"), Some(Message::Unlock));
        assert_eq!(Ours.message(lock, b"0"), None);
    }
}
