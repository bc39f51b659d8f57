//! What `build()` reads from a server's `HELLO` reply: that it is Redis, a version this crate
//! supports, and the topology (`mode`) the builder expects.

use redis::{RedisError, RedisResult, Value};

use super::{Link, link};
use crate::error::{Error, MIN_REDIS_VERSION, Result};

/// The topology a server runs in, as `HELLO` names it in its `mode` field.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    Standalone,
    Cluster,
    Sentinel,
}

impl Mode {
    pub(crate) fn parse(mode: &str) -> Option<Mode> {
        match mode {
            "standalone" => Some(Mode::Standalone),
            "cluster" => Some(Mode::Cluster),
            "sentinel" => Some(Mode::Sentinel),
            _ => None,
        }
    }
}

/// What `HELLO` without arguments (which every user may send, and which changes nothing)
/// says of the server at the other end of `con`. The outer error is the connection's (it
/// names the server); the inner one is the refusal of a server that answered: too old,
/// not Redis, or of another topology than `expected`.
pub(super) fn check_hello(con: &mut Link, expected: Mode) -> RedisResult<Result<()>> {
    let addr = con.addr().to_string();
    let reply = redis::cmd("HELLO").query::<Value>(con);
    let hello = match reply {
        Ok(hello) => hello,
        Err(e) if is_unknown_command(&e) => {
            return Ok(Err(Error::UnsupportedServer {
                version: "older than 6.0".to_string(),
            }));
        }
        Err(e) if e.code() == Some("NOAUTH") => return Err(link::password_needed(&addr)),
        Err(e) => return Err(con.refused(e)),
    };
    let fields = hello_fields(&hello);
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let Some(version) = field("version") else {
        // A proxy, a honeypot, a server of another protocol: whatever it answered, a lock
        // could not be kept there.
        let said = format!("{hello:?}");
        let said: String = said.chars().take(80).collect();
        return Err(con.failed(RedisError::from((
            redis::ErrorKind::Parse,
            "not a Redis server",
            format!("its reply to HELLO was {said}"),
        ))));
    };
    if !supported(version) {
        return Ok(Err(Error::UnsupportedServer {
            version: version.to_string(),
        }));
    }
    // A server that does not say (a fork, say) is given the benefit of the doubt.
    let mode = field("mode").and_then(Mode::parse);
    Ok(match (mode, expected) {
        (None, _) => Ok(()),
        (Some(mode), expected) if mode == expected => Ok(()),
        (Some(Mode::Cluster), _) => Err(Error::invalid(format!(
            "{addr} is a Redis Cluster node: connect as a Cluster client \
             (Client::cluster_builder; redlatch --cluster)"
        ))),
        (Some(Mode::Sentinel), _) => Err(Error::invalid(format!(
            "{addr} is a Redis Sentinel: connect through the sentinels with the master's name \
             (Client::sentinel_builder; redlatch --sentinel --master NAME)"
        ))),
        (Some(Mode::Standalone), _) => Err(Error::invalid(format!(
            "{addr} runs without cluster mode: connect to it as one server \
             (Client::open or Client::builder; redlatch without --cluster)"
        ))),
    })
}

/// A refusal of a command the server does not know (`HELLO` before Redis 6.0).
fn is_unknown_command(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError)
        && e.to_string().to_lowercase().contains("unknown command")
}

/// The text fields of a `HELLO` reply (a map in RESP3, pairs in an array in RESP2); empty
/// for anything else.
pub(crate) fn hello_fields(hello: &Value) -> Vec<(String, String)> {
    let pairs: Vec<(&Value, &Value)> = match hello {
        Value::Map(map) => map.iter().map(|(k, v)| (k, v)).collect(),
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|p| Some((p.first()?, p.get(1)?)))
            .collect(),
        _ => return Vec::new(),
    };
    pairs
        .into_iter()
        .filter_map(|(k, v)| {
            let key: String = redis::from_redis_value(k.clone()).ok()?;
            let value: String = redis::from_redis_value(v.clone()).ok()?;
            Some((key, value))
        })
        .collect()
}

/// Whether `version` ("7.0.15") is at least [`MIN_REDIS_VERSION`]; a version we cannot
/// read is given the benefit of the doubt (a fork, say).
pub(crate) fn supported(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor) >= MIN_REDIS_VERSION,
        _ => true,
    }
}
