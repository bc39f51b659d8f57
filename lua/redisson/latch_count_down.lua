-- redisson/latch_count_down.lua: count a latch in Redisson's layout down by one (Java's
-- RCountDownLatch.countDown, Redisson's format); at zero, delete it and open it for every
-- waiter.
--
-- KEYS[1]  the count    <name>                                      string
-- KEYS[2]  the channel  redisson_countdownlatch__channel__{<name>}
-- KEYS[3]  the marker   redisson_unlock_latch:{<name>}:<request id> this call's reply
-- ARGV[1]  ttl          ms the marker lives
-- ARGV[2]  publish      PUBLISH or SPUBLISH
--                       by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
--
-- Reply: what remains after this call, as a decimal string; "0" when no count was running
-- (nothing changed: Java's DECR of a missing key would make and delete a -1, the same).
-- Errors: "WRONGTYPE latch" when the key holds something that is not a count; nothing is
-- written then.
-- At zero the key is deleted, as Java does (an absent latch counts 0), and "0" is
-- published: Java's "zero count", which opens every Java waiter, and ours.
-- Idempotent: the reply is recorded in the marker, and a retry answers it.

local count, marker = KEYS[1], KEYS[3]
local done = redis.call('get', marker)
if done then
  return done
end
local kind = redis.call('type', count).ok
if kind ~= 'none' and kind ~= 'string' then
  return redis.error_reply('WRONGTYPE latch')
end
local current = redis.call('get', count)
-- Digits of a 64-bit count, as Java's long (a longer run is no count: DECR would refuse it).
if current and not (string.match(current, '^%-?%d+$')
    and (#current < 19 or (#current == 19 and current <= '9223372036854775807'))) then
  return redis.error_reply('WRONGTYPE latch')
end
local reply = '0'
if current and tonumber(current) > 0 then
  local left = redis.call('decr', count)
  if left <= 0 then
    redis.call('del', count)
    redis.pcall(ARGV[2], KEYS[2], '0')
  else
    reply = tostring(left)
  end
end
redis.call('set', marker, reply, 'px', ARGV[1])
return reply
