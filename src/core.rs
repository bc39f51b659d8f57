//! What a client shares: its ids and settings, the handles of its threads, and the registry
//! of the locks its threads hold.
//!
//! [`Core`] is what the threads see; [`Runtime`] owns the threads, so that they end when the
//! last [`Client`](crate::Client) clone and the last lock handle and guard made from it are
//! gone. Handles keep a `Runtime`, the threads only a `Core`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::backend::Backend;
use crate::cancel::Cancel;
use crate::engine::doubt::Doubts;
use crate::engine::hold::Holds;
use crate::engine::leftover::Leftovers;
use crate::keys::{Family, Layout, LockKeys};
use crate::lost::ToRenewal;
use crate::scripts::Dialect;
use crate::stats::{Counters, Stats};
use crate::subscriber::Subscriber;

/// State shared by the client's handles and its threads (two; three with Sentinel).
pub(crate) struct Core {
    /// The client id: a random UUID v4, the first half of every owner id.
    pub id: String,
    pub prefix: String,
    /// Whose key layout the client speaks: ours, or Redisson's.
    pub layout: Layout,
    /// The scripts and rules of that layout, chosen from it once, when the client is built
    /// (`scripts::dialect`): every call on an object goes through it. The keys this client
    /// makes are in the same layout ([`Core::keys`]), which the dialect's calls rely on.
    pub dialect: &'static Dialect,
    pub watchdog_timeout: Duration,
    /// How long a fencing counter outlives the lease of its latest token.
    pub fence_retention: Duration,
    pub backend: Arc<Backend>,
    pub holds: Holds,
    /// Places in queues that failed waits left, voided by their owner's next attempt.
    pub leftovers: Leftovers,
    /// Attempts whose reply was lost, settled by the renewal thread once the server answers.
    pub doubts: Doubts,
    pub subscriber: Subscriber,
    /// Origin of the holds' compact timestamps.
    pub epoch: Instant,
    /// Replicas that must acknowledge an acquisition, if any.
    pub replicas: Option<Replicas>,
    /// To the renewal thread: every hold's loss, announced once, and when fixed leases end
    /// (see `lost`).
    pub to_renewal: Arc<ToRenewal>,
    /// What the threads count (shared with the subscriber thread).
    pub counters: Arc<Counters>,
    /// Watched by every wait of the client: [`Client::cancel_all_waits`](crate::Client::cancel_all_waits)
    /// ends the waits under way.
    pub cancel: Cancel,
    /// Holds per renewal script call.
    pub watchdog_batch_size: usize,
    /// How long a Redisson fair lock's waiter without a deadline keeps its place.
    pub fair_wait_timeout: Duration,
    /// The user's map from names to stored names, if any.
    pub name_mapper: Option<NameMapper>,
}

/// A user's function from a name to the name it is stored under
/// ([`ClientBuilder::name_mapper`](crate::ClientBuilder::name_mapper)).
#[derive(Clone)]
pub(crate) struct NameMapper(pub Arc<dyn Fn(&str) -> String + Send + Sync>);

impl std::fmt::Debug for NameMapper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NameMapper(..)")
    }
}

/// `WAIT <count> <timeout>` after each acquisition: see
/// [`ClientBuilder::wait_for_replicas`](crate::ClientBuilder::wait_for_replicas).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Replicas {
    pub count: u32,
    pub timeout: Duration,
}

impl Core {
    /// The owner id of the calling thread: `<client id>:<thread number>`.
    pub fn thread_owner(&self) -> Arc<str> {
        format!("{}:{}", self.id, thread_number()).into()
    }

    /// The keys of the object of `family` called `name` (mapped as the client's name mapper
    /// says), in this client's layout.
    pub fn keys(&self, family: Family, name: &str) -> LockKeys {
        let name = self.stored_name(name);
        match self.layout {
            Layout::Redlatch => LockKeys::of(family, &self.prefix, &name),
            Layout::Redisson => LockKeys::redisson(family, &name),
        }
    }

    /// The name an object called `name` is stored under: the name mapper's, if any.
    pub fn stored_name<'a>(&self, name: &'a str) -> std::borrow::Cow<'a, str> {
        match &self.name_mapper {
            Some(NameMapper(map)) => map(name).into(),
            None => name.into(),
        }
    }

    /// A snapshot of the counters, and of the waiting threads and subscriptions now.
    pub fn stats(&self) -> Stats {
        let (waiting, subscriptions) = self.subscriber.waiting();
        self.counters.snapshot(waiting, subscriptions)
    }

    /// An owner id of its own for one acquisition whose guard may move between threads
    /// (a semaphore's permits): `<client id>:p<number>`, never reused by this process.
    pub fn fresh_owner(&self) -> Arc<str> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        format!("{}:p{}", self.id, NEXT.fetch_add(1, Ordering::Relaxed)).into()
    }

    /// An owner id of its own for one lock acquisition whose guard may move between threads
    /// (an [`OwnedLockGuard`](crate::OwnedLockGuard)): `<client id>:<n>`, shaped like a
    /// thread's, as a Java service that locks with an explicit thread id makes it. `n` comes from the thread numbers' counter, so it is never a thread's
    /// number nor another acquisition's.
    pub fn fresh_numbered_owner(&self) -> Arc<str> {
        format!("{}:{}", self.id, next_number()).into()
    }
}

/// The next number of the one process-wide count that numbers threads and the acquisitions
/// that stand for a thread of their own: unique within the process, never reused.
fn next_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The calling thread's number: unique within the process, never reused.
pub(crate) fn thread_number() -> u64 {
    thread_local! {
        static NUMBER: u64 = next_number();
    }
    NUMBER.with(|n| *n)
}

/// Owns the client's threads; dropping it stops them. The threads hold only [`Core`].
pub(crate) struct Runtime {
    pub core: Arc<Core>,
    pub stop_renewal: Option<Sender<()>>,
    pub renewal: Option<JoinHandle<()>>,
    pub subscriber: Option<JoinHandle<()>>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        drop(self.stop_renewal.take()); // disconnects the renewal thread's stop channel
        self.core.subscriber.stop();
        if let Some(renewal) = self.renewal.take() {
            let _ = renewal.join();
        }
        // The subscriber leaves at its next wake-up, which stop() just caused. It is not
        // joined: on a blackholed connection that wake-up waits for TCP keepalive, and a drop
        // must not block that long.
        drop(self.subscriber.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_numbers_and_other_numbers_come_from_one_count() {
        let mine = thread_number();
        let theirs = std::thread::spawn(thread_number).join().unwrap();
        let drawn = [next_number(), next_number()];
        assert_eq!(thread_number(), mine, "a thread keeps its number");
        let mut all = vec![mine, theirs, drawn[0], drawn[1]];
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 4, "a number is handed out once");
    }
}
