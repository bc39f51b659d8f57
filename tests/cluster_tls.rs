//! Redis Cluster over TLS (the `tls` feature): six nodes with `--tls-cluster yes`, reached at
//! their TLS ports with certificates made for the run. The cluster client's node connections
//! and the subscriber's sharded pub/sub connections both speak TLS with the client's
//! certificates; a wrong CA or a missing client certificate fails `build()` clearly.
#![cfg(feature = "tls")]

mod support;

use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Client, Error, TlsCertificates};
use support::tls::{Certificates, trusting};
use support::topology::{Cluster, ClusterNode, connect, key_slot, wait_for};

const TIMEOUT: Duration = Duration::from_secs(1);

/// One TLS cluster at a time: two of them starting together (twelve nodes, each picking a
/// plain, a TLS and a bus port) once made `redis-cli --cluster create` meet a node that was
/// not the cluster node it expected on its port.
static SERIAL: Mutex<()> = Mutex::new(());

fn builder(c: &Cluster, certs: TlsCertificates) -> redlatch::Result<Client> {
    let urls = c.tls_seed_urls();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    Client::cluster_builder(&urls)
        .tls_certificates(certs)
        .watchdog_timeout(Duration::from_secs(10))
        .connect_timeout(TIMEOUT)
        .response_timeout(TIMEOUT)
        .build()
}

/// A client that trusts the run's CA, presenting the client certificate.
fn client(c: &Cluster) -> Client {
    let certs = &c.tls().unwrap().certs;
    builder(c, trusting(&certs.ca, Some(certs))).unwrap()
}

fn channel_of(name: &str) -> String {
    format!("redlatch:{{{name}}}:unlocked")
}

/// A lock name starting with `stem` whose slot the master on `port` serves.
fn name_on(view: &[ClusterNode], port: u16, stem: &str) -> String {
    (0..100_000)
        .map(|i| format!("{stem}-{i}"))
        .find(|name| {
            let slot = key_slot(format!("redlatch:{{{name}}}").as_bytes());
            view.iter()
                .any(|n| n.port == port && n.master && n.serves(slot))
        })
        .expect("a name on every master")
}

/// `PUBSUB SHARDNUMSUB` and `NUMSUB` of lock `name`'s channel on the node on `port`, asked
/// over its plain port.
fn subscribers_on(port: u16, name: &str) -> (i64, i64) {
    let mut con = connect(port, None).unwrap();
    let mut count = |which: &str| {
        let reply: (String, i64) = redis::cmd("PUBSUB")
            .arg(which)
            .arg(channel_of(name))
            .query(&mut con)
            .unwrap();
        reply.1
    };
    (count("SHARDNUMSUB"), count("NUMSUB"))
}

/// On every master in turn: a lock held by one TLS cluster client excludes the other, and a
/// thread of the other, waiting for it, sits on one sharded subscription on that master (no
/// classic one), sends no script while it waits, and is handed the lock within 500 ms of the
/// release.
#[test]
fn tls_cluster_clients_exclude_each_other_and_a_release_on_each_master_wakes_a_waiter() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::start_tls(false);
    let (holder, waiter) = (client(&c), client(&c));
    let view = c.view();
    for master in c.master_ports() {
        let name = name_on(&view, master, "tls-shard");
        let held = holder.lock(&name).lock().unwrap();
        assert!(
            waiter
                .lock(&name)
                .try_lock(Duration::ZERO, None)
                .unwrap()
                .is_none(),
            "both TLS clients hold {name}"
        );
        let lock = waiter.lock(&name);
        let waiting = thread::spawn(move || {
            let guard = lock.try_lock(Duration::from_secs(20), None).unwrap();
            (Instant::now(), guard.map(|g| g.fencing_token()))
        });
        wait_for("the waiter subscribed", Duration::from_secs(10), || {
            (subscribers_on(master, &name) == (1, 0)).then_some(())
        });
        let mut admin = connect(master, None).unwrap();
        let before = support::command_calls(&mut admin, "evalsha");
        thread::sleep(Duration::from_secs(1));
        let during = support::command_calls(&mut admin, "evalsha") - before;
        assert_eq!(
            during, 0,
            "the waiter sent {during} scripts while it waited"
        );
        println!("master {master}:");
        support::release_hands_over(held, waiting);
    }
}

/// With `tls-auth-clients yes` on every node: a CA that did not sign the nodes' certificates,
/// and the right CA without a client certificate, both fail `build()` with `Error::Redis`, in
/// bounded time; with both, locks work.
#[test]
fn a_wrong_ca_or_a_missing_client_certificate_fails_a_tls_cluster_build() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::start_tls(true);
    let certs = &c.tls().unwrap().certs;
    for (what, tls) in [
        (
            "a stranger CA",
            trusting(&Certificates::stranger_ca(), Some(certs)),
        ),
        ("no client certificate", trusting(&certs.ca, None)),
    ] {
        let started = Instant::now();
        match builder(&c, tls) {
            Err(Error::Redis(e)) => println!("{what}: {e}"),
            other => panic!("{what}: expected Error::Redis, got {other:?}"),
        }
        // Six seeds, each refused at its handshake (or at the first reply) within the
        // timeouts.
        assert!(
            started.elapsed() < 6 * 2 * TIMEOUT + Duration::from_secs(2),
            "{what}: took {:?}",
            started.elapsed()
        );
    }
    let trusted = client(&c);
    let guard = trusted.lock("mtls-cluster").lock().unwrap();
    guard.check().unwrap();
    guard.unlock().unwrap();
}
