-- release.lua: give back one hold; the last one deletes the lock and wakes a waiter.
--
-- KEYS[1]  the lock hash     <prefix>:{<name>}
-- KEYS[2]  the fence         <prefix>:{<name>}:fence
-- KEYS[3]  the channel       <prefix>:{<name>}:unlocked
-- KEYS[4]  the release latch <prefix>:{<name>}:released:<owner>:<token>
-- ARGV[1]  owner id
-- ARGV[2]  holds             how many holds the caller has before this release (>= 1)
-- ARGV[3]  token             the fencing token of the hold being released
-- ARGV[4]  latch ttl         milliseconds the latch outlives a final release
-- ARGV[5]  publish command   PUBLISH (or SPUBLISH on a sharded cluster)
--
-- Replies:
--   1  released: the lock is deleted and "unlock" was published on the channel
--   2  still held: the caller's hold count is now holds - 1
--   0  not ours: nothing was changed
--
-- The hold is ours only if the owner's field is there *and* the fence still shows the hold's
-- token: a release that timed out and reaches Redis late must not touch a newer hold the same
-- thread has taken since.
--
-- Idempotent, so a retry after a lost reply tells the owner the truth: an intermediate
-- release *sets* the count to holds - 1; the final release leaves a short-lived latch named
-- after the hold's owner and fencing token, and a retry that finds the latch answers 1
-- instead of "not ours" (Redisson issues #4871 and #6651). The latch is looked at only when
-- the hold is gone.

local lock, fence, channel, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, holds, token = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local latch_ttl, publish = ARGV[4], ARGV[5]

-- A key of another type is not ours: HEXISTS fails on it, and nothing is touched.
if redis.pcall('hexists', lock, owner) ~= 1 or redis.pcall('get', fence) ~= token then
  if holds <= 1 and redis.call('exists', latch) == 1 then
    return 1
  end
  return 0
end

if holds > 1 then
  redis.call('hset', lock, owner, holds - 1)
  return 2
end

redis.call('del', lock)
redis.call(publish, channel, 'unlock')
redis.call('set', latch, '1', 'px', latch_ttl)
return 1
