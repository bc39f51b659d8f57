//! A server reached over a unix socket (`redis+unix:///path`): the subscriber drives that
//! socket itself, as it does TCP and TLS ones, heartbeat included.
#![cfg(unix)]

mod support;

use std::path::PathBuf;
use std::time::Duration;

use redlatch::Client;
use support::{RedisServer, unique};

const TIMEOUT: Duration = Duration::from_secs(1);

/// A redis-server that listens on a unix socket (only its owner may connect) besides its
/// plain port, which the test's admin connection uses; the socket is removed on drop.
struct UnixServer {
    server: RedisServer,
    path: PathBuf,
}

impl UnixServer {
    fn start() -> UnixServer {
        // Short: a socket's path must fit in about 100 bytes.
        let path = std::env::temp_dir().join(format!("{}.sock", unique("rl")));
        let server = RedisServer::start_with(&[
            "--unixsocket",
            &path.to_string_lossy(),
            "--unixsocketperm",
            "700",
        ]);
        UnixServer { server, path }
    }

    fn client(&self) -> Client {
        Client::builder(&format!("redis+unix://{}", self.path.display()))
            .connect_timeout(TIMEOUT)
            .response_timeout(TIMEOUT)
            .build()
            .unwrap()
    }
}

impl Drop for UnixServer {
    fn drop(&mut self) {
        self.server.kill();
        let _ = std::fs::remove_file(&self.path);
    }
}

#[test]
fn a_release_wakes_a_waiter_over_a_unix_socket_without_polling() {
    let server = UnixServer::start();
    let mut admin = server.server.admin();
    let (holder, waiter) = (server.client(), server.client());
    support::release_wakes_a_waiter_without_polling(&mut admin, &holder, &waiter, &unique("unix"));
}

/// The heartbeat works over a unix socket: see
/// [`support::heartbeat_notices_a_stopped_server`].
#[test]
fn a_stopped_server_is_noticed_by_the_heartbeat_over_a_unix_socket() {
    let server = UnixServer::start();
    let mut admin = server.server.admin();
    let (holder, waiter) = (server.client(), server.client());
    support::heartbeat_notices_a_stopped_server(&mut admin, server.server.pid(), &holder, &waiter);
}
