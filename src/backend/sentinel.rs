//! Finding the master of a Sentinel-managed deployment, and following it through failovers.
//!
//! Sentinel decides which server is the master; this module only asks, the way the Sentinel
//! client guidelines describe: each sentinel in turn for `SENTINEL GET-MASTER-ADDR-BY-NAME`,
//! then `ROLE` on the server it names (a sentinel may be behind), and the sentinel that
//! answered is asked first next time.
//!
//! Why not `redis::sentinel::SentinelClient`: its discovery runs with no connect and no read
//! timeout, so a stopped sentinel holds the caller for as long as it stays stopped (measured:
//! a SIGSTOPped first sentinel blocked `get_connection()` until SIGCONT), and no lock call may
//! hang. It also looks the master up again on every connection it makes, where we keep the
//! answer until there is a reason to doubt it.
//!
//! Reasons to doubt it, and what follows:
//! - a connection to the master fails, or a write is refused with `READONLY` (the old master
//!   was demoted): the next connection asks again ([`Sentinels::suspect`]);
//! - a thread of its own asks again every [`FOLLOW_INTERVAL`] while the client lives
//!   ([`Sentinels::follow`]), because a master that lost a failover stays writable until
//!   Sentinel demotes it, and a client that kept writing there would hold locks nobody else
//!   can see.
//!
//! A change of master bumps [`Sentinels::generation`]: the pool drops its connections and the
//! subscriber reconnects and wakes its waiters.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use redis::{
    ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisConnectionInfo, RedisError,
    RedisResult, Value,
};

use crossbeam_channel::Receiver;

use super::Backend;
use super::failure::with_context;
use super::link::{Link, LinkSettings};
use crate::error::{Error, Result};

/// How often the renewal thread asks the sentinels whether the master moved.
pub(crate) const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);

/// What the builder was given for a Sentinel deployment.
#[derive(Clone, Debug)]
pub(crate) struct SentinelSpec {
    pub sentinels: Vec<String>,
    pub master_name: String,
    /// Credentials for the master and its replicas (a sentinel's go in its URL).
    pub username: Option<String>,
    pub password: Option<String>,
}

/// The sentinels of one master, and the master they last named.
pub(crate) struct Sentinels {
    /// In the order to ask them; the lock also makes discoveries one at a time.
    sentinels: Mutex<Vec<ConnectionInfo>>,
    master_name: String,
    /// How to talk to whichever server is the master: credentials, TCP settings.
    master_info: RedisConnectionInfo,
    /// Whether the master and its replicas speak TLS: the sentinels' URLs are `rediss://`.
    masters_over_tls: bool,
    /// Timeouts and TLS, for the sentinels and the master alike.
    settings: LinkSettings,
    current: Mutex<Option<Master>>,
    /// `current` may be out of date: ask before using it again.
    stale: AtomicBool,
    generation: AtomicU64,
}

#[derive(Clone)]
struct Master {
    host: String,
    port: u16,
    client: redis::Client,
}

impl Sentinels {
    /// The master name the sentinels are asked for.
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    /// The sentinels' addresses, as given.
    pub fn sentinel_addrs(&self) -> Vec<ConnectionAddr> {
        self.sentinels
            .lock()
            .iter()
            .map(|s| s.addr().clone())
            .collect()
    }

    /// Checks the sentinel URLs and the master name. No I/O.
    pub fn new(spec: &SentinelSpec, settings: &LinkSettings) -> Result<Sentinels> {
        if spec.sentinels.is_empty() {
            return Err(Error::invalid(
                "a Sentinel client needs at least one sentinel",
            ));
        }
        if spec.master_name.is_empty() {
            return Err(Error::invalid("the Sentinel master name is empty"));
        }
        let sentinels = spec
            .sentinels
            .iter()
            .map(|url| {
                let info = super::parse_url("sentinel URL", url)?;
                match info.addr() {
                    ConnectionAddr::Tcp(..) => {}
                    ConnectionAddr::TcpTls { insecure: true, .. } => {
                        return Err(Error::invalid(format!(
                            "sentinel URL {url:?}: #insecure is refused; give the sentinels' \
                             CA to ClientBuilder::tls_certificates instead"
                        )));
                    }
                    ConnectionAddr::TcpTls { .. } => {}
                    _ => {
                        return Err(Error::invalid(format!(
                            "sentinel URL {url:?}: only redis://host:port and \
                             rediss://host:port are supported"
                        )));
                    }
                }
                let settings = info.redis_settings().clone().set_skip_set_lib_name();
                Ok(info.set_redis_settings(settings))
            })
            .collect::<Result<Vec<_>>>()?;
        let over_tls = |info: &ConnectionInfo| matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        let masters_over_tls = over_tls(&sentinels[0]);
        // The scheme of the sentinels says how to reach the master they name (see
        // `master_addr`): sentinels that disagree leave no rule to follow.
        if sentinels.iter().any(|s| over_tls(s) != masters_over_tls) {
            return Err(Error::invalid(
                "the sentinel URLs mix redis:// and rediss://; use one scheme for all",
            ));
        }
        let mut master_info = RedisConnectionInfo::default().set_skip_set_lib_name();
        if let Some(username) = &spec.username {
            master_info = master_info.set_username(username);
        }
        if let Some(password) = &spec.password {
            master_info = master_info.set_password(password);
        }
        Ok(Sentinels {
            sentinels: Mutex::new(sentinels),
            master_name: spec.master_name.clone(),
            master_info,
            masters_over_tls,
            settings: settings.clone(),
            current: Mutex::new(None),
            stale: AtomicBool::new(false),
            generation: AtomicU64::new(0),
        })
    }

    /// Counts the changes of master so far.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// A client for the master: the one last found, or a new discovery.
    /// A client for the master, and the [generation](Sentinels::generation) it belongs to
    /// (read together, so that a connection is never filed under a newer master than its own).
    pub fn master(&self) -> RedisResult<(redis::Client, u64)> {
        if let Some(known) = self.known() {
            return Ok(known);
        }
        let mut sentinels = self.sentinels.lock();
        // Another thread may have found it while this one waited for the lock.
        if let Some(known) = self.known() {
            return Ok(known);
        }
        self.discover(&mut sentinels)?;
        self.known().ok_or_else(|| {
            RedisError::from((ErrorKind::Io, "the master was suspected again at once"))
        })
    }

    /// The master last found, unless suspected since.
    fn known(&self) -> Option<(redis::Client, u64)> {
        let current = self.current.lock();
        let master = current
            .as_ref()
            .filter(|_| !self.stale.load(Ordering::Acquire))?;
        Some((master.client.clone(), self.generation()))
    }

    /// The master may have changed: the next connection asks the sentinels again. The
    /// generation changes only if they name another server.
    pub fn suspect(&self) {
        self.stale.store(true, Ordering::Release);
    }

    /// Asks the sentinels now; whether the master changed.
    pub fn follow(&self) -> RedisResult<bool> {
        let before = self.generation();
        let mut sentinels = self.sentinels.lock();
        self.discover(&mut sentinels)?;
        Ok(self.generation() != before)
    }

    /// Asks each sentinel in turn; the first that names a server which says it is the master
    /// wins, and goes first next time.
    fn discover(&self, sentinels: &mut Vec<ConnectionInfo>) -> RedisResult<Master> {
        let mut failures = Vec::new();
        for i in 0..sentinels.len() {
            match self.ask(&sentinels[i]) {
                Ok(master) => {
                    let answered = sentinels.remove(i);
                    sentinels.insert(0, answered);
                    let mut current = self.current.lock();
                    let moved = current.as_ref().is_none_or(|c| {
                        (c.host.as_str(), c.port) != (master.host.as_str(), master.port)
                    });
                    if moved {
                        if current.is_some() {
                            log::warn!(
                                "Sentinel master {:?} is now {}:{}",
                                self.master_name,
                                master.host,
                                master.port
                            );
                        }
                        self.generation.fetch_add(1, Ordering::AcqRel);
                    }
                    *current = Some(master.clone());
                    self.stale.store(false, Ordering::Release);
                    return Ok(master);
                }
                // Each failure names the sentinel, or the master it named; the kind of the
                // whole is said once, by the error below, not again for each sentinel.
                Err(e) if e.kind() == ErrorKind::MasterNameNotFoundBySentinel => {
                    failures.push(format!(
                        "{}: does not know the master",
                        e.detail().unwrap_or_default()
                    ))
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
        Err(RedisError::from((
            ErrorKind::MasterNameNotFoundBySentinel,
            "no sentinel named a reachable master",
            format!("master {:?}; {}", self.master_name, failures.join("; ")),
        )))
    }

    /// Where to reach the master a sentinel names at `host:port`.
    ///
    /// A sentinel reports only a host and a port, never whether the server speaks TLS there.
    /// The rule redis-py and Redisson follow: a deployment whose sentinels are reached over
    /// TLS runs its masters and replicas over TLS too. With `tls-replication yes` the port
    /// Sentinel reports is the TLS port, since it is the one the replicas replicate from
    /// (and announce). Sentinels, master and subscriber share the client's one TLS
    /// configuration, so one CA must have signed all their certificates.
    fn master_addr(&self, host: &str, port: u16) -> ConnectionAddr {
        if self.masters_over_tls {
            ConnectionAddr::TcpTls {
                host: host.to_string(),
                port,
                // Certificates are checked against the host name Sentinel reports, as for
                // any rediss:// URL; `insecure` sentinel URLs are refused in `new`.
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host.to_string(), port)
        }
    }

    fn link(&self, info: &ConnectionInfo) -> RedisResult<Link> {
        Link::connect(info, &self.settings)
    }

    fn ask(&self, sentinel: &ConnectionInfo) -> RedisResult<Master> {
        let mut con = self.link(sentinel)?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.master_name)
            .query(&mut con)
            .map_err(|e| match e.kind() {
                ErrorKind::Server(_)
                    if e.to_string().to_lowercase().contains("unknown command") =>
                {
                    RedisError::from((
                        ErrorKind::InvalidClientConfig,
                        "not a sentinel",
                        format!(
                            "{} is not a Redis Sentinel (it does not know SENTINEL): give \
                             sentinel_builder the sentinels' addresses, or the server to \
                             Client::open",
                            con.addr()
                        ),
                    ))
                }
                _ => con.refused(e),
            })?;
        let Some((host, port)) = addr else {
            return Err(RedisError::from((
                ErrorKind::MasterNameNotFoundBySentinel,
                "this sentinel does not know the master",
                con.addr().to_string(),
            )));
        };
        let info = self
            .master_addr(&host, port)
            .into_connection_info()?
            .set_redis_settings(self.master_info.clone());
        // The sentinel may not have seen a failover yet: the server itself must agree.
        let role = self
            .link(&info)
            .and_then(|mut master| {
                redis::cmd("ROLE")
                    .query::<Vec<Value>>(&mut master)
                    .map_err(|e| master.refused(e))
            })
            .map_err(|e| with_context(e, format!("{}: the master it names", con.addr())))?;
        let is_master = matches!(role.first(),
            Some(Value::BulkString(r)) if r.as_slice() == b"master");
        if !is_master {
            return Err(RedisError::from((
                ErrorKind::Io,
                "the server this sentinel names is not a master (yet)",
                format!("{}: {host}:{port}", con.addr()),
            )));
        }
        let client = redis::Client::open(info)?;
        Ok(Master { host, port, client })
    }
}

/// The Sentinel follower's body: asks the sentinels every [`Backend::follow_interval`]
/// whether the master moved, until `stop` is disconnected.
///
/// Its own thread, not a step of the renewal loop: asking costs up to a connect and a
/// response timeout per sentinel when they do not answer, and renewals of a healthy master
/// must not wait for that (with three stopped sentinels and a 1 s response timeout, a 2 s
/// watchdog lost every lock). Renewal keeps using the master last found meanwhile.
///
/// [`Backend::follow_interval`]: super::Backend::follow_interval
/// `moved` is called after each change of master: renewals now go to the new master and
/// find there which locks the failover lost, and the subscriber must reconnect.
pub(crate) fn follow(backend: &Backend, stop: Receiver<()>, every: Duration, moved: impl Fn()) {
    loop {
        if backend.follow_master() {
            moved();
        }
        match stop.recv_timeout(every) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sentinels(urls: &[&str]) -> Result<Sentinels> {
        let spec = SentinelSpec {
            sentinels: urls.iter().map(|u| u.to_string()).collect(),
            master_name: "m".into(),
            username: None,
            password: None,
        };
        let settings = LinkSettings {
            connect_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            tls: Default::default(),
            name: None,
        };
        Sentinels::new(&spec, &settings)
    }

    #[test]
    fn plain_sentinels_name_plain_masters() {
        let s = sentinels(&["redis://127.0.0.1:26379", "redis://127.0.0.1:26380"]).unwrap();
        assert!(matches!(s.master_addr("10.0.0.1", 6379),
            ConnectionAddr::Tcp(h, 6379) if h == "10.0.0.1"));
    }

    #[test]
    fn other_transports_are_refused() {
        for url in [
            "redis+unix:///tmp/sentinel.sock",
            "unix:///tmp/sentinel.sock",
        ] {
            assert!(
                matches!(sentinels(&[url]), Err(Error::InvalidArgument(_))),
                "{url}"
            );
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_sentinels_name_tls_masters_and_schemes_must_agree() {
        let s = sentinels(&["rediss://127.0.0.1:26379", "rediss://localhost:26380"]).unwrap();
        assert!(matches!(s.master_addr("10.0.0.1", 6380),
            ConnectionAddr::TcpTls { host, port: 6380, insecure: false, tls_params: None }
                if host == "10.0.0.1"));
        for urls in [
            ["redis://127.0.0.1:26379", "rediss://127.0.0.1:26380"],
            ["rediss://127.0.0.1:26379", "redis://127.0.0.1:26380"],
        ] {
            assert!(
                matches!(sentinels(&urls), Err(Error::InvalidArgument(_))),
                "{urls:?}"
            );
        }
        assert!(matches!(
            sentinels(&["rediss://127.0.0.1:26379/#insecure"]),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_sentinels_need_the_tls_feature() {
        assert!(matches!(
            sentinels(&["rediss://127.0.0.1:26379"]),
            Err(Error::InvalidArgument(_))
        ));
    }
}
