//! The bank: a thread-per-request HTTP server (std only) whose transfers are guarded by
//! redlatch, writing to a store that checks fencing tokens.
//!
//! - `POST /transfer?from=A&to=B&amount=N`: takes both accounts' locks with one `MultiLock`
//!   (all or none, in name order, so two opposite transfers never deadlock), reads both
//!   balances, and writes both in one script on the store that accepts the write only if each
//!   account's token is at least the last one it accepted. 200 done, 422 insufficient funds,
//!   409 refused by a fence (a holder that lost its lock: nothing written), 503 the locks
//!   were not free within 5 s (or the server is shutting down), 400 a bad request.
//! - `GET /balance?account=A`, `GET /total`.
//!
//! One OS thread per connection, each request on its own thread, as the crate's users write
//! servers; one `redlatch::Client` shared by all of them.
//!
//! Shutting down ([`serve`] once `stop` is set) is clean under load: no new connection is
//! taken, every request waiting for a lock is called off through one `redlatch::Cancel` (it
//! answers 503 at once, out of the queue in Redis, holding nothing), the requests under way
//! finish, idle connections are closed, and `serve` returns once every thread is gone.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// The store's write: every account's balance, if each token is at least the last one that
/// account accepted. KEYS: balance and fence of each account, in pairs; ARGV: token and new
/// balance of each, in pairs, then the ledger key's increment (1). Answers 1 written, 0 refused
/// (nothing written).
const FENCED_TRANSFER: &str = r"
for i = 1, #KEYS / 2 do
  local last = tonumber(redis.call('get', KEYS[2 * i]) or '0')
  if tonumber(ARGV[2 * i - 1]) < last then
    return 0
  end
end
for i = 1, #KEYS / 2 do
  redis.call('set', KEYS[2 * i], ARGV[2 * i - 1])
  redis.call('set', KEYS[2 * i - 1], ARGV[2 * i])
end
redis.call('incr', 'bank:transfers')
return 1
";

/// How transfers are guarded: with locks (the bank), or without (only to show that the load
/// generator's check catches the lost updates that follow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    Locks,
    Nothing,
}

/// The bank's settings.
#[derive(Clone, Debug)]
pub struct Bank {
    pub locks_url: String,
    pub store_url: String,
    pub accounts: usize,
    pub opening_balance: i64,
    pub guard: Guard,
    /// Whose layout the locks are kept in: Redisson's lets Java services that use Redisson
    /// take the same account locks (`getLock("acct-0")`).
    pub layout: redlatch::Layout,
}

impl Bank {
    /// The account names: `acct-0` ...
    pub fn account_names(&self) -> Vec<String> {
        (0..self.accounts).map(|i| format!("acct-{i}")).collect()
    }

    /// Opens every account with the opening balance (and resets the ledger).
    pub fn open_accounts(&self) -> redis::RedisResult<()> {
        let mut store = redis::Client::open(self.store_url.as_str())?.get_connection()?;
        let mut pipe = redis::pipe();
        for account in self.account_names() {
            pipe.set(format!("bank:balance:{account}"), self.opening_balance)
                .del(format!("bank:fence:{account}"));
        }
        pipe.del("bank:transfers");
        pipe.query::<()>(&mut store)
    }
}

/// How a [`serve`] ended: how long the shutdown took, from `stop` seen to the last thread
/// gone, and how many requests waiting for locks it called off.
#[derive(Debug, Default)]
pub struct Served {
    pub shutdown: Duration,
    pub called_off: u64,
}

/// What the connection threads share: the locks' client, the store, the settings, and what
/// a shutdown needs.
struct Shared {
    client: redlatch::Client,
    store: redis::Client,
    bank: Bank,
    /// Every wait for an account's locks watches it: cancelled when the server stops.
    shutdown: redlatch::Cancel,
    called_off: AtomicU64,
}

/// Serves `listener` until `stop` is set: one thread per connection. Then shuts down cleanly
/// (see the module docs) and returns when every connection thread has ended.
pub fn serve(listener: TcpListener, bank: Bank, stop: Arc<AtomicBool>) -> redlatch::Result<Served> {
    // The name goes on every connection: `redlatch --prefix bank inspect acct-0` then says
    // which process holds an account.
    let name = format!("bank@pid-{}", std::process::id());
    let builder = redlatch::Client::builder(&bank.locks_url)
        .layout(bank.layout)
        .pool_size(64)
        .name(&name);
    // Redisson's keys are the names themselves: no prefix there.
    let client = match bank.layout {
        redlatch::Layout::Redisson => builder.build()?,
        _ => builder.key_prefix("bank").build()?,
    };
    let store = redis::Client::open(bank.store_url.as_str()).map_err(redlatch::Error::Redis)?;
    let shared = Arc::new(Shared {
        client,
        store,
        bank,
        shutdown: redlatch::Cancel::new(),
        called_off: AtomicU64::new(0),
    });
    listener
        .set_nonblocking(true)
        .map_err(redlatch::Error::Thread)?;
    // Each connection's thread, and a handle on its socket to close it when we stop.
    let mut connections: Vec<(thread::JoinHandle<()>, TcpStream)> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let Ok(closer) = stream.try_clone() else {
                    continue;
                };
                let shared = shared.clone();
                let thread = thread::spawn(move || handle(stream, &shared));
                connections.push((thread, closer));
                connections.retain(|(thread, _)| !thread.is_finished());
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(2))
            }
            Err(e) => eprintln!("bank: accept failed: {e}"),
        }
    }
    let stopping = Instant::now();
    drop(listener);
    // Requests waiting for locks answer 503 now; those under way finish their transfer.
    shared.shutdown.cancel();
    for (thread, closer) in connections {
        // No next request on this connection: its thread ends after the current one.
        let _ = closer.shutdown(Shutdown::Read);
        let _ = thread.join();
    }
    Ok(Served {
        shutdown: stopping.elapsed(),
        called_off: shared.called_off.load(Ordering::Relaxed),
    })
}

/// One connection: requests one after another (keep-alive), each answered before the next.
fn handle(stream: TcpStream, shared: &Shared) {
    let (client, store, bank) = (&shared.client, &shared.store, &shared.bank);
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let Ok(mut con) = store.get_connection() else {
        return;
    };
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        // Headers, up to the blank line; no request of ours has a body.
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header.trim().is_empty() {
                break;
            }
        }
        let (status, body) = answer(&request_line, client, &mut con, bank, shared);
        let reply = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// The status line's code and reason, and the body, for one request.
fn answer(
    request_line: &str,
    client: &redlatch::Client,
    con: &mut redis::Connection,
    bank: &Bank,
    shared: &Shared,
) -> (&'static str, String) {
    let mut words = request_line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let params: HashMap<&str, &str> = query.split('&').filter_map(|p| p.split_once('=')).collect();
    let known = |name: &str| bank.account_names().iter().any(|a| a == name);
    match (method, path) {
        ("POST", "/transfer") => {
            let (Some(&from), Some(&to), Some(amount)) = (
                params.get("from"),
                params.get("to"),
                params.get("amount").and_then(|a| a.parse::<i64>().ok()),
            ) else {
                return ("400 Bad Request", "from, to and amount, please\n".into());
            };
            if from == to || !known(from) || !known(to) || amount <= 0 {
                return (
                    "400 Bad Request",
                    "two different accounts and a positive amount\n".into(),
                );
            }
            match transfer(client, con, bank, &shared.shutdown, from, to, amount) {
                Ok(outcome) => outcome,
                Err(Transfer::Locks(e)) if e.is_cancelled() => {
                    shared.called_off.fetch_add(1, Ordering::Relaxed);
                    ("503 Service Unavailable", "shutting down\n".into())
                }
                Err(e) => ("500 Internal Server Error", format!("{e}\n")),
            }
        }
        ("GET", "/balance") => match params.get("account") {
            Some(&account) if known(account) => match balance(con, account) {
                Ok(b) => ("200 OK", format!("{b}\n")),
                Err(e) => ("500 Internal Server Error", format!("{e}\n")),
            },
            _ => ("404 Not Found", "no such account\n".into()),
        },
        ("GET", "/total") => {
            let total: redis::RedisResult<i64> =
                bank.account_names().iter().map(|a| balance(con, a)).sum();
            match total {
                Ok(t) => ("200 OK", format!("{t}\n")),
                Err(e) => ("500 Internal Server Error", format!("{e}\n")),
            }
        }
        _ => (
            "404 Not Found",
            "POST /transfer, GET /balance, GET /total\n".into(),
        ),
    }
}

fn balance(con: &mut redis::Connection, account: &str) -> redis::RedisResult<i64> {
    redis::cmd("GET")
        .arg(format!("bank:balance:{account}"))
        .query(con)
}

/// Why a transfer failed: the locks (a cancelled wait among them), or the store.
#[derive(Debug)]
enum Transfer {
    Locks(redlatch::Error),
    Store(redis::RedisError),
}

impl std::fmt::Display for Transfer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transfer::Locks(e) => write!(f, "locks: {e}"),
            Transfer::Store(e) => write!(f, "store: {e}"),
        }
    }
}

impl From<redis::RedisError> for Transfer {
    fn from(e: redis::RedisError) -> Self {
        Transfer::Store(e)
    }
}

/// Moves `amount` from `from` to `to` under both accounts' locks, unless `shutdown` calls the
/// wait for them off.
fn transfer(
    client: &redlatch::Client,
    con: &mut redis::Connection,
    bank: &Bank,
    shutdown: &redlatch::Cancel,
    from: &str,
    to: &str,
    amount: i64,
) -> Result<(&'static str, String), Transfer> {
    let names = [from, to];
    let guard = match bank.guard {
        Guard::Locks => match client
            .multi_lock(&names)
            .cancel_on(shutdown)
            .try_lock(Duration::from_secs(5), None)
            .map_err(Transfer::Locks)?
        {
            Some(guard) => Some(guard),
            None => {
                return Ok((
                    "503 Service Unavailable",
                    "the accounts stayed busy\n".into(),
                ));
            }
        },
        Guard::Nothing => None,
    };
    let (from_balance, to_balance) = (balance(con, from)?, balance(con, to)?);
    if from_balance < amount {
        return Ok(("422 Unprocessable Entity", "insufficient funds\n".into()));
    }
    // A little work between the read and the write, as real handlers do: it is where an
    // unguarded transfer loses another's update.
    thread::sleep(Duration::from_micros(200));
    // Tokens in the order of `names`: the multi-lock gives them in name order.
    let tokens: Vec<u64> = match &guard {
        Some(guard) => {
            let by_name = guard.fencing_tokens();
            let mut sorted = names;
            sorted.sort();
            names
                .iter()
                .map(|n| by_name[sorted.iter().position(|s| s == n).unwrap_or(0)])
                .collect()
        }
        None => vec![0, 0],
    };
    let script = redis::Script::new(FENCED_TRANSFER);
    let mut call = script.prepare_invoke();
    let writes = [(from, from_balance - amount), (to, to_balance + amount)];
    for ((account, new), token) in writes.into_iter().zip(tokens) {
        call.key(format!("bank:balance:{account}"))
            .key(format!("bank:fence:{account}"))
            .arg(token)
            .arg(new);
    }
    let written: i64 = call.invoke(con)?;
    if let Some(guard) = guard {
        // The write is done (or refused) either way: a release that fails only leaves the
        // locks to their lease.
        if let Err(e) = guard.unlock() {
            eprintln!("bank: releasing {from} and {to}: {e}");
        }
    }
    Ok(if written == 1 {
        ("200 OK", format!("moved {amount} from {from} to {to}\n"))
    } else {
        (
            "409 Conflict",
            "refused by the store's fence: the lock was lost\n".into(),
        )
    })
}
