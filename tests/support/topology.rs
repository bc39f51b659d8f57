//! Real topologies for the scale-out tests: a Sentinel-managed master with a replica, a Redis
//! Cluster of three masters with a replica each, and independent masters for Redlock. Every
//! process listens on a free loopback port, every file lives in a private temporary directory,
//! and everything is stopped and removed on drop. Every wait is bounded in time, and every
//! connection has a connect and a response timeout, so a helper fails with a message instead
//! of hanging.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, RedisResult};

use super::tls::Certificates;
use super::{RedisServer, free_port};

/// How long a helper waits for a topology to settle before it panics.
const SETTLE: Duration = Duration::from_secs(30);
/// Between two looks at a settling topology.
const POLL: Duration = Duration::from_millis(50);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A private temporary directory, removed with everything in it on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "redlatch-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// `redis://[:password@]127.0.0.1:port/`.
pub fn url_for(port: u16, password: Option<&str>) -> String {
    match password {
        Some(p) => format!("redis://:{p}@127.0.0.1:{port}/"),
        None => format!("redis://127.0.0.1:{port}/"),
    }
}

/// A connection to `127.0.0.1:port` with a connect and a response timeout.
pub fn connect(port: u16, password: Option<&str>) -> RedisResult<Connection> {
    let client = redis::Client::open(url_for(port, password))?;
    let con = client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
    con.set_read_timeout(Some(RESPONSE_TIMEOUT))?;
    con.set_write_timeout(Some(RESPONSE_TIMEOUT))?;
    Ok(con)
}

/// Calls `cond` every [`POLL`] until it returns `Some`, for at most `within`; panics saying
/// `what` did not happen otherwise. `cond` should itself be bounded (use [`connect`]).
pub fn wait_for<T>(what: &str, within: Duration, mut cond: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = cond() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?}: {what}"
        );
        thread::sleep(POLL);
    }
}

/// Runs `program args`, killing it if it has not finished within `within`; panics on failure
/// or timeout with what it printed.
fn run_bounded(program: &str, args: &[String], within: Duration) -> String {
    let dir = TempDir::new("run");
    let (out_path, err_path) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(POLL);
    };
    let out = std::fs::read_to_string(&out_path).unwrap_or_default();
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    match status {
        Some(s) if s.success() => out,
        Some(s) => panic!("{program} {args:?} failed ({s}):\n{out}\n{err}"),
        None => panic!("{program} {args:?} did not finish within {within:?}:\n{out}\n{err}"),
    }
}

/// A master with one replica, in sync (online: it acknowledges writes).
pub fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let port = master.port.to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    await_replicas(&mut master.admin(), 1);
    (master, replica)
}

/// Waits until the master behind `admin` has `n` replicas online, for at most 10 s.
pub fn await_replicas(admin: &mut Connection, n: usize) {
    wait_for(
        "the replicas to come or go",
        Duration::from_secs(10),
        || {
            let replication = info(admin, "replication").ok()?;
            let online = (0..8)
                .filter(|i| {
                    replication
                        .get(&format!("slave{i}"))
                        .is_some_and(|s| s.contains("state=online"))
                })
                .count();
            (online == n).then_some(())
        },
    );
}

/// `INFO <section>` as field -> value.
pub fn info(con: &mut Connection, section: &str) -> RedisResult<HashMap<String, String>> {
    let text: String = redis::cmd("INFO").arg(section).query(con)?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect())
}

/// The first element of `ROLE`: "master", "slave" or "sentinel".
pub fn role(port: u16, password: Option<&str>) -> RedisResult<String> {
    let mut con = connect(port, password)?;
    let reply: Vec<redis::Value> = redis::cmd("ROLE").query(&mut con)?;
    match reply.into_iter().next() {
        Some(redis::Value::BulkString(b)) => Ok(String::from_utf8_lossy(&b).into_owned()),
        Some(redis::Value::SimpleString(s)) => Ok(s),
        other => Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "ROLE",
            format!("{other:?}"),
        ))),
    }
}

/// Makes sure a failover to the replica keeps lock `name` (default key prefix) as the master
/// holds it now, rather than assuming it: replication is asynchronous, what the replica lacks
/// when its master goes is lost when it takes over, and a release there then rightly answers
/// `LockLost`.
///
/// `WAIT` only covers the writes of the connection it is sent on (on a fresh one Redis answers
/// at once with the number of connected replicas, whatever they have: redis/redis#6393), so
/// it follows a write of our own in the lock's slot on `master`: the replica's
/// acknowledgement of that write covers everything written before it, the lock and the
/// waiters' places included. Then `replica` (a connection that may read there: a Cluster
/// replica's after `READONLY`) must show the lock's hash and its fence at `token`.
pub fn replicate_lock(master: &mut Connection, replica: &mut Connection, name: &str, token: u64) {
    redis::cmd("SET")
        .arg(format!("replicated:{{{name}}}"))
        .arg(1)
        .query::<()>(master)
        .unwrap();
    let replicated: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(master).unwrap();
    assert_eq!(replicated, 1, "the replica acknowledged the lock's writes");
    let key = format!("redlatch:{{{name}}}");
    let exists: bool = redis::cmd("EXISTS").arg(&key).query(replica).unwrap();
    let fence: Option<u64> = redis::cmd("GET")
        .arg(format!("{key}:fence"))
        .query(replica)
        .unwrap();
    assert!(
        exists && fence == Some(token),
        "the replica has the lock and its fence: hash {exists}, fence {fence:?}, token {token}"
    );
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Whether a SET on `port` succeeds: the node is a master that accepts writes.
fn writable(port: u16, password: Option<&str>) -> bool {
    connect(port, password)
        .and_then(|mut con| {
            redis::cmd("SET")
                .arg("redlatch-topology-probe")
                .arg(1)
                .query::<()>(&mut con)
        })
        .is_ok()
}

// ---------------------------------------------------------------------------------------------
// Sentinel
// ---------------------------------------------------------------------------------------------

/// Credentials for a [`Sentinel`] setup.
#[derive(Clone, Debug, Default)]
pub struct SentinelAuth {
    /// `requirepass` (and `masterauth`) of the master and the replica; the sentinels get it as
    /// `sentinel auth-pass`.
    pub data_password: Option<String>,
    /// `requirepass` of the sentinels themselves (and `sentinel sentinel-pass`, so that they
    /// can talk to each other).
    pub sentinel_password: Option<String>,
}

/// A [`Sentinel`] setup over TLS: every process also listens on a TLS port, replicates and
/// monitors over TLS (`tls-replication yes`), so the addresses Sentinel reports are TLS
/// ports. Each keeps its plain port for the test's admin connections.
pub struct SentinelTls {
    pub certs: Certificates,
    /// Whether every process demands a client certificate (`tls-auth-clients yes`).
    pub auth_clients: bool,
    /// The TLS port of each data node, in the order of [`Sentinel::servers`].
    tls_ports: Vec<u16>,
}

/// One `redis-server --sentinel` process with its own config file (Sentinel rewrites it).
struct SentinelProcess {
    port: u16,
    /// Over TLS: the port clients and the other sentinels use.
    tls_port: Option<u16>,
    child: Option<Child>,
}

impl SentinelProcess {
    fn start(
        dir: &Path,
        name: &str,
        master_port: u16,
        auth: &SentinelAuth,
        tls: Option<&SentinelTls>,
    ) -> SentinelProcess {
        for _ in 0..20 {
            let port = free_port();
            let tls_port = tls.map(|_| free_port());
            let conf = dir.join(format!("sentinel-{port}.conf"));
            let mut text = format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n\
                 dir {dir}\nlogfile {dir}/sentinel-{port}.log\nloglevel notice\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {name} 2000\n\
                 sentinel failover-timeout {name} 10000\n\
                 sentinel parallel-syncs {name} 1\n",
                dir = dir.display()
            );
            if let Some(p) = &auth.data_password {
                text.push_str(&format!("sentinel auth-pass {name} {p}\n"));
            }
            if let Some(p) = &auth.sentinel_password {
                text.push_str(&format!("requirepass {p}\nsentinel sentinel-pass {p}\n"));
            }
            if let (Some(tls), Some(tls_port)) = (tls, tls_port) {
                text.push_str(&format!("tls-port {tls_port}\n"));
                for (key, value) in super::tls::server_settings(&tls.certs, tls.auth_clients) {
                    text.push_str(&format!("{key} {value}\n"));
                }
            }
            std::fs::write(&conf, text).unwrap();
            let child = Command::new("redis-server")
                .arg(&conf)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be on PATH (apt-get install redis-server)");
            let mut process = SentinelProcess {
                port,
                tls_port,
                child: Some(child),
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if process
                    .child
                    .as_mut()
                    .unwrap()
                    .try_wait()
                    .unwrap()
                    .is_some()
                {
                    process.child = None;
                    break; // port taken, most likely: try another
                }
                if role(port, auth.sentinel_password.as_deref()).is_ok() {
                    return process;
                }
                thread::sleep(Duration::from_millis(10));
            }
        }
        panic!("could not start a sentinel on a free port");
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One master, one replica and three sentinels (quorum 2) watching them under [`Sentinel::NAME`].
///
/// `start` returns once the replica is in sync and every sentinel knows the replica and the
/// two other sentinels, so [`Sentinel::failover`] can run at once.
pub struct Sentinel {
    auth: SentinelAuth,
    tls: Option<SentinelTls>,
    /// The data nodes: `[0]` started as the master, `[1]` as its replica.
    servers: Vec<RedisServer>,
    sentinels: Vec<SentinelProcess>,
    dir: TempDir,
}

impl Sentinel {
    /// The master name the sentinels monitor.
    pub const NAME: &'static str = "redlatch-master";

    pub fn start() -> Sentinel {
        Sentinel::start_with(SentinelAuth::default())
    }

    pub fn start_with(auth: SentinelAuth) -> Sentinel {
        Sentinel::start_full(auth, None)
    }

    /// Every process over TLS with certificates made for the run (see [`SentinelTls`]);
    /// with `auth_clients`, every one demands a client certificate.
    pub fn start_tls(auth_clients: bool) -> Sentinel {
        let tls = SentinelTls {
            certs: Certificates::generate(),
            auth_clients,
            tls_ports: Vec::new(),
        };
        Sentinel::start_full(SentinelAuth::default(), Some(tls))
    }

    fn start_full(auth: SentinelAuth, mut tls: Option<SentinelTls>) -> Sentinel {
        let dir = TempDir::new("sentinel");
        let mut args: Vec<String> = vec![
            "--dir".into(),
            dir.path().display().to_string(),
            // A diskless full sync otherwise waits 5 s for more replicas to join it.
            "--repl-diskless-sync-delay".into(),
            "0".into(),
        ];
        if let Some(p) = &auth.data_password {
            args.extend(["--requirepass".into(), p.clone()]);
            args.extend(["--masterauth".into(), p.clone()]);
        }
        if let Some(tls) = &tls {
            for (key, value) in super::tls::server_settings(&tls.certs, tls.auth_clients) {
                args.extend([format!("--{key}"), value]);
            }
        }
        // Over TLS, a data node on a free TLS port too: what the others know it by.
        let start = |args: &[String], tls: &mut Option<SentinelTls>| {
            RedisServer::start_with_port(|_| {
                let mut args = args.to_vec();
                if let Some(tls) = tls.as_mut() {
                    let tls_port = free_port();
                    tls.tls_ports.push(tls_port);
                    args.extend(["--tls-port".into(), tls_port.to_string()]);
                }
                args
            })
        };
        let master = start(&args, &mut tls);
        // The port attempts that failed left their TLS ports behind: the last is the one.
        let keep_last = |tls: &mut Option<SentinelTls>, n: usize| {
            if let Some(tls) = tls.as_mut() {
                let last = tls.tls_ports.pop().expect("a TLS port was chosen");
                tls.tls_ports.truncate(n);
                tls.tls_ports.push(last);
            }
        };
        keep_last(&mut tls, 0);
        let master_announced = tls.as_ref().map_or(master.port, |t| t.tls_ports[0]);
        let mut replica_args = args.clone();
        replica_args.extend([
            "--replicaof".into(),
            "127.0.0.1".into(),
            master_announced.to_string(),
        ]);
        let replica = start(&replica_args, &mut tls);
        keep_last(&mut tls, 1);
        let mut setup = Sentinel {
            auth,
            tls,
            servers: vec![master, replica],
            sentinels: Vec::new(),
            dir,
        };
        setup.await_replica_synced(setup.servers[1].port);
        let master_port = setup.servers[0].port;
        for _ in 0..3 {
            let sentinel = SentinelProcess::start(
                setup.dir.path(),
                Sentinel::NAME,
                master_announced,
                &setup.auth,
                setup.tls.as_ref(),
            );
            setup.sentinels.push(sentinel);
        }
        setup.await_sentinels_settled(master_port, 1);
        setup
    }

    /// The TLS settings, certificates included, of a setup from [`Sentinel::start_tls`].
    pub fn tls(&self) -> Option<&SentinelTls> {
        self.tls.as_ref()
    }

    /// The port the data node with admin port `port` is known by to the others: its TLS
    /// port over TLS, else `port` itself.
    pub fn announced_port(&self, port: u16) -> u16 {
        match &self.tls {
            Some(tls) => self
                .servers
                .iter()
                .position(|s| s.port == port)
                .map_or(port, |i| tls.tls_ports[i]),
            None => port,
        }
    }

    /// The admin port of the data node Sentinel or a replica reports as `announced`.
    fn admin_port(&self, announced: u16) -> u16 {
        match &self.tls {
            Some(tls) => tls
                .tls_ports
                .iter()
                .position(|p| *p == announced)
                .map_or(announced, |i| self.servers[i].port),
            None => announced,
        }
    }

    /// The process id of sentinel `i`, to stop it.
    pub fn sentinel_pid(&self, i: usize) -> u32 {
        self.sentinels[i]
            .child
            .as_ref()
            .expect("sentinel is running")
            .id()
    }

    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// `redis://[:sentinel password@]127.0.0.1:port/` of each sentinel; over TLS,
    /// `rediss://...` with its TLS port.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| {
                let password = self.auth.sentinel_password.as_deref();
                match s.tls_port {
                    Some(tls_port) => url_for(tls_port, password).replacen("redis:", "rediss:", 1),
                    None => url_for(s.port, password),
                }
            })
            .collect()
    }

    pub fn auth(&self) -> &SentinelAuth {
        &self.auth
    }

    /// The data nodes (master and replica, in start order, whatever their role now).
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The data node on `port`, to kill, restart or stop it.
    pub fn server_mut(&mut self, port: u16) -> &mut RedisServer {
        self.servers
            .iter_mut()
            .find(|s| s.port == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    /// A connection to sentinel number `i`.
    pub fn sentinel_connection(&self, i: usize) -> RedisResult<Connection> {
        connect(
            self.sentinels[i].port,
            self.auth.sentinel_password.as_deref(),
        )
    }

    /// A connection to the data node on `port` (with the data password, if any).
    pub fn data_connection(&self, port: u16) -> RedisResult<Connection> {
        connect(port, self.auth.data_password.as_deref())
    }

    /// The master's address as sentinel `i` reports it (`SENTINEL GET-MASTER-ADDR-BY-NAME`;
    /// over TLS, a TLS port: see [`Sentinel::announced_port`]).
    pub fn master_addr_from(&self, i: usize) -> RedisResult<(String, u16)> {
        let mut con = self.sentinel_connection(i)?;
        let (host, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(Sentinel::NAME)
            .query(&mut con)?;
        Ok((host, port))
    }

    /// The master's (admin) port, as every reachable sentinel reports it (they must agree;
    /// waits, bounded, until they do).
    pub fn master_port(&self) -> u16 {
        wait_for("the sentinels agree on the master", SETTLE, || {
            self.reported_master_ports().and_then(|ports| {
                let first = *ports.first()?;
                ports.iter().all(|p| *p == first).then_some(first)
            })
        })
    }

    /// `redis://[:data password@]127.0.0.1:port/` of the current master (its admin port).
    pub fn master_url(&self) -> String {
        url_for(self.master_port(), self.auth.data_password.as_deref())
    }

    /// The master (admin) port each live sentinel reports; `None` if none answers.
    fn reported_master_ports(&self) -> Option<Vec<u16>> {
        let ports: Vec<u16> = (0..self.sentinels.len())
            .filter(|i| self.sentinels[*i].child.is_some())
            .filter_map(|i| self.master_addr_from(i).ok())
            .map(|(_, port)| self.admin_port(port))
            .collect();
        (!ports.is_empty()).then_some(ports)
    }

    /// Sends `SENTINEL FAILOVER` to sentinel 0 and waits (bounded) until every sentinel
    /// reports a new master and that master accepts writes. Returns the new master's port.
    ///
    /// The old master, if alive, keeps accepting writes until a sentinel reconfigures it as
    /// a replica (several seconds later); [`Sentinel::await_settled`] waits for that.
    pub fn failover(&self) -> u16 {
        let old = self.master_port();
        wait_for("a sentinel accepts SENTINEL FAILOVER", SETTLE, || {
            let mut con = self.sentinel_connection(0).ok()?;
            // -INPROG while an earlier failover is still running, -NOGOODSLAVE while the
            // sentinel has not yet seen a replica fit to promote: both pass.
            redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(Sentinel::NAME)
                .query::<()>(&mut con)
                .ok()
        });
        let new = wait_for("every sentinel reports the new master", SETTLE, || {
            let ports = self.reported_master_ports()?;
            let first = *ports.first()?;
            (first != old
                && ports.len() == self.live_sentinels()
                && ports.iter().all(|p| *p == first))
            .then_some(first)
        });
        wait_for("the new master accepts writes", SETTLE, || {
            writable(new, self.auth.data_password.as_deref()).then_some(())
        });
        new
    }

    fn live_sentinels(&self) -> usize {
        self.sentinels.iter().filter(|s| s.child.is_some()).count()
    }

    /// Waits (bounded) until every live data node other than the master replicates from it
    /// with its link up, and every sentinel lists those replicas as healthy: after a failover,
    /// the old master has been turned into a replica (no more split brain), and another
    /// failover can run.
    pub fn await_settled(&self) {
        let master = self.master_port();
        let announced = self.announced_port(master);
        for server in &self.servers {
            if server.port != master && server.is_running() {
                wait_for(
                    &format!("{} replicates from {master}", server.port),
                    SETTLE,
                    || {
                        let mut con = self.data_connection(server.port).ok()?;
                        let info = info(&mut con, "replication").ok()?;
                        (info.get("role")? == "slave"
                            && info.get("master_port")? == &announced.to_string()
                            && info.get("master_link_status")? == "up")
                            .then_some(())
                    },
                );
            }
        }
        let replicas = self
            .servers
            .iter()
            .filter(|s| s.port != master && s.is_running())
            .count();
        self.await_sentinels_settled(master, replicas);
    }

    fn await_replica_synced(&self, port: u16) {
        wait_for(&format!("replica {port} in sync"), SETTLE, || {
            let mut con = self.data_connection(port).ok()?;
            let info = info(&mut con, "replication").ok()?;
            (info.get("master_link_status")? == "up").then_some(())
        });
    }

    /// Every sentinel sees `master` as the master, `replicas` healthy replicas, and the
    /// other sentinels.
    fn await_sentinels_settled(&self, master: u16, replicas: usize) {
        let others = self.live_sentinels() - 1;
        let master = self.announced_port(master);
        for i in 0..self.sentinels.len() {
            if self.sentinels[i].child.is_none() {
                continue;
            }
            wait_for(
                &format!("sentinel {i} sees the master, {replicas} replica(s), {others} sentinels"),
                SETTLE,
                || {
                    let mut con = self.sentinel_connection(i).ok()?;
                    let m: HashMap<String, String> = redis::cmd("SENTINEL")
                        .arg("MASTER")
                        .arg(Sentinel::NAME)
                        .query(&mut con)
                        .ok()?;
                    let healthy: Vec<HashMap<String, String>> = redis::cmd("SENTINEL")
                        .arg("REPLICAS")
                        .arg(Sentinel::NAME)
                        .query(&mut con)
                        .ok()?;
                    let healthy = healthy
                        .iter()
                        .filter(|r| {
                            r.get("flags").map(String::as_str) == Some("slave")
                                && r.get("master-link-status").map(String::as_str) == Some("ok")
                                && r.get("master-port") == Some(&master.to_string())
                        })
                        .count();
                    (m.get("port")? == &master.to_string()
                        && m.get("flags")? == "master"
                        && healthy >= replicas
                        && m.get("num-other-sentinels")?.parse::<usize>().ok()? >= others)
                        .then_some(())
                },
            );
        }
    }

    /// Kills sentinel `i` (kill -9).
    pub fn kill_sentinel(&mut self, i: usize) {
        if let Some(mut child) = self.sentinels[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The temporary directory holding the sentinels' config files and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        // Sentinels first, so that none reacts to the data nodes going away.
        self.sentinels.clear();
        self.servers.clear();
    }
}

// ---------------------------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------------------------

/// One line of `CLUSTER NODES`, as one node sees it.
#[derive(Clone, Debug)]
pub struct ClusterNode {
    pub id: String,
    pub port: u16,
    pub master: bool,
    /// For a replica, the id of its master.
    pub master_id: Option<String>,
    /// `fail` or `fail?` among the flags.
    pub failing: bool,
    /// Slot ranges it serves (inclusive); empty for a replica.
    pub slots: Vec<(u16, u16)>,
}

impl ClusterNode {
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
    }
}

/// Parses `CLUSTER NODES` output.
pub fn parse_cluster_nodes(text: &str) -> Vec<ClusterNode> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return None;
            }
            let addr = f[1].split('@').next()?;
            let port = addr.rsplit_once(':')?.1.parse().ok()?;
            let flags: Vec<&str> = f[2].split(',').collect();
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('[')) // [slot->-id] / [slot-<-id]: migrations
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(ClusterNode {
                id: f[0].to_string(),
                port,
                master: flags.contains(&"master"),
                master_id: (f[3] != "-").then(|| f[3].to_string()),
                failing: flags.iter().any(|x| *x == "fail" || *x == "fail?"),
                slots,
            })
        })
        .collect()
}

/// `CLUSTER NODES` as the node on `port` sees it.
pub fn cluster_nodes(port: u16) -> RedisResult<Vec<ClusterNode>> {
    let mut con = connect(port, None)?;
    let text: String = redis::cmd("CLUSTER").arg("NODES").query(&mut con)?;
    Ok(parse_cluster_nodes(&text))
}

/// A node's port, whether it is a master, and the slot ranges it serves.
type Served = (u16, bool, Vec<(u16, u16)>);

/// Three masters with one replica each, formed by `redis-cli --cluster create`.
///
/// `start` returns once every node says `cluster_state:ok`, sees all six nodes and agrees on
/// who serves what, and every replica is in sync with its master.
pub struct Cluster {
    nodes: Vec<RedisServer>,
    dir: TempDir,
    tls: Option<ClusterTls>,
}

/// A cluster's TLS side: its certificates, and each node's TLS port by its plain one.
pub struct ClusterTls {
    pub certs: Certificates,
    tls_ports: HashMap<u16, u16>,
}

impl Cluster {
    /// `cluster-node-timeout`: how long a node may be unreachable before it is failed over.
    pub const NODE_TIMEOUT: Duration = Duration::from_millis(3000);

    pub fn start() -> Cluster {
        Cluster::start_with(&[])
    }

    /// A cluster whose nodes get `extra` arguments too, e.g. `["--rename-command",
    /// "SPUBLISH", ""]` for a cluster without sharded pub/sub, as before Redis 7.
    pub fn start_with(extra: &[&str]) -> Cluster {
        Cluster::start_full(extra, None)
    }

    /// A cluster whose clients, replication and cluster bus speak TLS (`--tls-cluster yes`),
    /// with certificates made for the run; `auth_clients`: whether the nodes demand a client
    /// certificate. Every node keeps its plain port too, for the test's own admin
    /// connections and for [`Cluster::view`] (a node tells a plain client the plain ports of
    /// the others, and a TLS client their TLS ports).
    pub fn start_tls(auth_clients: bool) -> Cluster {
        Cluster::start_full(&[], Some((Certificates::generate(), auth_clients)))
    }

    fn start_full(extra: &[&str], tls: Option<(Certificates, bool)>) -> Cluster {
        let dir = TempDir::new("cluster");
        let mut nodes = Vec::new();
        let mut tls_ports = HashMap::new();
        for _ in 0..6 {
            let path = dir.path().to_path_buf();
            let mut tls_port = 0;
            // Before Redis 7 the bus port is always port + 10000 (no --cluster-port).
            let fixed_bus = super::server_version() < (7, 0);
            let bus_fits = |port: u16| {
                !fixed_bus
                    || port
                        .checked_add(10000)
                        .is_some_and(|bus| std::net::TcpListener::bind(("127.0.0.1", bus)).is_ok())
            };
            nodes.push(RedisServer::start_with_port_where(bus_fits, |port| {
                let conf = path.join(format!("nodes-{port}.conf"));
                let _ = std::fs::remove_file(&conf);
                let tls_args: Vec<String> = match &tls {
                    None => Vec::new(),
                    Some((certs, auth_clients)) => {
                        tls_port = free_port();
                        let settings = super::tls::server_settings(certs, *auth_clients);
                        [("tls-port".to_string(), tls_port.to_string())]
                            .into_iter()
                            .chain([("tls-cluster".to_string(), "yes".to_string())])
                            .chain(settings)
                            .flat_map(|(k, v)| [format!("--{k}"), v])
                            .collect()
                    }
                };
                tls_args
                    .into_iter()
                    .chain(vec![
                        "--cluster-enabled".into(),
                        "yes".into(),
                        "--cluster-config-file".into(),
                        conf.display().to_string(),
                        "--cluster-node-timeout".into(),
                        Cluster::NODE_TIMEOUT.as_millis().to_string(),
                        "--dir".into(),
                        path.display().to_string(),
                        // A diskless full sync otherwise waits 5 s for more replicas to join it.
                        "--repl-diskless-sync-delay".into(),
                        "0".into(),
                    ])
                    .chain(extra.iter().map(|a| a.to_string()))
                    // The bus port defaults to port + 10000, which may not exist; Redis 7
                    // lets us choose it.
                    .chain(
                        (!fixed_bus)
                            .then(|| ["--cluster-port".to_string(), free_port().to_string()])
                            .into_iter()
                            .flatten(),
                    )
                    .collect()
            }));
            if tls.is_some() {
                tls_ports.insert(nodes.last().unwrap().port, tls_port);
            }
        }
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        args.extend([
            "--cluster-replicas".into(),
            "1".into(),
            "--cluster-yes".into(),
        ]);
        run_bounded("redis-cli", &args, Duration::from_secs(60));
        let tls = tls.map(|(certs, _)| ClusterTls { certs, tls_ports });
        let cluster = Cluster { nodes, dir, tls };
        cluster.await_settled();
        cluster
    }

    /// `redis://127.0.0.1:port/` of every node (masters and replicas), for a cluster client.
    pub fn seed_urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(|n| n.url())
            .collect()
    }

    /// The TLS side of a cluster from [`Cluster::start_tls`].
    pub fn tls(&self) -> Option<&ClusterTls> {
        self.tls.as_ref()
    }

    /// `rediss://127.0.0.1:tls_port/` of every running node, for a cluster client over TLS.
    pub fn tls_seed_urls(&self) -> Vec<String> {
        let tls = self.tls.as_ref().expect("a cluster started with start_tls");
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(|n| format!("rediss://127.0.0.1:{}/", tls.tls_ports[&n.port]))
            .collect()
    }

    /// Every node, in start order, running or not.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The node on `port`, to kill, restart or signal it.
    pub fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    /// kill -9 the node on `port`.
    pub fn kill(&mut self, port: u16) {
        self.node_mut(port).kill();
    }

    /// The cluster as a live node sees it (the first one that answers).
    pub fn view(&self) -> Vec<ClusterNode> {
        wait_for("a cluster node answers CLUSTER NODES", SETTLE, || {
            self.live_ports()
                .into_iter()
                .find_map(|p| cluster_nodes(p).ok())
        })
    }

    fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(|n| n.port)
            .collect()
    }

    /// Ports of the masters that serve slots.
    pub fn master_ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .view()
            .into_iter()
            .filter(|n| n.master && !n.slots.is_empty() && !n.failing)
            .map(|n| n.port)
            .collect();
        ports.sort_unstable();
        ports
    }

    /// The port of a replica of the master on `master_port`.
    pub fn replica_of(&self, master_port: u16) -> u16 {
        let view = self.view();
        let id = &view
            .iter()
            .find(|n| n.port == master_port)
            .expect("no such node")
            .id;
        view.iter()
            .find(|n| n.master_id.as_ref() == Some(id) && !n.failing)
            .unwrap_or_else(|| panic!("{master_port} has no replica"))
            .port
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn slot_of(&self, key: &str) -> u16 {
        let port = self.live_ports()[0];
        let mut con = connect(port, None).unwrap();
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut con)
            .unwrap()
    }

    /// The port of the master serving `slot`, as the cluster sees it.
    pub fn owner_of_slot(&self, slot: u16) -> u16 {
        self.view()
            .into_iter()
            .find(|n| n.master && n.serves(slot))
            .unwrap_or_else(|| panic!("nobody serves slot {slot}"))
            .port
    }

    /// The port of the master serving `key`'s slot.
    pub fn owner_of(&self, key: &str) -> u16 {
        self.owner_of_slot(self.slot_of(key))
    }

    fn id_of(&self, port: u16) -> String {
        self.view()
            .into_iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no cluster node on {port}"))
            .id
    }

    /// Starts moving `slot` from its owner to the master on `to`: the target is IMPORTING and
    /// the source MIGRATING, so the source answers ASK for keys it no longer has. Keys move
    /// with [`SlotMove::migrate_keys`]; [`SlotMove::finish`] hands the slot over.
    pub fn begin_slot_move(&self, slot: u16, to: u16) -> SlotMove<'_> {
        let from = self.owner_of_slot(slot);
        assert_ne!(from, to, "slot {slot} is already on {to}");
        let (from_id, to_id) = (self.id_of(from), self.id_of(to));
        let mut target = connect(to, None).unwrap();
        let mut source = connect(from, None).unwrap();
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("IMPORTING")
            .arg(&from_id)
            .query::<()>(&mut target)
            .unwrap();
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("MIGRATING")
            .arg(&to_id)
            .query::<()>(&mut source)
            .unwrap();
        SlotMove {
            cluster: self,
            slot,
            from,
            to,
            to_id,
        }
    }

    /// Moves `slot` and its keys to the master on `to`, and waits (bounded) until every live
    /// node agrees that `to` serves it.
    pub fn move_slot(&self, slot: u16, to: u16) {
        let mut step = self.begin_slot_move(slot, to);
        step.migrate_keys();
        step.finish();
    }

    /// `CLUSTER FAILOVER` on the replica on `replica`, then waits (bounded) until it is a
    /// master and every live node agrees it serves its old master's slots. Returns the port
    /// of the old master (now its replica, if alive).
    pub fn failover(&self, replica: u16) -> u16 {
        let view = self.view();
        let me = view
            .iter()
            .find(|n| n.port == replica)
            .expect("no such node");
        let master_id = me.master_id.clone().expect("not a replica");
        let old = view.iter().find(|n| n.id == master_id).unwrap();
        let (old_port, slots) = (old.port, old.slots.clone());
        let mut con = connect(replica, None).unwrap();
        redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query::<()>(&mut con)
            .unwrap();
        wait_for(&format!("{replica} becomes a master"), SETTLE, || {
            (role(replica, None).ok()? == "master").then_some(())
        });
        self.await_agreement(&format!("{replica} serves {slots:?}"), |nodes| {
            nodes
                .iter()
                .find(|n| n.port == replica)
                .is_some_and(|n| n.master && slots.iter().all(|(a, _)| n.serves(*a)))
        });
        wait_for("the new master accepts writes", SETTLE, || {
            writable_in_cluster(replica).then_some(())
        });
        old_port
    }

    /// Waits (bounded) until every node says `cluster_state:ok`, sees every live node, agrees
    /// with the others on each slot's master, and every replica is in sync.
    pub fn await_settled(&self) {
        let live = self.live_ports();
        for port in &live {
            wait_for(&format!("{port}: cluster_state:ok"), SETTLE, || {
                let mut con = connect(*port, None).ok()?;
                let text: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).ok()?;
                text.lines()
                    .any(|l| l.trim() == "cluster_state:ok")
                    .then_some(())
            });
        }
        wait_for("the nodes agree on the cluster", SETTLE, || {
            let views: Vec<Vec<ClusterNode>> = live
                .iter()
                .map(|p| cluster_nodes(*p).ok())
                .collect::<Option<_>>()?;
            let summary = |v: &Vec<ClusterNode>| {
                let mut s: Vec<Served> = v
                    .iter()
                    .filter(|n| live.contains(&n.port))
                    .map(|n| (n.port, n.master, n.slots.clone()))
                    .collect();
                s.sort();
                s
            };
            let first = summary(&views[0]);
            let covered: u32 = first
                .iter()
                .flat_map(|(_, _, s)| s)
                .map(|(a, b)| u32::from(b - a) + 1)
                .sum();
            (first.len() == live.len()
                && covered == 16384
                && views.iter().all(|v| summary(v) == first)
                && views
                    .iter()
                    .flatten()
                    .all(|n| !live.contains(&n.port) || !n.failing))
            .then_some(())
        });
        for port in &live {
            wait_for(&format!("{port} in sync (if a replica)"), SETTLE, || {
                let mut con = connect(*port, None).ok()?;
                let info = info(&mut con, "replication").ok()?;
                (info.get("role")? == "master" || info.get("master_link_status")? == "up")
                    .then_some(())
            });
        }
    }

    /// Waits (bounded) until `agrees` holds for the `CLUSTER NODES` of every live node.
    fn await_agreement(&self, what: &str, agrees: impl Fn(&[ClusterNode]) -> bool) {
        let live = self.live_ports();
        wait_for(&format!("every node agrees: {what}"), SETTLE, || {
            live.iter()
                .all(|p| cluster_nodes(*p).is_ok_and(|v| agrees(&v)))
                .then_some(())
        });
    }

    /// The temporary directory holding the nodes' cluster config files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Whether a SET of a key of the node's own slots succeeds on `port`.
fn writable_in_cluster(port: u16) -> bool {
    let Ok(nodes) = cluster_nodes(port) else {
        return false;
    };
    let Some(me) = nodes.iter().find(|n| n.port == port) else {
        return false;
    };
    let Some((slot, _)) = me.slots.first() else {
        return false;
    };
    let Ok(mut con) = connect(port, None) else {
        return false;
    };
    redis::cmd("SET")
        .arg(key_in_slot(*slot))
        .arg(1)
        .query::<()>(&mut con)
        .is_ok()
}

/// The cluster slot of `key` (CRC16/XMODEM of its hash tag, or of the whole key, mod 16384),
/// computed here; [`Cluster::slot_of`] asks the server.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let close = key[open + 1..].iter().position(|b| *b == b'}')?;
            (close > 0).then(|| &key[open + 1..open + 1 + close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for byte in tagged {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// A key (`probe-{n}`) that hashes to `slot`.
pub fn key_in_slot(slot: u16) -> String {
    (0u32..10_000_000)
        .map(|i| format!("probe-{{{i}}}"))
        .find(|k| key_slot(k.as_bytes()) == slot)
        .expect("a slot above 16383")
}

/// A slot on its way from one master to another; see [`Cluster::begin_slot_move`].
pub struct SlotMove<'a> {
    cluster: &'a Cluster,
    pub slot: u16,
    pub from: u16,
    pub to: u16,
    to_id: String,
}

impl SlotMove<'_> {
    /// MIGRATEs every key of the slot from the source to the target (bounded: at most 1000
    /// rounds of 100 keys). Returns how many keys moved.
    pub fn migrate_keys(&mut self) -> usize {
        let mut source = connect(self.from, None).unwrap();
        let mut moved = 0;
        for _ in 0..1000 {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(self.slot)
                .arg(100)
                .query(&mut source)
                .unwrap();
            if keys.is_empty() {
                return moved;
            }
            self.migrate(&keys);
            moved += keys.len();
        }
        panic!("slot {} still has keys after 1000 rounds", self.slot);
    }

    /// MIGRATEs just `keys` (of the slot) from the source to the target: with some keys moved
    /// and others not, the slot is half-migrated, as during a `redis-cli --cluster reshard`
    /// between two batches.
    pub fn migrate(&mut self, keys: &[String]) {
        let mut source = connect(self.from, None).unwrap();
        redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(self.to)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("REPLACE")
            .arg("KEYS")
            .arg(keys)
            .query::<()>(&mut source)
            .unwrap();
    }

    /// Moves any keys left, assigns the slot to the target on the target, the source and
    /// every other master, and waits (bounded) until every live node agrees.
    pub fn finish(mut self) {
        self.migrate_keys();
        let mut order = vec![self.to, self.from];
        order.extend(
            self.cluster
                .master_ports()
                .into_iter()
                .filter(|p| *p != self.to && *p != self.from),
        );
        for port in order {
            let mut con = connect(port, None).unwrap();
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(self.slot)
                .arg("NODE")
                .arg(&self.to_id)
                .query::<()>(&mut con)
                .unwrap();
        }
        let (slot, to) = (self.slot, self.to);
        self.cluster
            .await_agreement(&format!("{to} serves slot {slot}"), |nodes| {
                nodes
                    .iter()
                    .find(|n| n.master && n.serves(slot))
                    .is_some_and(|n| n.port == to)
            });
    }
}

// ---------------------------------------------------------------------------------------------
// Independent masters (Redlock)
// ---------------------------------------------------------------------------------------------

/// `n` independent masters, no replication between them: the Redlock setup.
pub struct Masters {
    servers: Vec<RedisServer>,
}

impl Masters {
    pub fn start(n: usize) -> Masters {
        Masters {
            servers: (0..n).map(|_| RedisServer::start()).collect(),
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    pub fn ports(&self) -> Vec<u16> {
        self.servers.iter().map(|s| s.port).collect()
    }

    pub fn len(&self) -> usize {
        self.servers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Master number `i`, to kill, restart, stop or query it.
    pub fn server(&self, i: usize) -> &RedisServer {
        &self.servers[i]
    }

    pub fn server_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.servers[i]
    }
}
