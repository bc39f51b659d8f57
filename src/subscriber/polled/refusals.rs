//! Subscriptions the server's ACL refused: said once per channel pattern to grant, with what
//! to grant, since the subscriber asks again every backoff (up to 2 s) for as long as
//! threads wait, and the log should say what to do, not how often.

use std::collections::HashSet;

use super::super::Shared;
use crate::keys::{Family, Layout};

/// The patterns whose refusal was logged as a warning; later refusals under the same
/// pattern are logged at debug level.
#[derive(Default)]
pub(super) struct Refusals {
    said: HashSet<String>,
}

impl Refusals {
    /// `node` refused to subscribe `channel` with `e` (not a redirection).
    pub fn said(&mut self, shared: &Shared, node: &str, channel: &str, e: &str) {
        let grant = grant_for(shared, channel);
        if self.said.insert(grant.clone()) {
            log::warn!(
                "redlatch: subscribing {channel} refused by {node}: {e}; grant the client's ACL \
                 user the channel pattern {grant} (ACL SETUSER <user> {grant}). Until then \
                 releases still succeed, but waiters wake only when the lease they know of runs \
                 out. Said once; later refusals are logged at debug level"
            );
        } else {
            log::debug!("redlatch: subscribing {channel} refused by {node}: {e}");
        }
    }
}

/// The ACL channel pattern that lets this client subscribe `channel`: `&<prefix>:*` in
/// our layout (every channel of ours starts with the key prefix), Redisson's pattern of
/// the object's kind in Redisson's layout (each kind's channels have their own start).
fn grant_for(shared: &Shared, channel: &str) -> String {
    let family = shared
        .entries
        .lock()
        .get(channel)
        .map(|entry| (entry.keys.layout, entry.keys.family));
    match family {
        Some((Layout::Redisson, family)) => match family {
            Family::Lock => "&redisson_lock__channel:*",
            Family::ReadWrite => "&redisson_rwlock:*",
            Family::Semaphore | Family::Counting => "&redisson_sc:*",
            Family::Latch => "&redisson_countdownlatch__channel__*",
        }
        .to_string(),
        // Gone meanwhile: its name still says whose it is.
        None if channel.starts_with("redisson_") => "&redisson_*".to_string(),
        _ => format!("&{}:*", shared.key_prefix),
    }
}
