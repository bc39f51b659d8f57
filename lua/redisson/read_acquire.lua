-- redisson/read_acquire.lua: take or re-enter a read of a read-write lock in Redisson's layout
-- (Java's getReadWriteLock(name).readLock(): Redisson's format).
--
-- KEYS[1]  the lock hash      <name>    mode -> read|write, <owner> -> reads,
--                                       <owner>:write -> writes
-- KEYS[2]  the reader's timeout keys, without the hold's number
--                             {<name>}:<owner>:rwlock_timeout    (<name>:... when the name
--                             has a '{'); hold k has <that>:<k>, "1" with the hold's lease
-- KEYS[3]  the token counter  redisson_lock_token:{<name>}       read, never moved
-- ARGV[1]  read field         <client id>:<thread number>
-- ARGV[2]  its thread's write field   ARGV[1]:write: a thread that writes may also read
-- ARGV[3]  lease              ms
-- ARGV[4]  holds              (re-entry only) the reader's holds before this attempt
-- ARGV[5]  token              (re-entry only) the token of the hold re-entered
--
-- Replies (as redisson/acquire.lua's):
--   <token>        an integer: taken (the counter's value, 0 when there is none: a read
--                  carries the last write's token), or re-entered (the hold's own token)
--   {0, pttl}      written by another owner for pttl ms more (-1: no lease)
--   {-1, 0}        a re-entry whose hold is gone
-- Errors (nothing was written with any of them):
--   "WRONGTYPE lock"   the key is a hash without a `mode` field: not a read-write lock's,
--                      which always has one, but a lock's (Java's getLock, getFairLock,
--                      getSpinLock of the same name, or ours), whether or not it has a
--                      field named as the reader (the same thread's lock), on a first read
--                      and on a re-entry alike (Redisson's format has Java's read
--                      acquire take such a hash as free and join it; ours never does)
--   "WRONGTYPE fence"  the counter holds something that is not a number
--   Redis's own WRONGTYPE when the lock's key is not a hash.
--
-- Every read hold k of a reader has its own timeout key, set with the hold's lease: Java's
-- read unlock keeps the hash only for holders that have a timeout key with a positive TTL
-- (7.3 step 6), and the watchdog renews them all (redisson/rw_renew.lua). The hash lives at
-- least as long as the longest of them. Readers do not wait behind a waiting writer (there
-- is no queue), as in Java.
--
-- Idempotent: the count is set, not added to (holds + 1 on a re-entry; 1 on a first read,
-- which a retry whose first run took the read finds already), and the hold's timeout key is
-- set whole each time.
--
-- The hash's PTTL is read first: -2 says the key is free, with no HGET of `mode` (the free
-- read writes `mode` and its field in one HSET, and its lease with no PTTL more); only a key
-- that exists has its `mode` read (its PTTL then serves the busy reply and the lease's
-- check), and a re-entry reads its field and `mode` in one HMGET.

local lock, timeouts, field, lease = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[3])
local holds = ARGV[4]

local token, pttl
if holds then
  local fields = redis.call('hmget', lock, field, 'mode')
  if not fields[2] then
    if fields[1] or redis.call('exists', lock) == 1 then
      return redis.error_reply('WRONGTYPE lock')
    end
    return {-1, 0}
  end
  if not fields[1] then
    return {-1, 0}
  end
else
  pttl = redis.call('pttl', lock)
  local mode = false
  if pttl ~= -2 then
    mode = redis.call('hget', lock, 'mode')
    if not mode then
      return redis.error_reply('WRONGTYPE lock')
    end
    if mode ~= 'read' and redis.call('hexists', lock, ARGV[2]) == 0 then
      return {0, pttl}
    end
  end
  token = redis.pcall('get', KEYS[3])
  if type(token) == 'table' or (token and not string.match(token, '^%d+$')) then
    return redis.error_reply('WRONGTYPE fence')
  end
  if not mode then
    -- Free: the lock's first hold.
    redis.call('hset', lock, 'mode', 'read', field, 1)
    redis.call('set', timeouts .. ':1', 1, 'px', lease)
    redis.call('pexpire', lock, lease)
    return tonumber(token or '0')
  end
end

-- Read hold k, for its lease: its timeout key, and the hash at least as long.
local k = holds and tonumber(holds) + 1 or 1
redis.call('hset', lock, field, k)
redis.call('set', timeouts .. ':' .. k, 1, 'px', lease)
if (pttl or redis.call('pttl', lock)) < lease then
  redis.call('pexpire', lock, lease)
end
return holds and tonumber(ARGV[5]) or tonumber(token or '0')
