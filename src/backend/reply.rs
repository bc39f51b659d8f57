//! Reads the RESP2 replies of a [`Link`](super::link::Link) from a buffer of its own.
//!
//! # Why not `redis::Parser`
//! It reads through `combine`'s buffered decoder, which zeroes its whole spare buffer (8 KiB)
//! before every read of the socket. For the few dozen bytes a script call answers, that was
//! most of the parser's cost: callgrind counted 17,500 instructions per lock and unlock in
//! `Parser::parse_value`, 11,400 of them in `memset`, out of the 63,000 the client spent on
//! the cycle. Here the buffer is zeroed once, when it grows, and a reply is parsed when its
//! bytes are all in.
//!
//! A reply that arrives in several reads is parsed again from its start after each: nothing
//! for the replies of our commands (a few dozen bytes; an inspection or a renewal pipeline of
//! some thousands of items, in a handful of reads), quadratic for one of millions of items,
//! which no command of ours asks for.
//!
//! The replies are the `redis` crate's [`Value`]s, as its parser makes them for RESP2, so that
//! everything above a link (`FromRedisValue`, the cluster connection's redirections) works
//! unchanged. A server's error is handed to that parser, so it is classified exactly as the
//! crate classifies it; errors are rare, and not worth a copy of its table.
//!
//! The subscriber has a RESP2 reader of its own (`subscriber/resp.rs`) for another job: its
//! sockets never block, and anyone may publish a huge message on a channel it listens on,
//! which it must read past without keeping. A link's replies answer our own commands, are
//! read whole, and are handed on as the crate's values. The two share how a line's end and
//! an integer are found ([`line_end`], [`parse_integer`]).

use std::io::{self, Read};

use redis::{RedisError, RedisResult, Value};

/// How large the buffer starts.
const INITIAL: usize = 4096;
/// A buffer grown past this (for a long reply) shrinks back to [`INITIAL`] once it is empty,
/// so that an idle link in the pool holds no more than that.
const KEPT: usize = 64 * 1024;
/// Arrays nested deeper than this are refused, as the `redis` crate refuses them, so that a
/// corrupt stream cannot exhaust the stack.
const MAX_DEPTH: usize = 100;

/// The bytes read from one connection and not yet handed out as replies.
pub(crate) struct Replies {
    /// Zeroed when it grows, so that the socket reads straight into it.
    buf: Vec<u8>,
    /// `buf[start..end]` holds the bytes read and not yet handed out.
    start: usize,
    end: usize,
}

impl Default for Replies {
    fn default() -> Self {
        Replies {
            buf: vec![0; INITIAL],
            start: 0,
            end: 0,
        }
    }
}

impl Replies {
    /// The next whole reply, reading from `source` until it is in. A failure of `source`
    /// (a timeout, a closed connection) is returned as is; bytes that are not RESP2 fail
    /// with a parse error. Either way the stream may be out of step: the caller must stop
    /// reading it.
    pub fn next(&mut self, source: &mut impl Read) -> RedisResult<Value> {
        loop {
            if let Some((value, used)) = parse(&self.buf[self.start..self.end], 0)? {
                self.start += used;
                if self.start == self.end {
                    self.start = 0;
                    self.end = 0;
                    if self.buf.len() > KEPT {
                        self.buf = vec![0; INITIAL];
                    }
                }
                return Ok(value);
            }
            self.fill(source)?;
        }
    }

    /// Reads what `source` has into the free end of the buffer, making room first.
    fn fill(&mut self, source: &mut impl Read) -> io::Result<()> {
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                self.buf.resize(self.buf.len() * 2, 0);
            }
        }
        let read = loop {
            match source.read(&mut self.buf[self.end..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        if read == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        self.end += read;
        Ok(())
    }
}

/// The reply at the start of `buf` and how many bytes it took; `None` while `buf` holds only
/// part of it.
fn parse(buf: &[u8], depth: usize) -> RedisResult<Option<(Value, usize)>> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let Some(line_end) = line_end(buf) else {
        return Ok(None);
    };
    let line = &buf[1..line_end];
    let next = line_end + 2;
    let value = match kind {
        b'+' if line == b"OK" => Value::Okay,
        b'+' => match std::str::from_utf8(line) {
            Ok(text) => Value::SimpleString(text.to_string()),
            Err(_) => return Err(malformed("a simple string that is not UTF-8")),
        },
        b':' => Value::Int(integer(line)?),
        // Parsed by the `redis` crate, so that its kind (MOVED, NOSCRIPT, ...) is its own.
        b'-' => redis::parse_redis_value(&buf[..next])?,
        b'$' => {
            let Some(len) = length(line)? else {
                return Ok(Some((Value::Nil, next)));
            };
            let Some(end) = next
                .checked_add(len)
                .filter(|end| end.checked_add(2).is_some_and(|e| e <= buf.len()))
            else {
                return Ok(None);
            };
            if &buf[end..end + 2] != b"\r\n" {
                return Err(malformed("a bulk string not ended by CRLF"));
            }
            return Ok(Some((Value::BulkString(buf[next..end].to_vec()), end + 2)));
        }
        b'*' => {
            let Some(len) = length(line)? else {
                return Ok(Some((Value::Nil, next)));
            };
            if depth >= MAX_DEPTH {
                return Err(malformed("arrays nested too deep"));
            }
            // Each item takes at least 3 bytes: a header's length is not trusted further.
            let mut items = Vec::with_capacity(len.min((buf.len() - next) / 3));
            let mut at = next;
            for _ in 0..len {
                let Some((item, used)) = parse(&buf[at..], depth + 1)? else {
                    return Ok(None);
                };
                items.push(item);
                at += used;
            }
            return Ok(Some((Value::Array(items), at)));
        }
        // Only RESP2 is spoken on a link (no HELLO 3), so nothing else can come.
        _ => return Err(malformed("a reply type that is not RESP2")),
    };
    Ok(Some((value, next)))
}

/// Where the line that starts `buf` ends (a RESP line: its type byte, then text): the index of
/// its CR. The subscriber's reader (`subscriber/resp.rs`) finds its lines with this too.
pub(crate) fn line_end(buf: &[u8]) -> Option<usize> {
    // Past the type byte, which may be anything.
    let mut from = 1;
    loop {
        let cr = from + buf.get(from..)?.iter().position(|&b| b == b'\r')?;
        if *buf.get(cr + 1)? == b'\n' {
            return Some(cr);
        }
        from = cr + 1;
    }
}

/// A bulk string's or an array's length; `None` for a negative one (RESP2's nil, as the
/// `redis` crate reads any negative length). One beyond this machine's address space is no
/// reply we can read.
fn length(line: &[u8]) -> RedisResult<Option<usize>> {
    let len = integer(line)?;
    if len < 0 {
        return Ok(None);
    }
    usize::try_from(len)
        .map(Some)
        .map_err(|_| malformed("a length beyond this machine's memory"))
}

fn integer(line: &[u8]) -> RedisResult<i64> {
    parse_integer(line).ok_or_else(|| malformed("an integer that is not one"))
}

/// The value of a RESP integer line (a length, or a `:` reply's), if it is one. The
/// subscriber's reader parses its integers with this too.
pub(crate) fn parse_integer(line: &[u8]) -> Option<i64> {
    std::str::from_utf8(line).ok()?.parse().ok()
}

fn malformed(what: &'static str) -> RedisError {
    RedisError::from((
        redis::ErrorKind::Parse,
        "the server's reply is not RESP2",
        what.to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source that gives its bytes `step` at a time.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    /// Every reply in `wire`, read with `step` bytes per read, beside the `redis` crate's.
    fn both(wire: &[u8], step: usize, count: usize) -> (Vec<Value>, Vec<Value>) {
        let mut ours = Vec::new();
        let mut replies = Replies::default();
        let mut source = Trickle { bytes: wire, step };
        for _ in 0..count {
            ours.push(replies.next(&mut source).unwrap());
        }
        assert!(replies.next(&mut source).is_err(), "nothing more to read");
        let mut theirs = Vec::new();
        let mut parser = redis::Parser::new();
        let mut rest = wire;
        for _ in 0..count {
            theirs.push(parser.parse_value(&mut rest).unwrap());
        }
        (ours, theirs)
    }

    #[test]
    fn replies_read_as_the_redis_crate_reads_them() {
        let long = vec![b'x'; 3 * KEPT];
        let mut wire = Vec::new();
        wire.extend_from_slice(b"+OK\r\n+QUEUED\r\n:-42\r\n$-1\r\n*-1\r\n$0\r\n\r\n");
        wire.extend_from_slice(
            b"$5\r\na\r\nbc\r\n*0\r\n*3\r\n:1\r\n*2\r\n$1\r\nx\r\n$-1\r\n+s\r\n",
        );
        wire.extend_from_slice(b"-ERR unknown command\r\n-NOSCRIPT No matching script\r\n");
        wire.extend_from_slice(b"-MOVED 3999 127.0.0.1:6381\r\n*2\r\n:1\r\n-WRONGTYPE lock\r\n");
        wire.extend_from_slice(format!("${}\r\n", long.len()).as_bytes());
        wire.extend_from_slice(&long);
        wire.extend_from_slice(b"\r\n:7\r\n");
        for step in [1, 2, 3, 7, 4096, usize::MAX] {
            let (ours, theirs) = both(&wire, step, 15);
            assert_eq!(ours, theirs, "read {step} bytes at a time");
        }
    }

    #[test]
    fn the_buffer_shrinks_back_after_a_long_reply() {
        let mut wire = format!("${}\r\n", 2 * KEPT).into_bytes();
        wire.extend(std::iter::repeat_n(b'y', 2 * KEPT));
        wire.extend_from_slice(b"\r\n:1\r\n");
        let mut replies = Replies::default();
        let mut source = Trickle {
            bytes: &wire,
            step: 8192,
        };
        let Value::BulkString(long) = replies.next(&mut source).unwrap() else {
            panic!("a bulk string");
        };
        assert_eq!(long.len(), 2 * KEPT);
        assert_eq!(replies.next(&mut source).unwrap(), Value::Int(1));
        assert_eq!(replies.buf.len(), INITIAL);
    }

    #[test]
    fn what_is_not_resp2_fails() {
        for wire in [
            &b"?what\r\n"[..],
            b":12a\r\n",
            b"$3\r\nabcde\r\n",
            b"%1\r\n:1\r\n:2\r\n",
        ] {
            let mut source = Trickle {
                bytes: wire,
                step: 1,
            };
            let failure = Replies::default().next(&mut source).unwrap_err();
            assert_eq!(failure.kind(), redis::ErrorKind::Parse, "{wire:?}");
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        let mut source = Trickle {
            bytes: deep.as_bytes(),
            step: usize::MAX,
        };
        assert!(Replies::default().next(&mut source).is_err());
        // A connection closed in the middle of a reply.
        let mut source = Trickle {
            bytes: b"$10\r\nabc",
            step: 2,
        };
        let failure = Replies::default().next(&mut source).unwrap_err();
        assert!(failure.is_io_error(), "{failure}");
    }
}
