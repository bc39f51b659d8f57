//! What a lost hold is ([`LostLock`]), why it was lost ([`LossCause`]), and how the user
//! hears of it: once per hold, through the callback of
//! [`ClientBuilder::on_lock_lost`](crate::ClientBuilder::on_lock_lost), on the renewal
//! thread.
//!
//! Whoever finds a loss first (the renewal thread, a guard noticing its lease has passed, an
//! unlock or re-entry that finds the hold gone, a force-unlock by this client) marks the hold
//! lost; the first mark sends one [`LostLock`] to the renewal thread, which calls the
//! callback. So the callback runs on one thread, once per hold, whichever thread found out.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// A hold that was lost: what a [`ClientBuilder::on_lock_lost`](crate::ClientBuilder::on_lock_lost)
/// callback is told.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LostLock {
    /// The object's name, as given to the client (a lock's, a read-write lock's, a
    /// semaphore's).
    pub name: String,
    /// The fencing token of the hold that was lost.
    pub fencing_token: u64,
    /// Why it was lost.
    pub cause: LossCause,
    /// What was held.
    pub kind: HoldKind,
}

/// Why a hold was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossCause {
    /// Renewal found it no longer ours: its lease had run out in Redis (the process was
    /// paused, say), or Redis lost it (a restart without persistence, a failover).
    Taken,
    /// Somebody force-unlocked it.
    ForceUnlocked,
    /// The watchdog could not renew it before its lease ran out: Redis was out of reach, or
    /// this process was paused.
    NotRenewedInTime,
    /// It was taken with a fixed lease, and the lease passed before it was released.
    LeaseExpired,
    /// An unlock (or a re-entry) found the hold gone.
    FoundGone,
}

/// What kind of hold was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldKind {
    /// A [`Lock`](crate::Lock) or [`SpinLock`](crate::SpinLock), or a member of a
    /// [`MultiLock`](crate::MultiLock) or [`Redlock`](crate::Redlock).
    Lock,
    /// A read of a [`ReadWriteLock`](crate::ReadWriteLock).
    Read,
    /// A write of a [`ReadWriteLock`](crate::ReadWriteLock).
    Write,
    /// [`Permits`](crate::Permits) of a [`Semaphore`](crate::Semaphore).
    Permits,
}

impl HoldKind {
    /// A hold of this kind on object `name`, for a log line: `lock "x"`, `read hold of
    /// read-write lock "x"`, `permits of semaphore "x"`.
    pub(crate) fn of(self, name: &str) -> String {
        match self {
            HoldKind::Lock => format!("lock {name:?}"),
            HoldKind::Read => format!("read hold of read-write lock {name:?}"),
            HoldKind::Write => format!("write hold of read-write lock {name:?}"),
            HoldKind::Permits => format!("permits of semaphore {name:?}"),
        }
    }

    /// `is`, or `are` after [`HoldKind::of`]'s permits.
    pub(crate) fn is(self) -> &'static str {
        if self == HoldKind::Permits {
            "are"
        } else {
            "is"
        }
    }

    /// `was`, or `were` after [`HoldKind::of`]'s permits.
    pub(crate) fn was(self) -> &'static str {
        if self == HoldKind::Permits {
            "were"
        } else {
            "was"
        }
    }
}

/// What holds tell the renewal thread.
#[derive(Debug)]
pub(crate) enum Notice {
    /// A hold was lost (announced once per hold).
    Lost(LostLock),
    /// A hold with a fixed lease was taken: if it is still held when its lease ends, that is
    /// a loss the thread must find then, not at its next renewal round.
    Expires(std::time::Instant),
}

/// The way from every hold to the renewal thread. A fixed lease's end is sent only when it
/// comes before the thread's next wake-up, so that a stream of fixed-lease acquisitions does
/// not wake the thread for each.
#[derive(Debug)]
pub(crate) struct ToRenewal {
    tx: crossbeam_channel::Sender<Notice>,
    epoch: std::time::Instant,
    /// When the thread wakes next, in microseconds after `epoch`.
    next: std::sync::atomic::AtomicU64,
}

impl ToRenewal {
    pub fn new(tx: crossbeam_channel::Sender<Notice>, epoch: std::time::Instant) -> ToRenewal {
        ToRenewal {
            tx,
            epoch,
            next: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Announces a loss (the receiver is gone only with the client: nobody left to tell).
    pub fn lost(&self, lost: LostLock) {
        let _ = self.tx.send(Notice::Lost(lost));
    }

    /// A fixed lease ends at `end`: wakes the thread then, unless it wakes earlier anyway.
    pub fn expires(&self, end: std::time::Instant) {
        self.wake_by(end);
    }

    /// An attempt whose reply was lost waits to be settled (`engine::doubt`): wakes the
    /// thread now, unless it is awake anyway.
    pub fn settle_soon(&self) {
        self.wake_by(std::time::Instant::now());
    }

    fn wake_by(&self, end: std::time::Instant) {
        let at = self.micros(end);
        if self.next.fetch_min(at, std::sync::atomic::Ordering::AcqRel) > at {
            let _ = self.tx.send(Notice::Expires(end));
        }
    }

    /// The thread is in a round and will look at every hold after it: any lease end must be
    /// sent, since the next wake-up is not known yet.
    pub fn in_round(&self) {
        self.next
            .store(u64::MAX, std::sync::atomic::Ordering::Release);
    }

    /// The thread will wake at `next`.
    pub fn wakes_at(&self, next: std::time::Instant) {
        self.next
            .store(self.micros(next), std::sync::atomic::Ordering::Release);
    }

    fn micros(&self, t: std::time::Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_micros() as u64
    }
}

/// The user's callback, shared by the builder's clones and the client.
#[derive(Clone)]
pub(crate) struct LossHook(Arc<dyn Fn(&LostLock) + Send + Sync>);

impl LossHook {
    pub fn new(f: impl Fn(&LostLock) + Send + Sync + 'static) -> LossHook {
        LossHook(Arc::new(f))
    }

    /// Calls the callback with `lost`. A panic in it is caught and logged: the thread that
    /// calls it renews everybody's locks.
    pub fn announce(&self, lost: &LostLock) {
        if catch_unwind(AssertUnwindSafe(|| (self.0)(lost))).is_err() {
            log::error!(
                "the on_lock_lost callback panicked for {:?}; renewal goes on",
                lost.name
            );
        }
    }
}

impl std::fmt::Debug for LossHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LossHook(..)")
    }
}
