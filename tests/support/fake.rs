//! Fake servers that accept a connection and then misbehave, the way a broken proxy, a server
//! swapping to death or a port that is not Redis at all would. Each runs on a thread per
//! connection and stops when dropped; none sends anything for longer than a minute.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// How a [`FakeServer`] answers.
#[derive(Clone, Copy, Debug)]
pub enum Misbehaviour {
    /// Answers the first `healthy` requests of each connection with `+PONG` (HELLO as Redis
    /// does), then starts a
    /// simple-string reply (`+`) and sends one more byte of it every 100 ms, never ending it.
    Trickle { healthy: usize },
    /// Reads everything, answers nothing.
    Silent,
    /// Answers as a web server does, and closes.
    Http,
    /// Closes each connection as soon as it is made.
    HangUp,
    /// Answers `HELLO` as a Redis server of this version would (RESP2: name/value pairs), or,
    /// for `None`, as one from before 6.0, which does not know `HELLO`; anything else `+OK`.
    Version(Option<&'static str>),
    /// Answers every request with these bytes (`$-5\r\n`, a bulk string of negative length,
    /// which no Redis sends; a claimed 2 GiB bulk; random bytes ...).
    Answer(&'static [u8]),
}

/// What a Redis 7.0 server in standalone mode answers to `HELLO` (RESP2).
pub const HELLO_REPLY: &str = "*6\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n";

/// A loopback listener that misbehaves (see [`Misbehaviour`]); stops on drop.
pub struct FakeServer {
    pub port: u16,
    stop: Arc<AtomicBool>,
}

/// Nothing a fake server does lasts longer than this, whatever the test does.
const LIFETIME: Duration = Duration::from_secs(60);

impl FakeServer {
    pub fn start(how: Misbehaviour) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        thread::spawn(move || {
            let started = Instant::now();
            while !flag.load(Ordering::Relaxed) && started.elapsed() < LIFETIME {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let flag = flag.clone();
                        thread::spawn(move || serve(stream, how, &flag));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        FakeServer { port, stop }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(mut stream: TcpStream, how: Misbehaviour, stop: &AtomicBool) {
    let started = Instant::now();
    let alive = || !stop.load(Ordering::Relaxed) && started.elapsed() < LIFETIME;
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 4096];
    match how {
        Misbehaviour::HangUp => {
            let _ = stream.shutdown(Shutdown::Both);
        }
        Misbehaviour::Http => {
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            let _ = stream.shutdown(Shutdown::Both);
        }
        Misbehaviour::Version(version) => {
            while alive() {
                match stream.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        let request = String::from_utf8_lossy(&buf[..n]).to_uppercase();
                        let reply = match version {
                            _ if !request.contains("HELLO") => "+OK\r\n".to_string(),
                            None => "-ERR unknown command 'HELLO'\r\n".to_string(),
                            Some(v) => format!(
                                "*6\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n${}\r\n{v}\r\n$5\r\nproto\r\n:2\r\n",
                                v.len()
                            ),
                        };
                        if stream.write_all(reply.as_bytes()).is_err() {
                            return;
                        }
                    }
                    Err(_) => continue,
                }
            }
        }
        Misbehaviour::Answer(bytes) => {
            while alive() {
                match stream.read(&mut buf) {
                    Ok(0) => return,
                    Ok(_) => {
                        if stream.write_all(bytes).is_err() {
                            return;
                        }
                    }
                    Err(_) => continue,
                }
            }
        }
        Misbehaviour::Silent => {
            while alive() {
                match stream.read(&mut buf) {
                    Ok(0) => return,
                    _ => continue,
                }
            }
        }
        Misbehaviour::Trickle { healthy } => {
            let mut answered = 0;
            while alive() && answered < healthy {
                match stream.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        // One read per request: the client waits for each answer. HELLO
                        // gets what a Redis server says, so that the client takes it for one.
                        let hello = String::from_utf8_lossy(&buf[..n])
                            .to_uppercase()
                            .contains("HELLO");
                        let reply = if hello { HELLO_REPLY } else { "+PONG\r\n" };
                        if stream.write_all(reply.as_bytes()).is_err() {
                            return;
                        }
                        answered += 1;
                    }
                    Err(_) => continue,
                }
            }
            // Wait for the next request, then never finish its answer.
            while alive() {
                match stream.read(&mut buf) {
                    Ok(0) => return,
                    Ok(_) => break,
                    Err(_) => continue,
                }
            }
            if stream.write_all(b"+").is_err() {
                return;
            }
            while alive() {
                thread::sleep(Duration::from_millis(100));
                if stream.write_all(b"O").is_err() {
                    return;
                }
            }
        }
    }
}
