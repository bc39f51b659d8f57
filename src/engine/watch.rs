//! Waiting for a condition on an object, woken by its channel: what a count-down latch's
//! waiters and a counting semaphore's do. No queue and no hand-over: a message on the channel
//! wakes watchers, which check again.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{ConnectionLike, RedisResult};

use super::acquire::counted_cancel;
use super::lease::deadline_after;
use crate::cancel::{Cancel, Watched};
use crate::core::Core;
use crate::error::Result;
use crate::keys::LockKeys;
use crate::scripts;
use crate::subscriber::Wake;

/// What a look at a watched condition found: whether it holds, and the server time of the
/// look (µs), when the look tells it.
pub(crate) struct Look {
    pub holds: bool,
    pub at_us: Option<u64>,
}

/// Waits at most `wait` (`None`: as long as it takes) until `check` finds the condition
/// holds, for `owner` (the calling thread's owner id). `Ok(false)`: not in time.
///
/// `check` runs once before anything else (a condition that holds costs one round trip and
/// no subscription), then after every wake: a message on `keys`'s channel, the subscription
/// confirmed or made anew, or at least every watchdog timeout, so a lost message costs at
/// most that long, never a hang. The subscription is announced before the first check and
/// confirmed before the second, so a change between the two is never missed.
///
/// `check` may also take what it looks for (a counting semaphore's attempt takes its
/// permits when they are free): then it must be idempotent under retry (the call may run
/// again after a lost reply), and what it took is the caller's once it says the condition
/// holds. A `check` that takes must not answer `at_us`: an `Opened` wake ends the wait
/// without it.
///
/// A message that says the condition came to hold at a server time after the last look
/// (a latch's `open <µs>`) ends the wait without another look: it came to hold while the
/// caller waited.
///
/// `cancel` (and the client's [`cancel_all_waits`](crate::Client::cancel_all_waits)) ends the
/// wait with [`Error::Cancelled`](crate::Error::Cancelled), at once if it already has; either
/// counts in [`Stats::cancelled`](crate::Stats::cancelled), as a lock's cancelled wait does.
pub(crate) fn watch(
    core: &Core,
    keys: &Arc<LockKeys>,
    owner: Arc<str>,
    wait: Option<Duration>,
    cancel: Option<&Cancel>,
    mut check: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<Look>,
) -> Result<bool> {
    let watched = Watched::new(&core.cancel, cancel);
    if watched.is_cancelled() {
        return Err(counted_cancel(core, keys));
    }
    let deadline = deadline_after(wait);
    // When the last look was taken (server µs), if it said.
    let mut looked_at = None;
    let mut checked = |looked_at: &mut Option<u64>| -> Result<bool> {
        let look = core
            .backend
            .run(&mut check)
            .map_err(|e| scripts::failure(keys, e))?;
        *looked_at = look.at_us;
        Ok(look.holds)
    };
    let expecting = core.subscriber.expect(keys, &owner);
    if checked(&mut looked_at)? {
        return Ok(true);
    }
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Ok(false);
    }
    let waiter = core.subscriber.join(expecting);
    let _on_cancel = watched.on_cancel(waiter.cancel_bell());
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            // One last look: a message may have been lost on the way.
            return checked(&mut looked_at);
        }
        let wake =
            waiter.wait(left.map_or(core.watchdog_timeout, |l| l.min(core.watchdog_timeout)));
        if wake == Wake::Cancelled {
            return Err(counted_cancel(core, keys));
        }
        if let Wake::Opened { at_us } = wake
            && looked_at.is_some_and(|seen| at_us > seen)
        {
            return Ok(true);
        }
        if checked(&mut looked_at)? {
            return Ok(true);
        }
    }
}
