//! The figures of `Layout::Redisson`: what speaking Redisson's layout costs against our own,
//! and against the emulated Java client (`tests/support/jvm.rs`), all measured in this run on
//! this server.

use std::time::Duration;

use super::contenders::{Polling, Redlatch};
use super::scenario::{self, Contended};
use super::stats::percentile;
use super::{Figures, quantile_ratio, ratio, time_one};

/// Uncontended cycles in both layouts, hand-offs to a waiter against the polling lock, and
/// requests per contended acquisition.
pub fn figures(f: &mut Figures, url: &str, secs: Duration) {
    eprintln!("Redisson layout: uncontended cycles, alternating with our own layout's");
    let ours = redlatch::Client::open(url).unwrap();
    let theirs = redlatch::Client::builder(url)
        .layout(redlatch::Layout::Redisson)
        .build()
        .unwrap();
    let (ours, theirs) = (ours.lock("cycle-ours"), theirs.lock("cycle-redisson"));
    let mut samples: [Vec<Duration>; 2] = Default::default();
    // Blocks of 300 of each in turn, as the main cycles: a slow spell falls on both alike.
    for round in 0..11 {
        for (which, all) in samples.iter_mut().enumerate() {
            let lock = if which == 0 { &ours } else { &theirs };
            for _ in 0..300 {
                let one = time_one(|| {
                    let guard = lock.try_lock(Duration::ZERO, None).unwrap().unwrap();
                    guard.unlock().unwrap();
                });
                if round > 0 {
                    all.push(one);
                }
            }
        }
    }
    let [mut ours_cycles, mut redisson_cycles] = samples;
    f.put(
        "redisson_cycle_over_redlatch_cycle",
        quantile_ratio(&mut redisson_cycles, &mut ours_cycles, 0.5),
        "<= 1.0",
        "uncontended lock+unlock in Redisson's layout over our own layout's (p50)",
    );
    f.put(
        "redisson_cycle_p99_over_redlatch_cycle",
        quantile_ratio(&mut redisson_cycles, &mut ours_cycles, 0.99),
        "",
        "the same at p99",
    );

    let four = Contended {
        clients: 4,
        threads_per_client: 1,
        hold: Duration::from_millis(1),
        hold_spread: Duration::ZERO,
        pause: Duration::from_millis(1),
        duration: secs,
    };
    eprintln!("Redisson layout: hand-off to a waiter, 4 threads, releaser pauses 1 ms");
    let redisson = Redlatch::with_layout(url, 4, redlatch::Layout::Redisson);
    let mut o = scenario::contended(&redisson, &four, url);
    drop(redisson);
    eprintln!("Redisson layout: the polling lock, the same scenario");
    let mut p = scenario::contended(&Polling::new(url), &four, url);
    let (o50, p50) = (
        percentile(&mut o.handoffs, 0.5),
        percentile(&mut p.handoffs, 0.5),
    );
    f.put(
        "redisson_handoff_us_p50",
        o50.as_secs_f64() * 1e6,
        "",
        "Redisson's layout, 4 threads, releaser pauses 1 ms: hand-off, µs",
    );
    f.put(
        "redisson_handoff_p50_over_polling",
        ratio(o50, p50),
        "<= 1.3",
        "the same over the polling lock's, measured right after it",
    );
    f.put(
        "redisson_handoff_p99_over_polling",
        quantile_ratio(&mut o.handoffs, &mut p.handoffs, 0.99),
        "",
        "the same at p99",
    );
    f.put(
        "redisson_requests_per_acquisition_one_thread_per_client",
        o.commands as f64 / o.acquisitions.max(1) as f64,
        "",
        "requests clients sent per acquisition, 4 clients of one thread",
    );

    let four_by_four = Contended {
        threads_per_client: 4,
        pause: Duration::ZERO,
        ..four
    };
    eprintln!("Redisson layout: 16 threads in 4 clients on one lock");
    let redisson = Redlatch::with_layout(url, 4, redlatch::Layout::Redisson);
    let o = scenario::contended(&redisson, &four_by_four, url);
    drop(redisson);
    let acquisitions = o.acquisitions.max(1) as f64;
    f.put(
        "redisson_requests_per_acquisition",
        o.commands as f64 / acquisitions,
        "<= 3",
        "requests clients sent per contended acquisition (16 threads, 4 clients, hold 1 ms)",
    );
    f.put(
        "redisson_acquisitions_per_s",
        acquisitions / o.duration.as_secs_f64(),
        "",
        "throughput of the same",
    );
    f.put(
        "redisson_self_handoff_share",
        o.self_handoffs as f64 / o.handoffs.len().max(1) as f64,
        "",
        "releasing thread took it straight back (Redisson's lock is not fair)",
    );
    if o.timeouts > 0 {
        f.put(
            "redisson_timeouts",
            o.timeouts as f64,
            "0",
            "acquisitions that waited 10 s in vain",
        );
    }
}
