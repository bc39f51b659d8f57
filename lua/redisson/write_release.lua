-- redisson/write_release.lua: give back one write hold of a read-write lock in Redisson's
-- layout (Redisson's format). The last one frees the lock and publishes "1", which
-- wakes every waiter of every client, Java's and ours; if the writer's thread still reads,
-- the lock turns to mode "read" instead, and nothing is published (a downgrade).
--
-- KEYS[1]  the lock hash      <name>
-- KEYS[2]  the channel        redisson_rwlock:{<name>}
-- KEYS[3]  the unlock latch   redisson_unlock_latch:{<name>}:<32 hex>   (only with ARGV[4])
-- ARGV[1]  write field        <client id>:<thread number>:write
-- ARGV[2]  holds              the writer's holds before this release (>= 1); absent: 1
-- ARGV[3]  publish command    PUBLISH or SPUBLISH; absent: PUBLISH
--                             by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
-- ARGV[4]  latch ttl          ms (only with KEYS[3])
-- (The caller leaves off the end what says nothing: a usual release sends ARGV[1] alone.)
--
-- Replies (as redisson/release.lua's):
--   1  released: the write is gone (the lock deleted and "1" published, or turned to read)
--   2  still held: the writer's count is now holds - 1
--   3  gone: the lock is not written by this writer (its lease ran out, it was taken, or an
--      earlier run of this call released it and its reply was lost)
-- Errors: "WRONGTYPE lock" when the key is a hash without a `mode` field: a lock's (Java's
-- getLock, getFairLock, getSpinLock of the same name, or ours), not a read-write lock's.
-- Nothing is deleted, set or published (Java's write unlock publishes "1" on such a hash).
-- The check costs only the unusual case, a hash found without `mode` (an EXISTS then).
-- Redis's own WRONGTYPE when the key is not a hash.
--
-- With no hash at all, "1" is published all the same, as Java does. A partial release leaves
-- the lease alone (Java re-arms it; the watchdog keeps either alive).
-- Idempotent as redisson/read_release.lua: the count is set to holds - 1; the unlock latch
-- where retries are out of sight.

local lock, channel, field = KEYS[1], KEYS[2], ARGV[1]
local publish = ARGV[3] or 'PUBLISH'
local latch = KEYS[3]

local function answer(reply)
  if latch then
    redis.call('set', latch, reply == 1 and '1' or '0', 'px', ARGV[4])
  end
  return reply
end

if latch then
  local replay = redis.call('get', latch)
  if replay then
    return replay == '1' and 1 or 2
  end
end
local mode = redis.call('hget', lock, 'mode')
if not mode then
  if redis.call('exists', lock) == 1 then
    return redis.error_reply('WRONGTYPE lock')
  end
  redis.pcall(publish, channel, '1')
  return 3
end
local count = mode == 'write' and tonumber(redis.call('hget', lock, field))
if not count then
  return 3
end
local holds = tonumber(ARGV[2]) or 1
if count < holds then
  return 2
end
if holds > 1 then
  redis.call('hset', lock, field, holds - 1)
  return answer(2)
end
redis.call('hdel', lock, field)
if redis.call('hlen', lock) == 1 then
  redis.call('del', lock)
  redis.pcall(publish, channel, '1')
else
  redis.call('hset', lock, 'mode', 'read')
end
return answer(1)
