//! Our own layout's [`Dialect`]: the scripts of `lua/` (each family's calls are in its own
//! file: [`lock`](super::lock), [`shares`](super::shares), [`read_write`](super::read_write),
//! [`latch`](super::latch), [`counting`](super::counting)), our messages
//! ([`Message::parse`]), and releases that hand the object over in Redis.

use super::shares;
use super::{Dialect, Message, Release, Releasing, counting, latch, lock, read_write};
use crate::keys::{Family, LockKeys};

/// Our own layout: keys under the client's prefix, a fair hand-over queue, fencing tokens on
/// every kind.
pub(crate) static OURS: Dialect = Dialect {
    acquire: lock::acquire,
    acquire_many: lock::acquire_many,
    withdraw: lock::withdraw,
    release: lock::release,
    force_unlock: lock::force_unlock,
    was_forced: lock::was_forced,
    // With the release script of `keys`'s family, told that the hold is a hand-over nobody
    // took up: it acts only while Redis still records it so.
    give_back: |con, keys, owner, token, lease, freeing| {
        let how = Releasing::given_back(lease);
        match keys.family {
            Family::Lock => lock::release(con, keys, owner, token, how, freeing),
            Family::ReadWrite | Family::Semaphore => {
                shares::release(con, keys, owner, token, how, freeing)
            }
            // A latch or a counting semaphore grants nothing, so nothing is handed to an
            // owner that no longer waits.
            Family::Latch | Family::Counting => Ok(Release::NotOurs),
        }
    },
    renewal: |batch, lease, fence_retention| match batch.first().map(|r| r.keys.family) {
        // A holder's token is kept in its field, not checked against the fence.
        Some(Family::ReadWrite | Family::Semaphore) => shares::renewal(batch, lease),
        // Nothing of a latch or a counting semaphore is held, so nothing of it is ever
        // registered for renewal; were it, the lock's script would find no hold of it and
        // answer "not ours".
        Some(Family::Lock | Family::Latch | Family::Counting) | None => {
            lock::renewal(batch, lease, fence_retention)
        }
    },
    extend: |con, keys, owner, token, lease, freeing| match keys.family {
        Family::Lock => lock::extend(con, keys, owner, token, lease, freeing.fence_retention),
        Family::ReadWrite | Family::Semaphore => shares::extend(con, keys, owner, token, lease),
        // Nothing of a latch or a counting semaphore is held under a lease.
        Family::Latch | Family::Counting => Ok(false),
    },
    share_acquire: shares::acquire,
    share_withdraw: shares::withdraw,
    share_release: shares::release,
    rw_inspect: read_write::inspect,
    rw_force_unlock: read_write::force_unlock,
    // An owner id of its own: the permits are counted in its field.
    permits_owner: |_, fresh| Ok(fresh()),
    set_permits: shares::set_permits,
    try_set_permits: shares::try_set_permits,
    add_permits: shares::add_permits,
    available: |con, keys, _| shares::available(con, keys),
    count: |con, keys, which, _| shares::count(con, keys, which),
    semaphore_force_unlock: shares::force_unlock,
    latch_set: latch::set_count,
    latch_count_down: latch::count_down,
    latch_delete: latch::delete,
    // A release and `add_permits` are one script here (Redisson's differ).
    counting: counting::Scripts {
        marker: LockKeys::request_marker,
        release_script: &counting::ADD,
        add_script: &counting::ADD,
        try_set_script: &counting::TRY_SET,
        drain_script: &counting::DRAIN,
    },
    message: |_, payload| Message::parse(payload),
    // Never: a release hands the object to the oldest waiter in the fleet, in its script.
    hands_over_in_client: |_| false,
    // A lock's attempt does (`acquire.lua`); a kind with shares names a place by its owner.
    queues_by_place: |keys| keys.family == Family::Lock,
    // Never: a release hands the object over in its script.
    release_wakes_racers: false,
};
