-- redisson/release.lua: give back one hold of a lock in Redisson's layout; the last one
-- deletes the lock and publishes "0", which wakes a waiter of every client, Java's and ours
-- (Redisson's format).
--
-- KEYS[1]  the lock hash    <name>
-- KEYS[2]  the channel      redisson_lock__channel:{<name>}
-- KEYS[3]  the unlock latch redisson_unlock_latch:{<name>}:<32 hex>   (only with ARGV[4])
-- ARGV[1]  owner field
-- ARGV[2]  holds            the owner's holds before this release (>= 1); absent: 1
-- ARGV[3]  publish command  PUBLISH, or SPUBLISH on a Redis 7 Cluster (as Redisson chooses);
--                           absent: PUBLISH
--                           by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
-- ARGV[4]  latch ttl        ms (only with KEYS[3])
-- (The caller leaves off the end what says nothing: a usual release sends ARGV[1] alone.)
--
-- Replies (as release.lua's, which the engine reads):
--   1  released: deleted, "0" published
--   2  still held: the owner's count is now holds - 1
--   3  gone: no hash at all (expired, force-unlocked, or released by an earlier run of this
--      call whose reply was lost: the engine tells which it can)
--   0  not ours: another owner holds it; nothing was changed (on a retry, maybe a waiter
--      that took the lock an earlier run freed: nothing here tells, and the engine counts
--      it as released when the hold's lease had not run out as the call began)
-- Errors: "WRONGTYPE lock" when the key is a read-write lock's hash (it has a `mode` field,
-- which a lock's never has): nothing is deleted, set or published, even where the hash has a
-- field named as the owner (a reader of the same thread's). Redis's own WRONGTYPE when the
-- key is not a hash. The check rides on the read of the owner's field (HMGET of it and
-- `mode`, where an HGET was): no command more, though an HMGET's reply, a table, costs Redis
-- about 4,000 instructions more per release (callgrind); the arguments a usual release
-- leaves off (ARGV[2], ARGV[3]) pay for most of it.
--
-- Idempotent: the count is set to holds - 1, so a retry that finds it there already answers
-- "still held" again. Where the connection may retry out of the caller's sight (a Cluster's),
-- the caller passes a latch, Redisson's own: "1" after a final release, "0" otherwise, read
-- back first by a retry, as a Java unlock retried with the same request id reads it. A
-- partial release leaves the lease alone (Java re-arms it; the watchdog keeps either alive).

local lock, owner = KEYS[1], ARGV[1]
local latch = KEYS[3]

if latch then
  local replay = redis.call('get', latch)
  if replay then
    return replay == '1' and 1 or 2
  end
end
local fields = redis.call('hmget', lock, owner, 'mode')
if fields[2] then
  return redis.error_reply('WRONGTYPE lock')
end
local count = fields[1]
if not count then
  return redis.call('exists', lock) == 1 and 0 or 3
end
local holds = tonumber(ARGV[2]) or 1
if tonumber(count) < holds then
  return 2
end
if holds > 1 then
  redis.call('hset', lock, owner, holds - 1)
  if latch then
    redis.call('set', latch, '0', 'px', ARGV[4])
  end
  return 2
end
redis.call('del', lock)
redis.pcall(ARGV[3] or 'PUBLISH', KEYS[2], '0')
if latch then
  redis.call('set', latch, '1', 'px', ARGV[4])
end
return 1
