//! Just enough RESP2 to read the pub/sub connections the polled subscriber drives itself.
//! Those sockets never block, so bytes are fed to a [`Reader`] as they come and frames come
//! out whole. Commands are encoded with `redis::cmd`.
//!
//! A frame too large to be ours (a bulk string over [`MAX_BULK`], an array of more than
//! [`MAX_ITEMS`] items) is read past without being kept and comes out as
//! [`Frame::Skipped`]: anyone may PUBLISH a huge message on a channel we listen on, and that
//! must cost no more than that message. Only bytes that are not RESP at all fail the reader.
//! Lines and integers are found as a link's reader finds them (`backend/reply.rs`), which
//! reads whole replies on blocking sockets instead.

use crate::backend::reply::{line_end, parse_integer};

/// One reply or push from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    /// `+OK`
    Simple(Vec<u8>),
    /// `-ERR ...`, `-MOVED ...`
    Error(String),
    Integer(i64),
    /// `None` for the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `None` for the null array.
    Array(Option<Vec<Frame>>),
    /// A bulk string longer than [`MAX_BULK`] or an array of more than [`MAX_ITEMS`] items,
    /// with the length its header gave: read past, not kept.
    Skipped(usize),
}

impl Frame {
    /// The frame as bytes, if it is a string of either kind.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Frame::Simple(b) | Frame::Bulk(Some(b)) => Some(b),
            _ => None,
        }
    }
}

/// Longer bulk strings than this are read past, not kept. Our channels and messages carry at
/// most a few dozen bytes plus the lock's name, which [`crate::keys::MAX_NAME_LEN`] keeps
/// far below this.
pub(super) const MAX_BULK: usize = 1 << 20;
/// Arrays longer than this are read past, not kept: a pub/sub frame has at most four items.
const MAX_ITEMS: usize = 16;
/// Deeper nesting is refused, so that a corrupt stream cannot pile up arrays.
const MAX_DEPTH: usize = 4;
/// A type byte followed by this many bytes with no CRLF is not a stream we can read (it
/// would otherwise be buffered without end).
const MAX_LINE: usize = MAX_BULK;

/// Turns the bytes of one connection into frames. Holds at most one unfinished frame's bytes
/// (so at most about [`MAX_BULK`]): the bytes of a skipped bulk string are dropped as they are
/// fed.
#[derive(Default)]
pub(crate) struct Reader {
    /// Bytes fed and not yet part of a frame handed out or of an array begun.
    buf: Vec<u8>,
    /// Bytes of a skipped bulk string (and its CRLF) still to come.
    skip: usize,
    /// The arrays begun and not finished, outermost first.
    open: Vec<Open>,
}

/// An array whose items are still being read.
struct Open {
    len: usize,
    left: usize,
    items: Vec<Frame>,
}

/// What the bytes at the start of the buffer begin.
enum Item {
    Whole(Frame),
    Array(usize),
    /// A bulk string of this length, too long to keep.
    Skip(usize),
}

impl Reader {
    /// Bytes as the socket gave them. Those of a bulk string being skipped go at once.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        let skipped = self.skip.min(bytes.len());
        self.skip -= skipped;
        bytes = &bytes[skipped..];
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame; `Ok(None)` until more bytes are fed; `Err` when the bytes are not
    /// RESP we can read, after which the reader is of no further use (the stream is out of
    /// step, so the connection must go).
    pub fn next(&mut self) -> Result<Option<Frame>, String> {
        let mut at = 0;
        let next = self.next_at(&mut at);
        self.buf.drain(..at);
        next
    }

    /// How many bytes the reader holds.
    #[cfg(test)]
    fn buffered(&self) -> usize {
        self.buf.len()
    }

    fn next_at(&mut self, at: &mut usize) -> Result<Option<Frame>, String> {
        'items: loop {
            if self.skip > 0 {
                let skipped = self.skip.min(self.buf.len() - *at);
                *at += skipped;
                self.skip -= skipped;
                if self.skip > 0 {
                    return Ok(None);
                }
            }
            let Some((item, used)) = item(&self.buf[*at..])? else {
                return Ok(None);
            };
            *at += used;
            let mut frame = match item {
                Item::Whole(frame) => frame,
                Item::Skip(len) => {
                    // Its bytes go as they come; its frame may go up at once.
                    self.skip = len.saturating_add(2);
                    Frame::Skipped(len)
                }
                Item::Array(0) => Frame::Array(Some(Vec::new())),
                Item::Array(len) => {
                    if self.open.len() >= MAX_DEPTH {
                        return Err("arrays nested too deep".into());
                    }
                    self.open.push(Open {
                        len,
                        left: len,
                        items: Vec::new(),
                    });
                    continue;
                }
            };
            // A whole item: it completes its array, perhaps the arrays around that too.
            while let Some(top) = self.open.last_mut() {
                if top.items.len() < MAX_ITEMS {
                    top.items.push(frame);
                }
                top.left -= 1;
                if top.left > 0 {
                    continue 'items;
                }
                let len = top.len;
                let items = std::mem::take(&mut top.items);
                self.open.pop();
                frame = if len > MAX_ITEMS {
                    Frame::Skipped(len)
                } else {
                    Frame::Array(Some(items))
                };
            }
            return Ok(Some(frame));
        }
    }
}

/// Reads the item at the start of `buf`: what it is and the bytes it took, `Ok(None)` when
/// `buf` holds only part of it.
fn item(buf: &[u8]) -> Result<Option<(Item, usize)>, String> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let too_long = || Err(format!("no line end within {MAX_LINE} bytes"));
    let Some(line_end) = line_end(buf) else {
        if buf.len() > MAX_LINE {
            return too_long();
        }
        return Ok(None);
    };
    // Refused whole too, not only while it comes: a line cut before its end is refused
    // above once MAX_LINE bytes are in, so the same line read in one piece must be, or a
    // stream would read one way or the other depending on how the socket cut it.
    if line_end >= MAX_LINE {
        return too_long();
    }
    let line = &buf[1..line_end];
    let next = line_end + 2;
    let whole = |frame| Ok(Some((Item::Whole(frame), next)));
    match kind {
        b'+' => whole(Frame::Simple(line.to_vec())),
        b'-' => whole(Frame::Error(String::from_utf8_lossy(line).into_owned())),
        b':' => whole(Frame::Integer(integer(line)?)),
        b'$' => {
            let len = integer(line)?;
            if len < 0 {
                return whole(Frame::Bulk(None));
            }
            let len = usize::try_from(len).map_err(|_| "bad bulk length")?;
            if len > MAX_BULK {
                return Ok(Some((Item::Skip(len), next)));
            }
            if buf.len() < next + len + 2 {
                return Ok(None);
            }
            if &buf[next + len..next + len + 2] != b"\r\n" {
                return Err("bulk string not ended by CRLF".into());
            }
            Ok(Some((
                Item::Whole(Frame::Bulk(Some(buf[next..next + len].to_vec()))),
                next + len + 2,
            )))
        }
        b'*' => {
            let len = integer(line)?;
            if len < 0 {
                return whole(Frame::Array(None));
            }
            let len = usize::try_from(len).map_err(|_| "bad array length")?;
            Ok(Some((Item::Array(len), next)))
        }
        other => Err(format!("unexpected RESP type byte {other:#04x}")),
    }
}

fn integer(line: &[u8]) -> Result<i64, String> {
    parse_integer(line)
        .ok_or_else(|| format!("bad RESP integer {:?}", String::from_utf8_lossy(line)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Frame {
        Frame::Bulk(Some(s.as_bytes().to_vec()))
    }

    /// Every frame in `bytes`, fed in pieces of `piece` bytes.
    fn frames(bytes: &[u8], piece: usize) -> Result<Vec<Frame>, String> {
        let mut reader = Reader::default();
        let mut frames = Vec::new();
        for chunk in bytes.chunks(piece) {
            reader.feed(chunk);
            while let Some(frame) = reader.next()? {
                frames.push(frame);
            }
        }
        Ok(frames)
    }

    fn message(channel: &str, payload: &[u8]) -> Vec<u8> {
        let mut m = format!(
            "*3\r\n$7\r\nmessage\r\n${}\r\n{channel}\r\n${}\r\n",
            channel.len(),
            payload.len()
        )
        .into_bytes();
        m.extend_from_slice(payload);
        m.extend_from_slice(b"\r\n");
        m
    }

    #[test]
    fn reads_the_frames_of_a_pubsub_connection() {
        let message = b"*3\r\n$8\r\nsmessage\r\n$9\r\np:{x}:ch\r\r\n$6\r\nunlock\r\n";
        assert_eq!(
            frames(message, message.len()).unwrap(),
            [Frame::Array(Some(vec![
                bulk("smessage"),
                bulk("p:{x}:ch\r"),
                bulk("unlock")
            ]))]
        );
        let confirm = b"*3\r\n$10\r\nssubscribe\r\n$1\r\nc\r\n:1\r\n";
        assert_eq!(
            frames(confirm, 3).unwrap(),
            [Frame::Array(Some(vec![
                bulk("ssubscribe"),
                bulk("c"),
                Frame::Integer(1)
            ]))]
        );
        assert_eq!(
            frames(b"+OK\r\n-MOVED 12 10.0.0.1:7000\r\n$-1\r\n*-1\r\n*0\r\n", 1).unwrap(),
            [
                Frame::Simple(b"OK".to_vec()),
                Frame::Error("MOVED 12 10.0.0.1:7000".into()),
                Frame::Bulk(None),
                Frame::Array(None),
                Frame::Array(Some(Vec::new())),
            ]
        );
    }

    #[test]
    fn a_frame_cut_anywhere_asks_for_more_and_comes_whole_with_the_rest() {
        let message = b"*3\r\n$8\r\nsmessage\r\n$1\r\nc\r\n$6\r\nunlock\r\n";
        for cut in 0..message.len() {
            let mut reader = Reader::default();
            reader.feed(&message[..cut]);
            assert_eq!(reader.next(), Ok(None), "cut at {cut}");
            reader.feed(&message[cut..]);
            assert!(
                matches!(reader.next(), Ok(Some(Frame::Array(Some(_))))),
                "cut at {cut}"
            );
            assert_eq!(reader.next(), Ok(None));
        }
    }

    /// A huge PUBLISH on one of our channels: read past without being kept, and the grant
    /// behind it, in the same read, still comes out.
    #[test]
    fn an_oversized_bulk_is_skipped_without_buffering_and_the_next_frame_still_comes() {
        let huge = vec![b'x'; 2 * MAX_BULK + 5];
        let mut bytes = message("p:{x}:unlocked", &huge);
        bytes.extend(message("p:{x}:unlocked", b"grant 9 30000 c0ffee:1"));
        let grant = Frame::Array(Some(vec![
            bulk("message"),
            bulk("p:{x}:unlocked"),
            bulk("grant 9 30000 c0ffee:1"),
        ]));
        let skipped = Frame::Array(Some(vec![
            bulk("message"),
            bulk("p:{x}:unlocked"),
            Frame::Skipped(huge.len()),
        ]));
        for piece in [1, 7, 8192, bytes.len()] {
            let mut reader = Reader::default();
            let mut got = Vec::new();
            let mut most = 0;
            for chunk in bytes.chunks(piece) {
                reader.feed(chunk);
                most = most.max(reader.buffered());
                while let Some(frame) = reader.next().unwrap() {
                    got.push(frame);
                }
                most = most.max(reader.buffered());
            }
            assert_eq!(got, [skipped.clone(), grant.clone()], "pieces of {piece}");
            if piece < bytes.len() {
                assert!(
                    most <= 2 * piece + 64,
                    "held {most} bytes, pieces of {piece}"
                );
            }
        }
        // Outside an array too, and an array too long to keep.
        let mut bytes = format!("${}\r\n", huge.len()).into_bytes();
        bytes.extend_from_slice(&huge);
        bytes.extend_from_slice(b"\r\n*20\r\n");
        for _ in 0..20 {
            bytes.extend_from_slice(b":1\r\n");
        }
        bytes.extend_from_slice(b"+PONG\r\n");
        assert_eq!(
            frames(&bytes, 8192).unwrap(),
            [
                Frame::Skipped(huge.len()),
                Frame::Skipped(20),
                Frame::Simple(b"PONG".to_vec())
            ]
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            &b"?\r\n"[..],
            b":x\r\n",
            b"$5\r\nabcdefg\r\n",
            b"$x\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
        ] {
            assert!(frames(bad, bad.len()).is_err(), "{bad:?}");
        }
        let endless = [b'+'; MAX_LINE + 2];
        assert!(frames(&endless, 8192).is_err());
    }

    /// A line of just over MAX_LINE bytes with its CRLF: refused when it came in pieces (no
    /// line end yet past MAX_LINE bytes) but read when it came whole, before the fix. Now
    /// refused both ways, and the longest line allowed is read both ways.
    #[test]
    fn a_long_line_reads_the_same_whole_and_cut() {
        for (len, refused) in [
            (MAX_LINE - 1, false),
            (MAX_LINE, true),
            (MAX_LINE + 7, true),
        ] {
            let mut line = vec![b'+'];
            line.extend(std::iter::repeat_n(b'a', len - 1));
            line.extend_from_slice(b"\r\n:1\r\n");
            let whole = frames(&line, line.len());
            for piece in [1 << 16, MAX_LINE, MAX_LINE + 1] {
                assert_eq!(frames(&line, piece), whole, "a {len}-byte line in {piece}s");
            }
            assert_eq!(whole.is_err(), refused, "a {len}-byte line");
        }
    }
}
