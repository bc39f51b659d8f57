//! The bank's load generator: many HTTP clients making random transfers at once, then the
//! check that no money appeared or vanished and no acknowledged transfer was lost.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// What a load run saw.
#[derive(Debug, Default)]
pub struct Summary {
    pub requests: u64,
    pub done: u64,
    pub insufficient: u64,
    pub fenced: u64,
    pub busy: u64,
    pub failed: u64,
    pub seconds: f64,
    pub latency_p50: Duration,
    pub latency_p99: Duration,
    /// The bank's total before and after.
    pub total_before: i64,
    pub total_after: i64,
    /// Accounts whose balance differs from what the acknowledged transfers add up to.
    pub lost_updates: Vec<String>,
}

impl Summary {
    /// Money neither made nor lost, and every acknowledged transfer in the balances.
    pub fn holds(&self) -> bool {
        self.total_before == self.total_after && self.lost_updates.is_empty() && self.failed == 0
    }

    pub fn print(&self) {
        println!(
            "{} requests in {:.1} s ({:.0}/s): {} transfers done, {} refused for funds, \
             {} refused by a fence, {} timed out on busy accounts, {} failed",
            self.requests,
            self.seconds,
            self.requests as f64 / self.seconds.max(1e-9),
            self.done,
            self.insufficient,
            self.fenced,
            self.busy,
            self.failed
        );
        println!(
            "latency p50 {:?}, p99 {:?}; total before {}, after {}",
            self.latency_p50, self.latency_p99, self.total_before, self.total_after
        );
        if self.holds() {
            println!("verdict: the books balance (no money made or lost, no update lost)");
        } else {
            println!(
                "verdict: BROKEN: total {} -> {}, accounts off the ledger: {:?}",
                self.total_before, self.total_after, self.lost_updates
            );
        }
    }
}

/// A keep-alive HTTP/1.1 connection to the bank.
pub struct Http {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Http {
    pub fn connect(addr: &str) -> std::io::Result<Http> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Http {
            writer: stream.try_clone()?,
            reader: BufReader::new(stream),
        })
    }

    /// The status code and body of `method path`.
    pub fn call(&mut self, method: &str, path: &str) -> std::io::Result<(u16, String)> {
        write!(
            self.writer,
            "{method} {path} HTTP/1.1\r\nHost: bank\r\n\r\n"
        )?;
        let mut status = String::new();
        self.reader.read_line(&mut status)?;
        let code = status
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line {status:?}")))?;
        let mut length = 0;
        loop {
            let mut header = String::new();
            if self.reader.read_line(&mut header)? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let header = header.trim();
            if header.is_empty() {
                break;
            }
            if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body)?;
        Ok((code, String::from_utf8_lossy(&body).into_owned()))
    }

    fn number(&mut self, path: &str) -> std::io::Result<i64> {
        let (code, body) = self.call("GET", path)?;
        if code != 200 {
            return Err(std::io::Error::other(format!("{path}: {code} {body}")));
        }
        body.trim()
            .parse()
            .map_err(|_| std::io::Error::other(format!("{path}: {body:?}")))
    }
}

/// Runs `clients` HTTP clients against the bank at `addr` for `duration`, each making random
/// transfers of 1 to 20 between `accounts`, then checks the books.
pub fn run(
    addr: &str,
    accounts: &[String],
    clients: usize,
    duration: Duration,
) -> std::io::Result<Summary> {
    let mut admin = Http::connect(addr)?;
    let before: Vec<i64> = accounts
        .iter()
        .map(|a| admin.number(&format!("/balance?account={a}")))
        .collect::<Result<_, _>>()?;
    let total_before = admin.number("/total")?;
    // What the acknowledged transfers did to each account.
    let deltas: Arc<Vec<AtomicU64>> =
        Arc::new(accounts.iter().map(|_| AtomicU64::new(0)).collect());
    let started = Instant::now();
    let end = started + duration;
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let (addr, accounts, deltas) = (addr.to_string(), accounts.to_vec(), deltas.clone());
            thread::spawn(move || -> std::io::Result<(Summary, Vec<Duration>)> {
                let mut http = Http::connect(&addr)?;
                let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (c as u64 + 1).wrapping_mul(0x2545_f491);
                let mut next = move |n: u64| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed % n
                };
                let mut mine = Summary::default();
                let mut latencies = Vec::new();
                // Bounded in time, and in count for a machine that answers absurdly fast.
                while Instant::now() < end && mine.requests < 1_000_000 {
                    let from = next(accounts.len() as u64) as usize;
                    let to = (from + 1 + next(accounts.len() as u64 - 1) as usize) % accounts.len();
                    let amount = 1 + next(20) as i64;
                    let path = format!(
                        "/transfer?from={}&to={}&amount={amount}",
                        accounts[from], accounts[to]
                    );
                    let sent = Instant::now();
                    let outcome = http.call("POST", &path);
                    latencies.push(sent.elapsed());
                    mine.requests += 1;
                    match outcome {
                        Ok((200, _)) => {
                            mine.done += 1;
                            // Two's complement in an unsigned atomic: wrapping adds.
                            deltas[from].fetch_sub(amount as u64, Ordering::Relaxed);
                            deltas[to].fetch_add(amount as u64, Ordering::Relaxed);
                        }
                        Ok((422, _)) => mine.insufficient += 1,
                        Ok((409, _)) => mine.fenced += 1,
                        Ok((503, _)) => mine.busy += 1,
                        Ok(_) | Err(_) => {
                            mine.failed += 1;
                            http = Http::connect(&addr)?;
                        }
                    }
                }
                Ok((mine, latencies))
            })
        })
        .collect();
    let mut summary = Summary::default();
    let mut latencies = Vec::new();
    for h in handles {
        let (mine, l) = h
            .join()
            .map_err(|_| std::io::Error::other("a client panicked"))??;
        summary.requests += mine.requests;
        summary.done += mine.done;
        summary.insufficient += mine.insufficient;
        summary.fenced += mine.fenced;
        summary.busy += mine.busy;
        summary.failed += mine.failed;
        latencies.extend(l);
    }
    summary.seconds = started.elapsed().as_secs_f64();
    latencies.sort();
    let at = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    summary.latency_p50 = at(0.5);
    summary.latency_p99 = at(0.99);
    summary.total_before = total_before;
    summary.total_after = admin.number("/total")?;
    for (i, account) in accounts.iter().enumerate() {
        let expected = before[i].wrapping_add(deltas[i].load(Ordering::Relaxed) as i64);
        let now = admin.number(&format!("/balance?account={account}"))?;
        if now != expected {
            summary
                .lost_updates
                .push(format!("{account}: {now}, ledger says {expected}"));
        }
    }
    Ok(summary)
}
