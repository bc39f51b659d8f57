//! The servers section: the lock cycle and the hand-off scenarios on each server of the test
//! matrix (Redis 6.2, Redis 7.0, Valkey 9.1) in one run, side by side, so that whoever picks a
//! server sees what redlatch costs on it against the same baselines on the same server.
//!
//! A figure is a ratio taken on one server (redlatch over the seed scripts, over PING, over
//! the polling lock), never one server's time over another's: the servers run on one shared
//! machine, and a ratio of two things measured together cancels most of its drift.
//!
//! Each server runs as its own private process from the folder `scripts/ensure-servers` gives
//! for it; a server it cannot give is left out with a note. The scenarios run `REPORT_SERVER_RUNS`
//! times (default 3) over all the servers, the order rotated each run so that no server is
//! always first after a pause or last in a slow spell; a figure is the median of its runs.
//!
//! Knobs: `REPORT_SERVERS` (default `redis-6.2,redis-7.0,valkey-9.1`), `REPORT_SERVER_RUNS`,
//! `REPORT_SKIP_SERVERS=1` to leave the section out; `REPORT_SECS` as for the rest.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use crate::contenders::{Polling, Redlatch};
use crate::figures::{Figures, format_value};
use crate::knob;
use crate::scenario::{self, Contended};
use crate::stats::{quantile_ratio, ratio};
use crate::support::RedisServer;
use crate::uncontended;

/// The figures of the section, in table order: key, and what it is.
const ROWS: [(&str, &str); 9] = [
    (
        "cycle_over_seed_hset",
        "uncontended lock + unlock / the seed HSET scripts' cycle",
    ),
    ("cycle_over_ping", "uncontended lock + unlock / PING"),
    (
        "handoff_p50_over_polling",
        "hand-off to a waiter (4 threads, releaser pauses 1 ms), p50 / the polling lock's",
    ),
    ("handoff_p99_over_polling", "the same at p99"),
    (
        "handoff_p50_over_polling_varied_hold",
        "the same, holds of 0.5-1.5 ms, p50",
    ),
    ("handoff_p99_over_polling_varied_hold", "the same at p99"),
    (
        "t16_throughput_over_polling",
        "16 threads in 4 clients, hold 1 ms: acquisitions/s / the polling lock's",
    ),
    (
        "t16_handoff_p50_over_polling",
        "the same scenario: hand-off p50 / the polling lock's (which barges: its releaser often takes it back at once)",
    ),
    (
        "ping_us_p50",
        "PING round trip, µs (reference, not a ratio)",
    ),
];

/// A server of the matrix, started.
struct Running {
    name: String,
    version: String,
    server: RedisServer,
}

/// Runs the section and puts its medians into `f` as `servers.<server>.<key>`; returns its
/// markdown table, a column per server (empty when the section is left out).
pub fn figures(f: &mut Figures, secs: Duration) -> String {
    if knob("REPORT_SKIP_SERVERS", 0) != 0 {
        return String::new();
    }
    let wanted = std::env::var("REPORT_SERVERS")
        .unwrap_or_else(|_| "redis-6.2,redis-7.0,valkey-9.1".to_string());
    let servers: Vec<Running> = wanted
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .filter_map(start)
        .collect();
    if servers.is_empty() {
        eprintln!("servers: none could be started; section left out");
        return String::new();
    }
    let runs = knob("REPORT_SERVER_RUNS", 3).max(1) as usize;
    // Per server, per key, one value per run.
    let mut samples: Vec<BTreeMap<&str, Vec<f64>>> = vec![BTreeMap::new(); servers.len()];
    for run in 0..runs {
        for i in (0..servers.len()).map(|k| (k + run) % servers.len()) {
            let s = &servers[i];
            eprintln!("servers: run {}/{runs}, {} {}", run + 1, s.name, s.version);
            for (key, value) in measure(&s.server.url(), secs) {
                samples[i].entry(key).or_default().push(value);
            }
        }
    }

    let mut table = format!(
        "| figure |{} what |\n| --- |{} --- |\n",
        servers
            .iter()
            .map(|s| format!(" {} ({}) |", s.name, s.version))
            .collect::<String>(),
        " ---: |".repeat(servers.len()),
    );
    for (key, what) in ROWS {
        table.push_str(&format!("| `{key}` |"));
        for (s, values) in servers.iter().zip(samples.iter_mut()) {
            let values = values
                .get_mut(key)
                .map(Vec::as_mut_slice)
                .unwrap_or(&mut []);
            let m = median(values);
            f.put(&format!("servers.{}.{key}", s.name), m, "", what);
            // The runs' spread beside the median: a difference between servers smaller
            // than it is the machine, not the server.
            table.push_str(&match (values.first(), values.last()) {
                (Some(lo), Some(hi)) if values.len() > 1 => format!(
                    " {} ({}-{}) |",
                    format_value(m),
                    format_value(*lo),
                    format_value(*hi)
                ),
                _ => format!(" {} |", format_value(m)),
            });
        }
        table.push_str(&format!(" {what} |\n"));
    }
    for s in &servers {
        f.note(&format!("servers.{}.version", s.name), &s.version);
    }
    let runs_said = if runs == 1 {
        "One run".to_string()
    } else {
        format!("Median of {runs} runs (lowest-highest), the servers' order rotated each run")
    };
    table.push_str(&format!(
        "\n{runs_said}; REPORT_SECS={} s per contended scenario.\n",
        secs.as_secs_f64()
    ));
    table
}

/// Starts server `name` from the folder `scripts/ensure-servers` prints for it, or says why
/// not.
fn start(name: &str) -> Option<Running> {
    let out = Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/ensure-servers"
    ))
    .arg(name)
    .output();
    let folder = match out {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        Ok(out) => {
            eprintln!(
                "servers: {name} left out, scripts/ensure-servers failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Err(e) => {
            eprintln!("servers: {name} left out, scripts/ensure-servers did not run: {e}");
            return None;
        }
    };
    let binary = format!("{folder}/redis-server");
    let version = Command::new(&binary)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .find_map(|w| w.strip_prefix("v="))
                .map(str::to_string)
        });
    let Some(version) = version else {
        eprintln!("servers: {name} left out, {binary} --version gave no version");
        return None;
    };
    Some(Running {
        name: name.to_string(),
        version,
        server: RedisServer::start_program(&binary, &[]),
    })
}

/// One run of the section's scenarios on the server at `url`.
fn measure(url: &str, secs: Duration) -> Vec<(&'static str, f64)> {
    let client = redlatch::Client::open(url).unwrap();
    let cycles = uncontended::cycles(url, &client.lock("servers-cycle"));
    drop(client);
    let mut out = vec![
        (
            "cycle_over_seed_hset",
            ratio(cycles.redlatch, cycles.seed_hset),
        ),
        ("cycle_over_ping", ratio(cycles.redlatch, cycles.ping)),
        ("ping_us_p50", cycles.ping.as_secs_f64() * 1e6),
    ];

    // The report's own hand-off scenarios, into figures of their own, from which the ratios
    // are taken under the section's keys.
    let mut handoff = Figures::default();
    crate::handoff::figures(&mut handoff, url, secs);
    for key in [
        "handoff_p50_over_polling",
        "handoff_p99_over_polling",
        "handoff_p50_over_polling_varied_hold",
        "handoff_p99_over_polling_varied_hold",
    ] {
        if let Some(value) = handoff.get(key) {
            out.push((key, value));
        }
    }

    // The main table's 16-thread scenario, as `t16_throughput_over_polling` runs it.
    let four_by_four = Contended {
        clients: 4,
        threads_per_client: 4,
        hold: Duration::from_millis(1),
        hold_spread: Duration::ZERO,
        pause: Duration::ZERO,
        duration: secs,
    };
    let ours = Redlatch::new(url, 4);
    let mut o = scenario::contended(&ours, &four_by_four, url);
    drop(ours);
    let polling = Polling::new(url);
    let mut p = scenario::contended(&polling, &four_by_four, url);
    drop(polling);
    let per_s = |o: &scenario::Outcome| o.acquisitions as f64 / o.duration.as_secs_f64();
    out.push(("t16_throughput_over_polling", per_s(&o) / per_s(&p)));
    out.push((
        "t16_handoff_p50_over_polling",
        quantile_ratio(&mut o.handoffs, &mut p.handoffs, 0.5),
    ));
    out
}

/// The median of `v` (sorted in place); NaN when empty.
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
