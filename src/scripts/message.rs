//! The messages our scripts publish on an object's channel, parsed: the one place that
//! knows their text (Redisson's layout publishes integers instead: `redisson::Wakes`).

use std::time::Duration;

/// What the scripts that free an object publish on its channel (`release.lua`,
/// `force_unlock.lua`, `shares_*.lua`, `latch_count_down.lua`, `counting_*.lua`), parsed: the one place that
/// knows the messages' text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Message<'a> {
    /// `grant <token> <lease ms> <owner>[ <token> <owner>]...`: the object was handed to
    /// each `owner` (waiters still waiting, oldest first) with its fencing `token`, for
    /// `lease` unless renewed. A lock grants one owner; a kind with shares may grant several
    /// in one message.
    Grant { lease: Duration, grants: Grants<'a> },
    /// `unlock`: freed, with only stale places queued: one waiter should try.
    Unlock,
    /// `force`: deleted by a force-unlock: every waiter should try.
    Force,
    /// `open <µs>`: a count-down latch reached zero at that server time: every waiter goes
    /// through, and one whose last look at the count came before then needs no other
    /// (`open` alone, from an earlier version, says no time).
    Open { at_us: Option<u64> },
    /// `free <n>`: a counting semaphore has `n` (above 0) permits free now
    /// (`counting_add.lua`, `counting_try_set.lua`): every waiter should try, since a waiter
    /// that wants more than `n` cannot pass its wake-up on to one that wants less.
    Free { count: u64 },
}

/// The `(token, owner)` pairs of a [`Message::Grant`], checked when parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grants<'a> {
    first: (u64, &'a str),
    /// `<token> <owner>` pairs after the first, separated by single spaces.
    rest: &'a str,
}

impl<'a> Grants<'a> {
    /// Every `(token, owner)`, in the order granted.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &'a str)> + use<'a> {
        let mut words = self.rest.split(' ').filter(|w| !w.is_empty());
        let more = std::iter::from_fn(move || {
            let token = words.next()?.parse().ok()?;
            Some((token, words.next()?))
        });
        std::iter::once(self.first).chain(more)
    }
}

impl<'a> Message<'a> {
    /// The message `payload` carries; `None` for anything our scripts never publish.
    pub fn parse(payload: &'a [u8]) -> Option<Message<'a>> {
        match payload {
            b"unlock" => return Some(Message::Unlock),
            b"force" => return Some(Message::Force),
            b"open" => return Some(Message::Open { at_us: None }),
            _ => {}
        }
        if let Some(count) = payload.strip_prefix(b"free ") {
            let count = std::str::from_utf8(count).ok()?;
            let count = count
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| count.parse().ok())??;
            return Some(Message::Free { count });
        }
        if let Some(at) = payload.strip_prefix(b"open ") {
            let at = std::str::from_utf8(at).ok()?;
            let at_us = at
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| at.parse().ok())??;
            return Some(Message::Open { at_us: Some(at_us) });
        }
        let grant = std::str::from_utf8(payload.strip_prefix(b"grant ")?).ok()?;
        let mut parts = grant.splitn(4, ' ');
        let token = parts.next()?.parse().ok()?;
        let lease = Duration::from_millis(parts.next()?.parse().ok()?);
        let owner = parts.next().filter(|o| !o.is_empty())?;
        let rest = parts.next().unwrap_or("");
        // Whole pairs only: a token that is a number, and an owner after it. Checked word by
        // word, never collected: anyone may publish on our channels, and a message of a
        // million spaces collected cost 16 bytes a space (the fuzzer's heap bound).
        let mut words = rest.split(' ');
        let pairs_ok = rest.is_empty()
            || loop {
                match (words.next(), words.next()) {
                    (None, _) => break true,
                    (Some(token), Some(owner)) => {
                        if token.parse::<u64>().is_err() || owner.is_empty() {
                            break false;
                        }
                    }
                    (Some(_), None) => break false,
                }
            };
        pairs_ok.then_some(Message::Grant {
            lease,
            grants: Grants {
                first: (token, owner),
                rest,
            },
        })
    }

    /// The payload of a grant of `grants`, as the scripts publish it: for tests that play a
    /// release's part.
    #[cfg(test)]
    pub fn grant(lease: Duration, grants: &[(u64, &str)]) -> Vec<u8> {
        let pairs: Vec<String> = grants.iter().map(|(t, o)| format!("{t} {o}")).collect();
        let (first, rest) = pairs.split_first().expect("at least one grant");
        let (token, owner) = first.split_once(' ').unwrap();
        let mut payload = format!("grant {token} {} {owner}", lease.as_millis());
        for pair in rest {
            payload.push(' ');
            payload.push_str(pair);
        }
        payload.into_bytes()
    }

    /// The payload of `unlock`, `force` or `open`.
    #[cfg(test)]
    pub fn payload(&self) -> Vec<u8> {
        match self {
            Message::Unlock => b"unlock".to_vec(),
            Message::Force => b"force".to_vec(),
            Message::Open { at_us: None } => b"open".to_vec(),
            Message::Open { at_us: Some(at) } => format!("open {at}").into_bytes(),
            Message::Free { count } => format!("free {count}").into_bytes(),
            Message::Grant { .. } => panic!("use Message::grant"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text `release.lua` and `force_unlock.lua` publish (their `string.format` and
    /// literals), and what is not theirs.
    #[test]
    fn messages_parse_as_the_scripts_publish_them() {
        fn grants(m: Option<Message<'_>>) -> Option<(Duration, Vec<(u64, &str)>)> {
            match m {
                Some(Message::Grant { lease, grants }) => Some((lease, grants.iter().collect())),
                _ => None,
            }
        }
        assert_eq!(
            grants(Message::parse(b"grant 42 30000 c0ffee:7")),
            Some((Duration::from_secs(30), vec![(42, "c0ffee:7")]))
        );
        assert_eq!(
            grants(Message::parse(b"grant 42 500 c:7 43 c:8 44 d:1")),
            Some((
                Duration::from_millis(500),
                vec![(42, "c:7"), (43, "c:8"), (44, "d:1")]
            ))
        );
        assert_eq!(Message::parse(b"unlock"), Some(Message::Unlock));
        assert_eq!(Message::parse(b"force"), Some(Message::Force));
        assert_eq!(Message::parse(b"open"), Some(Message::Open { at_us: None }));
        assert_eq!(
            Message::parse(b"open 1795548688566984"),
            Some(Message::Open {
                at_us: Some(1795548688566984)
            })
        );
        assert_eq!(Message::parse(b"free 3"), Some(Message::Free { count: 3 }));
        assert_eq!(
            Message::parse(&Message::Free { count: 7 }.payload()),
            Some(Message::Free { count: 7 })
        );
        for foreign in [&b"free "[..], b"free -1", b"free x", b"free 1 2", b"free"] {
            assert_eq!(Message::parse(foreign), None, "{foreign:?}");
        }
        for foreign in [
            &b"open "[..],
            b"open x",
            b"open -1",
            b"open 1 2",
            b"open +1",
        ] {
            assert_eq!(Message::parse(foreign), None, "{foreign:?}");
        }
        for foreign in [
            &b"grant"[..],
            b"grant 42",
            b"grant 42 30000",
            b"grant 42 30000 ",
            b"grant x 30000 o:1",
            b"grant 42 -1 o:1",
            b"grant 42 1 o:1 43",
            b"grant 42 1 o:1 x o:2",
            b"grant 42 1 o:1 43 ",
            b"grant 42 1 o:1  o:2",
            b"unlock ",
            b"opened",
            b"hello",
            b"",
        ] {
            assert_eq!(Message::parse(foreign), None, "{foreign:?}");
        }
        // What the fuzzer found taking 16 bytes of heap per space (pubsub_message), and a
        // million spaces: foreign, and read without collecting the words.
        let mut spaced = Vec::new();
        spaced.extend_from_slice(b"grant 2 50 0 4 c");
        spaced.extend([b' '; 76]);
        spaced.extend_from_slice(b"c:7 4 :750");
        spaced.extend([b' '; 176]);
        spaced.extend_from_slice(b"c:7 4 :7 4 c 0 c:7 4 can]t 4 \x00rc:7 4 c 5]t 4 \x000");
        assert_eq!(Message::parse(&spaced), None);
        let mut spaced = b"grant 2 50 o:1 ".to_vec();
        spaced.extend(vec![b' '; 1 << 20]);
        assert_eq!(Message::parse(&spaced), None);
        assert_eq!(
            grants(Message::parse(b"grant 2 50 o:1 3 o:2 4 o:3")).map(|(_, g)| g.len()),
            Some(3)
        );
        let payload = Message::grant(Duration::from_millis(1500), &[(9, "id:3"), (10, "id:4")]);
        assert_eq!(payload, b"grant 9 1500 id:3 10 id:4");
        assert_eq!(
            grants(Message::parse(&payload)),
            Some((Duration::from_millis(1500), vec![(9, "id:3"), (10, "id:4")]))
        );
    }
}
