//! [`Redlock`]: one lock over N independent Redis masters (made by a [`RedlockClient`]), held while a majority holds it.
//!
//! The algorithm is Redis's Redlock, with Redisson's `RedissonRedlock` semantics: a lock is
//! acquired when a majority of the masters grant it within its validity time (the lease minus
//! the time the attempt took minus an allowance for clock drift), released on every master,
//! and, with the watchdog, renewed on every master by each master's client, lost once fewer
//! than a majority still hold it. Each master is an ordinary redlatch lock (one [`Client`]
//! per master), so waiting uses the same queues and hand-overs and no thread polls.
//!
//! # Fencing tokens
//! Redlock cannot give one fencing token that increases from holder to holder: each master
//! counts on its own, and two majorities need share only one master. [`RedlockGuard`] returns
//! every master's token ([`RedlockGuard::fencing_tokens`]); a resource that wants fencing must
//! keep, per master, the last token it saw and refuse a write whose token is older on any
//! master the writer holds. Tokens are at least each server's clock in microseconds, so they
//! also grow across restarts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::engine::{deadline_after, validate_duration};
use crate::error::{Error, Result};
use crate::kinds::lock::{Lock, LockGuard};
use crate::kinds::{check_composite, drop_lost};

/// Redlock's allowance for clock drift between the client and the masters: this fraction of
/// the lease, plus [`DRIFT_MIN`].
const DRIFT_FACTOR: f64 = 0.01;
const DRIFT_MIN: Duration = Duration::from_millis(2);

/// Independent masters to take locks on by majority, made from one [`Client`] per master:
/// what [`Redlock`]s are made from, as [`Lock`]s are made from a [`Client`].
///
/// Over clients in [`Layout::Redisson`](crate::Layout::Redisson), each member is Redisson's
/// lock of the name on its master, as Java's `RedissonRedLock` over `getLock(name)` of each
/// master takes it: the two exclude each other by majority.
///
/// ```no_run
/// # fn main() -> redlatch::Result<()> {
/// use redlatch::{Client, RedlockClient};
/// let masters = ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"]
///     .iter()
///     .map(|url| Client::open(url))
///     .collect::<redlatch::Result<Vec<_>>>()?;
/// let masters = RedlockClient::new(masters)?;
/// let guard = masters.lock("invoice:42").lock()?;
/// assert!(!guard.is_lost());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedlockClient {
    clients: Vec<Client>,
}

impl RedlockClient {
    /// Over the masters that `clients` talk to, one each. Their number should be odd (3 or
    /// 5): a majority of an even number tolerates no more failures than of one fewer.
    ///
    /// Fails with [`Error::InvalidArgument`] naming the duplicate when two of `clients` are
    /// one server: the same client (or a clone), or two clients of one address (`host:port`
    /// or socket path, whatever the database number: another database of one process fails
    /// with it; `localhost`, `127.0.0.1` and `::1` count as one). A server given twice
    /// would count twice towards the majority, which it alone could then make. Told apart
    /// by what each client was given, without I/O: two names of one host (a DNS name and its
    /// address) are not caught, nor a server given once directly and once through Sentinel
    /// or as a Cluster's seed; two Sentinel clients of one master name sharing a sentinel
    /// are, and two Cluster clients sharing a seed.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// use redlatch::{Client, RedlockClient};
    /// let one = Client::open("redis://10.0.0.1/")?;
    /// let refused = RedlockClient::new(vec![one.clone(), one.clone(), one]);
    /// assert!(matches!(refused, Err(redlatch::Error::InvalidArgument(_))));
    /// # Ok(()) }
    /// ```
    pub fn new(clients: Vec<Client>) -> Result<RedlockClient> {
        if clients.is_empty() {
            return Err(Error::invalid("a Redlock needs at least one master"));
        }
        let servers: Vec<_> = clients.iter().map(|c| c.core().backend.servers()).collect();
        for (j, later) in clients.iter().enumerate() {
            for (i, earlier) in clients[..j].iter().enumerate() {
                if Arc::ptr_eq(earlier.core(), later.core()) {
                    return Err(Error::invalid(format!(
                        "Redlock masters {i} and {j} are one client (a clone, id {}): a \
                         master given twice would count twice towards the majority; give \
                         each master once",
                        earlier.id()
                    )));
                }
                let same = servers[i]
                    .iter()
                    .find_map(|a| servers[j].iter().find(|b| a.key == b.key).map(|b| (a, b)));
                if let Some((a, b)) = same {
                    let server = if a.shown == b.shown {
                        a.shown.clone()
                    } else {
                        format!("{} and {}", a.shown, b.shown)
                    };
                    return Err(Error::invalid(format!(
                        "Redlock masters {i} and {j} are one server ({server}): a master \
                         given twice would count twice towards the majority; give each \
                         master once"
                    )));
                }
            }
        }
        Ok(RedlockClient { clients })
    }

    /// How many masters must hold a lock.
    pub fn majority(&self) -> usize {
        self.clients.len() / 2 + 1
    }

    /// A handle on the lock called `name` on every master. No I/O.
    pub fn lock(&self, name: &str) -> Redlock {
        Redlock {
            locks: self.clients.iter().map(|c| c.lock(name)).collect(),
            majority: self.majority(),
        }
    }
}

/// One lock over a [`RedlockClient`]'s masters, held while a majority holds it.
#[derive(Clone, Debug)]
pub struct Redlock {
    /// One per master, in the masters' order.
    locks: Vec<Lock>,
    majority: usize,
}

impl Redlock {
    /// The same handle, whose waits end with
    /// [`Error::Cancelled`](crate::Error::Cancelled) once `cancel` is cancelled (at once if it
    /// already is): what was taken on other masters is released. See [`Cancel`](crate::Cancel).
    /// [`Client::cancel_all_waits`](crate::Client::cancel_all_waits) of one master's client
    /// ends a wait on that master, which ends the Redlock's wait too.
    pub fn cancel_on(&self, cancel: &crate::Cancel) -> Redlock {
        Redlock {
            locks: self.locks.iter().map(|l| l.cancel_on(cancel)).collect(),
            majority: self.majority,
        }
    }

    /// Waits as long as it takes, then holds the lock on a majority (at least) of the masters
    /// with the watchdog.
    pub fn lock(&self) -> Result<RedlockGuard> {
        self.acquire(None, None)
            .map(|g| g.expect("an unbounded wait only ends with the lock"))
    }

    /// Waits at most `wait`; `Ok(None)` if no majority could be had in time, and then no
    /// master holds it for us. `lease: Some(l)` is the Redlock lease: the lock is valid for
    /// `l` minus the time taking it took, minus the clock-drift allowance (1 % + 2 ms), and
    /// an attempt that leaves no validity counts as failed. Fails with [`Error::Redis`] when
    /// fewer than a majority of the masters answer.
    pub fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<RedlockGuard>> {
        validate_duration("wait", wait, Duration::ZERO)?;
        self.acquire(Some(wait), lease)
    }

    fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<RedlockGuard>> {
        check_composite(&self.locks, lease, "Redlock")?;
        let deadline = deadline_after(wait);
        let n = self.locks.len();
        let mut held: Vec<Option<LockGuard>> = (0..n).map(|_| None).collect();
        loop {
            // A master kept while waiting on a later one may have lost our lock meanwhile
            // (taken from us, or its lease ran out there): it no longer counts, and the round
            // below asks it again.
            drop_lost(&mut held);
            let started = Instant::now();
            let mut busy = Vec::new();
            let mut failures = Vec::new();
            for (i, lock) in self.locks.iter().enumerate() {
                if held[i].is_some() {
                    continue;
                }
                match lock.try_lock(Duration::ZERO, lease) {
                    Ok(Some(guard)) => held[i] = Some(guard),
                    Ok(None) => busy.push(i),
                    // Dropping `held` releases what we took.
                    Err(e) if e.is_cancelled() => return Err(e),
                    Err(e) => failures.push(e),
                }
            }
            let have = held.iter().flatten().filter(|g| !g.is_lost()).count();
            let valid = lease.is_none_or(|l| started.elapsed() + drift(l) < l);
            if have >= self.majority && valid {
                return Ok(Some(RedlockGuard {
                    members: held,
                    majority: self.majority,
                }));
            }
            if n - failures.len() < self.majority {
                // Dropping `held` releases what we took.
                let cause = failures
                    .into_iter()
                    .next()
                    .map_or_else(String::new, |e| e.to_string());
                return Err(Error::Redis(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "fewer than a majority of the Redlock masters answered",
                    cause,
                ))));
            }
            let Some(&next) = busy.first() else {
                // Taken everywhere that answered, but too slowly for the lease: start over,
                // while there is time.
                held.iter_mut().for_each(|g| drop(g.take()));
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(None);
                }
                continue;
            };
            // Wait for the first busy master in the masters' order, keeping only what comes
            // before it: every thread waits in that one order, so no two wait for each other.
            // A fixed lease keeps nothing: its validity is counted from one round.
            let keep = if lease.is_some() { 0 } else { next };
            for guard in &mut held[keep..] {
                drop(guard.take());
            }
            let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if remaining.is_some_and(|r| r.is_zero()) {
                return Ok(None);
            }
            match self.locks[next].acquire(remaining, lease) {
                Ok(Some(guard)) => held[next] = Some(guard),
                Ok(None) => return Ok(None),
                Err(e) if e.is_cancelled() => return Err(e),
                Err(_) => {} // that master failed meanwhile: the next round counts it
            }
        }
    }
}

fn drift(lease: Duration) -> Duration {
    lease.mul_f64(DRIFT_FACTOR) + DRIFT_MIN
}

/// Proof of holding a [`Redlock`] on a majority of its masters; dropping it releases the lock
/// on all of them. Not `Send`, like [`LockGuard`].
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct RedlockGuard {
    /// One per master; `None` where it was not taken.
    members: Vec<Option<LockGuard>>,
    majority: usize,
}

impl RedlockGuard {
    /// How many masters still hold it for us, as far as the client knows.
    pub fn held_on(&self) -> usize {
        self.members
            .iter()
            .flatten()
            .filter(|g| !g.is_lost())
            .count()
    }

    /// Whether fewer than a majority of the masters still hold it: renewal found it gone, or
    /// the masters stopped answering and its leases ran out there.
    pub fn is_lost(&self) -> bool {
        self.held_on() < self.majority
    }

    /// How long a majority of the masters are known to hold it, with no round trip: the
    /// majority-th longest [`remaining_lease`](LockGuard::remaining_lease) of the members
    /// (zero once lost).
    pub fn remaining_lease(&self) -> Duration {
        let mut leases: Vec<Duration> = self
            .members
            .iter()
            .flatten()
            .map(LockGuard::remaining_lease)
            .collect();
        leases.sort_unstable_by(|a, b| b.cmp(a));
        leases
            .get(self.majority.saturating_sub(1))
            .copied()
            .unwrap_or(Duration::ZERO)
    }

    /// `Err(Error::LockLost)` when [`is_lost`](RedlockGuard::is_lost).
    pub fn check(&self) -> Result<()> {
        if self.is_lost() {
            Err(self.lost())
        } else {
            Ok(())
        }
    }

    /// Each master's fencing token, `None` where the lock was not taken. See the module
    /// documentation: no single one of them orders Redlock holders.
    pub fn fencing_tokens(&self) -> Vec<Option<u64>> {
        self.members
            .iter()
            .map(|g| g.as_ref().map(LockGuard::fencing_token))
            .collect()
    }

    /// Releases the lock on every master. `Err(Error::LockLost)` if fewer than a majority still
    /// held it; errors of single masters (one that is down, say) are logged, not returned,
    /// while a majority released it.
    pub fn unlock(mut self) -> Result<()> {
        let lost = self.is_lost();
        let lost_error = self.lost();
        let mut released = 0;
        for guard in self.members.iter_mut().filter_map(Option::take) {
            let name = guard.name().to_string();
            match guard.unlock() {
                Ok(()) => released += 1,
                Err(e) => log::warn!("Redlock {name:?}: one master's release failed: {e}"),
            }
        }
        if lost || released < self.majority {
            return Err(lost_error);
        }
        Ok(())
    }

    fn lost(&self) -> Error {
        let name = self
            .members
            .iter()
            .flatten()
            .next()
            .map_or_else(String::new, |g| g.name().to_string());
        Error::LockLost { name }
    }
}
