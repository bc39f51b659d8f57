//! [`Cancel`]: a handle by which another thread ends waits, and [`Watched`], the cancels one
//! wait watches (its handle's, if any, and its client's).
//!
//! No I/O and nothing of the crate below it: a wait registers how to wake it (a closure that
//! rings its condition variable) for as long as it sleeps, and a cancel rings every one
//! registered. A handle with no `Cancel` registers only with its client's, which ends waits
//! only when [`Client::cancel_all_waits`](crate::Client::cancel_all_waits) is called.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// Ends waits from another thread: every wait of a handle made with
/// [`cancel_on`](crate::Lock::cancel_on) returns
/// [`Error::Cancelled`](crate::Error::Cancelled) once this is cancelled, at once if it already
/// is, holding nothing, and having left the queue in Redis (the next waiter is served at
/// once).
///
/// Cheap to clone (clones are the same handle), `Send + Sync`. A cancel is for good: one
/// `Cancel` per thing that can be called off (a server's shutdown, one request whose client
/// hung up). Unused, it costs nothing: a wait only registers with it while it sleeps.
///
/// ```no_run
/// # fn main() -> redlatch::Result<()> {
/// use redlatch::{Cancel, Client};
/// let client = Client::open("redis://127.0.0.1/")?;
/// let shutdown = Cancel::new();
/// let lock = client.lock("orders").cancel_on(&shutdown);
/// let worker = {
///     let lock = lock.clone();
///     std::thread::spawn(move || match lock.lock() {
///         Ok(guard) => { /* work under the lock */ drop(guard) }
///         Err(e) if e.is_cancelled() => { /* shutting down: nothing is held */ }
///         Err(e) => eprintln!("{e}"),
///     })
/// };
/// shutdown.cancel(); // on SIGTERM, say: the waiting worker returns at once
/// worker.join().unwrap();
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct Cancel {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    /// Counts the calls of [`Cancel::end_current_waits`]: a wait that began in an earlier
    /// round is over.
    round: AtomicU64,
    sleepers: Mutex<Sleepers>,
}

#[derive(Default)]
struct Sleepers {
    next_id: u64,
    wakes: Vec<(u64, Arc<dyn Fn() + Send + Sync>)>,
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancel")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

impl Cancel {
    /// A handle not cancelled yet.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Cancels: every wait watching this handle ends now with
    /// [`Error::Cancelled`](crate::Error::Cancelled), and so does every wait that starts
    /// later. Idempotent.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        self.wake_sleepers();
    }

    /// Whether [`cancel`](Cancel::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Ends the waits under way now, and not those that start later: the client's
    /// [`cancel_all_waits`](crate::Client::cancel_all_waits).
    pub(crate) fn end_current_waits(&self) {
        self.inner.round.fetch_add(1, Ordering::SeqCst);
        self.wake_sleepers();
    }

    fn wake_sleepers(&self) {
        // Rung outside the list's lock: a wake takes its waiter's own locks.
        let wakes: Vec<_> = self
            .inner
            .sleepers
            .lock()
            .wakes
            .iter()
            .map(|(_, wake)| wake.clone())
            .collect();
        for wake in wakes {
            wake();
        }
    }

    fn register(&self, wake: Arc<dyn Fn() + Send + Sync>) -> u64 {
        let mut sleepers = self.inner.sleepers.lock();
        sleepers.next_id += 1;
        let id = sleepers.next_id;
        sleepers.wakes.push((id, wake));
        id
    }

    fn unregister(&self, id: u64) {
        self.inner.sleepers.lock().wakes.retain(|(i, _)| *i != id);
    }
}

/// What one wait watches: its client's cancel (as of the round the wait began in) and its
/// handle's, if it has one.
/// Borrowed, so that a wait costs no reference count on the client's shared cancel.
pub(crate) struct Watched<'a> {
    client: &'a Cancel,
    round: u64,
    own: Option<&'a Cancel>,
}

impl<'a> Watched<'a> {
    /// A wait that begins now, of a client whose cancel is `client`, by a handle cancelled by
    /// `own`.
    pub fn new(client: &'a Cancel, own: Option<&'a Cancel>) -> Watched<'a> {
        Watched {
            client,
            round: client.inner.round.load(Ordering::SeqCst),
            own,
        }
    }

    /// Whether the wait is over: its handle's cancel was cancelled, or its client ended the
    /// waits under way since it began.
    pub fn is_cancelled(&self) -> bool {
        self.own.is_some_and(Cancel::is_cancelled)
            || self.client.inner.round.load(Ordering::SeqCst) != self.round
    }

    /// Calls `wake` when the wait is cancelled, until the result is dropped; at once if it is
    /// cancelled already (registered first, so that a cancel in between still rings).
    pub fn on_cancel(&self, wake: Arc<dyn Fn() + Send + Sync>) -> OnCancel<'_, 'a> {
        let ids = [
            Some(self.client.register(wake.clone())),
            self.own.map(|own| own.register(wake.clone())),
        ];
        if self.is_cancelled() {
            wake();
        }
        OnCancel { watched: self, ids }
    }

    /// Sleeps `d`, or less if the wait is cancelled meanwhile; `true` if it was.
    pub fn sleep(&self, d: Duration) -> bool {
        let bell = Arc::new((Mutex::new(false), Condvar::new()));
        let ring = bell.clone();
        let _on_cancel = self.on_cancel(Arc::new(move || {
            *ring.0.lock() = true;
            ring.1.notify_one();
        }));
        let mut rung = bell.0.lock();
        if !*rung {
            let _ = bell.1.wait_for(&mut rung, d);
        }
        self.is_cancelled()
    }
}

/// A registration made by [`Watched::on_cancel`]; dropping it unregisters.
pub(crate) struct OnCancel<'w, 'a> {
    watched: &'w Watched<'a>,
    ids: [Option<u64>; 2],
}

impl Drop for OnCancel<'_, '_> {
    fn drop(&mut self) {
        if let Some(id) = self.ids[0] {
            self.watched.client.unregister(id);
        }
        if let (Some(id), Some(own)) = (self.ids[1], self.watched.own) {
            own.unregister(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Instant;

    #[test]
    fn a_cancel_rings_registered_waits_and_later_ones_at_once() {
        let (client, own) = (Cancel::new(), Cancel::new());
        let watched = Watched::new(&client, Some(&own));
        let rung = Arc::new(AtomicUsize::new(0));
        let counter = rung.clone();
        let registration = watched.on_cancel(Arc::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        }));
        assert!(!watched.is_cancelled());
        own.cancel();
        assert!(watched.is_cancelled() && own.is_cancelled());
        assert_eq!(rung.load(Ordering::SeqCst), 1);
        drop(registration);
        assert!(own.inner.sleepers.lock().wakes.is_empty());
        assert!(client.inner.sleepers.lock().wakes.is_empty());
        // Already cancelled: rung on registering.
        let counter = rung.clone();
        let _again = watched.on_cancel(Arc::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        }));
        assert_eq!(rung.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn ending_current_waits_spares_the_ones_that_begin_later() {
        let client = Cancel::new();
        let before = Watched::new(&client, None);
        client.end_current_waits();
        let after = Watched::new(&client, None);
        assert!(before.is_cancelled());
        assert!(!after.is_cancelled());
        assert!(!client.is_cancelled());
    }

    #[test]
    fn a_sleep_ends_at_the_cancel() {
        let (client, own) = (Cancel::new(), Cancel::new());
        let watched = Watched::new(&client, Some(&own));
        let canceller = {
            let own = own.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                own.cancel();
            })
        };
        let started = Instant::now();
        assert!(watched.sleep(Duration::from_secs(10)));
        assert!(started.elapsed() < Duration::from_secs(5));
        canceller.join().unwrap();
        assert!(!Watched::new(&client, None).sleep(Duration::from_millis(1)));
    }
}
