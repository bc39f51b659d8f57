//! The scenario report: `cargo bench --bench report`.
//!
//! Runs every scenario against a private redis-server, for redlatch and two baselines (a
//! polling lock as the seed articles build it, and the `redlock` crate), prints a markdown
//! table, writes the figures as one flat JSON object to `target/bench-report.json`, and draws
//! the hand-off latency percentiles to `target/handoff-latency.svg`. All figures are ratios
//! taken in the same run (to a PING round trip, to raw script round trips), because absolute
//! times on a shared machine mean little.
//!
//! This file runs the sections in order; each module measures one thing and says why:
//! `uncontended` (the lock cycle, PING the yardstick), `contended` (16 threads on one lock),
//! `handoff` (to a waiter, in stages), `redisson` (its scripts' layout), `family` (the other
//! primitives' cycles and hand-offs), `latch` (count-down wake-ups), `many_keys` (1,000 locks,
//! no hold), `fence` (the fence's retention), `renewal` (the watchdog), `idle` (background
//! CPU), `java` (the real Redisson) and `servers` (the server matrix). `figures` holds what
//! they measure and writes it out. The order is part of the figures: a scenario runs on the
//! machine its predecessor left.
//!
//! Knobs (environment): `REPORT_SECS` per contended scenario (default 8), `REPORT_IDLE_SECS`
//! (10), `REPORT_RENEWAL_LOCKS` (10000), `REPORT_LATCH_ROUNDS` (200), `REPORT_SKIP_REDLOCK=1`
//! to leave the peer crate out, `REPORT_SKIP_JAVA=1` to leave out the real Redisson (`java`: it
//! needs `java` and `mvn`), `REPORT_CROWD` (200) for its crowd's threads. The servers section
//! (`servers.rs`: the lock cycle and hand-offs on Redis 6.2, Redis 7.0 and Valkey 9.1 side by
//! side) has its own knobs there; `REPORT_ONLY=servers` runs it alone, its JSON to
//! `target/bench-report-servers.json`. `REPORT_ONLY=family` (with the latch), `=redisson` and
//! `=java` (its JSON to `target/bench-report-java.json`) run those sections alone.
//!
//! The plot goes under `target/` so that a run leaves the tree clean; the README shows the
//! copy in `docs/handoff-latency.svg`, which changes only on purpose: `REPORT_PLOT_TO_DOCS=1`
//! copies the run's plot there (or `cp target/handoff-latency.svg docs/` after a run).

#[path = "../../tests/support/mod.rs"]
mod support;

mod contended;
mod contenders;
mod cpu;
mod family;
mod fence;
mod figures;
mod handoff;
mod idle;
mod java;
mod latch;
mod many_keys;
mod plot;
mod redisson;
mod renewal;
mod scenario;
mod servers;
mod stats;
mod uncontended;

use std::thread;
use std::time::{Duration, Instant};

use contenders::connection;
use figures::Figures;
use stats::{percentile, time_each};

/// Where the report draws its plot, and the tracked copy the README shows.
const PLOT: &str = "target/handoff-latency.svg";
const DOCS_PLOT: &str = "docs/handoff-latency.svg";

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
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
        latch::figures(&mut f, &url, ping, lock_handoff_p50);
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
    let pings = uncontended::figures(&mut f, &url);
    let mut curves = contended::Curves::new();
    contended::figures(&mut f, &url, secs, pings, &mut curves);
    handoff::figures(&mut f, &url, secs);
    redisson::figures(&mut f, &url, secs);
    redisson::wake_figures(&mut f, &url);
    if knob("REPORT_SKIP_REDLOCK", 0) == 0 {
        contended::redlock_figures(&mut f, &url, secs, pings, &mut curves);
    }
    contended::share_of_polling(&mut f);

    eprintln!("count-down latch wake-ups");
    let family_lock_handoff_p50 = family::figures(&mut f, &url, secs);
    latch::figures(&mut f, &url, pings.warm, family_lock_handoff_p50);

    eprintln!("16 threads over 1000 locks, no hold");
    many_keys::figures(&mut f, &url, secs);

    eprintln!("keys left after the fence retention");
    fence::figures(&mut f, &url);

    eprintln!("renewal of many locks");
    renewal::figures(&mut f, &url, knob("REPORT_RENEWAL_LOCKS", 10_000) as usize);

    eprintln!("idle background cost");
    idle::figures(
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
    let svg = plot::handoff_svg(&curve_refs, pings.warm);
    std::fs::create_dir_all("target").unwrap();
    std::fs::write(PLOT, &svg).unwrap();
    let mut plots = PLOT.to_string();
    if knob("REPORT_PLOT_TO_DOCS", 0) != 0 {
        std::fs::create_dir_all("docs").unwrap();
        std::fs::write(DOCS_PLOT, &svg).unwrap();
        plots.push_str(&format!(", copied to {DOCS_PLOT}"));
    }
    std::fs::write("target/bench-report.json", f.json()).unwrap();
    println!("\n{}\n{servers_table}", f.markdown());
    println!(
        "redis-server {} on loopback, {} cores; {:.0} s. JSON: target/bench-report.json, plot: {plots}",
        server_version(&url),
        thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        started.elapsed().as_secs_f64()
    );
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
