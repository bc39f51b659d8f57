//! `redlatch`: look at redlatch's objects in Redis, and force-unlock one when you must.
//!
//! ```text
//! redlatch list ['invoice:*'] [--fences]      # the objects under the prefix (SCAN)
//! redlatch inspect invoice:42 [--json]        # holders, lease, fence, queue, subscribers
//! redlatch inspect config --kind rwlock       # of that kind only (default: what is there)
//! redlatch force-unlock invoice:42 [--yes]    # the holders' guards report the loss
//! redlatch force-unlock uploads --kind semaphore  # every holder's permits
//! redlatch watch invoice:42                   # hand-overs and releases as they happen
//! redlatch inspect slots --kind counting      # a counting semaphore: its count, its waiters
//! ```
//!
//! Connects like a `redlatch::Client`: `--url` (or `REDIS_URL`) for one server, several
//! `--url` with `--cluster` for a Cluster's seeds, `--sentinel` URLs with `--master` for
//! Sentinel; `--prefix` as the applications use, or `--layout redisson` to read what Java
//! services that use Redisson (and redlatch clients in that layout) keep; with the `tls` feature, `rediss://` URLs and
//! `--ca-cert`, `--client-cert`, `--client-key`.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use redlatch::{Client, Detected, ObjectKind};

mod render;
use render::{
    Clients, describe, json_string, kind_name, kind_names, list_footer, report_json, timestamp,
};

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
    /// The objects whose name matches PATTERN (a Redis glob), found with SCAN. Fencing
    /// counters kept after their object went are counted on one line, not listed.
    List {
        #[arg(default_value = "*")]
        pattern: String,
        /// Also name each fencing counter kept after its object went.
        #[arg(long)]
        fences: bool,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Holders, lease, fencing counter, queue and subscribed waiters of one object; without
    /// --kind, of every object by that name that Redis has (and fails when there is none).
    Inspect {
        name: String,
        /// lock, rwlock, semaphore, latch or counting (a counting semaphore) (default: found
        /// from what is in Redis).
        #[arg(long, value_parser = kind)]
        kind: Option<ObjectKind>,
        /// As JSON (one object per line when several kinds share the name).
        #[arg(long)]
        json: bool,
    },
    /// Frees a lock, read-write lock or semaphore whoever holds it and wakes its waiters;
    /// asks first unless --yes. Without --kind: the one object by that name that is held.
    /// A latch and a counting semaphore have no holder, and are refused.
    ForceUnlock {
        name: String,
        /// lock, rwlock or semaphore (default: found from what is in Redis).
        #[arg(long, value_parser = kind)]
        kind: Option<ObjectKind>,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// Prints every message on an object's channel (hand-overs, releases), with the time.
    Watch {
        name: String,
        /// lock, rwlock, semaphore, latch or counting (default: found from what is in Redis;
        /// a lock when nothing by that name is there yet).
        #[arg(long, value_parser = kind)]
        kind: Option<ObjectKind>,
        /// Stop after this many seconds (default: until interrupted).
        #[arg(long)]
        seconds: Option<u64>,
    },
}

fn kind(name: &str) -> Result<ObjectKind, String> {
    ObjectKind::parse(name).ok_or_else(|| {
        format!(
            "unknown kind {name:?}: one of {}",
            kind_names(&ObjectKind::ALL)
        )
    })
}

/// Why force-unlock refuses a `kind` that nobody holds, or `None` for a kind it frees.
fn no_holder(kind: ObjectKind) -> Option<&'static str> {
    match kind {
        ObjectKind::CountDownLatch => {
            Some("a latch has no holder to free: it opens when counted down to 0")
        }
        ObjectKind::CountingSemaphore => Some(
            "a counting semaphore's permits have no owner to take them from, so nothing can be \
             freed; give permits back from code with CountingSemaphore::add_permits (or release), \
             or set a count never set with try_set_permits",
        ),
        _ => None,
    }
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
    let cli_prefix = cli.prefix.clone();
    match cli.command {
        Command::List {
            pattern,
            fences,
            json,
        } => list(&client, &pattern, fences, json)?,
        Command::Inspect { name, kind, json } => {
            let kinds = match kind {
                Some(kind) => vec![kind],
                None => {
                    let detected = client.detect(&name)?;
                    if detected.found.is_empty() {
                        eprintln!(
                            "{}",
                            not_found(&client, cli_prefix.as_deref(), &name, &detected)
                        );
                        return Ok(ExitCode::FAILURE);
                    }
                    // An object in use hides the leftovers (a fencing counter) of other
                    // kinds by the same name.
                    let any_active = detected.found.iter().any(|o| o.active);
                    detected
                        .found
                        .iter()
                        .filter(|o| o.active || !any_active)
                        .map(|o| o.kind)
                        .collect()
                }
            };
            for (i, kind) in kinds.into_iter().enumerate() {
                let report = client.inspect(kind, &name)?;
                if json {
                    println!("{}", report_json(&report));
                } else {
                    if i > 0 {
                        println!();
                    }
                    print!("{report}");
                }
            }
        }
        Command::ForceUnlock { name, kind, yes } => {
            return force_unlock(&client, cli_prefix.as_deref(), &name, kind, yes);
        }
        Command::Watch {
            name,
            kind,
            seconds,
        } => {
            let kind = match kind {
                Some(kind) => kind,
                None => match watched_kind(&client, &name)? {
                    Ok(kind) => kind,
                    Err(said) => {
                        eprintln!("{said}");
                        return Ok(ExitCode::FAILURE);
                    }
                },
            };
            let duration = seconds.map(Duration::from_secs);
            eprintln!("watching {} {name:?}", kind.as_str());
            let mut clients = Clients::read(&client);
            let layout = client.layout();
            client.watch(kind, &name, duration, |at, payload| {
                println!(
                    "{} {}",
                    timestamp(at),
                    describe(payload, kind, layout, &mut |owner| clients.who(owner))
                );
                std::io::stdout().flush().is_ok()
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `list`: the objects under the pattern, as lines or JSON, with the kept fences if asked.
fn list(client: &Client, pattern: &str, fences: bool, json: bool) -> redlatch::Result<()> {
    let listing = client.listing(pattern)?;
    let shown_fences = if fences {
        &listing.kept_fences[..]
    } else {
        &[]
    };
    // Redisson's one counter per name counts for its lock, read-write lock and
    // semaphore alike: its kind is not known, only what it may be.
    fn fence_kinds(layout: redlatch::Layout, o: &redlatch::Listed) -> &[ObjectKind] {
        match layout {
            redlatch::Layout::Redisson => &redlatch::Listing::REDISSON_FENCED[..],
            _ => std::slice::from_ref(&o.kind),
        }
    }
    let layout = client.layout();
    if json {
        let objects = listing.objects.iter().map(|o| {
            format!(
                "{{\"kind\":\"{}\",\"name\":{},\"active\":{},\"fence_only\":false}}",
                o.kind.as_str(),
                json_string(&o.name),
                o.active
            )
        });
        let fences = shown_fences.iter().map(|o| {
            let kind = match fence_kinds(layout, o) {
                [kind] => format!("\"kind\":\"{}\"", kind.as_str()),
                kinds => {
                    let names: Vec<String> = kinds
                        .iter()
                        .map(|k| format!("\"{}\"", k.as_str()))
                        .collect();
                    format!("\"kind\":null,\"could_be\":[{}]", names.join(","))
                }
            };
            format!(
                "{{{kind},\"name\":{},\"active\":{},\"fence_only\":true}}",
                json_string(&o.name),
                o.active
            )
        });
        let items: Vec<String> = objects.chain(fences).collect();
        println!("[{}]", items.join(","));
    } else {
        for o in &listing.objects {
            let state = if o.active { "in use" } else { "idle" };
            println!("{:<10} {:<7} {}", o.kind.as_str(), state, o.name);
        }
        for o in shown_fences {
            let kinds: Vec<&str> = fence_kinds(layout, o).iter().map(|k| k.as_str()).collect();
            println!("{:<10} {:<7} {}", kinds.join("/"), "fence", o.name);
        }
        // Not on stdout, which scripts read line by line as objects.
        eprint!("{}", list_footer(&listing, fences));
    }
    Ok(())
}

/// `force-unlock NAME`: of the kind given, or the one held, after a confirmation unless `yes`.
fn force_unlock(
    client: &Client,
    cli_prefix: Option<&str>,
    name: &str,
    kind: Option<ObjectKind>,
    yes: bool,
) -> redlatch::Result<ExitCode> {
    if let Some(why) = kind.and_then(no_holder) {
        eprintln!("{why} (force-unlock frees a lock, rwlock or semaphore)");
        return Ok(ExitCode::FAILURE);
    }
    let kind = match kind {
        Some(kind) => kind,
        None => match held_kind(client, cli_prefix, name)? {
            Ok(kind) => kind,
            Err(Unheld::Nothing(said)) => {
                println!("{said}");
                return Ok(ExitCode::SUCCESS);
            }
            Err(Unheld::Refused(said)) => {
                eprintln!("{said}");
                return Ok(ExitCode::FAILURE);
            }
        },
    };
    let what = kind.as_str();
    if !yes && !confirm(what, name) {
        eprintln!("not unlocked");
        return Ok(ExitCode::FAILURE);
    }
    let freed = match kind {
        ObjectKind::ReadWriteLock => client.read_write_lock(name).force_unlock()?,
        ObjectKind::Semaphore => client.semaphore(name).force_unlock()?,
        _ => client.lock(name).force_unlock()?,
    };
    if freed {
        println!("{what} {name:?} force-unlocked: its holders lose it, its waiters were woken");
    } else {
        println!("{what} {name:?} was not locked");
    }
    Ok(ExitCode::SUCCESS)
}

/// Why `force-unlock NAME` without --kind has nothing to free: nothing held (a success), or
/// nothing it can tell or may free (a failure).
enum Unheld {
    Nothing(String),
    Refused(String),
}

/// The kind of the one object called `name` that has holders now, found from what is in
/// Redis; or why there is none.
fn held_kind(
    client: &Client,
    prefix: Option<&str>,
    name: &str,
) -> redlatch::Result<Result<ObjectKind, Unheld>> {
    let detected = client.detect(name)?;
    let holdable = |k: &ObjectKind| no_holder(*k).is_none();
    let held: Vec<ObjectKind> = detected
        .found
        .iter()
        .filter(|o| o.active && holdable(&o.kind))
        .map(|o| o.kind)
        .collect();
    Ok(match held.as_slice() {
        [kind] => Ok(*kind),
        [_, _, ..] => Err(Unheld::Refused(format!(
            "{} objects are called {name:?} and held: {}; say which with --kind",
            held.len(),
            kind_names(&held)
        ))),
        [] if detected.found.iter().any(|o| holdable(&o.kind)) || !detected.could_be.is_empty() => {
            Err(Unheld::Nothing(format!(
                "no lock, rwlock or semaphore {name:?} was locked"
            )))
        }
        [] if !detected.found.is_empty() => {
            let kind = detected.found[0].kind;
            Err(Unheld::Refused(format!(
                "{name:?}: {}",
                no_holder(kind).unwrap_or_default()
            )))
        }
        [] => Err(Unheld::Refused(not_found(client, prefix, name, &detected))),
    })
}

/// The kind of the object called `name` to watch: the one found (the one in use, when
/// several kinds share the name), a lock when nothing is there yet (watching before the
/// first acquisition is fine); an error to print when Redis cannot tell which.
fn watched_kind(client: &Client, name: &str) -> redlatch::Result<Result<ObjectKind, String>> {
    let detected = client.detect(name)?;
    let active: Vec<ObjectKind> = detected
        .found
        .iter()
        .filter(|o| o.active)
        .map(|o| o.kind)
        .collect();
    let candidates = if active.is_empty() {
        detected.found.iter().map(|o| o.kind).collect()
    } else {
        active
    };
    Ok(match candidates.as_slice() {
        [kind] => Ok(*kind),
        [] if detected.is_nothing() => {
            eprintln!("nothing named {name:?} yet: watching its lock (--kind for another kind)");
            Ok(ObjectKind::Lock)
        }
        [] => Err(not_found(client, None, name, &detected)),
        several => Err(format!(
            "{} objects are called {name:?}: {}; say which with --kind",
            several.len(),
            kind_names(several)
        )),
    })
}

/// Why nothing by `name` is shown: nothing there, a count Redis cannot tell, foreign data.
fn not_found(client: &Client, prefix: Option<&str>, name: &str, detected: &Detected) -> String {
    if let Some(found) = &detected.foreign {
        return format!(
            "key {name:?} holds a {found} that is not a {} object; nothing to show",
            match client.layout() {
                redlatch::Layout::Redisson => "Redisson",
                _ => "redlatch",
            }
        );
    }
    if !detected.could_be.is_empty() {
        let named: Vec<&str> = detected.could_be.iter().map(|k| kind_name(*k)).collect();
        let could_be = match named.split_last() {
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        return format!(
            "{name:?} is a count with no permit out and nobody waiting: a {could_be} (or an \
             application's counter), which Redis cannot tell apart; say which with --kind \
             ({})",
            kind_names(&detected.could_be)
        );
    }
    let (under, hint) = match client.layout() {
        redlatch::Layout::Redisson => (String::new(), ""),
        _ => (
            format!(" under prefix {:?}", prefix.unwrap_or("redlatch")),
            "; for Java services' Redisson objects add --layout redisson",
        ),
    };
    format!(
        "nothing named {name:?} in Redis (looked for a lock, read-write lock, semaphore, latch \
         and counting semaphore{under}){hint}"
    )
}

fn confirm(what: &str, name: &str) -> bool {
    eprint!("force-unlock {what} {name:?}? Its holders lose it at once. [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    matches!(answer.trim(), "y" | "Y" | "yes")
}
