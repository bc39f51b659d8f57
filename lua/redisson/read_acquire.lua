-- redisson/read_acquire.lua: take or re-enter a read of a read-write lock in Redisson's layout
-- (Java's getReadWriteLock(name).readLock(): REDISSON-FORMAT.md 7.1 and 7.2).
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
-- Errors: "WRONGTYPE fence" when the counter holds something that is not a number; Redis's
-- own WRONGTYPE when the lock's key is not a hash. Nothing was written either way.
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

local lock, timeouts, field, lease = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[3])

-- Read hold k, for its lease: its timeout key, and the hash at least as long.
local function hold(k)
  redis.call('hset', lock, field, k)
  redis.call('set', timeouts .. ':' .. k, 1, 'px', lease)
  if redis.call('pttl', lock) < lease then
    redis.call('pexpire', lock, lease)
  end
end

if ARGV[4] then
  if not redis.call('hget', lock, field) then
    return {-1, 0}
  end
  hold(tonumber(ARGV[4]) + 1)
  return tonumber(ARGV[5])
end

local mode = redis.call('hget', lock, 'mode')
if mode and mode ~= 'read' and redis.call('hexists', lock, ARGV[2]) == 0 then
  return {0, redis.call('pttl', lock)}
end
local token = redis.pcall('get', KEYS[3])
if type(token) == 'table' or (token and not string.match(token, '^%d+$')) then
  return redis.error_reply('WRONGTYPE fence')
end
if not mode then
  redis.call('hset', lock, 'mode', 'read')
end
hold(1)
return tonumber(token or '0')
