//! Redis Cluster: three masters with a replica each, real processes on free ports
//! (`tests/support/topology.rs`). Locks live on the master that owns their slot, waiters in
//! other clients are woken by a release on any master, renewal keeps locks over many slots
//! alive, and a slot move, a `CLUSTER FAILOVER` and a killed master hang nobody.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Client, Error};
use support::topology::{Cluster, ClusterNode, connect, key_slot, replicate_lock, wait_for};
use support::{join_all, signal};

fn client(c: &Cluster, watchdog: Duration) -> Client {
    let urls = c.seed_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    Client::cluster_builder(&urls)
        .watchdog_timeout(watchdog)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

fn lock_key(name: &str) -> String {
    format!("redlatch:{{{name}}}")
}

fn slot_of(name: &str) -> u16 {
    key_slot(lock_key(name).as_bytes())
}

/// The master serving `slot` in `view`.
fn owner_in(view: &[ClusterNode], slot: u16) -> u16 {
    view.iter()
        .find(|n| n.master && n.serves(slot))
        .expect("every slot is served")
        .port
}

/// A lock name starting with `stem` whose slot the master on `port` serves.
fn name_on(c: &Cluster, port: u16, stem: &str) -> String {
    let view = c.view();
    (0..100_000)
        .map(|i| format!("{stem}-{i}"))
        .find(|name| owner_in(&view, slot_of(name)) == port)
        .expect("a name on every master")
}

/// `count` lock names starting with `stem` that all hash to one slot.
fn names_in_one_slot(stem: &str, count: usize) -> Vec<String> {
    let slot = slot_of(&format!("{stem}-0"));
    let names: Vec<String> = (0..10_000_000)
        .map(|i| format!("{stem}-{i}"))
        .filter(|name| slot_of(name) == slot)
        .take(count)
        .collect();
    assert_eq!(names.len(), count);
    names
}

/// Whether the node on `port` has lock `name`'s hash (false if it refuses: not its slot).
fn has_lock(port: u16, name: &str) -> bool {
    let mut con = connect(port, None).unwrap();
    redis::cmd("EXISTS")
        .arg(lock_key(name))
        .query(&mut con)
        .unwrap_or(false)
}

fn channel_of(name: &str) -> String {
    format!("{}:unlocked", lock_key(name))
}

/// Subscribers of lock `name`'s channel on each live node, `(port, classic, sharded)`.
fn subscribers_by_node(c: &Cluster, name: &str) -> Vec<(u16, i64, i64)> {
    subscribers_by_node_but(c, name, None)
}

/// [`subscribers_by_node`] without asking the node on `skip` (a stopped one would cost a
/// timeout).
fn subscribers_by_node_but(c: &Cluster, name: &str, skip: Option<u16>) -> Vec<(u16, i64, i64)> {
    channel_subscribers_by_node(c, &channel_of(name), skip)
}

/// Subscribers of `channel` on each live node but `skip`, `(port, classic, sharded)`; sharded
/// ones are 0 before Redis 7 (no `PUBSUB SHARDNUMSUB`).
fn channel_subscribers_by_node(
    c: &Cluster,
    channel: &str,
    skip: Option<u16>,
) -> Vec<(u16, i64, i64)> {
    let count = |con: &mut redis::Connection, which: &str| {
        let reply: (String, i64) = redis::cmd("PUBSUB")
            .arg(which)
            .arg(channel)
            .query(con)
            .unwrap_or_default();
        reply.1
    };
    c.view()
        .iter()
        .filter(|n| Some(n.port) != skip)
        .filter_map(|n| Some((n.port, connect(n.port, None).ok()?)))
        .map(|(port, mut con)| {
            let classic = count(&mut con, "NUMSUB");
            (port, classic, count(&mut con, "SHARDNUMSUB"))
        })
        .collect()
}

/// Waiters listening on `channel` where a release on the master on `port` reaches them: with
/// sharded pub/sub (Redis 7 on), sharded subscribers on that master; before, classic ones on
/// any node but `skip` (a stopped one would cost a timeout), since a `PUBLISH` reaches every
/// node of a cluster over its bus.
fn listening_for_release_on(c: &Cluster, port: u16, channel: &str, skip: Option<u16>) -> i64 {
    if support::sharded_pubsub() {
        let Ok(mut con) = connect(port, None) else {
            return 0;
        };
        let reply: (String, i64) = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .arg(channel)
            .query(&mut con)
            .unwrap_or_default();
        reply.1
    } else {
        channel_subscribers_by_node(c, channel, skip)
            .iter()
            .map(|(_, classic, _)| classic)
            .sum()
    }
}

/// Subscribers of lock `name`'s channel, over every live node of the cluster.
fn subscribers(c: &Cluster, name: &str) -> i64 {
    subscribers_by_node(c, name)
        .iter()
        .map(|(_, classic, sharded)| classic + sharded)
        .sum()
}

/// Reads pub/sub frames from `con` for `within`: the payloads of the messages.
fn messages_on(con: &mut redis::Connection, within: Duration) -> Vec<String> {
    let until = Instant::now() + within;
    let mut payloads = Vec::new();
    for _ in 0..100 {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        con.set_read_timeout(Some(left)).unwrap();
        let Ok(frame) = con.recv_response() else {
            break; // timed out
        };
        let Ok(items) = redis::from_redis_value::<Vec<redis::Value>>(frame) else {
            continue;
        };
        let text = |v: &redis::Value| redis::from_redis_value_ref::<String>(v).unwrap_or_default();
        if items.len() == 3 && text(&items[0]).ends_with("message") {
            payloads.push(text(&items[2]));
        }
    }
    payloads
}

/// What the contending threads did.
#[derive(Default)]
struct Tally {
    acquired: AtomicU64,
    acquired_after: AtomicU64,
    errors: AtomicU64,
    failed_unlocks: AtomicU64,
}

/// Threads of `clients` contending on lock `name` (hold 5 ms, wait at most 2 s each time)
/// until `stop`; counted in `tally`, after `after` is set in `acquired_after`.
fn contend(
    clients: &[Client],
    name: &str,
    threads: usize,
    stop: &Arc<AtomicBool>,
    after: &Arc<AtomicBool>,
    tally: &Arc<Tally>,
) -> Vec<thread::JoinHandle<()>> {
    (0..threads)
        .map(|i| {
            let lock = clients[i % clients.len()].lock(name);
            let (stop, after, tally) = (stop.clone(), after.clone(), tally.clone());
            thread::spawn(move || {
                for _ in 0..100_000 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let later = after.load(Ordering::SeqCst);
                    match lock.try_lock(Duration::from_secs(2), None) {
                        Ok(Some(guard)) => {
                            thread::sleep(Duration::from_millis(5));
                            if guard.unlock().is_err() {
                                tally.failed_unlocks.fetch_add(1, Ordering::SeqCst);
                            }
                            tally.acquired.fetch_add(1, Ordering::SeqCst);
                            if later {
                                tally.acquired_after.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Ok(None) => {}
                        Err(_) => {
                            tally.errors.fetch_add(1, Ordering::SeqCst);
                            thread::sleep(Duration::from_millis(50));
                        }
                    }
                }
            })
        })
        .collect()
}

/// Waits (bounded) until the contending threads acquired `more` times more than now.
fn await_progress(tally: &Tally, more: u64, what: &str) {
    let start = tally.acquired.load(Ordering::SeqCst);
    wait_for(what, Duration::from_secs(20), || {
        (tally.acquired.load(Ordering::SeqCst) >= start + more).then_some(())
    });
}

#[test]
fn locks_live_on_the_master_of_their_slot_and_a_release_on_each_master_wakes_a_waiter() {
    let t = Instant::now();
    let c = Cluster::start();
    let started = t.elapsed();
    let holder = client(&c, Duration::from_secs(10));
    let waiter_client = client(&c, Duration::from_secs(10));
    let mut wakes = Vec::new();
    for master in c.master_ports() {
        let name = name_on(&c, master, "spread");
        let guard = holder.lock(&name).lock().unwrap();
        assert!(has_lock(master, &name), "lock {name} not on {master}");
        for other in c.master_ports().into_iter().filter(|p| *p != master) {
            assert!(!has_lock(other, &name));
        }
        let lock = waiter_client.lock(&name);
        let waiting = thread::spawn(move || {
            let guard = lock.try_lock(Duration::from_secs(8), None).unwrap();
            (Instant::now(), guard.map(|g| g.fencing_token()))
        });
        wait_for("the waiter subscribed", Duration::from_secs(15), || {
            (subscribers(&c, &name) >= 1).then_some(())
        });
        let first_token = guard.fencing_token();
        let released = Instant::now();
        guard.unlock().unwrap();
        let (woken, token) = join_all(vec![waiting], Duration::from_secs(10), "a thread").remove(0);
        assert!(token.is_some_and(|t| t > first_token), "the waiter got it");
        let after = woken - released;
        // Without a message it would have slept until the lease (10 s) ran out.
        assert!(
            after < Duration::from_secs(1),
            "woken {after:?} after the release"
        );
        wakes.push(after);
    }
    // Every master has the holder's command connection and the waiter's sharded pub/sub
    // connection, each named after its client.
    for master in c.master_ports() {
        let mut con = connect(master, None).unwrap();
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
        for client in [&holder, &waiter_client] {
            let name = format!("name=redlatch:{} ", client.id());
            assert!(list.contains(&name), "no {name} on {master}:\n{list}");
        }
    }
    eprintln!("cluster: started in {started:?}; waiters woken {wakes:?} after the release");
}

/// Sharded pub/sub: the waiting client subscribes the lock's channel on the master that owns
/// its slot only, and the release's message reaches that shard only. A classic PUBLISH would
/// have reached the listeners on every other node too. Before Redis 7 (no sharded pub/sub) the
/// crate falls back to that: one classic subscription in the whole cluster, and a PUBLISH that
/// every node passes on.
#[test]
fn an_unlock_message_reaches_only_the_shard_that_owns_the_lock_where_pubsub_is_sharded() {
    let sharded = support::sharded_pubsub();
    let c = Cluster::start();
    let holder = client(&c, Duration::from_secs(10));
    let waiter_client = client(&c, Duration::from_secs(10));
    let owner = c.master_ports()[0];
    let name = name_on(&c, owner, "sharded");
    let channel = channel_of(&name);
    let guard = holder.lock(&name).lock().unwrap();
    let lock = waiter_client.lock(&name);
    let waiting = thread::spawn(move || {
        let guard = lock.try_lock(Duration::from_secs(8), None).unwrap();
        (Instant::now(), guard.map(|g| g.fencing_token()))
    });
    wait_for("the waiter subscribed", Duration::from_secs(15), || {
        (subscribers(&c, &name) >= 1).then_some(())
    });
    let counts = subscribers_by_node(&c, &name);
    if sharded {
        for &(port, classic, shard) in &counts {
            assert_eq!(classic, 0, "a classic subscription on {port}");
            let expected = i64::from(port == owner);
            assert_eq!(shard, expected, "sharded subscriptions on {port}");
        }
    } else {
        let classic: i64 = counts.iter().map(|(_, classic, _)| classic).sum();
        assert_eq!(
            classic, 1,
            "one classic subscription in the cluster: {counts:?}"
        );
        assert!(counts.iter().all(|(_, _, shard)| *shard == 0), "{counts:?}");
    }

    // Listeners, on the lock's channel and on the waiter's grant channel (where the hand-over
    // goes): on the owner as the waiter listens (SSUBSCRIBE where sharded), classic SUBSCRIBE
    // on every other node.
    let channels = [channel.clone(), format!("{channel}:{}", waiter_client.id())];
    let mut on_owner = connect(owner, None).unwrap();
    redis::cmd(if sharded { "SSUBSCRIBE" } else { "SUBSCRIBE" })
        .arg(&channels)
        .exec(&mut on_owner)
        .unwrap();
    let mut elsewhere: Vec<(u16, redis::Connection)> = c
        .view()
        .iter()
        .filter(|n| n.port != owner)
        .map(|n| {
            let mut con = connect(n.port, None).unwrap();
            redis::cmd("SUBSCRIBE")
                .arg(&channels)
                .exec(&mut con)
                .unwrap();
            (n.port, con)
        })
        .collect();
    assert!(elsewhere.len() >= 5, "listeners on the other nodes");

    let released = Instant::now();
    guard.unlock().unwrap();
    let (woken, token) = join_all(vec![waiting], Duration::from_secs(10), "the waiter").remove(0);
    assert!(token.is_some(), "the waiter got the lock");
    assert!(
        woken - released < Duration::from_secs(1),
        "woken {:?} after the release",
        woken - released
    );
    let seen = messages_on(&mut on_owner, Duration::from_secs(2));
    assert!(
        seen.iter().any(|m| m.starts_with("grant ")),
        "the owner's shard saw {seen:?}"
    );
    for (port, con) in &mut elsewhere {
        if sharded {
            let seen = messages_on(con, Duration::from_millis(200));
            assert!(seen.is_empty(), "node {port} saw {seen:?}");
        } else {
            // Arrived while the owner's listener was read.
            let seen = messages_on(con, Duration::from_millis(300));
            assert!(
                seen.iter().any(|m| m.starts_with("grant ")),
                "node {port} missed the PUBLISH: saw {seen:?}"
            );
        }
    }
}

/// The watchdog renews one call per slot, in one round trip per master.
#[test]
fn renewal_keeps_200_locks_over_many_slots_alive() {
    let c = Cluster::start();
    let watchdog = Duration::from_millis(600);
    let client = client(&c, watchdog);
    let names: Vec<String> = (0..200).map(|i| format!("renewed-{i}")).collect();
    let mut slots: Vec<u16> = names.iter().map(|n| slot_of(n)).collect();
    slots.sort_unstable();
    slots.dedup();
    assert!(slots.len() > 150, "spread over {} slots only", slots.len());
    let view = c.view();
    for master in c.master_ports() {
        assert!(slots.iter().any(|s| owner_in(&view, *s) == master));
    }
    let guards: Vec<_> = names
        .iter()
        .map(|n| client.lock(n).lock().unwrap())
        .collect();
    thread::sleep(watchdog * 5);
    let observer = self::client(&c, watchdog);
    let all_held = || {
        for (name, guard) in names.iter().zip(&guards) {
            assert!(!guard.is_lost(), "{name} lost");
            assert!(observer.lock(name).is_locked().unwrap(), "{name} expired");
        }
    };
    all_held();

    // A slot with a lock moves to another master: the watchdog's round trip to its old master,
    // a pipeline of every slot there as the slot map said, is refused (MOVED), renews call by
    // call instead and reads the map again.
    let slot = slot_of(&names[0]);
    let (from, to) = (owner_in(&view, slot), owner_in(&view, slot_of(&names[1])));
    let to = if to == from {
        c.master_ports().into_iter().find(|&m| m != from).unwrap()
    } else {
        to
    };
    let mut step = c.begin_slot_move(slot, to);
    step.migrate_keys();
    step.finish();
    thread::sleep(watchdog * 5);
    all_held();
    assert!(has_lock(to, &names[0]), "the lock moved with its slot");
    for guard in guards {
        guard.unlock().unwrap();
    }
}

#[test]
fn a_slot_move_under_contention_hangs_nobody_and_the_lock_follows_its_slot() {
    let c = Cluster::start();
    let masters = c.master_ports();
    let from = masters[0];
    let to = masters[1];
    let name = name_on(&c, from, "moving");
    let slot = slot_of(&name);
    let clients = [
        client(&c, Duration::from_secs(1)),
        client(&c, Duration::from_secs(1)),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let moved = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let workers = contend(&clients, &name, 4, &stop, &moved, &tally);
    await_progress(&tally, 20, "contention before the move");

    // Step by step, with contention in each state: MIGRATING/IMPORTING with the keys on the
    // source, then on the target, then the slot handed over.
    let t = Instant::now();
    let before = tally.acquired.load(Ordering::SeqCst);
    let mut step = c.begin_slot_move(slot, to);
    thread::sleep(Duration::from_millis(500));
    step.migrate_keys();
    thread::sleep(Duration::from_millis(500));
    step.finish();
    let took = t.elapsed();
    let during = tally.acquired.load(Ordering::SeqCst) - before;
    moved.store(true, Ordering::SeqCst);
    await_progress(&tally, 20, "contention after the move");
    stop.store(true, Ordering::SeqCst);
    join_all(workers, Duration::from_secs(10), "a thread");
    assert!(tally.acquired_after.load(Ordering::SeqCst) >= 20);

    let guard = clients[0].lock(&name).lock().unwrap();
    assert!(has_lock(to, &name), "the lock lives on the new owner");
    assert!(!has_lock(from, &name));

    // Moved back step by step while held: the key moves with its slot, and the holder keeps
    // it (renewed on the new owner) or is told it lost it.
    let mut step = c.begin_slot_move(slot, from);
    thread::sleep(Duration::from_millis(300)); // a renewal (every 333 ms) meets the migration
    step.migrate_keys();
    step.finish();
    thread::sleep(Duration::from_millis(1500)); // more than the watchdog timeout
    let kept = !guard.is_lost();
    if !kept {
        assert!(matches!(guard.unlock(), Err(Error::LockLost { .. })));
    } else {
        assert!(has_lock(from, &name), "held, so on the new owner");
        guard.unlock().unwrap();
    }
    assert!(!clients[1].lock(&name).is_locked().unwrap());
    eprintln!(
        "cluster slot move: {took:?}; {} acquisitions ({} during the move), {} errors; \
         {} failed unlocks; held lock kept: {kept}",
        tally.acquired.load(Ordering::SeqCst),
        during,
        tally.errors.load(Ordering::SeqCst),
        tally.failed_unlocks.load(Ordering::SeqCst)
    );
}

/// A stopped master costs the watchdog one timed-out round trip per round, not one per slot:
/// the locks on the other masters keep being renewed. (One call per slot, each waiting out
/// its timeouts, held every round up for over a minute, and those locks expired.)
#[test]
fn a_stopped_master_does_not_starve_renewal_on_the_others() {
    let c = Cluster::start();
    let masters = c.master_ports();
    let stopped = masters[0];
    let watchdog = Duration::from_secs(6);
    let urls = c.seed_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = Client::cluster_builder(&urls)
        .watchdog_timeout(watchdog)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let names: Vec<String> = (0..200).map(|i| format!("starve-{i}")).collect();
    let guards: Vec<_> = names
        .iter()
        .map(|n| client.lock(n).lock().unwrap())
        .collect();
    let view = c.view();
    let on_stopped = names
        .iter()
        .filter(|n| owner_in(&view, slot_of(n)) == stopped)
        .count();
    assert!(on_stopped > 40, "{on_stopped} locks on the stopped master");

    let pid = c.nodes().iter().find(|n| n.port == stopped).unwrap().pid();
    signal(pid, "-STOP"); // SIGKILLed with the cluster at the end
    thread::sleep(watchdog * 2);
    let observer = self::client(&c, watchdog);
    for (name, guard) in names.iter().zip(&guards) {
        if owner_in(&view, slot_of(name)) != stopped {
            assert!(!guard.is_lost(), "{name} lost");
            assert!(observer.lock(name).is_locked().unwrap(), "{name} expired");
        }
    }
    signal(pid, "-CONT"); // the guards' releases there go through at once
}

/// `redis-cli --cluster reshard`, as an operator runs it: the source master's lowest 200 slots,
/// the contended lock's among them, move to another master while threads contend. Nobody
/// hangs, the waiters' shard subscriptions follow the slot to its new master (Redis ends
/// those on the old one as each slot leaves it; before Redis 7 classic ones stay on their node,
/// which a release on the new master reaches), and the lock works there. A waiter that
/// waits through the whole reshard is woken by the release that follows it at once.
#[test]
fn a_redis_cli_reshard_under_contention_hangs_nobody_and_subscriptions_follow() {
    const SLOTS_MOVED: u16 = 200;
    let c = Cluster::start();
    let view = c.view();
    let masters = c.master_ports();
    let (from, to) = (masters[0], masters[1]);
    let node = |port: u16| view.iter().find(|n| n.port == port).unwrap();
    // redis-cli takes the source's slots lowest first.
    let first = node(from).slots.iter().map(|r| r.0).min().unwrap();
    let moving = |stem: &'static str| {
        (0..1_000_000)
            .map(move |i| format!("{stem}-{i}"))
            .find(|n| (first + 20..first + SLOTS_MOVED - 20).contains(&slot_of(n)))
            .unwrap()
    };
    let (name, held_name) = (moving("resharded"), moving("held-through"));
    let clients = [
        client(&c, Duration::from_secs(1)),
        client(&c, Duration::from_secs(1)),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let moved = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let workers = contend(&clients, &name, 4, &stop, &moved, &tally);
    // Held with a fixed lease longer than the waiter's wait: only a message can wake it.
    let held = clients[0]
        .lock(&held_name)
        .try_lock(Duration::ZERO, Some(Duration::from_secs(60)))
        .unwrap()
        .unwrap();
    let lock = clients[1].lock(&held_name);
    let waiting = thread::spawn(move || {
        let guard = lock.try_lock(Duration::from_secs(30), None).unwrap();
        (Instant::now(), guard.is_some())
    });
    wait_for("the waiter subscribed", Duration::from_secs(15), || {
        (subscribers(&c, &held_name) >= 1).then_some(())
    });
    await_progress(&tally, 20, "contention before the reshard");

    let t = Instant::now();
    let mut reshard = std::process::Command::new("redis-cli")
        .args(["--cluster", "reshard", &format!("127.0.0.1:{from}")])
        .args([
            "--cluster-from",
            &node(from).id,
            "--cluster-to",
            &node(to).id,
        ])
        .args(["--cluster-slots", &SLOTS_MOVED.to_string(), "--cluster-yes"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status = wait_for("redis-cli reshard", Duration::from_secs(60), || {
        reshard.try_wait().unwrap()
    });
    assert!(status.success(), "redis-cli --cluster reshard: {status}");
    let took = t.elapsed();
    assert_eq!(c.owner_of_slot(slot_of(&name)), to, "the lock's slot moved");
    assert_eq!(c.owner_of_slot(slot_of(&held_name)), to);
    moved.store(true, Ordering::SeqCst);
    wait_for(
        "the waiter's subscription follows",
        Duration::from_secs(5),
        || (listening_for_release_on(&c, to, &channel_of(&held_name), None) > 0).then_some(()),
    );
    let released = Instant::now();
    held.unlock().unwrap();
    let (woken, got) = join_all(vec![waiting], Duration::from_secs(35), "the waiter").remove(0);
    assert!(got, "the waiter got the lock");
    let after = woken - released;
    assert!(
        after < Duration::from_secs(1),
        "woken {after:?} after the release"
    );

    // While the threads go on contending, their subscriptions are on the new master only
    // (sharded; classic ones stay where they were, which a PUBLISH on the new master reaches).
    let mut seen_on_new = 0;
    for _ in 0..20 {
        for (port, _, sharded) in subscribers_by_node(&c, &name) {
            assert!(
                port != from || sharded == 0,
                "still subscribed on the old master"
            );
        }
        if listening_for_release_on(&c, to, &channel_of(&name), None) > 0 {
            seen_on_new += 1;
        }
        thread::sleep(Duration::from_millis(50));
    }
    await_progress(&tally, 20, "contention after the reshard");
    stop.store(true, Ordering::SeqCst);
    join_all(workers, Duration::from_secs(10), "a thread");
    assert!(seen_on_new > 0, "waiters subscribed on the new master");
    assert!(tally.acquired_after.load(Ordering::SeqCst) >= 20);
    let guard = clients[0].lock(&name).lock().unwrap();
    assert!(has_lock(to, &name), "the lock lives on the new owner");
    guard.unlock().unwrap();
    eprintln!(
        "cluster reshard of {SLOTS_MOVED} slots: {took:?}; {} acquisitions, {} errors, {} failed \
         unlocks; subscribed on the new master in {seen_on_new} of 20 samples; the waiter \
         held through it woken {after:?} after the release",
        tally.acquired.load(Ordering::SeqCst),
        tally.errors.load(Ordering::SeqCst),
        tally.failed_unlocks.load(Ordering::SeqCst)
    );
}

/// `CLUSTER COUNTKEYSINSLOT slot` on the node on `port`.
fn keys_in_slot(port: u16, slot: u16) -> i64 {
    let mut con = connect(port, None).unwrap();
    redis::cmd("CLUSTER")
        .arg("COUNTKEYSINSLOT")
        .arg(slot)
        .query(&mut con)
        .unwrap()
}

/// A release sent while its lock's slot is half-migrated (some of the lock's keys moved,
/// others not, as between two batches of a `redis-cli --cluster reshard`): Redis refuses the
/// script with TRYAGAIN until the slot is handed over. The release must outlast that window
/// (within its budget of one response timeout) instead of failing and leaving the lock to
/// expire with its lease, and the waiter must get the lock from it.
#[test]
fn a_release_outlasts_a_half_migrated_slot_and_hands_the_lock_over() {
    const RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);
    // How long the slot stays half-migrated: more than twice as long as the crate used to
    // retry TRYAGAIN (three attempts of three tries, with pauses: it gave up after 0.3 s,
    // 0.45 s at most), well within the response timeout the retries now get.
    const WINDOW: Duration = Duration::from_secs(1);
    let c = Cluster::start();
    let masters = c.master_ports();
    let (from, to) = (masters[0], masters[1]);
    let name = name_on(&c, from, "half");
    let slot = slot_of(&name);
    let urls = c.seed_urls();
    let build = || {
        let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
        Client::cluster_builder(&urls)
            .watchdog_timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(1))
            .response_timeout(RESPONSE_TIMEOUT)
            .build()
            .unwrap()
    };
    let (holder, waiter) = (build(), build());

    // The holder takes the lock with a fixed lease, so that no renewal meets the migration,
    // and releases it when told to (a guard stays on the thread that took it).
    let (held_tx, held_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let lock = holder.lock(&name);
    let holding = thread::spawn(move || {
        let guard = lock
            .try_lock(Duration::ZERO, Some(Duration::from_secs(60)))
            .unwrap()
            .expect("the lock is free");
        held_tx.send(guard.fencing_token()).unwrap();
        go_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("told to release");
        let sent = Instant::now();
        let released = guard.unlock();
        (released, sent, Instant::now())
    });
    let first_token = held_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the holder took the lock");
    // A waiter in the queue: the lock's queue exists too. It waits less than
    // the lease, so it gets the lock only from the release.
    let lock = waiter.lock(&name);
    let waiting = thread::spawn(move || {
        let guard = lock.try_lock(Duration::from_secs(30), None).unwrap();
        guard.map(|g| {
            let token = g.fencing_token();
            g.unlock().unwrap();
            token
        })
    });
    let queue = format!("{}:queue", lock_key(&name));
    wait_for("the waiter is queued", Duration::from_secs(10), || {
        let mut con = connect(from, None).ok()?;
        let queued: i64 = redis::cmd("ZCARD").arg(&queue).query(&mut con).ok()?;
        (queued >= 1).then_some(())
    });
    assert_eq!(keys_in_slot(from, slot), 3, "lock, fence, queue");

    // Half-migrated: the lock's hash and fence on the target, its queue still on the source. The release starts now and meets TRYAGAIN until the slot is handed over.
    let mut step = c.begin_slot_move(slot, to);
    step.migrate(&[lock_key(&name), format!("{}:fence", lock_key(&name))]);
    assert_eq!((keys_in_slot(from, slot), keys_in_slot(to, slot)), (1, 2));
    go_tx.send(()).unwrap();
    thread::sleep(WINDOW);
    let finishing = Instant::now();
    step.finish(); // the remaining keys, then SETSLOT NODE on the target, the source, the rest
    let (released, sent, returned) =
        join_all(vec![holding], Duration::from_secs(20), "the holder").remove(0);
    let took = returned - sent;
    released.unwrap_or_else(|e| panic!("the release failed after {took:?}: {e}"));
    assert!(
        returned > finishing,
        "the release cannot run before the slot is handed over"
    );
    assert!(
        took < RESPONSE_TIMEOUT + Duration::from_secs(1),
        "the release took {took:?}"
    );
    let token = join_all(vec![waiting], Duration::from_secs(40), "the waiter").remove(0);
    assert!(
        token.is_some_and(|t| t > first_token),
        "the release handed the lock to the waiter"
    );
    assert!(!waiter.lock(&name).is_locked().unwrap());
    assert_eq!(keys_in_slot(from, slot), 0);

    // A slot left half-migrated for longer than that budget: the release gives up after one
    // response timeout (this client's is 1 s), not later.
    let impatient = client(&c, Duration::from_secs(30));
    let guard = impatient
        .lock(&name)
        .try_lock(Duration::ZERO, Some(Duration::from_secs(60)))
        .unwrap()
        .expect("the lock is free");
    let mut step = c.begin_slot_move(slot, from);
    step.migrate(&[lock_key(&name)]);
    let sent = Instant::now();
    let refused = guard.unlock();
    let gave_up = sent.elapsed();
    step.finish();
    assert!(matches!(refused, Err(Error::Redis(_))), "{refused:?}");
    assert!(
        gave_up >= Duration::from_secs(1) && gave_up < Duration::from_millis(1500),
        "gave up after {gave_up:?}"
    );
    eprintln!(
        "cluster half-migrated slot: the release took {took:?} ({:?} after the hand-over \
         began); left half-migrated, a release gave up after {gave_up:?}",
        returned - finishing
    );
}

#[test]
fn a_cluster_failover_under_contention_hangs_nobody() {
    let c = Cluster::start();
    let master = c.master_ports()[2];
    let replica = c.replica_of(master);
    let name = name_on(&c, master, "failover");
    let clients = [
        client(&c, Duration::from_secs(1)),
        client(&c, Duration::from_secs(1)),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let failed_over = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let workers = contend(&clients, &name, 4, &stop, &failed_over, &tally);
    await_progress(&tally, 20, "contention before the failover");

    let t = Instant::now();
    assert_eq!(c.failover(replica), master);
    let took = t.elapsed();
    failed_over.store(true, Ordering::SeqCst);
    await_progress(&tally, 20, "contention after the failover");
    stop.store(true, Ordering::SeqCst);
    join_all(workers, Duration::from_secs(10), "a thread");

    let guard = clients[0].lock(&name).lock().unwrap();
    assert!(
        has_lock(replica, &name),
        "the lock lives on the promoted replica"
    );
    guard.unlock().unwrap();
    eprintln!(
        "cluster failover: {took:?}; {} acquisitions, {} errors",
        tally.acquired.load(Ordering::SeqCst),
        tally.errors.load(Ordering::SeqCst)
    );
}

#[test]
fn a_killed_master_is_replaced_new_locks_work_and_its_holders_are_told() {
    let mut c = Cluster::start();
    let masters = c.master_ports();
    let (dead, alive) = (masters[0], masters[1]);
    let replica = c.replica_of(dead);
    let client = client(&c, Duration::from_secs(2));
    let doomed_name = name_on(&c, dead, "doomed");
    let safe_name = name_on(&c, alive, "safe");
    let doomed = client.lock(&doomed_name).lock().unwrap();
    let safe = client.lock(&safe_name).lock().unwrap();

    let t = Instant::now();
    c.kill(dead);
    wait_for("the replica takes over", Duration::from_secs(30), || {
        (c.owner_of_slot(slot_of(&doomed_name)) == replica).then_some(())
    });
    let taken_over = t.elapsed();

    // New locks work on every master, the promoted replica included (bounded retries: the
    // first calls may still meet the old map).
    for master in c.master_ports() {
        let name = name_on(&c, master, "after");
        let deadline = Instant::now() + Duration::from_secs(10);
        let guard = loop {
            match client.lock(&name).try_lock(Duration::from_secs(1), None) {
                Ok(Some(guard)) => break guard,
                Ok(None) => panic!("{name} is free"),
                Err(e) => {
                    assert!(Instant::now() < deadline, "no lock on {master}: {e}");
                    thread::sleep(Duration::from_millis(100));
                }
            }
        };
        assert!(has_lock(master, &name));
        guard.unlock().unwrap();
    }

    // The holder on the dead master: the outage outlasted its 2 s lease, so it is lost, and
    // says so; the holder elsewhere kept renewing.
    assert!(doomed.is_lost(), "the outage outlasted the lease");
    let t = Instant::now();
    assert!(matches!(doomed.unlock(), Err(Error::LockLost { .. })));
    assert!(t.elapsed() < Duration::from_secs(3));
    assert!(!safe.is_lost());
    safe.unlock().unwrap();
    eprintln!("cluster: a killed master's replica took over in {taken_over:?}");
}

#[test]
fn a_multi_lock_in_one_slot_and_across_slots_is_all_or_nothing() {
    let c = Cluster::start();
    let a = client(&c, Duration::from_secs(5));
    let b = client(&c, Duration::from_secs(5));

    // One slot: one script call takes all three.
    let same = names_in_one_slot("together", 3);
    let owner = c.owner_of_slot(slot_of(&same[0]));
    let refs: Vec<&str> = same.iter().map(String::as_str).collect();
    let guard = a
        .multi_lock(&refs)
        .try_lock(Duration::ZERO, None)
        .unwrap()
        .unwrap();
    assert_eq!(guard.fencing_tokens().len(), 3);
    assert!(same.iter().all(|n| has_lock(owner, n)));
    guard.unlock().unwrap();

    // Across slots: one name per master, the last one busy.
    let names: Vec<String> = c
        .master_ports()
        .into_iter()
        .enumerate()
        .map(|(i, p)| name_on(&c, p, &format!("across{i}")))
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let busy = b.lock(&names[2]).lock().unwrap();
    let multi = a.multi_lock(&refs);
    assert!(
        multi
            .try_lock(Duration::from_millis(300), None)
            .unwrap()
            .is_none()
    );
    for name in &names[..2] {
        assert!(!b.lock(name).is_locked().unwrap(), "{name} kept");
    }
    // Released while it waits: all of them, each on its master.
    let waiting = thread::spawn(move || {
        let guard = multi.try_lock(Duration::from_secs(5), None).unwrap();
        guard.map(|g| g.fencing_tokens().len())
    });
    thread::sleep(Duration::from_millis(200));
    busy.unlock().unwrap();
    assert_eq!(
        join_all(vec![waiting], Duration::from_secs(10), "a thread").remove(0),
        Some(3)
    );

    // Two clients taking overlapping sets across slots in opposite orders: no deadlock.
    let mut set1 = vec![names[0].clone(), names[1].clone(), same[0].clone()];
    let set2: Vec<String> = set1.iter().rev().cloned().collect();
    set1.push(names[2].clone());
    let workers: Vec<_> = [(a, set1), (b, set2)]
        .into_iter()
        .map(|(client, set)| {
            thread::spawn(move || {
                let refs: Vec<&str> = set.iter().map(String::as_str).collect();
                let multi = client.multi_lock(&refs);
                let mut got = 0;
                for _ in 0..20 {
                    if let Some(g) = multi.try_lock(Duration::from_secs(5), None).unwrap() {
                        got += 1;
                        thread::sleep(Duration::from_millis(2));
                        g.unlock().unwrap();
                    }
                }
                got
            })
        })
        .collect();
    assert_eq!(
        join_all(workers, Duration::from_secs(30), "a thread"),
        vec![20, 20]
    );
}

#[test]
fn cluster_only_refusals() {
    let c = Cluster::start();
    let client = client(&c, Duration::from_secs(5));
    assert!(matches!(
        client.lock("}odd").try_lock(Duration::ZERO, None),
        Err(Error::InvalidArgument(_))
    ));
    let urls = c.seed_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    assert!(matches!(
        Client::cluster_builder(&urls)
            .wait_for_replicas(1, Duration::from_millis(100))
            .build(),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Client::cluster_builder(&[]).build(),
        Err(Error::InvalidArgument(_))
    ));
}

/// How the master of the waiter's shard goes away.
#[derive(Clone, Copy, Debug)]
enum Outage {
    /// kill -9: its connections are reset.
    Killed,
    /// SIGSTOP: its connections stay open and say nothing (only a heartbeat finds it).
    Stopped,
}

/// A thread waits on a lock whose shard master goes away; its replica takes over with the
/// lock (replicated before the outage). The subscriber must follow the shard to the new
/// master: the release there wakes the waiter at once. Deaf, it would sleep until its 40 s
/// deadline, since the lock's fixed lease (60 s) outlasts it.
fn waiter_follows_its_shard_when_the_master_goes(outage: Outage) {
    let mut c = Cluster::start();
    let gone = c.master_ports()[0];
    let replica = c.replica_of(gone);
    // One pooled connection per client: after the failover each pooled connection that
    // still routes the slot to the stopped master fails one call (a timeout) before it is
    // remade, and both clients settle theirs below before the release.
    let urls = c.seed_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let one_connection = || {
        Client::cluster_builder(&urls)
            .watchdog_timeout(Duration::from_secs(10))
            .connect_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_secs(1))
            .pool_size(1)
            .build()
            .unwrap()
    };
    let (holder, waiter) = (one_connection(), one_connection());
    let name = name_on(&c, gone, "followed");
    let guard = holder
        .lock(&name)
        .try_lock(Duration::ZERO, Some(Duration::from_secs(60)))
        .unwrap()
        .unwrap();
    let lock = waiter.lock(&name);
    let waiting = support::wait_through_errors(lock, Duration::from_secs(40));
    // Asks that node only: a stopped one would cost every poll a timeout.
    let channel = channel_of(&name);
    // Takes the cluster, which the outage below borrows mutably.
    let on = |c: &Cluster, port: u16, skip| listening_for_release_on(c, port, &channel, skip) >= 1;
    wait_for("the waiter subscribed", Duration::from_secs(15), || {
        on(&c, gone, None).then_some(())
    });
    // The lock and the waiter's place must be on the replica before its master goes.
    let mut replica_con = connect(replica, None).unwrap();
    // A replica of a Cluster redirects reads to its master unless told otherwise.
    redis::cmd("READONLY")
        .query::<()>(&mut replica_con)
        .unwrap();
    replicate_lock(
        &mut connect(gone, None).unwrap(),
        &mut replica_con,
        &name,
        guard.fencing_token(),
    );

    let t = Instant::now();
    let pid = c.nodes().iter().find(|n| n.port == gone).unwrap().pid();
    match outage {
        Outage::Killed => c.kill(gone),
        Outage::Stopped => signal(pid, "-STOP"), // SIGKILLed with the cluster at the end
    }
    wait_for("the replica takes over", Duration::from_secs(30), || {
        (c.owner_of_slot(slot_of(&name)) == replica).then_some(())
    });
    let taken_over = t.elapsed();
    // Stopped, the master is found by the subscriber's heartbeat (5 s) plus one response
    // timeout, and the new map is read through command connections that may still time out
    // on it: about 6-8 s here, longer on a loaded machine.
    wait_for("the subscriber follows", Duration::from_secs(30), || {
        on(&c, replica, Some(gone)).then_some(())
    });
    let followed = t.elapsed();
    // A pooled connection may still route the slot to the old master: after a SIGSTOP it
    // gives one timeout error (the call's response timeout), then is remade.
    let same_slot = (0..1_000_000)
        .map(|i| format!("settled-{i}"))
        .find(|n| slot_of(n) == slot_of(&name))
        .unwrap();
    let mut stale = 0;
    for client in [&holder, &waiter] {
        let settled = client.lock(&same_slot);
        while let Err(e) = settled.try_lock(Duration::ZERO, None) {
            stale += 1;
            assert!(stale < 20, "commands never reach the new master: {e}");
        }
    }

    let released = Instant::now();
    guard.unlock().unwrap();
    let after = support::woken_soon_after(released, waiting);
    eprintln!(
        "cluster, master {outage:?}: replica took over after {taken_over:?}, subscriber \
         followed after {followed:?}, {stale} stale connection(s), waiter woken {after:?} \
         after the release"
    );
}

#[test]
fn a_waiter_follows_its_shard_when_the_master_is_killed() {
    waiter_follows_its_shard_when_the_master_goes(Outage::Killed);
}

#[test]
fn a_waiter_follows_its_shard_when_the_master_is_stopped() {
    waiter_follows_its_shard_when_the_master_goes(Outage::Stopped);
}

/// A cluster without sharded pub/sub (as before Redis 7: here SPUBLISH is renamed away) gets
/// classic pub/sub: the subscriber listens on one seed node, and a release's PUBLISH reaches
/// it over the cluster bus. A node stopped with SIGSTOP (here a replica, the first seed, so
/// the subscriber goes there first) still accepts TCP connections and then answers nothing;
/// the subscriber must not stay there, or every hand-off in the client waits for the lock's
/// lease instead of the release's message.
#[test]
fn without_sharded_pubsub_a_stopped_node_does_not_keep_the_subscriber_deaf() {
    // Redis 6.2 has no SPUBLISH to rename, and no sharded pub/sub to begin with.
    let c = if support::sharded_pubsub() {
        Cluster::start_with(&["--rename-command", "SPUBLISH", ""])
    } else {
        Cluster::start()
    };
    let masters = c.master_ports();
    let replica = c.replica_of(masters[0]);
    let name = name_on(&c, masters[1], "deaf");
    let mut urls = vec![format!("redis://127.0.0.1:{replica}/")];
    urls.extend(
        c.seed_urls()
            .into_iter()
            .filter(|u| !u.contains(&format!(":{replica}/"))),
    );
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let build = || {
        Client::cluster_builder(&urls)
            .watchdog_timeout(Duration::from_secs(8))
            .connect_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_secs(1))
            .build()
            .unwrap()
    };
    let (holder, waiter) = (build(), build());
    let pid = c.nodes().iter().find(|n| n.port == replica).unwrap().pid();
    signal(pid, "-STOP"); // SIGKILLed with the cluster at the end, stopped or not
    let mut wakes = Vec::new();
    for _ in 0..2 {
        let guard = holder.lock(&name).lock().unwrap();
        let lock = waiter.lock(&name);
        let waiting = thread::spawn(move || {
            let guard = lock.try_lock(Duration::from_secs(20), None).unwrap();
            (Instant::now(), guard.is_some())
        });
        // It finds that the stopped node does not answer (one response timeout) and
        // subscribes on another, with classic SUBSCRIBE.
        let counts = wait_for("a classic subscription", Duration::from_secs(10), || {
            let counts = subscribers_by_node_but(&c, &name, Some(replica));
            counts
                .iter()
                .any(|(_, classic, _)| *classic > 0)
                .then_some(counts)
        });
        assert!(
            counts.iter().all(|(_, _, sharded)| *sharded == 0),
            "{counts:?}"
        );
        let released = Instant::now();
        guard.unlock().unwrap();
        let (woken, got) = join_all(vec![waiting], Duration::from_secs(25), "a thread").remove(0);
        assert!(got, "the waiter got the lock");
        wakes.push(woken - released);
    }
    signal(pid, "-CONT");
    // Deaf, it would wake when the holder's 8 s lease ran out: about 5 s after the release.
    assert!(
        wakes.iter().all(|w| *w < Duration::from_secs(1)),
        "waiters woken {wakes:?} after the release"
    );
}

#[test]
fn a_client_starts_while_a_master_is_down_and_the_other_slots_work() {
    let mut c = Cluster::start();
    let masters = c.master_ports();
    let (dead, alive) = (masters[0], masters[1]);
    let safe_name = name_on(&c, alive, "starts");
    c.kill(dead);
    // The dead master first among the seeds.
    let mut urls = vec![format!("redis://127.0.0.1:{dead}/")];
    urls.extend(c.seed_urls());
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let started = Instant::now();
    let client = Client::cluster_builder(&urls)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
        .build()
        .expect("a client must start while one master is down");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let guard = client.lock(&safe_name).lock().unwrap();
    assert!(has_lock(alive, &safe_name));
    guard.unlock().unwrap();
}

/// A reply that comes after its command timed out is not read as the answer to a later one.
/// On a Cluster a timed-out command no longer costs the whole pool (only its connection, and
/// only if the cluster connection gives up): the cluster connection resends it on the same
/// node connection, and one connection serves every caller here (pool of one). A master
/// kept busy by a script for longer than the response timeout: the free lock's inspection
/// times out, is resent and answered late; the held lock's, next on the same connection,
/// must read its own reply, not the free one's.
#[test]
fn a_late_reply_is_not_read_as_the_answer_to_the_next_command() {
    let c = Cluster::start();
    let master = c.master_ports()[0];
    let free = name_on(&c, master, "late-free");
    let held = name_on(&c, master, "late-held");
    let urls = c.seed_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let client = Client::cluster_builder(&urls)
        .pool_size(1)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let holder = self::client(&c, Duration::from_secs(30));
    let _guard = holder.lock(&held).lock().unwrap();
    // The scripts cached, so that no NOSCRIPT round trip comes between.
    assert!(!client.lock(&free).is_locked().unwrap());
    assert!(client.lock(&held).is_locked().unwrap());

    // Busy for one, then two response timeouts and a bit: one or two late replies queue up.
    for busy_ms in [400u64, 700] {
        let busy = thread::spawn(move || {
            let mut con = connect(master, None).unwrap();
            con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            // Valkey's TIME stands still inside a script (until its busy threshold, 5 s):
            // there the clock is os.clock, which Redis's scripts cannot reach.
            let script = "local ok, clock = pcall(function() return os.clock end) \
                 local now = ok and function() return clock() * 1000 end or function() \
                   local t = redis.call('TIME') return t[1] * 1000 + t[2] / 1000 end \
                 local start = now() \
                 repeat until now() - start > tonumber(ARGV[1]) \
                 return 1";
            let _: i64 = redis::cmd("EVAL")
                .arg(script)
                .arg(0)
                .arg(busy_ms)
                .query(&mut con)
                .unwrap();
        });
        thread::sleep(Duration::from_millis(50)); // the script is running
        let t = Instant::now();
        let first = client.lock(&free).is_locked();
        let took = t.elapsed();
        for _ in 0..3 {
            assert!(client.lock(&held).is_locked().unwrap(), "{held} is held");
            assert!(!client.lock(&free).is_locked().unwrap(), "{free} is free");
        }
        busy.join().unwrap();
        eprintln!("busy {busy_ms} ms: the free lock's inspection {first:?} after {took:?}");
        assert!(!first.unwrap_or(false), "{free} is free");
    }
}

/// The read-write lock, the semaphore, the spin lock and the count-down latch on a Cluster:
/// every key of a name on the master of its slot, and a release (a count-down to zero) wakes
/// the waiters through sharded pub/sub on that shard (before Redis 7, classic pub/sub), well
/// before any lease would have.
#[test]
fn every_kind_of_the_family_lives_in_its_slot_and_wakes_waiters_by_shard() {
    let c = Cluster::start();
    let holder = client(&c, Duration::from_secs(10));
    let waiters = client(&c, Duration::from_secs(10));
    let masters = c.master_ports();
    let keys_on = |port: u16, name: &str| -> Vec<String> {
        let mut con = connect(port, None).unwrap();
        redis::cmd("KEYS")
            .arg(format!("redlatch:{{{name}}}*"))
            .query(&mut con)
            .unwrap()
    };

    // A writer holds; two readers wait on another client; the release grants both.
    let master = masters[0];
    let name = name_on(&c, master, "family-rw");
    let write = holder.read_write_lock(&name).write().unwrap();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let lock = waiters.read_write_lock(&name);
            thread::spawn(move || {
                let read = lock.try_read(Duration::from_secs(8), None).unwrap();
                (Instant::now(), read.map(|r| r.fencing_token()))
            })
        })
        .collect();
    let channel = format!("redlatch:{{{name}}}:rwlock:unlocked");
    wait_for("the readers subscribed", Duration::from_secs(15), || {
        (listening_for_release_on(&c, master, &channel, None) >= 1).then_some(())
    });
    for other in masters.iter().filter(|p| **p != master) {
        assert!(
            keys_on(*other, &name).is_empty(),
            "keys of {name} on {other}"
        );
    }
    assert!(
        keys_on(master, &name)
            .iter()
            .any(|k| k.ends_with(":rwlock"))
    );
    let token = write.fencing_token();
    let released = Instant::now();
    write.unlock().unwrap();
    for (woken, read) in join_all(readers, Duration::from_secs(10), "readers") {
        assert_eq!(read, Some(token), "a reader was not granted");
        assert!(
            woken - released < Duration::from_secs(1),
            "a reader woke late"
        );
    }

    // Permits on another master: the release grants the waiter by shard.
    let master = masters[1];
    let name = name_on(&c, master, "family-sem");
    let sem = holder.semaphore(&name);
    sem.set_permits(1).unwrap();
    let held = sem.acquire(1).unwrap();
    let other = waiters.semaphore(&name);
    let waiting = thread::spawn(move || {
        let permits = other.try_acquire(1, Duration::from_secs(8), None).unwrap();
        (Instant::now(), permits.map(|p| p.fencing_token()))
    });
    let channel = format!("redlatch:{{{name}}}:semaphore:unlocked");
    wait_for("the waiter subscribed", Duration::from_secs(15), || {
        (listening_for_release_on(&c, master, &channel, None) >= 1).then_some(())
    });
    let token = held.fencing_token();
    let released = Instant::now();
    held.release().unwrap();
    let (woken, got) = join_all(vec![waiting], Duration::from_secs(10), "a waiter").remove(0);
    assert!(got.is_some_and(|t| t > token), "the waiter was not granted");
    assert!(
        woken - released < Duration::from_secs(1),
        "the waiter woke late"
    );
    for other in masters.iter().filter(|p| **p != master) {
        assert!(
            keys_on(*other, &name).is_empty(),
            "keys of {name} on {other}"
        );
    }
    assert!(
        keys_on(master, &name)
            .iter()
            .any(|k| k.ends_with(":permits"))
    );

    // A spin lock on the third master: the lock itself, so a Lock waiter is woken by shard
    // when a spin holder releases, and a spinner (no subscription) gets it after a Lock.
    let master = masters[2];
    let name = name_on(&c, master, "family-spin");
    let spun = holder.spin_lock(&name).lock().unwrap();
    assert!(has_lock(master, &name));
    let lock = waiters.lock(&name);
    let waiting = thread::spawn(move || {
        let guard = lock.try_lock(Duration::from_secs(8), None).unwrap();
        (Instant::now(), guard.map(|g| g.fencing_token()))
    });
    wait_for(
        "the lock waiter subscribed",
        Duration::from_secs(15),
        || (listening_for_release_on(&c, master, &channel_of(&name), None) >= 1).then_some(()),
    );
    let token = spun.fencing_token();
    let released = Instant::now();
    spun.unlock().unwrap();
    let (woken, got) = join_all(vec![waiting], Duration::from_secs(10), "a waiter").remove(0);
    assert!(
        got.is_some_and(|t| t > token),
        "the Lock waiter was not handed it"
    );
    assert!(
        woken - released < Duration::from_secs(1),
        "the Lock waiter woke late"
    );
    let held = holder.lock(&name).lock().unwrap();
    let spin = waiters.spin_lock(&name);
    let spinning = thread::spawn(move || {
        spin.try_lock(Duration::from_secs(8), None)
            .unwrap()
            .is_some()
    });
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        listening_for_release_on(&c, master, &channel_of(&name), None),
        0,
        "a spinner subscribed"
    );
    drop(held);
    assert!(join_all(vec![spinning], Duration::from_secs(10), "a spinner")[0]);

    // A count-down latch on the first master: waiters on another client are released by
    // the message of the count-down that reaches zero, through that shard.
    let master = masters[0];
    let name = name_on(&c, master, "family-latch");
    let latch = holder.count_down_latch(&name);
    assert!(latch.try_set_count(2).unwrap());
    let watchers: Vec<_> = (0..2)
        .map(|_| {
            let latch = waiters.count_down_latch(&name);
            thread::spawn(move || (latch.wait(Duration::from_secs(8)).unwrap(), Instant::now()))
        })
        .collect();
    let channel = format!("redlatch:{{{name}}}:latch:unlocked");
    wait_for(
        "the latch's waiters subscribed",
        Duration::from_secs(15),
        || (listening_for_release_on(&c, master, &channel, None) >= 1).then_some(()),
    );
    assert_eq!(latch.count_down().unwrap(), 1);
    thread::sleep(Duration::from_millis(200));
    assert!(
        watchers.iter().all(|w| !w.is_finished()),
        "released before zero"
    );
    let opened = Instant::now();
    assert_eq!(latch.count_down().unwrap(), 0);
    for (reached, at) in join_all(watchers, Duration::from_secs(10), "latch waiters") {
        assert!(reached);
        assert!(
            at - opened < Duration::from_secs(1),
            "a latch waiter woke late"
        );
    }
    assert!(keys_on(master, &name).iter().any(|k| k.ends_with(":latch")));
}
