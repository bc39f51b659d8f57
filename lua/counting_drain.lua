-- counting_drain.lua: take every permit of a counting semaphore that is free.
--
-- KEYS[1]  the count    <prefix>:{<name>}:counting                  string: the permits free
-- KEYS[2]  the marker   <prefix>:{<name>}:counting:req:<request id> this call's reply
-- ARGV[1]  ttl          ms the marker lives
--
-- Reply: how many were taken, as a decimal string: the count if it was above 0 (it is 0
-- now), else "0" and nothing changed (a count below 0 stays: taking nothing gives nothing
-- back). Nothing is published: nobody can take a permit now.
-- Errors: "WRONGTYPE lock" when the key holds something else; nothing is written then.
-- Idempotent: the reply is recorded in the marker, and a retry after a lost reply answers it
-- instead of finding 0.
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
local reply = '0'
if current and tonumber(current) > 0 then
  reply = current
  redis.call('set', count, '0')
end
redis.call('set', marker, reply, 'px', ARGV[1])
return reply
