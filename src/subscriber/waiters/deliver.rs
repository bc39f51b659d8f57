//! Which waiters a message on a lock's channel wakes, and with what: the subscriber thread's
//! half of waking (see the parent module's docs).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Entry, HandOver};
use crate::keys::LockKeys;
use crate::scripts::{Grants, Message};
use crate::subscriber::{Errand, Shared};

impl Shared {
    /// A message on a lock's channel. A hand-off wakes exactly the thread it names (if it is
    /// one of ours); a release that found only stale places queued wakes one waiter; a
    /// force-unlock, a latch that opened, or a counting semaphore's permits freed, all.
    pub(in crate::subscriber) fn deliver(&self, channel: &[u8], payload: &[u8]) {
        // Not UTF-8: not a channel of ours.
        let Ok(channel) = std::str::from_utf8(channel) else {
            return;
        };
        let channel = self.object_channel(channel);
        let entry = self.entries.lock().get(channel).cloned();
        // What the message asks of the waiters, in the client's dialect: Redisson's
        // wake-ups read as our `unlock` (one) and `force` (all), and never grant.
        let family = entry.as_ref().map(|e| e.keys.family);
        match (self.dialect.message)(family, payload) {
            Some(Message::Grant { lease, grants }) => {
                self.deliver_grants(channel, entry, lease, grants)
            }
            Some(Message::Unlock) => {
                if let Some(entry) = entry {
                    let mut state = entry.state.lock();
                    state.wakes += 1;
                    Entry::wake_one(&state);
                }
            }
            // A count of permits free wakes every waiter: each wants its own number, and one
            // that wants more than is free cannot pass its wake-up on (`Message::Free`).
            Some(Message::Force | Message::Open { at_us: None } | Message::Free { .. }) => {
                if let Some(entry) = entry {
                    let mut state = entry.state.lock();
                    state.wakes += 1;
                    Entry::wake_all(&state);
                }
            }
            Some(Message::Open { at_us: Some(at) }) => {
                let received = Instant::now();
                if let Some(entry) = entry {
                    let mut state = entry.state.lock();
                    state.wakes += 1;
                    for slot in &state.queue {
                        slot.open(at, received);
                    }
                }
            }
            None => {}
        }
    }

    /// The object now belongs to the owners in `grants`, for `lease` unless renewed. Every
    /// other waiter here learns that the object's lease changed: if a new holder never takes
    /// it up (it died while it waited), nothing will be published when that lease runs out,
    /// so no waiter may sleep past it. (Waiters of other clients hear of a release's grants
    /// only when a new lease ends before the released one: `release.lua`, `shares.lua`.)
    fn deliver_grants(
        &self,
        channel: &str,
        entry: Option<Arc<Entry>>,
        lease: Duration,
        grants: Grants<'_>,
    ) {
        let received = Instant::now();
        let ours = |owner: &str| owner.starts_with(self.owner_prefix.as_str());
        // `arriving` first, held throughout: a thread moves from it to the entry's queue
        // under the same lock, so the hand-over finds it in one place or the other.
        let mut arriving = self.arriving.lock();
        let mut handed = Vec::new();
        if let Some(entry) = &entry {
            let busy_until = received + lease;
            let mut state = entry.state.lock();
            state.handovers += 1;
            state.handover_ends = Some(busy_until);
            for slot in &state.queue {
                match grants.iter().find(|(_, owner)| *owner == &*slot.owner) {
                    Some((token, owner)) if ours(owner) => {
                        slot.hand_over(HandOver { token, lease }, Some(received));
                        self.handed_over.store(true, Ordering::Relaxed);
                        handed.push(owner);
                    }
                    // If the new holder never takes it up, nothing is published when its
                    // lease ends: sleep no longer than that.
                    _ => slot.wake_by(busy_until),
                }
            }
        }
        let mut unclaimed = Vec::new();
        for (token, owner) in grants.iter() {
            if !ours(owner) || handed.contains(&owner) {
                continue; // another client's, or delivered above
            }
            match arriving.get_mut(owner) {
                // Its attempt's reply and this message crossed: the thread joins in a moment.
                Some(a) if a.keys.channel() == channel => {
                    a.handed = Some(HandOver { token, lease })
                }
                // Its thread no longer waits: it gave up, or took the object up with an
                // attempt of its own, or the message came very late. Give it back if nobody
                // took it up (the give-back checks that, see `Errand::GiveBack`).
                _ => unclaimed.push((token, Arc::<str>::from(owner))),
            }
        }
        drop(arriving);
        if unclaimed.is_empty() {
            return;
        }
        let keys = entry
            .map(|e| e.keys.clone())
            .or_else(|| self.keys_of(channel));
        if let Some(keys) = keys {
            for (token, owner) in unclaimed {
                self.give_back(keys.clone(), owner, token, lease);
            }
        }
    }

    /// The object whose channel is `channel`, under this client's prefix.
    fn keys_of(&self, channel: &str) -> Option<Arc<LockKeys>> {
        LockKeys::from_channel(&self.key_prefix, channel).map(Arc::new)
    }

    /// The object's channel `channel` is, or whose grant channel for this client it is
    /// ([`LockKeys::grant_channel`]): where its entry is kept.
    pub(in crate::subscriber) fn object_channel<'c>(&self, channel: &'c str) -> &'c str {
        channel
            .strip_suffix(self.client_id.as_str())
            .and_then(|c| c.strip_suffix(':'))
            .unwrap_or(channel)
    }

    pub(super) fn give_back(
        &self,
        keys: Arc<LockKeys>,
        owner: Arc<str>,
        token: u64,
        lease: Duration,
    ) {
        let _ = self.errands.send(Errand::GiveBack {
            keys,
            owner,
            token,
            lease,
        });
    }
}
