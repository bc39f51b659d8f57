-- redisson/semaphore_counts.lua: the total of a semaphore in Redisson's layout, or the
-- permits held, after giving back those whose lease ended, as Java's getPermits and
-- acquiredPermits do (Redisson's format). redisson/semaphore.lua comes first: see it
-- for KEYS[1..3].
--
-- ARGV[1]  now                epoch ms by this client's clock
-- ARGV[2]  publish command    PUBLISH or SPUBLISH (a reclaim publishes the new count)
-- ARGV[3]  which              "permits" (the count plus the permits held; 0 with no count)
--                             or "acquired" (the permits held)
--
-- Reply: the number (a total below 0 only if Java's addPermits made it so).
-- Errors: "WRONGTYPE lock", "WRONGTYPE leases"; nothing was written.
-- Idempotent: a retry finds nothing more to reclaim.

local wrong = foreign()
if wrong then
  return redis.error_reply('WRONGTYPE ' .. wrong)
end
reclaim(tonumber(ARGV[1]), nil, ARGV[2])
local n = redis.call('zcount', held, 0, '+inf')
if ARGV[3] == 'acquired' then
  return n
end
local free = redis.call('get', sem)
if not free then
  return 0
end
return tonumber(free) + n
