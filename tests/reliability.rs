//! The safety checker (`tests/support/checker.rs`) under injected faults: threads in several
//! clients take turns on locks and write to a protected resource with their fencing tokens.
//! - Faults that keep the lock state (killed command and pub/sub connections, SCRIPT FLUSH,
//!   CLIENT PAUSE shorter than the lease): no overlap, no rejected write, no guard reported
//!   lost, no error, nothing hung.
//! - Faults that lose it (kill -9 and restart without persistence, SIGSTOP of the server past
//!   the watchdog timeout): every overlap and every rejected write belongs to a holder that
//!   was told its lock was lost, and nothing hangs.
//! - A holder process paused past its lease (Kleppmann's scenario): told on resume, and its
//!   late write fenced off.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use support::checker::{Checked, Checker, Config, Counts, Resource};
use support::{Proxy, RedisServer, eventually};

/// Entry point of the checker's child processes; does nothing unless started by a checker.
#[test]
#[ignore = "run as a child process by the checker"]
fn checker_child() {
    support::checker::run_child();
}

fn start_checker(lock_url: &str, resource: &RedisServer, config: &Config) -> Checker {
    Checker::start(lock_url, &resource.url(), config, || {
        support::child_test_command("checker_child")
    })
}

/// Stops the checker and checks what every run must show: no child hung, no holder was left
/// unaware of an overlap, an out-of-order entry or a rejected write, and each child's client
/// left no thread behind.
fn finish(checker: Checker, config: &Config) -> Counts {
    let within = config.wait + config.response_timeout * 4 + Duration::from_secs(10);
    let (counts, leftovers, ()) = checker.finish(within, || ());
    eprintln!("{counts:?}");
    assert_eq!(counts.hung, 0, "a child did not finish: {counts:?}");
    assert_eq!(counts.other_errors, 0, "unexpected errors: {counts:?}");
    assert_eq!(
        counts.unreported, 0,
        "overlaps, out-of-order entries or rejected writes never reported: {counts:?}"
    );
    assert_eq!(leftovers.len(), config.processes);
    assert!(
        leftovers.iter().all(|l| l.threads <= 0),
        "a client left threads behind: {leftovers:?}"
    );
    counts
}

#[test]
fn fenced_writes_stay_safe_under_faults_that_keep_the_lock_state() {
    under_faults_that_keep_the_lock_state(vec![Checked::Lock], redlatch::Layout::Redlatch);
}

/// The same in Redisson's layout, where a release wakes waiters instead of handing over.
#[test]
fn the_redisson_layout_stays_safe_under_faults_that_keep_the_lock_state() {
    let counts =
        under_faults_that_keep_the_lock_state(Checked::ALL.to_vec(), redlatch::Layout::Redisson);
    assert_eq!(counts.occupancy, 0, "a shared object's promise was broken");
    assert_eq!(counts.latch_early, 0, "a latch wait returned before zero");
}

/// Every kind of the family in turn (lock, spin lock, read, write, permits, latch rounds):
/// besides the locks' promises, never a writer with another holder, never more permits in
/// use than the total, and no latch wait released before zero.
#[test]
fn the_lock_family_stays_safe_under_faults_that_keep_the_lock_state() {
    let counts =
        under_faults_that_keep_the_lock_state(Checked::ALL.to_vec(), redlatch::Layout::Redlatch);
    assert_eq!(counts.occupancy, 0, "a shared object's promise was broken");
    assert_eq!(counts.latch_early, 0, "a latch wait returned before zero");
}

/// The checker over `kinds` while connections are killed, scripts flushed, clients paused
/// and the network cut, all well within the lease.
fn under_faults_that_keep_the_lock_state(kinds: Vec<Checked>, layout: redlatch::Layout) -> Counts {
    let server = RedisServer::start();
    let resource = RedisServer::start();
    // Clients reach the server through a proxy that can cut or stall their connections.
    let proxy = Proxy::start(server.port);
    let config = Config {
        processes: 3,
        threads: 3,
        locks: 2,
        hold: Duration::from_micros(500),
        wait: Duration::from_secs(10),
        watchdog: Duration::from_secs(3),
        response_timeout: Duration::from_secs(3),
        kinds,
        layout,
    };
    let checker = start_checker(&proxy.url(), &resource, &config);

    let mut admin = server.admin();
    let commands: [&[&str]; 5] = [
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
        &["CLIENT", "KILL", "TYPE", "pubsub"],
        &["SCRIPT", "FLUSH"],
        &["CLIENT", "PAUSE", "500", "WRITE"],
        &["CLIENT", "PAUSE", "500", "ALL"],
    ];
    // Wait for the children to get going, so that every fault lands on a busy fleet.
    assert!(
        support::eventually(Duration::from_secs(20), || checker.counts().sections > 20),
        "the children did not start"
    );
    let end = Instant::now() + Duration::from_secs(5);
    let mut injected = 0;
    while Instant::now() < end && injected < 1_000 {
        thread::sleep(Duration::from_millis(150));
        match injected % 7 {
            5 => proxy.partition(Duration::from_millis(700)), // well within the lease
            6 => proxy.reset(),
            i => {
                let command = commands[i];
                let _: redis::RedisResult<redis::Value> =
                    redis::cmd(command[0]).arg(&command[1..]).query(&mut admin);
            }
        }
        injected += 1;
    }
    let before = checker.counts().sections;
    // The children really run in `layout`: our layout's keys all start with "redlatch:",
    // Redisson's never do.
    let ours: Vec<String> = redis::cmd("KEYS")
        .arg("redlatch:*")
        .query(&mut admin)
        .unwrap();
    let all: u64 = redis::cmd("DBSIZE").query(&mut admin).unwrap();
    match layout {
        redlatch::Layout::Redisson => assert!(ours.is_empty() && all > 0, "{ours:?}"),
        _ => assert!(!ours.is_empty(), "no key of our layout"),
    }
    let counts = finish(checker, &config);
    eprintln!("{injected} faults");
    assert!(injected >= 14 && before > 100, "too little happened");
    assert_eq!(counts.overtaken, 0, "two holders at once");
    assert_eq!(counts.out_of_order, 0, "a stale holder entered");
    assert_eq!(counts.rejected, 0, "a fenced write was rejected");
    assert_eq!(counts.reported_lost, 0, "a guard was reported lost");
    assert_eq!(counts.errors, 0, "unexpected errors");
    assert_eq!(counts.timeouts, 0, "a wait ran out");
    assert_eq!(counts.late, 0, "a try_lock returned after its wait");
    counts
}

#[test]
fn every_overlap_under_faults_that_lose_the_lock_state_is_reported() {
    let mut server = RedisServer::start();
    // The protected resource is another system: it does not restart with the lock server.
    let resource = RedisServer::start();
    let watchdog = Duration::from_millis(900);
    let config = Config {
        processes: 3,
        threads: 2,
        locks: 1,
        // Long enough that faults land inside critical sections.
        hold: Duration::from_millis(300),
        wait: Duration::from_secs(3),
        watchdog,
        response_timeout: Duration::from_millis(500),
        kinds: vec![Checked::Lock],
        layout: redlatch::Layout::Redlatch,
    };
    let checker = start_checker(&server.url(), &resource, &config);
    assert!(
        support::eventually(Duration::from_secs(20), || checker.counts().sections > 3),
        "the children did not start"
    );

    let mut admin = server.admin();
    let pids = checker.pids();
    for fault in 0..6 {
        thread::sleep(Duration::from_millis(500));
        match fault % 3 {
            0 => {
                server.restart();
                admin = server.admin();
            }
            1 => {
                support::signal(server.pid(), "-STOP");
                thread::sleep(watchdog + Duration::from_millis(400));
                support::signal(server.pid(), "-CONT");
            }
            _ => {
                // Kleppmann's pause: a holder process stopped past its lease.
                let pid = checker
                    .holder_pid(&mut admin, 0)
                    .unwrap_or(pids[fault % pids.len()]);
                support::signal(pid, "-STOP");
                thread::sleep(watchdog + Duration::from_millis(500));
                support::signal(pid, "-CONT");
            }
        }
    }
    thread::sleep(Duration::from_secs(1));
    let counts = finish(checker, &config);
    assert!(counts.sections > 10, "too little happened");
    // Otherwise this run could not have failed.
    assert!(
        counts.overtaken + counts.rejected + counts.out_of_order > 0,
        "the faults caused no overlap: {counts:?}"
    );
}

/// Entry point of the child process in `a_holder_paused_past_its_lease_finds_out_and_is_fenced`;
/// does nothing unless started by it.
#[test]
#[ignore = "run as a child process by another test"]
fn child_holds_and_writes_after_a_pause() {
    let Some([url, resource_url]) =
        support::child_env(["REDLATCH_CHILD_URL", "REDLATCH_CHILD_RESOURCE"])
    else {
        return;
    };
    let client = redlatch::Client::open(&url).unwrap();
    let guard = client
        .lock("paused")
        .lock_with_lease(Duration::from_millis(500))
        .unwrap();
    println!("LOCKED {}", guard.fencing_token());
    // The parent stops this process here, past the lease, and continues it.
    let resumed_at = Instant::now() + Duration::from_secs(30);
    let mut resource = redis::Client::open(resource_url)
        .unwrap()
        .get_connection()
        .unwrap();
    while !guard.is_lost() && Instant::now() < resumed_at {
        thread::sleep(Duration::from_millis(10));
    }
    let lost = guard.is_lost();
    // Write anyway, as a careless holder would: the fencing token must stop it.
    let accepted: i64 = redis::Script::new(support::checker::FENCED_WRITE)
        .key("resource:paused")
        .arg(guard.fencing_token())
        .invoke(&mut resource)
        .unwrap();
    let released = guard.unlock();
    println!(
        "RESUMED lost={lost} accepted={accepted} unlock_lost={}",
        matches!(released, Err(redlatch::Error::LockLost { .. }))
    );
}

#[test]
fn a_holder_paused_past_its_lease_finds_out_and_is_fenced() {
    let server = RedisServer::start();
    let resource = RedisServer::start();
    let mut child = support::spawn_child_test(
        "child_holds_and_writes_after_a_pause",
        &[
            ("REDLATCH_CHILD_URL", server.url()),
            ("REDLATCH_CHILD_RESOURCE", resource.url()),
        ],
    );
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, lines) = crossbeam_channel::unbounded::<String>();
    thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    let reported = |prefix: &str| -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let line = lines
                .recv_deadline(deadline)
                .unwrap_or_else(|_| panic!("child never said {prefix}"));
            if let Some(at) = line.find(prefix) {
                return line[at + prefix.len()..].trim().to_string();
            }
        }
    };
    let paused_token: u64 = reported("LOCKED").parse().unwrap();

    // The pause: longer than the child's 500 ms lease.
    support::signal(child.id(), "-STOP");
    let client = redlatch::Client::open(&server.url()).unwrap();
    let guard = client
        .lock("paused")
        .try_lock(Duration::from_secs(10), None)
        .unwrap()
        .expect("the lease ran out under the paused holder");
    assert!(guard.fencing_token() > paused_token);
    let mut res = resource.admin();
    let accepted: i64 = redis::Script::new(support::checker::FENCED_WRITE)
        .key("resource:paused")
        .arg(guard.fencing_token())
        .invoke(&mut res)
        .unwrap();
    assert_eq!(accepted, 1);
    support::signal(child.id(), "-CONT");

    let outcome = reported("RESUMED");
    assert!(
        outcome.contains("accepted=0"),
        "the stale write got through: {outcome}"
    );
    assert!(outcome.contains("unlock_lost=true"), "{outcome}");
    let _ = child.wait();
    drop(guard);
}

/// The checker blames an overlap on its stale holder, the one with the older token, whichever
/// of the two entered first: a holder stopped (SIGSTOP, the soak's "pause holder") after its
/// lock was granted and before it entered comes back past its lease and enters while the
/// current holder is inside. The stale one is told; the current one did nothing wrong.
#[test]
fn the_checker_blames_an_overlap_on_its_stale_holder_whichever_entered_first() {
    let server = RedisServer::start();
    let resource = RedisServer::start();
    let mut res = Resource::open(&resource.url());
    let stale_client = redlatch::Client::open(&server.url()).unwrap();
    let current_client = redlatch::Client::open(&server.url()).unwrap();
    let lease = Duration::from_millis(300);
    let take = |client: &redlatch::Client| {
        client
            .lock("checked-0")
            .try_lock(Duration::from_secs(5), Some(Duration::from_secs(30)))
            .unwrap()
            .expect("the stale holder's lease ran out")
    };

    // The stale holder enters late, inside the current holder's section.
    let stale = stale_client
        .lock("checked-0")
        .lock_with_lease(lease)
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || stale.is_lost()));
    let current = take(&current_client);
    let current_in = res.enter(0, current.fencing_token());
    let stale_in = res.enter(0, stale.fencing_token());
    let (stale_section, _) = res.leave(stale_in, stale);
    let (current_section, released) = res.leave(current_in, current);
    released.unwrap();
    assert!(
        stale_section.out_of_order && stale_section.told,
        "{stale_section:?}"
    );
    assert!(!stale_section.unreported(), "{stale_section:?}");
    assert!(current_section.overtaken && !current_section.told);
    assert!(
        !current_section.unreported(),
        "the current holder was blamed for the stale one's entry: {current_section:?}"
    );

    // Kleppmann's order: the stale holder is inside when the current one enters. Told, it is
    // fine; not told, it would be caught.
    let stale = stale_client
        .lock("checked-0")
        .lock_with_lease(lease)
        .unwrap();
    let stale_in = res.enter(0, stale.fencing_token());
    assert!(eventually(Duration::from_secs(5), || stale.is_lost()));
    let current = take(&current_client);
    let current_in = res.enter(0, current.fencing_token());
    let (current_section, released) = res.leave(current_in, current);
    released.unwrap();
    let (stale_section, _) = res.leave(stale_in, stale);
    assert!(!current_section.unreported(), "{current_section:?}");
    assert!(stale_section.overtaken && stale_section.told && !stale_section.unreported());
    let untold = support::checker::Section {
        told: false,
        ..stale_section
    };
    assert!(untold.unreported(), "an untold stale holder went unnoticed");
}

/// Entry point of the middle process in `checker_children_end_when_their_parent_is_killed`:
/// starts a checker and waits to be killed. Does nothing unless started by that test.
#[test]
#[ignore = "run as a child process by another test"]
fn child_runs_a_checker_until_killed() {
    let Some([url, resource_url]) =
        support::child_env(["REDLATCH_CHILD_URL", "REDLATCH_CHILD_RESOURCE"])
    else {
        return;
    };
    let config = Config {
        processes: 2,
        threads: 1,
        locks: 1,
        hold: Duration::from_millis(1),
        wait: Duration::from_secs(1),
        watchdog: Duration::from_secs(2),
        response_timeout: Duration::from_secs(1),
        kinds: vec![Checked::Lock],
        layout: redlatch::Layout::Redlatch,
    };
    let checker = Checker::start(&url, &resource_url, &config, || {
        support::child_test_command("checker_child")
    });
    let pids: Vec<String> = checker.pids().iter().map(u32::to_string).collect();
    println!("PIDS {}", pids.join(","));
    // Killed long before; if not, dropping the checker ends the children.
    thread::sleep(Duration::from_secs(60));
}

/// Whether process `pid` runs (exists and is not a zombie).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_string();
            Some(state != "Z")
        })
        .unwrap_or(false)
}

/// A test killed with SIGKILL runs no destructor: its checker's children must notice on their
/// own that their parent is gone, and end, instead of taking turns on the locks forever.
#[test]
fn checker_children_end_when_their_parent_is_killed() {
    let server = RedisServer::start();
    let resource = RedisServer::start();
    let mut middle = support::spawn_child_test(
        "child_runs_a_checker_until_killed",
        &[
            ("REDLATCH_CHILD_URL", server.url()),
            ("REDLATCH_CHILD_RESOURCE", resource.url()),
        ],
    );
    let pids: Vec<u32> = support::read_reported(&mut middle, "PIDS", Duration::from_secs(30))
        .split(',')
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    let mut res = resource.admin();
    let working = eventually(Duration::from_secs(20), || {
        redis::cmd("HGET")
            .arg("checker:counts:0")
            .arg("sections")
            .query::<Option<u64>>(&mut res)
            .unwrap()
            .unwrap_or(0)
            > 0
    });
    let _ = middle.kill();
    let _ = middle.wait();
    let ended = eventually(Duration::from_secs(20), || {
        !pids.iter().any(|&p| running(p))
    });
    // Clean up what this test started, whatever happened.
    for &pid in &pids {
        if running(pid) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
    assert!(working, "the checker's children never got going");
    assert!(ended, "the checker's children outlived their killed parent");
}
