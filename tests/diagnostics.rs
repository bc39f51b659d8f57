//! What a newcomer meets when something is wrong: errors that name the server and the step,
//! `build()` refusing the wrong topology or a server that is not Redis, URLs and names checked
//! with what was expected, and connections named so that `CLIENT LIST` says whose they are.

mod support;

use std::time::Duration;

use redlatch::{Client, Error};
use support::fake::{FakeServer, Misbehaviour};
use support::topology::{TempDir, master_and_replica};
use support::{RedisServer, eventually, free_port};

/// The text of an `Error::Redis`, which must keep the `redis` error as its source.
fn redis_error_text<T: std::fmt::Debug>(
    result: redlatch::Result<T>,
) -> (redis::RedisError, String) {
    match result {
        Err(e @ Error::Redis(_)) => {
            let text = e.to_string();
            let source = std::error::Error::source(&e).expect("the redis error is the source");
            assert!(source.downcast_ref::<redis::RedisError>().is_some());
            let Error::Redis(inner) = e else {
                unreachable!()
            };
            (inner, text)
        }
        other => panic!("expected Error::Redis, got {other:?}"),
    }
}

fn invalid_text<T: std::fmt::Debug>(result: redlatch::Result<T>) -> String {
    match result {
        Err(Error::InvalidArgument(text)) => text,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

fn quick(url: &str) -> redlatch::ClientBuilder {
    Client::builder(url)
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1))
}

#[test]
fn a_connection_error_names_the_address_and_the_step() {
    let port = free_port();
    let (e, text) = redis_error_text(quick(&format!("redis://127.0.0.1:{port}/")).build());
    assert!(
        text.contains(&format!("127.0.0.1:{port}: cannot connect")),
        "{text}"
    );
    // What callers ask of the error stays as it was.
    assert!(e.is_connection_refusal() && e.is_io_error(), "{e:?}");

    let server = RedisServer::start_with(&["--requirepass", "right"]);
    let url = format!("redis://:wrong@127.0.0.1:{}/", server.port);
    let (e, text) = redis_error_text(quick(&url).build());
    assert!(
        text.contains(&format!("127.0.0.1:{}: AUTH refused", server.port)),
        "{text}"
    );
    assert_eq!(e.kind(), redis::ErrorKind::AuthenticationFailed, "{e:?}");

    let url = format!("redis://:right@127.0.0.1:{}/99", server.port);
    let (_, text) = redis_error_text(quick(&url).build());
    assert!(text.contains("SELECT 99 refused"), "{text}");

    // No password where one is needed: said in those words, not as the server's NOAUTH.
    for url in [server.url(), format!("redis://127.0.0.1:{}/2", server.port)] {
        let (e, text) = redis_error_text(quick(&url).build());
        assert!(
            text.contains(&format!("127.0.0.1:{} requires a password", server.port)),
            "{text}"
        );
        assert_eq!(e.kind(), redis::ErrorKind::AuthenticationFailed, "{e:?}");
    }

    // A server that answers the handshake, then nothing: the address once, the step given.
    let fake = FakeServer::start(Misbehaviour::Trickle { healthy: 1 });
    let (e, text) = redis_error_text(quick(&fake.url()).build());
    let at = format!("127.0.0.1:{}", fake.port);
    assert_eq!(text.matches(&at).count(), 1, "{text}");
    assert!(e.is_timeout(), "{e:?}");
    let fake = FakeServer::start(Misbehaviour::Silent);
    let (e, text) = redis_error_text(quick(&fake.url()).build());
    assert!(
        text.contains(&format!("127.0.0.1:{}: handshake", fake.port)),
        "{text}"
    );
    assert!(e.is_timeout(), "{e:?}");
}

/// A stopped server accepts the connection and never answers the handshake: the error names
/// the steps actually sent, not AUTH when no password was given.
#[test]
fn a_stopped_server_names_only_the_handshake_steps_sent() {
    let server = RedisServer::start_with(&["--requirepass", "pw"]);
    support::signal(server.pid(), "-STOP");
    let port = server.port;
    let said = |url: String| {
        let (e, text) = redis_error_text(quick(&url).build());
        assert!(e.is_timeout(), "{e:?}");
        text
    };
    let plain = said(format!("redis://127.0.0.1:{port}/"));
    let db = said(format!("redis://127.0.0.1:{port}/3"));
    let auth = said(format!("redis://:pw@127.0.0.1:{port}/"));
    support::signal(server.pid(), "-CONT");
    assert!(
        plain.contains(&format!("127.0.0.1:{port}: handshake (CLIENT SETNAME)")),
        "{plain}"
    );
    assert!(db.contains("handshake (SELECT, CLIENT SETNAME)"), "{db}");
    assert!(auth.contains("handshake (AUTH, CLIENT SETNAME)"), "{auth}");
}

#[test]
fn with_three_seeds_the_error_names_each_one_that_failed() {
    let ports = [free_port(), free_port(), free_port()];
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}/"))
        .collect();
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let (_, text) = redis_error_text(
        Client::cluster_builder(&urls)
            .connect_timeout(Duration::from_secs(1))
            .build(),
    );
    for port in ports {
        assert!(
            text.contains(&format!("127.0.0.1:{port}: cannot connect")),
            "{text}"
        );
    }
    // Every seed refusing: still a refusal to whoever asks.
    let (e, _) = redis_error_text(
        Client::cluster_builder(&urls)
            .connect_timeout(Duration::from_secs(1))
            .build(),
    );
    assert!(e.is_connection_refusal(), "{e:?}");

    // Seeds that answer and refuse the password: a wrong password, not a connection error
    // to retry.
    let server = RedisServer::start_with(&["--requirepass", "right"]);
    let wrong = format!("redis://:wrong@127.0.0.1:{}/", server.port);
    let away = format!("redis://:wrong@127.0.0.1:{}/", ports[0]);
    let seeds = [wrong.as_str(), away.as_str(), wrong.as_str()];
    match Client::cluster_builder(&seeds)
        .connect_timeout(Duration::from_secs(1))
        .build()
    {
        Err(e @ Error::Redis(_)) => {
            assert!(!e.is_connection_error(), "{e}");
            let Error::Redis(inner) = &e else {
                unreachable!()
            };
            assert_eq!(inner.kind(), redis::ErrorKind::AuthenticationFailed, "{e}");
            assert!(
                e.to_string()
                    .contains(&format!("127.0.0.1:{}: cannot connect", ports[0])),
                "{e}"
            );
        }
        other => panic!("expected Error::Redis, got {other:?}"),
    }
}

#[test]
fn a_server_that_is_not_redis_fails_build() {
    // Every reply a negative bulk length: no Redis sends that, and no lock could live there.
    let fake = FakeServer::start(Misbehaviour::Answer(b"$-5\r\n"));
    let (_, text) = redis_error_text(quick(&fake.url()).build());
    assert!(
        text.contains(&format!("127.0.0.1:{}", fake.port)) && text.contains("not Redis"),
        "{text}"
    );
    // An HTTP server on the port: the reply does not parse as RESP at all.
    let fake = FakeServer::start(Misbehaviour::Http);
    let (_, text) = redis_error_text(quick(&fake.url()).build());
    assert!(text.contains(&format!("127.0.0.1:{}", fake.port)), "{text}");
}

#[test]
fn a_url_without_a_scheme_says_what_was_expected() {
    for url in ["127.0.0.1:6379", "localhost:6379", "http://127.0.0.1:6379/"] {
        let text = invalid_text(Client::open(url));
        assert!(
            text.contains("redis://")
                && text.contains("rediss://")
                && text.contains("redis+unix://"),
            "{url}: {text}"
        );
    }
    let text = invalid_text(Client::sentinel_builder(&["127.0.0.1:26379"], "m").build());
    assert!(
        text.contains("sentinel URL") && text.contains("no scheme"),
        "{text}"
    );
    let text = invalid_text(Client::cluster_builder(&["127.0.0.1:7000"]).build());
    assert!(text.contains("no scheme"), "{text}");
    // Schemes are read as the URL standard says: in any case.
    let port = free_port();
    let (e, _) = redis_error_text(quick(&format!("REDIS://127.0.0.1:{port}/")).build());
    assert!(e.is_connection_refusal(), "{e:?}");
}

#[test]
fn build_refuses_the_wrong_topology() {
    // A node with cluster mode on (no slots needed to tell): Client::open would see MOVED or
    // CLUSTERDOWN at the first lock.
    let dir = TempDir::new("topology");
    let nodes_conf = dir.path().join("nodes.conf");
    let node = RedisServer::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        nodes_conf.to_str().unwrap(),
    ]);
    let text = invalid_text(Client::open(&node.url()));
    assert!(
        text.contains(&format!("127.0.0.1:{}", node.port))
            && text.contains("Cluster node")
            && text.contains("Client::cluster_builder"),
        "{text}"
    );

    // A plain server given as a Cluster seed: its first lock used to fail with "No
    // connections found".
    let plain = RedisServer::start();
    let text = invalid_text(Client::cluster_builder(&[&plain.url()]).build());
    assert!(
        text.contains(&format!("127.0.0.1:{}", plain.port))
            && text.contains("without cluster mode")
            && text.contains("Client::open"),
        "{text}"
    );
    // The right builder for each works.
    assert!(Client::open(&plain.url()).is_ok());
}

#[test]
fn wait_for_replicas_without_enough_replicas_fails_build() {
    let lone = RedisServer::start();
    match quick(&lone.url())
        .wait_for_replicas(1, Duration::from_millis(100))
        .build()
    {
        // Not an argument that can never work: a replica may be restarting.
        Err(
            e @ Error::NotReplicated {
                acknowledged: 0,
                wanted: 1,
                ..
            },
        ) => {
            let text = e.to_string();
            assert!(
                text.contains("0 of 1") && text.contains("NotReplicated"),
                "{text}"
            );
        }
        other => panic!("expected NotReplicated, got {other:?}"),
    }

    // An ACL that refuses WAIT: every lock would fail the same way.
    let url = lone.acl_user("nowait", &["~*", "&*", "+@all", "-wait"]);
    let text = invalid_text(
        quick(&url)
            .wait_for_replicas(1, Duration::from_millis(100))
            .build(),
    );
    assert!(text.contains("refused WAIT"), "{text}");

    let (master, _replica) = master_and_replica();
    // Time enough for the replica's acknowledgement on a loaded machine.
    let client = Client::builder(&master.url())
        .response_timeout(Duration::from_secs(10))
        .wait_for_replicas(1, Duration::from_secs(5))
        .build()
        .expect("one replica is enough for one");
    assert!(
        client
            .lock("replicated")
            .try_lock(Duration::ZERO, None)
            .unwrap()
            .is_some()
    );
    assert!(matches!(
        quick(&master.url())
            .wait_for_replicas(2, Duration::from_millis(100))
            .build(),
        Err(Error::NotReplicated {
            acknowledged: 1,
            wanted: 2,
            ..
        })
    ));
}

/// The names of the connections `CLIENT LIST` shows, with their kind (`normal`, `pubsub`).
fn connection_names(admin: &mut redis::Connection) -> Vec<(String, bool)> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(admin).unwrap();
    list.lines()
        .filter_map(|line| {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|f| f.strip_prefix(&format!("{name}=")).map(str::to_string))
            };
            let name = field("name")?;
            let pubsub = field("sub").is_some_and(|n| n != "0");
            Some((name, pubsub))
        })
        .collect()
}

#[test]
fn every_connection_carries_the_name_and_the_client_id() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let client = Client::builder(&server.url())
        .name("api@host-7")
        .build()
        .unwrap();
    let expected = format!("api@host-7:{}", client.id());
    // A command connection, and the subscriber's (a waiter makes it subscribe).
    let holder = client.lock("named").lock().unwrap();
    let waiter = {
        let lock = client.lock("named");
        std::thread::spawn(move || {
            lock.try_lock(Duration::from_secs(10), None)
                .map(|g| g.is_some())
        })
    };
    assert!(
        eventually(Duration::from_secs(5), || {
            let names = connection_names(&mut admin);
            names.iter().any(|(n, pubsub)| *n == expected && !pubsub)
                && names.iter().any(|(n, pubsub)| *n == expected && *pubsub)
        }),
        "no command and pub/sub connection named {expected}: {:?}",
        connection_names(&mut admin)
    );
    drop(holder);
    assert!(waiter.join().unwrap().unwrap());

    // Without a name: `redlatch:<client id>`.
    let unnamed = Client::open(&server.url()).unwrap();
    let _held = unnamed.lock("unnamed").lock().unwrap();
    let expected = format!("redlatch:{}", unnamed.id());
    assert!(
        connection_names(&mut admin)
            .iter()
            .any(|(n, _)| *n == expected),
        "{:?}",
        connection_names(&mut admin)
    );
}

#[test]
fn a_name_client_setname_would_refuse_is_refused_at_build() {
    for name in ["", "api host", "api\nhost", "naïve", &"x".repeat(65)] {
        let text = invalid_text(Client::builder("redis://127.0.0.1:1/").name(name).build());
        assert!(text.contains("client name"), "{name:?}: {text}");
    }
}

#[test]
fn an_acl_without_client_setname_keeps_its_connections_unnamed_and_works() {
    let server = RedisServer::start();
    let url = server.acl_user(
        "noclient",
        &[
            "~redlatch:*",
            "&redlatch:*",
            "+@all",
            "-@dangerous",
            "-client",
        ],
    );
    let client = Client::builder(&url).name("api@host-7").build().unwrap();
    let guard = client.lock("acl").try_lock(Duration::ZERO, None).unwrap();
    assert!(guard.is_some());
}

#[test]
fn the_redis_crate_is_reexported_so_versions_match() {
    // A user who names redis types through redlatch gets the very type inside Error::Redis.
    let port = free_port();
    match quick(&format!("redis://127.0.0.1:{port}/")).build() {
        Err(Error::Redis(e)) => {
            let e: redlatch::redis::RedisError = e;
            assert!(e.is_connection_refusal());
            assert_eq!(e.kind(), redlatch::redis::ErrorKind::Io);
        }
        other => panic!("expected Error::Redis, got {other:?}"),
    }
}

#[test]
fn inspect_names_each_holder_and_waiter_client_where_the_acl_allows() {
    let server = RedisServer::start();
    let holder = Client::builder(&server.url())
        .name("billing@host-7")
        .build()
        .unwrap();
    let waiter = Client::builder(&server.url())
        .name("api@host-8")
        .build()
        .unwrap();
    let name = support::unique("traced");
    let _guard = holder.lock(&name).lock().unwrap();
    let lock = waiter.lock(&name);
    let waiting = std::thread::spawn(move || {
        lock.try_lock(Duration::from_secs(10), Some(Duration::from_secs(7)))
            .map(|g| g.is_some())
    });
    support::await_waiting(&mut server.admin(), &name);

    let report = holder.inspect(redlatch::ObjectKind::Lock, &name).unwrap();
    let h = &report.holders[0];
    assert_eq!(h.owner, holder.current_thread_owner_id());
    assert_eq!(h.client_name.as_deref(), Some("billing@host-7"));
    assert!(
        h.client_addr
            .as_deref()
            .is_some_and(|a| a.starts_with("127.0.0.1:")),
        "{h:?}"
    );
    assert!(!h.writer, "a plain lock has no writer: {h:?}");
    let w = &report.queue[0];
    assert!(w.owner.starts_with(waiter.id()), "{w:?}");
    assert_eq!(w.client_name.as_deref(), Some("api@host-8"));
    assert_eq!(w.handover_lease, Some(Duration::from_secs(7)));
    assert!(
        w.valid_for
            .is_some_and(|v| v > Duration::ZERO && v < Duration::from_secs(60)),
        "{w:?}"
    );
    assert!(
        w.terms.starts_with("valid for ") && w.terms.ends_with("hand-over lease 7 s"),
        "{w:?}"
    );
    let connected = holder.connected_clients().unwrap();
    assert!(
        connected
            .iter()
            .any(|c| c.id == waiter.id() && c.name == "api@host-8")
    );

    // A user without CLIENT LIST (`@dangerous`) still gets its report, without names.
    let url = server.acl_user(
        "plain",
        &["~redlatch:*", "&redlatch:*", "+@all", "-@dangerous"],
    );
    let limited = Client::open(&url).unwrap();
    let report = limited.inspect(redlatch::ObjectKind::Lock, &name).unwrap();
    assert_eq!(report.holders[0].owner, holder.current_thread_owner_id());
    assert_eq!(report.holders[0].client_name, None);
    assert!(limited.connected_clients().unwrap().is_empty());
    drop(_guard);
    assert!(waiting.join().unwrap().unwrap());
}

#[test]
fn a_plain_server_given_as_a_sentinel_is_said_to_be_none() {
    let plain = RedisServer::start();
    let (_, text) = redis_error_text(
        Client::sentinel_builder(&[&plain.url()], "mymaster")
            .connect_timeout(Duration::from_secs(1))
            .build(),
    );
    assert!(
        text.contains(&format!("127.0.0.1:{} is not a Redis Sentinel", plain.port)),
        "{text}"
    );
}
