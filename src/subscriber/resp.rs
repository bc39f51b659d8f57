//! Just enough RESP2 to read the pub/sub connections the sharded subscriber drives itself:
//! frames are parsed from a buffer that may hold part of one, since those sockets never
//! block. Commands are encoded with `redis::cmd`.

/// One reply or push from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Frame {
    /// `+OK`
    Simple(Vec<u8>),
    /// `-ERR ...`, `-MOVED ...`
    Error(String),
    Integer(i64),
    /// `None` for the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `None` for the null array.
    Array(Option<Vec<Frame>>),
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

/// Larger bulk strings than this are refused: our channels carry a few dozen bytes, so a
/// length like this means the stream is not what we think it is.
const MAX_BULK: usize = 1 << 20;
/// Deeper nesting is refused, so that a corrupt stream cannot run the parser out of stack.
const MAX_DEPTH: usize = 4;

/// Parses the frame at the start of `buf`: the frame and the bytes it took, `Ok(None)` when
/// `buf` holds only part of it, `Err` when the bytes are not RESP we can read.
pub(super) fn parse(buf: &[u8]) -> Result<Option<(Frame, usize)>, String> {
    parse_at(buf, 0, 0)
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Frame, usize)>, String> {
    let Some(line_end) = find_crlf(buf, at + 1) else {
        return Ok(None);
    };
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let line = &buf[at + 1..line_end];
    let next = line_end + 2;
    match kind {
        b'+' => Ok(Some((Frame::Simple(line.to_vec()), next))),
        b'-' => Ok(Some((
            Frame::Error(String::from_utf8_lossy(line).into_owned()),
            next,
        ))),
        b':' => Ok(Some((Frame::Integer(integer(line)?), next))),
        b'$' => {
            let len = integer(line)?;
            if len < 0 {
                return Ok(Some((Frame::Bulk(None), next)));
            }
            let len = usize::try_from(len).map_err(|_| "bad bulk length")?;
            if len > MAX_BULK {
                return Err(format!("bulk string of {len} bytes"));
            }
            if buf.len() < next + len + 2 {
                return Ok(None);
            }
            if &buf[next + len..next + len + 2] != b"\r\n" {
                return Err("bulk string not ended by CRLF".into());
            }
            Ok(Some((
                Frame::Bulk(Some(buf[next..next + len].to_vec())),
                next + len + 2,
            )))
        }
        b'*' => {
            let len = integer(line)?;
            if len < 0 {
                return Ok(Some((Frame::Array(None), next)));
            }
            if depth >= MAX_DEPTH {
                return Err("arrays nested too deep".into());
            }
            let len = usize::try_from(len).map_err(|_| "bad array length")?;
            let mut items = Vec::with_capacity(len.min(16));
            let mut at = next;
            for _ in 0..len {
                let Some((item, after)) = parse_at(buf, at, depth + 1)? else {
                    return Ok(None);
                };
                items.push(item);
                at = after;
            }
            Ok(Some((Frame::Array(Some(items)), at)))
        }
        other => Err(format!("unexpected RESP type byte {other:#04x}")),
    }
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    rest.windows(2).position(|w| w == b"\r\n").map(|i| from + i)
}

fn integer(line: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad RESP integer {:?}", String::from_utf8_lossy(line)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Frame {
        Frame::Bulk(Some(s.as_bytes().to_vec()))
    }

    #[test]
    fn reads_the_frames_of_a_pubsub_connection() {
        let message = b"*3\r\n$8\r\nsmessage\r\n$9\r\np:{x}:ch\r\r\n$6\r\nunlock\r\n";
        let (frame, used) = parse(message).unwrap().unwrap();
        assert_eq!(used, message.len());
        assert_eq!(
            frame,
            Frame::Array(Some(vec![
                bulk("smessage"),
                bulk("p:{x}:ch\r"),
                bulk("unlock")
            ]))
        );
        let confirm = b"*3\r\n$10\r\nssubscribe\r\n$1\r\nc\r\n:1\r\n";
        assert_eq!(
            parse(confirm).unwrap().unwrap().0,
            Frame::Array(Some(vec![bulk("ssubscribe"), bulk("c"), Frame::Integer(1)]))
        );
        assert_eq!(
            parse(b"+OK\r\n-MOVED 12 10.0.0.1:7000\r\n")
                .unwrap()
                .unwrap(),
            (Frame::Simple(b"OK".to_vec()), 5)
        );
        assert_eq!(
            parse(b"-MOVED 12 10.0.0.1:7000\r\n").unwrap().unwrap().0,
            Frame::Error("MOVED 12 10.0.0.1:7000".into())
        );
        assert_eq!(
            parse(b"$-1\r\n*-1\r\n").unwrap().unwrap(),
            (Frame::Bulk(None), 5)
        );
    }

    #[test]
    fn a_frame_cut_anywhere_asks_for_more() {
        let message = b"*3\r\n$8\r\nsmessage\r\n$1\r\nc\r\n$6\r\nunlock\r\n";
        for cut in 0..message.len() {
            assert_eq!(parse(&message[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            &b"?\r\n"[..],
            b":x\r\n",
            b"$5\r\nabcdefg\r\n",
            b"$99999999999\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
