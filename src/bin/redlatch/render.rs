//! What the tool prints: a report as JSON, a channel's messages in words, the listing's
//! footer, and the names of kinds; nothing here talks to Redis but `Clients::read`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redlatch::{Client, Layout, ObjectKind, Report};

/// A kind in words: `counting semaphore` where its short name is `counting`.
pub(crate) fn kind_name(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::ReadWriteLock => "read-write lock",
        ObjectKind::CountingSemaphore => "counting semaphore",
        kind => kind.as_str(),
    }
}

/// `kinds` as `lock, semaphore`.
pub(crate) fn kind_names(kinds: &[ObjectKind]) -> String {
    let names: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
    names.join(", ")
}

/// The lines after `list`'s objects: what is not listed, and why.
pub(crate) fn list_footer(listing: &redlatch::Listing, fences_shown: bool) -> String {
    let mut footer = String::new();
    let kept = listing.kept_fences.len();
    if kept > 0 && !fences_shown {
        footer.push_str(&format!(
            "({kept} fencing counter{} kept from objects that went: not objects; --fences names them)\n",
            if kept == 1 { "" } else { "s" }
        ));
    }
    let counts = listing.unattributed_counts;
    if counts > 0 {
        footer.push_str(&format!(
            "({counts} key{} holding a bare count not shown: a latch, semaphore or counting \
             semaphore nobody uses looks like any counter; inspect NAME --kind latch (or \
             counting) reads one)\n",
            if counts == 1 { "" } else { "s" }
        ));
    }
    footer
}

pub(crate) fn report_json(r: &Report) -> String {
    let opt = |v: Option<u64>| v.map_or("null".to_string(), |v| v.to_string());
    let holders: Vec<String> = r
        .holders
        .iter()
        .map(|h| {
            format!(
                "{{\"owner\":{},\"count\":{},\"token\":{},\"lease_left_ms\":{},\"writer\":{},\"client_name\":{},\"client_addr\":{}}}",
                json_string(&h.owner),
                h.count,
                opt(h.token),
                opt(h.lease_left.map(|d| d.as_millis() as u64)),
                h.writer,
                opt_string(h.client_name.as_deref()),
                opt_string(h.client_addr.as_deref()),
            )
        })
        .collect();
    let queue: Vec<String> = r
        .queue
        .iter()
        .map(|w| {
            format!(
                "{{\"owner\":{},\"terms\":{},\"valid_for_ms\":{},\"handover_lease_ms\":{},\"permits\":{},\"writer\":{},\"granted\":{},\"client_name\":{},\"client_addr\":{}}}",
                json_string(&w.owner),
                json_string(&w.terms),
                opt(w.valid_for.map(|d| d.as_millis() as u64)),
                opt(w.handover_lease.map(|d| d.as_millis() as u64)),
                opt(w.permits),
                w.writer,
                opt(w.granted),
                opt_string(w.client_name.as_deref()),
                opt_string(w.client_addr.as_deref()),
            )
        })
        .collect();
    format!(
        "{{\"kind\":\"{}\",\"name\":{},\"key\":{},\"ttl_ms\":{},\"fence\":{},\"subscribers\":{},\"count\":{},\"available\":{},\"holders\":[{}],\"queue\":[{}]}}",
        r.kind.as_str(),
        json_string(&r.name),
        json_string(&r.key),
        opt(r.ttl.map(|d| d.as_millis() as u64)),
        opt(r.fence),
        r.subscribers,
        opt(r.count),
        r.available.map_or("null".to_string(), |a| a.to_string()),
        holders.join(","),
        queue.join(",")
    )
}

/// `s` as a JSON string, or `null`.
fn opt_string(s: Option<&str>) -> String {
    s.map_or("null".to_string(), json_string)
}

/// An owner id with the name and address of its client, where known:
/// `4e73…:1 (api@host-7 at 10.0.0.7:53422)`.
fn who(owner: &str, name: Option<&str>, addr: Option<&str>) -> String {
    match (name, addr) {
        (Some(name), Some(addr)) => format!("{owner} ({name} at {addr})"),
        (Some(name), None) => format!("{owner} ({name})"),
        _ => owner.to_string(),
    }
}

/// The clients connected to Redis, by id, for `watch` to name the owners in its messages;
/// read again when an owner of a client not seen yet shows up (at most once a second).
pub(crate) struct Clients<'a> {
    client: &'a Client,
    known: Vec<redlatch::ConnectedClient>,
    read_at: std::time::Instant,
}

impl<'a> Clients<'a> {
    pub(crate) fn read(client: &'a Client) -> Clients<'a> {
        Clients {
            client,
            known: client.connected_clients().unwrap_or_default(),
            read_at: std::time::Instant::now(),
        }
    }

    /// `owner` with its client's name and address, if they can be found.
    pub(crate) fn who(&mut self, owner: &str) -> String {
        let id = owner.split(':').next().unwrap_or_default();
        let find = |known: &[redlatch::ConnectedClient]| {
            known
                .iter()
                .find(|c| c.id == id)
                .map(|c| (c.name.clone(), c.addr.clone()))
        };
        let mut found = find(&self.known);
        if found.is_none() && self.read_at.elapsed() >= Duration::from_secs(1) {
            *self = Clients::read(self.client);
            found = find(&self.known);
        }
        match found {
            Some((name, addr)) => who(owner, Some(&name), Some(&addr)),
            None => owner.to_string(),
        }
    }
}

/// `s` as a JSON string.
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A channel message of an object of `kind` in `layout`, in words, with each owner said by
/// `who` (which names its client).
pub(crate) fn describe(
    payload: &str,
    kind: ObjectKind,
    layout: Layout,
    who: &mut dyn FnMut(&str) -> String,
) -> String {
    match layout {
        Layout::Redisson => describe_redisson(payload, kind),
        _ => describe_ours(payload, who),
    }
}

/// A message of our layout, in words.
fn describe_ours(payload: &str, who: &mut dyn FnMut(&str) -> String) -> String {
    let words: Vec<&str> = payload.split(' ').collect();
    match words.as_slice() {
        ["free", count] => format!(
            "permits given back or added: {count} free now; every waiter woken to race for them"
        ),
        ["grant", token, lease, owner, rest @ ..] => {
            let lease = match lease.parse::<u64>() {
                Ok(ms) if ms % 1000 == 0 => format!("{} s", ms / 1000),
                _ => format!("{lease} ms"),
            };
            let mut text = format!(
                "handed over with token {token} and a lease of {lease} to {}",
                who(owner)
            );
            for pair in rest.chunks(2) {
                if let [token, owner] = pair {
                    text.push_str(&format!("; with token {token} to {}", who(owner)));
                }
            }
            text
        }
        ["unlock"] => "released; nobody live was queued: one waiter per client woken to try".into(),
        ["force"] => "force-unlocked: every waiter woken".into(),
        ["open"] => "the latch reached zero: every waiter released".into(),
        _ => format!("(not redlatch's) {payload:?}"),
    }
}

/// A message of Redisson's layout, in words: Redisson's messages are bare numbers, whose
/// meaning depends on the kind whose channel carries them (see the guide's Redisson page).
fn describe_redisson(payload: &str, kind: ObjectKind) -> String {
    let number = payload.parse::<i64>().ok();
    match (kind, payload) {
        // On the lock's channel, and on a fair lock's head's own channel.
        (ObjectKind::Lock, "0") => {
            "released (Redisson's 0): a waiter of each client woken to try; on a fair \
             lock's head channel, the head told it is its turn"
                .into()
        }
        (ObjectKind::Lock, "1") => "force-unlocked (Redisson's 1): every waiter woken".into(),
        (ObjectKind::ReadWriteLock, "0") => {
            "the last read hold released (Redisson's 0): waiters woken to try".into()
        }
        (ObjectKind::ReadWriteLock, "1") => {
            "the write hold released, or the lock force-unlocked (Redisson's 1): every \
             waiter woken"
                .into()
        }
        (ObjectKind::Semaphore, _) if number.is_some() => format!(
            "{payload} (Redisson's count: permits free after a release, or the total set, or \
             the permits added): up to that many waiters woken to try"
        ),
        (ObjectKind::CountingSemaphore, _) if number.is_some() => {
            format!("the count is now {payload} (Redisson's message): every waiter woken to try")
        }
        (ObjectKind::CountDownLatch, "0") => {
            "the latch reached zero, or was deleted (Redisson's 0): every waiter released".into()
        }
        (ObjectKind::CountDownLatch, "1") => {
            "a new count was set (Redisson's 1): a new round begins".into()
        }
        _ => format!("(not Redisson's) {payload:?}"),
    }
}

/// `at` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
pub(crate) fn timestamp(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_and_json_strings() {
        let ours = Layout::Redlatch;
        let at = UNIX_EPOCH + Duration::from_millis(1_795_548_688_566);
        assert_eq!(timestamp(at), "2026-11-24T19:31:28.566Z");
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(json_string("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
        assert_eq!(
            describe("grant 7 500 c:1 8 c:2", ObjectKind::Lock, ours, &mut |o| {
                format!("{o} (api)")
            }),
            "handed over with token 7 and a lease of 500 ms to c:1 (api); with token 8 to c:2 (api)"
        );
        assert_eq!(
            describe("grant 7 30000 c:1", ObjectKind::Lock, ours, &mut |o| o
                .to_string()),
            "handed over with token 7 and a lease of 30 s to c:1"
        );
        let counting = ObjectKind::CountingSemaphore;
        assert!(describe("free 3", counting, ours, &mut |o| o.to_string()).contains("3 free now"));
        assert!(
            describe("0", ObjectKind::Lock, ours, &mut |o| o.to_string())
                .starts_with("(not redlatch's)"),
            "a bare number is none of our layout's messages"
        );
        // Redisson's bare numbers, by the kind whose channel carries them.
        let theirs =
            |payload: &str, kind| describe(payload, kind, Layout::Redisson, &mut |o| o.into());
        assert!(theirs("-2", counting).contains("count is now -2"));
        assert!(theirs("0", ObjectKind::Lock).starts_with("released"));
        assert!(theirs("1", ObjectKind::Lock).starts_with("force-unlocked"));
        assert!(theirs("1", ObjectKind::ReadWriteLock).starts_with("the write hold released"));
        assert!(theirs("0", ObjectKind::CountDownLatch).contains("reached zero"));
        assert!(theirs("4", ObjectKind::Semaphore).starts_with("4 (Redisson's count"));
        assert!(theirs("grant 7 500 c:1", ObjectKind::Lock).starts_with("(not Redisson's)"));
        assert!(theirs("2", ObjectKind::CountDownLatch).starts_with("(not Redisson's)"));
    }
}
