//! Other clients' turn at a lock in Redisson's layout: while another client waits for a lock,
//! our releases give its waiters a chance at it instead of keeping it among our threads.
//!
//! Redisson's lock has no queue: a release publishes `0`, which wakes one waiter per client,
//! and whoever's attempt reaches Redis first takes the lock. Ours won that race nearly every
//! time: the thread that released asks again at once, a waiter of ours wakes in process
//! (a Java waiter's wake-up goes through Netty and a parked thread before its attempt), and
//! three releases in four went to a thread of ours without any race (`engine::local`).
//! Measured against the real Redisson (`tests/redisson_java_fleet.rs`: 8 threads a side on
//! one lock, 1 ms holds, no pause between them, 60 s), ours took 96.5% of the acquisitions,
//! and a Java thread waited up to 5.3 s (p99 3.8 s).
//!
//! So while another client listens on the lock's channel (Redisson subscribes while one of
//! its threads waits, and so do we), a release of ours
//! - hands the lock to a thread of ours at most [`HANDED_WHILE_OTHERS_WAIT`] times in a row
//!   ([`Turns::may_hand_over`]); the next one frees it and publishes, as a Java release does;
//! - having freed it, opens a *turn* for the others: for [`TURN`] no thread of this client
//!   attempts the lock. A thread that asks for it, or a waiter woken by the release's own
//!   message, sleeps until the turn ends, then attempts as usual. The other client's
//!   waiter, woken by the same message, takes the lock meanwhile, and ours wait for its
//!   release, whose message wakes one of them to race the other client's threads as
//!   Redisson's clients race each other.
//!
//! A turn is short beside the hand-offs it gives away: it covers the other side's wake-up,
//! not its round trip (our attempt would make the same one). With both, the fleet above
//! shared 52.6% (ours) to 47.4%, the longest wait 0.23 s ours and 0.31 s Java's, at the
//! same throughput; two Java services on one lock share about 65 to 35 among themselves.
//! The number of hand-overs is what sets the balance: with none, Java's threads (whose
//! releasing thread asks again at once) took 65 to 75%; with three, ours took 75 to 80%.
//!
//! Whether another client listens is Redis's answer to `PUBSUB NUMSUB` on the lock's channel,
//! less our own subscription. It is asked only about a lock an attempt of ours lately found
//! busy, and at most once per [`RECHECK`] per lock, so an uncontended lock never pays for it,
//! and a lock only this client uses pays one command per [`RECHECK`] under contention and
//! nothing else. Not on a Cluster, whose channels are counted per node: there a release races
//! as before.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a release of ours leaves a freed lock to the other clients: longer than a Java
/// waiter takes from the release's message to sending its attempt, short beside a hold.
pub(crate) const TURN: Duration = Duration::from_millis(1);

/// How many releases in a row may hand a lock to a thread of ours while another client
/// waits for it (`engine::local`'s own limit, three, holds otherwise).
const HANDED_WHILE_OTHERS_WAIT: u32 = 2;

/// How long Redis's answer on whether other clients listen is trusted.
const RECHECK: Duration = Duration::from_millis(250);

/// How long after an attempt of ours found a lock busy it counts as contended.
const CONTENDED: Duration = Duration::from_secs(1);

/// How long our subscriber may stay subscribed to a lock's channel after its last waiter
/// left (the subscriber lingers, `subscriber::LINGER`), with room for its thread to get to it.
const OUR_LINGER: Duration = Duration::from_millis(300);

/// Past this many locks remembered, the ones with nothing left to remember are forgotten.
const TIDY_ABOVE: usize = 64;

/// What this client knows of the other users of its locks in Redisson's layout, by lock key.
#[derive(Default)]
pub(crate) struct Turns {
    map: Mutex<Locks>,
}

#[derive(Default)]
struct Locks {
    by_key: HashMap<Arc<str>, Turn>,
    /// Tidy when there are this many (doubles with what tidying cannot forget).
    tidy_at: usize,
}

#[derive(Debug, Default)]
struct Turn {
    /// Threads of ours waiting for the lock now, and when the last one left.
    waiting: u32,
    left: Option<Instant>,
    /// When an attempt of ours last found the lock busy.
    busy: Option<Instant>,
    /// Whether another client listened on the lock's channel, and when Redis said so.
    others: Option<(bool, Instant)>,
    /// No thread of ours attempts the lock before then.
    until: Option<Instant>,
    /// Hand-overs to threads of ours since a release of ours last freed the lock.
    handed: u32,
}

impl Turn {
    /// Nothing left to remember at `now`.
    fn idle(&self, now: Instant) -> bool {
        self.waiting == 0
            && self.left.is_none_or(|t| now >= t + OUR_LINGER)
            && self.busy.is_none_or(|t| now >= t + CONTENDED)
            && self.until.is_none_or(|t| now >= t)
    }
}

/// A thread of ours waiting for a lock (see [`Turns::waiting`]); it leaves on drop.
pub(crate) struct Waiting<'a> {
    turns: &'a Turns,
    lock_key: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut locks = self.turns.map.lock();
        if let Some(turn) = locks.by_key.get_mut(self.lock_key) {
            turn.waiting = turn.waiting.saturating_sub(1);
            if turn.waiting == 0 {
                turn.left = Some(Instant::now());
            }
        }
    }
}

impl Turns {
    /// A thread of ours starts waiting for lock `lock_key` (so our subscriber listens on its
    /// channel), until the result is dropped.
    pub fn waiting<'a>(&'a self, lock_key: &'a str) -> Waiting<'a> {
        self.with(lock_key, |turn| turn.waiting += 1);
        Waiting {
            turns: self,
            lock_key,
        }
    }

    /// An attempt of ours found lock `lock_key` busy.
    pub fn found_busy(&self, lock_key: &str) {
        self.with(lock_key, |turn| turn.busy = Some(Instant::now()));
    }

    /// Whether a release of ours may hand lock `lock_key` to a thread of ours: always while
    /// no other client waits for it (as Redis last said), else [`HANDED_WHILE_OTHERS_WAIT`]
    /// times after each release that freed it. Counts the hand-over it allows.
    pub fn may_hand_over(&self, lock_key: &str) -> bool {
        let mut locks = self.map.lock();
        let Some(turn) = locks.by_key.get_mut(lock_key) else {
            return true;
        };
        let others = turn
            .others
            .is_some_and(|(others, asked)| others && asked.elapsed() < RECHECK);
        if others && turn.handed >= HANDED_WHILE_OTHERS_WAIT {
            return false;
        }
        turn.handed = turn.handed.saturating_add(1);
        true
    }

    /// Until when this client leaves lock `lock_key` to the others; `None`: attempt now.
    pub fn open_until(&self, lock_key: &str) -> Option<Instant> {
        let locks = self.map.lock();
        let until = locks.by_key.get(lock_key)?.until?;
        (Instant::now() < until).then_some(until)
    }

    /// A release of ours freed lock `lock_key`. If an attempt of ours lately found it busy
    /// and another client listens on its channel, a turn opens for them. `listeners` asks
    /// Redis how many clients listen (`None` when it could not say); it is called only when
    /// the last answer is too old, without the registry's lock.
    pub fn freed(&self, lock_key: &str, listeners: impl FnOnce() -> Option<u64>) {
        let now = Instant::now();
        let known = {
            let locks = self.map.lock();
            let Some(turn) = locks.by_key.get(lock_key) else {
                return;
            };
            if turn.busy.is_none_or(|t| now >= t + CONTENDED) {
                return;
            }
            turn.others
                .filter(|(_, asked)| now < *asked + RECHECK)
                .map(|(others, _)| others)
        };
        let others = match known {
            Some(others) => others,
            None => {
                let listeners = listeners();
                let mut locks = self.map.lock();
                let Some(turn) = locks.by_key.get_mut(lock_key) else {
                    return;
                };
                // Our subscriber is one of them while a thread of ours waits, and lingers a
                // while after the last one left.
                let ours = turn.waiting > 0 || turn.left.is_some_and(|t| now < t + OUR_LINGER);
                let others = listeners.is_some_and(|n| n > u64::from(ours));
                turn.others = Some((others, now));
                others
            }
        };
        self.with(lock_key, |turn| {
            turn.handed = 0;
            if others {
                turn.until = Some(now + TURN);
            }
        });
    }

    fn with(&self, lock_key: &str, f: impl FnOnce(&mut Turn)) {
        let mut locks = self.map.lock();
        if let Some(turn) = locks.by_key.get_mut(lock_key) {
            return f(turn);
        }
        if locks.by_key.len() >= locks.tidy_at.max(TIDY_ABOVE) {
            let now = Instant::now();
            locks.by_key.retain(|_, turn| !turn.idle(now));
            locks.tidy_at = locks.by_key.len() * 2;
        }
        f(locks.by_key.entry(Arc::from(lock_key)).or_default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_uncontended_lock_asks_nothing_and_opens_no_turn() {
        let turns = Turns::default();
        turns.freed("a", || panic!("asked about a lock never found busy"));
        assert_eq!(turns.open_until("a"), None);
    }

    #[test]
    fn a_contended_lock_opens_a_turn_when_another_client_listens() {
        let turns = Turns::default();
        turns.found_busy("a");
        turns.freed("a", || Some(1));
        let until = turns.open_until("a").expect("a turn is open");
        assert!(until <= Instant::now() + TURN);
        assert_eq!(turns.open_until("b"), None, "only for that lock");
        std::thread::sleep(TURN);
        assert_eq!(turns.open_until("a"), None, "the turn ends");
        // The answer is kept for a while: no second question.
        turns.freed("a", || panic!("asked again at once"));
        assert!(turns.open_until("a").is_some());
    }

    #[test]
    fn our_own_subscription_is_not_another_client() {
        let turns = Turns::default();
        turns.found_busy("a");
        let waiting = turns.waiting("a");
        turns.freed("a", || Some(1));
        assert_eq!(turns.open_until("a"), None, "the one listener is ours");
        drop(waiting);
        // Our subscriber lingers after the last waiter left.
        turns.map.lock().by_key.get_mut("a").unwrap().others = None;
        turns.freed("a", || Some(1));
        assert_eq!(
            turns.open_until("a"),
            None,
            "the one listener is still ours"
        );
        turns.map.lock().by_key.get_mut("a").unwrap().others = None;
        turns.freed("a", || Some(2));
        assert!(turns.open_until("a").is_some(), "ours and another");
    }

    #[test]
    fn hand_overs_in_a_row_are_few_while_another_client_waits() {
        let turns = Turns::default();
        assert!(turns.may_hand_over("a"), "a lock nobody else waits for");
        turns.found_busy("a");
        for _ in 0..10 {
            assert!(turns.may_hand_over("a"), "nobody else waits: no limit here");
        }
        turns.freed("a", || Some(2));
        for _ in 0..HANDED_WHILE_OTHERS_WAIT {
            assert!(turns.may_hand_over("a"));
        }
        assert!(!turns.may_hand_over("a"), "the next release frees it");
        turns.freed("a", || panic!("asked again at once"));
        assert!(
            turns.may_hand_over("a"),
            "counted again from a release that freed it"
        );
    }

    #[test]
    fn no_answer_opens_no_turn() {
        let turns = Turns::default();
        turns.found_busy("a");
        turns.freed("a", || None);
        assert_eq!(turns.open_until("a"), None);
    }

    #[test]
    fn a_lock_not_found_busy_lately_opens_no_turn() {
        let turns = Turns::default();
        turns.found_busy("a");
        turns.map.lock().by_key.get_mut("a").unwrap().busy =
            Some(Instant::now() - CONTENDED - Duration::from_millis(1));
        turns.freed("a", || panic!("asked about a lock not contended lately"));
        assert_eq!(turns.open_until("a"), None);
    }

    #[test]
    fn locks_with_nothing_left_to_remember_are_forgotten() {
        let turns = Turns::default();
        for i in 0..TIDY_ABOVE {
            turns.found_busy(&format!("k{i}"));
        }
        let _still_waiting = turns.waiting("k0");
        for turn in turns.map.lock().by_key.values_mut() {
            turn.busy = Some(Instant::now() - CONTENDED - Duration::from_millis(1));
        }
        turns.found_busy("new");
        let locks = turns.map.lock();
        let mut kept: Vec<&str> = locks.by_key.keys().map(|k| &**k).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["k0", "new"], "a lock a thread waits for is kept");
    }
}
