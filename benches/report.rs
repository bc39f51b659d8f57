//! Scenario report (work in progress): PING, lock cycle, subscribe latency.
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let server = support::RedisServer::start();
    let mut con = server.admin();
    let n = 2000;
    let mut ping = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let _: String = redis::cmd("PING").query(&mut con).unwrap();
        ping.push(t.elapsed());
    }
    let client = redlatch::Client::open(&server.url()).unwrap();
    let lock = client.lock("cycle");
    let mut cycle = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let g = lock.try_lock(Duration::ZERO, None).unwrap().unwrap();
        g.unlock().unwrap();
        cycle.push(t.elapsed());
    }
    let mut sub = Vec::new();
    for i in 0..300 {
        sub.push(redlatch::bench_support::subscribe_latency(&client, &format!("s{i}")).unwrap());
    }
    let p = pct(&mut ping, 0.5);
    let c = pct(&mut cycle, 0.5);
    let s = pct(&mut sub, 0.5);
    println!(
        "ping p50 {p:?} cycle p50 {c:?} ({:.2}x) subscribe p50 {s:?} ({:.2}x) p99 {:?}",
        c.as_secs_f64() / p.as_secs_f64(),
        s.as_secs_f64() / p.as_secs_f64(),
        pct(&mut sub, 0.99)
    );
}
