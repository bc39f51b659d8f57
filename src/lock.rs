//! [`Lock`], the handle on one named lock, and [`LockGuard`], proof of holding it.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core::{Core, Runtime, thread_number};
use crate::error::{Error, Result};
use crate::hold::Hold;
use crate::keys::LockKeys;
use crate::scripts::{self, Acquire, Queueing, Release, TakenBy};
use crate::subscriber::Wake;

/// The longest lease or wait the crate accepts: far beyond any sensible value, far below
/// where milliseconds overflow in Redis or `Instant` arithmetic.
const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// How much longer than the waiter's own horizon its place in the queue stays valid: the
/// round trip of the attempt that renews it.
const QUEUE_SLACK: Duration = Duration::from_secs(2);

/// A handle on the lock called [`name`](Lock::name), made by [`Client::lock`](crate::Client::lock).
///
/// Cheap to clone and to make; holds no lock itself. `Send + Sync`: share it between threads.
/// Ownership belongs to a thread: the same thread may acquire again (re-entry, with a new
/// guard), and another thread, of this client or any other, waits.
///
/// # Re-entry and leases
/// A re-entry succeeds at once, keeps the first acquisition's fencing token, and never
/// shortens the lease: Redis keeps the longer of the current lease and the new one. Once any
/// guard of a hold was taken without a lease, the watchdog renews the hold until its last
/// guard is gone. A re-entry into a hold that was [lost](LockGuard::is_lost) fails with
/// [`Error::LockLost`] until the thread has dropped the lost guards.
///
/// # Waiting
/// Waiters queue in Redis in arrival order, across all clients, and the release that frees
/// the lock hands it to the first of them still waiting: that thread returns holding it
/// without another round trip, and no other thread is woken. A thread that releases and asks
/// again queues behind those already waiting. A waiter whose time runs out leaves the queue
/// (one command); a waiter that dies in the queue can be handed the lock, which then frees
/// itself when the lease that waiter asked for runs out.
///
/// # Time
/// Every Redis round trip is bounded by the client's response timeout (3 s by default), so a
/// call may overrun its `wait` by up to that much when Redis stops answering, and then fails
/// with [`Error::Redis`]. On a Cluster, a call also retries a command refused while the lock's
/// slot migrates or a replica takes over, for up to one response timeout from its start.
///
/// ```no_run
/// # fn main() -> redlatch::Result<()> {
/// use std::time::Duration;
/// let client = redlatch::Client::open("redis://127.0.0.1/")?;
/// let lock = client.lock("report:daily");
/// match lock.try_lock(Duration::from_secs(2), None)? {
///     Some(guard) => println!("got it, token {}", guard.fencing_token()),
///     None => println!("busy"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    /// Keeps the client's threads alive while the handle lives.
    runtime: Arc<Runtime>,
    keys: Arc<LockKeys>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.keys.name)
            .finish()
    }
}

/// What one attempt gave.
enum Attempt {
    Acquired(LockGuard),
    Busy(Busy),
}

/// Another owner held the lock when an attempt sent at `sent` ran: for `ttl` more, with the
/// fencing counter at `fence` (a hand-over issued later carries a larger token).
#[derive(Clone, Copy)]
struct Busy {
    ttl: Duration,
    fence: u64,
    sent: Instant,
}

impl Lock {
    /// The lock's keys.
    pub(crate) fn keys(&self) -> &LockKeys {
        &self.keys
    }

    pub(crate) fn new(runtime: Arc<Runtime>, name: &str) -> Lock {
        let keys = Arc::new(LockKeys::new(&runtime.core.prefix, name));
        Lock { runtime, keys }
    }

    /// The lock's name, as given to [`Client::lock`](crate::Client::lock).
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// Waits as long as it takes, then holds the lock with the watchdog: the renewal thread
    /// extends it until the guard is dropped.
    pub fn lock(&self) -> Result<LockGuard> {
        self.acquire(None, None)
            .map(|g| g.expect("an unbounded wait only ends with the lock"))
    }

    /// Waits as long as it takes, then holds the lock for at most `lease` (no renewal).
    pub fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(None, Some(lease))
            .map(|g| g.expect("an unbounded wait only ends with the lock"))
    }

    /// Waits at most `wait` for the lock; `Ok(None)` if it did not come free in time.
    ///
    /// `wait == Duration::ZERO` makes exactly one attempt. `lease: None` holds the lock with
    /// the watchdog; `Some(lease)` lets it expire after `lease` unless released before.
    /// Waiting costs no Redis command while nothing happens: the release that frees the lock
    /// hands it to the oldest waiter in the fleet and tells it through pub/sub, and a waiter
    /// also wakes when the lock's lease would run out, so a crashed holder or a lost message
    /// costs time, never a hang.
    pub fn try_lock(&self, wait: Duration, lease: Option<Duration>) -> Result<Option<LockGuard>> {
        validate_duration("wait", wait, Duration::ZERO)?;
        self.acquire(Some(wait), lease)
    }

    /// Whether anybody holds the lock.
    pub fn is_locked(&self) -> Result<bool> {
        Ok(self.inspect()?.locked)
    }

    /// Whether the calling thread holds the lock (according to Redis).
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        Ok(self.inspect()?.holds > 0)
    }

    /// How many holds the calling thread has on the lock (according to Redis): 0 if none.
    pub fn hold_count(&self) -> Result<u32> {
        Ok(self.inspect()?.holds)
    }

    /// How long until the lock's current lease runs out; `None` when it is not locked.
    pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
        Ok(self.inspect()?.ttl)
    }

    /// Deletes the lock whoever holds it and wakes every waiter. `true` if it was locked.
    ///
    /// The holder is not interrupted: its guard reports the loss at its next renewal
    /// (watchdog), when its lease runs out, or when it releases.
    pub fn force_unlock(&self) -> Result<bool> {
        self.validate_name()?;
        let keys = &self.keys;
        let backend = &self.core().backend;
        // Names this call, so that a retry after a lost reply answers the same rather than
        // deleting a lock somebody took in the meantime.
        let request = uuid::Uuid::new_v4().simple().to_string();
        let freeing = backend.freeing();
        backend
            .run(|con| scripts::force_unlock(con, keys, &request, freeing))
            .map_err(|e| scripts::failure(keys, e))
    }

    fn inspect(&self) -> Result<scripts::Inspection> {
        self.validate_name()?;
        let core = self.core();
        let owner = core.owner(thread_number());
        let keys = &self.keys;
        core.backend
            .run(|con| scripts::inspect(con, keys, &owner))
            .map_err(|e| scripts::failure(keys, e))
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.runtime.core
    }

    pub(crate) fn validate_name(&self) -> Result<()> {
        crate::keys::check_name(&self.keys.name, self.core().backend.is_cluster())
    }

    /// The waiting path. `wait: None` waits forever.
    ///
    /// An attempt that finds the lock busy also queues the thread in Redis (acquire.lua), so
    /// that the release which frees the lock hands it straight to the oldest waiter anywhere
    /// in the fleet (release.lua): the new holder learns it from the release's message and
    /// needs no attempt of its own, nobody else is woken to race for it, and a thread that
    /// releases and asks again queues behind those already waiting. Attempts after a sleep
    /// remain the fallback for every message lost and every holder that died.
    pub(crate) fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        self.validate_name()?;
        if let Some(lease) = lease {
            // Redis keeps whole milliseconds.
            validate_duration("lease", lease, Duration::from_millis(1))?;
        }
        // A wait too long to represent is a wait without end.
        let deadline = deadline_after(wait);
        let core = self.core();
        let thread = thread_number();
        let existing = core.holds.get(&self.keys.lock, thread);
        // A re-entry never waits (it either succeeds or finds its hold lost), and a single
        // attempt does not queue.
        let queues = wait != Some(Duration::ZERO) && existing.is_none();
        let queueing = |queued| self.queueing(queues, queued, deadline, lease);
        let expecting = queues.then(|| core.subscriber.expect(&self.keys, thread));

        let mut busy = match self.attempt(existing, lease, queueing(false))? {
            Attempt::Acquired(guard) => return Ok(Some(guard)),
            Attempt::Busy(busy) => busy,
        };
        let Some(expecting) = expecting else {
            return Ok(None);
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            drop(expecting);
            return self.give_up(lease); // no time left: don't subscribe for nothing
        }
        // Make sure the channel is subscribed: unless it was since before the attempt, the
        // first wait returns when it is, and the attempt after it cannot miss a release.
        let mut waiter = core.subscriber.join(expecting);
        let handover_lease = self.handover_lease(lease);

        // A sleep ends at a hand-over, a wake-up, the lock's TTL (its holder may have died
        // without a message), the time to renew our place in the queue, or our deadline.
        loop {
            let bound = busy
                .ttl
                .clamp(Duration::from_millis(1), core.watchdog_timeout);
            let sleep = match deadline {
                Some(deadline) => bound.min(deadline.saturating_duration_since(Instant::now())),
                None => bound,
            };
            let mut confirm = false;
            if let Wake::HandedOver { token } = waiter.wait(sleep) {
                // Only a hand-over issued after our last attempt is news: an older one's hold
                // is gone (that attempt found someone else holding the lock). And since it
                // came after that attempt was sent, its lease ran from then at the latest.
                if token > busy.fence {
                    // With replicas to wait for, only an attempt of our own can WAIT for them.
                    if handover_lease == self.lease_set(lease)
                        && busy.sent.elapsed() < handover_lease / 3
                        && core.replicas.is_none()
                    {
                        waiter.acquired();
                        let owner = core.owner(thread).into();
                        let taken_by = TakenBy::Message;
                        let hold = self.new_hold(thread, owner, token, taken_by, busy.sent, lease);
                        return Ok(Some(hold));
                    }
                    // Too little of the lease is known to be left, or it was handed over
                    // with a shorter lease than asked for: take it up with a round trip,
                    // which sets the full lease and confirms it is ours.
                    confirm = true;
                }
            }
            if !confirm && deadline.is_some_and(|d| Instant::now() >= d) {
                drop(waiter);
                return self.give_up(lease);
            }
            match self.attempt(None, lease, queueing(true))? {
                Attempt::Acquired(guard) => {
                    waiter.acquired();
                    return Ok(Some(guard));
                }
                Attempt::Busy(again) => busy = again,
            }
        }
    }

    /// How an attempt of this wait treats the queue: a place in it stays valid until the
    /// deadline, or for one watchdog timeout (the longest a waiter sleeps before its next
    /// attempt renews it), plus slack for the round trip.
    fn queueing(
        &self,
        queues: bool,
        queued: bool,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Queueing {
        if !queues {
            return Queueing::NONE;
        }
        let refresh = self.core().watchdog_timeout;
        let until_deadline =
            deadline.map_or(refresh, |d| d.saturating_duration_since(Instant::now()));
        Queueing {
            queue_for: until_deadline.min(refresh) + QUEUE_SLACK,
            queued,
            handover_lease: self.handover_lease(lease),
        }
    }

    /// The wait is over: leave the queue, unless the lock was handed to us meanwhile.
    fn give_up(&self, lease: Option<Duration>) -> Result<Option<LockGuard>> {
        let core = self.core();
        let thread = thread_number();
        let owner = core.owner(thread);
        let lease_set = self.lease_set(lease);
        let sent = Instant::now();
        let keys = &self.keys;
        let token = core
            .backend
            .run(|con| scripts::withdraw(con, keys, &owner, lease_set))
            .map_err(|e| scripts::failure(keys, e))?;
        Ok(token
            .map(|token| self.new_hold(thread, owner.into(), token, TakenBy::Attempt, sent, lease)))
    }

    /// The lease a release hands the lock over with: a waiter that dies in the queue may be
    /// handed the lock, and then holds it no longer than a dead holder would. A longer lease
    /// is set when the hand-over is taken up.
    fn handover_lease(&self, lease: Option<Duration>) -> Duration {
        self.lease_set(lease).min(self.core().watchdog_timeout)
    }

    /// Registers a first hold (for renewal, before its guard exists) and returns its guard.
    pub(crate) fn new_hold(
        &self,
        thread: u64,
        owner: Arc<str>,
        token: u64,
        taken_by: TakenBy,
        sent: Instant,
        lease: Option<Duration>,
    ) -> LockGuard {
        let core = self.core();
        let hold = Arc::new(Hold::new(
            self.keys.clone(),
            owner,
            token,
            taken_by,
            core.epoch,
        ));
        hold.extend(sent, self.lease_set(lease), self.renew_every(lease));
        core.holds.insert(thread, hold.clone());
        self.guard(hold, thread)
    }

    fn guard(&self, hold: Arc<Hold>, thread: u64) -> LockGuard {
        hold.add_guard();
        LockGuard {
            lock: self.clone(),
            hold,
            thread,
            released: false,
            _not_send: PhantomData,
        }
    }

    /// The lease an acquisition sets, in whole milliseconds as Redis keeps it.
    pub(crate) fn lease_set(&self, lease: Option<Duration>) -> Duration {
        Duration::from_millis(lease.unwrap_or(self.core().watchdog_timeout).as_millis() as u64)
    }

    fn renew_every(&self, lease: Option<Duration>) -> Option<Duration> {
        lease.is_none().then(|| self.core().watchdog_timeout / 3)
    }

    /// One round trip: acquire or re-enter (`existing` is this thread's hold, if any), or
    /// learn how long the holder has left (and, when `queueing` says so, take a place in the
    /// queue).
    fn attempt(
        &self,
        existing: Option<Arc<Hold>>,
        lease: Option<Duration>,
        queueing: Queueing,
    ) -> Result<Attempt> {
        let core = self.core();
        let thread = thread_number();
        if existing.as_ref().is_some_and(|h| h.is_lost()) {
            return Err(self.lost());
        }
        let held = existing.as_ref().map(|h| (h.guards(), h.token));
        let owner: Arc<str> = match &existing {
            Some(hold) => hold.owner.clone(),
            None => core.owner(thread).into(),
        };
        let lease_set = self.lease_set(lease);

        let sent = Instant::now();
        let keys = &self.keys;
        let (reply, acknowledged) = core
            .backend
            .run(|con| {
                let reply = scripts::acquire(con, keys, &owner, held, lease_set, queueing)?;
                // On the same connection, so that WAIT counts this acquisition's write.
                let acknowledged = match (&reply, core.replicas) {
                    (Acquire::Acquired { .. }, Some(replicas)) => {
                        Some(replicas_acknowledging(con, replicas)?)
                    }
                    _ => None,
                };
                Ok((reply, acknowledged))
            })
            .map_err(|e| scripts::failure(keys, e))?;
        match reply {
            Acquire::Acquired { token } => {
                let guard = match existing {
                    Some(hold) => {
                        hold.extend(sent, lease_set, self.renew_every(lease));
                        self.guard(hold, thread)
                    }
                    None => self.new_hold(thread, owner, token, TakenBy::Attempt, sent, lease),
                };
                match (acknowledged, core.replicas) {
                    (Some(acknowledged), Some(replicas)) if acknowledged < replicas.count => {
                        // Not safe against a failover, as asked: give it back.
                        drop(guard);
                        Err(Error::NotReplicated {
                            name: self.keys.name.to_string(),
                            acknowledged,
                            wanted: replicas.count,
                        })
                    }
                    _ => Ok(Attempt::Acquired(guard)),
                }
            }
            Acquire::Busy { ttl, fence } => Ok(Attempt::Busy(Busy { ttl, fence, sent })),
            Acquire::Lost => {
                if existing.is_some_and(|h| h.mark_lost()) {
                    log::warn!("lock {:?} was lost under its holder", self.keys.name);
                }
                Err(self.lost())
            }
        }
    }

    fn lost(&self) -> Error {
        Error::LockLost {
            name: self.keys.name.clone(),
        }
    }
}

/// Checks a duration the caller gave: at least `min`, and small enough for the crate's
/// millisecond arithmetic.
/// When a wait that starts now ends; `None` for no end (none given, or too long to represent).
pub(crate) fn deadline_after(wait: Option<Duration>) -> Option<Instant> {
    wait.and_then(|w| Instant::now().checked_add(w))
}

/// The checks an acquisition over several locks (a [`MultiLock`](crate::MultiLock), a
/// [`RedLock`](crate::RedLock)) starts with: every name and the lease are valid, and the
/// calling thread holds none of the locks, since `what` does not re-enter and the thread
/// would wait for itself.
pub(crate) fn check_composite(
    locks: &[Lock],
    lease: Option<Duration>,
    thread: u64,
    what: &str,
) -> Result<()> {
    if locks.is_empty() {
        return Err(Error::invalid(format!("a {what} needs at least one lock")));
    }
    for lock in locks {
        lock.validate_name()?;
    }
    if let Some(lease) = lease {
        validate_duration("lease", lease, Duration::from_millis(1))?;
    }
    match locks
        .iter()
        .find(|l| l.core().holds.get(&l.keys.lock, thread).is_some())
    {
        Some(held) => Err(Error::invalid(format!(
            "this thread already holds lock {:?}; a {what} does not re-enter it",
            held.name()
        ))),
        None => Ok(()),
    }
}

/// Releases the guards of `held` whose lock is known lost: a composite acquisition takes those
/// again rather than count them.
pub(crate) fn drop_lost(held: &mut [Option<LockGuard>]) {
    for guard in held {
        if guard.as_ref().is_some_and(LockGuard::is_lost) {
            drop(guard.take());
        }
    }
}

/// `WAIT` for `replicas` on the connection that just wrote. A refusal (an ACL without WAIT,
/// say) counts as no replica, so that the caller gives the lock back instead of leaving it
/// held without a guard; a failed connection is an error, retried with the acquisition.
pub(crate) fn replicas_acknowledging(
    con: &mut dyn redis::ConnectionLike,
    replicas: crate::core::Replicas,
) -> redis::RedisResult<u32> {
    let reply = redis::cmd("WAIT")
        .arg(replicas.count)
        .arg(replicas.timeout.as_millis() as u64)
        .query::<u32>(con);
    match reply {
        Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() => Err(e),
        Err(e) => {
            log::warn!("WAIT refused ({e}): the acquisition counts as not replicated");
            Ok(0)
        }
        ok => ok,
    }
}

pub(crate) fn validate_duration(what: &str, d: Duration, min: Duration) -> Result<()> {
    if d > MAX_DURATION {
        return Err(Error::invalid(format!(
            "{what} {d:?} is too long (at most {MAX_DURATION:?})"
        )));
    }
    if d < min {
        return Err(Error::invalid(format!(
            "{what} {d:?} is shorter than the minimum {min:?}"
        )));
    }
    Ok(())
}

/// Proof that the current thread holds a lock; releases it when dropped.
///
/// Not `Send`: the hold belongs to the thread that acquired it (its owner id is the client
/// id plus the thread number). Owns what it needs, so it can live in a request's state.
/// Dropping it releases the lock, also during a panic; a failure is logged, never raised.
/// Use [`unlock`](LockGuard::unlock) to see the outcome.
///
/// A guard cannot move to another thread:
///
/// ```compile_fail
/// fn send<T: Send>(_: T) {}
/// let client = redlatch::Client::open("redis://127.0.0.1/").unwrap();
/// send(client.lock("x").lock().unwrap());
/// ```
///
/// while the client and lock handles can:
///
/// ```
/// fn send_sync<T: Send + Sync>() {}
/// send_sync::<redlatch::Client>();
/// send_sync::<redlatch::Lock>();
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    lock: Lock,
    hold: Arc<Hold>,
    thread: u64,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.lock.keys.name)
            .field("fencing_token", &self.hold.token)
            .finish()
    }
}

impl LockGuard {
    /// Releases this hold. `Err(Error::LockLost)` if the lock was no longer ours (then nothing
    /// in Redis was changed) or had already been reported lost (then a hold Redis still had is
    /// released all the same); `Err(Error::Redis)` if Redis could not be reached, in which case
    /// the lock expires with its lease.
    pub fn unlock(mut self) -> Result<()> {
        self.release()
    }

    /// The fencing token of this hold: strictly increasing per lock name across all clients,
    /// never reused. Send it with every write the lock protects and have the resource reject
    /// tokens older than the newest it has seen; that, not the lock alone, is what makes the
    /// write safe against a holder that was paused past its lease. Re-entries share the first
    /// acquisition's token.
    pub fn fencing_token(&self) -> u64 {
        self.hold.token
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.lock.keys.name
    }

    pub(crate) fn hold(&self) -> &Arc<Hold> {
        &self.hold
    }

    /// Whether the lock is known to be lost: renewal found it gone, or the last lease Redis
    /// confirmed has run out. Advisory: a pause can fall between this check and the write it
    /// guards, which is why writes carry the [fencing token](LockGuard::fencing_token).
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// `Err(Error::LockLost)` when [`is_lost`](LockGuard::is_lost).
    pub fn check(&self) -> Result<()> {
        if self.is_lost() {
            Err(self.lock.lost())
        } else {
            Ok(())
        }
    }

    fn release(&mut self) -> Result<()> {
        self.released = true;
        let core = self.lock.core();
        let hold = &self.hold;
        let holds = hold.guards();
        if holds == 1 {
            // Stop renewal before the lock is released, never after.
            core.holds.remove(self.thread, hold);
        }
        hold.remove_guard();
        let was_lost = hold.is_lost();
        let keys = &self.lock.keys;
        let freeing = core.backend.freeing();
        let reply = core.backend.run(|con| {
            let (owner, token, taken_by) = (&hold.owner, hold.token, hold.taken_by);
            scripts::release(con, keys, owner, holds, token, freeing, taken_by)
        });
        match reply {
            Ok(Release::NotOurs) => {
                hold.mark_lost();
                Err(self.lock.lost())
            }
            // Whatever Redis said, the holder was told it had lost the lock: stay consistent.
            _ if was_lost => Err(self.lock.lost()),
            Ok(Release::Released | Release::StillHeld) => Ok(()),
            Err(e) => Err(scripts::failure(keys, e)),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        match self.release() {
            Ok(()) => {}
            Err(Error::LockLost { name }) => {
                log::warn!("lock {name:?} was lost before its guard was dropped")
            }
            Err(e) => log::error!(
                "releasing lock {:?} failed ({e}); it expires when its lease runs out",
                self.lock.keys.name
            ),
        }
    }
}
