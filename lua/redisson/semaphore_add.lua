-- redisson/semaphore_add.lua: move the total of a semaphore in Redisson's layout by a delta,
-- as Java's addPermits does (Redisson's format): the count of permits free moves by the
-- delta (a missing count is 0), what is held stays held, and a positive delta is published
-- (the delta, as Java's: it wakes as many waiters). redisson/semaphore.lua comes first: see
-- it for KEYS[1..3].
--
-- ARGV[1]  delta              a whole number, below 0 to shrink
-- ARGV[2]  publish command    PUBLISH or SPUBLISH
--                             by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
--
-- Reply: {1, the new total}, the total being the count plus the permits held; or {0, the
-- total as it is} when the new total would fall below 0 or rise above 4294967295: then
-- nothing is written (Java would write a negative total). The count itself may go below 0
-- while holders keep theirs, as Java's does.
-- Errors: "WRONGTYPE lock", "WRONGTYPE leases"; nothing was written.
-- Not idempotent: a retry adds the delta again (as Java's).

local wrong = foreign()
if wrong then
  return redis.error_reply('WRONGTYPE ' .. wrong)
end
local free = tonumber(redis.call('get', sem) or '0')
local delta = tonumber(ARGV[1])
local was = free + redis.call('zcount', held, 0, '+inf')
local new = was + delta
if new < 0 or new > 4294967295 then
  return {0, string.format('%d', was)}
end
redis.call('set', sem, string.format('%d', free + delta))
if delta > 0 then
  redis.pcall(ARGV[2], channel, ARGV[1])
end
return {1, string.format('%d', new)}
