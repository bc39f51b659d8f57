-- redisson/counting_add.lua: add (or take away) permits of a counting semaphore in Redisson's
-- layout, as Java's RSemaphore.addPermits does (Redisson's format): SET the count plus the
-- delta (which clears any TTL) and publish the new count, even one at or below 0, as Java
-- does (Java's listener wakes nobody for it; neither does ours).
--
-- KEYS[1]  the count    <name>                                      string: the permits free
-- KEYS[2]  the channel  redisson_sc:{<name>}
-- KEYS[3]  the marker   redisson_unlock_latch:{<name>}:<request id> this call's reply
-- ARGV[1]  delta        a whole number, below 0 to take permits away
-- ARGV[2]  ttl          ms the marker lives
-- ARGV[3]  publish      PUBLISH or SPUBLISH
--                       by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
--
-- Reply: the new count, as a decimal string (a missing count was 0; it may be below 0).
-- Errors: "WRONGTYPE lock" when the key holds something that is not a count; "RANGE <count>"
-- when the new count would leave ±(2^53 - 1). Nothing is written then.
-- Idempotent: the reply is recorded in the marker (which Java never reads), and a retry
-- after a lost reply answers it instead of adding again.
-- At maxmemory (noeviction) a call that would change the count fails with OOM and writes
-- nothing: its first write is the count's, where Redis checks memory (see release.lua).

local count, channel, marker = KEYS[1], KEYS[2], KEYS[3]
local done = redis.call('get', marker)
if done then
  return done
end
local current = redis.pcall('get', count)
-- A count is decimal, within what Lua counts exactly (tonumber would take "inf", "1.5"...).
if type(current) == 'table'
    or (current and not (string.match(current, '^%-?%d+$')
      and math.abs(tonumber(current)) <= 9007199254740991)) then
  return redis.error_reply('WRONGTYPE lock')
end
local new = tonumber(current or '0') + tonumber(ARGV[1])
if new > 9007199254740991 or new < -9007199254740991 then
  return redis.error_reply('RANGE ' .. (current or '0'))
end
local reply = string.format('%d', new)
redis.call('set', count, reply)
redis.pcall(ARGV[3], channel, reply)
redis.call('set', marker, reply, 'px', ARGV[2])
return reply
