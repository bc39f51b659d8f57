//! The parsers that read the network, each behind a function of bytes, for the fuzz targets
//! in `fuzz/` (built with `--cfg fuzzing`, as `cargo fuzz` builds; never in a release).
//!
//! Each `check_*` function panics when an invariant fails, which the fuzzer reports as a
//! crash: no panic in the parser, a stream cut anywhere reads as the whole stream reads
//! (every frame, and the same error or none at the end), and what the parser hands out is
//! what its caller assumes of it. Each `*_once` function runs the parser once over the
//! whole input and keeps nothing, so that a target can measure the heap the parser itself
//! takes. Loops in the parsers must consume input to go round again; libFuzzer's `-timeout`
//! catches one that does not.

use std::io::{self, Read};

use redis::Value;

use crate::backend::SlotMap;
use crate::backend::reply::Replies;
use crate::backend::{HelloMode, hello_fields, master_ranges, supported};
use crate::inspect::parse_client_list;
use crate::keys::Family;
use crate::scripts::redisson::Wakes;
use crate::scripts::{Message, Place};
use crate::subscriber::{Frame, Reader};

/// Inputs up to this long are also fed cut once at every position (two reads each); longer
/// ones at [`SAMPLED_CUTS`] positions, as the quadratic cost of every position would slow
/// the fuzzer more than it finds.
const EVERY_CUT_UP_TO: usize = 256;
/// Single cuts tried on a longer input, spread by a hash of the input.
const SAMPLED_CUTS: usize = 64;

/// The ways `data` is cut into reads: whole; one byte per read; once at each position (or at
/// sampled ones); and in runs of pseudo-random lengths drawn from a hash of the input (the
/// same input is always cut the same way, so a crash reproduces).
fn cuttings(data: &[u8]) -> Vec<Vec<&[u8]>> {
    let mut ways: Vec<Vec<&[u8]>> = vec![vec![data], data.chunks(1).collect()];
    let mut rng = Rng::of(data);
    let singles: Vec<usize> = if data.len() <= EVERY_CUT_UP_TO {
        (1..data.len()).collect()
    } else {
        (0..SAMPLED_CUTS)
            .map(|_| 1 + rng.below(data.len() - 1))
            .collect()
    };
    for at in singles {
        let (a, b) = data.split_at(at);
        ways.push(vec![a, b]);
    }
    for _ in 0..4 {
        let mut pieces = Vec::new();
        let mut rest = data;
        while !rest.is_empty() {
            let n = (1 + rng.below(64)).min(rest.len());
            let (piece, after) = rest.split_at(n);
            pieces.push(piece);
            rest = after;
        }
        ways.push(pieces);
    }
    ways
}

/// xorshift64, seeded with an FNV-1a hash of the input: reproducible cuts without a
/// dependency.
struct Rng(u64);

impl Rng {
    fn of(data: &[u8]) -> Rng {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in data {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Rng(h | 1)
    }

    /// A number in `0..n` (`n` above 0).
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// The subscriber's frames in `pieces` fed one after another, and the error that ended them
/// if one did (after which the reader is not used again, as the subscriber drops it).
fn subscriber_frames(pieces: &[&[u8]]) -> (Vec<Frame>, Option<String>) {
    let mut reader = Reader::default();
    let mut frames = Vec::new();
    for piece in pieces {
        reader.feed(piece);
        loop {
            match reader.next() {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break,
                Err(e) => return (frames, Some(e)),
            }
        }
    }
    (frames, None)
}

/// The subscriber's reader (`subscriber/resp.rs`) over `data`: the frames and the outcome
/// are the same however the stream is cut into reads.
pub fn check_subscriber(data: &[u8]) {
    let mut ways = cuttings(data).into_iter();
    let whole = subscriber_frames(&ways.next().expect("the whole input"));
    for pieces in ways {
        let cut = subscriber_frames(&pieces);
        assert_eq!(
            cut,
            whole,
            "read in pieces of {:?}",
            pieces.iter().map(|p| p.len()).collect::<Vec<_>>()
        );
    }
}

/// The subscriber's reader over `data` in one read, each frame dropped as it comes: the
/// heap the reader holds (and one frame).
pub fn subscriber_once(data: &[u8]) {
    let mut reader = Reader::default();
    reader.feed(data);
    while let Ok(Some(frame)) = reader.next() {
        drop(frame);
    }
}

/// A socket that hands out `pieces` one read at a time (less when the reader's buffer has
/// less room), then says the connection closed.
struct Pieces<'a> {
    pieces: std::slice::Iter<'a, &'a [u8]>,
    current: &'a [u8],
}

impl<'a> Pieces<'a> {
    fn new(pieces: &'a [&'a [u8]]) -> Pieces<'a> {
        Pieces {
            pieces: pieces.iter(),
            current: &[],
        }
    }
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.pieces.next() {
                Some(piece) => self.current = piece,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = &self.current[n..];
        Ok(n)
    }
}

/// A link's replies in `pieces`, and the error that ended them (the connection's close at
/// the end of the input, when nothing else did first).
fn link_replies(pieces: &[&[u8]]) -> (Vec<Value>, String) {
    let mut replies = Replies::default();
    let mut source = Pieces::new(pieces);
    let mut values = Vec::new();
    loop {
        match replies.next(&mut source) {
            Ok(value) => values.push(value),
            Err(e) => return (values, e.to_string()),
        }
    }
}

/// A link's reply reader (`backend/reply.rs`) over `data`: the replies and the outcome are
/// the same however the stream is cut into reads, and each reply is the value the `redis`
/// crate's own parser reads from the same bytes (the module promises exactly that).
pub fn check_link(data: &[u8]) {
    let mut ways = cuttings(data).into_iter();
    let whole = link_replies(&ways.next().expect("the whole input"));
    let mut parser = redis::Parser::new();
    let mut rest = data;
    for (i, ours) in whole.0.iter().enumerate() {
        match parser.parse_value(&mut rest) {
            Ok(theirs) => assert_eq!(*ours, theirs, "reply {i}"),
            Err(e) => panic!("reply {i}: we read {ours:?}, the redis crate fails: {e}"),
        }
    }
    for pieces in ways {
        let cut = link_replies(&pieces);
        assert_eq!(
            cut,
            whole,
            "read in pieces of {:?}",
            pieces.iter().map(|p| p.len()).collect::<Vec<_>>()
        );
    }
}

/// A link's reply reader over `data` in reads as large as its buffer takes, each reply
/// dropped as it comes: the heap the reader holds (and one reply).
pub fn link_once(data: &[u8]) {
    let mut replies = Replies::default();
    let mut source = Pieces::new(std::slice::from_ref(&data));
    while replies.next(&mut source).is_ok() {}
}

/// The values a link would read from `data`, whole, up to the first failure.
fn values(data: &[u8]) -> Vec<Value> {
    link_replies(&[data]).0
}

/// What `build()` reads of a `HELLO` reply (`backend/hello.rs`), from each reply in `data` as
/// a link reads it (RESP2, which our links speak) and as the `redis` crate reads it (which
/// also reads `HELLO 3`'s RESP3 map): the fields, the version's support and the mode. A
/// field comes from a pair of the reply, so there are no more than half its items.
pub fn check_hello(data: &[u8]) {
    hello_once(data);
    if let Ok(resp3) = redis::parse_redis_value(data) {
        hello_of(&[resp3]);
    }
}

/// [`check_hello`] without the `redis` crate's parser, whose heap is not ours to bound: it
/// sizes an array for the count its header claims, up to 4096 items (`combine`'s guard), at
/// each level of nesting.
pub fn hello_once(data: &[u8]) {
    hello_of(&values(data));
    let _ = supported(&String::from_utf8_lossy(data));
}

/// What `build()` reads of each of `replies`.
fn hello_of(replies: &[Value]) {
    for reply in replies {
        let fields = hello_fields(reply);
        let most = match reply {
            Value::Map(map) => map.len(),
            Value::Array(items) => items.len() / 2,
            _ => 0,
        };
        assert!(
            fields.len() <= most,
            "{} fields of {most} pairs",
            fields.len()
        );
        for (key, value) in &fields {
            let _ = (supported(key), supported(value));
            let _ = (HelloMode::parse(key), HelloMode::parse(value));
        }
    }
}

/// What the cluster and Sentinel code read from replies about the topology, from each reply
/// in `data` as a link reads it: the masters' ranges of `CLUSTER SLOTS`
/// (`backend/cluster.rs`) and the slot map made of them, where each slot's node is one of
/// the ranges'; a sentinel's `GET-MASTER-ADDR-BY-NAME` and a server's `ROLE`
/// (`backend/sentinel.rs`, through the `redis` crate's conversions).
pub fn check_topology(data: &[u8]) {
    for reply in values(data) {
        let _ = redis::from_redis_value::<Option<(String, u16)>>(reply.clone());
        let _ = redis::from_redis_value::<Vec<Value>>(reply.clone());
        let Value::Array(ranges) = reply else {
            continue;
        };
        let ranges = master_ranges(ranges);
        let map = SlotMap::new(ranges.clone());
        for slot in [0, 1, 5460, 5461, 8191, 12182, 16383, 16384, u16::MAX] {
            if let Some(node) = map.node_of(slot) {
                assert!(
                    ranges
                        .iter()
                        .any(|(first, last, n)| n == node && (*first..=*last).contains(&slot)),
                    "slot {slot} given to {node}, which no range names for it"
                );
            }
        }
    }
}

/// A `CLIENT LIST` reply's text (`inspect/mod.rs`), as the inspection reads it: each client
/// found is named `<name>:<uuid>` on a line of the text, with its address.
pub fn check_client_list(data: &[u8]) {
    let Ok(list) = std::str::from_utf8(data) else {
        return;
    };
    for client in parse_client_list(list) {
        assert!(uuid::Uuid::try_parse(&client.id).is_ok(), "{client:?}");
        let named = format!("name={}:{}", client.name, client.id);
        let addr = format!("addr={}", client.addr);
        assert!(
            list.lines()
                .any(|line| line.contains(&named) && line.contains(&addr)),
            "{client:?} is on no line"
        );
    }
}

/// A pub/sub payload, as each reader of one takes it: our scripts' messages
/// (`scripts/message.rs`) with their grants, Redisson's wake-ups for each family
/// (`scripts/redisson`), and, as a queue member with the first 8 bytes for its score, a
/// place in a lock's queue (`scripts/lock.rs`). A grant's pairs are all read back.
pub fn check_message(data: &[u8]) {
    if let Some(Message::Grant { grants, .. }) = Message::parse(data) {
        let rest = std::str::from_utf8(data)
            .expect("a grant is text")
            .splitn(5, ' ')
            .nth(4)
            .unwrap_or("");
        let pairs = rest.split(' ').filter(|w| !w.is_empty()).count() / 2;
        assert_eq!(grants.iter().count(), 1 + pairs, "{data:?}");
    }
    for family in [
        Family::Lock,
        Family::ReadWrite,
        Family::Semaphore,
        Family::Latch,
        Family::Counting,
    ] {
        let _ = Wakes::parse(family, data);
    }
    let (score, member) = data.split_at(data.len().min(8));
    let mut arrival = [0; 8];
    arrival[..score.len()].copy_from_slice(score);
    if let Ok(member) = std::str::from_utf8(member)
        && let Some(place) = Place::parse(member, u64::from_le_bytes(arrival))
    {
        assert!(member.starts_with(place.owner), "{place:?} of {member:?}");
    }
}
