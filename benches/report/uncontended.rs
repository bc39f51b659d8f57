//! The uncontended lock: a lock + unlock cycle against a PING and against the baselines' cycles
//! (SET NX PX, the seed articles' HSET scripts, those with a fencing token), the commands the
//! server runs per cycle, a try on a held lock, and how long a waiter takes to subscribe.
//!
//! Its PING round trips are the yardstick of the contended scenarios too: `figures` returns
//! them, one taken warm and one after 1 ms asleep.

use std::thread;
use std::time::{Duration, Instant};

use crate::contenders::{self, connection};
use crate::figures::Figures;
use crate::scenario;
use crate::stats::{percentile, ratio, time_each, time_one};

/// The PING round trips the other figures are taken over (p50s).
#[derive(Clone, Copy)]
pub struct Pings {
    /// On a connection in use, in blocks alternating with the uncontended cycles.
    pub warm: Duration,
    /// After sleeping as long as a holder holds (1 ms).
    pub after_idle: Duration,
}

/// The uncontended figures; returns the PINGs for the contended ones.
pub fn figures(f: &mut Figures, url: &str) -> Pings {
    eprintln!("ping and uncontended cycles, in alternating blocks");
    let client = redlatch::Client::open(url).unwrap();
    let lock = client.lock("cycle");
    let cycles = cycles(url, &lock);
    let ping_p50 = cycles.ping;
    f.put(
        "ping_us_p50",
        ping_p50.as_secs_f64() * 1e6,
        "(reference)",
        "PING round trip, µs, in blocks alternating with the cycles below, on their connection",
    );

    // The same PING after sleeping as long as a holder holds (1 ms): on a virtual machine an
    // idle CPU takes a while to wake, and every hand-off crosses several sleeping threads.
    let mut ping_con = connection(url);
    let mut idle_ping: Vec<Duration> = (0..1000)
        .map(|_| {
            thread::sleep(Duration::from_millis(1));
            let t = Instant::now();
            let _: String = redis::cmd("PING").query(&mut ping_con).unwrap();
            t.elapsed()
        })
        .collect();
    let idle_ping_p50 = percentile(&mut idle_ping, 0.5);
    f.put(
        "ping_after_1ms_idle_us_p50",
        idle_ping_p50.as_secs_f64() * 1e6,
        "(reference)",
        "PING round trip after 1 ms asleep, µs",
    );
    f.put(
        "set_nx_cycle_over_ping",
        ratio(cycles.set_nx, ping_p50),
        "",
        "SET NX PX + compare-and-delete EVALSHA / PING",
    );
    f.put(
        "seed_hset_cycle_over_ping",
        ratio(cycles.seed_hset, ping_p50),
        "",
        "seed articles' HSET lock + unlock scripts / PING",
    );
    f.put(
        "cycle_over_ping",
        ratio(cycles.redlatch, ping_p50),
        "<= 2.5",
        "uncontended lock + unlock / PING",
    );
    f.put(
        "cycle_over_seed_hset",
        ratio(cycles.redlatch, cycles.seed_hset),
        "<= 1.10",
        "uncontended lock + unlock / the seed HSET scripts' cycle, alternating blocks of one run",
    );
    f.put(
        "seed_fenced_cycle_over_seed_hset",
        ratio(cycles.seed_fenced, cycles.seed_hset),
        "",
        "the seed lock with a fencing token added as ours keeps one (TIME, SET ... PX ... GET) / the seed cycle",
    );
    f.put(
        "cycle_over_seed_fenced",
        ratio(cycles.redlatch, cycles.seed_fenced),
        "",
        "uncontended lock + unlock / that fenced seed cycle (its unlock the seed's: no token check, PUBLISH every time)",
    );
    // Every command the server ran per cycle, inside scripts too (INFO commandstats).
    let mut admin = connection(url);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut admin)
        .unwrap();
    for _ in 0..1000 {
        let g = lock.try_lock(Duration::ZERO, None).unwrap().unwrap();
        g.unlock().unwrap();
    }
    let calls = scenario::command_stats(&mut admin);
    f.put(
        "server_commands_per_cycle",
        scenario::server_commands(&calls) as f64 / 1000.0,
        "<= 10",
        "commands the server ran per uncontended cycle, script-internal calls included (seed scripts: 8)",
    );

    let holder = redlatch::Client::open(url).unwrap();
    let held = holder.lock("busy").lock().unwrap();
    let busy = client.lock("busy");
    let mut busy_try = time_each(3000, || {
        assert!(busy.try_lock(Duration::ZERO, None).unwrap().is_none())
    });
    f.put(
        "busy_try_over_ping",
        ratio(percentile(&mut busy_try, 0.5), ping_p50),
        "",
        "try_lock(ZERO) on a held lock / PING",
    );
    drop(held);

    eprintln!("subscribe latency");
    let mut subscribe: Vec<Duration> = (0..300)
        .map(|i| {
            redlatch::bench_support::subscribe_latency(&client, &format!("sub-{i}"))
                .expect("subscribed")
        })
        .collect();
    f.put(
        "subscribe_p50_over_ping",
        ratio(percentile(&mut subscribe, 0.5), ping_p50),
        "<= 4",
        "waiter's request for a new channel until the subscription is confirmed / PING",
    );
    // Every handle on these clients goes, so that their threads end now: a lingering
    // subscription of the 300 above would otherwise be unsubscribed during the next scenario,
    // and counted as that scenario's client commands.
    drop((lock, busy, client, holder));
    Pings {
        warm: ping_p50,
        after_idle: idle_ping_p50,
    }
}

/// Median round trips and uncontended cycles, measured in alternating blocks so that each
/// sees the same machine: a PING, SET NX PX with a compare-and-delete script, and the seed articles' HSET
/// lock and unlock scripts, all on one connection; and redlatch's own cycle on `lock`.
pub struct Cycles {
    pub ping: Duration,
    pub set_nx: Duration,
    pub seed_hset: Duration,
    pub seed_fenced: Duration,
    pub redlatch: Duration,
}

pub fn cycles(url: &str, lock: &redlatch::Lock) -> Cycles {
    let mut con = connection(url);
    let del = redis::Script::new(contenders::COMPARE_AND_DELETE);
    let (seed_lock, seed_unlock) = contenders::seed_scripts();
    let seed_fenced_lock = contenders::seed_fenced_lock_script();
    let mut samples: [Vec<Duration>; 5] = Default::default();
    // Blocks of 300 of each in turn, ten times: each is measured warm (its script and
    // connection in use), and a slow spell of the machine falls on all five alike. The
    // first round only warms up.
    for round in 0..11 {
        for (which, all) in samples.iter_mut().enumerate() {
            for _ in 0..300 {
                let one = match which {
                    0 => time_one(|| {
                        let _: String = redis::cmd("PING").query(&mut con).unwrap();
                    }),
                    1 => time_one(|| {
                        let ok: Option<String> = redis::cmd("SET")
                            .arg("cyc-nx")
                            .arg("token")
                            .arg("NX")
                            .arg("PX")
                            .arg(30_000)
                            .query(&mut con)
                            .unwrap();
                        assert!(ok.is_some());
                        let _: i64 = del.key("cyc-nx").arg("token").invoke(&mut con).unwrap();
                    }),
                    2 => time_one(|| {
                        let _: Option<i64> = seed_lock
                            .key("cyc-h")
                            .arg("owner:1")
                            .arg(30_000)
                            .invoke(&mut con)
                            .unwrap();
                        let _: Option<i64> = seed_unlock
                            .key("cyc-h")
                            .key("cyc-h:ch")
                            .arg("owner:1")
                            .arg(30_000)
                            .invoke(&mut con)
                            .unwrap();
                    }),
                    3 => time_one(|| {
                        let _: Option<i64> = seed_fenced_lock
                            .key("cyc-f")
                            .key("cyc-f:fence")
                            .arg("owner:1")
                            .arg(30_000)
                            .arg(3_630_000)
                            .invoke(&mut con)
                            .unwrap();
                        let _: Option<i64> = seed_unlock
                            .key("cyc-f")
                            .key("cyc-f:ch")
                            .arg("owner:1")
                            .arg(30_000)
                            .invoke(&mut con)
                            .unwrap();
                    }),
                    _ => time_one(|| {
                        let g = lock.try_lock(Duration::ZERO, None).unwrap().unwrap();
                        g.unlock().unwrap();
                    }),
                };
                if round > 0 {
                    all.push(one);
                }
            }
        }
    }
    let [
        mut ping,
        mut set_nx,
        mut seed_hset,
        mut seed_fenced,
        mut redlatch,
    ] = samples;
    Cycles {
        ping: percentile(&mut ping, 0.5),
        set_nx: percentile(&mut set_nx, 0.5),
        seed_hset: percentile(&mut seed_hset, 0.5),
        seed_fenced: percentile(&mut seed_fenced, 0.5),
        redlatch: percentile(&mut redlatch, 0.5),
    }
}
