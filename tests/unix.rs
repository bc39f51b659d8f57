//! A server reached over a unix socket (`redis+unix:///path`): the subscriber drives that
//! socket itself, as it does TCP and TLS ones, heartbeat included.
#![cfg(unix)]

mod support;

use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use redlatch::Client;
use support::{RedisServer, command_calls, unique};

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
    let name = unique("unix");
    let held = holder.lock(&name).lock().unwrap();
    let lock = waiter.lock(&name);
    let waiting = thread::spawn(move || {
        let guard = lock.try_lock(Duration::from_secs(20), None).unwrap();
        (Instant::now(), guard.map(|g| g.fencing_token()))
    });
    support::await_waiting(&mut admin, &name);
    support::the_one_pubsub_client(&mut admin);
    let before = command_calls(&mut admin, "evalsha");
    thread::sleep(Duration::from_secs(1));
    let during = command_calls(&mut admin, "evalsha") - before;
    assert_eq!(
        during, 0,
        "the waiter sent {during} scripts while it waited"
    );
    let token = held.fencing_token();
    let released = Instant::now();
    held.unlock().unwrap();
    let (woken, got) = waiting.join().unwrap();
    assert!(
        got.is_some_and(|t| t > token),
        "the waiter did not get the lock"
    );
    let after = woken.duration_since(released);
    assert!(
        after < Duration::from_millis(500),
        "woken {after:?} after the release"
    );
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
