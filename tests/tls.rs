//! TLS (`rediss://`, the `tls` feature): certificates made for the run, a redis-server with a
//! TLS port. A client trusts the CA it is given; a wrong CA or a missing client certificate
//! fails `build()` clearly and within its timeouts.
#![cfg(feature = "tls")]

mod support;

use std::time::{Duration, Instant};

use redlatch::{Client, ClientTlsConfig, Error, TlsCertificates};
use support::tls::{Certificates, TlsServer, trusting};
use support::unique;

const TIMEOUT: Duration = Duration::from_secs(1);

fn client(server: &TlsServer, with_client_cert: bool) -> redlatch::Result<Client> {
    let certs = &server.certs;
    Client::builder(&server.url())
        .tls_certificates(trusting(&certs.ca, with_client_cert.then_some(certs)))
        .connect_timeout(TIMEOUT)
        .response_timeout(TIMEOUT)
        .build()
}

/// `build()` fails with `Error::Redis`, within the timeouts (and some scheduling slack); its
/// text.
fn refused(build: impl FnOnce() -> redlatch::Result<Client>, what: &str) -> String {
    let started = Instant::now();
    let text = match build() {
        Err(e @ Error::Redis(_)) => e.to_string(),
        other => panic!("{what}: expected Error::Redis, got {other:?}"),
    };
    println!("{what}: {text}");
    assert!(
        started.elapsed() < TIMEOUT * 2 + Duration::from_millis(1500),
        "{what}: took {:?}",
        started.elapsed()
    );
    text
}

#[test]
fn two_tls_clients_exclude_each_other_and_a_release_wakes_the_waiter_without_polling() {
    let server = TlsServer::start(false);
    let mut admin = server.server.admin(); // over the plain port
    let (holder, waiter) = (
        client(&server, false).unwrap(),
        client(&server, false).unwrap(),
    );
    let name = unique("tls");
    let held = holder.lock(&name).lock().unwrap();
    assert!(
        waiter
            .lock(&name)
            .try_lock(Duration::ZERO, None)
            .unwrap()
            .is_none(),
        "two TLS clients held one lock"
    );
    drop(held);
    // The subscriber drives its own TLS socket, woken in process.
    support::release_wakes_a_waiter_without_polling(&mut admin, &holder, &waiter, &name);
}

/// The subscriber's heartbeat works over TLS: see
/// [`support::heartbeat_notices_a_stopped_server`].
#[test]
fn a_stopped_tls_server_is_noticed_by_the_heartbeat_while_a_thread_waits() {
    let server = TlsServer::start(false);
    let mut admin = server.server.admin(); // over the plain port
    let (holder, waiter) = (
        client(&server, false).unwrap(),
        client(&server, false).unwrap(),
    );
    support::heartbeat_notices_a_stopped_server(&mut admin, server.server.pid(), &holder, &waiter);
}

#[test]
fn a_ca_that_did_not_sign_the_server_fails_build_clearly() {
    let server = TlsServer::start(false);
    let url = server.url();
    let text = refused(
        || {
            Client::builder(&url)
                .tls_certificates(trusting(&Certificates::stranger_ca(), None))
                .connect_timeout(TIMEOUT)
                .response_timeout(TIMEOUT)
                .build()
        },
        "a stranger CA",
    );
    // Which server, and which step.
    let at = format!("127.0.0.1:{}: TLS handshake failed", server.tls_port);
    assert!(text.contains(&at), "{text}");
    // Without a CA of its own, a client trusts the webpki roots, which did not sign it either.
    refused(
        || {
            Client::builder(&url)
                .connect_timeout(TIMEOUT)
                .response_timeout(TIMEOUT)
                .build()
        },
        "the webpki roots",
    );
    // The plain port does not speak TLS, and the TLS port does not speak plain RESP.
    let plain_as_tls = format!("rediss://127.0.0.1:{}/", server.server.port);
    let tls_as_plain = format!("redis://127.0.0.1:{}/", server.tls_port);
    for url in [&plain_as_tls, &tls_as_plain] {
        let said = refused(
            || {
                Client::builder(url)
                    .tls_certificates(trusting(&server.certs.ca, None))
                    .connect_timeout(TIMEOUT)
                    .response_timeout(TIMEOUT)
                    .build()
            },
            url,
        );
        // Plain RESP to a TLS port: the server hangs up, and the error says what to try.
        if url == &tls_as_plain {
            assert!(said.contains("use rediss://"), "{said}");
        }
    }
}

#[test]
fn mutual_tls_needs_the_client_certificate() {
    let server = TlsServer::start(true);
    refused(|| client(&server, false), "no client certificate");
    let client = client(&server, true).unwrap();
    let guard = client.lock(&unique("mtls")).lock().unwrap();
    guard.unlock().unwrap();
}

#[test]
fn unreadable_certificates_are_invalid_arguments_before_any_io() {
    let garbage = b"not a certificate".to_vec();
    let cases = [
        TlsCertificates {
            root_cert: Some(garbage.clone()),
            client_tls: None,
        },
        TlsCertificates {
            root_cert: None,
            client_tls: Some(ClientTlsConfig {
                client_cert: garbage.clone(),
                client_key: garbage.clone(),
            }),
        },
    ];
    // A URL that asks to skip the certificate check is refused the same way.
    let port = support::free_port();
    match Client::open(&format!("rediss://127.0.0.1:{port}/#insecure")) {
        Err(Error::InvalidArgument(why)) => println!("{why}"),
        other => panic!("expected InvalidArgument for #insecure, got {other:?}"),
    }
    for certs in cases {
        // No server listens there: an InvalidArgument proves nothing was tried.
        let port = support::free_port();
        match Client::builder(&format!("rediss://127.0.0.1:{port}/"))
            .tls_certificates(certs)
            .build()
        {
            Err(Error::InvalidArgument(why)) => println!("{why}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }
}
