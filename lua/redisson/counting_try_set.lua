-- redisson/counting_try_set.lua: set the permits of a counting semaphore in Redisson's layout
-- only if no count is there yet, as Java's RSemaphore.trySetPermits does (Redisson's format):
-- SET, then publish the count.
--
-- KEYS[1]  the count    <name>                                      string: the permits free
-- KEYS[2]  the channel  redisson_sc:{<name>}
-- KEYS[3]  the marker   redisson_unlock_latch:{<name>}:<request id> this call's reply
-- ARGV[1]  permits      at least 1
-- ARGV[2]  ttl          ms the marker lives
-- ARGV[3]  publish      PUBLISH or SPUBLISH
--                       by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
--
-- Reply: 1 if this call set the count, 0 if a count was there (nothing changed).
-- Errors: "WRONGTYPE lock" when the key holds something else; nothing is written then.
-- Idempotent: the reply is recorded in the marker (which Java never reads), and a retry
-- after a lost reply answers 1 instead of finding its own count and answering 0.
-- At maxmemory (noeviction) a call that would change the count fails with OOM and writes
-- nothing: its first write is the count's, where Redis checks memory (see release.lua).

local count, channel, marker = KEYS[1], KEYS[2], KEYS[3]
local done = redis.call('get', marker)
if done then
  return tonumber(done)
end
local current = redis.pcall('get', count)
-- A count is decimal, within what Lua counts exactly (tonumber would take "inf", "1.5"...).
if type(current) == 'table'
    or (current and not (string.match(current, '^%-?%d+$')
      and math.abs(tonumber(current)) <= 9007199254740991)) then
  return redis.error_reply('WRONGTYPE lock')
end
if current then
  return 0
end
redis.call('set', count, ARGV[1])
redis.pcall(ARGV[3], channel, ARGV[1])
redis.call('set', marker, '1', 'px', ARGV[2])
return 1
