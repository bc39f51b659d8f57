//! `redlatch`: look at redlatch's objects in Redis, and force-unlock one when you must.
//!
//! ```text
//! redlatch list ['invoice:*']                 # the objects under the prefix (SCAN)
//! redlatch inspect invoice:42 [--json]        # holders, lease, fence, queue, subscribers
//! redlatch inspect config --kind rwlock
//! redlatch force-unlock invoice:42 [--yes]    # the holder's guard reports the loss
//! redlatch force-unlock config --kind rwlock  # every reader and the writer
//! redlatch watch invoice:42                   # hand-overs and releases as they happen
//! ```
//!
//! Connects like a `redlatch::Client`: `--url` (or `REDIS_URL`) for one server, several
//! `--url` with `--cluster` for a Cluster's seeds, `--sentinel` URLs with `--master` for
//! Sentinel; `--prefix` as the applications use, or `--layout redisson` to read what Java
//! services that use Redisson (and redlatch clients in that layout) keep; with the `tls` feature, `rediss://` URLs and
//! `--ca-cert`, `--client-cert`, `--client-key`.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};
use redlatch::{Client, ObjectKind, Report};

#[derive(Parser)]
#[command(
    name = "redlatch",
    version,
    about = "Look at redlatch's locks in Redis"
)]
struct Cli {
    /// A server's URL; several with --cluster (the seeds), or the sentinels with --sentinel.
    #[arg(
        long = "url",
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379/",
        value_delimiter = ',',
        global = true
    )]
    urls: Vec<String>,
    /// The URLs are seed nodes of a Redis Cluster.
    #[arg(long, global = true)]
    cluster: bool,
    /// The URLs are sentinels; --master names the master.
    #[arg(long, global = true, requires = "master")]
    sentinel: bool,
    /// The master's name, with --sentinel.
    #[arg(long, global = true)]
    master: Option<String>,
    /// The applications' key prefix [default: redlatch]; none in the Redisson layout.
    #[arg(long, global = true)]
    prefix: Option<String>,
    /// Whose data layout to read: redlatch's, or redisson's (Java services' Redisson 4.x
    /// objects, and redlatch clients built with Layout::Redisson).
    #[arg(long, global = true, default_value = "redlatch", value_parser = ["redlatch", "redisson"])]
    layout: String,
    /// A CA certificate (PEM) to trust for rediss:// servers.
    #[cfg(feature = "tls")]
    #[arg(long, global = true)]
    ca_cert: Option<std::path::PathBuf>,
    /// A client certificate (PEM), for servers that ask for one; with --client-key.
    #[cfg(feature = "tls")]
    #[arg(long, global = true, requires = "client_key")]
    client_cert: Option<std::path::PathBuf>,
    /// The client certificate's key (PEM).
    #[cfg(feature = "tls")]
    #[arg(long, global = true, requires = "client_cert")]
    client_key: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The objects whose name matches PATTERN (a Redis glob), found with SCAN.
    List {
        #[arg(default_value = "*")]
        pattern: String,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Holders, lease, fencing counter, queue and subscribed waiters of one object.
    Inspect {
        name: String,
        /// lock, rwlock, semaphore or latch.
        #[arg(long, default_value = "lock", value_parser = kind)]
        kind: ObjectKind,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Frees a lock or read-write lock whoever holds it and wakes its waiters; asks first
    /// unless --yes. Without --kind: the lock, or else the read-write lock, of that name.
    ForceUnlock {
        name: String,
        /// lock or rwlock (default: whichever is held).
        #[arg(long, value_parser = kind)]
        kind: Option<ObjectKind>,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// Prints every message on an object's channel (hand-overs, releases), with the time.
    Watch {
        name: String,
        #[arg(long, default_value = "lock", value_parser = kind)]
        kind: ObjectKind,
        /// Stop after this many seconds (default: until interrupted).
        #[arg(long)]
        seconds: Option<u64>,
    },
}

fn kind(name: &str) -> Result<ObjectKind, String> {
    ObjectKind::parse(name)
        .ok_or_else(|| format!("unknown kind {name:?}: one of lock, rwlock, semaphore, latch"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("redlatch: {e}");
            ExitCode::FAILURE
        }
    }
}

fn connect(cli: &Cli) -> redlatch::Result<Client> {
    let urls: Vec<&str> = cli.urls.iter().map(String::as_str).collect();
    let builder = if cli.sentinel {
        Client::sentinel_builder(&urls, cli.master.as_deref().unwrap_or_default())
    } else if cli.cluster {
        Client::cluster_builder(&urls)
    } else {
        match urls.as_slice() {
            [url] => Client::builder(url),
            _ => {
                return Err(redlatch::Error::InvalidArgument(
                    "several --url need --cluster or --sentinel".into(),
                ));
            }
        }
    };
    #[cfg_attr(not(feature = "tls"), allow(unused_mut))]
    let mut builder = match cli.layout.as_str() {
        "redisson" => builder.layout(redlatch::Layout::Redisson),
        _ => builder,
    };
    if let Some(prefix) = &cli.prefix {
        builder = builder.key_prefix(prefix);
    }
    #[cfg(feature = "tls")]
    if cli.ca_cert.is_some() || cli.client_cert.is_some() {
        let read = |path: &std::path::Path| {
            std::fs::read(path)
                .map_err(|e| redlatch::Error::InvalidArgument(format!("{}: {e}", path.display())))
        };
        let root_cert = cli.ca_cert.as_deref().map(read).transpose()?;
        let client_tls = match (&cli.client_cert, &cli.client_key) {
            (Some(cert), Some(key)) => Some(redlatch::ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            _ => None,
        };
        builder = builder.tls_certificates(redlatch::TlsCertificates {
            root_cert,
            client_tls,
        });
    }
    builder.build()
}

fn run(cli: Cli) -> redlatch::Result<ExitCode> {
    let client = connect(&cli)?;
    match cli.command {
        Command::List { pattern, json } => {
            let found = client.list(&pattern)?;
            if json {
                let items: Vec<String> = found
                    .iter()
                    .map(|o| {
                        format!(
                            "{{\"kind\":\"{}\",\"name\":{},\"active\":{}}}",
                            o.kind.as_str(),
                            json_string(&o.name),
                            o.active
                        )
                    })
                    .collect();
                println!("[{}]", items.join(","));
            } else {
                for o in &found {
                    let state = if o.active { "in use" } else { "idle" };
                    println!("{:<10} {:<7} {}", o.kind.as_str(), state, o.name);
                }
            }
        }
        Command::Inspect { name, kind, json } => {
            let report = client.inspect(kind, &name)?;
            if json {
                println!("{}", report_json(&report));
            } else {
                print!("{report}");
            }
        }
        Command::ForceUnlock { name, kind, yes } => {
            if matches!(
                kind,
                Some(ObjectKind::Semaphore | ObjectKind::CountDownLatch)
            ) {
                eprintln!("force-unlock frees a lock or an rwlock");
                return Ok(ExitCode::FAILURE);
            }
            if !yes && !confirm(&name) {
                eprintln!("not unlocked");
                return Ok(ExitCode::FAILURE);
            }
            // A lock first unless --kind says otherwise; not held (or, in Redisson's layout,
            // a read-write lock's hash, which the lock refuses), the read-write lock.
            let what = match kind {
                Some(ObjectKind::ReadWriteLock) => None,
                _ => match client.lock(&name).force_unlock() {
                    Ok(true) => Some("lock"),
                    Ok(false) if kind.is_some() => {
                        println!("lock {name:?} was not locked");
                        return Ok(ExitCode::SUCCESS);
                    }
                    Ok(false) => None,
                    Err(redlatch::Error::WrongType { .. }) if kind.is_none() => None,
                    Err(e) => return Err(e),
                },
            };
            let what = match what {
                Some(what) => what,
                None if client.read_write_lock(&name).force_unlock()? => "rwlock",
                None => {
                    println!("no lock or rwlock {name:?} was locked");
                    return Ok(ExitCode::SUCCESS);
                }
            };
            println!("{what} {name:?} force-unlocked: its holders lose it, its waiters were woken");
        }
        Command::Watch {
            name,
            kind,
            seconds,
        } => {
            let duration = seconds.map(Duration::from_secs);
            eprintln!("watching {} {name:?}", kind.as_str());
            let mut clients = Clients::read(&client);
            client.watch(kind, &name, duration, |at, payload| {
                println!(
                    "{} {}",
                    timestamp(at),
                    describe(payload, &mut |owner| clients.who(owner))
                );
                std::io::stdout().flush().is_ok()
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn confirm(name: &str) -> bool {
    eprint!("force-unlock lock {name:?}? Its holder loses it at once. [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    matches!(answer.trim(), "y" | "Y" | "yes")
}

fn report_json(r: &Report) -> String {
    let opt = |v: Option<u64>| v.map_or("null".to_string(), |v| v.to_string());
    let holders: Vec<String> = r
        .holders
        .iter()
        .map(|h| {
            format!(
                "{{\"owner\":{},\"count\":{},\"token\":{},\"lease_left_ms\":{},\"writer\":{},\"client_name\":{},\"client_addr\":{}}}",
                json_string(&h.owner),
                h.count,
                opt(h.token),
                opt(h.lease_left.map(|d| d.as_millis() as u64)),
                h.writer,
                opt_string(h.client_name.as_deref()),
                opt_string(h.client_addr.as_deref()),
            )
        })
        .collect();
    let queue: Vec<String> = r
        .queue
        .iter()
        .map(|w| {
            format!(
                "{{\"owner\":{},\"terms\":{},\"valid_for_ms\":{},\"handover_lease_ms\":{},\"permits\":{},\"writer\":{},\"granted\":{},\"client_name\":{},\"client_addr\":{}}}",
                json_string(&w.owner),
                json_string(&w.terms),
                opt(w.valid_for.map(|d| d.as_millis() as u64)),
                opt(w.handover_lease.map(|d| d.as_millis() as u64)),
                opt(w.permits),
                w.writer,
                opt(w.granted),
                opt_string(w.client_name.as_deref()),
                opt_string(w.client_addr.as_deref()),
            )
        })
        .collect();
    format!(
        "{{\"kind\":\"{}\",\"name\":{},\"key\":{},\"ttl_ms\":{},\"fence\":{},\"subscribers\":{},\"count\":{},\"holders\":[{}],\"queue\":[{}]}}",
        r.kind.as_str(),
        json_string(&r.name),
        json_string(&r.key),
        opt(r.ttl.map(|d| d.as_millis() as u64)),
        opt(r.fence),
        r.subscribers,
        opt(r.count),
        holders.join(","),
        queue.join(",")
    )
}

/// `s` as a JSON string, or `null`.
fn opt_string(s: Option<&str>) -> String {
    s.map_or("null".to_string(), json_string)
}

/// An owner id with the name and address of its client, where known:
/// `4e73…:1 (api@host-7 at 10.0.0.7:53422)`.
fn who(owner: &str, name: Option<&str>, addr: Option<&str>) -> String {
    match (name, addr) {
        (Some(name), Some(addr)) => format!("{owner} ({name} at {addr})"),
        (Some(name), None) => format!("{owner} ({name})"),
        _ => owner.to_string(),
    }
}

/// The clients connected to Redis, by id, for `watch` to name the owners in its messages;
/// read again when an owner of a client not seen yet shows up (at most once a second).
struct Clients<'a> {
    client: &'a Client,
    known: Vec<redlatch::ConnectedClient>,
    read_at: std::time::Instant,
}

impl<'a> Clients<'a> {
    fn read(client: &'a Client) -> Clients<'a> {
        Clients {
            client,
            known: client.connected_clients().unwrap_or_default(),
            read_at: std::time::Instant::now(),
        }
    }

    /// `owner` with its client's name and address, if they can be found.
    fn who(&mut self, owner: &str) -> String {
        let id = owner.split(':').next().unwrap_or_default();
        let find = |known: &[redlatch::ConnectedClient]| {
            known
                .iter()
                .find(|c| c.id == id)
                .map(|c| (c.name.clone(), c.addr.clone()))
        };
        let mut found = find(&self.known);
        if found.is_none() && self.read_at.elapsed() >= Duration::from_secs(1) {
            *self = Clients::read(self.client);
            found = find(&self.known);
        }
        match found {
            Some((name, addr)) => who(owner, Some(&name), Some(&addr)),
            None => owner.to_string(),
        }
    }
}

/// `s` as a JSON string.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A channel message, in words, with each owner said by `who` (which names its client).
fn describe(payload: &str, who: &mut dyn FnMut(&str) -> String) -> String {
    let words: Vec<&str> = payload.split(' ').collect();
    match words.as_slice() {
        ["grant", token, lease, owner, rest @ ..] => {
            let lease = match lease.parse::<u64>() {
                Ok(ms) if ms % 1000 == 0 => format!("{} s", ms / 1000),
                _ => format!("{lease} ms"),
            };
            let mut text = format!(
                "handed over with token {token} and a lease of {lease} to {}",
                who(owner)
            );
            for pair in rest.chunks(2) {
                if let [token, owner] = pair {
                    text.push_str(&format!("; with token {token} to {}", who(owner)));
                }
            }
            text
        }
        ["unlock"] => "released; nobody live was queued: one waiter per client woken to try".into(),
        ["force"] => "force-unlocked: every waiter woken".into(),
        ["open"] => "the latch reached zero: every waiter released".into(),
        _ => format!("(not redlatch's) {payload:?}"),
    }
}

/// `at` as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC).
fn timestamp(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_and_json_strings() {
        let at = UNIX_EPOCH + Duration::from_millis(1_795_548_688_566);
        assert_eq!(timestamp(at), "2026-11-24T19:31:28.566Z");
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(json_string("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
        assert_eq!(
            describe("grant 7 500 c:1 8 c:2", &mut |o| format!("{o} (api)")),
            "handed over with token 7 and a lease of 500 ms to c:1 (api); with token 8 to c:2 (api)"
        );
        assert_eq!(
            describe("grant 7 30000 c:1", &mut |o| o.to_string()),
            "handed over with token 7 and a lease of 30 s to c:1"
        );
    }
}
