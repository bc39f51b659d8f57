-- redisson/latch_delete.lua: delete a count-down latch in Redisson's layout
-- (CountDownLatch::delete; Java's RCountDownLatch.delete, Redisson's format); its
-- waiters, Java's and ours, wake and find it open.
--
-- KEYS[1]  the count    <name>                                      string
-- KEYS[2]  the channel  redisson_countdownlatch__channel__{<name>}
-- KEYS[3]  the marker   redisson_unlock_latch:{<name>}:<request id> this call's reply
-- ARGV[1]  ttl          ms the marker lives
-- ARGV[2]  publish      PUBLISH or SPUBLISH
--                       by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
--
-- Reply: 1 if a count was running (the key was there: Java's delete answers the same), 0 if
-- not.
-- Errors: "WRONGTYPE latch" when the key is not a string, or one that is not a decimal
-- 64-bit count (Java's delete deletes any key: ours leaves what is no latch alone); nothing
-- is written then.
--
-- Java's delete publishes "1" (its "new count"), which only closes Java's waiters' latch
-- again: a Java await() waits on, with no timeout, until some other message comes. This
-- publishes "0" (its "zero count") instead, which opens every Java waiter; each then reads
-- the count, finds the key gone (0) and returns. Our waiters wake on either.
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
if kind == 'string' then
  redis.call('del', count)
  redis.pcall(ARGV[2], KEYS[2], '0')
  reply = 1
end
redis.call('set', marker, reply, 'px', ARGV[1])
return reply
