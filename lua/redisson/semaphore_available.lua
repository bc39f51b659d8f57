-- redisson/semaphore_available.lua: the permits of a semaphore in Redisson's layout free now,
-- after giving back those whose lease ended, as Java's availablePermits does
-- (Redisson's format). redisson/semaphore.lua comes first: see it for KEYS[1..3].
--
-- ARGV[1]  now                epoch ms by this client's clock
-- ARGV[2]  publish command    PUBLISH or SPUBLISH (a reclaim publishes the new count)
--
-- Reply: the count (below 0 while the total is lowered under what is held; 0 with no count).
-- Errors: "WRONGTYPE lock", "WRONGTYPE leases"; nothing was written.
-- Idempotent: a retry finds nothing more to reclaim.

local wrong = foreign()
if wrong then
  return redis.error_reply('WRONGTYPE ' .. wrong)
end
local free = reclaim(tonumber(ARGV[1]), nil, ARGV[2])
if free then
  return free
end
return tonumber(redis.call('get', sem) or '0')
