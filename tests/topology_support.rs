//! The test support for real topologies works: Sentinel reports the master and follows a
//! failover, a Cluster forms, finds a key's owner, moves a slot and fails a replica over, and
//! independent masters are independent. These tests talk to Redis with the `redis` crate
//! only; the lock tests on these topologies build on them.

mod support;

use std::time::{Duration, Instant};

use redis::{Connection, RedisResult};
use support::topology::{
    Cluster, Masters, Sentinel, SentinelAuth, connect, key_slot, role, wait_for,
};

fn get(con: &mut Connection, key: &str) -> RedisResult<Option<String>> {
    redis::cmd("GET").arg(key).query(con)
}

fn set(con: &mut Connection, key: &str, value: &str) -> RedisResult<()> {
    redis::cmd("SET").arg(key).arg(value).query(con)
}

/// The error code of a refused command: "MOVED", "ASK", "NOAUTH", ...
fn refusal<T: std::fmt::Debug>(result: RedisResult<T>) -> String {
    let err = result.expect_err("the command should have been refused");
    err.code().unwrap_or_default().to_string()
}

#[test]
fn sentinel_reports_the_master_and_follows_a_failover() {
    let t = Instant::now();
    let s = Sentinel::start();
    let started = t.elapsed();
    let (first, replica) = (s.servers()[0].port, s.servers()[1].port);
    assert_eq!(s.master_port(), first);
    for i in 0..3 {
        assert_eq!(
            s.master_addr_from(i).unwrap(),
            ("127.0.0.1".to_string(), first)
        );
    }
    let mut master = s.data_connection(first).unwrap();
    set(&mut master, "k", "v").unwrap();
    let mut on_replica = s.data_connection(replica).unwrap();
    wait_for(
        "the write reaches the replica",
        Duration::from_secs(5),
        || (get(&mut on_replica, "k").ok()? == Some("v".into())).then_some(()),
    );

    let t = Instant::now();
    let new = s.failover();
    let failed_over = t.elapsed();
    assert_eq!(new, replica);
    assert_eq!(s.master_url(), format!("redis://127.0.0.1:{replica}/"));
    assert_eq!(role(new, None).unwrap(), "master");
    let mut master = s.data_connection(new).unwrap();
    assert_eq!(get(&mut master, "k").unwrap(), Some("v".into()));

    let t = Instant::now();
    s.await_settled();
    let settled = t.elapsed();
    assert_eq!(
        role(first, None).unwrap(),
        "slave",
        "the old master is demoted"
    );
    eprintln!(
        "sentinel: started in {started:?}, failed over in {failed_over:?}, settled in {settled:?}"
    );
}

#[test]
fn sentinel_with_passwords_on_the_data_nodes_and_the_sentinels() {
    let s = Sentinel::start_with(SentinelAuth {
        data_password: Some("data-secret".into()),
        sentinel_password: Some("sentinel-secret".into()),
    });
    let (first, replica) = (s.servers()[0].port, s.servers()[1].port);
    let sentinel = s.sentinel_ports()[0];
    let mut anonymous = connect(sentinel, None).unwrap();
    assert_eq!(
        refusal(
            redis::cmd("SENTINEL")
                .arg("MASTERS")
                .query::<redis::Value>(&mut anonymous)
        ),
        "NOAUTH"
    );
    let mut anonymous = connect(first, None).unwrap();
    assert_eq!(refusal(get(&mut anonymous, "k")), "NOAUTH");
    assert!(s.sentinel_urls()[0].contains(":sentinel-secret@"));
    assert_eq!(
        s.master_url(),
        format!("redis://:data-secret@127.0.0.1:{first}/")
    );
    // The sentinels reach the data nodes and each other with their passwords.
    assert_eq!(s.failover(), replica);
}

#[test]
fn cluster_forms_finds_a_keys_owner_and_moves_a_slot() {
    let t = Instant::now();
    let c = Cluster::start();
    let started = t.elapsed();
    assert_eq!(c.seed_urls().len(), 6);
    let masters = c.master_ports();
    assert_eq!(masters.len(), 3);
    for m in &masters {
        let replica = c.replica_of(*m);
        assert!(!masters.contains(&replica));
    }

    let key = "redlatch:{topology}";
    let slot = c.slot_of(key);
    assert_eq!(slot, key_slot(key.as_bytes()));
    let from = c.owner_of(key);
    let to = *masters.iter().find(|m| **m != from).unwrap();
    let mut owner = connect(from, None).unwrap();
    set(&mut owner, key, "v").unwrap();
    let mut other = connect(to, None).unwrap();
    assert_eq!(refusal(get(&mut other, key)), "MOVED");

    // Step by step: while the slot migrates, the source answers ASK for keys it lacks.
    let t = Instant::now();
    let mut step = c.begin_slot_move(slot, to);
    assert_eq!(
        refusal(get(&mut owner, "redlatch:{topology}:absent")),
        "ASK"
    );
    assert_eq!(get(&mut owner, key).unwrap(), Some("v".into()));
    assert_eq!(step.migrate_keys(), 1);
    assert_eq!(refusal(get(&mut owner, key)), "ASK");
    step.finish();
    let moved = t.elapsed();
    assert_eq!(c.owner_of(key), to);
    assert_eq!(get(&mut other, key).unwrap(), Some("v".into()));
    assert_eq!(refusal(get(&mut owner, key)), "MOVED");

    // And back in one call.
    c.move_slot(slot, from);
    assert_eq!(c.owner_of(key), from);
    assert_eq!(get(&mut owner, key).unwrap(), Some("v".into()));
    eprintln!("cluster: started in {started:?}, moved a slot in {moved:?}");
}

#[test]
fn cluster_replica_takes_over_by_failover_and_when_its_master_dies() {
    let mut c = Cluster::start();
    let key = "redlatch:{failover}";
    let owner = c.owner_of(key);
    let replica = c.replica_of(owner);
    let mut con = connect(owner, None).unwrap();
    set(&mut con, key, "v").unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut con).unwrap();
    assert_eq!(acked, 1);

    let t = Instant::now();
    assert_eq!(c.failover(replica), owner);
    let failed_over = t.elapsed();
    assert_eq!(c.owner_of(key), replica);
    let mut con = connect(replica, None).unwrap();
    assert_eq!(get(&mut con, key).unwrap(), Some("v".into()));
    c.await_settled();
    assert_eq!(role(owner, None).unwrap(), "slave");

    // Kill the new master: its replica (the old master) is promoted after the node timeout.
    let t = Instant::now();
    c.kill(replica);
    wait_for(
        "the surviving replica takes the slot over",
        Duration::from_secs(30),
        || (c.owner_of(key) == owner && role(owner, None).ok()? == "master").then_some(()),
    );
    let taken_over = t.elapsed();
    let mut con = connect(owner, None).unwrap();
    assert_eq!(get(&mut con, key).unwrap(), Some("v".into()));
    eprintln!("cluster: CLUSTER FAILOVER in {failed_over:?}, kill -9 taken over in {taken_over:?}");
}

#[test]
fn independent_masters_share_nothing() {
    let mut m = Masters::start(5);
    assert_eq!(m.len(), 5);
    let mut ports = m.ports();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 5);
    let mut first = m.server(0).admin();
    set(&mut first, "k", "v").unwrap();
    let mut second = m.server(1).admin();
    assert_eq!(get(&mut second, "k").unwrap(), None);
    m.server_mut(2).kill();
    assert!(connect(m.ports()[2], None).is_err());
    m.server_mut(2).restart();
    assert!(connect(m.ports()[2], None).is_ok());
}
