-- redisson/semaphore_force_unlock.lua: take every permit of a semaphore in Redisson's layout
-- back from its holders, whoever they are, and wake the waiters, Java's and ours. Java has no
-- force-unlock on a permit-expirable semaphore (Redisson's format): this is its releases
-- of every permit id at once. redisson/semaphore.lua comes first: see it for KEYS[1..3].
--
-- KEYS[4]  the latch          redisson_unlock_latch:{<name>}:<request id>
-- ARGV[1]  publish command    PUBLISH or SPUBLISH
--                             by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
-- ARGV[2]  latch ttl          ms
-- ARGV[3]  now                epoch ms by this client's clock
--
-- Reply: 1 if a permit was held under a lease that had not ended by `now` (or with no
-- lease), else 0; a retry of the same request answers the same.
-- Errors: "WRONGTYPE lock", "WRONGTYPE leases" for foreign data; nothing was written.
--
-- Every id in the zset goes, those whose lease ended too (Java's next reclaim would give
-- them back anyway), and the count goes up by how many went, as Java's tryRelease does per
-- id. The new count is published as Java's release publishes it, so each subscribed JVM
-- wakes up to that many waiters; a count of 0 or below is not published (it wakes nobody,
-- and a negative one makes Java's listener throw), as redisson/semaphore_release.lua.
-- Idempotent per request: the reply is kept in the latch, so a retry after a lost reply
-- does not take back permits acquired in the meantime.

local latch = KEYS[4]
local replay = redis.call('get', latch)
if replay then
  return tonumber(replay)
end
local wrong = foreign()
if wrong then
  return redis.error_reply('WRONGTYPE ' .. wrong)
end
local permits = redis.call('zrange', held, 0, -1, 'WITHSCORES')
local result = 0
if #permits > 0 then
  local now = tonumber(ARGV[3])
  for i = 2, #permits, 2 do
    if tonumber(permits[i]) > now then
      result = 1
    end
  end
  redis.call('del', held)
  local free = redis.call('incrby', sem, #permits / 2)
  if free > 0 then
    redis.pcall(ARGV[1], channel, free)
  end
end
redis.call('set', latch, result, 'px', ARGV[2])
return result
