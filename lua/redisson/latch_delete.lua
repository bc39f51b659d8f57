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
-- Errors: "WRONGTYPE latch" when the key is not a string; nothing is written then.
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
if kind ~= 'none' and kind ~= 'string' then
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
