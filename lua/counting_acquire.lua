-- counting_acquire.lua: take permits of a counting semaphore if that many are free, in either
-- layout (Java's RSemaphore.tryAcquire, Redisson's format, with a marker for a retry).
--
-- KEYS[1]  the count    <prefix>:{<name>}:counting, or <name>    string: the permits free
-- KEYS[2]  the marker   <prefix>:{<name>}:counting:req:<request id>, or
--                       redisson_unlock_latch:{<name>}:<request id>   "1" once taken
-- ARGV[1]  permits      how many, at least 1
-- ARGV[2]  ttl          ms the marker lives
--
-- Reply: 1 if the permits were taken (the count went down by them), 0 if fewer are free
-- (nothing changed: a missing count is 0 permits).
-- Errors: "WRONGTYPE lock" when the key holds something that is not a count; nothing is
-- written then.
-- Idempotent: a taking is recorded in the marker, and a retry after a lost reply answers 1
-- instead of taking again. A refusal writes nothing, so its retry simply looks again.
-- Waiters call it again after each message on the channel: it never queues, so the
-- semaphore is not fair.
-- At maxmemory (noeviction) a call that would change the count fails with OOM and writes
-- nothing: its first write is the count's, where Redis checks memory (see release.lua).

local count, marker = KEYS[1], KEYS[2]
local permits = tonumber(ARGV[1])
if redis.call('exists', marker) == 1 then
  return 1
end
-- A key of another type fails the GET (the pcall's table): foreign data, nothing written.
local current = redis.pcall('get', count)
if not current then
  return 0
end
-- A count is decimal, within what Lua counts exactly (tonumber would take "inf", "1.5"...).
if type(current) == 'table'
    or not (string.match(current, '^%-?%d+$')
      and math.abs(tonumber(current)) <= 9007199254740991) then
  return redis.error_reply('WRONGTYPE lock')
end
if tonumber(current) < permits then
  return 0
end
redis.call('decrby', count, permits)
redis.call('set', marker, '1', 'px', ARGV[2])
return 1
