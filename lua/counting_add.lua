-- counting_add.lua: give permits back to a counting semaphore, or add (or take away) permits:
-- the count moves by a delta, and waiters hear of a count above 0.
--
-- KEYS[1]  the count    <prefix>:{<name>}:counting                  string: the permits free
-- KEYS[2]  the channel  <prefix>:{<name>}:counting:unlocked
-- KEYS[3]  the marker   <prefix>:{<name>}:counting:req:<request id> this call's reply
-- ARGV[1]  delta        a whole number (a release's is above 0)
-- ARGV[2]  ttl          ms the marker lives
-- ARGV[3]  publish      PUBLISH (or SPUBLISH on a sharded cluster)
--                       by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
--
-- Reply: the new count, as a decimal string (a missing count was 0; it may be below 0).
-- Errors: "WRONGTYPE lock" when the key holds something that is not a count; "RANGE <count>"
-- when the new count would leave ±(2^53 - 1), what Lua counts exactly. Nothing is written
-- then.
-- A new count above 0 is published as "free <count>", which wakes every waiter of every
-- client to try again (they race); at 0 or below nobody could take a permit, so nothing is
-- published.
-- Idempotent: the reply is recorded in the marker, and a retry after a lost reply answers it
-- instead of adding again.
-- At maxmemory (noeviction) a call that would change the count fails with OOM and writes
-- nothing: its first write is the count's, where Redis checks memory (see release.lua).

local count, channel, marker = KEYS[1], KEYS[2], KEYS[3]
local delta, ttl, publish = tonumber(ARGV[1]), ARGV[2], ARGV[3]
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
local new = tonumber(current or '0') + delta
if new > 9007199254740991 or new < -9007199254740991 then
  return redis.error_reply('RANGE ' .. (current or '0'))
end
local reply = string.format('%d', new)
redis.call('set', count, reply)
if new > 0 then
  redis.pcall(publish, channel, 'free ' .. reply)
end
redis.call('set', marker, reply, 'px', ttl)
return reply
