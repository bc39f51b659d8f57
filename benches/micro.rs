//! Criterion micro-benchmarks, each beside a PING round trip on the same kind of connection,
//! against a private redis-server: `cargo bench --bench micro`.
//!
//! - `ping`: the reference round trip (TCP_NODELAY, like redlatch's own connections);
//! - `cycle`: an uncontended `try_lock(ZERO)` + `unlock` (two script calls);
//! - `busy_try`: `try_lock(ZERO)` on a lock another client holds (one script call).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use redis::io::tcp::TcpSettings;

fn nodelay_connection(url: &str) -> redis::Connection {
    let info = redis::IntoConnectionInfo::into_connection_info(url).unwrap();
    let info = info.set_tcp_settings(TcpSettings::default().set_nodelay(true));
    redis::Client::open(info).unwrap().get_connection().unwrap()
}

fn bench(c: &mut Criterion) {
    let server = support::RedisServer::start();
    let url = server.url();
    let mut group = c.benchmark_group("round trips");

    let mut con = nodelay_connection(&url);
    group.bench_function("ping", |b| {
        b.iter(|| redis::cmd("PING").query::<String>(&mut con).unwrap())
    });

    let client = redlatch::Client::open(&url).unwrap();
    let lock = client.lock("micro-cycle");
    group.bench_function("cycle", |b| {
        b.iter(|| {
            let guard = lock
                .try_lock(Duration::ZERO, None)
                .unwrap()
                .expect("uncontended");
            guard.unlock().unwrap();
        })
    });

    let holder = redlatch::Client::open(&url).unwrap();
    let _held = holder.lock("micro-busy").lock().unwrap();
    let busy = client.lock("micro-busy");
    group.bench_function("busy_try", |b| {
        b.iter(|| assert!(busy.try_lock(Duration::ZERO, None).unwrap().is_none()))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
