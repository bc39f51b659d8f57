//! Sentinel over TLS (the `tls` feature): a master, a replica and three sentinels that all
//! listen on TLS ports, replicate and monitor over TLS (`tls-replication yes`), with
//! certificates made for the run (`tests/support/topology.rs`, `Sentinel::start_tls`). The
//! client is given `rediss://` sentinels and the run's CA, and must reach the master the
//! sentinels name over TLS too, its pub/sub connection included. Each process keeps a plain
//! port that only the test's admin connections use.
#![cfg(feature = "tls")]

mod support;

use std::thread;
use std::time::{Duration, Instant};

use redis::Connection;
use redlatch::{Client, ClientBuilder, ClientTlsConfig, Error, TlsCertificates};
use support::topology::{Sentinel, replicate_lock};
use support::{eventually, unique};

const TIMEOUT: Duration = Duration::from_secs(1);

/// The run's CA, and with `client_cert` the run's client certificate.
fn certificates(setup: &Sentinel, client_cert: bool) -> TlsCertificates {
    let certs = &setup.tls().expect("a TLS setup").certs;
    TlsCertificates {
        root_cert: Some(certs.ca.clone()),
        client_tls: client_cert.then(|| ClientTlsConfig {
            client_cert: certs.client_cert.clone(),
            client_key: certs.client_key.clone(),
        }),
    }
}

/// A builder for the setup's `rediss://` sentinels, with short timeouts and no certificates.
fn builder(setup: &Sentinel) -> ClientBuilder {
    let urls = setup.sentinel_urls();
    assert!(urls.iter().all(|u| u.starts_with("rediss://")), "{urls:?}");
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    Client::sentinel_builder(&urls, Sentinel::NAME)
        .watchdog_timeout(Duration::from_secs(2))
        .connect_timeout(TIMEOUT)
        .response_timeout(TIMEOUT)
}

fn client(setup: &Sentinel, client_cert: bool) -> Client {
    builder(setup)
        .tls_certificates(certificates(setup, client_cert))
        .build()
        .unwrap()
}

/// `build()` fails with `Error::Redis` within the timeouts: a connect and a response timeout
/// for each of the three sentinels at worst, and some scheduling slack.
fn refused(build: impl FnOnce() -> redlatch::Result<Client>, what: &str) {
    let started = Instant::now();
    match build() {
        Err(Error::Redis(e)) => println!("{what}: {e}"),
        other => panic!("{what}: expected Error::Redis, got {other:?}"),
    }
    assert!(
        started.elapsed() < TIMEOUT * 6 + Duration::from_millis(1500),
        "{what}: took {:?}",
        started.elapsed()
    );
}

/// The connections of the data node on `port` that came in on its plain port, other than
/// the admin connection `admin` that asks: with everything over TLS there are none.
fn plain_connections(admin: &mut Connection, port: u16) -> Vec<String> {
    let me: u64 = redis::cmd("CLIENT").arg("ID").query(admin).unwrap();
    let list: String = redis::cmd("CLIENT").arg("LIST").query(admin).unwrap();
    let plain = format!(" laddr=127.0.0.1:{port} ");
    let mine = format!("id={me} ");
    list.lines()
        .filter(|l| format!(" {l} ").contains(&plain) && !l.starts_with(&mine))
        .map(str::to_string)
        .collect()
}

/// Waits (bounded) until the sentinels name a master other than `old` (admin ports both).
fn wait_until_master_moves(setup: &Sentinel, old: u16) -> u16 {
    let old_announced = setup.announced_port(old);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok((_, port)) = setup.master_addr_from(0)
            && port != old_announced
        {
            return setup.master_port();
        }
        assert!(Instant::now() < deadline, "no failover within 30 s");
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn tls_sentinels_lead_to_a_tls_master_where_a_release_wakes_the_waiter() {
    let setup = Sentinel::start_tls(false);
    let master = setup.master_port();
    let tls_port = setup.announced_port(master);
    assert_ne!(tls_port, master, "the sentinels report the TLS port");
    let (holder, waiter) = (client(&setup, false), client(&setup, false));
    let name = unique("stls");
    let held = holder.lock(&name).lock().unwrap();
    let mut admin = setup.data_connection(master).unwrap(); // the plain port
    let exists: bool = redis::cmd("EXISTS")
        .arg(format!("redlatch:{{{name}}}"))
        .query(&mut admin)
        .unwrap();
    assert!(exists, "the lock is not on the master");

    let lock = waiter.lock(&name);
    let waiting = thread::spawn(move || {
        let guard = lock.try_lock(Duration::from_secs(20), None).unwrap();
        (Instant::now(), guard.map(|g| g.fencing_token()))
    });
    support::await_waiting(&mut admin, &name);
    // The clients' command and pub/sub connections, the replica and the sentinels all came
    // in on the TLS port. Connections the test's helpers dropped may linger for a moment.
    let mut seen = Vec::new();
    assert!(
        eventually(Duration::from_secs(2), || {
            seen = plain_connections(&mut admin, master);
            seen.is_empty()
        }),
        "connections on the plain port: {seen:#?}"
    );
    support::release_hands_over(held, waiting);

    // A CA that signed none of the sentinels, and the webpki roots, which did not either.
    refused(
        || {
            builder(&setup)
                .tls_certificates(TlsCertificates {
                    root_cert: Some(support::tls::Certificates::stranger_ca()),
                    client_tls: None,
                })
                .build()
        },
        "a stranger CA",
    );
    refused(|| builder(&setup).build(), "the webpki roots");
    // The sentinels' TLS ports do not speak plain RESP.
    let as_plain: Vec<String> = setup
        .sentinel_urls()
        .iter()
        .map(|u| u.replacen("rediss:", "redis:", 1))
        .collect();
    let as_plain: Vec<&str> = as_plain.iter().map(String::as_str).collect();
    refused(
        || {
            Client::sentinel_builder(&as_plain, Sentinel::NAME)
                .connect_timeout(TIMEOUT)
                .response_timeout(TIMEOUT)
                .tls_certificates(certificates(&setup, false))
                .build()
        },
        "plain RESP to the TLS ports",
    );
    // One scheme for all sentinels: a mix is refused before any I/O.
    let urls = setup.sentinel_urls();
    let mixed = [urls[0].as_str(), as_plain[1]];
    match Client::sentinel_builder(&mixed, Sentinel::NAME)
        .tls_certificates(certificates(&setup, false))
        .build()
    {
        Err(Error::InvalidArgument(why)) => println!("mixed schemes: {why}"),
        other => panic!("mixed schemes: expected InvalidArgument, got {other:?}"),
    }
}

/// `tls-auth-clients yes` everywhere: the sentinels and the master demand the client
/// certificate, and the one the builder is given serves them all.
#[test]
fn mutual_tls_sentinels_and_master_take_the_builders_client_certificate() {
    let setup = Sentinel::start_tls(true);
    refused(
        || {
            builder(&setup)
                .tls_certificates(certificates(&setup, false))
                .build()
        },
        "no client certificate",
    );
    let (holder, waiter) = (client(&setup, true), client(&setup, true));
    let name = unique("smtls");
    let held = holder.lock(&name).lock().unwrap();
    let mut admin = setup.data_connection(setup.master_port()).unwrap();
    let after = support::release_to_waiter(&mut admin, waiter.lock(&name), held);
    assert!(
        after < Duration::from_millis(500),
        "woken {after:?} after the release"
    );
}

/// The master is killed (SIGKILL) while a thread waits for a lock it holds; Sentinel
/// promotes the replica (over TLS), the client and its subscriber follow, and the release on
/// the new master wakes the waiter.
#[test]
fn after_a_tls_failover_the_client_follows_and_the_waiter_is_woken() {
    let mut setup = Sentinel::start_tls(false);
    let old = setup.master_port();
    let (holder, waiter) = (client(&setup, false), client(&setup, false));
    let name = unique("stls-failover");
    // A lease that outlasts the failover, so that the lock is still held on the new master.
    let guard = holder
        .lock(&name)
        .try_lock(Duration::ZERO, Some(Duration::from_secs(60)))
        .unwrap()
        .unwrap();
    let channel = support::channel_of(&name);
    let subscribed = |setup: &Sentinel, port: u16| {
        let mut con = setup.data_connection(port).ok()?;
        let reply: (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query(&mut con)
            .ok()?;
        (reply.1 >= 1).then_some(())
    };
    // Until Sentinel promotes the replica (2 s of silence, then an election) the sentinels
    // name the dead master, and a call fails at once with "connection refused": far more
    // than the ten errors `support::wait_through_errors` allows. A caller waiting through a
    // failover calls again; this one does, with a pause, as long as the test allows.
    let lock = waiter.lock(&name);
    let waiting = thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(40);
        for _ in 0..400 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match lock.try_lock(left, None) {
                Ok(guard) => return (Instant::now(), guard.is_some()),
                Err(e) => {
                    eprintln!("waiter: {e}");
                    thread::sleep(Duration::from_millis(100));
                }
            }
        }
        (Instant::now(), false)
    });
    assert!(
        eventually(Duration::from_secs(5), || subscribed(&setup, old).is_some()),
        "the waiter subscribed"
    );
    let replica = setup
        .servers()
        .iter()
        .map(|s| s.port)
        .find(|&port| port != old)
        .unwrap();
    // The lock and the waiter's place must be on the replica before its master goes.
    replicate_lock(
        &mut setup.data_connection(old).unwrap(),
        &mut setup.data_connection(replica).unwrap(),
        &name,
        guard.fencing_token(),
    );

    let t = Instant::now();
    setup.server_mut(old).kill();
    let new = wait_until_master_moves(&setup, old);
    assert_eq!(new, replica);
    let failed_over = t.elapsed();
    assert!(
        eventually(Duration::from_secs(30), || subscribed(&setup, new)
            .is_some()),
        "the subscriber follows the master"
    );
    let followed = t.elapsed();
    // Pooled connections to the dead master fail once each, then the call goes to the new one.
    let mut stale = 0;
    while let Err(e) = holder.lock("settled").try_lock(Duration::ZERO, None) {
        stale += 1;
        assert!(stale < 10, "commands never reach the new master: {e}");
    }
    let released = Instant::now();
    guard.unlock().unwrap();
    let after = support::woken_soon_after(released, waiting);
    eprintln!(
        "sentinel over TLS, master killed: failed over after {failed_over:?}, subscriber \
         followed after {followed:?}, waiter woken {after:?} after the release"
    );
}
