//! What this client knows about the locks its threads hold.
//!
//! A [`Hold`] is one thread's ownership of one lock: every guard that thread has for that lock
//! shares it (re-entries add guards, not holds). The client keeps all holds in one
//! [`Holds`] registry, keyed by lock key and owner id; the acquiring thread inserts a hold
//! *before* handing out its first guard, and removes it when its last guard *starts*
//! releasing. The renewal thread reads the same registry, so renewal can neither miss a fresh
//! lock nor outlive an unlock (the race in Redisson #7272 needs two registries to disagree).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::keys::{Family, LockKeys};
use crate::lost::{HoldKind, LossCause, LostLock, ToRenewal};
use crate::scripts::TakenBy;

/// One owner's ownership of one lock: a thread's, or (for a kind whose guards may move
/// between threads) one acquisition's.
///
/// Invariant: only the owner changes `guards` (the owning thread, or whichever thread has an
/// acquisition's one guard just then); the renewal thread only reads the lease deadline,
/// moves it forward, and sets `lost`.
#[derive(Debug)]
pub(crate) struct Hold {
    pub keys: Arc<LockKeys>,
    pub owner: Arc<str>,
    pub token: u64,
    pub taken_by: TakenBy,
    /// Live guards; the count this owner has in the lock hash.
    guards: AtomicU32,
    /// Renewed by the watchdog (some guard of this hold was taken without a lease).
    watchdog: AtomicBool,
    /// Set once, never cleared: the lock was taken from us or its lease ran out.
    lost: AtomicBool,
    /// The renewal thread: where the first mark of a loss is announced (one [`LostLock`]
    /// per hold, for the user's callback), and where a fixed lease says when it ends.
    to_renewal: Arc<ToRenewal>,
    /// Microseconds after the client's epoch until which Redis is known to keep the lock:
    /// the time the acquisition or last renewal was *sent*, plus the lease it set.
    lease_deadline: AtomicU64,
    /// The longest lease any acquisition or renewal of this hold set, in ms: no more than
    /// this is left of it in Redis at any moment. A release that hands the lock over for a
    /// shorter lease must tell every waiter (release.lua).
    longest_lease: AtomicU64,
    /// When the watchdog should next renew this hold (microseconds after the epoch).
    renew_at: AtomicU64,
    epoch: Instant,
}

impl Hold {
    pub fn new(
        keys: Arc<LockKeys>,
        owner: Arc<str>,
        token: u64,
        taken_by: TakenBy,
        epoch: Instant,
        to_renewal: Arc<ToRenewal>,
    ) -> Hold {
        Hold {
            keys,
            owner,
            token,
            taken_by,
            guards: AtomicU32::new(0),
            watchdog: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            to_renewal,
            lease_deadline: AtomicU64::new(0),
            longest_lease: AtomicU64::new(0),
            renew_at: AtomicU64::new(u64::MAX),
            epoch,
        }
    }

    pub fn guards(&self) -> u32 {
        self.guards.load(Ordering::Acquire)
    }

    pub fn add_guard(&self) {
        self.guards.fetch_add(1, Ordering::AcqRel);
    }

    /// Drops one guard; returns how many remain.
    pub fn remove_guard(&self) -> u32 {
        self.guards.fetch_sub(1, Ordering::AcqRel) - 1
    }

    pub fn is_watchdog(&self) -> bool {
        self.watchdog.load(Ordering::Acquire)
    }

    /// Records an acquisition sent at `sent` that set `lease`; `renew_every` for watchdog
    /// acquisitions. The deadline only moves forward: a re-entry never shortens the lease.
    pub fn extend(&self, sent: Instant, lease: Duration, renew_every: Option<Duration>) {
        self.lease_deadline
            .fetch_max(self.micros(sent + lease), Ordering::AcqRel);
        self.set_lease(lease);
        match renew_every {
            Some(every) => {
                self.renew_at
                    .fetch_min(self.micros(sent + every), Ordering::AcqRel);
                self.watchdog.store(true, Ordering::Release);
            }
            None => self.to_renewal.expires(self.lease_deadline()),
        }
    }

    /// A fixed lease was set anew by a call sent at `sent` (a guard's `extend`): the deadline
    /// is *set*, as Redis's lease was, so it may come sooner than before. The renewal thread
    /// learns the new end; an earlier end it was told of only wakes it to look again.
    pub fn leased_anew(&self, sent: Instant, lease: Duration) {
        self.lease_deadline
            .store(self.micros(sent + lease), Ordering::Release);
        self.set_lease(lease);
        self.to_renewal.expires(self.lease_deadline());
    }

    /// A renewal sent at `sent` succeeded.
    pub fn renewed(&self, sent: Instant, lease: Duration, renew_every: Duration) {
        self.lease_deadline
            .fetch_max(self.micros(sent + lease), Ordering::AcqRel);
        self.set_lease(lease);
        self.renew_at
            .store(self.micros(sent + renew_every), Ordering::Release);
    }

    pub fn renew_at(&self) -> Instant {
        self.instant(self.renew_at.load(Ordering::Acquire))
    }

    fn set_lease(&self, lease: Duration) {
        let ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        self.longest_lease.fetch_max(ms, Ordering::AcqRel);
    }

    /// The longest lease this hold ever set: more is never left of it in Redis. Unknown (a
    /// hold registered before its lease was recorded) reads as the longest possible.
    pub fn longest_lease(&self) -> Duration {
        match self.longest_lease.load(Ordering::Acquire) {
            0 => Duration::MAX,
            ms => Duration::from_millis(ms),
        }
    }

    /// How much of the lease Redis last confirmed is left, by this client's clock (zero once
    /// lost): no round trip.
    pub fn remaining_lease(&self) -> Duration {
        if self.is_lost() {
            return Duration::ZERO;
        }
        self.lease_deadline()
            .saturating_duration_since(Instant::now())
    }

    /// Whether an acquisition has recorded its lease yet: a hold is registered just before
    /// its lease is, and until then it has no deadline to have missed.
    pub fn lease_known(&self) -> bool {
        self.lease_deadline.load(Ordering::Acquire) != 0
    }

    pub fn lease_deadline(&self) -> Instant {
        self.instant(self.lease_deadline.load(Ordering::Acquire))
    }

    /// Marks the hold lost for `cause`; `true` if this call did (so exactly one caller logs
    /// it), and then the loss is announced, once.
    pub fn mark_lost(&self, cause: LossCause) -> bool {
        let first = !self.lost.swap(true, Ordering::AcqRel);
        if first {
            // The receiver is gone only when the client is: nobody left to tell.
            self.to_renewal.lost(LostLock {
                name: self.keys.name().to_string(),
                fencing_token: self.token,
                cause,
                kind: self.kind(),
            });
        }
        first
    }

    /// What is held, for the user's callback and the log.
    pub fn kind(&self) -> HoldKind {
        match self.keys.family {
            Family::ReadWrite if self.keys.reads(&self.owner) => HoldKind::Read,
            Family::ReadWrite => HoldKind::Write,
            Family::Semaphore => HoldKind::Permits,
            Family::Lock | Family::Latch | Family::Counting => HoldKind::Lock,
        }
    }

    /// Lost, or past its lease deadline (a paused process finds out on resume).
    pub fn is_lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        if Instant::now() >= self.lease_deadline() {
            let cause = if self.is_watchdog() {
                LossCause::NotRenewedInTime
            } else {
                LossCause::LeaseExpired
            };
            if self.mark_lost(cause) {
                let what = self.kind().of(self.keys.name());
                // A fixed lease is never renewed: it ran out because it was not released.
                match cause {
                    LossCause::LeaseExpired => log::warn!(
                        "{what}: its fixed lease of {} ran out before it was released; lost",
                        crate::words::Words(self.longest_lease())
                    ),
                    _ => log::warn!("{what}: its lease ran out before it was renewed; lost"),
                }
            }
            return true;
        }
        false
    }

    fn micros(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch)
            .as_micros()
            .min(u64::MAX as u128 - 1) as u64
    }

    fn instant(&self, micros: u64) -> Instant {
        self.epoch
            .checked_add(Duration::from_micros(micros))
            .unwrap_or_else(|| self.epoch + Duration::from_secs(1 << 40))
    }
}

/// All holds of one client: by lock key, then by owner id. Looked up by `&str`, so the
/// acquiring and releasing paths allocate nothing to find a hold.
#[derive(Default)]
pub(crate) struct Holds {
    map: Mutex<HashMap<Arc<str>, OwnerHolds>>,
    /// What the client knows of its locks' other users, so that its releases leave them
    /// their turn (Redisson's layout: see `engine::turn`).
    pub(in crate::engine) turns: super::turn::Turns,
}

/// The holds of one lock, by owner id (a thread's, or one acquisition's of its own).
type OwnerHolds = HashMap<Arc<str>, Arc<Hold>>;

impl Holds {
    pub fn get(&self, lock_key: &str, owner: &str) -> Option<Arc<Hold>> {
        self.map.lock().get(lock_key)?.get(owner).cloned()
    }

    pub fn insert(&self, hold: Arc<Hold>) {
        let mut map = self.map.lock();
        let owner = hold.owner.clone();
        match map.get_mut(hold.keys.lock()) {
            Some(owners) => {
                owners.insert(owner, hold);
            }
            None => {
                let key = Arc::from(hold.keys.lock());
                map.insert(key, HashMap::from([(owner, hold)]));
            }
        }
    }

    /// Removes `hold` if it is still the registered one.
    pub fn remove(&self, hold: &Arc<Hold>) {
        let mut map = self.map.lock();
        let lock_key = hold.keys.lock();
        let Some(owners) = map.get_mut(lock_key) else {
            return;
        };
        if owners
            .get(&hold.owner)
            .is_some_and(|h| Arc::ptr_eq(h, hold))
        {
            owners.remove(&hold.owner);
            if owners.is_empty() {
                map.remove(lock_key);
            }
        }
    }

    /// Still registered: the renewal thread checks this before reporting a hold lost, since
    /// its owner may have released it while the renewal was in flight.
    pub fn contains(&self, hold: &Arc<Hold>) -> bool {
        self.get(hold.keys.lock(), &hold.owner)
            .is_some_and(|h| Arc::ptr_eq(&h, hold))
    }

    /// Every hold (watchdog or fixed lease) that is not lost.
    pub fn live(&self) -> Vec<Arc<Hold>> {
        self.map
            .lock()
            .values()
            .flat_map(|owners| owners.values())
            .filter(|h| !h.lost.load(Ordering::Acquire))
            .cloned()
            .collect()
    }

    /// Holds of the lock `lock_key`, whoever their owner.
    pub fn of_lock(&self, lock_key: &str) -> Vec<Arc<Hold>> {
        self.map
            .lock()
            .get(lock_key)
            .map(|owners| owners.values().cloned().collect())
            .unwrap_or_default()
    }
}
