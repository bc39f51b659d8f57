//! A Redisson 4.7.0 client emulated at the wire level, so that tests can check redlatch's
//! interop with Java services without a JVM.
//!
//! [`Jvm`] plays one `RedissonClient`: one random UUID, owner fields `<uuid>:<thread id>`, the
//! data layout, KEYS/ARGV order, replies and messages of Redisson 4.x
//! (sections 2 to 12; section numbers below refer to it), and the way Java *waits*, as the
//! real client was seen to: attempt; SUBSCRIBE (confirmed); attempt again; then sleep until a
//! message or at most the ttl that attempt replied, attempt, and loop; the last waiter of a
//! channel in this JVM UNSUBSCRIBEs when it is done.
//!
//! The scripts are our own text, written from the numbered steps of the format document (no
//! Redisson code is copied). Their SHA-1s therefore differ from Redisson's, which the document
//! says is harmless: what must agree is the data, the replies and the messages.
//!
//! What is emulated, and why that way:
//!
//! - **Pub/sub entries are shared per channel within one `Jvm`** and reference-counted, like
//!   Redisson's (section 2.5), and messages release permits of a JVM-local semaphore the way
//!   Java's listeners do (section 3): on a lock channel `0` wakes *one* waiting thread of this
//!   JVM and `1` wakes all of them; on a semaphore channel `m` releases min(subscribers, m);
//!   on a latch channel `0` opens and `1` closes. A redlatch bug that publishes `0` where Java
//!   expects `1` therefore leaves Java threads asleep here too, as it would in production.
//! - **Subscriber connections speak RESP2 over a plain `TcpStream`**: the sync `redis` crate
//!   has no `SSUBSCRIBE`, and a read timeout on its `Connection` desynchronises the reply
//!   stream. Our reader keeps partial frames across timeouts, follows `MOVED` for sharded
//!   subscriptions (a Cluster node owning the slot), and exits when the entry is released.
//! - **A lost subscriber connection is replaced**, as Redisson's is (seen within 80-290 ms of
//!   `CLIENT KILL TYPE pubsub` or `CLIENT KILL ID`): while the entry is still in use, its
//!   reader reconnects after a backoff (100 ms, doubling to 1 s; each try bounded, the loop
//!   ended by the entry's release) and subscribes its channel again, plain or sharded (the
//!   node it was on first, then the configured one, following `MOVED`). Like Java, it wakes
//!   nobody when it is back: a message published while it was away is lost, and its waiters
//!   sleep until the next message or the ttl their attempt replied.
//! - **Scripts go as EVALSHA**; on `NOSCRIPT` the emulation sends `SCRIPT LOAD` (on a Cluster
//!   to the node of the script's first key) and the EVALSHA again, as Redisson does. The
//!   first use of a script on a server therefore costs three commands.
//! - **Every wait is bounded.** Java's `lock()` waits forever against a holder without a TTL;
//!   here it takes a guard duration and returns `false` when it runs out (leaving the state
//!   as a still-waiting Java thread would).
//! - **Commands are counted** ([`Jvm::commands_sent`]), subscriptions and AUTH included, so a
//!   test can check that a waiting Java thread sends nothing while nothing happens.
//! - Redis errors panic with the operation's name: this is test support, and a failing
//!   script is a failing test. **This differs from Redisson during a restart**: there a
//!   command in flight when Redis goes away fails after Redisson's 3 s response timeout
//!   without a retry (scripts are "non-idempotent"), `lock()`/`tryLock()` throw to the
//!   caller, and the next call works on a new connection. Here that call panics (at once
//!   when the connection breaks, else after the 10 s I/O timeout), and only the *next*
//!   call reconnects (a single server's command connection is replaced when found closed).
//!   A test of a restart must therefore not have a Jvm call in flight across it, or must
//!   expect the panic (e.g. on a thread it joins).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};
use redis::{ConnectionAddr, ConnectionLike, FromRedisValue, Value};
use uuid::Uuid;

/// `lockWatchdogTimeout`: the lease of an acquisition without one, renewed every third of it.
pub const WATCHDOG_TIMEOUT_MS: u64 = 30_000;
/// `fairLockWaitTimeout`: a fair waiter's slot length for `lock()` and `tryLock()`.
pub const FAIR_LOCK_WAIT_TIMEOUT_MS: u64 = 300_000;
/// The unlock latch TTL. Java 4.x draws 16 000 to 20 000 ms (retry jitter); the emulation
/// takes the top of that range so that it covers every retry horizon Java could have.
pub const LATCH_TTL_MS: u64 = 20_000;
/// A permit-expirable semaphore's "no lease" score (Long.MAX_VALUE / 10000, truncated).
pub const NO_LEASE_SCORE: i64 = 922_337_203_685_477;
/// `lockWatchdogBatchSize`: locks renewed per script call.
pub const WATCHDOG_BATCH: usize = 100;

/// How long one command may take before the emulation gives up (a test fails, not hangs).
const IO_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a subscriber's reader looks whether its entry was released.
const READER_TICK: Duration = Duration::from_millis(500);
/// A lost subscriber connection's backoff before it reconnects and resubscribes: first delay
/// (Redisson was seen back 80-290 ms after a kill), doubling up to the cap while it fails.
const RESUBSCRIBE_FIRST_DELAY: Duration = Duration::from_millis(100);
const RESUBSCRIBE_MAX_DELAY: Duration = Duration::from_secs(1);
/// How long one reconnect-and-resubscribe try may take.
const RESUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The spin lock's backoff (section 5.2 leaves it to the client; Redisson's default is an
/// exponential backoff, which this approximates): first delay, cap.
const SPIN_FIRST_DELAY: Duration = Duration::from_millis(1);
const SPIN_MAX_DELAY: Duration = Duration::from_millis(128);

// ---------------------------------------------------------------------------------------
// Names (section 2.1)

/// `P(prefix)`: `prefix:N` when `N` contains `{` anywhere (not only at the start), otherwise
/// `prefix:{N}`, so that every auxiliary key and channel hashes to the slot of `N`.
pub fn prefix_form(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `S(suffix)`: `N:suffix` when `N` contains `{`, otherwise `{N}:suffix`.
pub fn suffix_form(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// `redisson_lock__channel:{N}`: RLock, fenced and read-write-free lock waiters.
pub fn lock_channel(name: &str) -> String {
    prefix_form("redisson_lock__channel", name)
}

/// A fair waiter's own channel: the lock channel + `:` + its owner field.
pub fn fair_channel(name: &str, field: &str) -> String {
    format!("{}:{field}", lock_channel(name))
}

/// `redisson_unlock_latch:{N}:<requestId>`.
pub fn unlock_latch_key(name: &str, request_id: &str) -> String {
    format!(
        "{}:{request_id}",
        prefix_form("redisson_unlock_latch", name)
    )
}

/// `redisson_lock_token:{N}`: the fenced lock's counter.
pub fn token_key(name: &str) -> String {
    prefix_form("redisson_lock_token", name)
}

/// `redisson_lock_queue:{N}`: the fair lock's FIFO of waiting owner fields.
pub fn fair_queue_key(name: &str) -> String {
    prefix_form("redisson_lock_queue", name)
}

/// `redisson_lock_timeout:{N}`: the fair lock's zset of waiter deadlines.
pub fn fair_timeout_key(name: &str) -> String {
    prefix_form("redisson_lock_timeout", name)
}

/// `redisson_rwlock:{N}`: read and write waiters alike.
pub fn rw_channel(name: &str) -> String {
    prefix_form("redisson_rwlock", name)
}

/// `{N}:F:rwlock_timeout`: the prefix of a reader's per-hold timeout keys (`…:k`).
pub fn rw_timeout_prefix(name: &str, field: &str) -> String {
    format!("{}:rwlock_timeout", suffix_form(name, field))
}

/// `{N}` (or `N` when it contains `{`): the timeout prefix cut before `:F`, from which the
/// read unlock and the read renewal build every holder's timeout keys.
pub fn rw_key_prefix(name: &str) -> String {
    if name.contains('{') {
        name.to_string()
    } else {
        format!("{{{name}}}")
    }
}

/// `redisson_sc:{N}`: both semaphores' channel.
pub fn semaphore_channel(name: &str) -> String {
    prefix_form("redisson_sc", name)
}

/// `{N}:timeout`: the permit-expirable semaphore's zset of acquired permit ids.
pub fn permit_zset_key(name: &str) -> String {
    suffix_form(name, "timeout")
}

/// `redisson_countdownlatch__channel__{N}`: always braces, even when `N` contains `{`
/// (section 2.1, exception 1), because Java concatenates it by hand.
pub fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// The Redis Cluster slot of a key: the watchdog groups its batch renewals by slot, as
/// Redisson does, because one script's keys must share a slot.
fn key_slot(key: &str) -> u16 {
    super::topology::key_slot(key.as_bytes())
}

// ---------------------------------------------------------------------------------------
// Scripts. Each is written from the numbered steps of its section. Numbers in ARGV are ASCII
// decimal; `nil` replies are RESP nulls.

/// A script: its text (sent as EVALSHA of its SHA-1; on NOSCRIPT SCRIPT LOAD, then EVALSHA
/// again) and a name for messages.
struct Lua {
    name: &'static str,
    text: &'static str,
}

/// 4.2. KEYS [N]; ARGV [lease, F]. Free or ours: count up, TTL reset to the lease, nil.
/// Otherwise the holder's PTTL.
const RLOCK_ACQUIRE: Lua = Lua {
    name: "RLock acquire",
    text: r#"
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
"#,
};

/// 4.3. KEYS [N, channel, latch]; ARGV ['0', internalLockLeaseTime, F, publish, latch TTL].
/// Replay a latch; not ours: nil without latch; count down; last hold: delete, publish,
/// latch 1 (in that order).
const RLOCK_UNLOCK: Lua = Lua {
    name: "RLock unlock",
    text: r#"
local replay = redis.call('get', KEYS[3])
if replay then
    return tonumber(replay)
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local count = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if count > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], 0, 'px', ARGV[5])
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
"#,
};

/// 4.4. KEYS [N, channel]; ARGV ['0', publish]. No owner check, no latch.
const RLOCK_FORCE_UNLOCK: Lua = Lua {
    name: "RLock force unlock",
    text: r#"
if redis.call('del', KEYS[1]) == 1 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
return 0
"#,
};

/// 4.5 (3.44.0+). KEYS [N1..Nn]; ARGV [lease, field for N1, .., field for Nn]. One 0/1 per
/// lock: 1 = the field was there and the TTL is back at the lease.
const RENEW_BATCH: Lua = Lua {
    name: "batch renewal",
    text: r#"
local renewed = {}
for i = 1, #KEYS do
    if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
        redis.call('pexpire', KEYS[i], ARGV[1])
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
"#,
};

/// 5.1, the token path. KEYS [N, token key]; ARGV [lease, F]. Acquired: INCR the token
/// first, then as 4.2, reply [-1, token]. Otherwise [PTTL, -1].
const FENCED_ACQUIRE_TOKEN: Lua = Lua {
    name: "fenced acquire (token)",
    text: r#"
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local token = redis.call('incr', KEYS[2])
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {-1, token}
end
return {redis.call('pttl', KEYS[1]), -1}
"#,
};

/// 5.1, through the plain RLock methods: the same writes, replies like 4.2.
const FENCED_ACQUIRE_PLAIN: Lua = Lua {
    name: "fenced acquire (plain)",
    text: r#"
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('incr', KEYS[2])
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
"#,
};

/// 5.2 acquire: 4.2's behaviour written as two branches (free; ours).
const SPIN_ACQUIRE: Lua = Lua {
    name: "spin lock acquire",
    text: r#"
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
"#,
};

/// 5.2 unlock. KEYS [N, latch]; ARGV [lease, F, latch TTL] (not RLock's order). No publish.
const SPIN_UNLOCK: Lua = Lua {
    name: "spin lock unlock",
    text: r#"
local replay = redis.call('get', KEYS[2])
if replay then
    return tonumber(replay)
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
local count = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if count > 0 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    redis.call('set', KEYS[2], 0, 'px', ARGV[3])
    return 0
end
redis.call('del', KEYS[1])
redis.call('set', KEYS[2], 1, 'px', ARGV[3])
return 1
"#,
};

/// 5.2 force unlock. KEYS [N]. 1 if a key was deleted.
const SPIN_FORCE_UNLOCK: Lua = Lua {
    name: "spin lock force unlock",
    text: r#"
return redis.call('del', KEYS[1])
"#,
};

/// 6.2: drop dead heads (score <= now) from the queue and the zset; stop at a live head or a
/// head without a score. KEYS[2] = queue, KEYS[3] = zset in every script that uses it.
macro_rules! fair_purge {
    () => {
        r#"
local function purge(now)
    while true do
        local head = redis.call('lindex', KEYS[2], 0)
        if not head then
            return
        end
        local score = redis.call('zscore', KEYS[3], head)
        if score and tonumber(score) <= now then
            redis.call('zrem', KEYS[3], head)
            redis.call('lpop', KEYS[2])
        else
            return
        end
    end
end
"#
    };
}

/// 6.3 step 2 and 3, shared by both acquire variants: take the free lock when nobody queues
/// or we are the head (then every remaining deadline moves `wait` earlier), or re-enter.
macro_rules! fair_take {
    () => {
        r#"
local function take(lease, field, wait)
    if redis.call('exists', KEYS[1]) == 0
        and (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == field) then
        redis.call('lpop', KEYS[2])
        redis.call('zrem', KEYS[3], field)
        local rest = redis.call('zrange', KEYS[3], 0, -1)
        for _, member in ipairs(rest) do
            redis.call('zincrby', KEYS[3], -tonumber(wait), member)
        end
        redis.call('hset', KEYS[1], field, 1)
        redis.call('pexpire', KEYS[1], lease)
        return true
    end
    if redis.call('hexists', KEYS[1], field) == 1 then
        redis.call('hincrby', KEYS[1], field, 1)
        redis.call('pexpire', KEYS[1], lease)
        return true
    end
    return false
end
"#
    };
}

/// 6.3, try-once (never queues). KEYS [N, queue, zset]; ARGV [lease, F, now, wait].
/// nil = acquired, 1 = not.
const FAIR_ACQUIRE_ONCE: Lua = Lua {
    name: "fair acquire (try-once)",
    text: concat!(
        fair_purge!(),
        fair_take!(),
        r#"
purge(tonumber(ARGV[3]))
if take(ARGV[1], ARGV[2], ARGV[4]) then
    return nil
end
return 1
"#
    ),
};

/// 6.4, queueing. KEYS [N, queue, zset]; ARGV [lease, F, wait, now] (wait and now swapped
/// against 6.3). Already queued: max(0, PTTL), own deadline untouched. New waiter: ttl = the
/// tail's deadline - now (or PTTL N), deadline = ttl + wait + now, queued, reply ttl.
const FAIR_ACQUIRE: Lua = Lua {
    name: "fair acquire (queueing)",
    text: concat!(
        fair_purge!(),
        fair_take!(),
        r#"
local now = tonumber(ARGV[4])
purge(now)
if take(ARGV[1], ARGV[2], ARGV[3]) then
    return nil
end
if redis.call('zscore', KEYS[3], ARGV[2]) then
    local pttl = redis.call('pttl', KEYS[1])
    if pttl < 0 then
        return 0
    end
    return pttl
end
local ttl = nil
local last = redis.call('lindex', KEYS[2], -1)
if last and last ~= ARGV[2] then
    local score = redis.call('zscore', KEYS[3], last)
    if score then
        ttl = tonumber(score) - now
    end
end
if ttl == nil then
    ttl = redis.call('pttl', KEYS[1])
end
local deadline = ttl + tonumber(ARGV[3]) + now
if redis.call('zadd', KEYS[3], deadline, ARGV[2]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[2])
end
return ttl
"#
    ),
};

/// 6.5. KEYS [queue, zset]; ARGV [F, wait]. Everyone queued behind F moves `wait` earlier;
/// F leaves the zset and the queue. nil.
const FAIR_ACQUIRE_FAILED: Lua = Lua {
    name: "fair acquire failed",
    text: r#"
local queue = redis.call('lrange', KEYS[1], 0, -1)
local at = nil
for i, member in ipairs(queue) do
    if member == ARGV[1] then
        at = i
        break
    end
end
if at then
    for i = at + 1, #queue do
        redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i])
    end
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
return nil
"#,
};

/// 6.6. KEYS [N, queue, zset, channel prefix, latch]; ARGV ['0', internalLockLeaseTime, F,
/// now, publish, latch TTL]. A missing lock is a success that wakes the head; the last hold
/// deletes, latches, then publishes `0` to the head's own channel only.
const FAIR_UNLOCK: Lua = Lua {
    name: "fair unlock",
    text: concat!(
        fair_purge!(),
        r#"
local replay = redis.call('get', KEYS[5])
if replay then
    return tonumber(replay)
end
purge(tonumber(ARGV[4]))
if redis.call('exists', KEYS[1]) == 0 then
    local head = redis.call('lindex', KEYS[2], 0)
    if head then
        redis.call(ARGV[5], KEYS[4] .. ':' .. head, ARGV[1])
    end
    redis.call('set', KEYS[5], 1, 'px', ARGV[6])
    return 1
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local count = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if count > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[5], 0, 'px', ARGV[6])
    return 0
end
redis.call('del', KEYS[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[6])
local head = redis.call('lindex', KEYS[2], 0)
if head then
    redis.call(ARGV[5], KEYS[4] .. ':' .. head, ARGV[1])
end
return 1
"#
    ),
};

/// 6.7. KEYS [N, queue, zset, channel prefix]; ARGV ['0', now, publish].
const FAIR_FORCE_UNLOCK: Lua = Lua {
    name: "fair force unlock",
    text: concat!(
        fair_purge!(),
        r#"
purge(tonumber(ARGV[2]))
if redis.call('del', KEYS[1]) == 1 then
    local head = redis.call('lindex', KEYS[2], 0)
    if head then
        redis.call(ARGV[3], KEYS[4] .. ':' .. head, ARGV[1])
    end
    return 1
end
return 0
"#
    ),
};

/// 7.2. KEYS [N, timeout prefix]; ARGV [lease, F, F:write]. Every read hold k gets its own
/// `prefix:k` = 1 with the lease; the hash TTL only grows (max(PTTL, lease)).
const READ_ACQUIRE: Lua = Lua {
    name: "read acquire",
    text: r#"
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':1', 1)
    redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    local hold = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local timeout = KEYS[2] .. ':' .. hold
    redis.call('set', timeout, 1)
    redis.call('pexpire', timeout, ARGV[1])
    local pttl = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(pttl, tonumber(ARGV[1])))
    return nil
end
return redis.call('pttl', KEYS[1])
"#,
};

/// 7.3. KEYS [N, channel, timeout prefix, key prefix, latch]; ARGV ['0', F, publish, latch
/// TTL]. The hash lives on only through remaining holders' timeout keys with a positive TTL.
const READ_UNLOCK: Lua = Lua {
    name: "read unlock",
    text: r#"
local replay = redis.call('get', KEYS[5])
if replay then
    return tonumber(replay)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
    redis.call(ARGV[3], KEYS[2], ARGV[1])
    redis.call('set', KEYS[5], 1, 'px', ARGV[4])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return nil
end
local count = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if count == 0 then
    redis.call('hdel', KEYS[1], ARGV[2])
end
redis.call('del', KEYS[3] .. ':' .. (count + 1))
if redis.call('hlen', KEYS[1]) > 1 then
    local longest = -3
    for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
        local holds = tonumber(redis.call('hget', KEYS[1], field))
        if holds then
            for k = holds, 1, -1 do
                local pttl = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. k)
                longest = math.max(longest, pttl)
            end
        end
    end
    if longest > 0 then
        redis.call('pexpire', KEYS[1], longest)
        redis.call('set', KEYS[5], 0, 'px', ARGV[4])
        return 0
    end
    if mode == 'write' then
        redis.call('set', KEYS[5], 0, 'px', ARGV[4])
        return 0
    end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[4])
return 1
"#,
};

/// 7.4. KEYS [N]; ARGV [lease, F:write]. Re-entry *adds* the lease to the PTTL; no upgrade
/// from read.
const WRITE_ACQUIRE: Lua = Lua {
    name: "write acquire",
    text: r#"
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local pttl = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], pttl + tonumber(ARGV[1]))
    return nil
end
return redis.call('pttl', KEYS[1])
"#,
};

/// 7.5. KEYS [N, channel, latch]; ARGV ['1', internalLockLeaseTime, F:write, publish, latch
/// TTL]. The last write hold with no reads left deletes and publishes `1` (wake all); with
/// own reads left, the mode falls back to `read` silently.
const WRITE_UNLOCK: Lua = Lua {
    name: "write unlock",
    text: r#"
local replay = redis.call('get', KEYS[3])
if replay then
    return tonumber(replay)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if not mode then
    redis.call(ARGV[4], KEYS[2], ARGV[1])
    redis.call('set', KEYS[3], 1, 'px', ARGV[5])
    return nil
end
if mode == 'write' then
    if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
        return nil
    end
    local count = redis.call('hincrby', KEYS[1], ARGV[3], -1)
    if count > 0 then
        redis.call('pexpire', KEYS[1], ARGV[2])
        redis.call('set', KEYS[3], 0, 'px', ARGV[5])
        return 0
    end
    redis.call('hdel', KEYS[1], ARGV[3])
    if redis.call('hlen', KEYS[1]) == 1 then
        redis.call('del', KEYS[1])
        redis.call(ARGV[4], KEYS[2], ARGV[1])
    else
        redis.call('hset', KEYS[1], 'mode', 'read')
    end
    redis.call('set', KEYS[3], 1, 'px', ARGV[5])
    return 1
end
return nil
"#,
};

/// 7.6 read force unlock. KEYS [N, channel]; ARGV ['0', publish]. Timeout keys expire alone.
const READ_FORCE_UNLOCK: Lua = Lua {
    name: "read force unlock",
    text: r#"
if redis.call('hget', KEYS[1], 'mode') == 'read' then
    redis.call('del', KEYS[1])
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
return 0
"#,
};

/// 7.6 write force unlock. KEYS [N, channel]; ARGV ['1', publish].
const WRITE_FORCE_UNLOCK: Lua = Lua {
    name: "write force unlock",
    text: r#"
if redis.call('hget', KEYS[1], 'mode') == 'write' then
    redis.call('del', KEYS[1])
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
return 0
"#,
};

/// 7.6 read isLocked. KEYS [N]. Read mode, or write mode with a read field beside it.
const READ_IS_LOCKED: Lua = Lua {
    name: "read isLocked",
    text: r#"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'read' or (mode == 'write' and redis.call('hlen', KEYS[1]) > 2) then
    return 1
end
return 0
"#,
};

/// 7.7 (4.x). KEYS in pairs [N_j, key prefix_j]; ARGV [lease, then per pair a count n_j and
/// n_j read fields]. Renews only the listed (own) holders' timeout keys, then the hash.
const READ_RENEW_BATCH: Lua = Lua {
    name: "read batch renewal",
    text: r#"
local renewed = {}
local arg = 2
for j = 1, #KEYS, 2 do
    local listed = tonumber(ARGV[arg])
    arg = arg + 1
    local alive = false
    for _ = 1, listed do
        local field = ARGV[arg]
        arg = arg + 1
        local holds = redis.call('hget', KEYS[j], field)
        if holds then
            alive = true
            for k = tonumber(holds), 1, -1 do
                redis.call('pexpire', KEYS[j + 1] .. ':' .. field .. ':rwlock_timeout:' .. k, ARGV[1])
            end
        end
    end
    if alive then
        redis.call('pexpire', KEYS[j], ARGV[1])
        renewed[#renewed + 1] = 1
    else
        renewed[#renewed + 1] = 0
    end
end
return renewed
"#,
};

/// 9.1 R(now, limit): return expired permits to the pool (publishing the new count when it
/// is positive). Returns how many were reclaimed and the new value.
macro_rules! permit_reclaim {
    () => {
        r#"
local function reclaim(value_key, zset, channel, now, limit, publish)
    local expired
    if limit then
        expired = redis.call('zrangebyscore', zset, 0, now, 'limit', 0, limit)
    else
        expired = redis.call('zrangebyscore', zset, 0, now)
    end
    if #expired == 0 then
        return 0, nil
    end
    for _, id in ipairs(expired) do
        redis.call('zrem', zset, id)
    end
    local value = redis.call('incrby', value_key, #expired)
    if value > 0 then
        redis.call(publish, channel, value)
    end
    return #expired, value
end
"#
    };
}

/// 9.2 tryAcquire. KEYS [N, zset, channel]; ARGV [c, expiry score, now, no-lease score,
/// publish, id..]. Bulk `OK`; or `:<lowest score>` when a lease will end; or nil.
const PERMIT_ACQUIRE: Lua = Lua {
    name: "permit tryAcquire",
    text: concat!(
        permit_reclaim!(),
        r#"
reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[3], tonumber(ARGV[1]), ARGV[5])
local value = redis.call('get', KEYS[1])
if value and tonumber(value) >= tonumber(ARGV[1]) then
    redis.call('decrby', KEYS[1], ARGV[1])
    for i = 6, #ARGV do
        redis.call('zadd', KEYS[2], ARGV[2], ARGV[i])
    end
    local pttl = redis.call('pttl', KEYS[1])
    if pttl > 0 then
        redis.call('pexpire', KEYS[2], pttl)
    end
    return 'OK'
end
local lowest = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if lowest[2] and lowest[2] ~= ARGV[4] then
    return ':' .. lowest[2]
end
return nil
"#
    ),
};

/// 9.2 tryRelease(id). KEYS [N, channel, zset]; ARGV [id, '1', now, publish]. 1 = released
/// in time; 0 = unknown id, or expired (which still returns the permit).
const PERMIT_RELEASE: Lua = Lua {
    name: "permit tryRelease",
    text: r#"
local expiry = redis.call('zscore', KEYS[3], ARGV[1])
if redis.call('zrem', KEYS[3], ARGV[1]) == 0 then
    return 0
end
local value = redis.call('incrby', KEYS[1], ARGV[2])
redis.call(ARGV[4], KEYS[2], value)
if tonumber(expiry) <= tonumber(ARGV[3]) then
    return 0
end
return 1
"#,
};

/// 9.2 availablePermits. KEYS [N, zset, channel]; ARGV [now, publish].
const PERMIT_AVAILABLE: Lua = Lua {
    name: "permit availablePermits",
    text: concat!(
        permit_reclaim!(),
        r#"
local reclaimed, value = reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[1], nil, ARGV[2])
if reclaimed > 0 then
    return value
end
local current = redis.call('get', KEYS[1])
if not current then
    return 0
end
return tonumber(current)
"#
    ),
};

/// 9.2 setPermits. KEYS [N, channel, zset]; ARGV [p, publish]. Expired permits still count
/// as acquired; publishes the new total p.
const PERMIT_SET: Lua = Lua {
    name: "permit setPermits",
    text: r#"
local current = redis.call('get', KEYS[1])
if not current then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return nil
end
local total = tonumber(current) + redis.call('zcount', KEYS[3], 0, '+inf')
local wanted = tonumber(ARGV[1])
if total == wanted then
    return nil
end
redis.call('incrby', KEYS[1], wanted - total)
redis.call(ARGV[2], KEYS[2], ARGV[1])
return nil
"#,
};

/// 8/9 trySetPermits (shared by both semaphores). KEYS [N, channel]; ARGV [permits,
/// publish].
const TRY_SET_PERMITS: Lua = Lua {
    name: "trySetPermits",
    text: r#"
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
return 0
"#,
};

/// 9.2 addPermits. KEYS [N, channel]; ARGV [delta, publish]. Publishes the delta, and only
/// a positive one (unlike RSemaphore).
const PERMIT_ADD: Lua = Lua {
    name: "permit addPermits",
    text: r#"
local current = redis.call('get', KEYS[1])
local value = 0
if current then
    value = tonumber(current)
end
redis.call('set', KEYS[1], value + tonumber(ARGV[1]))
if tonumber(ARGV[1]) > 0 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return nil
"#,
};

/// 9.2 updateLeaseTime. KEYS [N, zset, channel]; ARGV [id, new expiry, now, publish].
const PERMIT_UPDATE_LEASE: Lua = Lua {
    name: "permit updateLeaseTime",
    text: concat!(
        permit_reclaim!(),
        r#"
reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[3], nil, ARGV[4])
if redis.call('zscore', KEYS[2], ARGV[1]) then
    redis.call('zadd', KEYS[2], ARGV[2], ARGV[1])
    return 1
end
return 0
"#
    ),
};

/// 10 countDown. KEYS [N, channel]; ARGV ['0', publish]. At zero or below the key goes; at
/// exactly zero `0` is published.
const LATCH_COUNT_DOWN: Lua = Lua {
    name: "latch countDown",
    text: r#"
local value = redis.call('decr', KEYS[1])
if value <= 0 then
    redis.call('del', KEYS[1])
end
if value == 0 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return nil
"#,
};

/// 10 trySetCount. KEYS [N, channel]; ARGV ['1', count, publish].
const LATCH_TRY_SET_COUNT: Lua = Lua {
    name: "latch trySetCount",
    text: r#"
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('set', KEYS[1], ARGV[2])
    redis.call(ARGV[3], KEYS[2], ARGV[1])
    return 1
end
return 0
"#,
};

/// 10 delete. KEYS [N, channel]; ARGV ['1', publish].
const LATCH_DELETE: Lua = Lua {
    name: "latch delete",
    text: r#"
if redis.call('del', KEYS[1]) == 1 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return 1
end
return 0
"#,
};

// ---------------------------------------------------------------------------------------
// Public types

/// How scripts publish and waiters subscribe (section 2.5): `PUBLISH`/`SUBSCRIBE` everywhere
/// except a Redis 7 Cluster in Redisson's default AUTO mode (`SPUBLISH`/`SSUBSCRIBE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publish {
    Plain,
    Sharded,
}

impl Publish {
    /// The command passed to the scripts as ARGV.
    pub fn command(self) -> &'static str {
        match self {
            Publish::Plain => "PUBLISH",
            Publish::Sharded => "SPUBLISH",
        }
    }

    fn subscribe(self) -> &'static str {
        match self {
            Publish::Plain => "SUBSCRIBE",
            Publish::Sharded => "SSUBSCRIBE",
        }
    }

    fn unsubscribe(self) -> &'static str {
        match self {
            Publish::Plain => "UNSUBSCRIBE",
            Publish::Sharded => "SUNSUBSCRIBE",
        }
    }
}

/// The fenced lock's token-path reply (5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fenced {
    /// Acquired (or re-entered) with this token. `-1` is Java's reading of a holder without
    /// TTL ([-1, -1]).
    Token(i64),
    /// Held by another owner for this many ms.
    Held(i64),
}

/// One permit-expirable tryAcquire attempt (9.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PermitAttempt {
    /// Bulk `OK`: this 16-byte id is ours.
    Acquired(Vec<u8>),
    /// `:<score>`: not acquired; the earliest lease ends at this epoch ms.
    NextExpiry(i64),
    /// nil: not acquired, and no lease will end.
    Nothing,
}

// ---------------------------------------------------------------------------------------
// The command connection: single server now, Cluster later, behind one `ConnectionLike`.

enum Commands {
    Single {
        client: redis::Client,
        con: Option<redis::Connection>,
    },
    Cluster(redis::cluster::ClusterConnection),
}

impl Commands {
    /// The connection to send on; a broken single-server connection is replaced first (a
    /// JVM reconnects too), so that a test restarting the server can go on with the same Jvm.
    fn con(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Commands::Single { client, con } => {
                if con.as_ref().is_none_or(|c| !c.is_open()) {
                    *con = Some(connect(client));
                }
                con.as_mut().unwrap()
            }
            Commands::Cluster(con) => con,
        }
    }
}

fn connect(client: &redis::Client) -> redis::Connection {
    let con = client
        .get_connection_with_timeout(CONNECT_TIMEOUT)
        .unwrap_or_else(|e| panic!("Jvm: connect: {e}"));
    con.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    con.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    con
}

/// Where and as whom subscriber connections connect.
#[derive(Clone, Debug)]
struct SubAddr {
    host: String,
    port: u16,
    username: Option<String>,
    password: Option<String>,
}

impl SubAddr {
    fn from_info(info: &redis::ConnectionInfo) -> SubAddr {
        let (host, port) = match info.addr() {
            ConnectionAddr::Tcp(host, port) => (host.clone(), *port),
            other => panic!("Jvm: plain TCP only, not {other:?}"),
        };
        let settings = info.redis_settings();
        SubAddr {
            host,
            port,
            username: settings.username().map(str::to_string),
            password: settings.password().map(str::to_string),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The emulated client

/// One emulated `RedissonClient` (see the module docs). Cheap to clone; clones are the same
/// JVM (same UUID, same pub/sub entries, same counter), so tests can hand it to threads that
/// play its Java threads.
#[derive(Clone)]
pub struct Jvm {
    inner: Arc<Inner>,
}

struct Inner {
    uuid: String,
    publish: Mutex<Publish>,
    watchdog_ms: AtomicU64,
    fair_wait_ms: AtomicU64,
    clock_offset_ms: AtomicI64,
    commands: Mutex<Commands>,
    sub_addr: SubAddr,
    sent: Arc<AtomicU64>,
    /// Pub/sub entries by channel (Java keys them `<uuid>:N`, which is one channel).
    entries: Mutex<HashMap<String, Arc<Entry>>>,
    /// `internalLockLeaseTime` by lock name: the ARGV that unlock re-arms the TTL with.
    leases: Mutex<HashMap<String, u64>>,
    renewals: Mutex<Renewals>,
    /// Dropping the sender stops the watchdog thread.
    watchdog: Mutex<Option<crossbeam_channel::Sender<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for (_, entry) in self.entries.lock().drain() {
            entry.close();
        }
    }
}

/// Locks this JVM renews in watchdog mode (acquired without a lease).
#[derive(Default)]
struct Renewals {
    /// RLock, fenced, fair and write locks: (name, field) -> acquisitions.
    exclusive: Vec<Held>,
    /// Read locks: every own holder is listed.
    read: Vec<Held>,
}

#[derive(Clone, Debug)]
struct Held {
    name: String,
    field: String,
    holds: u32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Renewal {
    Exclusive,
    Read,
}

impl Renewals {
    fn list(&mut self, kind: Renewal) -> &mut Vec<Held> {
        match kind {
            Renewal::Exclusive => &mut self.exclusive,
            Renewal::Read => &mut self.read,
        }
    }
}

/// How a wait loop ends when it runs out of time.
#[derive(Clone, Copy)]
enum Limit {
    /// `tryLock(waitTime)`: gives up (running the "acquire failed" hook) when used up.
    Try(Duration),
    /// `lock()`: Java never gives up; the guard only keeps a test from hanging.
    Guard(Duration),
}

impl Jvm {
    /// A client of the single server at `url`, with a fresh UUID, `PUBLISH` mode and the
    /// defaults of section 1 (watchdog 30 000 ms, fair slot 300 000 ms).
    pub fn new(url: &str) -> Jvm {
        let client = redis::Client::open(url).unwrap_or_else(|e| panic!("Jvm: {url}: {e}"));
        let sub_addr = SubAddr::from_info(client.get_connection_info());
        let con = connect(&client);
        Jvm::with_commands(
            Commands::Single {
                client,
                con: Some(con),
            },
            sub_addr,
            Publish::Plain,
        )
    }

    /// A single-server client in `SPUBLISH`/`SSUBSCRIBE` mode. Redisson never does this
    /// outside a Cluster, but Redis 7 accepts sharded pub/sub on a single server, which lets
    /// the sharded path be tested without a Cluster.
    pub fn sharded(url: &str) -> Jvm {
        let jvm = Jvm::new(url);
        jvm.set_publish(Publish::Sharded);
        jvm
    }

    /// A client of a Redis Cluster (seed node URLs), in `SPUBLISH` mode as Redisson's
    /// default AUTO mode chooses on Redis 7 (`PUBLISH` before); [`Jvm::set_publish`] switches to `PUBLISH`
    /// (`shardedSubscriptionMode=OFF` or Redisson before 3.22.0). Sharded subscriptions
    /// follow `MOVED` to the node owning the channel's slot.
    pub fn cluster(seeds: &[String]) -> Jvm {
        let client = redis::cluster::ClusterClient::builder(seeds.to_vec())
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(IO_TIMEOUT)
            .build()
            .unwrap_or_else(|e| panic!("Jvm: cluster {seeds:?}: {e}"));
        let con = client
            .get_connection()
            .unwrap_or_else(|e| panic!("Jvm: cluster {seeds:?}: {e}"));
        let first = redis::Client::open(seeds[0].as_str()).unwrap();
        let sub_addr = SubAddr::from_info(first.get_connection_info());
        // Redisson's AUTO mode publishes sharded where the server has it (Redis 7 on).
        let publish = if super::server_version() >= (7, 0) {
            Publish::Sharded
        } else {
            Publish::Plain
        };
        Jvm::with_commands(Commands::Cluster(con), sub_addr, publish)
    }

    fn with_commands(commands: Commands, sub_addr: SubAddr, publish: Publish) -> Jvm {
        Jvm {
            inner: Arc::new(Inner {
                uuid: Uuid::new_v4().to_string(),
                publish: Mutex::new(publish),
                watchdog_ms: AtomicU64::new(WATCHDOG_TIMEOUT_MS),
                fair_wait_ms: AtomicU64::new(FAIR_LOCK_WAIT_TIMEOUT_MS),
                clock_offset_ms: AtomicI64::new(0),
                commands: Mutex::new(commands),
                sub_addr,
                sent: Arc::new(AtomicU64::new(0)),
                entries: Mutex::new(HashMap::new()),
                leases: Mutex::new(HashMap::new()),
                renewals: Mutex::new(Renewals::default()),
                watchdog: Mutex::new(None),
            }),
        }
    }

    // --- configuration and observability ----------------------------------------------

    /// `PUBLISH` or `SPUBLISH` from now on (for scripts and new subscriptions).
    pub fn set_publish(&self, publish: Publish) {
        *self.inner.publish.lock() = publish;
    }

    pub fn publish(&self) -> Publish {
        *self.inner.publish.lock()
    }

    /// `lockWatchdogTimeout`: the lease of acquisitions without one, and the renewal period
    /// ×3. Tests shorten it to see renewals within seconds.
    pub fn set_watchdog_timeout_ms(&self, ms: u64) {
        self.inner.watchdog_ms.store(ms, Ordering::Relaxed);
    }

    pub fn watchdog_timeout_ms(&self) -> u64 {
        self.inner.watchdog_ms.load(Ordering::Relaxed)
    }

    /// `fairLockWaitTimeout`.
    pub fn set_fair_lock_wait_timeout_ms(&self, ms: u64) {
        self.inner.fair_wait_ms.store(ms, Ordering::Relaxed);
    }

    /// Skews this JVM's wall clock (fair-lock `now`, permit scores) by `offset` ms, for
    /// tests of disagreeing clocks (section 2.6).
    pub fn set_clock_offset_ms(&self, offset: i64) {
        self.inner.clock_offset_ms.store(offset, Ordering::Relaxed);
    }

    /// This client's UUID: 36 lowercase characters with hyphens.
    pub fn uuid(&self) -> &str {
        &self.inner.uuid
    }

    /// The owner field of Java thread `thread`: `<uuid>:<thread>`.
    pub fn owner(&self, thread: u64) -> String {
        format!("{}:{thread}", self.inner.uuid)
    }

    /// The write-lock field of Java thread `thread`: `<uuid>:<thread>:write`.
    pub fn write_owner(&self, thread: u64) -> String {
        format!("{}:write", self.owner(thread))
    }

    /// Commands sent so far on every connection of this JVM (scripts, SCRIPT LOADs after
    /// NOSCRIPT, GETs, latch DELs, SUBSCRIBE/UNSUBSCRIBE, resubscriptions, AUTH).
    pub fn commands_sent(&self) -> u64 {
        self.inner.sent.load(Ordering::SeqCst)
    }

    /// This JVM's wall clock in epoch ms (`System.currentTimeMillis()` + the test's offset).
    pub fn now_ms(&self) -> i64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        wall + self.inner.clock_offset_ms.load(Ordering::Relaxed)
    }

    /// A test's own subscription to `channel` in this JVM's publish mode (not counted).
    pub fn listen(&self, channel: &str) -> Listener {
        Listener::open(&self.inner.sub_addr, self.publish(), channel)
    }

    /// Pub/sub entries currently open (0 once every wait has ended: the last waiter
    /// unsubscribes).
    pub fn open_subscriptions(&self) -> usize {
        self.inner.entries.lock().len()
    }

    // --- plumbing ---------------------------------------------------------------------

    fn count(&self, n: u64) {
        self.inner.sent.fetch_add(n, Ordering::SeqCst);
    }

    fn publish_arg(&self) -> Vec<u8> {
        a(self.publish().command())
    }

    /// Runs `lua` as EVALSHA; when the server does not know it yet (NOSCRIPT), loads it with
    /// SCRIPT LOAD and sends the EVALSHA again, as Redisson does. On a Cluster the SCRIPT
    /// LOAD goes to the primary of the first key's slot (where the EVALSHA goes), not to
    /// every node.
    fn eval<T: FromRedisValue>(&self, lua: &Lua, keys: &[&str], args: &[Vec<u8>]) -> T {
        let sha = redis::Script::new(lua.text).get_hash().to_string();
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(&sha).arg(keys.len()).arg(keys);
        for arg in args {
            evalsha.arg(arg.as_slice());
        }
        let mut commands = self.inner.commands.lock();
        self.count(1);
        let reply = match evalsha.query::<Value>(commands.con()) {
            Err(e) if e.code() == Some("NOSCRIPT") => {
                self.count(1);
                let mut load = redis::cmd("SCRIPT");
                load.arg("LOAD").arg(lua.text);
                let loaded = match (&mut *commands, keys.first()) {
                    (Commands::Cluster(con), Some(key)) => {
                        let route = redis::cluster_routing::Route::new(
                            key_slot(key),
                            redis::cluster_routing::SlotAddr::Master,
                        );
                        con.route_command(
                            &load,
                            redis::cluster_routing::RoutingInfo::SingleNode(
                                redis::cluster_routing::SingleNodeRoutingInfo::SpecificNode(route),
                            ),
                        )
                        .and_then(|v| String::from_redis_value(v).map_err(Into::into))
                    }
                    (other, _) => load.query::<String>(other.con()),
                };
                let loaded =
                    loaded.unwrap_or_else(|e| panic!("Jvm: {}: SCRIPT LOAD: {e}", lua.name));
                assert_eq!(loaded, sha, "Jvm: {}: SCRIPT LOAD's SHA-1", lua.name);
                self.count(1);
                evalsha.query::<Value>(commands.con())
            }
            other => other,
        };
        let value = reply.unwrap_or_else(|e| panic!("Jvm: {}: {e}", lua.name));
        T::from_redis_value(value).unwrap_or_else(|e| panic!("Jvm: {} reply: {e}", lua.name))
    }

    /// One plain command (GET, HGET, EXISTS, DEL, ...).
    fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let mut commands = self.inner.commands.lock();
        self.count(1);
        cmd.query(commands.con())
            .unwrap_or_else(|e| panic!("Jvm: {cmd:?}: {e}"))
    }

    /// The lease ARGV of an acquisition: the caller's when > 0, otherwise the watchdog
    /// timeout (and the lock is then renewed by the watchdog).
    fn lease(&self, lease_ms: i64) -> u64 {
        if lease_ms > 0 {
            lease_ms as u64
        } else {
            self.watchdog_timeout_ms()
        }
    }

    /// Bookkeeping after a successful acquisition: `internalLockLeaseTime`, and watchdog
    /// registration when no lease was given.
    fn acquired(&self, kind: Renewal, name: &str, field: &str, lease_ms: i64) {
        self.inner
            .leases
            .lock()
            .insert(name.to_string(), self.lease(lease_ms));
        if lease_ms <= 0 {
            let mut renewals = self.inner.renewals.lock();
            let list = renewals.list(kind);
            match list.iter_mut().find(|h| h.name == name && h.field == field) {
                Some(held) => held.holds += 1,
                None => list.push(Held {
                    name: name.to_string(),
                    field: field.to_string(),
                    holds: 1,
                }),
            }
        }
    }

    /// Bookkeeping after an unlock reply: one hold fewer to renew; after a full release
    /// (reply 1) `internalLockLeaseTime` goes back to the watchdog timeout.
    fn released(&self, kind: Renewal, name: &str, field: &str, reply: Option<i64>) {
        let Some(reply) = reply else { return };
        if reply == 1 {
            self.inner.leases.lock().remove(name);
        }
        let mut renewals = self.inner.renewals.lock();
        let list = renewals.list(kind);
        if let Some(at) = list.iter().position(|h| h.name == name && h.field == field) {
            list[at].holds -= 1;
            if list[at].holds == 0 || (reply == 1 && kind == Renewal::Exclusive) {
                list.remove(at);
            }
        }
    }

    fn internal_lease(&self, name: &str) -> u64 {
        self.inner
            .leases
            .lock()
            .get(name)
            .copied()
            .unwrap_or_else(|| self.watchdog_timeout_ms())
    }

    /// Runs an unlock script with a fresh 32-hex requestId, then DELs the latch (Java sends
    /// the DEL after the reply without waiting for it).
    fn unlock_with_fresh_latch(
        &self,
        name: &str,
        run: impl FnOnce(&str) -> Option<i64>,
    ) -> Option<i64> {
        let request_id = new_request_id();
        let reply = run(&unlock_latch_key(name, &request_id));
        let _: i64 = self.query(redis::cmd("DEL").arg(unlock_latch_key(name, &request_id)));
        reply
    }

    /// Joins (or opens) this JVM's entry for `channel`, the subscription confirmed before
    /// this returns; `None` if that did not happen by `deadline`.
    fn subscribe(&self, channel: &str, kind: Kind, deadline: Instant) -> Option<Arc<Entry>> {
        let mut entries = self.inner.entries.lock();
        if let Some(entry) = entries.get(channel) {
            entry.state.lock().refs += 1;
            return Some(entry.clone());
        }
        let publish = self.publish();
        let conn = subscribe_conn(
            &self.inner.sub_addr,
            publish,
            channel,
            deadline,
            Some(&self.inner.sent),
        )
        .ok()?;
        let writer = conn.stream.try_clone().ok()?;
        let entry = Arc::new(Entry {
            kind,
            channel: channel.to_string(),
            publish,
            addr: self.inner.sub_addr.clone(),
            sent: self.inner.sent.clone(),
            state: Mutex::new(EntryState {
                refs: 1,
                ..EntryState::default()
            }),
            cond: Condvar::new(),
            stop: AtomicBool::new(false),
            writer: Mutex::new(writer),
            reader: Mutex::new(None),
        });
        let for_reader = entry.clone();
        let reader = thread::Builder::new()
            .name(format!("jvm-sub-{channel}"))
            .spawn(move || read_messages(for_reader, conn))
            .expect("spawn a subscriber reader");
        *entry.reader.lock() = Some(reader);
        entries.insert(channel.to_string(), entry.clone());
        Some(entry)
    }

    /// Leaves an entry; the last waiter unsubscribes and closes it.
    fn unsubscribe(&self, entry: Arc<Entry>) {
        let mut entries = self.inner.entries.lock();
        {
            let mut state = entry.state.lock();
            state.refs -= 1;
            if state.refs > 0 {
                return;
            }
        }
        entries.remove(&entry.channel);
        drop(entries);
        entry.close();
    }

    /// The waiting algorithm of 4.6, shared by every lock flavour: attempt; subscribe
    /// (bounded by the remaining time); then attempt, and wait for a message for at most the
    /// attempt's ttl (when 0 <= ttl < remaining) or the remaining time, until acquired or
    /// out of time. `attempt` returns `None` when acquired, else the ttl. `give_up` is the
    /// "acquire failed" hook (fair locks, 6.5), run only for `Limit::Try`.
    fn wait_loop(
        &self,
        channel: &str,
        limit: Limit,
        mut attempt: impl FnMut() -> Option<i64>,
        mut give_up: impl FnMut(),
    ) -> bool {
        let (budget, trying) = match limit {
            Limit::Try(wait) => (wait, true),
            Limit::Guard(guard) => (guard, false),
        };
        let deadline = Instant::now() + budget;
        let fail = |give_up: &mut dyn FnMut()| {
            if trying {
                give_up();
            }
            false
        };
        if attempt().is_none() {
            return true;
        }
        if Instant::now() >= deadline {
            return fail(&mut give_up);
        }
        let Some(entry) = self.subscribe(channel, Kind::Lock, deadline) else {
            return fail(&mut give_up);
        };
        let acquired = loop {
            let Some(ttl) = attempt() else { break true };
            let now = Instant::now();
            if now >= deadline {
                break fail(&mut give_up);
            }
            let remaining = deadline - now;
            let wait = if ttl >= 0 && Duration::from_millis(ttl as u64) < remaining {
                Duration::from_millis(ttl as u64)
            } else {
                remaining
            };
            entry.wait(wait);
            if Instant::now() >= deadline {
                break fail(&mut give_up);
            }
        };
        self.unsubscribe(entry);
        acquired
    }

    // --- RLock (section 4) ------------------------------------------------------------

    /// One acquire attempt (4.2): `None` = acquired or re-entered, `Some(ttl)` = held by
    /// another owner for `ttl` ms (`-1`: without TTL). `lease_ms` <= 0: watchdog mode.
    pub fn lock_acquire(&self, name: &str, thread: u64, lease_ms: i64) -> Option<i64> {
        let field = self.owner(thread);
        let lease = self.lease(lease_ms);
        let reply: Option<i64> = self.eval(&RLOCK_ACQUIRE, &[name], &[a(lease), a(&field)]);
        if reply.is_none() {
            self.acquired(Renewal::Exclusive, name, &field, lease_ms);
        }
        reply
    }

    /// `tryLock(wait, lease)`: the 4.6 loop on `redisson_lock__channel:{N}`.
    pub fn try_lock(&self, name: &str, thread: u64, wait: Duration, lease_ms: i64) -> bool {
        self.wait_loop(
            &lock_channel(name),
            Limit::Try(wait),
            || self.lock_acquire(name, thread, lease_ms),
            || {},
        )
    }

    /// `lock(lease)`: like [`Jvm::try_lock`] but never giving up in Java; `guard` only stops
    /// a test from hanging (then `false`).
    pub fn lock(&self, name: &str, thread: u64, lease_ms: i64, guard: Duration) -> bool {
        self.wait_loop(
            &lock_channel(name),
            Limit::Guard(guard),
            || self.lock_acquire(name, thread, lease_ms),
            || {},
        )
    }

    /// `unlock()` (4.3) with a fresh requestId, then DEL of the latch. `None` = not held by
    /// this thread (Java's IllegalMonitorStateException), `Some(0)` = still held,
    /// `Some(1)` = released and `0` published.
    pub fn unlock(&self, name: &str, thread: u64) -> Option<i64> {
        self.unlock_with_fresh_latch(name, |latch| self.run_unlock(name, thread, latch))
    }

    /// One run of the unlock script with a given 32-hex `request_id` (latch key
    /// [`unlock_latch_key`]), *without* the DEL that follows a received reply: what a Java
    /// unlock attempt whose reply was lost leaves behind. Running it again with the same
    /// id is Java's retry, and replays the first result.
    pub fn unlock_request(&self, name: &str, thread: u64, request_id: &str) -> Option<i64> {
        self.run_unlock(name, thread, &unlock_latch_key(name, request_id))
    }

    fn run_unlock(&self, name: &str, thread: u64, latch_key: &str) -> Option<i64> {
        let field = self.owner(thread);
        let channel = lock_channel(name);
        let reply: Option<i64> = self.eval(
            &RLOCK_UNLOCK,
            &[name, &channel, latch_key],
            &[
                a(0),
                a(self.internal_lease(name)),
                a(&field),
                self.publish_arg(),
                a(LATCH_TTL_MS),
            ],
        );
        self.released(Renewal::Exclusive, name, &field, reply);
        reply
    }

    /// `forceUnlock()` (4.4): deletes whoever holds it and publishes `0`.
    pub fn force_unlock(&self, name: &str) -> bool {
        let channel = lock_channel(name);
        let reply: i64 = self.eval(
            &RLOCK_FORCE_UNLOCK,
            &[name, &channel],
            &[a(0), self.publish_arg()],
        );
        reply == 1
    }

    /// `isLocked()`: `EXISTS N`.
    pub fn is_locked(&self, name: &str) -> bool {
        self.query::<i64>(redis::cmd("EXISTS").arg(name)) == 1
    }

    /// `isHeldByThread(thread)`: `HEXISTS N F`.
    pub fn is_held_by(&self, name: &str, thread: u64) -> bool {
        self.query::<i64>(redis::cmd("HEXISTS").arg(name).arg(self.owner(thread))) == 1
    }

    /// `getHoldCount()`: `HGET N F`, missing = 0.
    pub fn hold_count(&self, name: &str, thread: u64) -> i64 {
        self.query::<Option<i64>>(redis::cmd("HGET").arg(name).arg(self.owner(thread)))
            .unwrap_or(0)
    }

    /// One watchdog renewal of an RLock (or fenced or fair lock) held by `thread`: the 4.5
    /// batch script with one key. `true` = the field was there and the TTL is back at the
    /// watchdog timeout.
    pub fn renew(&self, name: &str, thread: u64) -> bool {
        let field = self.owner(thread);
        self.renew_batch(&[(name, field.as_str())], self.watchdog_timeout_ms()) == [1]
    }

    /// The 4.5 batch script over (lock name, field) pairs, as one call. In a Cluster the
    /// names must share a slot (the watchdog groups them).
    pub fn renew_batch(&self, locks: &[(&str, &str)], lease_ms: u64) -> Vec<i64> {
        let keys: Vec<&str> = locks.iter().map(|(name, _)| *name).collect();
        let mut args = vec![a(lease_ms)];
        args.extend(locks.iter().map(|(_, field)| a(field)));
        self.eval(&RENEW_BATCH, &keys, &args)
    }

    // --- fenced lock (5.1) ------------------------------------------------------------

    /// The token path: INCR on every acquisition, re-entries included.
    pub fn fenced_acquire(&self, name: &str, thread: u64, lease_ms: i64) -> Fenced {
        let field = self.owner(thread);
        let token = token_key(name);
        let reply: Vec<i64> = self.eval(
            &FENCED_ACQUIRE_TOKEN,
            &[name, &token],
            &[a(self.lease(lease_ms)), a(&field)],
        );
        if reply[0] == -1 {
            self.acquired(Renewal::Exclusive, name, &field, lease_ms);
            Fenced::Token(reply[1])
        } else {
            Fenced::Held(reply[0])
        }
    }

    /// `lock()`/`tryLock()` on a fenced lock: the same writes, RLock's nil/PTTL reply.
    pub fn fenced_acquire_plain(&self, name: &str, thread: u64, lease_ms: i64) -> Option<i64> {
        let field = self.owner(thread);
        let token = token_key(name);
        let reply: Option<i64> = self.eval(
            &FENCED_ACQUIRE_PLAIN,
            &[name, &token],
            &[a(self.lease(lease_ms)), a(&field)],
        );
        if reply.is_none() {
            self.acquired(Renewal::Exclusive, name, &field, lease_ms);
        }
        reply
    }

    /// `tryLockAndGetToken(wait, lease)`: the 4.6 loop over the token path.
    pub fn fenced_try_lock(
        &self,
        name: &str,
        thread: u64,
        wait: Duration,
        lease_ms: i64,
    ) -> Option<i64> {
        let mut token = None;
        let acquired = self.wait_loop(
            &lock_channel(name),
            Limit::Try(wait),
            || match self.fenced_acquire(name, thread, lease_ms) {
                Fenced::Token(t) => {
                    token = Some(t);
                    None
                }
                Fenced::Held(ttl) => Some(ttl),
            },
            || {},
        );
        if acquired { token } else { None }
    }

    /// `getToken()`: `GET redisson_lock_token:{N}`.
    pub fn fenced_token(&self, name: &str) -> Option<i64> {
        self.query(redis::cmd("GET").arg(token_key(name)))
    }

    // --- spin lock (5.2) --------------------------------------------------------------

    /// One spin-lock acquire attempt: as [`Jvm::lock_acquire`].
    pub fn spin_acquire(&self, name: &str, thread: u64, lease_ms: i64) -> Option<i64> {
        let field = self.owner(thread);
        let reply: Option<i64> = self.eval(
            &SPIN_ACQUIRE,
            &[name],
            &[a(self.lease(lease_ms)), a(&field)],
        );
        if reply.is_none() {
            self.acquired(Renewal::Exclusive, name, &field, lease_ms);
        }
        reply
    }

    /// `tryLock(wait, lease)` of the spin lock: no channel; attempts spaced by an
    /// exponential backoff (1 ms doubling to 128 ms), bounded by the remaining wait.
    pub fn spin_try_lock(&self, name: &str, thread: u64, wait: Duration, lease_ms: i64) -> bool {
        let deadline = Instant::now() + wait;
        let mut delay = SPIN_FIRST_DELAY;
        loop {
            if self.spin_acquire(name, thread, lease_ms).is_none() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            thread::sleep(delay.min(deadline - now));
            delay = (delay * 2).min(SPIN_MAX_DELAY);
        }
    }

    /// Spin-lock unlock (fresh requestId, then DEL of the latch). Publishes nothing.
    pub fn spin_unlock(&self, name: &str, thread: u64) -> Option<i64> {
        let field = self.owner(thread);
        let lease = self.internal_lease(name);
        let reply = self.unlock_with_fresh_latch(name, |latch| {
            self.eval(
                &SPIN_UNLOCK,
                &[name, latch],
                &[a(lease), a(&field), a(LATCH_TTL_MS)],
            )
        });
        self.released(Renewal::Exclusive, name, &field, reply);
        reply
    }

    /// Spin-lock force unlock: DEL, no publish.
    pub fn spin_force_unlock(&self, name: &str) -> bool {
        self.eval::<i64>(&SPIN_FORCE_UNLOCK, &[name], &[]) == 1
    }

    // --- fair lock (section 6) --------------------------------------------------------

    fn fair_keys(name: &str) -> (String, String) {
        (fair_queue_key(name), fair_timeout_key(name))
    }

    /// `tryLock()` without waiting (6.3): never queues.
    pub fn fair_acquire_once(&self, name: &str, thread: u64, lease_ms: i64) -> bool {
        let field = self.owner(thread);
        let (queue, timeouts) = Self::fair_keys(name);
        let reply: Option<i64> = self.eval(
            &FAIR_ACQUIRE_ONCE,
            &[name, &queue, &timeouts],
            &[
                a(self.lease(lease_ms)),
                a(&field),
                a(self.now_ms()),
                a(self.inner.fair_wait_ms.load(Ordering::Relaxed)),
            ],
        );
        if reply.is_none() {
            self.acquired(Renewal::Exclusive, name, &field, lease_ms);
        }
        reply.is_none()
    }

    /// One queueing attempt (6.4) with slot length `slot_ms`: `None` = acquired, else the
    /// ms to wait (the first queueing of a thread puts it at the tail with its deadline).
    pub fn fair_acquire(
        &self,
        name: &str,
        thread: u64,
        lease_ms: i64,
        slot_ms: u64,
    ) -> Option<i64> {
        let field = self.owner(thread);
        let (queue, timeouts) = Self::fair_keys(name);
        let reply: Option<i64> = self.eval(
            &FAIR_ACQUIRE,
            &[name, &queue, &timeouts],
            &[
                a(self.lease(lease_ms)),
                a(&field),
                a(slot_ms),
                a(self.now_ms()),
            ],
        );
        if reply.is_none() {
            self.acquired(Renewal::Exclusive, name, &field, lease_ms);
        }
        reply
    }

    /// 6.5, what `tryLock(wait)` runs when it gives up: leave the queue, moving everyone
    /// behind one slot earlier.
    pub fn fair_acquire_failed(&self, name: &str, thread: u64, slot_ms: u64) {
        let (queue, timeouts) = Self::fair_keys(name);
        let _: Value = self.eval(
            &FAIR_ACQUIRE_FAILED,
            &[&queue, &timeouts],
            &[a(self.owner(thread)), a(slot_ms)],
        );
    }

    /// `tryLock(wait, lease)` on a fair lock: the slot length is `wait` in ms (the default
    /// `fairLockWaitTimeout` when `wait` is zero), the loop waits on the thread's own
    /// channel, and giving up runs 6.5.
    pub fn fair_try_lock(&self, name: &str, thread: u64, wait: Duration, lease_ms: i64) -> bool {
        let slot = if wait.as_millis() > 0 {
            wait.as_millis() as u64
        } else {
            self.inner.fair_wait_ms.load(Ordering::Relaxed)
        };
        self.wait_loop(
            &fair_channel(name, &self.owner(thread)),
            Limit::Try(wait),
            || self.fair_acquire(name, thread, lease_ms, slot),
            || self.fair_acquire_failed(name, thread, slot),
        )
    }

    /// `lock(lease)` on a fair lock: slot `fairLockWaitTimeout`, no give-up in Java; `guard`
    /// only stops a test from hanging (the thread then stays queued, as a waiting Java
    /// thread would be).
    pub fn fair_lock(&self, name: &str, thread: u64, lease_ms: i64, guard: Duration) -> bool {
        let slot = self.inner.fair_wait_ms.load(Ordering::Relaxed);
        self.wait_loop(
            &fair_channel(name, &self.owner(thread)),
            Limit::Guard(guard),
            || self.fair_acquire(name, thread, lease_ms, slot),
            || {},
        )
    }

    /// Fair unlock (6.6) with a fresh requestId; the last hold publishes `0` to the queue
    /// head's own channel.
    pub fn fair_unlock(&self, name: &str, thread: u64) -> Option<i64> {
        let field = self.owner(thread);
        let (queue, timeouts) = Self::fair_keys(name);
        let prefix = lock_channel(name);
        let lease = self.internal_lease(name);
        let reply = self.unlock_with_fresh_latch(name, |latch| {
            self.eval(
                &FAIR_UNLOCK,
                &[name, &queue, &timeouts, &prefix, latch],
                &[
                    a(0),
                    a(lease),
                    a(&field),
                    a(self.now_ms()),
                    self.publish_arg(),
                    a(LATCH_TTL_MS),
                ],
            )
        });
        self.released(Renewal::Exclusive, name, &field, reply);
        reply
    }

    /// Fair force unlock (6.7).
    pub fn fair_force_unlock(&self, name: &str) -> bool {
        let (queue, timeouts) = Self::fair_keys(name);
        let prefix = lock_channel(name);
        let reply: i64 = self.eval(
            &FAIR_FORCE_UNLOCK,
            &[name, &queue, &timeouts, &prefix],
            &[a(0), a(self.now_ms()), self.publish_arg()],
        );
        reply == 1
    }

    // --- read-write lock (section 7) --------------------------------------------------

    /// One read acquire attempt (7.2): `None` = acquired, else the write holder's PTTL.
    pub fn read_acquire(&self, name: &str, thread: u64, lease_ms: i64) -> Option<i64> {
        let field = self.owner(thread);
        let prefix = rw_timeout_prefix(name, &field);
        let reply: Option<i64> = self.eval(
            &READ_ACQUIRE,
            &[name, &prefix],
            &[
                a(self.lease(lease_ms)),
                a(&field),
                a(self.write_owner(thread)),
            ],
        );
        if reply.is_none() {
            self.acquired(Renewal::Read, name, &field, lease_ms);
        }
        reply
    }

    /// `readLock().tryLock(wait, lease)`: the 4.6 loop on `redisson_rwlock:{N}`.
    pub fn read_try_lock(&self, name: &str, thread: u64, wait: Duration, lease_ms: i64) -> bool {
        self.wait_loop(
            &rw_channel(name),
            Limit::Try(wait),
            || self.read_acquire(name, thread, lease_ms),
            || {},
        )
    }

    /// Read unlock (7.3) with a fresh requestId. `Some(1)` = the hash went and `0` was
    /// published; `Some(0)` = others still hold; `None` = not held (or no lock at all, which
    /// also publishes `0`).
    pub fn read_unlock(&self, name: &str, thread: u64) -> Option<i64> {
        let field = self.owner(thread);
        let channel = rw_channel(name);
        let timeout_prefix = rw_timeout_prefix(name, &field);
        let key_prefix = rw_key_prefix(name);
        let reply = self.unlock_with_fresh_latch(name, |latch| {
            self.eval(
                &READ_UNLOCK,
                &[name, &channel, &timeout_prefix, &key_prefix, latch],
                &[a(0), a(&field), self.publish_arg(), a(LATCH_TTL_MS)],
            )
        });
        if reply.is_some() {
            // Each read unlock releases one own hold, whatever the reply says of the hash.
            self.released(Renewal::Read, name, &field, Some(0));
        }
        reply
    }

    /// One write acquire attempt (7.4).
    pub fn write_acquire(&self, name: &str, thread: u64, lease_ms: i64) -> Option<i64> {
        let field = self.write_owner(thread);
        let reply: Option<i64> = self.eval(
            &WRITE_ACQUIRE,
            &[name],
            &[a(self.lease(lease_ms)), a(&field)],
        );
        if reply.is_none() {
            self.acquired(Renewal::Exclusive, name, &field, lease_ms);
        }
        reply
    }

    /// `writeLock().tryLock(wait, lease)`: the 4.6 loop on `redisson_rwlock:{N}`.
    pub fn write_try_lock(&self, name: &str, thread: u64, wait: Duration, lease_ms: i64) -> bool {
        self.wait_loop(
            &rw_channel(name),
            Limit::Try(wait),
            || self.write_acquire(name, thread, lease_ms),
            || {},
        )
    }

    /// Write unlock (7.5) with a fresh requestId; the last write hold without reads left
    /// publishes `1`.
    pub fn write_unlock(&self, name: &str, thread: u64) -> Option<i64> {
        let field = self.write_owner(thread);
        let channel = rw_channel(name);
        let lease = self.internal_lease(name);
        let reply = self.unlock_with_fresh_latch(name, |latch| {
            self.eval(
                &WRITE_UNLOCK,
                &[name, &channel, latch],
                &[
                    a(1),
                    a(lease),
                    a(&field),
                    self.publish_arg(),
                    a(LATCH_TTL_MS),
                ],
            )
        });
        self.released(Renewal::Exclusive, name, &field, reply);
        reply
    }

    /// Read force unlock (7.6): only in read mode; publishes `0`.
    pub fn read_force_unlock(&self, name: &str) -> bool {
        let channel = rw_channel(name);
        let reply: i64 = self.eval(
            &READ_FORCE_UNLOCK,
            &[name, &channel],
            &[a(0), self.publish_arg()],
        );
        reply == 1
    }

    /// Write force unlock (7.6): only in write mode; publishes `1`.
    pub fn write_force_unlock(&self, name: &str) -> bool {
        let channel = rw_channel(name);
        let reply: i64 = self.eval(
            &WRITE_FORCE_UNLOCK,
            &[name, &channel],
            &[a(1), self.publish_arg()],
        );
        reply == 1
    }

    /// `readLock().isLocked()` (7.6).
    pub fn read_is_locked(&self, name: &str) -> bool {
        self.eval::<i64>(&READ_IS_LOCKED, &[name], &[]) == 1
    }

    /// `writeLock().isLocked()`: `HGET N mode` = `write`.
    pub fn write_is_locked(&self, name: &str) -> bool {
        self.query::<Option<String>>(redis::cmd("HGET").arg(name).arg("mode"))
            .as_deref()
            == Some("write")
    }

    /// One read renewal (7.7, 4.x batch script) of lock `name` for this JVM's reading
    /// `threads`: only their timeout keys, then the hash. `true` = one of them still held.
    pub fn renew_read(&self, name: &str, threads: &[u64]) -> bool {
        let fields: Vec<String> = threads.iter().map(|t| self.owner(*t)).collect();
        self.renew_read_batch(&[(name, fields)], self.watchdog_timeout_ms()) == [1]
    }

    /// The 7.7 batch over (lock name, own read fields) pairs, as one call.
    pub fn renew_read_batch(&self, locks: &[(&str, Vec<String>)], lease_ms: u64) -> Vec<i64> {
        let prefixes: Vec<String> = locks.iter().map(|(name, _)| rw_key_prefix(name)).collect();
        let mut keys = Vec::new();
        let mut args = vec![a(lease_ms)];
        for ((name, fields), prefix) in locks.iter().zip(&prefixes) {
            keys.push(*name);
            keys.push(prefix.as_str());
            args.push(a(fields.len()));
            args.extend(fields.iter().map(a));
        }
        self.eval(&READ_RENEW_BATCH, &keys, &args)
    }

    /// One write renewal: the 4.5 batch script with field `F:write`.
    pub fn renew_write(&self, name: &str, thread: u64) -> bool {
        let field = self.write_owner(thread);
        self.renew_batch(&[(name, field.as_str())], self.watchdog_timeout_ms()) == [1]
    }

    // --- watchdog (4.5, 7.7) ----------------------------------------------------------

    /// Starts the background renewal of every lock this JVM acquired without a lease: every
    /// third of the watchdog timeout, one batch call per slot and 100 locks (read locks
    /// through 7.7). A lock whose renewal replies 0 is no longer renewed. The thread ends
    /// when the last clone of this `Jvm` is dropped.
    pub fn start_watchdog(&self) {
        let mut slot = self.inner.watchdog.lock();
        if slot.is_some() {
            return;
        }
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let weak = Arc::downgrade(&self.inner);
        thread::Builder::new()
            .name("jvm-watchdog".to_string())
            .spawn(move || {
                loop {
                    let period = match weak.upgrade() {
                        Some(inner) => inner.watchdog_ms.load(Ordering::Relaxed) / 3,
                        None => return,
                    };
                    match stopped.recv_timeout(Duration::from_millis(period.max(1))) {
                        Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    let Some(inner) = weak.upgrade() else { return };
                    Jvm { inner }.renew_all();
                }
            })
            .expect("spawn the watchdog");
        *slot = Some(stop);
    }

    /// One watchdog round (what the background thread does each period).
    pub fn renew_all(&self) {
        let lease = self.watchdog_timeout_ms();
        let (exclusive, read) = {
            let renewals = self.inner.renewals.lock();
            (renewals.exclusive.clone(), renewals.read.clone())
        };
        // Java renews, per lock, the field of the first thread registered for it.
        let mut by_slot: HashMap<u16, Vec<(String, String)>> = HashMap::new();
        let mut seen = Vec::new();
        for held in exclusive {
            if !seen.contains(&held.name) {
                seen.push(held.name.clone());
                by_slot
                    .entry(key_slot(&held.name))
                    .or_default()
                    .push((held.name, held.field));
            }
        }
        for locks in by_slot.values() {
            for chunk in locks.chunks(WATCHDOG_BATCH) {
                let pairs: Vec<(&str, &str)> = chunk
                    .iter()
                    .map(|(n, f)| (n.as_str(), f.as_str()))
                    .collect();
                let replies = self.renew_batch(&pairs, lease);
                let mut renewals = self.inner.renewals.lock();
                for ((name, field), reply) in chunk.iter().zip(replies) {
                    if reply == 0 {
                        renewals
                            .exclusive
                            .retain(|h| !(&h.name == name && &h.field == field));
                    }
                }
            }
        }
        let mut readers: HashMap<u16, Vec<(String, Vec<String>)>> = HashMap::new();
        for held in read {
            let locks = readers.entry(key_slot(&held.name)).or_default();
            match locks.iter_mut().find(|(n, _)| *n == held.name) {
                Some((_, fields)) => fields.push(held.field),
                None => locks.push((held.name, vec![held.field])),
            }
        }
        for locks in readers.values() {
            for chunk in locks.chunks(WATCHDOG_BATCH) {
                let pairs: Vec<(&str, Vec<String>)> =
                    chunk.iter().map(|(n, f)| (n.as_str(), f.clone())).collect();
                let replies = self.renew_read_batch(&pairs, lease);
                let mut renewals = self.inner.renewals.lock();
                for ((name, _), reply) in chunk.iter().zip(replies) {
                    if reply == 0 {
                        renewals.read.retain(|h| &h.name != name);
                    }
                }
            }
        }
    }

    /// Locks (name, field) the watchdog currently renews, exclusive and read.
    pub fn renewed_locks(&self) -> Vec<(String, String)> {
        let renewals = self.inner.renewals.lock();
        renewals
            .exclusive
            .iter()
            .chain(&renewals.read)
            .map(|h| (h.name.clone(), h.field.clone()))
            .collect()
    }

    // --- permit-expirable semaphore (section 9) ---------------------------------------

    /// One tryAcquire attempt for one permit with a fresh 16-byte id. `lease_ms` <= 0: no
    /// lease (score 922337203685477).
    pub fn permit_acquire(&self, name: &str, lease_ms: i64) -> PermitAttempt {
        let id = new_permit_id();
        let zset = permit_zset_key(name);
        let channel = semaphore_channel(name);
        let now = self.now_ms();
        let expiry = if lease_ms > 0 {
            now + lease_ms
        } else {
            NO_LEASE_SCORE
        };
        let reply: Value = self.eval(
            &PERMIT_ACQUIRE,
            &[name, &zset, &channel],
            &[
                a(1),
                a(expiry),
                a(now),
                a(NO_LEASE_SCORE),
                self.publish_arg(),
                id.to_vec(),
            ],
        );
        match reply {
            Value::Nil => PermitAttempt::Nothing,
            Value::BulkString(bytes) if bytes == b"OK" => PermitAttempt::Acquired(id.to_vec()),
            Value::BulkString(bytes) if bytes.first() == Some(&b':') => {
                let score = std::str::from_utf8(&bytes[1..]).unwrap();
                PermitAttempt::NextExpiry(score.parse::<f64>().unwrap() as i64)
            }
            other => panic!("Jvm: permit tryAcquire replied {other:?}"),
        }
    }

    /// `tryAcquire(wait, lease)`: attempt, subscribe to `redisson_sc:{N}`, then attempt and
    /// wait for a count message for at most the time to the earliest lease end (by this
    /// JVM's clock) or the remaining wait. The acquired 16-byte id, or `None`.
    pub fn permit_try_acquire(&self, name: &str, wait: Duration, lease_ms: i64) -> Option<Vec<u8>> {
        let deadline = Instant::now() + wait;
        let attempt = || match self.permit_acquire(name, lease_ms) {
            PermitAttempt::Acquired(id) => Ok(id),
            PermitAttempt::NextExpiry(score) => Err(Some((score - self.now_ms()).max(0))),
            PermitAttempt::Nothing => Err(None),
        };
        if let Ok(id) = attempt() {
            return Some(id);
        }
        if Instant::now() >= deadline {
            return None;
        }
        let entry = self.subscribe(&semaphore_channel(name), Kind::Semaphore, deadline)?;
        let acquired = loop {
            let until_expiry = match attempt() {
                Ok(id) => break Some(id),
                Err(until) => until,
            };
            let now = Instant::now();
            if now >= deadline {
                break None;
            }
            let remaining = deadline - now;
            let wait = match until_expiry {
                Some(ms) if Duration::from_millis(ms as u64) < remaining => {
                    Duration::from_millis(ms as u64)
                }
                _ => remaining,
            };
            entry.wait(wait);
            if Instant::now() >= deadline {
                break None;
            }
        };
        self.unsubscribe(entry);
        acquired
    }

    /// `tryRelease(id)`: `true` = released before its lease ended.
    pub fn permit_release(&self, name: &str, id: &[u8]) -> bool {
        let zset = permit_zset_key(name);
        let channel = semaphore_channel(name);
        let reply: i64 = self.eval(
            &PERMIT_RELEASE,
            &[name, &channel, &zset],
            &[id.to_vec(), a(1), a(self.now_ms()), self.publish_arg()],
        );
        reply == 1
    }

    /// `availablePermits()` (reclaims expired permits first).
    pub fn permit_available(&self, name: &str) -> i64 {
        let zset = permit_zset_key(name);
        let channel = semaphore_channel(name);
        self.eval(
            &PERMIT_AVAILABLE,
            &[name, &zset, &channel],
            &[a(self.now_ms()), self.publish_arg()],
        )
    }

    /// `setPermits(p)`: the total (available + acquired) becomes p; publishes p.
    pub fn permit_set_permits(&self, name: &str, permits: i64) {
        let zset = permit_zset_key(name);
        let channel = semaphore_channel(name);
        let _: Value = self.eval(
            &PERMIT_SET,
            &[name, &channel, &zset],
            &[a(permits), self.publish_arg()],
        );
    }

    /// `trySetPermits(p)`: only when the semaphore does not exist; publishes p.
    pub fn permit_try_set_permits(&self, name: &str, permits: i64) -> bool {
        let channel = semaphore_channel(name);
        let reply: i64 = self.eval(
            &TRY_SET_PERMITS,
            &[name, &channel],
            &[a(permits), self.publish_arg()],
        );
        reply == 1
    }

    /// `addPermits(delta)`: publishes the delta when it is positive.
    pub fn permit_add_permits(&self, name: &str, delta: i64) {
        let channel = semaphore_channel(name);
        let _: Value = self.eval(
            &PERMIT_ADD,
            &[name, &channel],
            &[a(delta), self.publish_arg()],
        );
    }

    /// `updateLeaseTime(id, lease)`: the permit's lease ends `lease_ms` from now. `false` if
    /// the id is unknown or had expired.
    pub fn permit_update_lease_time(&self, name: &str, id: &[u8], lease_ms: i64) -> bool {
        let zset = permit_zset_key(name);
        let channel = semaphore_channel(name);
        let now = self.now_ms();
        let reply: i64 = self.eval(
            &PERMIT_UPDATE_LEASE,
            &[name, &zset, &channel],
            &[id.to_vec(), a(now + lease_ms), a(now), self.publish_arg()],
        );
        reply == 1
    }

    // --- count-down latch (section 10) ------------------------------------------------

    /// `trySetCount(count)`: only when no count is set; publishes `1`.
    pub fn latch_try_set_count(&self, name: &str, count: i64) -> bool {
        let channel = latch_channel(name);
        let reply: i64 = self.eval(
            &LATCH_TRY_SET_COUNT,
            &[name, &channel],
            &[a(1), a(count), self.publish_arg()],
        );
        reply == 1
    }

    /// `countDown()`: reaching exactly zero deletes the key and publishes `0`.
    pub fn latch_count_down(&self, name: &str) {
        let channel = latch_channel(name);
        let _: Value = self.eval(
            &LATCH_COUNT_DOWN,
            &[name, &channel],
            &[a(0), self.publish_arg()],
        );
    }

    /// `getCount()`: `GET N`, missing = 0.
    pub fn latch_get_count(&self, name: &str) -> i64 {
        self.query::<Option<i64>>(redis::cmd("GET").arg(name))
            .unwrap_or(0)
    }

    /// `delete()`: publishes `1` when there was a count.
    pub fn latch_delete(&self, name: &str) -> bool {
        let channel = latch_channel(name);
        let reply: i64 = self.eval(
            &LATCH_DELETE,
            &[name, &channel],
            &[a(1), self.publish_arg()],
        );
        reply == 1
    }

    /// `await(timeout)`: open at once when the count is 0; otherwise subscribe to the latch
    /// channel and, while the count is above 0, wait for the JVM-local latch to be opened by
    /// `0` (closed again by `1`), at most the remaining time.
    pub fn latch_await(&self, name: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        if self.latch_get_count(name) <= 0 {
            return true;
        }
        let Some(entry) = self.subscribe(&latch_channel(name), Kind::Latch, deadline) else {
            return false;
        };
        let opened = loop {
            if self.latch_get_count(name) <= 0 {
                break true;
            }
            let now = Instant::now();
            if now >= deadline {
                break false;
            }
            entry.wait_open(deadline - now);
        };
        self.unsubscribe(entry);
        opened
    }
}

/// A 32-lowercase-hex unlock requestId. Java draws 16 bytes from Xoshiro256++; a v4 UUID
/// (122 random bits) is as unique for this purpose.
pub fn new_request_id() -> String {
    Uuid::new_v4().simple().to_string()
}

/// A 16-byte permit id, stored raw (binary) in the zset.
pub fn new_permit_id() -> [u8; 16] {
    *Uuid::new_v4().as_bytes()
}

/// An ASCII-decimal (or text) script argument.
fn a(x: impl std::fmt::Display) -> Vec<u8> {
    x.to_string().into_bytes()
}

// ---------------------------------------------------------------------------------------
// Pub/sub entries: the JVM-local side of a subscription (section 3)

/// Which Java listener a channel has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Lock, fair waiter and read-write channels: `0` wakes one thread, `1` all parked.
    Lock,
    /// `redisson_sc:…`: m > 0 releases min(subscribers, m) permits.
    Semaphore,
    /// The count-down latch: `0` opens, `1` closes.
    Latch,
}

struct Entry {
    kind: Kind,
    channel: String,
    /// The mode it subscribed in (and resubscribes and unsubscribes in).
    publish: Publish,
    /// Where to resubscribe after a lost connection: the configured address (and AUTH).
    addr: SubAddr,
    /// The JVM's command counter (resubscriptions count).
    sent: Arc<AtomicU64>,
    state: Mutex<EntryState>,
    /// Signalled on messages, and on `stop` (to end the reader's backoff at once).
    cond: Condvar,
    stop: AtomicBool,
    /// A clone of the current subscriber connection's socket (replaced on resubscription).
    writer: Mutex<TcpStream>,
    reader: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct EntryState {
    /// Threads of this JVM using the entry (Java's reference count).
    refs: usize,
    /// The JVM-local semaphore's permits (lock and semaphore kinds).
    permits: usize,
    /// Threads parked on it now (Java's `getQueueLength()`).
    parked: usize,
    /// The JVM-local latch (latch kind); starts closed.
    open: bool,
}

impl Entry {
    /// What Java's listener does with one message (payloads are parsed as a Long; anything
    /// else is ignored).
    fn deliver(&self, payload: &[u8]) {
        let Some(message) = std::str::from_utf8(payload)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
        else {
            return;
        };
        let mut state = self.state.lock();
        match (self.kind, message) {
            (Kind::Lock, 0) => state.permits += 1,
            (Kind::Lock, 1) => state.permits += state.parked,
            (Kind::Semaphore, m) if m > 0 => {
                state.permits += (m as usize).min(state.refs);
            }
            (Kind::Latch, 0) => state.open = true,
            (Kind::Latch, 1) => state.open = false,
            _ => return,
        }
        self.cond.notify_all();
    }

    /// `Semaphore.tryAcquire(timeout)`: a permit, or `false` after `timeout`. A permit
    /// released while nobody was parked is taken at once.
    fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock();
        if state.permits > 0 {
            state.permits -= 1;
            return true;
        }
        state.parked += 1;
        let got = loop {
            if state.permits > 0 {
                state.permits -= 1;
                break true;
            }
            if self.cond.wait_until(&mut state, deadline).timed_out() {
                if state.permits > 0 {
                    state.permits -= 1;
                    break true;
                }
                break false;
            }
        };
        state.parked -= 1;
        got
    }

    /// The reclosable latch's `await(timeout)`: `true` once open.
    fn wait_open(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock();
        while !state.open {
            if self.cond.wait_until(&mut state, deadline).timed_out() {
                return state.open;
            }
        }
        true
    }

    /// Unsubscribes (as Java's last waiter does), then closes the connection and joins the
    /// reader, which the shutdown (or, in a backoff, the signal) wakes at once.
    fn close(&self) {
        self.stop.store(true, Ordering::SeqCst);
        {
            let _state = self.state.lock();
            self.cond.notify_all();
        }
        {
            let mut writer = self.writer.lock();
            self.sent.fetch_add(1, Ordering::SeqCst);
            let _ = writer.write_all(&resp_command(&[
                self.publish.unsubscribe().as_bytes(),
                self.channel.as_bytes(),
            ]));
            let _ = writer.shutdown(Shutdown::Both);
        }
        if let Some(reader) = self.reader.lock().take() {
            let _ = reader.join();
        }
    }

    /// Sleeps `delay` unless the entry is released first: `false` once it is.
    fn pause(&self, delay: Duration) -> bool {
        let until = Instant::now() + delay;
        let mut state = self.state.lock();
        while !self.stop.load(Ordering::SeqCst) {
            if self.cond.wait_until(&mut state, until).timed_out() {
                return !self.stop.load(Ordering::SeqCst);
            }
        }
        false
    }

    /// After the subscriber connection `lost` failed: back off, reconnect and subscribe the
    /// channel again (on `lost`'s node first, then on the configured address; `MOVED` is
    /// followed), doubling the backoff while that fails. `None` once the entry is released.
    /// Nobody is woken: Java's resubscription does not wake its waiters either.
    fn resubscribe(&self, lost: &SubConn) -> Option<SubConn> {
        let mut nodes = vec![lost.node.clone()];
        let configured = (self.addr.host.clone(), self.addr.port);
        if !nodes.contains(&configured) {
            nodes.push(configured);
        }
        let mut delay = RESUBSCRIBE_FIRST_DELAY;
        loop {
            if !self.pause(delay) {
                return None;
            }
            for (host, port) in &nodes {
                let deadline = Instant::now() + RESUBSCRIBE_TIMEOUT;
                let Ok(conn) = subscribe_at(
                    &self.addr,
                    host,
                    *port,
                    self.publish,
                    &self.channel,
                    deadline,
                    Some(&self.sent),
                ) else {
                    continue;
                };
                let Ok(clone) = conn.stream.try_clone() else {
                    continue;
                };
                // `close` sets `stop` before it takes the writer: either it shuts this
                // connection down, or this sees `stop` and does.
                let mut writer = self.writer.lock();
                if self.stop.load(Ordering::SeqCst) {
                    let _ = clone.shutdown(Shutdown::Both);
                    return None;
                }
                *writer = clone;
                return Some(conn);
            }
            delay = (delay * 2).min(RESUBSCRIBE_MAX_DELAY);
        }
    }
}

/// The reader thread of one entry: every `message`/`smessage` goes to [`Entry::deliver`].
/// A connection error while the entry is in use (a killed connection, a restarted server)
/// is followed by a resubscription ([`Entry::resubscribe`]); the thread ends when the entry
/// is released.
fn read_messages(entry: Arc<Entry>, mut conn: SubConn) {
    loop {
        while !entry.stop.load(Ordering::SeqCst) {
            match conn.read_frame(Instant::now() + READER_TICK) {
                Ok(Some(frame)) => {
                    if let Some((_, payload)) = frame.as_message() {
                        entry.deliver(&payload);
                    }
                }
                Ok(None) => {}
                Err(_) => break,
            }
        }
        if entry.stop.load(Ordering::SeqCst) {
            return;
        }
        match entry.resubscribe(&conn) {
            Some(again) => conn = again,
            None => return,
        }
    }
}

// ---------------------------------------------------------------------------------------
// RESP2 subscriber connections

/// One RESP2 reply.
#[derive(Clone, Debug, PartialEq)]
enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Resp>>),
}

impl Resp {
    fn bytes(&self) -> Option<&[u8]> {
        match self {
            Resp::Bulk(Some(b)) => Some(b),
            Resp::Simple(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// (channel, payload) of a pub/sub message, plain or sharded.
    fn as_message(&self) -> Option<(String, Vec<u8>)> {
        let Resp::Array(Some(items)) = self else {
            return None;
        };
        let kind = items.first()?.bytes()?;
        if (kind == b"message" || kind == b"smessage") && items.len() == 3 {
            let channel = String::from_utf8_lossy(items[1].bytes()?).into_owned();
            Some((channel, items[2].bytes()?.to_vec()))
        } else {
            None
        }
    }
}

/// Parses one complete frame at the start of `buf`: `Ok(None)` when more bytes are needed.
fn parse_frame(buf: &[u8]) -> io::Result<Option<(Resp, usize)>> {
    fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")?;
        Some((&buf[at..at + end], at + end + 2))
    }
    fn bad(what: &str) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, what.to_string())
    }
    fn number(text: &[u8]) -> io::Result<i64> {
        std::str::from_utf8(text)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("bad RESP number"))
    }
    fn at(buf: &[u8], pos: usize) -> io::Result<Option<(Resp, usize)>> {
        let Some(&tag) = buf.get(pos) else {
            return Ok(None);
        };
        let Some((text, next)) = line(buf, pos + 1) else {
            return Ok(None);
        };
        match tag {
            b'+' => Ok(Some((
                Resp::Simple(String::from_utf8_lossy(text).into_owned()),
                next,
            ))),
            b'-' => Ok(Some((
                Resp::Error(String::from_utf8_lossy(text).into_owned()),
                next,
            ))),
            b':' => Ok(Some((Resp::Int(number(text)?), next))),
            b'$' => {
                let len = number(text)?;
                if len < 0 {
                    return Ok(Some((Resp::Bulk(None), next)));
                }
                let end = next + len as usize;
                if buf.len() < end + 2 {
                    return Ok(None);
                }
                Ok(Some((Resp::Bulk(Some(buf[next..end].to_vec())), end + 2)))
            }
            b'*' => {
                let len = number(text)?;
                if len < 0 {
                    return Ok(Some((Resp::Array(None), next)));
                }
                let mut items = Vec::with_capacity(len as usize);
                let mut pos = next;
                for _ in 0..len {
                    match at(buf, pos)? {
                        Some((item, after)) => {
                            items.push(item);
                            pos = after;
                        }
                        None => return Ok(None),
                    }
                }
                Ok(Some((Resp::Array(Some(items)), pos)))
            }
            _ => Err(bad("unexpected RESP type")),
        }
    }
    at(buf, 0)
}

fn resp_command(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", parts.len()).into_bytes();
    for part in parts {
        out.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A connection for SUBSCRIBE/SSUBSCRIBE: a socket and the bytes read but not yet parsed,
/// kept across read timeouts so that a frame split by one is not lost.
struct SubConn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// The (host, port) it was opened to.
    node: (String, u16),
}

impl SubConn {
    fn connect(
        host: &str,
        port: u16,
        auth: &SubAddr,
        deadline: Instant,
        sent: Option<&AtomicU64>,
    ) -> io::Result<SubConn> {
        let addr = (host, port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))?;
        let left = deadline
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(1), CONNECT_TIMEOUT);
        let stream = TcpStream::connect_timeout(&addr, left)?;
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let mut conn = SubConn {
            stream,
            buf: Vec::new(),
            node: (host.to_string(), port),
        };
        if let Some(password) = &auth.password {
            let mut parts: Vec<&[u8]> = vec![b"AUTH"];
            if let Some(user) = &auth.username {
                parts.push(user.as_bytes());
            }
            parts.push(password.as_bytes());
            if let Some(sent) = sent {
                sent.fetch_add(1, Ordering::SeqCst);
            }
            conn.stream.write_all(&resp_command(&parts))?;
            match conn.read_frame(deadline)? {
                Some(Resp::Simple(_)) => {}
                other => {
                    return Err(io::Error::other(format!("AUTH replied {other:?}")));
                }
            }
        }
        Ok(conn)
    }

    /// The next frame, `Ok(None)` if none was complete by `deadline`.
    fn read_frame(&mut self, deadline: Instant) -> io::Result<Option<Resp>> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some((frame, used)) = parse_frame(&self.buf)? {
                self.buf.drain(..used);
                return Ok(Some(frame));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.stream
                .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))))?;
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut
                        || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Connects and subscribes to `channel`, returning once the server confirmed. A sharded
/// subscription sent to a node that does not own the slot is answered `MOVED slot
/// host:port`; it is sent again there (a few times at most).
fn subscribe_conn(
    addr: &SubAddr,
    publish: Publish,
    channel: &str,
    deadline: Instant,
    sent: Option<&AtomicU64>,
) -> io::Result<SubConn> {
    subscribe_at(
        addr, &addr.host, addr.port, publish, channel, deadline, sent,
    )
}

/// [`subscribe_conn`] starting at node `host:port` (with `addr`'s credentials).
fn subscribe_at(
    addr: &SubAddr,
    host: &str,
    port: u16,
    publish: Publish,
    channel: &str,
    deadline: Instant,
    sent: Option<&AtomicU64>,
) -> io::Result<SubConn> {
    let (mut host, mut port) = (host.to_string(), port);
    for _ in 0..5 {
        let mut conn = SubConn::connect(&host, port, addr, deadline, sent)?;
        if let Some(sent) = sent {
            sent.fetch_add(1, Ordering::SeqCst);
        }
        conn.stream.write_all(&resp_command(&[
            publish.subscribe().as_bytes(),
            channel.as_bytes(),
        ]))?;
        loop {
            match conn.read_frame(deadline)? {
                None => return Err(io::ErrorKind::TimedOut.into()),
                Some(Resp::Array(Some(items)))
                    if matches!(
                        items.first().and_then(Resp::bytes),
                        Some(b"subscribe") | Some(b"ssubscribe")
                    ) =>
                {
                    return Ok(conn);
                }
                Some(Resp::Error(e)) if e.starts_with("MOVED ") => {
                    let target = e.rsplit(' ').next().unwrap_or_default();
                    let (h, p) = target
                        .rsplit_once(':')
                        .ok_or_else(|| io::Error::other(format!("bad redirect {e}")))?;
                    host = h.to_string();
                    port = p.parse().map_err(io::Error::other)?;
                    break;
                }
                Some(Resp::Error(e)) => return Err(io::Error::other(e)),
                Some(_) => {}
            }
        }
    }
    Err(io::Error::other("too many MOVED redirects"))
}

/// A test's own subscription to one channel, to see what the scripts publish.
pub struct Listener {
    conn: SubConn,
}

impl Listener {
    /// Subscribes to `channel` on the server at `url` (confirmed before this returns).
    pub fn new(url: &str, channel: &str, publish: Publish) -> Listener {
        let client = redis::Client::open(url).unwrap();
        Listener::open(
            &SubAddr::from_info(client.get_connection_info()),
            publish,
            channel,
        )
    }

    fn open(addr: &SubAddr, publish: Publish, channel: &str) -> Listener {
        let conn = subscribe_conn(
            addr,
            publish,
            channel,
            Instant::now() + Duration::from_secs(5),
            None,
        )
        .unwrap_or_else(|e| panic!("Listener: subscribe {channel}: {e}"));
        Listener { conn }
    }

    /// The payload of the next message, if one arrives within `within`.
    pub fn next(&mut self, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let frame = self
                .conn
                .read_frame(deadline)
                .unwrap_or_else(|e| panic!("Listener: {e}"))?;
            if let Some((_, payload)) = frame.as_message() {
                return Some(String::from_utf8_lossy(&payload).into_owned());
            }
        }
    }

    /// Every message payload arriving within `within`.
    pub fn drain(&mut self, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        let mut all = Vec::new();
        while let Some(m) = self.next(deadline.saturating_duration_since(Instant::now())) {
            all.push(m);
        }
        all
    }
}
