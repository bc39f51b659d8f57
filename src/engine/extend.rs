//! Giving a hold under a fixed lease a new lease from now (the guards' `extend`): in Redis,
//! only while the hold is still there, and in the client's registry, so that the lease
//! deadline, the lost signal and the renewal thread's expiry notice follow it.

use std::time::{Duration, Instant};

use super::hold::Hold;
use super::lease::validate_lease;
use super::release::{lost, why_gone};
use crate::core::Core;
use crate::error::{Error, Result};
use crate::lost::LossCause;
use crate::scripts;

/// Sets `hold`'s lease to end `lease` from now (set, not added: it may shorten it).
/// `Err(Error::InvalidArgument)` for a lease out of range or a hold the watchdog renews (its
/// lease is the watchdog's to set); `Err(Error::LockLost)` when the hold is gone, which this
/// never revives (the scripts write only while the hold is there); `Err(Error::Redis)` when
/// Redis could not be reached, and then the old lease stands as far as this client knows.
pub(crate) fn extend(core: &Core, hold: &Hold, lease: Duration) -> Result<()> {
    validate_lease(Some(lease))?;
    if hold.is_watchdog() {
        return Err(Error::invalid(format!(
            "{:?} is renewed by the watchdog: only a hold taken with a fixed lease can be \
             given a new one",
            hold.keys.name()
        )));
    }
    // Known lost: Redis may still have it (a lease this client thought ended, by its own
    // clock), but the holder was told it is gone, and must not be told otherwise now.
    if hold.is_lost() {
        return Err(lost(&hold.keys));
    }
    // Redis keeps whole milliseconds, and the deadline this client keeps must not outlast
    // what Redis keeps.
    let lease = Duration::from_millis(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX));
    let freeing = super::freeing(core);
    let keys = &hold.keys;
    // Sent before the first attempt: Redis counts the lease from a later moment, so the
    // deadline this client keeps never outlasts Redis's.
    let sent = Instant::now();
    let ours = core
        .backend
        .run(|con| (core.dialect.extend)(con, keys, &hold.owner, hold.token, lease, freeing))
        .map_err(|e| scripts::failure(keys, e))?;
    if !ours {
        hold.mark_lost(why_gone(core, keys, hold.token, LossCause::FoundGone));
        return Err(lost(keys));
    }
    hold.leased_anew(sent, lease);
    // The renewal thread may have found the old lease passed while the call was out: the
    // holder is told it lost the hold then, and must not be told otherwise.
    if hold.is_lost() {
        return Err(lost(keys));
    }
    Ok(())
}
