//! The real Redisson, in a JVM of its own: `interop/redisson/`'s Java service, driven over its
//! stdin/stdout (the protocol is in `JavaService.java`'s class docs).
//!
//! [`JavaService`] plays one Java service: one `RedissonClient` (its id is the `<uuid>` of
//! Redisson's owner fields), and a Java thread per thread number the tests name, so that the
//! thread that locked unlocks. Calls block with a bound and panic with the service's log when
//! it runs out; [`JavaService::send`] returns a [`Pending`] for calls that wait.
//!
//! The Redisson version is `REDISSON_VERSION` (4.7.0 when unset). The service is built by
//! Maven on first use in a process (a few seconds when already built: Maven checks its inputs)
//! and needs `java` and `mvn` on `PATH` (`scripts/ensure-java` installs them).
//!
//! [`Monitor`] counts the commands each connection sends (Redis's `MONITOR`), so that a test
//! can see what a waiting Java thread sends rather than assume it.

use std::collections::HashMap;
use std::fmt::Display;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

/// The Redisson every test and the report run when `REDISSON_VERSION` is unset.
pub const DEFAULT_VERSION: &str = "4.7.0";
/// Java's "no lease": its watchdog keeps the lock.
pub const NO_LEASE: i64 = -1;
/// Redisson's `setClientName` for every connection of the service: `CLIENT LIST` finds them.
pub const CLIENT_NAME: &str = "redlatch-java";
/// How long a call may take before the test fails (JVM start and Maven excluded).
const CALL_BOUND: Duration = Duration::from_secs(60);
const START_BOUND: Duration = Duration::from_secs(90);

/// The Redisson version under test.
pub fn version() -> String {
    std::env::var("REDISSON_VERSION").unwrap_or_else(|_| DEFAULT_VERSION.to_string())
}

/// A call's outcome: its value (`""` for none, `"null"` for Java's null), or the exception's
/// class and message.
pub type Reply = Result<String, String>;

/// Where the Java service connects.
pub enum Deployment<'a> {
    /// One server.
    Single(&'a str),
    /// Independent masters, one `RedissonClient` each (a `redlock` takes all of them); every
    /// other call uses the first.
    Masters(&'a [String]),
    /// Redis Sentinel: the master's name and the sentinels' URLs.
    Sentinel(&'a str, &'a [String]),
    /// A Cluster, from its seed URLs (sharded pub/sub on Redis 7).
    Cluster(&'a [String]),
}

/// One Java service on the real Redisson. Dropped: told to exit, killed if it does not.
pub struct JavaService {
    inner: Arc<Inner>,
    child: Mutex<Option<Child>>,
    /// The Redisson version it runs, as its jar says.
    pub redisson_version: String,
    /// The JVM's `java.version`.
    pub java_version: String,
    /// The client's id: owner fields are `<id>:<Java thread id>`.
    pub id: String,
    log: PathBuf,
    owners: Mutex<HashMap<u64, String>>,
}

struct Inner {
    stdin: Mutex<Option<ChildStdin>>,
    pending: Mutex<HashMap<u64, Sender<Reply>>>,
    next: AtomicU64,
    gone: AtomicBool,
}

/// A call under way.
pub struct Pending {
    rx: Receiver<Reply>,
    what: String,
    log: PathBuf,
}

impl Pending {
    /// Its reply, waiting at most `within`; panics (with the service's log) past that.
    pub fn wait(self, within: Duration) -> Reply {
        match self.rx.recv_timeout(within) {
            Ok(reply) => reply,
            Err(_) => panic!(
                "the Java service did not answer `{}` within {within:?}\n{}",
                self.what,
                log_tail(&self.log)
            ),
        }
    }

    /// Its reply if it comes within `within`, else `None` (the call goes on).
    pub fn poll(&self, within: Duration) -> Option<Reply> {
        self.rx.recv_timeout(within).ok()
    }

    /// Its reply as a value; panics on an exception.
    pub fn value(self, within: Duration) -> String {
        let what = self.what.clone();
        self.wait(within)
            .unwrap_or_else(|e| panic!("`{what}` threw {e}"))
    }
}

impl JavaService {
    /// A Java service on `deployment`, with Redisson's default watchdog (30 s).
    pub fn start(deployment: Deployment) -> JavaService {
        JavaService::start_with(deployment, None)
    }

    /// A Java service on one server.
    pub fn single(url: &str) -> JavaService {
        JavaService::start(Deployment::Single(url))
    }

    /// With `lockWatchdogTimeout` set to `watchdog` (a lease of that length, renewed every
    /// third of it).
    pub fn start_with(deployment: Deployment, watchdog: Option<Duration>) -> JavaService {
        JavaService::start_configured(deployment, watchdog, None)
    }

    /// With a `NameMapper` that stores every name `n` as `<name_prefix>n`.
    pub fn start_mapped(deployment: Deployment, name_prefix: &str) -> JavaService {
        JavaService::start_configured(deployment, None, Some(name_prefix))
    }

    fn start_configured(
        deployment: Deployment,
        watchdog: Option<Duration>,
        name_prefix: Option<&str>,
    ) -> JavaService {
        let classpath = classpath(&version());
        let log = std::env::temp_dir().join(format!(
            "redlatch-java-{}-{}.log",
            std::process::id(),
            LOGS.fetch_add(1, Ordering::Relaxed)
        ));
        let mut cmd = Command::new(java());
        cmd.arg("-cp")
            .arg(classpath)
            .arg("redlatch.interop.JavaService");
        match deployment {
            Deployment::Single(url) => cmd.args(["single", &redis_url(url)]),
            Deployment::Masters(urls) => {
                let urls: Vec<String> = urls.iter().map(|u| redis_url(u)).collect();
                cmd.args(["single", &urls.join(",")])
            }
            Deployment::Sentinel(master, urls) => {
                let urls: Vec<String> = urls.iter().map(|u| redis_url(u)).collect();
                cmd.args(["sentinel", master, &urls.join(",")])
            }
            Deployment::Cluster(seeds) => {
                let urls: Vec<String> = seeds.iter().map(|u| redis_url(u)).collect();
                cmd.args(["cluster", &urls.join(",")])
            }
        };
        if let Some(watchdog) = watchdog {
            cmd.args(["--watchdog-ms", &watchdog.as_millis().to_string()]);
        }
        cmd.args(["--name", CLIENT_NAME]);
        if let Some(prefix) = name_prefix {
            cmd.args(["--name-prefix", prefix]);
        }
        let log_file = std::fs::File::create(&log).unwrap();
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .expect("could not start java (run scripts/ensure-java)");
        let stdout = child.stdout.take().unwrap();
        let inner = Arc::new(Inner {
            stdin: Mutex::new(child.stdin.take()),
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            gone: AtomicBool::new(false),
        });
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        let reader = inner.clone();
        thread::spawn(move || read_replies(stdout, reader, ready_tx));
        let ready: String = match ready_rx.recv_timeout(START_BOUND) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "the Java service did not start within {START_BOUND:?}\n{}",
                    log_tail(&log)
                );
            }
        };
        let words: Vec<&str> = ready.split(' ').collect();
        assert_eq!(words.len(), 4, "unexpected greeting {ready:?}");
        JavaService {
            inner,
            child: Mutex::new(Some(child)),
            redisson_version: words[1].to_string(),
            java_version: words[2].to_string(),
            id: words[3].to_string(),
            log,
            owners: Mutex::new(HashMap::new()),
        }
    }

    /// Sends `op args...` to Java thread `thread` (0: the service's own reading thread).
    pub fn send(&self, thread: u64, op: &str, args: &[&dyn Display]) -> Pending {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let mut line = format!("{id} {thread} {op}");
        for arg in args {
            let arg = arg.to_string();
            assert!(
                !arg.is_empty() && !arg.contains([' ', '\n']),
                "argument {arg:?}"
            );
            line.push(' ');
            line.push_str(&arg);
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.inner.pending.lock().insert(id, tx);
        line.push('\n');
        let sent = match self.inner.stdin.lock().as_mut() {
            Some(stdin) => stdin
                .write_all(line.as_bytes())
                .and_then(|_| stdin.flush())
                .is_ok(),
            None => false,
        };
        if !sent {
            self.inner.pending.lock().remove(&id);
            panic!(
                "the Java service is gone (sending {line:?})\n{}",
                log_tail(&self.log)
            );
        }
        Pending {
            rx,
            what: format!("{} (thread {thread})", line.trim()),
            log: self.log.clone(),
        }
    }

    /// Sends and waits for the reply.
    pub fn call(&self, thread: u64, op: &str, args: &[&dyn Display]) -> Reply {
        self.send(thread, op, args).wait(CALL_BOUND)
    }

    /// Sends, waits, and panics on an exception.
    pub fn value(&self, thread: u64, op: &str, args: &[&dyn Display]) -> String {
        self.send(thread, op, args).value(CALL_BOUND)
    }

    fn flag(&self, thread: u64, op: &str, args: &[&dyn Display]) -> bool {
        match self.value(thread, op, args).as_str() {
            "true" => true,
            "false" => false,
            other => panic!("`{op}` replied {other:?}, not a boolean"),
        }
    }

    fn number(&self, thread: u64, op: &str, args: &[&dyn Display]) -> i64 {
        let value = self.value(thread, op, args);
        value
            .parse()
            .unwrap_or_else(|_| panic!("`{op}` replied {value:?}, not a number"))
    }

    /// The owner field Redisson writes for Java thread `thread`: `<client id>:<thread id>`.
    pub fn owner(&self, thread: u64) -> String {
        if let Some(owner) = self.owners.lock().get(&thread) {
            return owner.clone();
        }
        let owner = format!("{}:{}", self.id, self.value(thread, "threadid", &[]));
        self.owners.lock().insert(thread, owner.clone());
        owner
    }

    /// `tryLock(wait, lease)` of lock kind `kind` (`lock`, `fair`, `spin`, `read`, `write`,
    /// `multi` with comma-separated names, `redlock`) on thread `thread`.
    pub fn try_lock(
        &self,
        kind: &str,
        name: &str,
        thread: u64,
        wait: Duration,
        lease_ms: i64,
    ) -> bool {
        self.flag(
            thread,
            "trylock",
            &[&kind, &name, &wait.as_millis(), &lease_ms],
        )
    }

    /// `getFencedLock(name).tryLockAndGetToken(wait, lease)`: the token, or `None`.
    pub fn fenced_try_lock(
        &self,
        name: &str,
        thread: u64,
        wait: Duration,
        lease_ms: i64,
    ) -> Option<i64> {
        let value = self.value(
            thread,
            "trylock",
            &[&"fenced", &name, &wait.as_millis(), &lease_ms],
        );
        (value != "null").then(|| value.parse().unwrap())
    }

    /// `lock(lease)`, under way: it waits as long as Java does.
    pub fn lock(&self, kind: &str, name: &str, thread: u64, lease_ms: i64) -> Pending {
        self.send(thread, "lock", &[&kind, &name, &lease_ms])
    }

    /// `unlock()`: `Err` carries Java's `IllegalMonitorStateException` for a lock it does
    /// not hold.
    pub fn unlock(&self, kind: &str, name: &str, thread: u64) -> Reply {
        self.call(thread, "unlock", &[&kind, &name])
    }

    /// `forceUnlock()`.
    pub fn force_unlock(&self, kind: &str, name: &str) -> bool {
        self.flag(1, "forceunlock", &[&kind, &name])
    }

    /// `isLocked()`.
    pub fn is_locked(&self, kind: &str, name: &str) -> bool {
        self.flag(1, "islocked", &[&kind, &name])
    }

    /// `isHeldByCurrentThread()` on thread `thread`.
    pub fn is_held(&self, kind: &str, name: &str, thread: u64) -> bool {
        self.flag(thread, "held", &[&kind, &name])
    }

    /// `getHoldCount()` on thread `thread`.
    pub fn hold_count(&self, kind: &str, name: &str, thread: u64) -> i64 {
        self.number(thread, "holdcount", &[&kind, &name])
    }

    /// `remainTimeToLive()`: ms, -1 with no expiry, -2 when there is no lock.
    pub fn remain_time_to_live(&self, kind: &str, name: &str) -> i64 {
        self.number(1, "ttl", &[&kind, &name])
    }

    /// `getFencedLock(name).getToken()`.
    pub fn fenced_token(&self, name: &str) -> Option<i64> {
        let value = self.value(1, "token", &[&name]);
        (value != "null").then(|| value.parse().unwrap())
    }

    /// A `getPermitExpirableSemaphore(name)` call `op` (`acquire`, `tryacquire`, `release`,
    /// ...: `Ops.java`) on thread `thread`.
    pub fn permits(&self, thread: u64, op: &str, name: &str, args: &[&dyn Display]) -> Reply {
        let mut all: Vec<&dyn Display> = vec![&name];
        all.extend_from_slice(args);
        self.call(thread, &format!("psem.{op}"), &all)
    }

    /// A `getSemaphore(name)` call `op` (`acquire`, `tryacquire`, `release`, `available`,
    /// `trysetpermits`, `addpermits`, `drain`: `Ops.java`) on thread `thread`.
    pub fn counting(&self, thread: u64, op: &str, name: &str, args: &[&dyn Display]) -> Reply {
        let mut all: Vec<&dyn Display> = vec![&name];
        all.extend_from_slice(args);
        self.call(thread, &format!("sem.{op}"), &all)
    }

    /// A `getCountDownLatch(name)` call `op` (`trysetcount`, `countdown`, `count`, `await`,
    /// `delete`).
    pub fn latch(&self, thread: u64, op: &str, name: &str, args: &[&dyn Display]) -> Reply {
        let mut all: Vec<&dyn Display> = vec![&name];
        all.extend_from_slice(args);
        self.call(thread, &format!("latch.{op}"), &all)
    }

    /// The JVM's CPU time so far.
    pub fn cpu(&self) -> Duration {
        Duration::from_nanos(self.number(0, "cpu", &[]) as u64)
    }

    /// Interrupts what Java thread `thread` is doing.
    pub fn interrupt(&self, thread: u64) -> bool {
        self.flag(0, "interrupt", &[&thread])
    }

    /// A fleet of `threads` Java threads taking the lock in a loop (`Loop.java`): its report.
    pub fn run_loop(&self, spec: &LoopSpec, within: Duration) -> LoopReport {
        LoopReport::parse(&self.start_loop(spec).value(spec.duration + within))
    }

    /// Starts a loop and returns at once; [`Pending::value`] then [`LoopReport::parse`].
    pub fn start_loop(&self, spec: &LoopSpec) -> Pending {
        self.send(
            LOOP_THREAD.fetch_add(1, Ordering::Relaxed),
            "loop",
            &[
                &spec.kind,
                &spec.name,
                &spec.keys,
                &spec.threads,
                &spec.duration.as_millis(),
                &spec.hold.as_micros(),
                &spec.think.as_micros(),
                &spec.wait_ms,
                &spec.lease_ms,
                &u8::from(spec.intervals),
                &u8::from(spec.samples),
            ],
        )
    }

    /// The JVM's process id.
    pub fn pid(&self) -> u32 {
        self.child.lock().as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Kills the JVM at once (SIGKILL): its holds stay in Redis until their leases end.
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.inner.gone.store(true, Ordering::SeqCst);
        *self.inner.stdin.lock() = None;
    }

    /// The service's log (Redisson's warnings), for a failing test's message.
    pub fn log(&self) -> String {
        log_tail(&self.log)
    }
}

impl Drop for JavaService {
    fn drop(&mut self) {
        let Some(mut child) = self.child.lock().take() else {
            return;
        };
        if let Some(stdin) = self.inner.stdin.lock().as_mut() {
            let _ = stdin.write_all(b"0 0 exit\n");
            let _ = stdin.flush();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                let _ = std::fs::remove_file(&self.log);
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Thread numbers for loops, apart from the tests' own (1, 2, ...).
static LOOP_THREAD: AtomicU64 = AtomicU64::new(1_000_000);
static LOGS: AtomicU64 = AtomicU64::new(0);

/// What a Java loop does (`Loop.java`).
#[derive(Clone, Debug)]
pub struct LoopSpec {
    pub kind: &'static str,
    pub name: String,
    /// More than 1: a name `<name>-<k>` at random per acquisition.
    pub keys: usize,
    pub threads: usize,
    pub duration: Duration,
    pub hold: Duration,
    pub think: Duration,
    /// `tryLock`'s wait; negative: `lock()`.
    pub wait_ms: i64,
    pub lease_ms: i64,
    /// Report every hold's interval (CLOCK_MONOTONIC ns).
    pub intervals: bool,
    /// Report every acquisition's four times (`Loop.java`'s `samples`).
    pub samples: bool,
}

impl LoopSpec {
    /// `threads` threads on lock `name` for `duration`, `lock()` with the watchdog, no hold,
    /// no think time, no intervals.
    pub fn new(name: &str, threads: usize, duration: Duration) -> LoopSpec {
        LoopSpec {
            kind: "lock",
            name: name.to_string(),
            keys: 1,
            threads,
            duration,
            hold: Duration::ZERO,
            think: Duration::ZERO,
            wait_ms: -1,
            lease_ms: NO_LEASE,
            intervals: false,
            samples: false,
        }
    }
}

/// What a Java loop reports.
#[derive(Clone, Debug, Default)]
pub struct LoopReport {
    pub acquisitions: u64,
    pub timeouts: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub per_thread: Vec<u64>,
    pub wait_p50: Duration,
    pub wait_p99: Duration,
    pub wait_max: Duration,
    pub cycle_p50: Duration,
    pub cycle_p99: Duration,
    /// The JVM's CPU time over the loop (all of its threads: Netty's too).
    pub cpu: Duration,
    pub elapsed: Duration,
    /// (start, end) in CLOCK_MONOTONIC ns: from `lock()` returning to `unlock()` called.
    pub intervals: Vec<(u64, u64)>,
}

impl LoopReport {
    pub fn parse(reply: &str) -> LoopReport {
        let mut report = LoopReport::default();
        let ns = |v: &str| Duration::from_nanos(v.parse().unwrap());
        for word in reply.split(' ') {
            let (key, value) = word.split_once('=').unwrap_or((word, ""));
            match key {
                "acq" => report.acquisitions = value.parse().unwrap(),
                "timeouts" => report.timeouts = value.parse().unwrap(),
                "errors" => report.errors = value.parse().unwrap(),
                "first_error" => report.first_error = Some(value.to_string()),
                "per_thread" => {
                    report.per_thread = value.split(',').map(|v| v.parse().unwrap()).collect()
                }
                "wait_p50_ns" => report.wait_p50 = ns(value),
                "wait_p99_ns" => report.wait_p99 = ns(value),
                "wait_max_ns" => report.wait_max = ns(value),
                "cycle_p50_ns" => report.cycle_p50 = ns(value),
                "cycle_p99_ns" => report.cycle_p99 = ns(value),
                "cpu_ns" => report.cpu = ns(value),
                "elapsed_ns" => report.elapsed = ns(value),
                "intervals" => {
                    report.intervals = value
                        .split(',')
                        .filter(|v| !v.is_empty())
                        .map(|v| {
                            let (a, b) = v.split_once('-').unwrap();
                            (a.parse().unwrap(), b.parse().unwrap())
                        })
                        .collect()
                }
                _ => {}
            }
        }
        report
    }
}

/// CLOCK_MONOTONIC now, in ns: the clock of Java's `System.nanoTime()` on Linux, so that the
/// hold intervals of both sides compare.
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to write.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    assert_eq!(rc, 0, "clock_gettime");
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

fn read_replies(stdout: impl Read, inner: Arc<Inner>, ready: Sender<String>) {
    let mut lines = BufReader::new(stdout).lines();
    if let Some(Ok(line)) = lines.next() {
        let _ = ready.send(line);
    }
    for line in lines.map_while(Result::ok) {
        let mut words = line.splitn(3, ' ');
        let (Some(id), Some(status)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(id) = id.parse::<u64>() else { continue };
        let rest = words.next().unwrap_or("").to_string();
        let reply = if status == "ok" { Ok(rest) } else { Err(rest) };
        if let Some(tx) = inner.pending.lock().remove(&id) {
            let _ = tx.send(reply);
        }
    }
    inner.gone.store(true, Ordering::SeqCst);
    // Every call still waiting learns at once that no reply will come.
    for (_, tx) in inner.pending.lock().drain() {
        let _ = tx.send(Err("ServiceGone the Java service exited".to_string()));
    }
}

fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(40);
    format!(
        "--- Java service log ({}) ---\n{}",
        log.display(),
        lines[from..].join("\n")
    )
}

/// Redisson wants `redis://host:port` without a trailing slash or database.
fn redis_url(url: &str) -> String {
    url.trim_end_matches('/').to_string()
}

fn java() -> PathBuf {
    match std::env::var_os("JAVA_HOME") {
        Some(home) if Path::new(&home).join("bin/java").exists() => {
            Path::new(&home).join("bin/java")
        }
        _ => PathBuf::from("java"),
    }
}

/// The service's project folder.
pub fn project_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/redisson")
}

/// Builds the service for `version` once per process (Maven skips what is up to date) and
/// returns its class path.
pub fn classpath(version: &str) -> String {
    static BUILT: OnceLock<Mutex<HashMap<String, String>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(HashMap::new()));
    let mut built = built.lock();
    if let Some(cp) = built.get(version) {
        return cp.clone();
    }
    let dir = project_dir();
    let out = Command::new("mvn")
        .args([
            "-q",
            "-B",
            "-Dstyle.color=never",
            "package",
            &format!("-Dredisson.version={version}"),
        ])
        .current_dir(&dir)
        .output()
        .expect("could not run mvn (run scripts/ensure-java)");
    assert!(
        out.status.success(),
        "building the Java service for Redisson {version} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let target = dir.join("target").join(version);
    let cp = format!(
        "{}:{}",
        target.join("classes").display(),
        target.join("lib/*").display()
    );
    built.insert(version.to_string(), cp.clone());
    cp
}

/// Every command a server runs while it is watched, by client address (Redis's `MONITOR`):
/// commands run inside scripts have the address `lua`.
pub struct Monitor {
    lines: Arc<Mutex<Vec<(String, String)>>>,
    stop: Arc<AtomicBool>,
}

impl Monitor {
    /// Monitors the server at `port` on loopback.
    pub fn start(port: u16) -> Monitor {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        stream.write_all(b"MONITOR\r\n").unwrap();
        let mut reader = BufReader::new(stream);
        let mut ok = String::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while ok.is_empty() && Instant::now() < deadline {
            let _ = reader.read_line(&mut ok);
        }
        assert!(ok.starts_with("+OK"), "MONITOR replied {ok:?}");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen, stopped) = (lines.clone(), stop.clone());
        thread::spawn(move || {
            let mut line = String::new();
            while !stopped.load(Ordering::Relaxed) {
                match reader.read_line(&mut line) {
                    Ok(0) => return,
                    Ok(_) if line.ends_with('\n') => {
                        // +1700000000.123456 [0 127.0.0.1:54321] "EVALSHA" "..."
                        if let (Some(open), Some(close)) = (line.find('['), line.find(']')) {
                            let addr = line[open + 1..close]
                                .split(' ')
                                .nth(1)
                                .unwrap_or("")
                                .to_string();
                            let command = line[close + 1..].trim().to_string();
                            seen.lock().push((addr, command));
                        }
                        line.clear();
                    }
                    _ => {}
                }
            }
        });
        Monitor { lines, stop }
    }

    /// The commands seen so far from the connections at `addrs`.
    pub fn commands_from(&self, addrs: &[String]) -> Vec<String> {
        self.lines
            .lock()
            .iter()
            .filter(|(addr, _)| addrs.contains(addr))
            .map(|(_, command)| command.clone())
            .collect()
    }

    /// The commands scripts ran (their address is `lua`), in order.
    pub fn script_commands(&self) -> Vec<String> {
        self.commands_from(&["lua".to_string()])
    }

    /// Forgets what was seen so far.
    pub fn clear(&self) {
        self.lines.lock().clear();
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The addresses of the Java service's connections to the server at `admin` (its client
/// name, [`CLIENT_NAME`]).
pub fn java_connections(admin: &mut redis::Connection) -> Vec<String> {
    connections_named(admin, |name| name == CLIENT_NAME)
}

/// The addresses of the connections to the server at `admin` whose `CLIENT SETNAME` name
/// passes `which` (a redlatch client's are `redlatch:<client id>` unless named otherwise).
pub fn connections_named(
    admin: &mut redis::Connection,
    which: impl Fn(&str) -> bool,
) -> Vec<String> {
    client_list(admin, None, which, "addr")
}

/// Field `field` (`addr`, `id`...) of each connection in `CLIENT LIST` (of `TYPE kind`, when
/// given) whose name passes `which`.
pub fn client_list(
    admin: &mut redis::Connection,
    kind: Option<&str>,
    which: impl Fn(&str) -> bool,
    field: &str,
) -> Vec<String> {
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("LIST");
    if let Some(kind) = kind {
        cmd.arg("TYPE").arg(kind);
    }
    let list: String = cmd.query(admin).unwrap();
    let value = |line: &str, key: &str| {
        line.split(' ')
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_string)
    };
    list.lines()
        .filter(|line| value(line, "name").is_some_and(|name| which(&name)))
        .filter_map(|line| value(line, field))
        .collect()
}
