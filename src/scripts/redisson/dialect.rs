//! Redisson's layout as a [`Dialect`]: which of `lua/redisson/` each call runs, how its
//! channels' integers read, and the one hand-over it has, within a client.

use std::sync::Arc;

use super::super::shares::{self, Need};
use super::super::{Dialect, Message, Release, Releasing, counting};
use super::{Wakes, counting as scripts, latch, read_write, semaphore};
use crate::error::{Error, Result};
use crate::keys::{Family, LockKeys};
use crate::words::Count as Shown;

/// Redisson 4.x's layout: its keys, fields, channels and messages. No queue but a fair
/// lock's (a kind of its own, `kinds::fair`, which calls its scripts itself), no
/// hand-over in Redis: a release publishes a wake-up, and waiters attempt again.
pub(crate) static REDISSON: Dialect = Dialect {
    // Queues nothing: the queueing and the fence retention have no part here.
    acquire: |con, keys, owner, hold, lease, _, _| super::acquire(con, keys, owner, hold, lease),
    // Redisson's locks keep no queue, so no wait leaves a place in one: the leftovers are
    // empty.
    acquire_many: |con, locks, owner, lease, _, _| super::acquire_many(con, locks, owner, lease),
    // Redisson's lock keeps no queue: a waiter that gives up has nothing to leave.
    withdraw: |_, _, _, _, _, _| Ok(None),
    release: super::release,
    force_unlock: super::force_unlock,
    // Redisson's layout keeps no mark of a force-unlock.
    was_forced: |_, _, _| Ok(false),
    // Only a lock's in-client hand-over (`redisson/transfer.lua`) hands anything over in
    // this layout: it leaves the owner's field at one hold, which its release takes away.
    give_back: |con, keys, owner, token, lease, freeing| match keys.family {
        Family::Lock => {
            let how = Releasing::given_back(lease);
            super::release(con, keys, owner, token, how, freeing)
        }
        _ => Ok(Release::NotOurs),
    },
    renewal: |batch, lease, _| match batch.first().map(|r| r.keys.family) {
        Some(Family::ReadWrite) => read_write::renewal(batch, lease),
        Some(Family::Semaphore) => semaphore::renewal(batch, lease),
        // Nothing of a latch or a counting semaphore is held, so nothing of it is ever
        // registered for renewal; were it, the lock's script would find no hold of it and
        // answer "not ours".
        Some(Family::Lock | Family::Latch | Family::Counting) | None => {
            super::renewal(batch, lease)
        }
    },
    extend: |con, keys, owner, token, lease, freeing| match keys.family {
        Family::Lock => super::extend(con, keys, owner, token, lease),
        Family::ReadWrite => read_write::extend(con, keys, owner, token, lease),
        Family::Semaphore => semaphore::extend(con, keys, owner, lease, freeing.publish),
        // Nothing of a latch or a counting semaphore is held under a lease.
        Family::Latch | Family::Counting => Ok(false),
    },
    // Queues nothing; a read takes `writer` whether or not the thread writes in this
    // client (Java's read script finds out itself).
    share_acquire: |con, keys, owner, held, lease, _, need, freeing| match need {
        Need::Read { writer, .. } => {
            read_write::acquire(con, keys, owner, held, lease, Some(writer))
        }
        Need::Write => read_write::acquire(con, keys, owner, held, lease, None),
        Need::Permits(_) => semaphore::acquire(con, keys, owner, lease, freeing),
    },
    // Redisson's layout keeps no queue: a waiter that gives up has nothing to leave.
    share_withdraw: |_, _, _, _, _| Ok(None),
    share_release: |con, keys, owner, token, how, freeing| match keys.family {
        Family::Semaphore => semaphore::release(con, keys, owner, freeing),
        _ => read_write::release(con, keys, owner, token, how, freeing),
    },
    rw_inspect: read_write::inspect,
    rw_force_unlock: read_write::force_unlock,
    permits_owner: |n, _| permits_owner(n),
    set_permits: semaphore::set_permits,
    try_set_permits: semaphore::try_set_permits,
    add_permits: |con, keys, delta, freeing| {
        let (done, total) = semaphore::add_permits(con, keys, delta, freeing)?;
        Ok(shares::moved(done, total))
    },
    // Once the permits whose lease ended are given back, which publishes the new count.
    available: semaphore::available,
    // Likewise.
    count: |con, keys, which, freeing| {
        Ok(shares::clamped(semaphore::count(
            con, keys, which, freeing,
        )?))
    },
    // Puts every permit back and publishes the new count.
    semaphore_force_unlock: semaphore::force_unlock,
    latch_set: latch::set_count,
    latch_count_down: latch::count_down,
    latch_delete: latch::delete,
    // Our own script takes permits, with the marker under Redisson's unlock-latch prefix; a
    // release is Java's `release`, `add_permits` Java's `addPermits`.
    counting: counting::Scripts {
        marker: LockKeys::unlock_latch,
        release_script: &scripts::RELEASE,
        add_script: &scripts::ADD,
        try_set_script: &scripts::TRY_SET,
        drain_script: &scripts::DRAIN,
    },
    // An integer, as Java reads it ([`Wakes`]): a wake-up of one waiter asks what our
    // `unlock` asks, a wake-up of all what our `force` asks. Never a hand-over.
    message: |family, payload| match Wakes::parse(family?, payload)? {
        Wakes::One => Some(Message::Unlock),
        Wakes::All => Some(Message::Force),
    },
    // A plain lock's: its release only wakes waiters, one per client, who race; a fair lock
    // keeps Redisson's queue, and the other kinds let their waiters race.
    hands_over_in_client: |keys| keys.family == Family::Lock && !keys.fair,
    // No place is named by its terms here: a fair lock's waiter is named by its owner,
    // which its next attempt finds.
    queues_by_place: |_| false,
    release_wakes_racers: true,
};

/// The acquisition's permit ids ([`semaphore::owner`]): Redisson keeps an id per permit, so
/// at most [`semaphore::MAX_PERMITS`] of them.
fn permits_owner(n: u32) -> Result<Arc<str>> {
    if n > semaphore::MAX_PERMITS {
        return Err(Error::invalid(format!(
            "{n} permits in one acquisition: Layout::Redisson keeps an id per permit and \
             allows at most {}",
            Shown(semaphore::MAX_PERMITS)
        )));
    }
    Ok(semaphore::owner(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scripts::ours::OURS;

    /// The subscriber wakes waiters by what [`Dialect::message`] answers, with no branch of
    /// its own for Redisson: a wake-up of one must read as `unlock` does, of all as `force`
    /// does, and nothing of Redisson's may read as a grant, nor anything of ours.
    #[test]
    fn redissons_wake_ups_read_as_ours_and_never_grant() {
        let lock = Some(Family::Lock);
        assert_eq!((REDISSON.message)(lock, b"0"), Some(Message::Unlock));
        assert_eq!((REDISSON.message)(lock, b"1"), Some(Message::Force));
        let counting = Some(Family::Counting);
        assert_eq!((REDISSON.message)(counting, b"3"), Some(Message::Force));
        assert_eq!((REDISSON.message)(counting, b"0"), None);
        // No waiter of this client there: nothing to wake.
        assert_eq!((REDISSON.message)(None, b"0"), None);
        for ours in [
            &b"unlock"[..],
            b"force",
            b"grant 42 30000 c0ffee:7",
            b"free 3",
        ] {
            assert_eq!((REDISSON.message)(lock, ours), None, "{ours:?}");
        }
        // Ours reads its own text, whatever the family, and none of Redisson's.
        assert_eq!((OURS.message)(None, b"unlock"), Some(Message::Unlock));
        assert_eq!((OURS.message)(lock, b"0"), None);
    }
}
