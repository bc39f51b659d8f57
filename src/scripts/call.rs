//! How a script of `lua/` is called: EVALSHA with its KEYS and ARGV put together in one
//! buffer, and EVAL when the server's script cache lost it.

use redis::{
    ConnectionLike, ErrorKind, FromRedisValue, RedisResult, RedisWrite, Script, ServerErrorKind,
    ToRedisArgs,
};

/// One script of `lua/`: EVALSHA, then EVAL on `NOSCRIPT`.
///
/// Not `redis::Script`, which answers `NOSCRIPT` with SCRIPT LOAD and then EVALSHA again: a
/// flush between those two (flushes back to back, say) reached the caller as a `NOSCRIPT`
/// error, and a release that failed so left its lock held until the lease ran out. EVAL loads
/// and runs in one command, so nothing can come between; it is also one round trip fewer.
pub(super) struct Lua {
    code: String,
    hash: String,
}

impl Lua {
    pub(super) fn new(code: impl Into<String>) -> Lua {
        let code = code.into();
        Lua {
            hash: Script::new(&code).get_hash().to_string(),
            code,
        }
    }

    pub(super) fn key<T: ToRedisArgs>(&self, key: T) -> Invocation<'_> {
        let mut invocation = self.prepare_invoke();
        invocation.key(key);
        invocation
    }

    pub(super) fn prepare_invoke(&self) -> Invocation<'_> {
        Invocation {
            lua: self,
            keys: Args::default(),
            args: Args::default(),
        }
    }
}

/// The value of an argument a script may go without ([`Invocation::optional_args`]).
#[derive(Clone, Copy)]
pub(super) enum Optional<'a> {
    Number(u64),
    Text(&'a str),
}

/// A call of a [`Lua`] script with its KEYS and ARGV, each already encoded as the command will
/// carry them, so that the command is put together with one allocation. Encoding through a
/// `redis::Cmd` instead (arguments, then the command, then its packed bytes) reallocated
/// about 30 times per lock and unlock: callgrind counted 16,000 instructions per cycle in its
/// `write_arg` alone.
pub(crate) struct Invocation<'a> {
    lua: &'a Lua,
    keys: Args,
    args: Args,
}

impl Invocation<'_> {
    pub(super) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub(super) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// Adds the arguments a script may go without, in order, each with whether it differs
    /// from what the script takes for its absence: only as far as the last one that does.
    /// Each value is sent as given when a later one differs, so it must be the argument's
    /// value either way, not only the one that differs.
    /// Every key and argument costs Redis about 1,300 instructions (`acquire.lua`), so a
    /// call sends none it can leave off the end.
    pub(super) fn optional_args(&mut self, optional: &[(bool, Optional<'_>)]) -> &mut Self {
        let sent = optional
            .iter()
            .rposition(|&(differs, _)| differs)
            .map_or(0, |last| last + 1);
        for (_, arg) in &optional[..sent] {
            match *arg {
                Optional::Number(n) => self.arg(n),
                Optional::Text(text) => self.arg(text),
            };
        }
        self
    }

    pub(super) fn invoke<T: FromRedisValue>(&self, con: &mut dyn ConnectionLike) -> RedisResult<T> {
        match self.query(con, "EVALSHA", &self.lua.hash) {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.query(con, "EVAL", &self.lua.code)
            }
            other => other,
        }
    }

    fn query<T: FromRedisValue>(
        &self,
        con: &mut dyn ConnectionLike,
        eval: &str,
        script: &str,
    ) -> RedisResult<T> {
        let reply = con.req_packed_command(&self.packed(eval, script))?;
        Ok(redis::from_redis_value(reply.extract_error()?)?)
    }

    /// The EVALSHA command as sent, for a pipeline (which cannot fall back to EVAL call by
    /// call).
    pub(super) fn packed_sha(&self) -> Vec<u8> {
        self.packed("EVALSHA", &self.lua.hash)
    }

    /// The command `<eval> <script> <number of keys> KEYS... ARGV...` as RESP.
    fn packed(&self, eval: &str, script: &str) -> Vec<u8> {
        let (keys, args) = (&self.keys, &self.args);
        let mut packed =
            Vec::with_capacity(64 + script.len() + keys.bytes.len() + args.bytes.len());
        let mut digits = [0; 20];
        packed.push(b'*');
        packed.extend_from_slice(decimal(3 + keys.count + args.count, &mut digits));
        packed.extend_from_slice(b"\r\n");
        push_bulk(&mut packed, eval.as_bytes());
        push_bulk(&mut packed, script.as_bytes());
        push_bulk(&mut packed, decimal(keys.count, &mut digits));
        packed.extend_from_slice(&keys.bytes);
        packed.extend_from_slice(&args.bytes);
        packed
    }
}

/// Arguments of a command, each encoded as a RESP bulk string as it is written.
struct Args {
    bytes: Vec<u8>,
    count: usize,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            // A lock's keys or arguments rarely take more (a name of 30 bytes, six keys).
            bytes: Vec::with_capacity(256),
            count: 0,
        }
    }
}

impl RedisWrite for Args {
    fn write_arg(&mut self, arg: &[u8]) {
        push_bulk(&mut self.bytes, arg);
        self.count += 1;
    }

    fn writer_for_next_arg(&mut self) -> impl std::io::Write + '_ {
        /// Collects the argument, which is written out whole when it ends.
        struct Next<'a> {
            args: &'a mut Args,
            arg: Vec<u8>,
        }
        impl Drop for Next<'_> {
            fn drop(&mut self) {
                self.args.write_arg(&self.arg);
            }
        }
        impl std::io::Write for Next<'_> {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.arg.extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        Next {
            args: self,
            arg: Vec::new(),
        }
    }
}

/// `$<length>\r\n<arg>\r\n`
fn push_bulk(out: &mut Vec<u8>, arg: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(decimal(arg.len(), &mut [0; 20]));
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(arg);
    out.extend_from_slice(b"\r\n");
}

/// `n` in decimal, written at the end of `digits`.
fn decimal(mut n: usize, digits: &mut [u8; 20]) -> &[u8] {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &digits[at..]
}
