-- redisson/semaphore_try_set.lua: set the permits of a semaphore in Redisson's layout only
-- if no count is there yet, as Java's trySetPermits does (Redisson's format).
-- redisson/semaphore.lua comes first: see it for KEYS[1..3].
--
-- ARGV[1]  total
-- ARGV[2]  publish command    PUBLISH or SPUBLISH
--                             by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
--
-- Reply: 1 if the count was set (and published, which wakes as many waiters), 0 if one was
-- there already. Errors: "WRONGTYPE lock", "WRONGTYPE leases"; nothing was written.
-- Idempotent: a retry finds the count set and replies 0.

local wrong = foreign()
if wrong then
  return redis.error_reply('WRONGTYPE ' .. wrong)
end
if redis.call('get', sem) then
  return 0
end
redis.call('set', sem, ARGV[1])
redis.pcall(ARGV[2], channel, ARGV[1])
return 1
