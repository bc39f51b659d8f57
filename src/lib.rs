//! Reentrant, fenced, watchdog-renewed distributed locks on Redis, for synchronous Rust.
//!
//! ```no_run
//! # fn main() -> redlatch::Result<()> {
//! use std::time::Duration;
//! let client = redlatch::Client::open("redis://127.0.0.1/")?;
//! let lock = client.lock("invoice:42");
//! if let Some(guard) = lock.try_lock(Duration::from_secs(5), None)? {
//!     // ... critical section; `guard.fencing_token()` goes with every write it guards
//!     guard.check()?; // still ours?
//! } // guard dropped: released, and handed to the oldest waiter anywhere in the fleet
//! # Ok(()) }
//! ```
//!
//! # How it works
//! - A lock is a Redis hash `<prefix>:{name}` mapping owner ids (`<client uuid>:<thread>`) to
//!   hold counts, with a lease (PEXPIRE). Lua scripts in the crate's `lua/` folder make every
//!   change, atomically and idempotently, so a retried command never double-counts.
//! - Waiting threads never poll: a thread that finds the lock busy is queued in Redis, and the
//!   release that frees the lock hands it to the oldest waiter in the fleet and tells it over
//!   pub/sub (one subscriber thread and connection per [`Client`]). A waiter also wakes when
//!   the lock's lease would have run out, so a lost message or a dead holder costs time,
//!   never a hang.
//! - Each client has one renewal thread (the watchdog) that extends every lock taken without a
//!   lease, in batches, and marks a guard [lost](LockGuard::is_lost) when Redis says the lock
//!   is no longer ours.
//! - Every acquisition carries a [fencing token](LockGuard::fencing_token).
//! - A hold belongs to its thread, which re-enters it; on pooled worker threads, where a
//!   guard may outlive its request or move to another thread, an [`OwnedLockGuard`]
//!   ([`Lock::lock_owned`]) holds the same lock under an owner id of its own.
//!
//! # Deployments and kinds of lock
//! - One server: [`Client::open`] or [`Client::builder`].
//! - Sentinel: [`Client::sentinel_builder`]; the client follows the master through failovers,
//!   and [`ClientBuilder::wait_for_replicas`] narrows what a failover can lose.
//! - Cluster: [`Client::cluster_builder`]; each lock lives in one slot.
//! - Several locks at once, all or none: [`Client::multi_lock`] ([`MultiLock`]).
//! - Independent masters, by majority: [`Redlock`].
//! - Many readers or one writer: [`Client::read_write_lock`] ([`ReadWriteLock`]).
//! - Leased permits: [`Client::semaphore`] ([`Semaphore`]).
//! - Permits with no owner and no lease, released by anyone (Java's `RSemaphore`):
//!   [`Client::counting_semaphore`] ([`CountingSemaphore`]).
//! - The lock without pub/sub, waited for by backoff: [`Client::spin_lock`] ([`SpinLock`]).
//! - Waiting for a count to reach zero: [`Client::count_down_latch`] ([`CountDownLatch`]).
//! - Waiters served in arrival order: [`Client::fair_lock`]. In our layout every lock is
//!   fair, so it is [`Client::lock`]; in Redisson's it is Java's `getFairLock`.
//!
//! Every kind is a thin policy over one acquisition engine: the same queue in Redis, the
//! same hand-over by message, the same watchdog and the same lost signal.
//!
//! # Two data layouts
//! A client reads and writes one of two layouts, chosen with [`ClientBuilder::layout`]:
//! - [`Layout::Redlatch`], the default: keys under the client's key prefix, a fair
//!   hand-over queue and fencing tokens on every kind.
//! - [`Layout::Redisson`]: the keys, fields, channels and messages of Redisson, Java's Redis
//!   client, so that a Rust service takes the same locks as Java services, in the same
//!   Redis, and wakes their waiters and is woken by them.
//!
//! Every key and channel of both is in the guide's [data layout](guide::data_layout); what
//! maps to what in Java, and what differs, in [Redisson](guide::redisson).
//!
//! # Shutting down cleanly
//! Every waiting call can be called off: a handle made with `cancel_on(&cancel)` (every kind
//! has it, see [`Cancel`]) ends its waits with [`Error::Cancelled`] once the [`Cancel`] is
//! cancelled, and [`Client::cancel_all_waits`] ends every wait of the client under way. A
//! cancelled waiter leaves the queue in Redis and holds nothing, so on SIGTERM a server gets
//! its waiting threads back at once, and the next waiter in the fleet is served.
//!
//! ```no_run
//! # fn main() -> redlatch::Result<()> {
//! let client = redlatch::Client::open("redis://127.0.0.1/")?;
//! let shutdown = redlatch::Cancel::new();
//! let orders = client.lock("orders").cancel_on(&shutdown);
//! // In a request thread: Err(e) with e.is_cancelled() once shutdown is cancelled.
//! match orders.lock() {
//!     Ok(guard) => { /* the critical section */ }
//!     Err(e) if e.is_cancelled() => { /* shutting down: nothing is held */ }
//!     Err(e) => return Err(e),
//! }
//! // On SIGTERM, from any thread:
//! shutdown.cancel(); // every wait bound to `shutdown` ends now
//! client.cancel_all_waits(); // and every wait of the client under way, bound or not
//! # Ok(()) }
//! ```
//!
//! The guide's [Shut down cleanly](guide::tasks#shut-down-cleanly) shows it in a server.
//!
//! # What a lock on Redis cannot promise
//! Redis replication is asynchronous: a failover can lose a lock that was acquired just
//! before it. A holder paused (GC, SIGSTOP, VM freeze) past its lease can resume believing it
//! holds the lock. [`LockGuard::is_lost`] tells as soon as the client knows, but only the
//! fencing token, checked by the protected resource, makes such a late write harmless.
//! [What it promises](guide::promises) has both sides in full.
//!
//! # The guide
//! The [`guide`] module holds the rest of the reference, a page each:
//! [tasks](guide::tasks) (walkthroughs), [kinds](guide::kinds),
//! [Redisson](guide::redisson), [errors and limits](guide::errors_and_limits),
//! [configuration](guide::configuration), [data layout](guide::data_layout),
//! [operations](guide::operations) (inspection, logs, counters),
//! [promises](guide::promises), [how it works](guide::how_it_works),
//! [reliability](guide::reliability) and [testing](guide::testing).

#![warn(missing_docs)]

mod backend;
mod cancel;
mod client;
mod core;
mod engine;
mod error;
/// The parsers that read the network, for the fuzz targets in `fuzz/` (only under
/// `--cfg fuzzing`, which `cargo fuzz` sets).
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing;
pub mod guide;
mod inspect;
mod keys;
mod kinds;
mod lost;
mod renewal;
mod scripts;
mod stats;
mod subscriber;
mod words;

pub use cancel::Cancel;
pub use client::{Client, ClientBuilder};
pub use error::{Error, MIN_REDIS_VERSION, Result};
pub use inspect::{ConnectedClient, Detected, Holder, Listed, Listing, ObjectKind, Report, Waiter};
pub use keys::{Layout, MAX_NAME_LEN, MAX_PREFIX_LEN};
pub use kinds::counting::CountingSemaphore;
pub use kinds::latch::CountDownLatch;
pub use kinds::lock::{Lock, LockGuard, OwnedLockGuard};
pub use kinds::multi::{MultiLock, MultiLockGuard};
pub use kinds::read_write::{ReadGuard, ReadWriteLock, WriteGuard};
pub use kinds::redlock::{Redlock, RedlockClient, RedlockGuard};
pub use kinds::semaphore::{Permits, Semaphore};
pub use kinds::spin_lock::SpinLock;
pub use lost::{HoldKind, LossCause, LostLock};
/// TLS settings for [`ClientBuilder::tls_certificates`]: the `redis` crate's own types, so
/// certificates configured for it can be given as they are.
#[cfg(feature = "tls")]
pub use redis::{ClientTlsConfig, TlsCertificates};
pub use stats::Stats;

/// The README's examples, compiled by `cargo test --doc` like every other.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The `redis` crate this one is built on, the version inside [`Error::Redis`]: name its types
/// through this path (`redlatch::redis::RedisError`, `redlatch::redis::ErrorKind`) and they
/// are always the ones redlatch uses, whatever version of `redis` your own `Cargo.toml` names.
pub use redis;

/// Measurement hooks for the crate's own benchmarks. Not part of the API: no stability promise.
#[doc(hidden)]
pub mod bench_support {
    use std::time::{Duration, Instant};

    use crate::Client;

    /// How long a waiter on lock `name`, the first in this client, waits from asking for the
    /// lock's channel until Redis confirms the subscription. `None` if not within 5 s.
    pub fn subscribe_latency(client: &Client, name: &str) -> Option<Duration> {
        let core = client.core();
        let keys = std::sync::Arc::new(core.keys(crate::keys::Family::Lock, name));
        let start = Instant::now();
        let subscriber = &core.subscriber;
        let waiter = subscriber.join(subscriber.expect(&keys, &core.thread_owner()));
        (waiter.wait(Duration::from_secs(5)) == crate::subscriber::Wake::Permit)
            .then(|| start.elapsed())
    }

    /// The last hand-over or latch opening that woke the calling thread, taken: when this
    /// client's subscriber thread had the message, and when the thread ran again.
    pub fn last_message_wake() -> Option<(Instant, Instant)> {
        crate::subscriber::last_message_wake()
    }
}
