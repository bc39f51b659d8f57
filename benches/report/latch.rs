//! The count-down latch's wake-up: how long waiters of another client take to return once the
//! count reaches zero, over a lock's hand-off (in the contended run, and between the same
//! clients to a thread idle as long), and the first waiter's wake-up in stages. A latch
//! publishes to every waiter where a lock hands over to one, so the first waiter should wake
//! as fast as a lock's waiter does.
//!
//! Knob: `REPORT_LATCH_ROUNDS` (default 200).

use std::thread;
use std::time::{Duration, Instant};

use crate::figures::Figures;
use crate::knob;
use crate::stats::{percentile, ratio};

/// A latch's wake-up: four threads of another client wait on a latch at 1; from the call
/// that counts it down to each waiter's return, over many rounds. Each round also hands a
/// lock over between the same two clients, to one thread of the waiting client that has
/// waited as long: a baseline in the same state of the machine (idle threads woken), where
/// the contended scenarios' hand-off (`lock_handoff_p50`) runs with every core busy.
pub fn figures(f: &mut Figures, url: &str, ping: Duration, lock_handoff_p50: Duration) {
    let counter = redlatch::Client::open(url).unwrap();
    let waiting = redlatch::Client::open(url).unwrap();
    let (mut wakeups, mut firsts, mut idle_handoffs) = (Vec::new(), Vec::new(), Vec::new());
    // The first waiter's stages, as a hand-off's: count-down sent -> subscriber has the
    // message -> the thread runs -> `wait` returns.
    let mut stages: [Vec<Duration>; 3] = Default::default();
    for round in 0..knob("REPORT_LATCH_ROUNDS", 200) {
        let name = format!("latch-{round}");
        let latch = counter.count_down_latch(&name);
        latch.try_set_count(1).unwrap();
        let (ready_tx, ready_rx) = crossbeam_channel::unbounded();
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let latch = waiting.count_down_latch(&name);
                let ready = ready_tx.clone();
                thread::spawn(move || {
                    ready.send(()).unwrap();
                    assert!(latch.wait(Duration::from_secs(10)).unwrap());
                    let returned = Instant::now();
                    (returned, redlatch::bench_support::last_message_wake())
                })
            })
            .collect();
        for _ in 0..4 {
            ready_rx.recv().unwrap();
        }
        // Long enough for the waiters to check, subscribe and check again.
        thread::sleep(Duration::from_millis(20));
        let opened = Instant::now();
        latch.count_down().unwrap();
        let mut returned: Vec<(Instant, Option<(Instant, Instant)>)> =
            waiters.into_iter().map(|w| w.join().unwrap()).collect();
        returned.sort_by_key(|r| r.0);
        if let (at, Some((received, ran))) = returned[0] {
            for (stage, d) in stages
                .iter_mut()
                .zip([received - opened, ran - received, at - ran])
            {
                stage.push(d);
            }
        }
        firsts.push(returned[0].0 - opened);
        wakeups.extend(returned.iter().map(|r| r.0 - opened));

        let held = counter.lock(&name).lock().unwrap();
        let lock = waiting.lock(&name);
        let waiter = thread::spawn(move || {
            drop(
                lock.try_lock(Duration::from_secs(10), None)
                    .unwrap()
                    .unwrap(),
            );
            Instant::now()
        });
        thread::sleep(Duration::from_millis(20));
        let released = Instant::now();
        drop(held);
        idle_handoffs.push(waiter.join().unwrap() - released);
    }
    f.put(
        "latch_wakeup_p50_over_ping",
        ratio(percentile(&mut wakeups, 0.5), ping),
        "",
        "count_down to zero until each of 4 waiters (another client) returns / PING",
    );
    f.put(
        "latch_wakeup_p50_over_lock_handoff_p50",
        ratio(percentile(&mut wakeups, 0.5), lock_handoff_p50),
        "<= 1.2",
        "the count-down that reaches zero -> a waiter of another client returns, over the lock's hand-off p50 (same run)",
    );
    let idle_p50 = percentile(&mut idle_handoffs, 0.5);
    f.put(
        "latch_wakeup_p50_over_idle_lock_handoff_p50",
        ratio(percentile(&mut wakeups, 0.5), idle_p50),
        "",
        "the same over a lock's hand-off between the same clients to a thread idle as long (same rounds)",
    );
    f.put(
        "latch_first_wakeup_p50_over_idle_lock_handoff_p50",
        ratio(percentile(&mut firsts, 0.5), idle_p50),
        "",
        "the first of the 4 waiters, over the same idle hand-off",
    );
    f.put(
        "latch_first_wakeup_p50_over_lock_handoff_p50",
        ratio(percentile(&mut firsts, 0.5), lock_handoff_p50),
        "",
        "the same for the first of the 4 waiters to return: one thread woken, as a hand-off wakes one",
    );
    for (stage, what) in stages.iter_mut().zip(["to_subscriber", "wake", "return"]) {
        f.put(
            &format!("latch_first_wakeup_stage_{what}_us_p50"),
            percentile(stage, 0.5).as_secs_f64() * 1e6,
            "",
            "stage of the first waiter's wake-up (count-down sent -> subscriber has it -> thread runs -> wait returns)",
        );
    }
    f.put(
        "latch_wakeup_p99_over_ping",
        ratio(percentile(&mut wakeups, 0.99), ping),
        "",
        "the same, p99",
    );
}
