-- redisson/latch_set.lua: start a round of a count-down latch in Redisson's layout (Java's
-- RCountDownLatch.trySetCount, Redisson's format), unless a count is running.
--
-- KEYS[1]  the count    <name>                                      string
-- KEYS[2]  the channel  redisson_countdownlatch__channel__{<name>}
-- KEYS[3]  the marker   redisson_unlock_latch:{<name>}:<request id> this call's reply
-- ARGV[1]  count        1 to 2^63 - 1
-- ARGV[2]  publish      PUBLISH or SPUBLISH
--                       by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
-- ARGV[3]  ttl          ms the marker lives
--
-- Reply: 1 if the round started ("1" published: Java's "new count"), 0 if a count runs.
-- Errors: "WRONGTYPE latch" when the key is not a string, or one that is not a decimal
-- 64-bit count; nothing is written then.
-- Idempotent: the reply is recorded in the marker (keyed by a fresh request id, so Java
-- never reads it), and a retry after a lost reply answers it.

local count, marker = KEYS[1], KEYS[3]
local done = redis.call('get', marker)
if done then
  return tonumber(done)
end
local kind = redis.call('type', count).ok
local current = kind == 'string' and redis.call('get', count)
-- Another type, or a string that is no count (digits of a 64-bit count, as Java's long:
-- tonumber would take "inf", "1.5", "0x10"...). Java's own call would not look; a call of
-- ours leaves foreign data alone (only a count that runs costs the GET).
if (kind ~= 'none' and not current) or (current and not (string.match(current, '^%-?%d+$')
    and (#current < 19 or (#current == 19 and current <= '9223372036854775807')))) then
  return redis.error_reply('WRONGTYPE latch')
end
local reply = 0
if kind == 'none' then
  redis.call('set', count, ARGV[1])
  redis.pcall(ARGV[2], KEYS[2], '1')
  reply = 1
end
redis.call('set', marker, reply, 'px', ARGV[3])
return reply
