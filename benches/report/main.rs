//! The scenario report: `cargo bench --bench report`.
//!
//! Runs every scenario against a private redis-server, for redlatch and two baselines (a
//! polling lock as the seed articles build it, and the `redlock` crate), prints a markdown
//! table, writes the figures as one flat JSON object to `target/bench-report.json`, and draws
//! the hand-off latency percentiles to `docs/handoff-latency.svg`. All figures are ratios
//! taken in the same run (to a PING round trip, to raw script round trips), because absolute
//! times on a shared machine mean little.
//!
//! Knobs (environment): `REPORT_SECS` per contended scenario (default 8), `REPORT_IDLE_SECS`
//! (10), `REPORT_RENEWAL_LOCKS` (10000), `REPORT_SKIP_REDLOCK=1` to leave the peer crate out,
//! `REPORT_SKIP_JAVA=1` to leave out the real Redisson (`java.rs`: it needs `java` and `mvn`),
//! `REPORT_CROWD` (200) for its crowd's threads. The servers section (`servers.rs`: the lock
//! cycle and hand-offs on Redis 6.2, Redis 7.0 and Valkey 9.1 side by side) has its own knobs
//! there; `REPORT_ONLY=servers` runs it alone, its JSON to `target/bench-report-servers.json`.

#[path = "../../tests/support/mod.rs"]
mod support;

mod contenders;
mod cpu;
mod family;
mod java;
mod plot;
mod redisson;
mod scenario;
mod servers;
mod stats;

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use contenders::{
    Polling, Redlatch, RedlatchReaders, RedlatchSemaphore, RedlatchSpin, RedlockRs, connection,
};
use scenario::{Contended, Outcome};
use stats::{max, mean, percentile, time_each};

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The report's figures, in insertion order for the table, flat for the JSON.
#[derive(Default)]
struct Figures {
    rows: Vec<(String, f64, String, String)>,
    /// Facts that are not numbers (versions), printed above the table and kept in the JSON.
    notes: Vec<(String, String)>,
}

impl Figures {
    fn note(&mut self, key: &str, value: &str) {
        eprintln!("  {key} = {value}");
        self.notes.push((key.to_string(), value.to_string()));
    }

    fn put(&mut self, key: &str, value: f64, target: &str, what: &str) {
        eprintln!("  {key} = {value:.3}");
        self.rows
            .push((key.to_string(), value, target.to_string(), what.to_string()));
    }

    fn json(&self) -> String {
        let map: BTreeMap<&str, f64> = self
            .rows
            .iter()
            .map(|(k, v, _, _)| (k.as_str(), *v))
            .collect();
        let body: Vec<String> = map
            .iter()
            .map(|(k, v)| {
                if v.is_finite() {
                    format!("  \"{k}\": {v:.4}")
                } else {
                    format!("  \"{k}\": null")
                }
            })
            .chain(
                self.notes
                    .iter()
                    .map(|(k, v)| format!("  \"{k}\": \"{}\"", v.replace('"', "'"))),
            )
            .collect();
        format!("{{\n{}\n}}\n", body.join(",\n"))
    }

    fn markdown(&self) -> String {
        let mut out: String = self
            .notes
            .iter()
            .filter(|(k, _)| !k.starts_with("servers."))
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect();
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str("| key | value | target | what |\n| --- | ---: | --- | --- |\n");
        // The servers section prints its own table, a column per server.
        for (k, v, target, what) in self.rows.iter().filter(|r| !r.0.starts_with("servers.")) {
            out.push_str(&format!(
                "| `{k}` | {} | {target} | {what} |\n",
                format_value(*v)
            ));
        }
        out
    }
}

fn format_value(v: f64) -> String {
    if !v.is_finite() {
        "n/a".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// Acquisitions and the CPU they took, over a scenario's blocks.
#[derive(Default, Clone, Copy)]
struct CpuTally {
    acquisitions: f64,
    time: Duration,
    client: Duration,
    server: Duration,
}

impl CpuTally {
    /// Acquisitions per second, and the client's and the server's CPU per acquisition (µs).
    fn figures(&self) -> (f64, f64, f64) {
        let micros = |d: Duration| d.as_secs_f64() * 1e6 / self.acquisitions.max(1.0);
        (
            self.acquisitions / self.time.as_secs_f64(),
            micros(self.client),
            micros(self.server),
        )
    }
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

fn main() {
    let started = Instant::now();
    let secs = Duration::from_secs(knob("REPORT_SECS", 8));
    let server = support::RedisServer::start();
    let url = server.url();
    let mut f = Figures::default();
    // Only the family's figures (REPORT_ONLY=family), or only the Redisson layout's
    // (REPORT_ONLY=redisson), for a quick look at them.
    if std::env::var("REPORT_ONLY").as_deref() == Ok("family") {
        let lock_handoff_p50 = family::figures(&mut f, &url, secs);
        let mut con = connection(&url);
        let mut pings = time_each(1000, || {
            let _: String = redis::cmd("PING").query(&mut con).unwrap();
        });
        let ping = percentile(&mut pings, 0.5);
        latch_figures(&mut f, &url, ping, lock_handoff_p50);
        println!("\n{}", f.markdown());
        return;
    }
    // Only the real Redisson against ours (REPORT_ONLY=java); its JSON goes to
    // target/bench-report-java.json, beside the full report's.
    if std::env::var("REPORT_ONLY").as_deref() == Ok("java") {
        java::figures(&mut f, &url, server.port, secs);
        std::fs::create_dir_all("target").unwrap();
        std::fs::write("target/bench-report-java.json", f.json()).unwrap();
        println!("\n{}", f.markdown());
        println!(
            "redis-server {} on loopback, {} cores; {:.0} s. JSON: target/bench-report-java.json",
            server_version(&url),
            thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0),
            started.elapsed().as_secs_f64()
        );
        return;
    }
    if std::env::var("REPORT_ONLY").as_deref() == Ok("servers") {
        let table = servers::figures(&mut f, secs);
        std::fs::create_dir_all("target").unwrap();
        std::fs::write("target/bench-report-servers.json", f.json()).unwrap();
        println!("\n{table}");
        return;
    }
    if std::env::var("REPORT_ONLY").as_deref() == Ok("redisson") {
        redisson::figures(&mut f, &url, secs);
        redisson::wake_figures(&mut f, &url);
        println!("\n{}", f.markdown());
        return;
    }

    eprintln!("ping and uncontended cycles, in alternating blocks");
    let client = redlatch::Client::open(&url).unwrap();
    let lock = client.lock("cycle");
    let cycles = uncontended_cycles(&url, &lock);
    let ping_p50 = cycles.ping;
    f.put(
        "ping_us_p50",
        ping_p50.as_secs_f64() * 1e6,
        "(reference)",
        "PING round trip, µs, in blocks alternating with the cycles below, on their connection",
    );

    // The same PING after sleeping as long as a holder holds (1 ms): on a virtual machine an
    // idle CPU takes a while to wake, and every hand-off crosses several sleeping threads.
    let mut ping_con = connection(&url);
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
    let mut admin = connection(&url);
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

    let holder = redlatch::Client::open(&url).unwrap();
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

    let four_by_four = Contended {
        clients: 4,
        threads_per_client: 4,
        hold: Duration::from_millis(1),
        hold_spread: Duration::ZERO,
        pause: Duration::ZERO,
        duration: secs,
    };
    let mut curves: Vec<(&str, Vec<Duration>)> = Vec::new();

    eprintln!("redlatch: 16 threads in 4 clients on one lock");
    let redlatch4 = Redlatch::new(&url, 4);
    let mut o = scenario::contended(&redlatch4, &four_by_four, &url);
    contended_figures(&mut f, "", &mut o, ping_p50, idle_ping_p50, true);
    curves.push(("redlatch", o.handoffs.clone()));
    drop(redlatch4);
    let lock_acq_per_s = o.acquisitions as f64 / o.duration.as_secs_f64();
    let lock_handoff_p50 = percentile(&mut o.handoffs, 0.5);
    let lock_commands = o.commands as f64 / o.acquisitions.max(1) as f64;
    f.put(
        "server_commands_per_contended_acquisition",
        o.server_commands as f64 / o.acquisitions.max(1) as f64,
        "<= 18",
        "commands the server ran per acquisition, 16 threads, script-internal calls included",
    );

    eprintln!("redlatch: 16 readers in 4 clients on one read-write lock");
    let readers = RedlatchReaders::new(&url, 4);
    let o = scenario::contended(&readers, &four_by_four, &url);
    f.put(
        "readers_acq_per_s_over_lock",
        o.acquisitions as f64 / o.duration.as_secs_f64() / lock_acq_per_s,
        ">= 4",
        "16 readers' acquisitions/s over 16 lock holders' (same run, hold 1 ms)",
    );
    drop(readers);

    eprintln!("redlatch: a semaphore of one permit, 16 threads in 4 clients");
    let semaphore = RedlatchSemaphore::new(&url, 4);
    let mut o = scenario::contended(&semaphore, &four_by_four, &url);
    f.put(
        "semaphore_handoff_p99_over_ping",
        ratio(percentile(&mut o.handoffs, 0.99), ping_p50),
        "",
        "the semaphore's hand-off p99 / PING",
    );
    f.put(
        "semaphore_commands_per_acquisition_over_lock",
        o.commands as f64 / o.acquisitions.max(1) as f64 / lock_commands,
        "",
        "commands per acquisition over the lock's",
    );
    drop(semaphore);

    eprintln!("redlatch: a spin lock, 16 threads in 4 clients");
    let spin = RedlatchSpin::new(&url, 4);
    let mut o = scenario::contended(&spin, &four_by_four, &url);
    f.put(
        "spin_handoff_p50_over_lock",
        ratio(percentile(&mut o.handoffs, 0.5), lock_handoff_p50),
        "",
        "the spin lock's hand-off over the lock's (same run): backoff instead of a message",
    );
    f.put(
        "spin_commands_per_acquisition_over_lock",
        o.commands as f64 / o.acquisitions.max(1) as f64 / lock_commands,
        "",
        "commands per acquisition over the lock's",
    );
    f.put(
        "spin_max_wait_over_mean_wait",
        ratio(max(&o.waits), mean(&o.waits)),
        "",
        "no queue: fairness is left to chance",
    );
    curves.push(("spin lock", o.handoffs.clone()));
    drop(spin);

    eprintln!("redlatch: 16 threads in one client on one lock");
    let one = Contended {
        clients: 1,
        threads_per_client: 16,
        ..four_by_four
    };
    let redlatch1 = Redlatch::new(&url, 1);
    let mut o = scenario::contended(&redlatch1, &one, &url);
    f.put(
        "one_client_handoff_p50_over_ping",
        ratio(percentile(&mut o.handoffs, 0.5), ping_p50),
        "<= 4",
        "16 threads sharing one client",
    );
    f.put(
        "one_client_handoff_p50_over_idle_ping",
        ratio(percentile(&mut o.handoffs, 0.5), idle_ping_p50),
        "",
        "the same over a PING after 1 ms asleep",
    );
    f.put(
        "one_client_max_wait_over_mean_wait",
        ratio(max(&o.waits), mean(&o.waits)),
        "<= 10",
        "16 threads sharing one client",
    );
    drop(redlatch1);

    // A release hands the lock to one client's subscriber (its grant channel), so a hand-off
    // should cost no more with 16 clients waiting than with 4. When every grant went to every
    // waiting client, 1.4-1.5 (the commit before grant channels, in a separate harness).
    eprintln!("redlatch: 16 threads in 16 clients on one lock");
    let spread = Contended {
        clients: 16,
        threads_per_client: 1,
        ..four_by_four
    };
    let redlatch16 = Redlatch::new(&url, 16);
    let mut o = scenario::contended(&redlatch16, &spread, &url);
    f.put(
        "sixteen_clients_handoff_p50_over_four",
        ratio(percentile(&mut o.handoffs, 0.5), lock_handoff_p50),
        "~ 1",
        "hand-off p50 with 16 threads in 16 clients / in 4 clients: one client woken per hand-off",
    );
    drop(redlatch16);

    eprintln!("polling lock (SET NX PX, retry every 1 ms)");
    let polling = Polling::new(&url);
    let mut o = scenario::contended(&polling, &four_by_four, &url);
    contended_figures(&mut f, "polling_", &mut o, ping_p50, idle_ping_p50, false);
    curves.push(("polling (1 ms)", o.handoffs.clone()));
    let polling_handoff = f
        .rows
        .iter()
        .find(|r| r.0 == "polling_handoff_p50_over_ping")
        .map(|r| r.1);
    f.put(
        "t16_throughput_over_polling",
        lock_acq_per_s / (o.acquisitions as f64 / o.duration.as_secs_f64()),
        ">= 0.97",
        "16 threads' acquisitions/s over the polling lock's (which barges), hold 1 ms",
    );
    // The same with holds of 0.5-1.5 ms, out of step with the poller's 1 ms retries (see
    // handoff_to_waiter_figures).
    let varied = Contended {
        hold_spread: Duration::from_micros(500),
        ..four_by_four
    };
    eprintln!("16 threads, holds of 0.5-1.5 ms: redlatch, then the polling lock");
    let redlatch4 = Redlatch::new(&url, 4);
    let o = scenario::contended(&redlatch4, &varied, &url);
    drop(redlatch4);
    let p = scenario::contended(&polling, &varied, &url);
    f.put(
        "t16_throughput_over_polling_varied_hold",
        o.acquisitions as f64 / p.acquisitions.max(1) as f64,
        "",
        "the same with holds of 0.5-1.5 ms",
    );
    drop(polling);

    handoff_to_waiter_figures(&mut f, &url, secs);
    redisson::figures(&mut f, &url, secs);
    redisson::wake_figures(&mut f, &url);

    if knob("REPORT_SKIP_REDLOCK", 0) == 0 {
        for (label, prefix, delay) in [
            ("redlock-rs (default retry)", "redlock_rs_", None),
            ("redlock-rs (1 ms retry)", "redlock_rs_1ms_", Some(1)),
        ] {
            eprintln!("{label}");
            let peer = RedlockRs::new(&url, 4, delay, "redlock-rs");
            let mut o = scenario::contended(&peer, &four_by_four, &url);
            contended_figures(&mut f, prefix, &mut o, ping_p50, idle_ping_p50, false);
            curves.push((label, o.handoffs.clone()));
        }
    }
    let ours = f
        .rows
        .iter()
        .find(|r| r.0 == "handoff_p50_over_ping")
        .map(|r| r.1);
    if let (Some(ours), Some(polling)) = (ours, polling_handoff) {
        f.put(
            "handoff_p50_share_of_polling",
            ours / polling,
            "<= 0.2",
            "redlatch's hand-off over the polling lock's",
        );
    }

    eprintln!("count-down latch wake-ups");
    let family_lock_handoff_p50 = family::figures(&mut f, &url, secs);
    latch_figures(&mut f, &url, ping_p50, family_lock_handoff_p50);

    eprintln!("16 threads over 1000 locks, no hold");
    // CPU per acquisition, this process's and the server's: the scenario keeps both cores
    // busy, so the two together bound it. Each contender runs in four blocks, interleaved
    // with the others', so that a slow spell of the machine (they last seconds here) falls
    // on all of them alike rather than on whichever ran then.
    let mut admin = connection(&url);
    let block = secs / 4;
    let contenders: [&dyn Fn() -> f64; 5] = [
        &|| scenario::many_keys(&url, 4, 4, 1000, scenario::MAX_WAIT, block),
        &|| scenario::many_keys_seed(&url, 16, 1000, block, false),
        &|| scenario::many_keys_seed(&url, 16, 1000, block, true),
        &|| scenario::raw_evalsha(&url, 16, block),
        &|| scenario::many_keys(&url, 4, 4, 1000, Duration::ZERO, block),
    ];
    let mut tallies = [CpuTally::default(); 5];
    for _ in 0..4 {
        for (run, tally) in contenders.iter().zip(tallies.iter_mut()) {
            let (ours, server) = (cpu::process_cpu(), cpu::server_cpu(&mut admin));
            tally.acquisitions += run() * block.as_secs_f64();
            tally.client += cpu::process_cpu() - ours;
            tally.server += cpu::server_cpu(&mut admin) - server;
            tally.time += block;
        }
    }
    let [ours, seed, seed_fenced, raw, try_zero] = tallies;
    let (acq_per_s, client_cpu, server_cpu) = ours.figures();
    let (seed_per_s, seed_client_cpu, seed_server_cpu) = seed.figures();
    let seed_fenced_per_s = seed_fenced.figures().0;
    let raw_per_s = raw.figures().0;
    let try_per_s = try_zero.figures().0;
    f.put(
        "many_keys_over_seed_hset",
        acq_per_s / seed_per_s,
        ">= 0.85",
        "acquisitions/s over the seed HSET scripts', 16 threads, 1,000 locks, hold 0",
    );
    f.put(
        "seed_fenced_many_keys_over_seed_hset",
        seed_fenced_per_s / seed_per_s,
        "",
        "the same for the seed scripts with a fencing token added as ours keeps one / the seed scripts'",
    );
    f.put(
        "many_keys_over_seed_fenced",
        acq_per_s / seed_fenced_per_s,
        "",
        "ours / that fenced seed's",
    );
    f.put(
        "many_keys_cpu_us_per_acq",
        client_cpu + server_cpu,
        "(reference)",
        "CPU per acquisition, µs, client process + Redis (1,000 locks, 16 threads)",
    );
    f.put(
        "many_keys_server_cpu_us_per_acq",
        server_cpu,
        "(reference)",
        "of which Redis's",
    );
    f.put(
        "many_keys_seed_cpu_us_per_acq",
        seed_client_cpu + seed_server_cpu,
        "(reference)",
        "the same for the seed scripts",
    );
    f.put(
        "many_keys_seed_server_cpu_us_per_acq",
        seed_server_cpu,
        "(reference)",
        "of which Redis's",
    );
    // The seed scripts' threads move on from a held lock; these wait for it (queue,
    // subscribe, hand-over). The same scenario with try_lock(ZERO) tells that cost apart from
    // the weight of the scripts and the client.
    f.put(
        "many_keys_try_over_seed_hset",
        try_per_s / seed_per_s,
        "",
        "the same with try_lock(ZERO): a held lock is skipped, as the seed scripts' threads do",
    );
    f.put(
        "many_keys_acq_per_s_over_raw",
        acq_per_s / raw_per_s,
        ">= 0.45",
        "acquisitions/s over raw EVALSHA round trips/s, 16 threads",
    );

    eprintln!("keys left after the fence retention");
    fence_figures(&mut f, &url);

    eprintln!("renewal of many locks");
    renewal_figures(&mut f, &url, knob("REPORT_RENEWAL_LOCKS", 10_000) as usize);

    eprintln!("idle background cost");
    idle_figures(
        &mut f,
        &url,
        Duration::from_secs(knob("REPORT_IDLE_SECS", 10)),
    );

    if knob("REPORT_SKIP_JAVA", 0) == 0 {
        java::figures(&mut f, &url, server.port, secs);
    }

    eprintln!("servers side by side");
    let servers_table = servers::figures(&mut f, secs);

    let curve_refs: Vec<(&str, &[Duration])> =
        curves.iter().map(|(n, v)| (*n, v.as_slice())).collect();
    let svg = plot::handoff_svg(&curve_refs, ping_p50);
    let _ = std::fs::create_dir_all("docs");
    std::fs::write("docs/handoff-latency.svg", svg).unwrap();
    std::fs::create_dir_all("target").unwrap();
    std::fs::write("target/bench-report.json", f.json()).unwrap();
    println!("\n{}\n{servers_table}", f.markdown());
    println!(
        "redis-server {} on loopback, {} cores; {:.0} s. JSON: target/bench-report.json, plot: docs/handoff-latency.svg",
        server_version(&url),
        thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        started.elapsed().as_secs_f64()
    );
}

/// The figures of one contended run, under `prefix`.
fn contended_figures(
    f: &mut Figures,
    prefix: &str,
    o: &mut Outcome,
    ping: Duration,
    idle_ping: Duration,
    ours: bool,
) {
    let acquisitions = o.acquisitions.max(1) as f64;
    let target = |t: &str| if ours { t.to_string() } else { String::new() };
    let what = if ours {
        "16 threads, 4 clients, 1 lock, hold 1 ms".to_string()
    } else {
        "same scenario".into()
    };
    f.put(
        &format!("{prefix}handoff_p50_over_ping"),
        ratio(percentile(&mut o.handoffs, 0.5), ping),
        &target("<= 4"),
        &what,
    );
    f.put(
        &format!("{prefix}handoff_p50_over_idle_ping"),
        ratio(percentile(&mut o.handoffs, 0.5), idle_ping),
        "",
        "the same over a PING after 1 ms asleep",
    );
    f.put(
        &format!("{prefix}handoff_p99_over_ping"),
        ratio(percentile(&mut o.handoffs, 0.99), ping),
        &target("<= 15"),
        &what,
    );
    f.put(
        &format!("{prefix}commands_per_acquisition"),
        o.commands as f64 / acquisitions,
        &target("<= 4"),
        "commands clients sent per acquisition",
    );
    if ours {
        // Issue 14 names the same figure so, with its own target.
        f.put(
            "requests_per_acquisition",
            o.commands as f64 / acquisitions,
            "<= 2.05",
            "the same: requests a client sent per contended acquisition",
        );
    }
    f.put(
        &format!("{prefix}max_wait_over_mean_wait"),
        ratio(max(&o.waits), mean(&o.waits)),
        &target("<= 2"),
        "longest wait over mean wait",
    );
    f.put(
        &format!("{prefix}self_handoff_share"),
        o.self_handoffs as f64 / o.handoffs.len().max(1) as f64,
        &target("<= 0.2"),
        "releasing thread took it straight back",
    );
    f.put(
        &format!("{prefix}acquisitions_per_s"),
        acquisitions / o.duration.as_secs_f64(),
        "",
        "throughput",
    );
    if o.timeouts > 0 {
        f.put(
            &format!("{prefix}timeouts"),
            o.timeouts as f64,
            "0",
            "acquisitions that waited 10 s in vain",
        );
    }
}

/// Keys left behind by 1,000 names each locked and released once, by a client whose fence
/// retention is 1 s, once that second (and the release latches' life) has passed.
fn fence_figures(f: &mut Figures, url: &str) {
    let client = redlatch::Client::builder(url)
        .key_prefix("retention")
        .fence_retention(Duration::from_secs(1))
        .build()
        .unwrap();
    for i in 0..1000 {
        let guard = client
            .lock(&format!("entity:{i}"))
            .lock_with_lease(Duration::from_millis(100))
            .unwrap();
        guard.unlock().unwrap();
    }
    thread::sleep(Duration::from_millis(1500));
    let mut con = connection(url);
    let count = |con: &mut redis::Connection, pattern: &str| -> usize {
        let mut cursor = 0u64;
        let mut n = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query(con)
                .unwrap();
            n += keys.len();
            if next == 0 {
                return n;
            }
            cursor = next;
        }
    };
    f.put(
        "fence_keys_left_after_retention",
        count(&mut con, "retention:{*}:fence") as f64,
        "0",
        "fence keys of 1,000 names used once, 1.5 s after their release (retention 1 s)",
    );
    f.put(
        "other_keys_left_after_retention",
        count(&mut con, "retention:*") as f64,
        "0",
        "any key of those names still there (a release writes no latch outside a Cluster)",
    );
}

/// A latch's wake-up: four threads of another client wait on a latch at 1; from the call
/// that counts it down to each waiter's return, over many rounds. Each round also hands a
/// lock over between the same two clients, to one thread of the waiting client that has
/// waited as long: a baseline in the same state of the machine (idle threads woken), where
/// the contended scenarios' hand-off (`lock_handoff_p50`) runs with every core busy.
fn latch_figures(f: &mut Figures, url: &str, ping: Duration, lock_handoff_p50: Duration) {
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

/// Median round trips and uncontended cycles, measured in alternating blocks so that each
/// sees the same machine: a PING, SET NX PX with a compare-and-delete script, and the seed articles' HSET
/// lock and unlock scripts, all on one connection; and redlatch's own cycle on `lock`.
struct Cycles {
    ping: Duration,
    set_nx: Duration,
    seed_hset: Duration,
    seed_fenced: Duration,
    redlatch: Duration,
}

fn uncontended_cycles(url: &str, lock: &redlatch::Lock) -> Cycles {
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

fn time_one(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

/// Quantile `q` of `ours` over the same quantile of `theirs`.
fn quantile_ratio(ours: &mut [Duration], theirs: &mut [Duration], q: f64) -> f64 {
    ratio(percentile(ours, q), percentile(theirs, q))
}

/// Four threads, each in its own client, on one lock; each holds 1 ms and waits 1 ms after
/// its release before asking again, so every hand-off goes to a thread that waited. For
/// redlatch and the polling lock; and redlatch's hand-off in stages.
fn handoff_to_waiter_figures(f: &mut Figures, url: &str, secs: Duration) {
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

/// One client holding many watchdog locks: round trips per renewal period, and the renewal
/// thread's CPU.
fn renewal_figures(f: &mut Figures, url: &str, locks: usize) {
    let watchdog = Duration::from_secs(3);
    let period = watchdog / 3;
    let before = cpu::tids();
    let client = redlatch::Client::builder(url)
        .watchdog_timeout(watchdog)
        .build()
        .unwrap();
    let threads: std::collections::HashSet<u32> =
        cpu::tids().difference(&before).copied().collect();
    let guards: Vec<redlatch::LockGuard> = (0..locks)
        .map(|i| client.lock(&format!("renew-{i}")).lock().unwrap())
        .collect();
    let mut admin = connection(url);
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut admin)
        .unwrap();
    let periods = 3;
    let cpu_before = cpu::cpu_of(&threads);
    let t = Instant::now();
    thread::sleep(period * periods);
    let cpu_used = cpu::cpu_of(&threads) - cpu_before;
    let wall = t.elapsed();
    let calls = scenario::command_stats(&mut admin)
        .get("evalsha")
        .copied()
        .unwrap_or(0);
    assert!(guards.iter().all(|g| !g.is_lost()), "renewal lost locks");
    let key = if locks == 10_000 {
        "10k".to_string()
    } else {
        locks.to_string()
    };
    f.put(
        &format!("renewal_round_trips_per_period_{key}"),
        calls as f64 / periods as f64,
        "<= 100",
        "script calls the renewal thread makes per period",
    );
    f.put(
        &format!("renewal_cpu_percent_{key}"),
        100.0 * ratio(cpu_used, wall),
        "<= 5",
        "client threads' CPU, % of one core",
    );
    drop(guards);
}

/// A client with 1,000 locks held and 100 threads waiting, nothing released: CPU of its two
/// threads.
fn idle_figures(f: &mut Figures, url: &str, span: Duration) {
    let holder = redlatch::Client::open(url).unwrap();
    let before = cpu::tids();
    let client = redlatch::Client::open(url).unwrap();
    let threads: std::collections::HashSet<u32> =
        cpu::tids().difference(&before).copied().collect();
    let guards: Vec<redlatch::LockGuard> = (0..1000)
        .map(|i| client.lock(&format!("idle-held-{i}")).lock().unwrap())
        .collect();
    let (release_tx, release_rx) = crossbeam_channel::bounded::<()>(0);
    let holder_thread = {
        let holder = holder.clone();
        thread::spawn(move || {
            let held: Vec<_> = (0..100)
                .map(|i| holder.lock(&format!("idle-wait-{i}")).lock().unwrap())
                .collect();
            let _ = release_rx.recv();
            drop(held);
        })
    };
    let mut admin = connection(url);
    assert!(support::eventually(Duration::from_secs(30), || {
        redis::cmd("EXISTS")
            .arg("redlatch:{idle-wait-99}")
            .query::<i64>(&mut admin)
            .unwrap()
            == 1
    }));
    let waiters: Vec<_> = (0..100)
        .map(|i| {
            let lock = client.lock(&format!("idle-wait-{i}"));
            thread::spawn(move || {
                lock.try_lock(Duration::from_secs(120), None)
                    .unwrap()
                    .is_some()
            })
        })
        .collect();
    assert!(support::eventually(Duration::from_secs(30), || {
        support::pubsub_channels(&mut admin, "redlatch:{idle-wait-*}:unlocked").len() == 100
    }));
    let cpu_before = cpu::cpu_of(&threads);
    let t = Instant::now();
    thread::sleep(span);
    let cpu_used = cpu::cpu_of(&threads) - cpu_before;
    f.put(
        "idle_background_cpu_percent",
        100.0 * ratio(cpu_used, t.elapsed()),
        "<= 0.5",
        "subscriber + renewal threads, 1,000 held, 100 waiting",
    );
    let _ = release_tx.send(());
    holder_thread.join().unwrap();
    assert!(waiters.into_iter().all(|w| w.join().unwrap()));
    drop(guards);
}

fn server_version(url: &str) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut connection(url))
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_string()
}
