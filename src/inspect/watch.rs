//! [`Client::watch`]: what an object's channels carry, as it comes, on a subscription of the
//! watch's own.

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime};

use redis::Value;

use super::{ObjectKind, lock_places};
use crate::backend::link::Link;
use crate::client::Client;
use crate::core::Core;
use crate::engine;
use crate::error::{Error, Result};
use crate::keys::{Family, Layout, LockKeys};
use crate::scripts;

impl Client {
    /// Listens on the channels of object `name` of `kind` for at most `duration` (`None`:
    /// until `each` says stop), calling `each` with every message: when it came and what it
    /// says (`grant <token> <lease ms> <owner>...` for a hand-over, `unlock`, `force`,
    /// `open <server time, µs>`, `free <n>` for a counting semaphore's permits free after a
    /// release; in [`Layout::Redisson`] Redisson's messages, a counting semaphore's its bare
    /// new count). `each` returns `false` to stop; it is asked at each message. A connection that
    /// fails ends the watch with [`Error::Redis`]. On a Cluster it subscribes on the shard that
    /// owns the object, with `SSUBSCRIBE` where the cluster publishes that way.
    ///
    /// A release hands an object over on the new holders' clients' grant channels (see the
    /// guide's [data layout](crate::guide::data_layout)). Where pattern subscriptions are allowed (one server or Sentinel, and an
    /// ACL that permits the pattern), the watch takes every grant channel with one
    /// `PSUBSCRIBE`. Elsewhere (sharded pub/sub, or an ACL that allows channels but not that
    /// pattern) it subscribes the grant channel of each client it finds queued, when it starts
    /// and after each message; a hand-over to a client that began waiting after the last
    /// message is then not shown.
    pub fn watch(
        &self,
        kind: ObjectKind,
        name: &str,
        duration: Option<Duration>,
        mut each: impl FnMut(SystemTime, &str) -> bool,
    ) -> Result<()> {
        let core = self.core();
        engine::check_name(core, kind.family(), name)?;
        let keys = core.keys(kind.family(), name);
        let sharded = core.backend.sharded_pubsub();
        let mut link = core.backend.link_for_slot(keys.slot())?;
        let subscribe = if sharded { "SSUBSCRIBE" } else { "SUBSCRIBE" };
        link.send(
            &redis::cmd(subscribe)
                .arg(keys.channel())
                .get_packed_command(),
        )?;
        let mut watch = Watch {
            end: duration.and_then(|d| Instant::now().checked_add(d)),
            each: &mut each,
            stopped: false,
        };
        // Grant channels: all of them by pattern where that is allowed, else client by client.
        let mut following = None;
        if keys.layout == Layout::Redisson && keys.family == Family::Lock && !sharded {
            // A fair lock's waiters each listen on `<channel>:<owner>`.
            let pattern = format!("{}:*", glob_escape(keys.channel()));
            link.send(&redis::cmd("PSUBSCRIBE").arg(pattern).get_packed_command())?;
            watch.until_answer(&mut link, "psubscribe")?;
        }
        if keys.grant_channel("").is_some() {
            let by_pattern = !sharded && {
                let pattern = format!("{}:*", glob_escape(keys.channel()));
                link.send(&redis::cmd("PSUBSCRIBE").arg(pattern).get_packed_command())?;
                watch.until_answer(&mut link, "psubscribe")?
            };
            if !by_pattern {
                following = Some(HashSet::new());
            }
        }
        loop {
            if let Some(followed) = &mut following {
                follow_queued(core, &keys, &mut link, subscribe, followed)?;
            }
            if watch.stopped || watch.next(&mut link)?.is_none() {
                return Ok(());
            }
        }
    }
}

/// A watch under way: when it ends, and whom it tells of each message.
struct Watch<'a, F: FnMut(SystemTime, &str) -> bool> {
    end: Option<Instant>,
    each: &'a mut F,
    stopped: bool,
}

impl<F: FnMut(SystemTime, &str) -> bool> Watch<'_, F> {
    /// Reads the next frame and passes it on if it is a message. `None` once the watch is
    /// over (its time is up, or `each` said stop).
    fn next(&mut self, link: &mut Link) -> Result<Option<Value>> {
        let left = self
            .end
            .map(|e| e.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) || self.stopped {
            return Ok(None);
        }
        // A read that times out closes the connection (a frame may be half read), so the
        // only timeout is the end of the watch.
        link.set_response_timeout(left);
        let frame = match link.receive() {
            Ok(frame) => frame,
            Err(e) if e.is_timeout() => return Ok(None),
            Err(e) => return Err(Error::Redis(e)),
        };
        if let Some(payload) = message_payload(&frame)
            && !(self.each)(SystemTime::now(), &payload)
        {
            self.stopped = true;
            return Ok(None);
        }
        Ok(Some(frame))
    }

    /// Reads until the answer to a subscription of kind `kind`, passing messages on: whether
    /// it was a confirmation rather than a refusal.
    fn until_answer(&mut self, link: &mut Link, kind: &str) -> Result<bool> {
        while let Some(frame) = self.next(link)? {
            match &frame {
                Value::ServerError(_) => return Ok(false),
                Value::Array(items) | Value::Push { data: items, .. }
                    if items.first().is_some_and(|first| {
                        redis::from_redis_value::<String>(first.clone()).is_ok_and(|k| k == kind)
                    }) =>
                {
                    return Ok(true);
                }
                _ => {}
            }
        }
        Ok(false)
    }
}

/// Subscribes, on `link`, the grant channel of every client queued for lock `keys` that is
/// not in `followed` yet.
fn follow_queued(
    core: &Core,
    keys: &LockKeys,
    link: &mut Link,
    subscribe: &str,
    followed: &mut HashSet<String>,
) -> Result<()> {
    let owners: Vec<String> = if keys.family == Family::Lock {
        let places = core
            .backend
            .run(|con| lock_places(con, keys))
            .map_err(Error::Redis)?;
        places
            .iter()
            .filter_map(|(member, arrival)| scripts::Place::parse(member, *arrival))
            .map(|place| place.owner.to_string())
            .collect()
    } else {
        core.backend
            .run(|con| redis::cmd("HKEYS").arg(keys.waiters()).query(con))
            .map_err(Error::Redis)?
    };
    for owner in owners {
        let client = owner.split(':').next().unwrap_or_default();
        if let Some(channel) = keys.grant_channel(client)
            && followed.insert(channel.clone())
        {
            link.send(&redis::cmd(subscribe).arg(channel).get_packed_command())?;
        }
    }
    Ok(())
}

/// `text` as a glob pattern that matches only itself.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The payload of a pub/sub `message`, `smessage` or `pmessage` frame; `None` for a
/// subscription's confirmation and anything else.
fn message_payload(frame: &Value) -> Option<String> {
    let items = match frame {
        Value::Array(items) | Value::Push { data: items, .. } => items,
        _ => return None,
    };
    let kind: String = redis::from_redis_value(items.first()?.clone()).ok()?;
    let at = match kind.as_str() {
        "message" | "smessage" => 2,
        "pmessage" => 3,
        _ => return None,
    };
    redis::from_redis_value(items.get(at)?.clone()).ok()
}
