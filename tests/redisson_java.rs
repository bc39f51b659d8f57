//! redlatch in `Layout::Redisson` beside the real Redisson (`support::java`).

mod support;

use std::time::Duration;

use redlatch::{Client, Layout};
use support::java::{JavaService, NO_LEASE};
use support::unique;

#[test]
fn smoke() {
    let server = support::RedisServer::start();
    let java = JavaService::single(&server.url());
    eprintln!(
        "Redisson {} on Java {}",
        java.redisson_version, java.java_version
    );
    let ours = Client::builder(&server.url())
        .layout(Layout::Redisson)
        .build()
        .unwrap();
    let name = unique("smoke");
    assert!(java.try_lock("lock", &name, 1, Duration::ZERO, NO_LEASE));
    let mut admin = server.admin();
    let fields: Vec<String> = redis::cmd("HKEYS").arg(&name).query(&mut admin).unwrap();
    assert_eq!(fields, vec![java.owner(1)]);
    let lock = ours.lock(&name);
    assert!(
        lock.try_lock(Duration::from_millis(100), None)
            .unwrap()
            .is_none()
    );
    java.unlock("lock", &name, 1).unwrap();
    let guard = lock.try_lock(Duration::ZERO, None).unwrap().unwrap();
    assert!(!java.try_lock("lock", &name, 2, Duration::from_millis(100), NO_LEASE));
    drop(guard);
}
