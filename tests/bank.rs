//! The bank example (`examples/bank/`): its thread-per-request server under its load
//! generator, against real redis-servers, for a few seconds: the books balance with the
//! locks, and the same check catches the lost updates of the same bank without them.

mod support;

#[path = "../examples/bank/load.rs"]
mod load;
#[path = "../examples/bank/server.rs"]
mod server;

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use support::RedisServer;

/// Serves a bank of 4 accounts with `guard`, loads it with 12 clients for `seconds`.
fn run_bank(guard: server::Guard, seconds: u64) -> load::Summary {
    run_bank_in(guard, seconds, redlatch::Layout::Redlatch)
}

/// [`run_bank`], with the locks in `layout`.
fn run_bank_in(guard: server::Guard, seconds: u64, layout: redlatch::Layout) -> load::Summary {
    let (locks, store) = (RedisServer::start(), RedisServer::start());
    let bank = server::Bank {
        locks_url: locks.url(),
        store_url: store.url(),
        accounts: 4,
        opening_balance: 1000,
        guard,
        layout,
    };
    bank.open_accounts().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let serving = {
        let (bank, stop) = (bank.clone(), stop.clone());
        thread::spawn(move || server::serve(listener, bank, stop))
    };
    let summary = load::run(
        &addr,
        &bank.account_names(),
        12,
        Duration::from_secs(seconds),
    );
    stop.store(true, Ordering::Relaxed);
    serving.join().unwrap().unwrap();
    let summary = summary.unwrap();
    summary.print();
    summary
}

#[test]
fn under_load_the_books_balance_with_the_locks() {
    let summary = run_bank(server::Guard::Locks, 3);
    assert!(summary.done > 100, "too little happened: {summary:?}");
    assert_eq!(summary.total_before, summary.total_after);
    assert!(
        summary.lost_updates.is_empty(),
        "{:?}",
        summary.lost_updates
    );
    assert_eq!((summary.failed, summary.fenced), (0, 0), "{summary:?}");
    assert!(summary.holds());
}

#[test]
fn in_redissons_layout_the_books_balance_too() {
    let summary = run_bank_in(server::Guard::Locks, 3, redlatch::Layout::Redisson);
    assert!(summary.done > 100, "too little happened: {summary:?}");
    assert_eq!(summary.total_before, summary.total_after);
    assert!(
        summary.lost_updates.is_empty(),
        "{:?}",
        summary.lost_updates
    );
    assert_eq!((summary.failed, summary.fenced), (0, 0), "{summary:?}");
    assert!(summary.holds());
}

#[test]
fn without_the_locks_the_same_check_finds_lost_updates() {
    let summary = run_bank(server::Guard::Nothing, 2);
    assert!(
        !summary.holds(),
        "unguarded transfers lost nothing: {summary:?}"
    );
    assert!(!summary.lost_updates.is_empty());
}
