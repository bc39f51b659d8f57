//! The `redlatch` command-line tool, run as the built binary against real servers: one
//! redis-server and a Redis Cluster.
#![cfg(feature = "cli")]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redlatch::Client;
use support::topology::Cluster;
use support::{RedisServer, join_all, unique};

const BIN: &str = env!("CARGO_BIN_EXE_redlatch");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Stdout of a run that must succeed.
fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Starts `redlatch watch` and collects its lines on a thread.
fn spawn_watch(args: &[&str]) -> (Child, thread::JoinHandle<Vec<String>>) {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("REDIS_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let lines = thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .take(100)
            .collect()
    });
    (child, lines)
}

#[test]
fn list_inspect_force_unlock_and_watch_on_one_server() {
    let server = RedisServer::start();
    let url = server.url();
    // A short watchdog, so that renewal finds the force-unlock below soon.
    let holder = Client::builder(&url)
        .watchdog_timeout(Duration::from_millis(1500))
        .name("billing@host-7")
        .build()
        .unwrap();
    let waiter_client = Client::builder(&url).name("api@host-8").build().unwrap();
    let name = unique("cli-lock");
    let guard = holder.lock(&name).lock().unwrap();
    let inner = holder.lock(&name).lock().unwrap();
    let lock = waiter_client.lock(&name);
    let waiter = thread::spawn(move || {
        lock.try_lock(Duration::from_secs(20), None)
            .unwrap()
            .is_some()
    });
    support::await_waiting(&mut server.admin(), &name);
    let rw = unique("cli-rw");
    let read = holder.read_write_lock(&rw).read().unwrap();
    let sem = unique("cli-sem");
    holder.semaphore(&sem).set_permits(2).unwrap();
    let permits = holder.semaphore(&sem).acquire(1).unwrap();
    let latch = unique("cli-latch");
    holder.count_down_latch(&latch).try_set_count(3).unwrap();

    let listed = ok(&["--url", &url, "list"]);
    for (kind, object) in [
        ("lock", &name),
        ("rwlock", &rw),
        ("semaphore", &sem),
        ("latch", &latch),
    ] {
        assert!(
            listed.lines().any(|l| l.starts_with(kind)
                && l.ends_with(object.as_str())
                && l.contains("in use")),
            "{kind} {object} missing from:\n{listed}"
        );
    }
    let only = ok(&["--url", &url, "list", "cli-rw*"]);
    assert_eq!(only.lines().count(), 1, "{only}");
    let json = ok(&["--url", &url, "list", "cli-sem*", "--json"]);
    assert!(json.starts_with("[{\"kind\":\"semaphore\""), "{json}");

    let report = ok(&["--url", &url, "inspect", &name]);
    let holder_id = holder.id();
    assert!(report.contains(&format!("{holder_id}:")), "{report}");
    assert!(report.contains("count 2"), "{report}");
    assert!(report.contains("1 client(s) subscribed"), "{report}");
    assert!(
        report.contains(&format!("1. {}:", waiter_client.id())),
        "{report}"
    );
    // Who they are: the names the clients gave, and where they connect from; the waiter's
    // terms in words, not server-clock numbers.
    let holder_line = report.lines().find(|l| l.contains("count 2")).unwrap();
    assert!(
        holder_line.contains("client billing@host-7 at 127.0.0.1:")
            && !holder_line.contains("writer"),
        "{report}"
    );
    let waiter_line = report.lines().find(|l| l.contains("1. ")).unwrap();
    assert!(
        waiter_line.contains("valid for ")
            && waiter_line.contains("hand-over lease 30 s")
            && waiter_line.contains("client api@host-8 at 127.0.0.1:"),
        "{report}"
    );
    let json = ok(&["--url", &url, "inspect", &name, "--json"]);
    assert!(
        json.contains("\"client_name\":\"billing@host-7\"")
            && json.contains("\"writer\":false")
            && json.contains("\"handover_lease_ms\":30000"),
        "{json}"
    );
    let json = ok(&["--url", &url, "inspect", &name, "--json"]);
    assert!(
        json.contains("\"count\":2") && json.contains("\"subscribers\":1"),
        "{json}"
    );
    assert!(
        json.contains(&format!("\"fence\":{}", guard.fencing_token())),
        "{json}"
    );
    let report = ok(&["--url", &url, "inspect", &rw, "--kind", "rwlock"]);
    assert!(
        report.contains(":r  count 1") && report.contains("lease"),
        "{report}"
    );
    let report = ok(&["--url", &url, "inspect", &sem, "--kind", "semaphore"]);
    assert!(
        report.contains("total permits 2") && report.contains(":p"),
        "{report}"
    );
    let report = ok(&["--url", &url, "inspect", &latch, "--kind", "latch"]);
    assert!(report.contains("count 3"), "{report}");
    assert!(
        !run(&["--url", &url, "inspect", &name, "--kind", "mutex"])
            .status
            .success()
    );

    // watch: the release hands the lock to the queued waiter, and says so.
    let (mut watching, lines) = spawn_watch(&["--url", &url, "watch", &name, "--seconds", "3"]);
    thread::sleep(Duration::from_millis(500)); // subscribed
    drop(inner);
    guard.unlock().unwrap();
    assert!(waiter.join().unwrap());
    let lines = join_all(vec![lines], Duration::from_secs(10), "watch").remove(0);
    assert!(
        watching.wait().unwrap().success(),
        "watch failed: {lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("handed over with token")
            && l.contains(waiter_client.id())
            && l.contains("(api@host-8 at 127.0.0.1:")),
        "{lines:?}"
    );
    assert!(
        lines.iter().all(|l| l.starts_with("20") && l.contains('T')),
        "{lines:?}"
    );

    // force-unlock asks first; "n" leaves the lock alone, --yes does not ask.
    let victim = unique("cli-force");
    let held = holder.lock(&victim).lock().unwrap();
    let mut asked = Command::new(BIN)
        .args(["--url", &url, "force-unlock", &victim])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    asked.stdin.take().unwrap().write_all(b"n\n").unwrap();
    assert!(!asked.wait().unwrap().success());
    assert!(holder.lock(&victim).is_locked().unwrap());
    let said = ok(&["--url", &url, "force-unlock", &victim, "--yes"]);
    assert!(said.contains("force-unlocked"), "{said}");
    assert!(!holder.lock(&victim).is_locked().unwrap());
    let started = Instant::now();
    while !held.is_lost() && started.elapsed() < Duration::from_secs(5) {
        thread::sleep(Duration::from_millis(50));
    }
    assert!(matches!(
        held.unlock(),
        Err(redlatch::Error::LockLost { .. })
    ));
    drop((read, permits));

    // Bad input: a clear message and a failure, never a panic.
    let out = run(&["--url", "redis://127.0.0.1:1/", "list"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("redlatch: "));
    let out = run(&["--url", &url, "inspect", ""]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid argument"));
}

#[test]
fn list_inspect_and_watch_on_a_cluster() {
    let c = Cluster::start();
    let seeds = c.seed_urls().join(",");
    let client =
        Client::cluster_builder(&c.seed_urls().iter().map(String::as_str).collect::<Vec<_>>())
            .build()
            .unwrap();
    let names: Vec<String> = (0..12).map(|i| unique(&format!("cli-c{i}"))).collect();
    let guards: Vec<_> = names
        .iter()
        .map(|n| client.lock(n).lock().unwrap())
        .collect();
    let listed = ok(&["--cluster", "--url", &seeds, "list", "cli-c*"]);
    for name in &names {
        assert!(
            listed.contains(name.as_str()),
            "{name} missing (other masters?):\n{listed}"
        );
    }
    let report = ok(&["--cluster", "--url", &seeds, "inspect", &names[5]]);
    assert!(
        report.contains(client.id()) && report.contains("lease"),
        "{report}"
    );

    // A waiter on another client, and a watch, on the lock's shard.
    let other =
        Client::cluster_builder(&c.seed_urls().iter().map(String::as_str).collect::<Vec<_>>())
            .build()
            .unwrap();
    let lock = other.lock(&names[5]);
    let waiter = thread::spawn(move || {
        lock.try_lock(Duration::from_secs(20), None)
            .unwrap()
            .is_some()
    });
    let (mut watching, lines) = spawn_watch(&[
        "--cluster",
        "--url",
        &seeds,
        "watch",
        &names[5],
        "--seconds",
        "4",
    ]);
    thread::sleep(Duration::from_millis(800));
    let report = ok(&["--cluster", "--url", &seeds, "inspect", &names[5], "--json"]);
    assert!(
        report.contains("\"subscribers\":1") || report.contains("\"subscribers\":2"),
        "{report}"
    );
    drop(guards);
    assert!(waiter.join().unwrap());
    let lines = join_all(vec![lines], Duration::from_secs(10), "watch").remove(0);
    assert!(
        watching.wait().unwrap().success(),
        "watch failed: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("handed over with token") && l.contains(other.id())),
        "{lines:?}"
    );
}

#[test]
fn the_redisson_layout_shows_a_java_services_lock_and_its_fair_queue() {
    let server = RedisServer::start();
    let mut admin = server.admin();
    let url = server.url();
    let name = unique("orders");
    // A Java service's hold, as Redisson leaves it: hash <name>, <uuid>:<thread> -> count.
    let java = "5f1c2c9e-3b7e-4b4e-9d6a-2f0d3c1f9a10:87";
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(&name)
        .arg(java)
        .arg(2)
        .cmd("PEXPIRE")
        .arg(&name)
        .arg(30_000)
        .query(&mut admin)
        .unwrap();
    let report = ok(&["--url", &url, "--layout", "redisson", "inspect", &name]);
    assert!(report.contains(java), "{report}");
    assert!(report.contains("count 2"), "{report}");
    let listed = ok(&["--url", &url, "--layout", "redisson", "list", "orders*"]);
    assert!(listed.contains(&name), "{listed}");
    // A redlatch client in the Redisson layout, queued behind the Java holder on the fair
    // lock of the same name: its place shows, with its deadline.
    let client = Client::builder(&url)
        .layout(redlatch::Layout::Redisson)
        .build()
        .unwrap();
    let waiting = {
        let lock = client.fair_lock(&name);
        thread::spawn(move || {
            lock.try_lock(Duration::from_secs(3), None)
                .unwrap()
                .is_some()
        })
    };
    let queued = support::eventually(Duration::from_secs(5), || {
        ok(&["--url", &url, "--layout", "redisson", "inspect", &name]).contains("fair lock")
    });
    assert!(queued, "the fair waiter shows in the queue");
    let forced = ok(&[
        "--url",
        &url,
        "--layout",
        "redisson",
        "force-unlock",
        &name,
        "--yes",
    ]);
    assert!(!forced.is_empty());
    assert!(join_all(vec![waiting], Duration::from_secs(10), "fair waiter").remove(0));
    // A prefix has no place in this layout.
    let refused = run(&[
        "--url", &url, "--layout", "redisson", "--prefix", "x", "list",
    ]);
    assert!(!refused.status.success());
}

#[test]
fn force_unlock_frees_a_read_write_lock_in_both_layouts() {
    let server = RedisServer::start();
    let url = server.url();
    for layout in ["redlatch", "redisson"] {
        let holder = Client::builder(&url)
            .layout(match layout {
                "redisson" => redlatch::Layout::Redisson,
                _ => redlatch::Layout::Redlatch,
            })
            .build()
            .unwrap();
        let name = unique("cli-rw");
        let rw = holder.read_write_lock(&name);
        let write = rw.write().unwrap();
        let said = ok(&[
            "--url",
            &url,
            "--layout",
            layout,
            "force-unlock",
            &name,
            "--yes",
        ]);
        assert!(
            said.starts_with("rwlock") && said.contains("force-unlocked"),
            "{said}"
        );
        assert!(write.is_lost() || !rw.is_locked().unwrap());
        assert!(!rw.is_locked().unwrap());
        drop(write);
        // --kind rwlock says so; nothing held, nothing to free.
        let _read = rw.read().unwrap();
        let said = ok(&[
            "--url",
            &url,
            "--layout",
            layout,
            "force-unlock",
            &name,
            "--kind",
            "rwlock",
            "--yes",
        ]);
        assert!(said.starts_with("rwlock"), "{said}");
        assert!(!rw.is_locked().unwrap());
        let said = ok(&[
            "--url",
            &url,
            "--layout",
            layout,
            "force-unlock",
            &name,
            "--yes",
        ]);
        assert!(
            said.contains("was locked") && said.starts_with("no lock"),
            "{said}"
        );
        assert!(
            !run(&[
                "--url",
                &url,
                "force-unlock",
                &name,
                "--kind",
                "latch",
                "--yes"
            ])
            .status
            .success()
        );
    }
}

/// A client of `url` in `layout` ("redlatch" or "redisson").
fn client_in(url: &str, layout: &str, watchdog: Duration) -> Client {
    Client::builder(url)
        .layout(match layout {
            "redisson" => redlatch::Layout::Redisson,
            _ => redlatch::Layout::Redlatch,
        })
        .watchdog_timeout(watchdog)
        .build()
        .unwrap()
}

/// Stderr of a run that must fail (exit code not 0), never by a panic.
fn fails(args: &[&str]) -> String {
    let out = run(args);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success(), "{args:?} succeeded: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    stderr
}

#[test]
fn force_unlock_frees_a_semaphore_found_by_its_name_in_both_layouts() {
    let server = RedisServer::start();
    let url = server.url();
    for layout in ["redlatch", "redisson"] {
        let holder = client_in(&url, layout, Duration::from_millis(900));
        let waiter_client = client_in(&url, layout, Duration::from_secs(30));
        let name = unique("cli-sem-force");
        let sem = holder.semaphore(&name);
        sem.set_permits(2).unwrap();
        let held = sem.acquire(2).unwrap();
        let waiting = {
            let sem = waiter_client.semaphore(&name);
            thread::spawn(move || {
                sem.try_acquire(1, Duration::from_secs(10), None)
                    .unwrap()
                    .is_some()
            })
        };
        let args = |extra: &[&'static str]| {
            let mut args = vec!["--url", &url, "--layout", layout, "force-unlock", &name];
            args.extend_from_slice(extra);
            args.into_iter().map(str::to_string).collect::<Vec<_>>()
        };
        let with = |extra: &[&'static str]| {
            let owned = args(extra);
            ok(&owned.iter().map(String::as_str).collect::<Vec<_>>())
        };
        // No --kind: the name is a semaphore, held, and it is freed.
        let said = with(&["--yes"]);
        assert!(
            said.starts_with("semaphore") && said.contains("force-unlocked"),
            "{layout}: {said}"
        );
        assert!(
            join_all(vec![waiting], Duration::from_secs(15), "waiter").remove(0),
            "{layout}: the waiter got a permit freed by force-unlock"
        );
        assert!(
            support::eventually(Duration::from_secs(5), || held.is_lost()),
            "{layout}: the holder learns the loss"
        );
        assert_eq!(sem.permits().unwrap(), 2, "{layout}: the total stays");
        // --kind semaphore, with nothing held now (the waiter's permit went with its thread):
        // says so, and succeeds.
        drop(held);
        let said = with(&["--kind", "semaphore", "--yes"]);
        assert!(said.contains("was not locked"), "{layout}: {said}");
    }
}

#[test]
fn force_unlock_refuses_what_it_cannot_free_with_a_clear_message() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::open(&url).unwrap();
    // A name that is a lock and a semaphore at once (our layout keeps kinds apart): which?
    let both = unique("cli-both");
    let _lock = client.lock(&both).lock().unwrap();
    client.semaphore(&both).set_permits(1).unwrap();
    let _permit = client.semaphore(&both).acquire(1).unwrap();
    let said = fails(&["--url", &url, "force-unlock", &both, "--yes"]);
    assert!(
        said.contains("lock, semaphore") && said.contains("--kind"),
        "{said}"
    );
    assert!(client.lock(&both).is_locked().unwrap());
    // A latch has no holder.
    let latch = unique("cli-latch-force");
    client.count_down_latch(&latch).try_set_count(2).unwrap();
    let said = fails(&["--url", &url, "force-unlock", &latch, "--yes"]);
    assert!(
        said.contains("latch") && said.contains("no holder"),
        "{said}"
    );
    let said = fails(&[
        "--url",
        &url,
        "force-unlock",
        &latch,
        "--kind",
        "latch",
        "--yes",
    ]);
    assert!(said.contains("no holder"), "{said}");
    assert_eq!(client.count_down_latch(&latch).count().unwrap(), 2);
    // Nothing by that name, in either layout.
    for layout in ["redlatch", "redisson"] {
        let said = fails(&[
            "--url",
            &url,
            "--layout",
            layout,
            "force-unlock",
            "nosuch",
            "--yes",
        ]);
        assert!(said.contains("nothing named \"nosuch\""), "{said}");
    }
    let said = fails(&["--url", &url, "force-unlock", "", "--yes"]);
    assert!(said.contains("invalid argument"), "{said}");
    let said = fails(&["--url", &url, "force-unlock", "x", "--kind", "mutex"]);
    assert!(said.contains("unknown kind"), "{said}");
}

#[test]
fn inspect_finds_the_kind_from_what_is_in_redis_in_both_layouts() {
    let server = RedisServer::start();
    let url = server.url();
    for layout in ["redlatch", "redisson"] {
        let client = client_in(&url, layout, Duration::from_secs(30));
        let inspect = |name: &str| ok(&["--url", &url, "--layout", layout, "inspect", name]);
        let rw = unique("cli-find-rw");
        let _write = client.read_write_lock(&rw).write().unwrap();
        let report = inspect(&rw);
        assert!(
            report.starts_with("rwlock") && report.contains("(writer)"),
            "{layout}: {report}"
        );
        let sem = unique("cli-find-sem");
        client.semaphore(&sem).set_permits(3).unwrap();
        let _permits = client.semaphore(&sem).acquire(1).unwrap();
        let report = inspect(&sem);
        assert!(
            report.starts_with("semaphore") && report.contains("total permits 3"),
            "{layout}: {report}"
        );
        let lock = unique("cli-find-lock");
        let _held = client.lock(&lock).lock().unwrap();
        let report = inspect(&lock);
        assert!(
            report.starts_with("lock") && report.contains(client.id()),
            "{layout}: {report}"
        );
        let json = ok(&["--url", &url, "--layout", layout, "inspect", &rw, "--json"]);
        assert!(json.starts_with("{\"kind\":\"rwlock\""), "{layout}: {json}");
        // Nothing by that name: said, and a failure.
        let said = fails(&["--url", &url, "--layout", layout, "inspect", "nosuch"]);
        assert!(
            said.contains("nothing named \"nosuch\"")
                && said.contains("lock, read-write lock, semaphore, latch and counting semaphore"),
            "{layout}: {said}"
        );
        // --kind still forces a kind.
        let forced = ok(&[
            "--url", &url, "--layout", layout, "inspect", "nosuch", "--kind", "latch",
        ]);
        assert!(forced.starts_with("latch"), "{layout}: {forced}");
    }

    // Redisson's layout: a count nobody waits on could be a latch or a semaphore; one a
    // waiter listens to is known; an application's hash is nobody's lock.
    let client = client_in(&url, "redisson", Duration::from_secs(30));
    let latch = unique("cli-find-latch");
    client.count_down_latch(&latch).try_set_count(2).unwrap();
    let said = fails(&["--url", &url, "--layout", "redisson", "inspect", &latch]);
    assert!(
        said.contains("semaphore, latch or counting semaphore") && said.contains("--kind"),
        "{said}"
    );
    let waiting = {
        let latch = client.count_down_latch(&latch);
        thread::spawn(move || latch.wait(Duration::from_secs(10)).unwrap())
    };
    let seen = support::eventually(Duration::from_secs(5), || {
        run(&["--url", &url, "--layout", "redisson", "inspect", &latch])
            .status
            .success()
    });
    assert!(seen, "a latch with a waiter is known as a latch");
    let report = ok(&["--url", &url, "--layout", "redisson", "inspect", &latch]);
    assert!(
        report.starts_with("latch") && report.contains("count 2"),
        "{report}"
    );
    client.count_down_latch(&latch).count_down().unwrap();
    client.count_down_latch(&latch).count_down().unwrap();
    assert!(join_all(vec![waiting], Duration::from_secs(15), "latch waiter").remove(0));
    let mut admin = server.admin();
    let _: () = redis::cmd("HSET")
        .arg("cli-user:1")
        .arg("email")
        .arg("a@example.com")
        .query(&mut admin)
        .unwrap();
    let said = fails(&[
        "--url",
        &url,
        "--layout",
        "redisson",
        "inspect",
        "cli-user:1",
    ]);
    assert!(said.contains("not a Redisson object"), "{said}");

    // Our layout: a name that is two kinds shows both.
    let ours = Client::open(&url).unwrap();
    let both = unique("cli-find-both");
    let _lock = ours.lock(&both).lock().unwrap();
    ours.count_down_latch(&both).try_set_count(1).unwrap();
    let report = ok(&["--url", &url, "inspect", &both]);
    assert!(
        report.starts_with("lock") && report.contains("\nlatch"),
        "{report}"
    );
}

#[test]
fn list_on_a_shared_server_shows_objects_not_leftovers_or_other_data() {
    let server = RedisServer::start();
    let url = server.url();
    let mut admin = server.admin();
    let ours = Client::open(&url).unwrap();
    // 28 locks taken and released: each leaves its fencing counter for the retention.
    let released: Vec<String> = (0..28).map(|i| unique(&format!("cli-gone{i}"))).collect();
    for name in &released {
        ours.lock(name).lock().unwrap().unlock().unwrap();
    }
    let held = unique("cli-held");
    let _held = ours.lock(&held).lock().unwrap();
    let out = run(&["--url", &url, "list", "cli-*"]);
    assert!(out.status.success());
    let (listed, told) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert_eq!(listed.lines().count(), 1, "only the held lock:\n{listed}");
    assert!(
        listed.contains(&held) && listed.contains("in use"),
        "{listed}"
    );
    assert!(told.contains("28 fencing counters kept"), "{told}");
    let fences = ok(&["--url", &url, "list", "cli-*", "--fences"]);
    assert_eq!(
        fences.lines().filter(|l| l.contains(" fence ")).count(),
        28,
        "{fences}"
    );
    let json = ok(&["--url", &url, "list", "cli-*", "--json"]);
    assert!(
        json.starts_with("[{\"kind\":\"lock\"") && json.matches("\"kind\"").count() == 1,
        "{json}"
    );

    // Redisson's layout on the same server: an application's counters and hashes, and our
    // own layout's keys, are none of Redisson's objects.
    for i in 0..5 {
        let _: () = redis::cmd("SET")
            .arg(format!("counter:{i}"))
            .arg(i)
            .query(&mut admin)
            .unwrap();
    }
    let _: () = redis::cmd("HSET")
        .arg("session:9")
        .arg("user")
        .arg("7")
        .query(&mut admin)
        .unwrap();
    let java = client_in(&url, "redisson", Duration::from_secs(30));
    let lock = unique("cli-rl");
    let _java_lock = java.lock(&lock).lock().unwrap();
    let sem = unique("cli-rs");
    java.semaphore(&sem).set_permits(2).unwrap();
    let _permit = java.semaphore(&sem).acquire(1).unwrap();
    let out = run(&["--url", &url, "--layout", "redisson", "list"]);
    assert!(out.status.success());
    let (listed, told) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    let mut lines: Vec<&str> = listed.lines().collect();
    lines.sort();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(
        lines[0].starts_with("lock") && lines[0].ends_with(&lock),
        "{listed}"
    );
    assert!(
        lines[1].starts_with("semaphore") && lines[1].ends_with(&sem),
        "{listed}"
    );
    assert!(
        told.contains("5 keys holding a bare count not shown"),
        "the counters, not our fences: {told}"
    );
}

/// A Java service waiting for a permit of a Redisson semaphore (the emulated Redisson 4.7.0
/// client, `support::jvm`) wakes on the CLI's force-unlock at once, not at the holder's lease
/// end: the script publishes the new count as Java's own release does.
#[test]
fn a_redisson_semaphore_force_unlock_wakes_a_java_waiter() {
    let server = RedisServer::start();
    let url = server.url();
    let ours = client_in(&url, "redisson", Duration::from_secs(30));
    let name = unique("cli-java-sem");
    let sem = ours.semaphore(&name);
    sem.set_permits(1).unwrap();
    let _held = sem.acquire(1).unwrap();
    let java = support::jvm::Jvm::new(&url);
    let waiting = {
        let (java, name) = (java.clone(), name.clone());
        thread::spawn(move || {
            // Its wait would end at the 20 s deadline, before the holder's 30 s lease.
            let id = java.permit_try_acquire(&name, Duration::from_secs(20), 60_000);
            (id.is_some(), Instant::now())
        })
    };
    let subscribed = support::eventually(Duration::from_secs(5), || {
        support::pubsub_channels(&mut server.admin(), "redisson_sc:*")
            .iter()
            .any(|c| c.contains(&name))
    });
    assert!(subscribed, "Java's waiter subscribed");
    thread::sleep(Duration::from_millis(200));
    let forced = Instant::now();
    let said = ok(&[
        "--url",
        &url,
        "--layout",
        "redisson",
        "force-unlock",
        &name,
        "--yes",
    ]);
    assert!(said.starts_with("semaphore"), "{said}");
    let (got, at) = join_all(vec![waiting], Duration::from_secs(30), "Java's waiter").remove(0);
    assert!(got, "Java got the permit");
    assert!(at > forced, "Java waited for the force-unlock");
    assert!(
        at - forced < Duration::from_secs(3),
        "Java woken {:?} after the force-unlock",
        at - forced
    );
}

#[test]
fn watch_finds_the_kind_too() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::open(&url).unwrap();
    let name = unique("cli-watch-sem");
    let sem = client.semaphore(&name);
    sem.set_permits(1).unwrap();
    let held = sem.acquire(1).unwrap();
    let waiter = {
        let sem = client.semaphore(&name);
        thread::spawn(move || {
            sem.try_acquire(1, Duration::from_secs(10), None)
                .unwrap()
                .is_some()
        })
    };
    assert!(support::eventually(Duration::from_secs(5), || {
        ok(&["--url", &url, "inspect", &name]).contains("1. ")
    }));
    let (mut watching, lines) = spawn_watch(&["--url", &url, "watch", &name, "--seconds", "3"]);
    let channel = format!("redlatch:{{{name}}}:semaphore:unlocked");
    // Its channel, and the pattern of the grant channels per client.
    assert!(support::eventually(Duration::from_secs(5), || {
        let patterns: u64 = redis::cmd("PUBSUB")
            .arg("NUMPAT")
            .query(&mut server.admin())
            .unwrap();
        support::pubsub_channels(&mut server.admin(), &channel).len() == 1 && patterns == 1
    }));
    held.release().unwrap();
    assert!(join_all(vec![waiter], Duration::from_secs(15), "waiter").remove(0));
    let lines = join_all(vec![lines], Duration::from_secs(10), "watch").remove(0);
    assert!(watching.wait().unwrap().success(), "{lines:?}");
    assert!(
        lines.iter().any(|l| l.contains("handed over with token")),
        "the semaphore's channel, found without --kind: {lines:?}"
    );
    // Several kinds in use by one name: which one is asked.
    let _lock = client.lock(&name).lock().unwrap();
    let _permit = sem.acquire(1).unwrap();
    let said = fails(&["--url", &url, "watch", &name, "--seconds", "1"]);
    assert!(said.contains("--kind"), "{said}");
}

#[test]
fn on_a_cluster_the_kind_is_found_and_a_semaphore_freed_in_both_layouts() {
    let c = Cluster::start();
    let seeds = c.seed_urls().join(",");
    let seed_list: Vec<String> = c.seed_urls();
    for layout in ["redlatch", "redisson"] {
        let build = || {
            let seeds: Vec<&str> = seed_list.iter().map(String::as_str).collect();
            Client::cluster_builder(&seeds)
                .layout(match layout {
                    "redisson" => redlatch::Layout::Redisson,
                    _ => redlatch::Layout::Redlatch,
                })
                .build()
                .unwrap()
        };
        let (holder, other) = (build(), build());
        let name = unique("cli-c-sem");
        let sem = holder.semaphore(&name);
        sem.set_permits(1).unwrap();
        let _held = sem.acquire(1).unwrap();
        let waiting = {
            let sem = other.semaphore(&name);
            thread::spawn(move || {
                let got = sem.try_acquire(1, Duration::from_secs(10), None).unwrap();
                got.is_some()
            })
        };
        let cli = |args: &[&str]| {
            let mut all = vec!["--cluster", "--url", &seeds, "--layout", layout];
            all.extend_from_slice(args);
            run(&all)
        };
        // The waiter is subscribed (Redisson's layout: how a held count is known for sure).
        let found = support::eventually(Duration::from_secs(5), || {
            let out = cli(&["inspect", &name]);
            let report = String::from_utf8_lossy(&out.stdout).to_string();
            out.status.success() && report.starts_with("semaphore")
        });
        assert!(found, "{layout}: inspect found the semaphore");
        let out = cli(&["force-unlock", &name, "--yes"]);
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success() && said.starts_with("semaphore"),
            "{layout}: {said} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            join_all(vec![waiting], Duration::from_secs(15), "waiter").remove(0),
            "{layout}"
        );
        let out = cli(&["inspect", "nosuch"]);
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("nothing named"),
            "{layout}"
        );
    }
}

/// Clients listening on `channel` now.
fn listeners(server: &RedisServer, channel: &str) -> u64 {
    let (_, n): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut server.admin())
        .unwrap();
    n
}

/// A counting semaphore taken below 0 and waited for: `list` shows it (not its request
/// markers), `inspect` shows the negative count and its waiter and no holder, `force-unlock`
/// refuses it and changes nothing, and `watch` says what its channel carries; once nobody
/// waits it is idle (ours) or a bare count Redis cannot tell from a latch's (Redisson's).
#[test]
fn a_counting_semaphore_is_seen_watched_and_never_force_unlocked_in_both_layouts() {
    let server = RedisServer::start();
    let url = server.url();
    for layout in ["redlatch", "redisson"] {
        let client = client_in(&url, layout, Duration::from_secs(30));
        let name = unique("cli-count");
        let sem = client.counting_semaphore(&name);
        assert!(sem.try_set_permits(2).unwrap());
        sem.add_permits(-5).unwrap();
        assert_eq!(sem.available().unwrap(), -3);
        let waiting = {
            let sem = client_in(&url, layout, Duration::from_secs(30)).counting_semaphore(&name);
            thread::spawn(move || sem.try_acquire(1, Duration::from_secs(20)).unwrap())
        };
        let channel = match layout {
            "redisson" => format!("redisson_sc:{{{name}}}"),
            _ => format!("redlatch:{{{name}}}:counting:unlocked"),
        };
        assert!(
            support::eventually(Duration::from_secs(5), || listeners(&server, &channel) == 1),
            "{layout}: the waiter listens"
        );
        let cli = |args: &[&str]| {
            let mut all = vec!["--url", &url, "--layout", layout];
            all.extend_from_slice(args);
            all.into_iter().map(str::to_string).collect::<Vec<_>>()
        };
        let ok_in = |args: &[&str]| ok(&cli(args).iter().map(String::as_str).collect::<Vec<_>>());
        let fails_in =
            |args: &[&str]| fails(&cli(args).iter().map(String::as_str).collect::<Vec<_>>());

        // list: the semaphore, in use (waited for); our request markers are no objects.
        let pattern = format!("{name}*");
        let listed = ok_in(&["list", &pattern]);
        assert_eq!(listed.lines().count(), 1, "{layout}: {listed}");
        assert!(
            listed.starts_with("counting")
                && listed.contains("in use")
                && listed.trim_end().ends_with(&name),
            "{layout}: {listed}"
        );
        let json = ok_in(&["list", &pattern, "--json"]);
        assert!(
            json.starts_with("[{\"kind\":\"counting\"") && json.contains("\"active\":true"),
            "{layout}: {json}"
        );

        // inspect, with and without --kind: the count below 0 as it is, the waiter, no holder.
        for report in [
            ok_in(&["inspect", &name]),
            ok_in(&["inspect", &name, "--kind", "counting"]),
        ] {
            assert!(
                report.starts_with(&format!("counting {name:?}"))
                    && report.contains("permits free -3")
                    && report.contains("1 client(s) subscribed")
                    && report.contains("permits have no owner"),
                "{layout}: {report}"
            );
        }
        let json = ok_in(&["inspect", &name, "--kind", "counting", "--json"]);
        assert!(
            json.starts_with("{\"kind\":\"counting\"")
                && json.contains("\"available\":-3")
                && json.contains("\"count\":null")
                && json.contains("\"subscribers\":1")
                && json.contains("\"holders\":[]"),
            "{layout}: {json}"
        );
        let report = client
            .inspect(redlatch::ObjectKind::CountingSemaphore, &name)
            .unwrap();
        assert_eq!(report.available, Some(-3), "{layout}: {report}");
        assert!(report.holders.is_empty() && report.queue.is_empty());

        // force-unlock: refused, found or named, with what to do instead; nothing changes.
        for said in [
            fails_in(&["force-unlock", &name, "--yes"]),
            fails_in(&["force-unlock", &name, "--kind", "counting", "--yes"]),
        ] {
            assert!(
                said.contains("no owner") && said.contains("add_permits"),
                "{layout}: {said}"
            );
        }
        assert_eq!(sem.available().unwrap(), -3, "{layout}: nothing changed");

        // watch, the kind found: the permits added, in words; the waiter takes one.
        let (mut watching, lines) = spawn_watch(
            &cli(&["watch", &name, "--seconds", "3"])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        assert!(
            support::eventually(Duration::from_secs(5), || listeners(&server, &channel) == 2),
            "{layout}: the watch listens"
        );
        sem.add_permits(4).unwrap();
        assert!(
            join_all(vec![waiting], Duration::from_secs(25), "waiter").remove(0),
            "{layout}: the waiter took the permit added"
        );
        let lines = join_all(vec![lines], Duration::from_secs(10), "watch").remove(0);
        assert!(watching.wait().unwrap().success(), "{layout}: {lines:?}");
        let said = match layout {
            "redisson" => "the count is now 1",
            _ => "1 free now",
        };
        assert!(
            lines.iter().any(|l| l.contains(said)),
            "{layout}: {lines:?}"
        );
        assert_eq!(sem.available().unwrap(), 0);

        // Nobody waits now.
        assert!(support::eventually(Duration::from_secs(5), || {
            listeners(&server, &channel) == 0
        }));
        if layout == "redlatch" {
            let listed = ok_in(&["list", &pattern]);
            assert!(
                listed.starts_with("counting") && listed.contains("idle"),
                "{listed}"
            );
            let report = ok_in(&["inspect", &name]);
            assert!(report.contains("permits free 0"), "{report}");
        } else {
            let out = run(&cli(&["list", &pattern])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>());
            let (listed, told) = (
                String::from_utf8(out.stdout).unwrap(),
                String::from_utf8(out.stderr).unwrap(),
            );
            assert!(out.status.success() && listed.is_empty(), "{listed}");
            assert!(
                told.contains("1 key holding a bare count") && told.contains("counting"),
                "{told}"
            );
            let said = fails_in(&["inspect", &name]);
            assert!(
                said.contains("semaphore, latch or counting semaphore") && said.contains("--kind"),
                "{said}"
            );
            let report = ok_in(&["inspect", &name, "--kind", "counting"]);
            assert!(report.contains("permits free 0"), "{report}");
        }
    }
}

/// A counting semaphore never set has no key, only waiters: they are what shows it, in
/// `inspect` and `list` (which reads the channels listened to), in both layouts.
#[test]
fn a_counting_semaphore_waited_for_before_it_is_set_is_found_by_its_waiters() {
    let server = RedisServer::start();
    let url = server.url();
    for layout in ["redlatch", "redisson"] {
        let client = client_in(&url, layout, Duration::from_secs(30));
        let name = unique("cli-unset");
        let waiting = {
            let sem = client.counting_semaphore(&name);
            thread::spawn(move || sem.try_acquire(1, Duration::from_secs(20)).unwrap())
        };
        let channel = match layout {
            "redisson" => format!("redisson_sc:{{{name}}}"),
            _ => format!("redlatch:{{{name}}}:counting:unlocked"),
        };
        assert!(support::eventually(Duration::from_secs(5), || {
            listeners(&server, &channel) == 1
        }));
        let report = ok(&["--url", &url, "--layout", layout, "inspect", &name]);
        assert!(
            report.starts_with("counting")
                && report.contains("permits free 0")
                && report.contains("1 client(s) subscribed"),
            "{layout}: {report}"
        );
        let listed = ok(&[
            "--url",
            &url,
            "--layout",
            layout,
            "list",
            &format!("{name}*"),
        ]);
        assert!(
            listed.starts_with("counting") && listed.contains("in use") && listed.contains(&name),
            "{layout}: {listed}"
        );
        client.counting_semaphore(&name).release(1).unwrap();
        assert!(join_all(vec![waiting], Duration::from_secs(25), "waiter").remove(0));
    }
}

/// On a Cluster, a counting semaphore is found on its shard by its count and its waiter
/// (whose channel is a shard channel where the cluster publishes that way), in both layouts.
#[test]
fn on_a_cluster_a_counting_semaphore_is_found_and_watched_in_both_layouts() {
    let c = Cluster::start();
    let seeds = c.seed_urls().join(",");
    let seed_list: Vec<String> = c.seed_urls();
    for layout in ["redlatch", "redisson"] {
        let build = || {
            let seeds: Vec<&str> = seed_list.iter().map(String::as_str).collect();
            Client::cluster_builder(&seeds)
                .layout(match layout {
                    "redisson" => redlatch::Layout::Redisson,
                    _ => redlatch::Layout::Redlatch,
                })
                .build()
                .unwrap()
        };
        let (owner, other) = (build(), build());
        let name = unique("cli-c-count");
        owner.counting_semaphore(&name).add_permits(-1).unwrap();
        let waiting = {
            let sem = other.counting_semaphore(&name);
            thread::spawn(move || sem.try_acquire(1, Duration::from_secs(20)).unwrap())
        };
        let cli = |args: &[&str]| {
            let mut all = vec!["--cluster", "--url", &seeds, "--layout", layout];
            all.extend_from_slice(args);
            all.into_iter().map(str::to_string).collect::<Vec<_>>()
        };
        let run_in = |args: &[&str]| run(&cli(args).iter().map(String::as_str).collect::<Vec<_>>());
        let mut report = String::new();
        let found = support::eventually(Duration::from_secs(5), || {
            let out = run_in(&["inspect", &name]);
            report = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            out.status.success()
                && report.starts_with("counting")
                && report.contains("permits free -1")
                && report.contains("1 client(s) subscribed")
        });
        assert!(
            found,
            "{layout}: inspect did not find the counting semaphore and its waiter:\n{report}"
        );
        let out = run_in(&["list", &format!("{name}*")]);
        let listed = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            listed.starts_with("counting") && listed.contains("in use"),
            "{layout}: {listed}"
        );
        let out = run_in(&["force-unlock", &name, "--yes"]);
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no owner"),
            "{layout}"
        );
        let (mut watching, lines) = spawn_watch(
            &cli(&["watch", &name, "--seconds", "3"])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        // The watch's subscription: no NUMSUB across shards to wait on, so a pause.
        thread::sleep(Duration::from_millis(800));
        owner.counting_semaphore(&name).add_permits(2).unwrap();
        assert!(
            join_all(vec![waiting], Duration::from_secs(25), "waiter").remove(0),
            "{layout}"
        );
        let lines = join_all(vec![lines], Duration::from_secs(10), "watch").remove(0);
        assert!(watching.wait().unwrap().success(), "{layout}: {lines:?}");
        assert!(
            lines
                .iter()
                .any(|l| l.contains("1 free now") || l.contains("the count is now 1")),
            "{layout}: {lines:?}"
        );
    }
}

/// In Redisson's layout Java's RSemaphore and RPermitExpirableSemaphore share one count: with
/// permits out it reads as the leased semaphore, and a count taken below 0 through the
/// counting one shows as it is in either report, not as 0.
#[test]
fn a_redisson_count_shared_by_both_semaphores_shows_below_zero() {
    let server = RedisServer::start();
    let url = server.url();
    let client = client_in(&url, "redisson", Duration::from_secs(30));
    let name = unique("cli-shared");
    client.semaphore(&name).set_permits(3).unwrap();
    let _permit = client.semaphore(&name).acquire(1).unwrap();
    client.counting_semaphore(&name).add_permits(-5).unwrap();
    let inspect = |extra: &[&str]| {
        let mut args = vec!["--url", &url, "--layout", "redisson", "inspect", &name];
        args.extend_from_slice(extra);
        ok(&args)
    };
    let report = inspect(&[]);
    assert!(
        report.starts_with("semaphore") && report.contains("-3 free"),
        "permits out: the leased semaphore, its count as it is: {report}"
    );
    let report = inspect(&["--kind", "counting"]);
    assert!(report.contains("permits free -3"), "{report}");
    let json = inspect(&["--kind", "semaphore", "--json"]);
    assert!(json.contains("\"available\":-3"), "{json}");
}

/// `watch` in Redisson's layout says what Redisson's messages mean, for each kind, instead of
/// printing them raw as none of redlatch's.
#[test]
fn watch_in_the_redisson_layout_says_what_redissons_messages_mean() {
    let server = RedisServer::start();
    let url = server.url();
    let client = client_in(&url, "redisson", Duration::from_secs(30));
    let (lock, rw, sem, latch) = (
        unique("cli-rw-lock"),
        unique("cli-rw-rw"),
        unique("cli-rw-sem"),
        unique("cli-rw-latch"),
    );
    // (name, kind, its channel)
    let watched = [
        (&lock, "lock", format!("redisson_lock__channel:{{{lock}}}")),
        (&rw, "rwlock", format!("redisson_rwlock:{{{rw}}}")),
        (&sem, "semaphore", format!("redisson_sc:{{{sem}}}")),
        (
            &latch,
            "latch",
            format!("redisson_countdownlatch__channel__{{{latch}}}"),
        ),
    ];
    let watches: Vec<_> = watched
        .iter()
        .map(|(name, kind, _)| {
            spawn_watch(&[
                "--url",
                &url,
                "--layout",
                "redisson",
                "watch",
                name,
                "--kind",
                kind,
                "--seconds",
                "3",
            ])
        })
        .collect();
    for (_, kind, channel) in &watched {
        assert!(
            support::eventually(Duration::from_secs(5), || listeners(&server, channel) == 1),
            "the {kind} watch listens on {channel}"
        );
    }
    client.lock(&lock).lock().unwrap().unlock().unwrap(); // "0"
    let held = client.lock(&lock).lock().unwrap();
    assert!(client.lock(&lock).force_unlock().unwrap()); // "1"
    drop(held);
    client
        .read_write_lock(&rw)
        .write()
        .unwrap()
        .unlock()
        .unwrap(); // "1"
    client
        .read_write_lock(&rw)
        .read()
        .unwrap()
        .unlock()
        .unwrap(); // "0"
    client.semaphore(&sem).set_permits(3).unwrap(); // "3"
    let latch_handle = client.count_down_latch(&latch);
    assert!(latch_handle.try_set_count(1).unwrap()); // "1"
    latch_handle.count_down().unwrap(); // "0"

    let mut said = Vec::new();
    for (mut child, lines) in watches {
        let lines = join_all(vec![lines], Duration::from_secs(10), "watch").remove(0);
        assert!(child.wait().unwrap().success(), "{lines:?}");
        said.push(lines);
    }
    for ((_, kind, _), lines) in watched.iter().zip(&said) {
        assert!(
            !lines.is_empty() && lines.iter().all(|l| !l.contains("not redlatch's")),
            "{kind}: printed raw: {lines:?}"
        );
    }
    let has = |lines: &[String], text: &str| lines.iter().any(|l| l.contains(text));
    assert!(
        has(&said[0], "released") && has(&said[0], "force-unlocked"),
        "{:?}",
        said[0]
    );
    assert!(
        has(&said[1], "write hold released") && has(&said[1], "last read hold released"),
        "{:?}",
        said[1]
    );
    assert!(has(&said[2], "3 (Redisson's count"), "{:?}", said[2]);
    assert!(
        has(&said[3], "a new count was set") && has(&said[3], "reached zero"),
        "{:?}",
        said[3]
    );
}

/// In Redisson's layout one token counter per name serves its lock, read-write lock and
/// semaphore alike: `list --fences` says so rather than calling every counter a lock's.
#[test]
fn list_fences_in_the_redisson_layout_does_not_call_every_counter_a_lock() {
    let server = RedisServer::start();
    let url = server.url();
    let client = client_in(&url, "redisson", Duration::from_secs(30));
    let name = unique("cli-rf-sem");
    let sem = client.semaphore(&name);
    sem.set_permits(1).unwrap();
    sem.acquire(1).unwrap().release().unwrap();
    // The semaphore gone, its counter stays (Java never deletes it).
    let _: () = redis::cmd("DEL")
        .arg(&name)
        .query(&mut server.admin())
        .unwrap();
    let args = ["--url", &url, "--layout", "redisson", "list", "cli-rf-*"];
    let listed = ok(&[&args[..], &["--fences"]].concat());
    let line = listed
        .lines()
        .find(|l| l.ends_with(&name))
        .unwrap_or_else(|| panic!("no counter of {name}: {listed}"));
    assert!(
        line.starts_with("lock/rwlock/semaphore") && line.contains(" fence "),
        "{listed}"
    );
    let json = ok(&[&args[..], &["--fences", "--json"]].concat());
    assert!(
        json.contains("\"kind\":null")
            && json.contains("\"could_be\":[\"lock\",\"rwlock\",\"semaphore\"]")
            && json.contains("\"fence_only\":true"),
        "{json}"
    );
}
