//! A peer that accepts the connection and then does not answer as Redis does (a reply that
//! trickles in a byte at a time, silence, an HTTP server, a hang-up) costs a call at most its
//! timeouts, and the call fails with `Error::Redis`: the response timeout bounds the whole
//! reply, not each read of it, and the connect timeout bounds the handshake.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use redlatch::{Client, ClientBuilder, Error};
use support::fake::{FakeServer, Misbehaviour};

const CONNECT: Duration = Duration::from_secs(1);
const RESPONSE: Duration = Duration::from_secs(1);
/// Scheduling on a loaded 2-core VM, on top of the timeouts.
const SLACK: Duration = Duration::from_millis(1500);

/// Runs `f` on a thread of its own; fails the test if it does not return within `limit`,
/// so that a hang is a failure rather than a stuck test binary. Also returns how long it took.
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let started = Instant::now();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(value) => (value, started.elapsed()),
        Err(_) => panic!("{what}: no answer within {limit:?}"),
    }
}

fn timeouts(builder: ClientBuilder) -> ClientBuilder {
    builder.connect_timeout(CONNECT).response_timeout(RESPONSE)
}

fn expect_redis_error<T: std::fmt::Debug>(result: redlatch::Result<T>, what: &str) {
    match result {
        Err(Error::Redis(_)) => {}
        other => panic!("{what}: expected Error::Redis, got {other:?}"),
    }
}

#[test]
fn build_fails_within_its_timeouts_against_peers_that_are_not_redis() {
    for how in [
        Misbehaviour::Trickle { healthy: 0 },
        Misbehaviour::Silent,
        Misbehaviour::Http,
        Misbehaviour::HangUp,
    ] {
        let fake = FakeServer::start(how);
        let url = fake.url();
        let what = format!("build() against {how:?}");
        let (result, took) = within(CONNECT + RESPONSE + SLACK, &what, move || {
            timeouts(Client::builder(&url)).build()
        });
        expect_redis_error(result, &what);
        println!("{what}: failed after {took:?}");
    }
}

#[test]
fn the_handshake_is_bounded_by_the_connect_timeout() {
    // With a password in the URL, the connection's first exchange is AUTH: a reply to it that
    // trickles must not hold the connection's making past its timeout.
    for how in [Misbehaviour::Trickle { healthy: 0 }, Misbehaviour::Silent] {
        let fake = FakeServer::start(how);
        let url = format!("redis://:secret@127.0.0.1:{}/3", fake.port);
        let what = format!("AUTH and SELECT against {how:?}");
        let (result, took) = within(CONNECT + SLACK, &what, move || {
            // A long response timeout: only the connect timeout may end the handshake.
            Client::builder(&url)
                .connect_timeout(CONNECT)
                .response_timeout(Duration::from_secs(30))
                .build()
        });
        expect_redis_error(result, &what);
        assert!(
            took >= CONNECT - Duration::from_millis(100),
            "{what}: {took:?}"
        );
    }
}

/// Replies whose prefix claims what never comes, or that are no RESP at all.
const NOT_REDIS: [&[u8]; 6] = [
    b"$-5\r\n",
    b"$2147483647\r\nabc",
    b"*2147483648\r\n:1\r\n",
    b"$99999999999999999999999\r\n",
    // Nesting deeper than any reply of ours.
    b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n",
    b"\x9f\x00\xffG\x13\x80\r\n\x01\x02",
];

#[test]
fn build_fails_within_its_timeouts_against_replies_that_are_not_redis() {
    // Nothing a prefix claims is allocated up front, and whatever comes, build() ends with
    // Error::Redis within its timeouts, never Ok and never a hang.
    for reply in NOT_REDIS {
        let fake = FakeServer::start(Misbehaviour::Answer(reply));
        let url = fake.url();
        let what = format!("build() against {:?}", String::from_utf8_lossy(reply));
        let (result, took) = within(CONNECT + RESPONSE + SLACK, &what, move || {
            timeouts(Client::builder(&url)).build()
        });
        expect_redis_error(result, &what);
        println!("{what}: failed after {took:?}");
    }
}

#[test]
fn a_reply_that_trickles_fails_the_call_after_one_response_timeout() {
    // The server answers `build()`'s CLIENT SETNAME and HELLO, then trickles every later
    // reply.
    let fake = FakeServer::start(Misbehaviour::Trickle { healthy: 2 });
    let client = timeouts(Client::builder(&fake.url()).pool_size(1))
        .build()
        .expect("the first reply is whole");
    let lock = client.lock("trickled");
    let (result, took) = within(
        RESPONSE + SLACK,
        "try_lock on a trickling server",
        move || {
            lock.try_lock(Duration::ZERO, Some(Duration::from_secs(10)))
                .map(|guard| guard.is_some())
        },
    );
    expect_redis_error(result, "try_lock on a trickling server");
    assert!(took >= RESPONSE - Duration::from_millis(100), "{took:?}");
}

#[test]
fn sentinel_queries_are_bounded_by_the_timeouts_too() {
    for how in [
        Misbehaviour::Trickle { healthy: 0 },
        Misbehaviour::Silent,
        Misbehaviour::Http,
        Misbehaviour::HangUp,
    ] {
        let fake = FakeServer::start(how);
        let url = fake.url();
        let what = format!("a Sentinel client whose sentinel is {how:?}");
        let (result, took) = within(CONNECT + RESPONSE + SLACK, &what, move || {
            timeouts(Client::sentinel_builder(&[&url], "mymaster")).build()
        });
        expect_redis_error(result, &what);
        println!("{what}: failed after {took:?}");
    }
}

#[test]
fn a_server_older_than_6_2_is_refused_at_build_naming_its_version() {
    for (version, said) in [(Some("6.0.9"), "6.0.9"), (None, "older than 6.0")] {
        let server = FakeServer::start(Misbehaviour::Version(version));
        match Client::open(&server.url()) {
            Err(Error::UnsupportedServer { version }) => {
                assert_eq!(version, said);
                let text = Error::UnsupportedServer { version }.to_string();
                assert!(text.contains(said) && text.contains("6.2"), "{text}");
            }
            other => panic!("expected UnsupportedServer, got {other:?}"),
        }
    }
    // A new enough one passes the check (and then answers nothing else sensibly).
    let server = FakeServer::start(Misbehaviour::Version(Some("7.2.4")));
    assert!(Client::open(&server.url()).is_ok());
}
