-- redisson/counting_drain.lua: take every permit of a counting semaphore in Redisson's layout,
-- as Java's RSemaphore.drainPermits does (Redisson's format): SET the count to 0 (which
-- clears any TTL) and answer what it was. Nothing is published.
--
-- KEYS[1]  the count    <name>                                      string: the permits free
-- KEYS[2]  the marker   redisson_unlock_latch:{<name>}:<request id> this call's reply
-- ARGV[1]  ttl          ms the marker lives
--
-- Reply: the count it was, as a decimal string; "0" when there was none (nothing written).
-- Like Java's, a count below 0 is answered as it is and set to 0.
-- Errors: "WRONGTYPE lock" when the key holds something that is not a count; nothing is
-- written then.
-- Idempotent: the reply is recorded in the marker (which Java never reads), and a retry
-- after a lost reply answers it instead of finding 0.
-- At maxmemory (noeviction) a call that would change the count fails with OOM and writes
-- nothing: its first write is the count's, where Redis checks memory (see release.lua).

local count, marker = KEYS[1], KEYS[2]
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
if not current then
  return '0'
end
redis.call('set', count, '0')
redis.call('set', marker, current, 'px', ARGV[1])
return current
