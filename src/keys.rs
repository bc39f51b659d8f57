//! The Redis key layout (binding: operators and ACLs depend on it; the guide's
//! [data layout](crate::guide::data_layout) page documents it for users).
//!
//! For lock `name` under prefix `p`:
//! - `p:{name}`            the lock hash: owner id -> hold count, with a PEXPIRE lease
//! - `p:{name}:fence`      the fencing counter; expires the fence retention after the lease of
//!   its latest token; a new one starts from the server's clock in µs, so tokens keep
//!   increasing across its expiry and across a restart that lost it
//! - `p:{name}:unlocked`   the channel a release publishes on (the lock's key and
//!   `:unlocked`, which `release.lua` relies on: it makes the channel rather than take it)
//! - `p:{name}:unlocked:<client id>`  where a release hands the lock to a waiter of that
//!   client, so that only its subscriber wakes (unless the hand-over's lease is shorter than
//!   the one released: then on `p:{name}:unlocked`, which every waiter hears)
//! - `p:{name}:queue`      the waiters, oldest first, each with its terms (zset: member
//!   `"<owner id> <hand-over lease ms> <valid ms>"` -> arrival, µs; the place is valid until
//!   arrival + valid ms)
//! - `p:{name}:granted`    the latest hand-over (string `"<owner id> <token>"`, living the
//!   hand-over's lease): tells a hand-over not yet taken up from a hold of the owner's own
//! - `p:{name}:released:<owner>:<token>`  a latch that makes a retried release idempotent
//!   where the connection retries out of sight (a Cluster's); lives a few seconds
//! - `p:{name}:forced:<request id>`  the same for a force-unlock
//! - `p:{name}:forced`     a force-unlock's mark for the old holder: the token it freed, why
//!   that hold is gone; lives as long as the freed lease or the latch
//!
//! A read-write lock (`p:{name}:rwlock`) and a semaphore (`p:{name}:semaphore`) keep their
//! holders in that main key (hash: owner id -> `"<count> <token>"`; a read-write lock also
//! `writer` -> the write owner) with one lease per holder in `<main>:leases` (zset: owner
//! id -> lease end, ms), the same `:fence`, `:unlocked`, `:unlocked:<client id>` and
//! `:released:...` after the main key, and their waiters in `:queue` (zset: owner id ->
//! arrival, µs) with their terms in `:waiters` (hash: owner id -> terms, or `"granted
//! <token>"`); a semaphore's total is `<main>:permits`.
//!
//! A count-down latch is `p:{name}:latch` (string: the count), its channel
//! `p:{name}:latch:unlocked`, and `p:{name}:latch:req:<request id>` (the reply to one call,
//! for a retry; lives as long as a release latch).
//!
//! A counting semaphore (Java's `RSemaphore`: permits with no owner and no lease) is
//! `p:{name}:counting` (string: the permits free, below 0 after a negative
//! `add_permits`), its channel `p:{name}:counting:unlocked` (`free <n>`: the new count, when
//! it is above 0), and `p:{name}:counting:req:<request id>` (the reply to one call, for a
//! retry; lives as long as a release latch).
//!
//! The lock's keys share the hash tag `{name}`, so each script touches one Cluster slot.
//!
//! Under [`Layout::Redisson`] the same roles take Redisson's names instead (Redisson's
//! format, as the guide's data-layout page lists it): the main key is the name itself, the fencing
//! counter is `redisson_lock_token:{name}`, and each family has Redisson's channel.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::words::Count;

/// The longest lock name accepted, in bytes of UTF-8: 64 KiB.
///
/// A name is a key, not data: every script call carries it in four to six keys, and every
/// waiting client reads it back inside the subscription confirmations of the lock's channel.
/// The subscriber reads no bulk string over 1 MiB (a longer one means a broken stream to
/// it), so a name near that size would make the channel unreadable and its waiters wake only
/// at the lease. 64 KiB is far beyond any sensible name and leaves a wide margin, with the
/// longest [prefix](MAX_PREFIX_LEN) and key suffix, under that frame limit.
pub const MAX_NAME_LEN: usize = 64 * 1024;

/// The longest key prefix ([`ClientBuilder::key_prefix`](crate::ClientBuilder::key_prefix))
/// accepted, in bytes: 1 KiB. Every key and channel starts with it, so it counts against the
/// same frame limit as [`MAX_NAME_LEN`].
pub const MAX_PREFIX_LEN: usize = 1024;

/// Checks the name of an object (`what`: its kind in words, `lock`, `semaphore`...) before
/// anything is sent for it, for every kind: the one place where a name's limits are known.
///
/// On a Cluster a name must not begin with `}`: `p:{}x}` has no hash tag, so its keys would
/// hash to different slots.
pub(crate) fn check_name(what: &str, name: &str, cluster: bool) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(format!("{what} name must not be empty")));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "{what} name of {} bytes is too long: at most {} bytes",
            Count(name.len() as u64),
            Count(MAX_NAME_LEN as u64)
        )));
    }
    if name.starts_with('}') && cluster {
        return Err(Error::invalid(format!(
            "on a Redis Cluster, a {what} name must not begin with '}}'"
        )));
    }
    Ok(())
}

/// Checks a key prefix: not empty, no braces (a brace would move the hash tag), and at most
/// [`MAX_PREFIX_LEN`] bytes.
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() || prefix.contains(['{', '}']) {
        return Err(Error::invalid(format!(
            "key prefix {prefix:?} must be non-empty and free of braces"
        )));
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::invalid(format!(
            "key prefix of {} bytes is too long: at most {} bytes",
            Count(prefix.len() as u64),
            Count(MAX_PREFIX_LEN as u64)
        )));
    }
    Ok(())
}

/// Whose data layout a client reads and writes: ours, or Redisson's, so that a Rust service
/// and Java services that use [Redisson](https://redisson.org) take the same locks in one
/// Redis ([`ClientBuilder::layout`](crate::ClientBuilder::layout)).
///
/// Under [`Layout::Redisson`], for an object called `n` (the key itself, as Redisson's
/// default name mapper has it), with `{n}` standing for `{n}`, or for plain `n` when `n`
/// contains a `{` (Redisson's rule):
///
/// | redlatch | Java (Redisson 4.x) | in Redis |
/// | --- | --- | --- |
/// | [`Client::lock`](crate::Client::lock) | `getLock(n)`, `getFencedLock(n)` | hash `n`: `<client id>:<thread>` → hold count, with a lease; channel `redisson_lock__channel:{n}`; tokens from `redisson_lock_token:{n}` |
/// | [`Client::fair_lock`](crate::Client::fair_lock) | `getFairLock(n)` | the same hash; queue `redisson_lock_queue:{n}`, deadlines `redisson_lock_timeout:{n}` (epoch ms), a channel `redisson_lock__channel:{n}:<owner>` per waiter |
/// | [`Client::spin_lock`](crate::Client::spin_lock) | `getSpinLock(n)` | the same hash |
/// | [`Client::multi_lock`](crate::Client::multi_lock), [`RedlockClient`](crate::RedlockClient) | `getMultiLock`, `RedissonRedLock` over `getLock` | the members' hashes |
/// | [`Client::read_write_lock`](crate::Client::read_write_lock) | `getReadWriteLock(n)` | hash `n`: `mode` → `read`/`write`, each reader `<client id>:<thread>` → its reads, the writer `<client id>:<thread>:write` → its writes; per read hold `k` a key `{n}:<reader>:rwlock_timeout:<k>` with the hold's lease; channel `redisson_rwlock:{n}` (`0` after a read unlock frees it, `1` after a write unlock); writes take tokens from `redisson_lock_token:{n}` |
/// | [`Client::semaphore`](crate::Client::semaphore) | `getPermitExpirableSemaphore(n)` | string `n`: the permits free; zset `{n}:timeout`: permit id (16 raw bytes) → lease end (epoch ms); channel `redisson_sc:{n}` (counts); tokens from `redisson_lock_token:{n}` |
/// | [`Client::count_down_latch`](crate::Client::count_down_latch) | `getCountDownLatch(n)` | string `n`; channel `redisson_countdownlatch__channel__{n}` |
/// | [`Client::counting_semaphore`](crate::Client::counting_semaphore) | `getSemaphore(n)` | string `n`: the permits free (may be below 0); channel `redisson_sc:{n}` (the new count), shared with `getPermitExpirableSemaphore(n)` |
///
/// Where the two differ, Redisson's rules hold for what Redis holds: the plain lock is not
/// fair (a release wakes one waiter per client, and they race; within a client a release
/// hands the lock to a waiting thread), the read-write lock and the semaphore keep no queue,
/// and objects of different kinds with the same name share the key `n` (a lock and a
/// read-write lock refuse each other's hash with [`WrongType`](crate::Error::WrongType),
/// writing nothing: the [guide](crate::guide::redisson) says which calls). Guards, re-entry,
/// [`WouldDeadlock`](crate::Error::WouldDeadlock), leases, `on_lock_lost` and stats stay ours.
///
/// The guide's page [Sharing locks with Java services](crate::guide::redisson) has the whole table,
/// what differs, and which Redisson versions interoperate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Layout {
    /// redlatch's own ([its keys](crate::guide::data_layout#our-layout)): keys under the
    /// client's prefix, a fair hand-over queue, fencing tokens on every kind.
    #[default]
    Redlatch,
    /// Redisson 4.x's (checked against 4.7.0): its keys, fields, channels and messages.
    Redisson,
}

/// The kinds of object kept in Redis. Each has keys of its own, all under the name's hash
/// tag: objects of different families never share a key, so a lock and, say, a semaphore of
/// the same name are two objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// `Lock`, `SpinLock`, and the members of `MultiLock` and `Redlock`: `p:{name}`.
    Lock,
    /// `ReadWriteLock`: `p:{name}:rwlock`.
    ReadWrite,
    /// `Semaphore`: `p:{name}:semaphore`.
    Semaphore,
    /// `CountDownLatch`: `p:{name}:latch`.
    Latch,
    /// `CountingSemaphore`: `p:{name}:counting`. In Redisson's layout the key and channel of
    /// `Semaphore`'s (Java's `getSemaphore` and `getPermitExpirableSemaphore` share them).
    Counting,
}

impl Family {
    /// The kind in words, for messages: `lock`, `read-write lock`, `semaphore`, `latch`,
    /// `counting semaphore`.
    pub fn noun(self) -> &'static str {
        match self {
            Family::Lock => "lock",
            Family::ReadWrite => "read-write lock",
            Family::Semaphore => "semaphore",
            Family::Latch => "latch",
            Family::Counting => "counting semaphore",
        }
    }

    /// What follows `p:{name}` in the object's main key (and starts its other keys).
    fn suffix(self) -> &'static str {
        match self {
            Family::Lock => "",
            Family::ReadWrite => ":rwlock",
            Family::Semaphore => ":semaphore",
            Family::Latch => ":latch",
            Family::Counting => ":counting",
        }
    }

    const ALL: [Family; 5] = [
        Family::Lock,
        Family::ReadWrite,
        Family::Semaphore,
        Family::Latch,
        Family::Counting,
    ];
}

/// The keys and channel of one object: a lock, or an object of another [`Family`]. The
/// scripts of every family use the same roles: a main key, a fencing counter, a channel,
/// a wait queue and the waiters' terms.
///
/// All of them are kept in one string, one after the other, so that naming an object costs
/// one allocation: a lock is often named for one use (`client.lock(&format!("invoice:{id}"))`),
/// and seven strings made with `format!` were a fifth of the client's instructions per lock and
/// unlock (callgrind).
#[derive(Debug)]
pub(crate) struct LockKeys {
    pub family: Family,
    pub layout: Layout,
    /// A Redisson fair lock's (`getFairLock`): the lock's hash, with Redisson's queue and
    /// deadlines, and a channel per waiter.
    pub fair: bool,
    /// The name, then each key in the order of [`Part`].
    text: String,
    /// Where each part ends in `text`.
    ends: [usize; PARTS],
}

/// The parts of [`LockKeys::text`], in order.
#[derive(Clone, Copy)]
enum Part {
    Name,
    Lock,
    Fence,
    Channel,
    Queue,
    Waiters,
    Granted,
}

const PARTS: usize = 7;

impl LockKeys {
    /// The keys of lock `name` under `prefix`.
    #[cfg(test)]
    pub fn new(prefix: &str, name: &str) -> LockKeys {
        LockKeys::of(Family::Lock, prefix, name)
    }

    /// The keys of the object of `family` called `name`, under `prefix`.
    pub fn of(family: Family, prefix: &str, name: &str) -> LockKeys {
        const SUFFIXES: [&str; 5] = [":fence", ":unlocked", ":queue", ":waiters", ":granted"];
        let main = [prefix, ":{", name, "}", family.suffix()];
        let main_len: usize = main.iter().map(|s| s.len()).sum();
        let suffixes_len: usize = SUFFIXES.iter().map(|s| s.len()).sum();
        let mut text = String::with_capacity(name.len() + 6 * main_len + suffixes_len);
        let mut ends = [0; PARTS];
        text.push_str(name);
        ends[Part::Name as usize] = text.len();
        main.iter().for_each(|s| text.push_str(s));
        ends[Part::Lock as usize] = text.len();
        for (i, suffix) in SUFFIXES.iter().enumerate() {
            text.extend_from_within(ends[Part::Name as usize]..ends[Part::Lock as usize]);
            text.push_str(suffix);
            ends[Part::Fence as usize + i] = text.len();
        }
        LockKeys {
            family,
            layout: Layout::Redlatch,
            fair: false,
            text,
            ends,
        }
    }

    /// The keys of the object of `family` called `name` in Redisson's layout: the main key is
    /// `name` itself; the token counter, the channel, and a fair lock's queue and deadlines
    /// follow Redisson's `{name}` rule ([`redisson_tagged`]). [`queue`](LockKeys::queue) is a
    /// fair lock's queue (a semaphore's permit zset: [`suffixed`](LockKeys::suffixed)),
    /// [`waiters`](LockKeys::waiters) a fair lock's deadlines, and [`granted`](LockKeys::granted)
    /// the start of every unlock latch ([`unlock_latch`](LockKeys::unlock_latch)).
    pub fn redisson(family: Family, name: &str) -> LockKeys {
        LockKeys::redisson_with_channel(family, name, None)
    }

    /// [`LockKeys::redisson`], with the lock's channel followed by `:<waiter>` when given: a
    /// fair lock's waiter listens on a channel of its own.
    fn redisson_with_channel(family: Family, name: &str, waiter: Option<&str>) -> LockKeys {
        let channel = match family {
            Family::Lock => {
                let channel = redisson_tagged("redisson_lock__channel", name);
                match waiter {
                    Some(waiter) => format!("{channel}:{waiter}"),
                    None => channel,
                }
            }
            Family::ReadWrite => redisson_tagged("redisson_rwlock", name),
            Family::Semaphore | Family::Counting => redisson_tagged("redisson_sc", name),
            // Always braces, even around a name with braces of its own: Redisson builds this
            // one by concatenation (an exception in Redisson's format).
            Family::Latch => format!("redisson_countdownlatch__channel__{{{name}}}"),
        };
        let parts = [
            name,
            name,
            &redisson_tagged("redisson_lock_token", name),
            &channel,
            &redisson_tagged("redisson_lock_queue", name),
            &redisson_tagged("redisson_lock_timeout", name),
            &redisson_tagged("redisson_unlock_latch", name),
        ];
        let mut text = String::with_capacity(parts.iter().map(|p| p.len()).sum());
        let mut ends = [0; PARTS];
        for (i, part) in parts.iter().enumerate() {
            text.push_str(part);
            ends[i] = text.len();
        }
        LockKeys {
            family,
            layout: Layout::Redisson,
            fair: false,
            text,
            ends,
        }
    }

    /// The keys of Redisson's fair lock called `name`: the lock's ([`LockKeys::redisson`]),
    /// for scripts that keep a queue.
    pub fn redisson_fair(name: &str) -> LockKeys {
        LockKeys {
            fair: true,
            ..LockKeys::redisson(Family::Lock, name)
        }
    }

    /// The keys of Redisson's fair lock called `name` as its waiter `owner` sees them: the
    /// channel is the waiter's own, `redisson_lock__channel:{<name>}:<owner>`, where a
    /// release that makes it the head of the queue wakes it.
    pub fn redisson_fair_waiter(name: &str, owner: &str) -> LockKeys {
        LockKeys {
            fair: true,
            ..LockKeys::redisson_with_channel(Family::Lock, name, Some(owner))
        }
    }

    fn part(&self, part: Part) -> &str {
        let end = self.ends[part as usize];
        let start = match part as usize {
            0 => 0,
            i => self.ends[i - 1],
        };
        &self.text[start..end]
    }

    /// The object's name, as the user gave it.
    pub fn name(&self) -> &str {
        self.part(Part::Name)
    }

    /// The main key: `p:{name}` for a lock, `p:{name}:<family>` for the others.
    pub fn lock(&self) -> &str {
        self.part(Part::Lock)
    }

    /// The fencing counter.
    pub fn fence(&self) -> &str {
        self.part(Part::Fence)
    }

    /// The channel releases publish on.
    pub fn channel(&self) -> &str {
        self.part(Part::Channel)
    }

    /// The wait queue.
    pub fn queue(&self) -> &str {
        self.part(Part::Queue)
    }

    /// The waiters' terms of a kind with shares (hash: owner id -> terms).
    pub fn waiters(&self) -> &str {
        self.part(Part::Waiters)
    }

    /// A lock's hand-over mark: `"<owner> <token>"` of its latest hand-over (`release.lua`).
    pub fn granted(&self) -> &str {
        self.part(Part::Granted)
    }

    /// Redisson's unlock latch for the release named `request` (32 hex digits):
    /// `redisson_unlock_latch:{name}:<request>`, which makes a retried release answer what its
    /// first run did.
    pub fn unlock_latch(&self, request: &str) -> String {
        format!("{}:{request}", self.granted())
    }

    /// Redisson's suffix form of the name: `{name}:<suffix>`, or `name:<suffix>` when the name
    /// contains `{` ([`tagged_name`](LockKeys::tagged_name)).
    pub fn suffixed(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.tagged_name())
    }

    /// What Redisson's suffix form puts in front of a suffix: `{name}`, or `name` itself when
    /// it contains `{` (so that the keys hash to the name's slot either way).
    pub fn tagged_name(&self) -> String {
        let name = self.name();
        if name.contains('{') {
            name.to_string()
        } else {
            format!("{{{name}}}")
        }
    }

    /// The owner id (the field in Redis) of a read (`read`) or of the write of this
    /// read-write lock by the thread whose owner id is `thread`: ours `<thread>:r` for a read
    /// and `<thread>` for a write; Redisson's `<thread>` for a read and `<thread>:write` for a
    /// write (Redisson's format). Either way a thread's read and its write are two
    /// holders.
    pub fn rw_owner(&self, thread: &Arc<str>, read: bool) -> Arc<str> {
        match (self.layout, read) {
            (Layout::Redlatch, true) => format!("{thread}:r").into(),
            (Layout::Redisson, false) => format!("{thread}:write").into(),
            _ => thread.clone(), // the thread's id itself: no new string
        }
    }

    /// Whether `owner`, a holder of this read-write lock, holds a read (see
    /// [`rw_owner`](LockKeys::rw_owner)).
    pub fn reads(&self, owner: &str) -> bool {
        match self.layout {
            Layout::Redlatch => owner.ends_with(":r"),
            Layout::Redisson => !owner.ends_with(":write"),
        }
    }

    /// The object whose channel is `channel`, under `prefix`: the inverse of
    /// [`LockKeys::of`]. Unambiguous, since a family's suffix follows the closing brace
    /// directly, and a name can only put a brace before `:unlocked` for the lock itself.
    pub fn from_channel(prefix: &str, channel: &str) -> Option<LockKeys> {
        let tagged = channel
            .strip_prefix(prefix)?
            .strip_prefix(":{")?
            .strip_suffix(":unlocked")?;
        Family::ALL.into_iter().find_map(|family| {
            let name = tagged.strip_suffix(family.suffix())?.strip_suffix('}')?;
            Some(LockKeys::of(family, prefix, name))
        })
    }

    /// The channel on which a release hands this object to waiters of client `client_id`:
    /// `<channel>:<client id>`, for every family but a latch and a counting semaphore, which
    /// grant nothing.
    ///
    /// Waiters of one client subscribe it with the object's channel, in one command. The
    /// release scripts name it from the owner ids they grant to (`<client id>:...`), and use
    /// it when the new leases end no earlier than the released hold's (`release.lua`,
    /// `shares.lua`); otherwise, and for grants no release made, the object's channel.
    /// Redisson's layout has no grants: a release wakes waiters, which attempt again.
    pub fn grant_channel(&self, client_id: &str) -> Option<String> {
        let grants = !matches!(self.family, Family::Latch | Family::Counting);
        (grants && self.layout == Layout::Redlatch)
            .then(|| format!("{}:{client_id}", self.channel()))
    }

    /// The Redis Cluster slot of every key of this lock: CRC16 (XMODEM) of the hash tag, mod
    /// 16384, as the server computes it.
    pub fn slot(&self) -> u16 {
        key_slot(self.lock().as_bytes())
    }

    /// The latch that records the final release of the hold `owner` took with `token`.
    pub fn release_latch(&self, owner: &str, token: u64) -> String {
        format!("{}:released:{owner}:{token}", self.lock())
    }

    /// The lease of each holder of a kind with shares (a read-write lock, a semaphore):
    /// zset owner -> lease end. In Redisson's layout, a semaphore's permits held,
    /// `{name}:timeout` (permit id -> lease end).
    pub fn leases(&self) -> String {
        match self.layout {
            Layout::Redlatch => format!("{}:leases", self.lock()),
            Layout::Redisson => self.suffixed("timeout"),
        }
    }

    /// A semaphore's total number of permits.
    pub fn permits(&self) -> String {
        format!("{}:permits", self.lock())
    }

    /// The marker that records the reply to a latch's call `request` (a count-down, a new
    /// count), so that a retry after a lost reply answers the same.
    pub fn request_marker(&self, request: &str) -> String {
        format!("{}:req:{request}", self.lock())
    }

    /// The mark a force-unlock leaves for a while, so that the old holder's client can tell
    /// why its hold is gone.
    pub fn forced_mark(&self) -> String {
        format!("{}:forced", self.lock())
    }

    /// The latch that records the outcome of force-unlock request `request`.
    pub fn force_latch(&self, request: &str) -> String {
        format!("{}:forced:{request}", self.lock())
    }
}

/// Redisson's prefix form: `<prefix>:{name}`, or `<prefix>:name` when the name contains a
/// `{` anywhere (not only at its start), so that every key and channel of the object hashes
/// to the slot of the name itself.
pub(crate) fn redisson_tagged(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The number of hash slots of a Redis Cluster.
pub(crate) const SLOTS: u16 = 16384;

/// The Redis Cluster slot of `key`: CRC16/XMODEM of its hash tag (the text between the first
/// `{` and the next `}`, if not empty), else of the whole key, mod 16384.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|b| *b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for byte in hashed {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_computed_as_the_server_does() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(key_slot(b"123456789"), 0x31C3); // the CRC16 check value
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{foo}foo3"), 12182);
        assert_eq!(key_slot(b"{}foo"), key_slot(b"{}foo")); // empty tag: whole key
        assert_ne!(key_slot(b"{}foo"), key_slot(b""));
        let keys = LockKeys::new("p", "foo");
        assert_eq!(keys.slot(), 12182);
        for family in Family::ALL {
            let keys = LockKeys::of(family, "p", "foo");
            assert_eq!(keys.slot(), 12182);
            // The main key and ":unlocked", for every family (release.lua makes it so).
            assert_eq!(keys.channel(), format!("{}:unlocked", keys.lock()));
            let back = LockKeys::from_channel("p", keys.channel()).unwrap();
            assert_eq!((back.family, back.name()), (family, "foo"));
            let tricky = LockKeys::of(family, "p", "a}:b}");
            let back = LockKeys::from_channel("p", tricky.channel()).unwrap();
            assert_eq!((back.family, back.name()), (family, "a}:b}"));
        }
        assert!(LockKeys::from_channel("q", keys.channel()).is_none());
        assert!(LockKeys::from_channel("p", "p:{foo}:other").is_none());
        for key in [
            keys.fence(),
            keys.queue(),
            keys.waiters(),
            keys.granted(),
            keys.channel(),
        ] {
            assert_eq!(key_slot(key.as_bytes()), keys.slot());
        }
        assert_eq!(
            key_slot(keys.release_latch("o:1", 7).as_bytes()),
            keys.slot()
        );
    }
}
