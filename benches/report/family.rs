//! The lock family against the lock, in the same run: what Redis spends on an uncontended
//! cycle of each kind (INFO commandstats, the scripts' own time), and a write's and a
//! permit's hand-off against a lock's, each in stages.

use std::collections::HashMap;
use std::time::Duration;

use super::contenders::{Contender, Redlatch, RedlatchSemaphore, RedlatchWriters, connection};
use super::figures::Figures;
use super::scenario::{self, Contended, Outcome};
use super::stats::{percentile, ratio};

/// The kinds whose cycles are measured, in the order of their blocks.
const KINDS: [&str; 4] = ["lock", "semaphore", "write", "read"];

/// Server time per uncontended cycle of each kind over the lock's, and a write's and a permit's
/// hand-off over a lock's; the lock's hand-off p50 is returned for the latch's figure.
pub fn figures(f: &mut Figures, url: &str, secs: Duration) -> Duration {
    eprintln!("the family: server time per uncontended cycle, in alternating blocks");
    let client = redlatch::Client::open(url).unwrap();
    let lock = client.lock("family-cycle");
    let semaphore = client.semaphore("family-cycle");
    semaphore.set_permits(1).unwrap();
    let rw = client.read_write_lock("family-cycle");
    let mut admin = connection(url);
    let mut usec: HashMap<&str, u64> = HashMap::new();
    let mut cycles: HashMap<&str, u64> = HashMap::new();
    // Blocks of 500 cycles of each kind in turn, ten rounds after one to warm up: a slow
    // spell of the machine falls on all of them alike.
    for round in 0..11 {
        for kind in KINDS {
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query(&mut admin)
                .unwrap();
            for _ in 0..500 {
                match kind {
                    "lock" => drop(lock.try_lock(Duration::ZERO, None).unwrap().unwrap()),
                    "semaphore" => semaphore
                        .try_acquire(1, Duration::ZERO, None)
                        .unwrap()
                        .unwrap()
                        .release()
                        .unwrap(),
                    "write" => drop(rw.try_write(Duration::ZERO, None).unwrap().unwrap()),
                    _ => drop(rw.try_read(Duration::ZERO, None).unwrap().unwrap()),
                }
            }
            let stats = command_usec(&mut admin);
            if round > 0 {
                *usec.entry(kind).or_default() += stats;
                *cycles.entry(kind).or_default() += 500;
            }
        }
    }
    let per_cycle = |kind: &str| usec[kind] as f64 / cycles[kind] as f64;
    let lock_usec = per_cycle("lock");
    f.put(
        "lock_server_usec_per_cycle",
        lock_usec,
        "(reference)",
        "the scripts' server time (INFO commandstats) per uncontended lock+unlock, µs",
    );
    for (kind, key, what) in [
        (
            "semaphore",
            "semaphore_server_usec_per_cycle_over_lock",
            "acquire(1)+release",
        ),
        (
            "write",
            "write_lock_server_usec_per_cycle_over_lock",
            "write+unlock",
        ),
        (
            "read",
            "read_lock_server_usec_per_cycle_over_lock",
            "read+unlock",
        ),
    ] {
        f.put(
            key,
            per_cycle(kind) / lock_usec,
            "<= 1.5",
            &format!("server time of an uncontended {what} over a lock's (same run)"),
        );
    }

    // Four rounds of each kind in turn, a quarter of the time each, pooled: a slow spell of
    // the machine (they last seconds here) falls on all three alike, not on whichever ran then.
    let quarter = Contended {
        clients: 4,
        threads_per_client: 4,
        hold: Duration::from_millis(1),
        hold_spread: Duration::ZERO,
        pause: Duration::ZERO,
        duration: secs / 4,
    };
    eprintln!("the family: a lock's, a write's and a permit's hand-off, 16 threads in 4 clients");
    let (locks, writers, semaphores) = (
        Redlatch::new(url, 4),
        RedlatchWriters::new(url, 4),
        RedlatchSemaphore::new(url, 4),
    );
    let (mut l, mut w, mut s) = (Outcome::default(), Outcome::default(), Outcome::default());
    for _ in 0..4 {
        for (contender, pooled) in [
            (&locks as &dyn Contender, &mut l),
            (&writers, &mut w),
            (&semaphores, &mut s),
        ] {
            let o = scenario::contended(contender, &quarter, url);
            pooled.handoffs.extend(o.handoffs);
            pooled.stages.extend(o.stages);
        }
    }
    for (kind, o) in [("lock", &l), ("write", &w), ("semaphore", &s)] {
        stages(f, kind, o);
    }
    let lock_p50 = percentile(&mut l.handoffs, 0.5);
    f.put(
        "semaphore_handoff_p50_over_lock",
        ratio(percentile(&mut s.handoffs, 0.5), lock_p50),
        "<= 1.1",
        "a permit released to a waiting acquirer over the lock's hand-off (same run)",
    );
    f.put(
        "read_write_handoff_p50_over_lock",
        ratio(percentile(&mut w.handoffs, 0.5), lock_p50),
        "<= 1.1",
        "a write released to a waiting writer over the lock's hand-off (same run)",
    );
    lock_p50
}

/// `kind`'s hand-off in stages, p50 in µs: where a hand-off's time goes, beside the ratios.
fn stages(f: &mut Figures, kind: &str, o: &scenario::Outcome) {
    let stage =
        |i: usize| -> Vec<Duration> { o.stages.iter().map(|s| [s.0, s.1, s.2][i]).collect() };
    for (i, what) in ["to_subscriber", "wake", "return"].into_iter().enumerate() {
        f.put(
            &format!("family_{kind}_handoff_stage_{what}_us_p50"),
            percentile(&mut stage(i), 0.5).as_secs_f64() * 1e6,
            "",
            "stage of the hand-off (as handoff_stage_*: release sent -> subscriber has it -> thread runs -> call returns)",
        );
    }
}

/// The scripts' server time since the last CONFIG RESETSTAT, µs.
fn command_usec(admin: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(admin).unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("usec=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
