//! The hand-off to a waiter: four threads, each in its own client, on one lock, each pausing
//! 1 ms after its release, so that every hand-off goes to a thread that has waited; redlatch
//! against the polling lock, and redlatch's hand-off in stages (release reply, grant at the
//! subscriber, thread woken, call returned) to show where its time goes. The servers section
//! runs the same scenario on each server.

use std::time::Duration;

use crate::contenders::{Polling, Redlatch};
use crate::figures::Figures;
use crate::scenario::{self, Contended};
use crate::stats::{percentile, quantile_ratio, ratio};

/// Four threads, each in its own client, on one lock; each holds 1 ms and waits 1 ms after
/// its release before asking again, so every hand-off goes to a thread that waited. For
/// redlatch and the polling lock; and redlatch's hand-off in stages.
pub fn figures(f: &mut Figures, url: &str, secs: Duration) {
    let scenario = Contended {
        clients: 4,
        threads_per_client: 1,
        hold: Duration::from_millis(1),
        hold_spread: Duration::ZERO,
        pause: Duration::from_millis(1),
        duration: secs,
    };
    eprintln!("hand-off to a waiter: redlatch, 4 threads, releaser pauses 1 ms");
    let ours = Redlatch::new(url, 4);
    let mut o = scenario::contended(&ours, &scenario, url);
    drop(ours);
    eprintln!("hand-off to a waiter: polling lock");
    let polling = Polling::new(url);
    let mut p = scenario::contended(&polling, &scenario, url);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (ours_p50, polling_p50) = (
        percentile(&mut o.handoffs, 0.5),
        percentile(&mut p.handoffs, 0.5),
    );
    f.put(
        "handoff_us_p50",
        us(ours_p50),
        "",
        "4 threads, releaser pauses 1 ms: hand-off, µs",
    );
    f.put(
        "polling_handoff_us_p50",
        us(polling_p50),
        "",
        "the same for the polling lock, µs",
    );
    f.put(
        "handoff_p50_over_polling",
        ratio(ours_p50, polling_p50),
        "<= 1.0",
        "hand-off to a waiter over the polling lock's (4 threads, releaser pauses 1 ms)",
    );
    f.put(
        "handoff_p99_over_polling",
        quantile_ratio(&mut o.handoffs, &mut p.handoffs, 0.99),
        "<= 0.5",
        "the same at p99",
    );
    f.put(
        "handoff_stage_release_reply_us_p50",
        us(percentile(&mut o.releases, 0.5)),
        "",
        "stage: the release call, sent to its reply (the script hands over and publishes)",
    );
    let stage =
        |i: usize| -> Vec<Duration> { o.stages.iter().map(|s| [s.0, s.1, s.2][i]).collect() };
    let (mut read, mut wake, mut back) = (stage(0), stage(1), stage(2));
    f.put(
        "handoff_stage_to_subscriber_us_p50",
        us(percentile(&mut read, 0.5)),
        "",
        "stage: release sent -> the waiter's subscriber thread has the grant",
    );
    f.put(
        "handoff_stage_wake_us_p50",
        us(percentile(&mut wake, 0.5)),
        "",
        "stage: subscriber thread has it -> the waiting thread runs",
    );
    f.put(
        "handoff_stage_return_us_p50",
        us(percentile(&mut back, 0.5)),
        "",
        "stage: the waiting thread runs -> its lock call returns",
    );
    f.put(
        "handoff_stages_measured_share",
        o.stages.len() as f64 / o.handoffs.len().max(1) as f64,
        "",
        "hand-offs the stages cover (those answered by a hand-over message)",
    );

    // The same with holds of 0.5-1.5 ms. A hold exactly as long as the poller's retry
    // interval keeps its pollers in step with the holder: a waiter that failed just after the
    // lock was taken retries just after it is released. Holds that vary break the step.
    let varied = Contended {
        hold_spread: Duration::from_micros(500),
        ..scenario
    };
    eprintln!("hand-off to a waiter, holds of 0.5-1.5 ms: redlatch, then the polling lock");
    let ours = Redlatch::new(url, 4);
    let mut o = scenario::contended(&ours, &varied, url);
    drop(ours);
    let mut p = scenario::contended(&polling, &varied, url);
    f.put(
        "handoff_p50_over_polling_varied_hold",
        quantile_ratio(&mut o.handoffs, &mut p.handoffs, 0.5),
        "",
        "the hand-off p50 over the polling lock's with holds of 0.5-1.5 ms (out of step with its 1 ms retries)",
    );
    f.put(
        "handoff_p99_over_polling_varied_hold",
        quantile_ratio(&mut o.handoffs, &mut p.handoffs, 0.99),
        "",
        "the same at p99",
    );
}
