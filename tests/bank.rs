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

/// SIGTERM under load, as a deploy does it: every account's lock is held elsewhere, so each
/// request in flight waits for it (up to 5 s) in the queue in Redis. Stopping the server calls
/// every such wait off at once: each answers 503, the queue is empty, the bank holds nothing,
/// and `serve` returns in well under the 5 s the waits had left.
#[test]
fn under_load_the_server_shuts_down_cleanly_calling_off_the_waits() {
    const REQUESTS: usize = 12;
    let (locks, store) = (RedisServer::start(), RedisServer::start());
    let bank = server::Bank {
        locks_url: locks.url(),
        store_url: store.url(),
        accounts: 2,
        opening_balance: 1000,
        guard: server::Guard::Locks,
        layout: redlatch::Layout::Redlatch,
    };
    bank.open_accounts().unwrap();
    // Another process holds the first account: every transfer waits.
    let other = redlatch::Client::builder(&locks.url())
        .key_prefix("bank")
        .build()
        .unwrap();
    let held = other.lock("acct-0").lock().unwrap();

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let serving = {
        let (bank, stop) = (bank.clone(), stop.clone());
        thread::spawn(move || server::serve(listener, bank, stop))
    };
    let requests: Vec<_> = (0..REQUESTS)
        .map(|_| {
            let addr = addr.clone();
            thread::spawn(move || {
                let mut http = load::Http::connect(&addr).unwrap();
                http.call("POST", "/transfer?from=acct-0&to=acct-1&amount=1")
                    .unwrap()
            })
        })
        .collect();
    let queued = || {
        other
            .inspect(redlatch::ObjectKind::Lock, "acct-0")
            .unwrap()
            .queue
            .len()
    };
    assert!(
        support::eventually(Duration::from_secs(5), || queued() == REQUESTS),
        "the requests did not all queue: {} of {REQUESTS}",
        queued()
    );

    stop.store(true, Ordering::Relaxed);
    let served = serving.join().unwrap().unwrap();
    println!("shutdown took {:?}", served.shutdown);
    assert!(
        served.shutdown < Duration::from_secs(2),
        "shutdown took {:?}",
        served.shutdown
    );
    assert_eq!(served.called_off, REQUESTS as u64);
    for answer in requests.into_iter().map(|r| r.join().unwrap()) {
        assert_eq!(answer, (503, "shutting down\n".to_string()));
    }
    // Nothing of the bank's is left in Redis: no waiter queued, no account held but ours.
    assert_eq!(queued(), 0);
    assert!(!other.lock("acct-1").is_locked().unwrap());
    let report = other.inspect(redlatch::ObjectKind::Lock, "acct-0").unwrap();
    assert_eq!(report.holders.len(), 1);
    assert_eq!(report.holders[0].owner, held.owner_id());
    drop(held);
    // And no money moved.
    let mut con = redis::Client::open(store.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let transfers: Option<u64> = redis::cmd("GET")
        .arg("bank:transfers")
        .query(&mut con)
        .unwrap();
    assert_eq!(transfers, None);
}
