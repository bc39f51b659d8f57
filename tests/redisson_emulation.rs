//! The emulated Java client (`support::jvm`, which the fast interop tests run against) checked
//! against the real Redisson (`support::java`): the same steps, taken by each on names of
//! their own on one server, must leave the same keys (types, fields, values and leases, with
//! names, owners and permit ids written as placeholders) and publish the same messages.
//!
//! Where the two differ, the real Redisson is right: the emulation is mended, not this test.
//! What Redisson sends beside its scripts (its unlock latch's `DEL`, keep-alives) is not
//! compared: only the state the steps leave and what they publish. `SHOW_TRACE=1` prints what
//! Redisson's steps left, kind by kind.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::java::{JavaService, Monitor, NO_LEASE};
use support::jvm::Jvm;
use support::unique;

/// One step both clients take: the emulation's way and Redisson's.
struct Step {
    what: &'static str,
    java: Box<dyn Fn(&JavaService, &str) -> String>,
    emulated: Box<dyn Fn(&Jvm, &str) -> String>,
}

fn step(
    what: &'static str,
    java: impl Fn(&JavaService, &str) -> String + 'static,
    emulated: impl Fn(&Jvm, &str) -> String + 'static,
) -> Step {
    Step {
        what,
        java: Box::new(java),
        emulated: Box::new(emulated),
    }
}

const NOW: Duration = Duration::ZERO;

/// Java's `tryLock(0, lease)` of `kind` on thread `t`, as text.
fn java_try(kind: &'static str, t: u64, lease: i64) -> impl Fn(&JavaService, &str) -> String {
    move |j, n| j.try_lock(kind, n, t, NOW, lease).to_string()
}

fn java_unlock(kind: &'static str, t: u64) -> impl Fn(&JavaService, &str) -> String {
    move |j, n| match j.unlock(kind, n, t) {
        Ok(_) => "ok".to_string(),
        Err(e) => e.split(' ').next().unwrap_or("").to_string(),
    }
}

/// The emulation's unlock replies `Some(_)` when it released and `None` for a lock it does
/// not hold (Java's `IllegalMonitorStateException`).
fn emulated_unlock(reply: Option<i64>) -> String {
    match reply {
        Some(_) => "ok".to_string(),
        None => "IllegalMonitorStateException".to_string(),
    }
}

fn steps() -> Vec<(&'static str, Vec<Step>)> {
    vec![
        (
            "lock",
            vec![
                step("lock, watchdog", java_try("lock", 1, NO_LEASE), |e, n| {
                    e.try_lock(n, 1, NOW, NO_LEASE).to_string()
                }),
                step("re-enter", java_try("lock", 1, NO_LEASE), |e, n| {
                    e.try_lock(n, 1, NOW, NO_LEASE).to_string()
                }),
                step("another thread", java_try("lock", 2, NO_LEASE), |e, n| {
                    e.try_lock(n, 2, NOW, NO_LEASE).to_string()
                }),
                step("unlock by a non-owner", java_unlock("lock", 2), |e, n| {
                    emulated_unlock(e.unlock(n, 2))
                }),
                step("unlock once", java_unlock("lock", 1), |e, n| {
                    emulated_unlock(e.unlock(n, 1))
                }),
                step("unlock last", java_unlock("lock", 1), |e, n| {
                    emulated_unlock(e.unlock(n, 1))
                }),
                step("lock, 20 s lease", java_try("lock", 1, 20_000), |e, n| {
                    e.try_lock(n, 1, NOW, 20_000).to_string()
                }),
                step(
                    "force-unlock",
                    |j, n| j.force_unlock("lock", n).to_string(),
                    |e, n| e.force_unlock(n).to_string(),
                ),
            ],
        ),
        (
            "fenced",
            vec![
                step(
                    "fenced lock",
                    |j, n| format!("{:?}", j.fenced_try_lock(n, 1, NOW, NO_LEASE)),
                    |e, n| format!("{:?}", e.fenced_try_lock(n, 1, NOW, NO_LEASE)),
                ),
                step("unlock", java_unlock("fenced", 1), |e, n| {
                    emulated_unlock(e.unlock(n, 1))
                }),
                step(
                    "fenced lock again",
                    |j, n| format!("{:?}", j.fenced_try_lock(n, 2, NOW, 10_000)),
                    |e, n| format!("{:?}", e.fenced_try_lock(n, 2, NOW, 10_000)),
                ),
            ],
        ),
        (
            "fair",
            vec![
                step("fair lock", java_try("fair", 1, NO_LEASE), |e, n| {
                    e.fair_try_lock(n, 1, NOW, NO_LEASE).to_string()
                }),
                step("re-enter", java_try("fair", 1, NO_LEASE), |e, n| {
                    e.fair_try_lock(n, 1, NOW, NO_LEASE).to_string()
                }),
                step("unlock once", java_unlock("fair", 1), |e, n| {
                    emulated_unlock(e.fair_unlock(n, 1))
                }),
                step("unlock last", java_unlock("fair", 1), |e, n| {
                    emulated_unlock(e.fair_unlock(n, 1))
                }),
            ],
        ),
        (
            "spin",
            vec![
                step("spin lock", java_try("spin", 1, 15_000), |e, n| {
                    e.spin_try_lock(n, 1, NOW, 15_000).to_string()
                }),
                step("unlock", java_unlock("spin", 1), |e, n| {
                    emulated_unlock(e.spin_unlock(n, 1))
                }),
            ],
        ),
        (
            "read-write",
            vec![
                step("read", java_try("read", 1, NO_LEASE), |e, n| {
                    e.read_try_lock(n, 1, NOW, NO_LEASE).to_string()
                }),
                step(
                    "read, another thread",
                    java_try("read", 2, NO_LEASE),
                    |e, n| e.read_try_lock(n, 2, NOW, NO_LEASE).to_string(),
                ),
                step("read again, 10 s", java_try("read", 1, 10_000), |e, n| {
                    e.read_try_lock(n, 1, NOW, 10_000).to_string()
                }),
                step(
                    "write beside readers",
                    java_try("write", 3, NO_LEASE),
                    |e, n| e.write_try_lock(n, 3, NOW, NO_LEASE).to_string(),
                ),
                step("read unlock", java_unlock("read", 1), |e, n| {
                    emulated_unlock(e.read_unlock(n, 1))
                }),
                step("read unlock", java_unlock("read", 2), |e, n| {
                    emulated_unlock(e.read_unlock(n, 2))
                }),
                step("read unlock, last", java_unlock("read", 1), |e, n| {
                    emulated_unlock(e.read_unlock(n, 1))
                }),
                step("write", java_try("write", 3, NO_LEASE), |e, n| {
                    e.write_try_lock(n, 3, NOW, NO_LEASE).to_string()
                }),
                step(
                    "write re-entered",
                    java_try("write", 3, NO_LEASE),
                    |e, n| e.write_try_lock(n, 3, NOW, NO_LEASE).to_string(),
                ),
                step(
                    "read by the writer",
                    java_try("read", 3, NO_LEASE),
                    |e, n| e.read_try_lock(n, 3, NOW, NO_LEASE).to_string(),
                ),
                step("read by another", java_try("read", 4, NO_LEASE), |e, n| {
                    e.read_try_lock(n, 4, NOW, NO_LEASE).to_string()
                }),
                step("write unlock", java_unlock("write", 3), |e, n| {
                    emulated_unlock(e.write_unlock(n, 3))
                }),
                step("write unlock, last", java_unlock("write", 3), |e, n| {
                    emulated_unlock(e.write_unlock(n, 3))
                }),
                step("read unlock, last", java_unlock("read", 3), |e, n| {
                    emulated_unlock(e.read_unlock(n, 3))
                }),
            ],
        ),
        (
            "permit-expirable semaphore",
            vec![
                step(
                    "trySetPermits 2",
                    |j, n| j.permits(1, "trysetpermits", n, &[&2]).unwrap(),
                    |e, n| e.permit_try_set_permits(n, 2).to_string(),
                ),
                step(
                    "acquire, 10 s lease",
                    |j, n| permit_text(&j.permits(1, "tryacquire", n, &[&0, &10_000]).unwrap()),
                    |e, n| {
                        permit_text(
                            &e.permit_try_acquire(n, NOW, 10_000)
                                .map_or("null".to_string(), |id| {
                                    id.iter().map(|b| format!("{b:02x}")).collect()
                                }),
                        )
                    },
                ),
                step(
                    "acquire, no lease",
                    |j, n| permit_text(&j.permits(1, "tryacquire", n, &[&0, &NO_LEASE]).unwrap()),
                    |e, n| {
                        permit_text(
                            &e.permit_try_acquire(n, NOW, NO_LEASE)
                                .map_or("null".to_string(), |id| {
                                    id.iter().map(|b| format!("{b:02x}")).collect()
                                }),
                        )
                    },
                ),
                step(
                    "acquire, none left",
                    |j, n| permit_text(&j.permits(1, "tryacquire", n, &[&0, &NO_LEASE]).unwrap()),
                    |e, n| {
                        permit_text(
                            &e.permit_try_acquire(n, NOW, NO_LEASE)
                                .map_or("null".to_string(), |id| {
                                    id.iter().map(|b| format!("{b:02x}")).collect()
                                }),
                        )
                    },
                ),
                step(
                    "addPermits 1",
                    |j, n| j.permits(1, "addpermits", n, &[&1]).unwrap(),
                    |e, n| {
                        e.permit_add_permits(n, 1);
                        String::new()
                    },
                ),
                step(
                    "available",
                    |j, n| j.permits(1, "available", n, &[]).unwrap(),
                    |e, n| e.permit_available(n).to_string(),
                ),
            ],
        ),
        (
            "count-down latch",
            vec![
                step(
                    "trySetCount 2",
                    |j, n| j.latch(1, "trysetcount", n, &[&2]).unwrap(),
                    |e, n| e.latch_try_set_count(n, 2).to_string(),
                ),
                step(
                    "trySetCount again",
                    |j, n| j.latch(1, "trysetcount", n, &[&5]).unwrap(),
                    |e, n| e.latch_try_set_count(n, 5).to_string(),
                ),
                step(
                    "countDown",
                    |j, n| j.latch(1, "countdown", n, &[]).unwrap(),
                    |e, n| {
                        e.latch_count_down(n);
                        String::new()
                    },
                ),
                step(
                    "countDown to 0",
                    |j, n| j.latch(1, "countdown", n, &[]).unwrap(),
                    |e, n| {
                        e.latch_count_down(n);
                        String::new()
                    },
                ),
            ],
        ),
    ]
}

/// A permit id's shape, not its value.
fn permit_text(id: &str) -> String {
    match id {
        "null" => "null".to_string(),
        id if id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit()) => "<permit>".into(),
        other => format!("<unexpected permit id {other:?}>"),
    }
}

/// What the steps leave in Redis, with every name, owner and permit id as a placeholder.
struct Normalizer {
    name: String,
    /// (text, placeholder), the longest text first.
    owners: Vec<(String, String)>,
}

impl Normalizer {
    fn text(&self, raw: &[u8]) -> String {
        let Ok(mut text) = String::from_utf8(raw.to_vec()) else {
            return if raw.len() == 16 {
                "<16-byte permit id>".to_string()
            } else {
                format!("<{} bytes>", raw.len())
            };
        };
        for (owner, placeholder) in &self.owners {
            text = text.replace(owner.as_str(), placeholder);
        }
        text.replace(self.name.as_str(), "N")
    }
}

/// The keys whose names contain the object's name, each with its type, its contents and its
/// lease in whole seconds (rounded up; `none` without one).
fn snapshot(admin: &mut redis::Connection, norm: &Normalizer) -> BTreeMap<String, String> {
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg(format!("*{}*", norm.name))
        .query(admin)
        .unwrap();
    let mut out = BTreeMap::new();
    for key in keys {
        let name = norm.text(&key);
        // Redisson's unlock latch (a request id) is its own idempotence key, gone within
        // seconds, and its DEL goes out after the unlock returns: not part of the state.
        if name.starts_with("redisson_unlock_latch") {
            continue;
        }
        let kind: String = redis::cmd("TYPE").arg(&key).query(admin).unwrap();
        let contents = match kind.as_str() {
            "hash" => {
                let map: BTreeMap<Vec<u8>, Vec<u8>> =
                    redis::cmd("HGETALL").arg(&key).query(admin).unwrap();
                let map: BTreeMap<String, String> = map
                    .iter()
                    .map(|(k, v)| (norm.text(k), norm.text(v)))
                    .collect();
                format!("{map:?}")
            }
            "string" => {
                let v: Vec<u8> = redis::cmd("GET").arg(&key).query(admin).unwrap();
                norm.text(&v)
            }
            "zset" => {
                let members: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(admin)
                    .unwrap();
                let members: Vec<String> = members
                    .iter()
                    .map(|(m, score)| {
                        // Epoch-ms deadlines differ run to run; the "no lease" score does not.
                        let score = if *score == support::jvm::NO_LEASE_SCORE as f64 {
                            "no-lease".to_string()
                        } else {
                            "a time".to_string()
                        };
                        format!("{}={score}", norm.text(m))
                    })
                    .collect();
                format!("{members:?}")
            }
            "list" => {
                let items: Vec<Vec<u8>> = redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query(admin)
                    .unwrap();
                format!(
                    "{:?}",
                    items.iter().map(|i| norm.text(i)).collect::<Vec<_>>()
                )
            }
            other => format!("<{other}>"),
        };
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query(admin).unwrap();
        let lease = if pttl < 0 {
            "none".to_string()
        } else {
            format!("{}s", (pttl + 999) / 1000)
        };
        out.insert(name, format!("{kind} {contents} lease {lease}"));
    }
    out
}

/// What scripts published while `monitor` watched, normalized.
fn published(monitor: &Monitor, norm: &Normalizer) -> Vec<String> {
    monitor
        .script_commands()
        .iter()
        .filter(|c| {
            let c = c.to_uppercase();
            c.starts_with("\"PUBLISH\"") || c.starts_with("\"SPUBLISH\"")
        })
        .map(|c| norm.text(c.as_bytes()))
        .collect()
}

/// What each step of a side replied, left and published.
type Trace = Vec<(String, BTreeMap<String, String>, Vec<String>)>;

#[test]
fn the_emulation_leaves_and_publishes_what_redisson_does() {
    let server = support::RedisServer::start();
    let java = JavaService::single(&server.url());
    let emulated = Jvm::new(&server.url());
    let mut admin = server.admin();
    let monitor = Monitor::start(server.port);
    let mut differences = Vec::new();
    for (kind, steps) in steps() {
        let java_name = unique("real");
        let emulated_name = unique("emul");
        let java_norm = Normalizer {
            name: java_name.clone(),
            owners: owners(
                &(1..=4).map(|t| java.owner(t)).collect::<Vec<_>>(),
                &java.id,
            ),
        };
        let emulated_norm = Normalizer {
            name: emulated_name.clone(),
            owners: owners(
                &(1..=4).map(|t| emulated.owner(t)).collect::<Vec<_>>(),
                emulated.uuid(),
            ),
        };
        let mut traces: [Trace; 2] = Default::default();
        for step in &steps {
            monitor.clear();
            let reply = (step.java)(&java, &java_name);
            std::thread::sleep(Duration::from_millis(100));
            traces[0].push((
                reply,
                snapshot(&mut admin, &java_norm),
                published(&monitor, &java_norm),
            ));
            monitor.clear();
            let reply = (step.emulated)(&emulated, &emulated_name);
            std::thread::sleep(Duration::from_millis(100));
            traces[1].push((
                reply,
                snapshot(&mut admin, &emulated_norm),
                published(&monitor, &emulated_norm),
            ));
        }
        if std::env::var_os("SHOW_TRACE").is_some() {
            eprintln!("{kind}: {:#?}", traces[0]);
        }
        for (i, step) in steps.iter().enumerate() {
            let (real, emul) = (&traces[0][i], &traces[1][i]);
            if real != emul {
                differences.push(format!(
                    "{kind}, step {} ({}):\n  Redisson {} replied {:?}\n    left {:#?}\n    published {:?}\n  emulation replied {:?}\n    left {:#?}\n    published {:?}",
                    i + 1,
                    step.what,
                    java.redisson_version,
                    real.0,
                    real.1,
                    real.2,
                    emul.0,
                    emul.1,
                    emul.2
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "the emulation differs from the real Redisson:\n{}",
        differences.join("\n")
    );
}

/// Placeholders for each thread's owner field (`O1`...), a writer's (`O1:write`, which the
/// owner's placeholder covers) and the client id alone (`U`).
fn owners(fields: &[String], id: &str) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = fields
        .iter()
        .enumerate()
        .map(|(i, f)| (f.clone(), format!("O{}", i + 1)))
        .collect();
    all.push((id.to_string(), "U".to_string()));
    all
}
