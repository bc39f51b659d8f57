//! A bank: a thread-per-request HTTP server whose transfers are guarded by redlatch
//! (`server.rs`), and a load generator that checks the books afterwards (`load.rs`).
//!
//! ```text
//! cargo run --release --example bank                      # serve on 127.0.0.1:8080
//! cargo run --release --example bank -- --load            # serve, load it, check, exit
//! cargo run --release --example bank -- --load --clients 64 --seconds 20 --accounts 4
//! cargo run --release --example bank -- --load --unguarded   # no locks: watch it break
//! cargo run --release --example bank -- --load --layout redisson  # locks Java can share
//! curl -X POST 'http://127.0.0.1:8080/transfer?from=acct-0&to=acct-1&amount=5'
//! curl http://127.0.0.1:8080/total
//! ```
//!
//! It starts two private `redis-server`s (from `PATH`), one for the locks and one for the
//! bank's store, unless `REDIS_URL` is set (then both live there, under their own keys).
//! With `--load` it runs the load generator against itself, prints what it saw and exits
//! non-zero if money appeared or vanished, or a transfer it acknowledged is not in the
//! balances. Without it, Ctrl-C or SIGTERM shuts the server down cleanly: requests waiting
//! for account locks are called off (503), those under way finish.

use std::net::TcpListener;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

mod load;
mod server;

// The test support starts the private redis-servers.
#[path = "../../tests/support/mod.rs"]
mod support;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let value = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let loaded = flag("--load");
    let (clients, seconds, accounts) = (
        value("--clients", 32) as usize,
        value("--seconds", 10),
        value("--accounts", 8).max(2) as usize,
    );

    let servers;
    let (locks_url, store_url) = match std::env::var("REDIS_URL") {
        Ok(url) => (url.clone(), url),
        Err(_) => {
            servers = [support::RedisServer::start(), support::RedisServer::start()];
            (servers[0].url(), servers[1].url())
        }
    };
    let bank = server::Bank {
        locks_url,
        store_url,
        accounts,
        opening_balance: 1000,
        // To see what the locks prevent: the same bank without them loses updates.
        guard: if flag("--unguarded") {
            server::Guard::Nothing
        } else {
            server::Guard::Locks
        },
        layout: match args
            .iter()
            .position(|a| a == "--layout")
            .and_then(|i| args.get(i + 1))
        {
            Some(layout) if layout == "redisson" => redlatch::Layout::Redisson,
            Some(layout) if layout != "redlatch" => {
                eprintln!("bank: --layout takes redlatch or redisson, not {layout}");
                return ExitCode::FAILURE;
            }
            _ => redlatch::Layout::Redlatch,
        },
    };
    if let Err(e) = bank.open_accounts() {
        eprintln!("bank: cannot open the accounts: {e}");
        return ExitCode::FAILURE;
    }
    let addr = if loaded {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:8080"
    };
    let listener = match TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("bank: cannot listen on {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = listener.local_addr().unwrap().to_string();
    println!("bank: {accounts} accounts of 1000, serving http://{addr}/");
    let stop = Arc::new(AtomicBool::new(false));
    let names = bank.account_names();
    let serving = {
        let (bank, stop) = (bank.clone(), stop.clone());
        thread::spawn(move || server::serve(listener, bank, stop))
    };
    if !loaded {
        // Ctrl-C or SIGTERM (a deploy) stops the server cleanly: see `server.rs`.
        on_signal_stop(stop.clone());
        return match serving.join() {
            Ok(Ok(served)) => {
                println!(
                    "bank: shut down in {:?}, {} waits for locks called off",
                    served.shutdown, served.called_off
                );
                ExitCode::SUCCESS
            }
            _ => ExitCode::FAILURE,
        };
    }
    println!("load: {clients} clients for {seconds} s");
    let summary = load::run(&addr, &names, clients, Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    if let Ok(Ok(served)) = serving.join() {
        println!(
            "shutdown: {:?}, {} waits for locks called off",
            served.shutdown, served.called_off
        );
    }
    match summary {
        Ok(summary) => {
            summary.print();
            if summary.holds() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("load: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Sets `stop` once the process gets SIGINT or SIGTERM. The handler only sets a flag (all a
/// signal handler may safely do); a thread of ours passes it on.
fn on_signal_stop(stop: Arc<AtomicBool>) {
    static SIGNALLED: AtomicBool = AtomicBool::new(false);
    extern "C" fn handler(_: libc::c_int) {
        SIGNALLED.store(true, Ordering::SeqCst);
    }
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler is async-signal-safe: it only stores to an atomic.
        unsafe {
            libc::signal(signal, handler as *const () as libc::sighandler_t);
        }
    }
    thread::spawn(move || {
        while !SIGNALLED.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(20));
        }
        eprintln!("bank: shutting down");
        stop.store(true, Ordering::SeqCst);
    });
}
