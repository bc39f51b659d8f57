//! The in-process half of waking: which waiter gets which permit or hand-over. No Redis is
//! involved: messages are handed to the entries as the subscriber thread would hand them.

use crossbeam_channel::Receiver;

use super::*;
use crate::scripts::Message;
use crate::subscriber::Errand;

/// What a release publishes when it hands the lock to `owner`.
fn grant(token: u64, lease_ms: u64, owner: &str) -> Vec<u8> {
    Message::grant(Duration::from_millis(lease_ms), &[(token, owner)])
}
use crate::backend::{Backend, Settings};

const CLIENT: &str = "c0ffee";
const CH: &[u8] = b"p:{x}:unlocked";
const NOW: Duration = Duration::ZERO;

fn subscriber() -> (Subscriber, Receiver<Errand>, Arc<LockKeys>) {
    let settings = Settings {
        pool_size: 1,
        link: crate::backend::link::LinkSettings {
            connect_timeout: Duration::from_millis(10),
            response_timeout: Duration::from_millis(10),
            tls: Default::default(),
            name: None,
        },
    };
    // Never connected, and no thread runs the task: nothing here does I/O.
    let backend = Arc::new(
        Backend::new(
            &crate::backend::Deployment::Url("redis://127.0.0.1:1/".into()),
            settings,
        )
        .unwrap(),
    );
    let (errands, errands_received) = crossbeam_channel::unbounded();
    let (sub, _task) = Subscriber::new(
        backend,
        "p",
        CLIENT,
        crate::scripts::dialect(crate::Layout::Redlatch),
        errands,
        Default::default(),
    )
    .unwrap();
    (sub, errands_received, Arc::new(LockKeys::new("p", "x")))
}

/// The owner id of thread `thread` of this test's client.
fn owner(thread: u64) -> Arc<str> {
    format!("{CLIENT}:{thread}").into()
}

fn entry_of(sub: &Subscriber, keys: &LockKeys) -> Arc<Entry> {
    sub.shared
        .entries
        .lock()
        .get(keys.channel())
        .cloned()
        .unwrap()
}

/// Thread 1 waiting on a channel whose subscription Redis has confirmed.
fn confirmed_first_waiter<'a>(
    sub: &'a Subscriber,
    keys: &Arc<LockKeys>,
) -> (Waiter<'a>, Arc<Entry>) {
    let first = sub.join(sub.expect(keys, &owner(1)));
    let entry = entry_of(sub, keys);
    entry.confirm();
    (first, entry)
}

fn permit(w: &Waiter<'_>) -> bool {
    w.wait(NOW) == Wake::Permit
}

#[test]
fn one_release_wakes_the_oldest_waiter_only() {
    let (sub, _, keys) = subscriber();
    let first = sub.join(sub.expect(&keys, &owner(1)));
    let second = sub.join(sub.expect(&keys, &owner(2)));
    sub.deliver(CH, &Message::Unlock.payload());
    assert!(permit(&first));
    assert!(!permit(&second));
    sub.deliver(CH, &Message::Unlock.payload());
    assert!(permit(&first) || permit(&second));
}

#[test]
fn a_permit_waits_for_a_busy_waiter_and_does_not_pile_up() {
    let (sub, _, keys) = subscriber();
    let waiter = sub.join(sub.expect(&keys, &owner(1)));
    sub.deliver(CH, &Message::Unlock.payload());
    sub.deliver(CH, &Message::Unlock.payload()); // a second release while the first permit is unused
    assert!(permit(&waiter), "a permit granted before the wait is kept");
    assert_eq!(
        waiter.wait(NOW),
        Wake::Timeout,
        "one waiter holds at most one permit"
    );
}

#[test]
fn a_waiter_leaving_with_an_unused_permit_passes_it_on() {
    let (sub, _, keys) = subscriber();
    let leaving = sub.join(sub.expect(&keys, &owner(1)));
    let staying = sub.join(sub.expect(&keys, &owner(2)));
    sub.deliver(CH, &Message::Unlock.payload());
    drop(leaving); // its deadline passed before it used the wake-up
    assert!(permit(&staying));
}

#[test]
fn a_waiter_that_acquired_keeps_its_permit_to_itself() {
    let (sub, _, keys) = subscriber();
    let mut winner = sub.join(sub.expect(&keys, &owner(1)));
    let other = sub.join(sub.expect(&keys, &owner(2)));
    sub.deliver(CH, &Message::Unlock.payload());
    winner.acquired();
    drop(winner);
    assert!(!permit(&other));
}

#[test]
fn force_unlock_and_confirmation_wake_everyone_once() {
    let (sub, _, keys) = subscriber();
    let waiters: Vec<_> = (1..=3)
        .map(|t| sub.join(sub.expect(&keys, &owner(t))))
        .collect();
    sub.deliver(CH, &Message::Force.payload());
    assert!(waiters.iter().all(permit));
    assert!(waiters.iter().all(|w| !permit(w)));

    let entry = entry_of(&sub, &keys);
    entry.confirm();
    assert!(waiters.iter().all(permit));
    // A newcomer that attempts once confirmed has nothing to try again for.
    let late = sub.join(sub.expect(&keys, &owner(4)));
    assert!(!permit(&late));
}

#[test]
fn a_waiter_whose_channel_was_watched_all_along_needs_no_extra_attempt() {
    let (sub, _, keys) = subscriber();
    let (first, entry) = confirmed_first_waiter(&sub, &keys);
    assert!(permit(&first));
    let expecting = sub.expect(&keys, &owner(2)); // the attempt would go here
    let second = sub.join(expecting);
    assert_eq!(
        second.wait(NOW),
        Wake::Timeout,
        "nothing was missed: just wait"
    );

    // A gap in the subscription (a reconnect) voids the proof.
    let expecting = sub.expect(&keys, &owner(3));
    entry.state.lock().confirmed = false;
    entry.confirm();
    let third = sub.join(expecting);
    assert!(permit(&third));
}

#[test]
fn what_happens_between_attempt_and_join_is_not_missed() {
    let (sub, _, keys) = subscriber();
    let (first, _) = confirmed_first_waiter(&sub, &keys);
    assert!(permit(&first));

    // A force-unlock between the attempt and the join: try again at once.
    let expecting = sub.expect(&keys, &owner(2));
    sub.deliver(CH, &Message::Force.payload());
    let second = sub.join(expecting);
    assert!(permit(&second));

    // The lock handed to another thread meanwhile: sleep no longer than its lease.
    let expecting = sub.expect(&keys, &owner(3));
    sub.deliver(CH, &grant(5, 50, "someone-else:1"));
    let third = sub.join(expecting);
    let start = Instant::now();
    assert_eq!(third.wait(Duration::from_secs(10)), Wake::Timeout);
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_hand_over_that_overtakes_the_attempts_reply_waits_for_the_thread() {
    let (sub, errands, keys) = subscriber();
    let _other = sub.join(sub.expect(&keys, &owner(1)));
    let expecting = sub.expect(&keys, &owner(2));
    sub.deliver(CH, &grant(11, 30000, &format!("{CLIENT}:2")));
    let waiter = sub.join(expecting);
    assert!(matches!(
        waiter.wait(NOW),
        Wake::HandedOver { token: 11, .. }
    ));
    assert!(errands.try_recv().is_err());

    // A thread that then does not wait gives the early hand-over back.
    let expecting = sub.expect(&keys, &owner(3));
    sub.deliver(CH, &grant(12, 30000, &format!("{CLIENT}:3")));
    drop(expecting);
    assert!(matches!(
        errands.try_recv(),
        Ok(Errand::GiveBack { token: 12, .. })
    ));
}

#[test]
fn a_hand_over_wakes_exactly_the_thread_it_names() {
    let (sub, errands, keys) = subscriber();
    let first = sub.join(sub.expect(&keys, &owner(1)));
    let second = sub.join(sub.expect(&keys, &owner(2)));
    sub.deliver(CH, &grant(42, 30000, &format!("{CLIENT}:2")));
    assert!(matches!(
        second.wait(NOW),
        Wake::HandedOver { token: 42, .. }
    ));
    assert_eq!(first.wait(NOW), Wake::Timeout);
    assert!(errands.try_recv().is_err());
}

/// One message may grant several owners (a run of readers, permits for several waiters):
/// each waiter of ours it names gets its own token, one of another client is skipped, one of
/// ours that no longer waits is given back, and the others here sleep no longer than the
/// grant's lease.
#[test]
fn a_grant_of_several_owners_hands_each_its_own_token() {
    let (sub, errands, keys) = subscriber();
    let first = sub.join(sub.expect(&keys, &owner(1)));
    let second = sub.join(sub.expect(&keys, &owner(2)));
    let third = sub.join(sub.expect(&keys, &owner(3)));
    let payload = Message::grant(
        Duration::from_millis(40),
        &[
            (7, &owner(2)),
            (8, "another-client:1"),
            (9, &owner(1)),
            (10, &owner(6)),
        ],
    );
    sub.deliver(CH, &payload);
    assert_eq!(first.wait(NOW), Wake::HandedOver { token: 9 });
    assert_eq!(second.wait(NOW), Wake::HandedOver { token: 7 });
    let started = std::time::Instant::now();
    assert_eq!(third.wait(Duration::from_secs(5)), Wake::Timeout);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "slept past the lease"
    );
    match errands.try_recv() {
        Ok(Errand::GiveBack {
            owner: given,
            token,
            ..
        }) => {
            assert_eq!((given, token), (owner(6), 10))
        }
        _ => panic!("expected the grant to a thread that left to be given back"),
    }
    assert!(errands.try_recv().is_err());
}

#[test]
fn a_hand_over_with_a_short_lease_shortens_everyones_sleep() {
    let (sub, _, keys) = subscriber();
    let waiter = sub.join(sub.expect(&keys, &owner(1)));
    sub.deliver(CH, &grant(8, 50, "someone-else:1"));
    let start = Instant::now();
    assert_eq!(waiter.wait(Duration::from_secs(10)), Wake::Timeout);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "slept past the new lease"
    );
}

#[test]
fn a_hand_over_to_another_client_wakes_nobody_here() {
    let (sub, errands, keys) = subscriber();
    let waiter = sub.join(sub.expect(&keys, &owner(1)));
    sub.deliver(CH, &grant(7, 30000, "someone-else:1"));
    assert_eq!(waiter.wait(NOW), Wake::Timeout);
    assert!(errands.try_recv().is_err());
}

#[test]
fn a_hand_over_to_a_thread_that_stopped_waiting_is_given_back() {
    let (sub, errands, keys) = subscriber();
    let _other = sub.join(sub.expect(&keys, &owner(1)));
    sub.deliver(CH, &grant(9, 30000, &format!("{CLIENT}:5")));
    match errands.try_recv() {
        Ok(Errand::GiveBack { owner, token, .. }) => {
            assert_eq!((&*owner, token), (&*format!("{CLIENT}:5"), 9));
        }
        _ => panic!("expected the lock to be given back"),
    }
}

#[test]
fn messages_for_other_channels_wake_nobody() {
    let (sub, _, keys) = subscriber();
    let waiter = sub.join(sub.expect(&keys, &owner(1)));
    sub.deliver(b"other", &Message::Unlock.payload());
    sub.deliver(CH, b"something else");
    assert!(!permit(&waiter));
}

#[test]
fn the_entry_lingers_after_its_last_waiter_leaves_then_goes() {
    let (sub, _, keys) = subscriber();
    let linger = Duration::from_secs(1);
    let a = sub.join(sub.expect(&keys, &owner(1)));
    let b = sub.join(sub.expect(&keys, &owner(2)));
    drop(a);
    // Still waited on, and nothing handed over: no need to look again.
    assert_eq!(sub.shared.drop_idle_entries(Instant::now(), linger), None);
    drop(b);
    let left = Instant::now();
    let ends = sub.shared.drop_idle_entries(left, linger).expect("lingers");
    assert!(ends > left && ends <= left + linger);
    assert!(sub.shared.entries.lock().contains_key(keys.channel()));
    // A thread that comes back meanwhile keeps it.
    let c = sub.join(sub.expect(&keys, &owner(3)));
    assert_eq!(
        sub.shared.drop_idle_entries(left + 2 * linger, linger),
        None
    );
    assert!(sub.shared.entries.lock().contains_key(keys.channel()));
    // A hand-over: its waiter leaves without a ring, so the thread looks again later.
    sub.deliver(CH, &grant(7, 1000, &owner(3)));
    let now = Instant::now();
    let next = sub
        .shared
        .drop_idle_entries(now, linger)
        .expect("looks again");
    assert!(next > now + linger && next < now + 2 * linger);
    drop(c);
    sub.shared
        .drop_idle_entries(Instant::now() + 2 * linger, linger);
    assert!(!sub.shared.entries.lock().contains_key(keys.channel()));
}

#[test]
fn a_parked_waiter_is_woken_by_a_release() {
    let (sub, _, keys) = subscriber();
    let waiter = sub.join(sub.expect(&keys, &owner(1)));
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            sub.deliver(CH, &Message::Unlock.payload());
        });
        assert_eq!(waiter.wait(Duration::from_secs(10)), Wake::Permit);
    });
}
