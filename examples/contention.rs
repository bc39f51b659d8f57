//! Many clients and threads fighting over a few locks: throughput, wait times, handoff
//! latency, and a check that fencing tokens only ever go up.
//!
//! ```text
//! cargo run --release --example contention
//! REDIS_URL=redis://127.0.0.1:6379/ RUN_SECS=3 cargo run --release --example contention
//! ```
//!
//! Without `REDIS_URL` it starts a private `redis-server` (from `PATH`) on a free loopback
//! port and stops it at the end. `TOPOLOGY=cluster` starts a private Redis Cluster instead
//! (three masters, one replica each, on free ports) and runs the same contention on it, with
//! the locks spread over its masters:
//!
//! ```text
//! TOPOLOGY=cluster LOCKS=6 cargo run --release --example contention
//! ```
//! `CLIENTS` clients (default 4), each with `THREADS` threads
//! (default 4), take turns on `LOCKS` locks (default 2) for `RUN_SECS` seconds (default 10),
//! holding each lock `HOLD_MS` milliseconds (default 1). Every second it prints the
//! acquisitions, the wait in `try_lock` and the *handoff* latency: from the moment a holder
//! starts releasing to the moment the next holder, in any client, has the lock. Waiters are
//! woken through pub/sub, not by polling, so a handoff takes a message and a round trip, not
//! a polling interval. Fencing tokens are checked to increase strictly per lock; the program
//! exits non-zero if one does not (or if a thread fails).

use std::error::Error;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, ExitCode, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvTimeoutError, Sender};
use parking_lot::Mutex;
use redlatch::{Client, Lock};

// The test support starts the private Cluster for TOPOLOGY=cluster.
#[path = "../tests/support/mod.rs"]
mod support;

/// How long one `try_lock` may wait before it counts as a timeout.
const MAX_WAIT: Duration = Duration::from_secs(5);
/// The quantiles printed every second, and at the end.
const EACH_SECOND: [(&str, f64); 2] = [("p50", 0.50), ("p99", 0.99)];
const AT_THE_END: [(&str, f64); 3] = [("p50", 0.50), ("p99", 0.99), ("max", 1.0)];

/// What a worker thread reports to the main thread.
enum Event {
    Acquired {
        wait: Duration,
        handoff: Option<Duration>,
    },
    Timeout,
    Violation,
    Failed,
}

/// Per lock, shared by every thread of every client.
#[derive(Default)]
struct Slot {
    /// When the last holder started its release; taken by the next holder.
    released_at: Option<Instant>,
    /// The last fencing token handed out for this lock.
    last_token: Option<u64>,
}

fn main() -> ExitCode {
    // RUST_LOG=redlatch=debug shows what the crate logs; warnings are on by default.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("contention: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<ExitCode, Box<dyn Error>> {
    let clients = knob("CLIENTS", 4, 1)?;
    let threads = knob("THREADS", 4, 1)? as usize;
    let locks = knob("LOCKS", 2, 1)?;
    let seconds = knob("RUN_SECS", 10, 1)?;
    let hold = Duration::from_millis(knob("HOLD_MS", 1, 0)?);

    // `_server` and `_cluster` are declared before the clients, so they are dropped (killed)
    // after them.
    let cluster = std::env::var("TOPOLOGY").is_ok_and(|t| t == "cluster");
    let (url, _server) = match std::env::var("REDIS_URL") {
        _ if cluster => (String::new(), None),
        Ok(url) => (url, None),
        Err(_) => {
            let server = RedisServer::start()?;
            (format!("redis://127.0.0.1:{}/", server.port), Some(server))
        }
    };
    let _cluster = cluster.then(|| {
        println!("starting a private Redis Cluster (3 masters, 3 replicas)...");
        support::topology::Cluster::start()
    });
    let (url, clients): (String, Vec<Client>) = match &_cluster {
        Some(cluster) => {
            let seeds = cluster.seed_urls();
            let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
            let clients = (0..clients)
                .map(|_| Client::cluster_builder(&seeds).build())
                .collect::<Result<_, _>>()?;
            (format!("a cluster seeded at {}", seeds[0]), clients)
        }
        None => {
            let clients = (0..clients)
                .map(|_| Client::open(&url))
                .collect::<Result<_, _>>()?;
            (url, clients)
        }
    };
    let slots: Vec<Mutex<Slot>> = (0..locks).map(|_| Mutex::default()).collect();
    println!(
        "{} clients x {threads} threads, {locks} locks, {seconds} s, holding {hold:?}, at {url}",
        clients.len()
    );

    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let mut tally = Tally::default();
    thread::scope(|scope| {
        let (tx, rx) = crossbeam_channel::unbounded();
        for (c, client) in clients.iter().enumerate() {
            let handles: Vec<Lock> = (0..locks)
                .map(|i| client.lock(&format!("demo-{i}")))
                .collect();
            for t in 0..threads {
                let (handles, slots, tx) = (handles.clone(), &slots, tx.clone());
                let first = c * threads + t; // spreads the threads over the locks
                scope.spawn(move || worker(&handles, slots, first, hold, deadline, &tx));
            }
        }
        drop(tx); // the channel disconnects when the last worker ends

        for s in 1..=seconds {
            let all_done = loop {
                match rx.recv_deadline(start + Duration::from_secs(s)) {
                    Ok(event) => tally.record(event),
                    Err(RecvTimeoutError::Timeout) => break false,
                    Err(RecvTimeoutError::Disconnected) => break true,
                }
            };
            let second = &mut tally.second;
            println!(
                "{s:>4} s {:>6} acq/s   wait {}   handoff {}",
                second.waits.len(),
                quantiles(&mut second.waits, &EACH_SECOND, ms),
                quantiles(&mut second.handoffs, &EACH_SECOND, us),
            );
            tally.second = Samples::default();
            if all_done {
                break; // every worker has ended: at the deadline, or failed
            }
        }
        rx.iter().for_each(|event| tally.record(event)); // events after the last tick
    });

    let elapsed = start.elapsed().as_secs_f64();
    let total = &mut tally.total;
    let acquisitions = total.waits.len();
    let rate = acquisitions as f64 / elapsed;
    let wait = quantiles(&mut total.waits, &AT_THE_END, ms);
    let handoff = quantiles(&mut total.handoffs, &AT_THE_END, us);
    println!("--- summary");
    println!("acquisitions      {acquisitions} in {elapsed:.1} s: {rate:.0}/s");
    println!("wait              {wait}");
    println!("handoff           {handoff}");
    println!("token violations  {}", tally.violations);
    println!("timeouts          {}", tally.timeouts);
    if tally.failures > 0 {
        println!("failed threads    {}", tally.failures);
    }
    if tally.violations > 0 || tally.failures > 0 {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// One thread: take the locks in turn until the deadline, hold each for `hold`, release.
fn worker(
    locks: &[Lock],
    slots: &[Mutex<Slot>],
    first: usize,
    hold: Duration,
    deadline: Instant,
    events: &Sender<Event>,
) {
    let send = |event| drop(events.send(event)); // the receiver outlives every worker
    let mut next = first;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let (lock, slot) = (&locks[next % locks.len()], &slots[next % locks.len()]);
        next += 1;
        let limit = MAX_WAIT.min(left);
        let t0 = Instant::now();
        let guard = match lock.try_lock(limit, None) {
            Ok(Some(guard)) => guard,
            Ok(None) if limit == MAX_WAIT => {
                send(Event::Timeout);
                continue;
            }
            Ok(None) => break, // cut short by the deadline
            Err(e) => {
                eprintln!("try_lock({:?}) failed: {e}", lock.name());
                return send(Event::Failed);
            }
        };
        let acquired = Instant::now();
        let token = guard.fencing_token();
        let (handoff, last) = {
            let mut slot = slot.lock();
            let handoff = slot.released_at.take().map(|r| acquired.duration_since(r));
            (handoff, slot.last_token.replace(token))
        };
        if let Some(last) = last.filter(|&last| token <= last) {
            eprintln!("VIOLATION on {}: token {token} after {last}", lock.name());
            send(Event::Violation);
        }
        let wait = acquired - t0;
        send(Event::Acquired { wait, handoff });

        thread::sleep(hold);
        slot.lock().released_at = Some(Instant::now());
        if let Err(e) = guard.unlock() {
            eprintln!("unlock({:?}) failed: {e}", lock.name());
            return send(Event::Failed);
        }
    }
}

/// Wait and handoff times.
#[derive(Default)]
struct Samples {
    waits: Vec<Duration>,
    handoffs: Vec<Duration>,
}

/// The samples of the current second and of the whole run, and the counters.
#[derive(Default)]
struct Tally {
    second: Samples,
    total: Samples,
    timeouts: u64,
    violations: u64,
    failures: u64,
}

impl Tally {
    fn record(&mut self, event: Event) {
        match event {
            Event::Acquired { wait, handoff } => {
                for samples in [&mut self.second, &mut self.total] {
                    samples.waits.push(wait);
                    samples.handoffs.extend(handoff);
                }
            }
            Event::Timeout => self.timeouts += 1,
            Event::Violation => self.violations += 1,
            Event::Failed => self.failures += 1,
        }
    }
}

/// "p50 <x>  p99 <y> ..." for the given quantiles (1.0 is the max); zeros without samples.
fn quantiles(
    samples: &mut [Duration],
    which: &[(&str, f64)],
    show: fn(Duration) -> String,
) -> String {
    samples.sort_unstable();
    let at = |q: f64| match samples.len() {
        0 => Duration::ZERO,
        n => samples[((n - 1) as f64 * q).round() as usize],
    };
    let parts: Vec<String> = which
        .iter()
        .map(|&(name, q)| format!("{name} {}", show(at(q))))
        .collect();
    parts.join("  ")
}

fn ms(d: Duration) -> String {
    format!("{:>6.2} ms", d.as_secs_f64() * 1e3)
}

fn us(d: Duration) -> String {
    format!("{:>5} µs", d.as_micros())
}

/// An environment variable as a number, `default` when unset.
fn knob(name: &str, default: u64, min: u64) -> Result<u64, String> {
    let Ok(text) = std::env::var(name) else {
        return Ok(default);
    };
    match text.trim().parse() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!("{name}={text:?}: expected a whole number >= {min}")),
    }
}

/// A private `redis-server`, killed when dropped.
struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    fn start() -> Result<RedisServer, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free loopback port: {e}"))?
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => "redis-server is not on PATH: install it \
                     (`apt-get install redis-server`) or set REDIS_URL to a running Redis"
                    .to_string(),
                _ => format!("cannot start redis-server: {e}"),
            })?;
        let mut server = RedisServer { child, port }; // killed if it never listens

        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let give_up = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("redis-server exited at start ({status})"));
            }
            if Instant::now() >= give_up {
                return Err(format!("redis-server did not listen on {addr} within 10 s"));
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
