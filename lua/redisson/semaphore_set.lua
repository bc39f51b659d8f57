-- redisson/semaphore_set.lua: set the total number of permits of a semaphore in Redisson's
-- layout, as Java's setPermits does (Redisson's format): the total is the permits free
-- plus those held. redisson/semaphore.lua comes first: see it for KEYS[1..3].
--
-- ARGV[1]  total
-- ARGV[2]  publish command    PUBLISH or SPUBLISH
--                             by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
--
-- Reply: 0. Errors: "WRONGTYPE lock", "WRONGTYPE leases"; nothing was written.
--
-- With no count yet it is set to the total. Otherwise the count moves by the difference
-- between the total asked for and the one there is (held permits whose lease ended still
-- count as held: nothing is reclaimed), and may go below 0 while holders keep theirs. The
-- new total is published, which wakes as many waiters; nothing is published when it does not
-- change. Idempotent: a retry finds the total already set.

local wrong = foreign()
if wrong then
  return redis.error_reply('WRONGTYPE ' .. wrong)
end
local total = tonumber(ARGV[1])
local free = redis.call('get', sem)
if not free then
  redis.call('set', sem, total)
  redis.pcall(ARGV[2], channel, total)
  return 0
end
local was = tonumber(free) + redis.call('zcount', held, 0, '+inf')
if was ~= total then
  redis.call('incrby', sem, total - was)
  redis.pcall(ARGV[2], channel, total)
end
return 0
