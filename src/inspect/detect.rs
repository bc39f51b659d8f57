//! Which kind of object a name is, from what Redis has under it ([`Client::detect`]), so that
//! an operator can say `redlatch inspect NAME` without knowing the kind, and hear when
//! nothing by that name exists.
//!
//! In our layout each kind has keys of its own (`p:{name}`, `p:{name}:rwlock`, ...), so the
//! kinds are told apart by which keys exist, and a name may be several objects at once. In
//! Redisson's the kinds share the key `name`, so its type and fields tell
//! (`redisson::shape_of`), and a count nobody uses can be a latch, a semaphore, a counting
//! semaphore or anyone's counter.

use redis::{ConnectionLike, RedisResult};

use super::{Listed, Listeners, ObjectKind, redisson};
use crate::client::Client;
use crate::core::Core;
use crate::error::{Error, Result};
use crate::keys::Layout;

/// What Redis has under one name, as [`Client::detect`] reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Detected {
    /// The objects of that name, at most one per kind, in [`ObjectKind`] order. `active`:
    /// held, waited for or counting; not active: only a total (a semaphore's), a count
    /// nobody waits for (a counting semaphore's) or a fencing counter kept after its object
    /// went (see [`Listing::kept_fences`](super::Listing)).
    pub found: Vec<Listed>,
    /// The kinds the name may be when Redis cannot tell ([`Layout::Redisson`]'s count with no
    /// permit out and nobody waiting: a semaphore or counting semaphore nobody uses, a
    /// latch, or an application's counter). [`found`](Detected::found) is empty then.
    pub could_be: Vec<ObjectKind>,
    /// The Redis type of what the name's key holds when it is not an object of the client's
    /// layout ([`Layout::Redisson`]: a hash or string not shaped as Redisson's, a list...).
    pub foreign: Option<String>,
}

impl Detected {
    /// Whether nothing of any kind was found under the name, and nothing foreign either.
    pub fn is_nothing(&self) -> bool {
        self.found.is_empty() && self.could_be.is_empty() && self.foreign.is_none()
    }
}

impl Client {
    /// Which objects are called `name` in Redis, by the keys they leave (two server round
    /// trips in our layout, the second for a counting semaphore's waiters; in
    /// [`Layout::Redisson`] a few, reading the type and fields of the key `name` and who
    /// listens on its channels). Reads only.
    ///
    /// ```no_run
    /// # fn main() -> redlatch::Result<()> {
    /// let client = redlatch::Client::open("redis://127.0.0.1/")?;
    /// let detected = client.detect("invoice:42")?;
    /// if detected.is_nothing() {
    ///     println!("nothing called invoice:42");
    /// }
    /// for object in &detected.found {
    ///     print!("{}", client.inspect(object.kind, &object.name)?);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn detect(&self, name: &str) -> Result<Detected> {
        let core = self.core();
        // Any kind's name: the refusal cannot name one.
        crate::keys::check_name("object", name, core.backend.is_cluster())?;
        let listeners = Listeners::of(core);
        let read = |con: &mut dyn ConnectionLike| match core.layout {
            Layout::Redisson => redisson::detect(con, name, listeners),
            Layout::Redlatch => ours(con, core, name, listeners),
        };
        if core.backend.is_cluster() {
            // PUBSUB (Redisson's layout) names no key to route by: ask the master of the
            // name's slot, which has every key and shard channel of the name (classic
            // channels' listeners are counted where they are: `Listeners`).
            let slot = core.keys(ObjectKind::Lock.family(), name).slot();
            let mut link = core.backend.link_for_slot(slot).map_err(Error::Redis)?;
            read(&mut link)
        } else {
            core.backend.run(read)
        }
        .map_err(Error::Redis)
    }
}

/// Our layout: each kind by its own keys, in one pipeline; a counting semaphore also by the
/// listeners of its channel, its waiters, who leave no key (they queue nowhere).
fn ours(
    con: &mut dyn ConnectionLike,
    core: &Core,
    name: &str,
    listeners: Listeners,
) -> RedisResult<Detected> {
    let mut pipe = redis::pipe();
    for kind in ObjectKind::ALL {
        let keys = core.keys(kind.family(), name);
        // In use: the main key (holders, a latch's count) or a queue of waiters. Left after
        // use: a semaphore's total (no other kind has one), the fencing counter.
        pipe.cmd("EXISTS").arg(keys.lock()).arg(keys.queue());
        pipe.cmd("EXISTS").arg(keys.permits()).arg(keys.fence());
    }
    let counts: Vec<u64> = pipe.query(con)?;
    let counting = core.keys(ObjectKind::CountingSemaphore.family(), name);
    let waited = listeners.on(con, counting.channel())? > 0;
    let mut detected = Detected::default();
    for (kind, c) in ObjectKind::ALL.into_iter().zip(counts.chunks(2)) {
        // A counting semaphore's count stays for good, so only its waiters say it is in use.
        let (present, active) = match kind {
            ObjectKind::CountingSemaphore => (c[0] > 0 || waited, waited),
            _ => (c[0] > 0 || c[1] > 0, c[0] > 0),
        };
        if present {
            detected.found.push(Listed {
                kind,
                name: name.to_string(),
                active,
            });
        }
    }
    Ok(detected)
}
