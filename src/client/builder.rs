//! [`ClientBuilder`]: a client's settings, checked, and `build()`, which connects and starts
//! its threads.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::link::LinkSettings;
use crate::backend::tls::TlsConfig;
use crate::backend::{Backend, Deployment, Settings};
use crate::core::{Core, NameMapper, Replicas, Runtime};
use crate::engine::hold::Holds;
use crate::engine::validate_duration;
use crate::error::{Error, Result};
use crate::keys::Layout;
use crate::lost::{LossHook, LostLock, ToRenewal};
use crate::stats::Counters;
use crate::subscriber::Subscriber;
use crate::words::Words;
#[cfg(feature = "tls")]
use redis::TlsCertificates;

use super::Client;

const DEFAULT_PREFIX: &str = "redlatch";
/// What connections are called without [`ClientBuilder::name`].
const DEFAULT_NAME: &str = "redlatch";
/// The longest [`ClientBuilder::name`]: room for a service and a host, and short enough that
/// `CLIENT LIST` stays readable.
const MAX_CLIENT_NAME_LEN: usize = 64;
const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);
/// The default [`ClientBuilder::fence_retention`]: an hour, far beyond any clock step a
/// healthy server takes, and short enough that per-entity names do not pile up.
const DEFAULT_FENCE_RETENTION: Duration = Duration::from_secs(3600);
const DEFAULT_POOL_SIZE: u32 = 16;
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);
/// The renewal period is a third of the watchdog timeout and must stay a usable sleep.
const MIN_WATCHDOG_TIMEOUT: Duration = Duration::from_millis(30);
/// Holds renewed per script call by default (see [`ClientBuilder::watchdog_batch_size`]).
const DEFAULT_WATCHDOG_BATCH_SIZE: usize = 500;
/// The largest batch: a script call's keys and arguments grow with it, and one call blocks
/// the server while it runs (5,000 renewals take about 5 ms).
const MAX_WATCHDOG_BATCH_SIZE: usize = 5000;
/// Redisson's `fairLockWaitTimeout` default.
const DEFAULT_FAIR_WAIT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Settings for a [`Client`]; from [`Client::builder`].
///
/// ```no_run
/// # fn main() -> redlatch::Result<()> {
/// use std::time::Duration;
/// let client = redlatch::Client::builder("redis://127.0.0.1/")
///     .key_prefix("billing")
///     .watchdog_timeout(Duration::from_secs(10))
///     .pool_size(32)
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    deployment: Deployment,
    /// `None` until [`ClientBuilder::key_prefix`] is called: a prefix set with
    /// [`Layout::Redisson`], which has none, is refused.
    prefix: Option<String>,
    layout: Layout,
    watchdog_timeout: Duration,
    fence_retention: Duration,
    settings: Settings,
    /// What the client calls itself on the server (see [`ClientBuilder::name`]).
    name: Option<String>,
    replicas: Option<Replicas>,
    misused_master_credentials: bool,
    on_lost: Option<LossHook>,
    watchdog_batch_size: usize,
    fair_wait_timeout: Duration,
    name_mapper: Option<NameMapper>,
    #[cfg(feature = "tls")]
    tls_certificates: Option<TlsCertificates>,
}

impl ClientBuilder {
    pub(super) fn new(deployment: Deployment) -> ClientBuilder {
        ClientBuilder {
            deployment,
            prefix: None,
            layout: Layout::Redlatch,
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            fence_retention: DEFAULT_FENCE_RETENTION,
            settings: Settings {
                pool_size: DEFAULT_POOL_SIZE,
                link: LinkSettings {
                    connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                    response_timeout: DEFAULT_RESPONSE_TIMEOUT,
                    tls: TlsConfig::default(),
                    name: None,
                },
            },
            name: None,
            replicas: None,
            misused_master_credentials: false,
            on_lost: None,
            watchdog_batch_size: DEFAULT_WATCHDOG_BATCH_SIZE,
            fair_wait_timeout: DEFAULT_FAIR_WAIT_TIMEOUT,
            name_mapper: None,
            #[cfg(feature = "tls")]
            tls_certificates: None,
        }
    }

    /// Calls `f` once for every hold of this client that is lost, of any kind (re-entries
    /// share one hold), whoever finds the loss first: renewal finding it gone, the lease
    /// passing before it was renewed or released, an unlock or re-entry finding it gone, or a
    /// force-unlock ([`LostLock::cause`](crate::LostLock::cause) says which). A long job can
    /// stop when told instead of polling [`check`](crate::LockGuard::check).
    ///
    /// `f` runs on the client's renewal thread, the one that keeps every lock of the client
    /// alive: it must return quickly and must not wait for a lock. Hand the news to your own
    /// thread (a channel, an atomic flag) and do the work there. A panic in `f` is caught and
    /// logged, and renewal goes on.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// let stop = Arc::new(AtomicBool::new(false));
    /// let told = stop.clone();
    /// let client = redlatch::Client::builder("redis://127.0.0.1/")
    ///     .on_lock_lost(move |lost| {
    ///         eprintln!("lost {:?} ({:?})", lost.name, lost.cause);
    ///         told.store(true, Ordering::SeqCst);
    ///     })
    ///     .build()?;
    /// let _guard = client.lock("batch").lock()?;
    /// while !stop.load(Ordering::SeqCst) {
    ///     // ... a step of the long job ...
    /// #   break;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn on_lock_lost(mut self, f: impl Fn(&LostLock) + Send + Sync + 'static) -> Self {
        self.on_lost = Some(LossHook::new(f));
        self
    }

    /// What this client calls itself on the server, so that an operator can tell whose a
    /// lock is: a service and host, say `"api@host-7"`. Every connection the client opens
    /// (commands, the subscriber's, Cluster nodes, the Sentinel master and the sentinels) is
    /// named `<name>:<client id>` with `CLIENT SETNAME`, so `CLIENT LIST` shows it with the
    /// connection's address; the client id is the first half of every owner id of this
    /// client, which is how [`Client::inspect`] and the `redlatch` tool put the name and
    /// address beside each holder and waiter. Without a name, connections are named
    /// `redlatch:<client id>`.
    ///
    /// 1 to 64 printable ASCII characters without spaces (what `CLIENT SETNAME` takes), else
    /// `build()` fails with [`Error::InvalidArgument`]. A server whose ACL refuses `CLIENT
    /// SETNAME` keeps the connection unnamed; nothing else changes.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::builder("redis://127.0.0.1/")
    ///     .name("api@host-7")
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    /// The first part of every key and channel (default `redlatch`): lock `name` lives at
    /// `<prefix>:{name}`. Must not be empty or contain `{` or `}`, and at most
    /// [`MAX_PREFIX_LEN`](crate::MAX_PREFIX_LEN) bytes long.
    pub fn key_prefix(mut self, prefix: &str) -> Self {
        self.prefix = Some(prefix.to_string());
        self
    }

    /// The lease of locks taken without one (default 30 s). The renewal thread extends it
    /// every third of that; a holder that dies frees the lock after at most this long.
    pub fn watchdog_timeout(mut self, d: Duration) -> Self {
        self.watchdog_timeout = d;
        self
    }

    /// How many holds the renewal thread renews in one script call (default 500, as
    /// Redisson's `lockWatchdogBatchSize` is 100): fewer round trips with more, a shorter
    /// stall of the server per call with fewer. Between 1 and 5,000, else
    /// [`Error::InvalidArgument`] at [`build`](ClientBuilder::build). On a Cluster a call
    /// also holds one slot's holds only.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::builder("redis://127.0.0.1/")
    ///     .watchdog_batch_size(100)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn watchdog_batch_size(mut self, n: usize) -> Self {
        self.watchdog_batch_size = n;
        self
    }

    /// How long a waiter of a [`Layout::Redisson`] fair lock
    /// ([`Client::fair_lock`](crate::Client::fair_lock)) that waits without a deadline
    /// (`lock()`) keeps its place after the waiter before it (default 5 minutes: Redisson's
    /// `fairLockWaitTimeout`, which Java services sharing the lock should match). A waiter
    /// that stops renewing its place (a process that died in the queue) is passed over after
    /// this long. Our own layout's queue needs no such setting: a place there is renewed by
    /// its waiter every watchdog timeout. At least 1 ms, else
    /// [`Error::InvalidArgument`] at [`build`](ClientBuilder::build).
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// use std::time::Duration;
    /// let client = redlatch::Client::builder("redis://127.0.0.1/")
    ///     .layout(redlatch::Layout::Redisson)
    ///     .fair_wait_timeout(Duration::from_secs(60))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn fair_wait_timeout(mut self, d: Duration) -> Self {
        self.fair_wait_timeout = d;
        self
    }

    /// Maps every object's name to the name it is stored under, in both layouts, as Java's
    /// `NameMapper` does: `client.lock("orders")` with `|n| format!("billing:{n}")` is the
    /// lock `billing:orders`, the one a Redisson client configured with that mapper calls
    /// `getLock("orders")`. In [`Layout::Redisson`], which has no key prefix, it is how
    /// services share one Redis without sharing names. Applied once, when a handle is made;
    /// the handle's `name()`, its errors and the operator's view show the stored name. The
    /// mapped name follows the rules of any name (not empty, at most
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes), checked when the handle is used. It must
    /// be a pure function: the same name must map to the same stored name in every process.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::builder("redis://127.0.0.1/")
    ///     .layout(redlatch::Layout::Redisson)
    ///     .name_mapper(|name| format!("billing:{name}"))
    ///     .build()?;
    /// let _guard = client.lock("orders").lock()?; // the hash `billing:orders`
    /// # Ok(()) }
    /// ```
    pub fn name_mapper(mut self, f: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        self.name_mapper = Some(NameMapper(Arc::new(f)));
        self
    }

    /// Whose data layout the client reads and writes: [`Layout::Redlatch`] (the default), or
    /// [`Layout::Redisson`] to take the same locks as Java services that use Redisson, in the
    /// same Redis (see [`Layout`] and the guide's page on [Redisson](crate::guide::redisson)).
    ///
    /// Redisson's keys are the names themselves, so [`key_prefix`](ClientBuilder::key_prefix)
    /// with `Layout::Redisson` is [`Error::InvalidArgument`] at [`build`](ClientBuilder::build).
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::builder("redis://127.0.0.1/")
    ///     .layout(redlatch::Layout::Redisson)
    ///     .build()?;
    /// // The lock a Java service takes with redisson.getLock("orders").
    /// let _guard = client.lock("orders").lock()?;
    /// # Ok(()) }
    /// ```
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// How long a name's fencing counter (`<prefix>:{name}:fence`) outlives the lease of its
    /// latest token (default 1 hour, at least 1 s). After that it expires, so a name used
    /// once leaves nothing behind, and the next acquisition's token starts again from the
    /// server's clock in microseconds, which by then is above every token the old counter
    /// gave, unless the server's clock went back by more than the retention (or, after a
    /// failover, the new master's clock is behind by that much). Tokens are checked by the
    /// resource against the newest it has seen, so make the retention longer than any clock
    /// step you can get; a longer one only keeps more idle counters.
    pub fn fence_retention(mut self, d: Duration) -> Self {
        self.fence_retention = d;
        self
    }

    /// The most command connections open at once (default 16). Each lock operation borrows
    /// one for a round trip; the subscriber has its own.
    pub fn pool_size(mut self, n: u32) -> Self {
        self.settings.pool_size = n;
        self
    }

    /// How long to wait for a new connection, or for a pooled one to come free (default 5 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.settings.link.connect_timeout = d;
        self
    }

    /// How long a command may wait for its reply (default 3 s); one that gets none fails the
    /// call with [`Error::Redis`] rather than being retried. On a Cluster, also how long,
    /// from its start, a call keeps retrying a command refused while the lock's slot migrates
    /// or a replica takes over.
    pub fn response_timeout(mut self, d: Duration) -> Self {
        self.settings.link.response_timeout = d;
        self
    }

    /// Credentials for the master (and its replicas) of a [Sentinel
    /// client](Client::sentinel_builder); the sentinels' own go in their URLs. A client of
    /// one server takes its credentials from its URL, and refuses this at `build()`.
    pub fn master_credentials(mut self, username: Option<&str>, password: &str) -> Self {
        match &mut self.deployment {
            Deployment::Sentinel(spec) => {
                spec.username = username.map(str::to_string);
                spec.password = Some(password.to_string());
            }
            Deployment::Url(_) | Deployment::Cluster(_) => self.misused_master_credentials = true,
        }
        self
    }

    /// For `rediss://` servers (and Sentinel and Cluster nodes reached over TLS): trust the CA
    /// in `root_cert` instead of the webpki roots, and with `client_tls`, present that
    /// certificate and key (mutual TLS, for a server run with `tls-auth-clients yes`). Both
    /// in PEM. One configuration serves every connection of the client: on Sentinel, the
    /// sentinels, each master they name and the pub/sub connection to it; on a Cluster,
    /// every node. A certificate or key that cannot be read fails `build()` with
    /// [`Error::InvalidArgument`]; a server that refuses them fails it with [`Error::Redis`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let certs = redlatch::TlsCertificates {
    ///     root_cert: Some(std::fs::read("ca.crt")?),
    ///     client_tls: Some(redlatch::ClientTlsConfig {
    ///         client_cert: std::fs::read("client.crt")?,
    ///         client_key: std::fs::read("client.key")?,
    ///     }),
    /// };
    /// let client = redlatch::Client::builder("rediss://redis.internal:6380/")
    ///     .tls_certificates(certs)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_certificates(mut self, certs: TlsCertificates) -> Self {
        self.tls_certificates = Some(certs);
        self
    }

    /// After each acquisition, wait until `count` replicas have acknowledged it (Redis `WAIT`),
    /// at most `timeout`; if fewer did, the lock is released again and the call fails with
    /// [`Error::NotReplicated`]. Off by default.
    ///
    /// The trade-off: a failover can lose an acquisition that no replica had received, and
    /// then two clients hold the lock; with this, an acquisition that returns has reached
    /// `count` replicas, so a failover to one of them keeps it (Redis gives no stronger
    /// promise: the replica Sentinel promotes may still be another one, and `WAIT` does not
    /// make replication synchronous). It costs a round trip and the replication delay on every
    /// acquisition, a hand-over is confirmed with an attempt instead of taken from the
    /// message, and with fewer than `count` replicas up, no lock can be taken at all.
    pub fn wait_for_replicas(mut self, count: u32, timeout: Duration) -> Self {
        self.replicas = Some(Replicas { count, timeout });
        self
    }

    /// Checks the settings, connects once to check the server and the credentials, and starts
    /// the subscriber and renewal threads.
    pub fn build(self) -> Result<Client> {
        let prefix = match (self.layout, &self.prefix) {
            (Layout::Redisson, Some(prefix)) => {
                return Err(Error::invalid(format!(
                    "key_prefix({prefix:?}) has no place in Layout::Redisson: Redisson's keys \
                     are the names themselves (map the names as the Java side's NameMapper does)"
                )));
            }
            (_, prefix) => prefix.clone().unwrap_or_else(|| DEFAULT_PREFIX.to_string()),
        };
        crate::keys::check_prefix(&prefix)?;
        validate_duration(
            "watchdog_timeout",
            self.watchdog_timeout,
            MIN_WATCHDOG_TIMEOUT,
        )?;
        validate_duration(
            "fence_retention",
            self.fence_retention,
            Duration::from_secs(1),
        )?;
        if self.settings.pool_size == 0 {
            return Err(Error::invalid("pool_size must be at least 1"));
        }
        if !(1..=MAX_WATCHDOG_BATCH_SIZE).contains(&self.watchdog_batch_size) {
            return Err(Error::invalid(format!(
                "watchdog_batch_size of {} is out of range: from 1 to {}",
                self.watchdog_batch_size, MAX_WATCHDOG_BATCH_SIZE
            )));
        }
        validate_duration(
            "fair_wait_timeout",
            self.fair_wait_timeout,
            Duration::from_millis(1),
        )?;
        for (what, d) in [
            ("connect_timeout", self.settings.link.connect_timeout),
            ("response_timeout", self.settings.link.response_timeout),
        ] {
            validate_duration(what, d, Duration::from_millis(1))?;
        }

        if self.misused_master_credentials {
            return Err(Error::invalid(
                "master_credentials is for Sentinel clients; put credentials in the URL",
            ));
        }
        if self.replicas.is_some() && matches!(self.deployment, Deployment::Cluster(_)) {
            // WAIT has no key: a ClusterConnection would send it to any node, not to the
            // master that took the lock.
            return Err(Error::invalid(
                "wait_for_replicas is not supported on a Redis Cluster client",
            ));
        }
        if let Some(replicas) = self.replicas {
            if replicas.count == 0 {
                return Err(Error::invalid(
                    "wait_for_replicas needs at least one replica",
                ));
            }
            validate_duration(
                "wait_for_replicas timeout",
                replicas.timeout,
                Duration::from_millis(1),
            )?;
            let response_timeout = self.settings.link.response_timeout;
            if replicas.timeout >= response_timeout {
                return Err(Error::invalid(format!(
                    "the wait_for_replicas timeout of {} must be shorter than the \
                     response_timeout of {}",
                    Words(replicas.timeout),
                    Words(response_timeout)
                )));
            }
        }
        let name = self.name.as_deref().unwrap_or(DEFAULT_NAME);
        check_name(name)?;
        let id = uuid::Uuid::new_v4().to_string();
        let mut settings = self.settings;
        settings.link.name = Some(format!("{name}:{id}").into());
        #[cfg(feature = "tls")]
        if let Some(certs) = &self.tls_certificates {
            settings.link.tls = TlsConfig::new(certs)?;
        }
        let backend = Arc::new(Backend::new(&self.deployment, settings)?);
        backend.check()?;
        if let Some(replicas) = self.replicas {
            crate::engine::check_replicas(&backend, replicas)?;
        }

        let (errands, errands_received) = crossbeam_channel::unbounded();
        let (notices, notices_received) = crossbeam_channel::unbounded();
        let epoch = Instant::now();
        let counters = Arc::new(Counters::default());
        // The one place a client's layout chooses what it runs and how it reads messages.
        let dialect = crate::scripts::dialect(self.layout);
        let (subscriber, subscriber_task) = Subscriber::new(
            backend.clone(),
            &prefix,
            &id,
            dialect,
            errands,
            counters.clone(),
        )?;
        let core = Arc::new(Core {
            id,
            prefix,
            layout: self.layout,
            dialect,
            watchdog_timeout: self.watchdog_timeout,
            fence_retention: self.fence_retention,
            backend,
            holds: Holds::default(),
            leftovers: Default::default(),
            doubts: Default::default(),
            subscriber,
            epoch,
            replicas: self.replicas,
            to_renewal: Arc::new(ToRenewal::new(notices, epoch)),
            counters,
            cancel: Default::default(),
            watchdog_batch_size: self.watchdog_batch_size,
            fair_wait_timeout: self.fair_wait_timeout,
            name_mapper: self.name_mapper,
        });

        let (stop_renewal, renewal_stopped) = crossbeam_channel::bounded(0);
        let renewal_stopped_for_follow = renewal_stopped.clone();
        let renewal_core = core.clone();
        let renewal = std::thread::Builder::new()
            .name("redlatch-renewal".into())
            .spawn(move || {
                let inbox = crate::renewal::Inbox {
                    stop: renewal_stopped,
                    errands: errands_received,
                    notices: notices_received,
                    on_lost: self.on_lost,
                };
                crate::renewal::run(renewal_core, inbox)
            })
            .map_err(Error::Thread)?;
        // Sentinel only: following the master is slow when the sentinels do not answer, so
        // it runs beside renewal rather than in its way. Not joined on drop, like the
        // subscriber: it leaves within a second, or when the discovery in progress ends.
        if let Some(every) = core.backend.follow_interval() {
            let (follow_core, follow_stop) = (core.clone(), renewal_stopped_for_follow);
            std::thread::Builder::new()
                .name("redlatch-sentinel".into())
                .spawn(move || {
                    let ring = || follow_core.subscriber.ring();
                    crate::backend::sentinel::follow(&follow_core.backend, follow_stop, every, ring)
                })
                .map_err(Error::Thread)?;
        }
        let subscriber = std::thread::Builder::new()
            .name("redlatch-subscriber".into())
            .spawn(move || subscriber_task.run())
            .map_err(Error::Thread)?;

        Ok(Client {
            runtime: Arc::new(Runtime {
                core,
                stop_renewal: Some(stop_renewal),
                renewal: Some(renewal),
                subscriber: Some(subscriber),
            }),
        })
    }
}

/// Checks a [`ClientBuilder::name`]: what `CLIENT SETNAME` takes (no spaces, newlines or
/// other characters outside `!`..`~`), and short.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_CLIENT_NAME_LEN {
        return Err(Error::invalid(format!(
            "client name {name:?} must be 1 to {MAX_CLIENT_NAME_LEN} characters long"
        )));
    }
    if let Some(c) = name.chars().find(|c| !('!'..='~').contains(c)) {
        return Err(Error::invalid(format!(
            "client name {name:?} contains {c:?}: CLIENT SETNAME takes printable ASCII \
             without spaces"
        )));
    }
    Ok(())
}
