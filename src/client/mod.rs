//! [`Client`] and its builder: one connection pool, one subscriber thread, one renewal thread.

use std::sync::Arc;

use crate::backend::Deployment;
use crate::backend::sentinel::SentinelSpec;
use crate::core::{Core, Runtime};
use crate::error::Result;
use crate::keys::Layout;
use crate::kinds::counting::CountingSemaphore;
use crate::kinds::latch::CountDownLatch;
use crate::kinds::lock::Lock;
use crate::kinds::read_write::ReadWriteLock;
use crate::kinds::semaphore::Semaphore;
use crate::kinds::spin_lock::SpinLock;
use crate::stats::Stats;

mod builder;

pub use builder::ClientBuilder;

/// A connection to one Redis deployment, from which locks are made.
///
/// Cheap to clone: clones share the connection pool, the subscriber thread, the renewal
/// thread and the client id (so all clones are one *client* for lock ownership; threads are
/// told apart by their thread number). Both threads end when the last clone, and the last
/// [`Lock`] and [`LockGuard`](crate::LockGuard) made from it, are dropped.
///
/// ```no_run
/// # fn main() -> redlatch::Result<()> {
/// let client = redlatch::Client::open("redis://127.0.0.1/")?;
/// let lock = client.lock("invoice:42");
/// let guard = lock.lock()?;
/// println!("fencing token {}", guard.fencing_token());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    runtime: Arc<Runtime>,
}

impl Client {
    /// Connects with default settings. `url` is `redis://[user:password@]host[:port][/db]`,
    /// `rediss://...` (with the `tls` feature), or a Unix socket as `redis+unix:///path` or
    /// `unix:///path` (`?db=1&user=u&pass=p` for the database and credentials).
    /// `valkey://`, `valkeys://` and `valkey+unix://` are accepted as the same as their
    /// `redis` counterparts.
    ///
    /// Fails with [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a malformed URL and with [`Error::Redis`](crate::Error::Redis) when
    /// the server cannot be reached or refuses the credentials.
    pub fn open(url: &str) -> Result<Client> {
        Client::builder(url).build()
    }

    /// A builder for a client with non-default settings.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder::new(Deployment::Url(url.to_string()))
    }

    /// A builder for a client of the master that Redis Sentinel calls `master_name`, found
    /// through the sentinels at `sentinel_urls` (`redis://[:password@]host:port`, the
    /// sentinels' own credentials). The client follows the master through failovers; give
    /// the master's credentials with [`ClientBuilder::master_credentials`].
    ///
    /// With the `tls` feature the sentinels may be `rediss://host:port` instead, all of them
    /// or none (a mix fails `build()` with [`Error::InvalidArgument`](crate::Error::InvalidArgument)). Sentinel reports a
    /// master by host and port only, so the client follows the usual rule (redis-py's and
    /// Redisson's): sentinels reached over TLS watch masters and replicas that speak TLS,
    /// at the port Sentinel reports (the TLS port when they run with `tls-replication yes`),
    /// their certificates checked against the host Sentinel names. The certificates given to
    /// `ClientBuilder::tls_certificates` (feature `tls`) serve the sentinels and every master
    /// alike.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::sentinel_builder(
    ///     &["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "locks",
    /// )
    /// .master_credentials(None, "s3cret")
    /// .build()?;
    /// let guard = client.lock("invoice:42").lock()?;
    /// # Ok(()) }
    /// ```
    ///
    /// What a failover does to a lock: replication is asynchronous, so an acquisition the old
    /// master confirmed may not have reached the replica that takes over, and the lock is then
    /// free on the new master. The renewal thread finds that out within a third of the
    /// watchdog timeout and the holder's guard reports it lost; in the meantime another
    /// client may take the lock. [`ClientBuilder::wait_for_replicas`] narrows that window;
    /// fencing tokens are what makes writes safe across it.
    pub fn sentinel_builder(sentinel_urls: &[&str], master_name: &str) -> ClientBuilder {
        ClientBuilder::new(Deployment::Sentinel(SentinelSpec {
            sentinels: sentinel_urls.iter().map(|s| s.to_string()).collect(),
            master_name: master_name.to_string(),
            username: None,
            password: None,
        }))
    }

    /// A builder for a client of a Redis Cluster, found through `seed_urls`
    /// (`redis://[user:password@]host:port`, one or more nodes of the cluster, masters or
    /// replicas; the same credentials for all).
    ///
    /// Each lock lives in the slot of its name (all its keys share the hash tag `{name}`), so
    /// every script runs on the one master that owns it; commands follow `MOVED` and `ASK`
    /// through a resharding, and pooled connections are made anew when a node fails. While a
    /// lock's slot migrates (`TRYAGAIN`) or a replica takes over a failed master
    /// (`CLUSTERDOWN`), a call retries for up to one
    /// [response timeout](ClientBuilder::response_timeout) before it fails. Wake-ups use
    /// sharded pub/sub on Redis 7 (a release's message reaches only the shard that owns the
    /// lock; the subscriber keeps a connection per shard that has waiters), and on an older
    /// cluster classic pub/sub, which Redis Cluster broadcasts to every node (the subscriber
    /// listens on one seed node). [`ClientBuilder::wait_for_replicas`] is not available on a
    /// Cluster (yet), and a lock name there must not begin with `}` (its keys would fall
    /// into different slots).
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::cluster_builder(
    ///     &["redis://10.0.0.1:7000", "redis://10.0.0.2:7000", "redis://10.0.0.3:7000"],
    /// )
    /// .build()?;
    /// let guard = client.lock("invoice:42").lock()?;
    /// # Ok(()) }
    /// ```
    ///
    /// What a failover does to a lock is what it does on Sentinel: replication is
    /// asynchronous, so the replica that takes over may not have a lock its old master
    /// confirmed; the holder's guard reports it lost at its next renewal.
    ///
    /// # Routing and retries
    /// Commands go through the `redis` crate's cluster connection, which routes by key and
    /// follows `MOVED` and `ASK`; a refusal that means "not now" (`TRYAGAIN`, `CLUSTERDOWN`)
    /// is retried after short pauses (10 ms, doubling up to 100 ms) until one response
    /// timeout has passed since the call started, and a connection that failed is replaced by
    /// a fresh one, which reads the cluster's map anew. The watchdog renews with one script
    /// call per slot with locks due (a script may not cross slots), sent in one pipeline per
    /// master after a lone first call that probes whether the master answers: a round costs
    /// two round trips per master, and a stopped master costs it one timed-out call while the
    /// other masters' locks are renewed. A [`MultiLock`](crate::MultiLock) takes its members
    /// in one call when they share a slot, one call per slot otherwise, still all or nothing.
    ///
    /// # Failover and resharding
    /// A `CLUSTER FAILOVER` loses nothing, and waiters continue on the promoted replica. A
    /// master that dies is replaced after the cluster's node timeout plus the election;
    /// meanwhile calls for its slots fail with [`Error::Redis`](crate::Error::Redis), and its holders whose lease
    /// ran out are told their lock is lost. A slot that moves takes its keys with it, so a
    /// held lock stays held on the new owner. While a slot migrates, Redis refuses
    /// (`TRYAGAIN`) a script of several keys unless all of them exist on the node it reaches,
    /// and a release always names two that do not (its latch and its channel), so releases
    /// and most acquisitions of that slot's locks wait for the hand-over of the slot, for up
    /// to one response timeout; a migration that lasts longer fails the call (a failed
    /// release leaves the lock to expire with its lease).
    ///
    /// # Wake-ups
    /// On Redis 7 a release publishes with `SPUBLISH`, delivered only inside the shard that
    /// owns the lock's slot; the subscriber keeps one connection per shard that has waiters
    /// (to its master, from `CLUSTER SLOTS`), subscribing with `SSUBSCRIBE`, and follows the
    /// slots: a failed connection, a `MOVED` refusal or a subscription ended because the slot
    /// left makes it read the map again and subscribe where the slot is now, waking the
    /// lock's waiters once. A cluster older than Redis 7 gets classic pub/sub on one seed
    /// node (Redis Cluster broadcasts every `PUBLISH`). The client picks one of the two when it
    /// starts; during an upgrade from 6 to 7, clients that picked differently miss each
    /// other's releases and wake at the lease until restarted.
    ///
    /// # TLS
    /// With the `tls` feature, give the seeds as `rediss://host:tls-port` and run the nodes
    /// with `tls-cluster yes`, so that a node tells a TLS client the TLS ports of the others.
    ///
    /// # Limits
    /// The cluster connection retries a command that timed out by itself, so a call against a
    /// stopped master can take up to three response timeouts; after a failover away from a
    /// stopped master, each pooled connection that still routes there fails one call before
    /// it is remade; the release latch lives three times longer, plus one response timeout,
    /// to cover those retries. A client starts while a master is down (its check asks one
    /// node), and the other slots' locks work.
    pub fn cluster_builder(seed_urls: &[&str]) -> ClientBuilder {
        ClientBuilder::new(Deployment::Cluster(
            seed_urls.iter().map(|s| s.to_string()).collect(),
        ))
    }

    /// A handle on the lock called `name`. No I/O; the name is checked when the lock is used:
    /// an empty one, or one longer than [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes, makes
    /// every call fail with [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    pub fn lock(&self, name: &str) -> Lock {
        Lock::new(self.runtime.clone(), name)
    }

    /// A handle on the fair lock called `name`: waiters take it in the order they came.
    ///
    /// In [`Layout::Redlatch`] that is every lock, so this is [`lock`](Client::lock)`(name)`.
    /// In [`Layout::Redisson`] it is Java's `getFairLock(name)`: the lock's hash, with
    /// Redisson's queue (`redisson_lock_queue:{name}`) and deadlines
    /// (`redisson_lock_timeout:{name}`), and a channel per waiter.
    pub fn fair_lock(&self, name: &str) -> Lock {
        match self.layout() {
            Layout::Redlatch => self.lock(name),
            Layout::Redisson => Lock::fair(self.runtime.clone(), name),
        }
    }

    /// Whose data layout this client speaks ([`ClientBuilder::layout`]).
    pub fn layout(&self) -> Layout {
        self.runtime.core.layout
    }

    /// A handle on the read-write lock called `name` (`p:{name}:rwlock`: not the lock of
    /// the same name). No I/O; the name is checked when it is used.
    ///
    /// In [`Layout::Redisson`] it is Java's `getReadWriteLock(name)`: the hash `name` (the
    /// same key as Redisson's lock of that name), with Redisson's rules where they differ
    /// from ours (see [`ReadWriteLock`]).
    pub fn read_write_lock(&self, name: &str) -> ReadWriteLock {
        ReadWriteLock::new(self.runtime.clone(), name)
    }

    /// A handle on the semaphore called `name` (`p:{name}:semaphore`). No I/O; the name is
    /// checked when it is used.
    ///
    /// In [`Layout::Redisson`] it is Java's `getPermitExpirableSemaphore(name)` (Redisson's
    /// plain `getSemaphore`, whose permits have no owner and no lease, is
    /// [`counting_semaphore`](Client::counting_semaphore)).
    pub fn semaphore(&self, name: &str) -> Semaphore {
        Semaphore::new(self.runtime.clone(), name)
    }

    /// A handle on the counting semaphore called `name` (`p:{name}:counting`): permits with
    /// no owner and no lease, released by anyone (Java's `RSemaphore`; see
    /// [`CountingSemaphore`] for when to pick it over [`semaphore`](Client::semaphore)). No
    /// I/O; the name is checked when it is used.
    ///
    /// In [`Layout::Redisson`] it is Java's `getSemaphore(name)`.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let slots = client.counting_semaphore("render-slots");
    /// slots.try_set_permits(4)?;
    /// slots.acquire(1)?;
    /// slots.release(1)?;
    /// # Ok(()) }
    /// ```
    pub fn counting_semaphore(&self, name: &str) -> CountingSemaphore {
        CountingSemaphore::new(self.runtime.clone(), name)
    }

    /// A handle on the count-down latch called `name` (`p:{name}:latch`). No I/O; the name
    /// is checked when it is used.
    pub fn count_down_latch(&self, name: &str) -> CountDownLatch {
        CountDownLatch::new(self.runtime.clone(), name)
    }

    /// A handle on the lock called `name` that waits by backoff instead of pub/sub: the
    /// same lock in Redis as [`lock`](Client::lock)`(name)`, with the same guards. No I/O.
    pub fn spin_lock(&self, name: &str) -> SpinLock {
        SpinLock::new(self.runtime.clone(), name)
    }

    /// Ends every wait of this client under way now, of every kind and handle, with
    /// [`Error::Cancelled`](crate::Error::Cancelled): each waiter leaves its queue in Redis
    /// and holds nothing, and returns within moments (a wait in the middle of a round trip
    /// returns when that does). For shutdown: call it once no new work is taken, and the
    /// threads waiting for locks come back. Waits that start later are not affected; for
    /// that, make handles with [`cancel_on`](crate::Lock::cancel_on) and a
    /// [`Cancel`](crate::Cancel) that stays cancelled. Holds are kept: release them by
    /// dropping their guards.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let waiter = {
    ///     let lock = client.lock("orders");
    ///     std::thread::spawn(move || lock.lock().map(drop))
    /// };
    /// // ... on SIGTERM:
    /// client.cancel_all_waits();
    /// let ended = waiter.join().unwrap(); // Ok(()) had it got the lock, else Err(Cancelled)
    /// # Ok(()) }
    /// ```
    pub fn cancel_all_waits(&self) {
        self.runtime.core.cancel.end_current_waits();
    }

    /// What this client has done and is doing: acquisitions and how they came, wait
    /// quantiles, renewals, losses, reconnects, waiting threads, subscriptions. A snapshot of
    /// counters the client keeps anyway: no I/O, cheap enough to log every few seconds.
    pub fn stats(&self) -> Stats {
        self.runtime.core.stats()
    }

    /// This client's id, the first half of its owner ids (`<id>:<thread number>`).
    pub fn id(&self) -> &str {
        &self.runtime.core.id
    }

    /// The owner id that the calling thread's holds of this client's locks carry in Redis,
    /// `<client id>:<thread number>`: what [`LockGuard::owner_id`](crate::LockGuard::owner_id)
    /// and [`WriteGuard::owner_id`](crate::WriteGuard::owner_id) answer on this thread (a read
    /// adds `:r`; in [`Layout::Redisson`] a read has it as is, a write adds `:write`, as Java's
    /// fields). Different on every thread, and never one that an
    /// [`OwnedLockGuard`](crate::OwnedLockGuard) or [`Permits`](crate::Permits) carry. For
    /// logs and traces: it is what `redlatch inspect` shows as a holder or waiter. No I/O.
    pub fn current_thread_owner_id(&self) -> String {
        self.runtime.core.thread_owner().to_string()
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.runtime.core
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.runtime.core.id)
            .field("prefix", &self.runtime.core.prefix)
            .finish_non_exhaustive()
    }
}
