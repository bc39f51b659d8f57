//! Attempts whose reply was lost, settled once the server answers again.
//!
//! An attempt that timed out, or whose connection failed after it was sent, may still run: a
//! stopped server (SIGSTOP, a VM frozen, a long fork) runs what it had read when it resumes,
//! long after its caller got an error and gave up. That run may take the object, a hold that
//! nobody renews or releases, for its full lease; or a place in the queue, to which a later
//! release hands the object, again for a full lease. Retrying a call is not enough when its
//! caller has stopped asking: every attempt whose reply was lost is *settled*. The engine
//! remembers it here ([`Doubts::remember`]), and the renewal thread settles it
//! ([`Doubts::settle_due`], with `engine::settle`, which runs the scripts): the owner leaves the queue (taking up a hand-over made to its
//! place); then, if it holds the object ([`Kind::may_hold`]), makes one attempt of the same
//! terms that queues nowhere (every attempt script takes up the owner's own field when it
//! finds it: what the lost run took); and releases whatever either got, which hands the
//! object to the next waiter. A free object is left alone: the settlement takes nothing on
//! its own account.
//!
//! A settlement runs as soon as the server answers (the first try right away, then every
//! [`RETRY`]), and once more a renewal period later, for a run that came later still (a
//! request delayed in the network rather than in a stopped server). The owner's own next
//! attempt on the object also settles it, by taking up what the lost run took: it forgets
//! the doubt ([`Doubts::forget`]), after waiting for a settlement under way, so that the
//! two never race for the owner's field.
//!
//! Nothing here does I/O (the registry only; `engine::settle` settles); the common case (no
//! doubt) costs one atomic load per attempt.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::RedisResult;

use super::Kind;
use crate::scripts::Queueing;

/// Pause between settlements while the server does not answer.
const RETRY: Duration = Duration::from_millis(250);

/// How long a doubt is kept at most, settled or not: past this, a lost run that has not come
/// can only take what its own lease (or its place's validity) gives back by itself soon.
const KEPT_AT_MOST: Duration = Duration::from_secs(15 * 60);

/// An attempt whose reply was lost.
pub(crate) struct Doubt {
    /// The object's scripts, with nothing that keeps the client alive ([`Kind::detached`]).
    pub(super) kind: Arc<dyn Kind + Send + Sync>,
    pub(super) owner: Arc<str>,
    /// The lease the attempt asked for.
    pub(super) lease: Duration,
    /// How it treated the queue: its withdrawal names the same place.
    pub(super) queueing: Queueing,
    /// Settlements still to run.
    passes: u8,
    /// When the next one is due.
    due: Instant,
    /// When the attempt failed.
    since: Instant,
}

impl Doubt {
    /// An attempt of `kind` for `owner` with `lease`, queueing as `queueing` says, whose reply
    /// was lost.
    pub fn new(kind: &dyn Kind, owner: &Arc<str>, lease: Duration, queueing: &Queueing) -> Doubt {
        let now = Instant::now();
        Doubt {
            kind: kind.detached(),
            owner: owner.clone(),
            lease,
            queueing: queueing.clone(),
            passes: 2,
            due: now,
            since: now,
        }
    }
}

/// A lock key and an owner id.
type LockAndOwner = (Arc<str>, Arc<str>);

/// One doubt, locked while it is settled: the owner's next attempt waits for that.
type Entry = Arc<Mutex<Option<Doubt>>>;

/// This client's attempts whose reply was lost, by lock key and owner.
#[derive(Default)]
pub(crate) struct Doubts {
    map: Mutex<HashMap<LockAndOwner, Entry>>,
    /// `map.len()`, read without the lock.
    len: AtomicUsize,
}

/// What settling a doubt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The owner held the object (the lost run took it, or it was handed to the lost run's
    /// place): given back now.
    GaveBack,
    /// Nothing of the owner's was there (any place of its is gone now).
    Nothing,
}

impl Doubts {
    /// Remembers `doubt`, for the object `lock_key`; one per owner and object (a later one
    /// replaces an earlier: settling either settles both).
    pub fn remember(&self, lock_key: &str, doubt: Doubt) {
        let mut map = self.map.lock();
        let key = (Arc::from(lock_key), doubt.owner.clone());
        map.insert(key, Arc::new(Mutex::new(Some(doubt))));
        self.len.store(map.len(), Ordering::Release);
    }

    /// Whether any doubt waits to be settled: one atomic load.
    pub fn any(&self) -> bool {
        self.len.load(Ordering::Acquire) > 0
    }

    /// When the next settlement is due, if any is.
    pub fn next_due(&self) -> Option<Instant> {
        if !self.any() {
            return None;
        }
        let entries: Vec<Entry> = self.map.lock().values().cloned().collect();
        entries
            .iter()
            .filter_map(|entry| entry.try_lock().and_then(|d| d.as_ref().map(|d| d.due)))
            .min()
    }

    /// The owner `owner` attempts object `lock_key` again: its attempt takes up whatever a
    /// lost one took, so the doubt is forgotten; a settlement under way is waited for first
    /// (a few round trips, each within the response timeout), so that the two never race for
    /// the owner's field.
    pub fn forget(&self, lock_key: &str, owner: &Arc<str>) {
        if !self.any() {
            return;
        }
        let entry = {
            let mut map = self.map.lock();
            let entry = map.remove(&(Arc::from(lock_key), owner.clone()));
            self.len.store(map.len(), Ordering::Release);
            entry
        };
        if let Some(entry) = entry {
            entry.lock().take();
        }
    }

    /// Settles every doubt once now, due or not (the client is being dropped), for as long as
    /// the thread's deadline allows.
    pub fn settle_now(
        &self,
        period: Duration,
        settle: impl FnMut(&Doubt) -> RedisResult<Settled>,
    ) -> u64 {
        let entries: Vec<Entry> = self.map.lock().values().cloned().collect();
        for entry in entries {
            if let Some(doubt) = entry.lock().as_mut() {
                doubt.due = Instant::now();
            }
        }
        self.settle_due(period, settle)
    }

    /// Settles every doubt that is due with `settle` (on the renewal thread: a few round
    /// trips, without retries); a server that does not answer costs one response timeout
    /// per call of this, and every doubt is tried again [`RETRY`] later. A doubt settled
    /// twice, `period` apart, is done. Answers how many were settled for the first time.
    pub fn settle_due(
        &self,
        period: Duration,
        mut settle: impl FnMut(&Doubt) -> RedisResult<Settled>,
    ) -> u64 {
        if !self.any() {
            return 0;
        }
        let mut first = 0;
        let now = Instant::now();
        let entries: Vec<(LockAndOwner, Entry)> = self
            .map
            .lock()
            .iter()
            .map(|(key, entry)| (key.clone(), entry.clone()))
            .collect();
        // A server that does not answer fails the first settlement; the others wait with it,
        // so that a thousand doubts cost one response timeout per try, not a thousand.
        let mut unanswered = false;
        for (key, entry) in entries {
            let mut slot = entry.lock();
            let Some(doubt) = slot.as_mut() else {
                continue;
            };
            if doubt.due > now {
                continue;
            }
            if unanswered {
                doubt.due = Instant::now() + RETRY;
                continue;
            }
            let done = match settle(doubt) {
                Ok(settled) => {
                    if doubt.passes == 2 {
                        first += 1;
                    }
                    if settled == Settled::GaveBack {
                        log::info!(
                            "{:?}: an attempt whose reply was lost had run after all; what \
                             it took is given back",
                            doubt.kind.keys().name()
                        );
                    }
                    doubt.passes -= 1;
                    doubt.due = Instant::now() + period;
                    doubt.passes == 0
                }
                Err(e) if crate::backend::is_transport_error(&e) => {
                    unanswered = true;
                    log::debug!(
                        "{:?}: settling an attempt whose reply was lost failed ({e}); \
                         trying again in {RETRY:?}",
                        doubt.kind.keys().name()
                    );
                    doubt.due = Instant::now() + RETRY;
                    doubt.since.elapsed() > KEPT_AT_MOST
                }
                Err(e) => {
                    // The server answered, and refused (foreign data under the key, a
                    // read-only replica...): nothing of ours to give back there, and asking
                    // again gets the same answer.
                    log::warn!(
                        "{:?}: settling an attempt whose reply was lost was refused ({e}); \
                         left as it is",
                        doubt.kind.keys().name()
                    );
                    true
                }
            };
            if done {
                slot.take();
                let mut map = self.map.lock();
                if map.get(&key).is_some_and(|e| Arc::ptr_eq(e, &entry)) {
                    map.remove(&key);
                }
                self.len.store(map.len(), Ordering::Release);
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::LockKeys;
    use crate::scripts::{Acquire, Freeing, Release, Releasing};
    use redis::ConnectionLike;

    /// A kind whose scripts are never run here: the registry's bookkeeping does no I/O.
    struct Unrun(Arc<LockKeys>);

    impl Kind for Unrun {
        fn keys(&self) -> &Arc<LockKeys> {
            &self.0
        }
        fn attempt(
            &self,
            _: &mut dyn ConnectionLike,
            _: &str,
            _: Option<(u32, u64)>,
            _: Duration,
            _: &Queueing,
        ) -> RedisResult<Acquire> {
            unreachable!("no script runs in these tests")
        }
        fn withdraw(
            &self,
            _: &mut dyn ConnectionLike,
            _: &str,
            _: Duration,
            _: &Queueing,
        ) -> RedisResult<Option<u64>> {
            unreachable!("no script runs in these tests")
        }
        fn detached(&self) -> Arc<dyn Kind + Send + Sync> {
            Arc::new(Unrun(self.0.clone()))
        }
        fn release(
            &self,
            _: &mut dyn ConnectionLike,
            _: &str,
            _: u64,
            _: Releasing,
            _: Freeing,
        ) -> RedisResult<Release> {
            unreachable!("no script runs in these tests")
        }
    }

    fn doubt(name: &str, owner: &Arc<str>) -> (String, Doubt) {
        let keys = Arc::new(LockKeys::new("p", name));
        let lock = keys.lock().to_string();
        let kind = Unrun(keys);
        let lease = Duration::from_secs(30);
        (lock, Doubt::new(&kind, owner, lease, &Queueing::NONE))
    }

    #[test]
    fn a_doubt_is_due_at_once_and_forgotten_by_its_owners_next_attempt() {
        let doubts = Doubts::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("c:1"), Arc::from("c:2"));
        assert!(!doubts.any() && doubts.next_due().is_none());
        let (x, first) = doubt("x", &a);
        let before = Instant::now();
        doubts.remember(&x, first);
        let (_, again) = doubt("x", &a);
        doubts.remember(&x, again); // one per owner and object
        let (y, other) = doubt("y", &b);
        doubts.remember(&y, other);
        assert_eq!(doubts.len.load(Ordering::Acquire), 2);
        assert!(
            doubts
                .next_due()
                .is_some_and(|due| due >= before && due <= Instant::now())
        );
        doubts.forget(&y, &a); // another owner's attempt settles nothing of a's
        doubts.forget(&x, &b);
        assert_eq!(doubts.len.load(Ordering::Acquire), 2);
        doubts.forget(&x, &a);
        doubts.forget(&y, &b);
        assert!(!doubts.any() && doubts.next_due().is_none());
    }
}
