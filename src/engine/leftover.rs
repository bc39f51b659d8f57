//! Places in a lock's queue that failed waits left behind, voided by the owner's next attempt.
//!
//! A wait that ends with an error (Redis unreachable, say) could not withdraw, so its place
//! stays in the queue until its validity runs out. Should the same thread take the lock by an
//! attempt of its own meanwhile, a later release could hand the lock to that place: to a
//! thread that no longer waits, while the waiters behind sleep through the hand-over's lease.
//! The queue names a place by its owner *and* its terms (`acquire.lua`), which only this
//! client knows, so it remembers them here, and the owner's next attempt on that lock voids
//! the places in the same script call. Nothing here does I/O; the common case (no failed
//! wait) costs one atomic load.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use crate::scripts::Leftover;

/// At most this many places per lock and owner: each is one failed wait whose place is still
/// valid, so more would take that many failures within one place's validity; past it, the
/// oldest is forgotten (its place then runs out on its own).
const MOST_PER_OWNER: usize = 8;

/// A lock key and an owner id.
type LockAndOwner = (Arc<str>, Arc<str>);

/// The places failed waits of this client left, by lock key and owner id, each with (about)
/// when its validity ends.
#[derive(Default)]
pub(crate) struct Leftovers {
    map: Mutex<HashMap<LockAndOwner, Vec<(Leftover, Instant)>>>,
    /// `map.len()`, read without the lock.
    len: AtomicUsize,
}

impl Leftovers {
    /// Notes that waits of `owner` for lock `lock_key` failed and may have left `places`, each
    /// valid until no later than the instant beside it; the same place is kept once. Places
    /// whose validity has passed are forgotten: no release hands the lock to them.
    pub fn remember(
        &self,
        lock_key: &str,
        owner: &Arc<str>,
        places: impl IntoIterator<Item = (Leftover, Instant)>,
    ) {
        let mut map = self.map.lock();
        let entry = map.entry((Arc::from(lock_key), owner.clone())).or_default();
        for (place, until) in places {
            if !entry.iter().any(|(known, _)| *known == place) {
                entry.push((place, until));
            }
        }
        let excess = entry.len().saturating_sub(MOST_PER_OWNER);
        entry.drain(..excess);
        self.forget_expired(&mut map);
    }

    /// The places `owner` left in lock `lock_key`'s queue that are still valid, to void now,
    /// each with the end of its validity (to [`remember`](Self::remember) them again should
    /// the voiding fail).
    pub fn take(&self, lock_key: &str, owner: &Arc<str>) -> Vec<(Leftover, Instant)> {
        if self.len.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let mut map = self.map.lock();
        let taken = map
            .remove(&(Arc::from(lock_key), owner.clone()))
            .unwrap_or_default();
        // Every attempt looks here while anything is remembered: forget what ran out, so that
        // the look costs one atomic load again soon after the last failure.
        self.forget_expired(&mut map);
        let now = Instant::now();
        taken
            .into_iter()
            .filter(|(_, until)| *until > now)
            .collect()
    }

    /// Runs `call`, an attempt that voids the places `owner` left in the queue of each lock of
    /// `lock_keys` (it gets them in the same order, one list per lock). The places are
    /// forgotten if the call has a reply, and remembered again if it fails: its voiding may
    /// not have reached Redis, and the next attempt tries again. The common case (nothing
    /// remembered) costs one atomic load per lock.
    pub fn voiding<T, E>(
        &self,
        lock_keys: &[&str],
        owner: &Arc<str>,
        call: impl FnOnce(&[Vec<Leftover>]) -> Result<T, E>,
    ) -> Result<T, E> {
        let taken: Vec<_> = lock_keys.iter().map(|k| self.take(k, owner)).collect();
        let places: Vec<Vec<Leftover>> = taken
            .iter()
            .map(|each| each.iter().map(|(place, _)| *place).collect())
            .collect();
        let reply = call(&places);
        if reply.is_err() {
            for (key, each) in lock_keys.iter().zip(taken) {
                self.remember(key, owner, each);
            }
        }
        reply
    }

    fn forget_expired(&self, map: &mut HashMap<LockAndOwner, Vec<(Leftover, Instant)>>) {
        let now = Instant::now();
        map.retain(|_, places| {
            places.retain(|(_, until)| *until > now);
            !places.is_empty()
        });
        self.len.store(map.len(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::scripts::QueuePlace;

    /// A place of a wait with a 30 s hand-over lease.
    fn leftover(arrival_us: u64, valid_ms: u64) -> Leftover {
        Leftover {
            place: QueuePlace {
                arrival_us,
                valid_ms,
            },
            handover_lease: Duration::from_secs(30),
        }
    }

    /// The same, with the end of its validity `valid_ms` from now.
    fn place(arrival_us: u64, valid_ms: u64) -> (Leftover, Instant) {
        let until = Instant::now() + Duration::from_millis(valid_ms);
        (leftover(arrival_us, valid_ms), until)
    }

    #[test]
    fn remembers_places_per_lock_and_owner_until_taken() {
        let leftovers = Leftovers::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("c:1"), Arc::from("c:2"));
        assert!(leftovers.take("p:{x}", &a).is_empty());
        leftovers.remember("p:{x}", &a, [place(1, 60_000), place(0, 60_000)]);
        leftovers.remember("p:{x}", &a, [place(0, 60_000)]); // the same place once
        leftovers.remember("p:{x}", &b, [place(2, 60_000)]);
        assert!(leftovers.take("p:{y}", &a).is_empty());
        let taken: Vec<Leftover> = leftovers
            .take("p:{x}", &a)
            .into_iter()
            .map(|t| t.0)
            .collect();
        assert_eq!(taken, [leftover(1, 60_000), leftover(0, 60_000)]);
        assert!(leftovers.take("p:{x}", &a).is_empty());
        assert_eq!(leftovers.take("p:{x}", &b).len(), 1);
        assert_eq!(leftovers.len.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_voiding_call_that_fails_leaves_its_places_remembered() {
        let leftovers = Leftovers::default();
        let a: Arc<str> = Arc::from("c:1");
        leftovers.remember("p:{x}", &a, [place(1, 60_000)]);
        leftovers.remember("p:{y}", &a, [place(2, 60_000)]);
        let failed: Result<(), ()> = leftovers.voiding(&["p:{x}", "p:{y}"], &a, |places| {
            assert_eq!(
                places,
                [vec![leftover(1, 60_000)], vec![leftover(2, 60_000)]]
            );
            Err(())
        });
        assert!(failed.is_err());
        let answered: Result<(), ()> = leftovers.voiding(&["p:{x}", "p:{y}"], &a, |places| {
            assert_eq!(places.len(), 2);
            assert!(
                places.iter().all(|each| each.len() == 1),
                "put back: {places:?}"
            );
            Ok(())
        });
        assert!(answered.is_ok());
        assert!(
            leftovers.take("p:{x}", &a).is_empty(),
            "voided with the reply"
        );
        assert!(leftovers.take("p:{y}", &a).is_empty());
    }

    #[test]
    fn forgets_places_no_longer_valid_and_keeps_a_bounded_number() {
        let leftovers = Leftovers::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("c:1"), Arc::from("c:2"));
        leftovers.remember("p:{x}", &a, [place(1, 0)]); // runs out at once
        assert!(leftovers.take("p:{x}", &a).is_empty());
        for arrival in 1..=(MOST_PER_OWNER as u64 + 3) {
            leftovers.remember("p:{x}", &a, [place(arrival, 60_000)]);
        }
        let taken = leftovers.take("p:{x}", &a);
        assert_eq!(taken.len(), MOST_PER_OWNER);
        assert_eq!(taken[0].0, leftover(4, 60_000), "the oldest are forgotten");

        // Another owner's places that ran out are forgotten by anyone's look, so that the
        // look is one atomic load again.
        let (short, until) = place(1, 50);
        leftovers.remember("p:{x}", &b, [(short, until)]);
        assert_eq!(leftovers.len.load(Ordering::Acquire), 1);
        // Its validity itself is what must pass.
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
        assert!(leftovers.take("p:{y}", &a).is_empty());
        assert_eq!(leftovers.len.load(Ordering::Acquire), 0);
    }
}
