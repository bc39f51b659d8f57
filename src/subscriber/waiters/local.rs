//! A release handed to a waiting thread of the same client ([`LocalHandOff`]), for a layout
//! with no hand-over of its own: which waiter, how many times in a row, and telling it.

use std::sync::Arc;
use std::time::Duration;

use super::{Entry, HandOver, Slot};
use crate::keys::LockKeys;
use crate::subscriber::Subscriber;

/// How many releases in a row may hand a lock to a waiter of the releasing client
/// ([`Subscriber::local_successor`]) before one frees it for every client: where a layout
/// has no fair queue (Redisson's), a hand-over inside the client spares every other client's
/// waiter an attempt that would fail, and the lock's other users still get their turn. A
/// release that hands nothing over ends the streak (and its record).
const MAX_LOCAL_STREAK: u32 = 3;

/// A waiting thread of this client chosen to be handed a lock its holder releases: the
/// release gives the hold to [`owner`](LocalHandOff::owner) in Redis, then
/// [`deliver`](LocalHandOff::deliver)s it here, as the subscriber delivers a hand-over.
pub(crate) struct LocalHandOff {
    entry: Arc<Entry>,
    slot: Arc<Slot>,
    lease: Duration,
}

impl LocalHandOff {
    /// The owner id the hold goes to.
    pub fn owner(&self) -> &Arc<str> {
        &self.slot.owner
    }

    /// The lease its thread asked for.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Hands the hold taken with `token` for `lease` to the waiting thread. It still waits:
    /// chosen, it neither attempts nor gives up until the hand-over is delivered or called
    /// off (`SlotState::incoming`). `false` only if it left all the same (an error in its
    /// wait), which leaves the hold to be given back.
    pub fn deliver(&self, token: u64, lease: Duration) -> bool {
        // Under the entry's lock: a waiter leaves its queue under it too, and then looks for
        // a hand-over to give back.
        let state = self.entry.state.lock();
        let mut slot = self.slot.state.lock();
        slot.incoming = false;
        if !state.queue.iter().any(|s| Arc::ptr_eq(s, &self.slot)) {
            return false;
        }
        slot.handed = Some(HandOver { token, lease });
        slot.handed_locally = true;
        self.slot.wake.notify_one();
        true
    }
}

impl Drop for LocalHandOff {
    /// Not delivered (the release found the hold gone, or failed): the waiter goes on as
    /// before it was chosen.
    fn drop(&mut self) {
        let mut slot = self.slot.state.lock();
        if slot.incoming {
            slot.incoming = false;
            self.slot.wake.notify_one();
        }
    }
}

impl Subscriber {
    /// The oldest thread of this client waiting for lock `keys` with nothing handed to it
    /// yet and no attempt of its own under way, to hand the lock to as its holder releases
    /// it ([`LocalHandOff`]; until that is delivered or dropped, the thread waits for it);
    /// `None` when none waits so, or when the last [`MAX_LOCAL_STREAK`] releases of the lock in this client
    /// all went to one of its own waiters: this one then frees the lock for every client.
    pub fn local_successor(&self, keys: &LockKeys) -> Option<LocalHandOff> {
        // The streak outlives the lock's entry, which goes when no thread waits for a while:
        // a chain of holders that each arrive while the last one holds must still end.
        let mut streaks = self.shared.local_streaks.lock();
        let streak = streaks.remove(keys.channel()).unwrap_or(0);
        if streak >= MAX_LOCAL_STREAK {
            return None;
        }
        let entry = self.shared.entries.lock().get(keys.channel()).cloned()?;
        let state = entry.state.lock();
        // Chosen under the slot's lock, as the thread marks itself attempting under it: a
        // thread is either chosen (and waits for the outcome) or attempts, never both.
        let (slot, lease) = state.queue.iter().find_map(|slot| {
            let lease = (*slot.local_lease.lock())?;
            let mut slot_state = slot.state.lock();
            let free = slot_state.handed.is_none()
                && !slot_state.incoming
                && !slot_state.attempting
                && !slot_state.cancelled;
            slot_state.incoming |= free;
            free.then(|| (slot.clone(), lease))
        })?;
        drop(state);
        streaks.insert(keys.channel().to_string(), streak + 1);
        Some(LocalHandOff { entry, slot, lease })
    }
}
