-- latch_delete.lua: delete a count-down latch, running or not (CountDownLatch::delete); its
-- waiters wake and find it open.
--
-- KEYS[1]  the count    <prefix>:{<name>}:latch                  string: what remains
-- KEYS[2]  the channel  <prefix>:{<name>}:latch:unlocked
-- KEYS[3]  the marker   <prefix>:{<name>}:latch:req:<request id> this call's reply
-- ARGV[1]  ttl          ms the marker lives: the longest a retry of this call can take
-- ARGV[2]  publish      PUBLISH (or SPUBLISH on a sharded cluster)
--                       by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
--
-- Reply: 1 if a count was running (above 0), 0 if not (never set, or at 0 and kept a while:
-- that key goes too).
-- Errors: "WRONGTYPE latch" when the key holds data that is not a count of ours; nothing is
-- written then.
--
-- Deleting a running count publishes "open <server time, µs>", as the count-down that
-- reaches zero does: an absent latch counts 0, so every waiter of every client goes through
-- (one whose last look came before then without another look).
-- Idempotent: the reply is recorded in the marker, and a retry after a lost reply answers it
-- instead of "nothing was running" (the first run's deletion).

local count, channel, marker = KEYS[1], KEYS[2], KEYS[3]
local done = redis.call('get', marker)
if done then
  return tonumber(done)
end
-- A key of another type fails the GET (the pcall's table): foreign data, nothing written.
local current = redis.pcall('get', count)
-- Digits of a 64-bit count (a longer run of digits is no count of ours).
if type(current) == 'table'
    or (current and not (string.match(current, '^%d+$')
      and (#current < 19 or (#current == 19 and current <= '9223372036854775807')))) then
  return redis.error_reply('WRONGTYPE latch')
end
local reply = 0
if current then
  redis.call('del', count)
  if current ~= '0' then
    reply = 1
    local time = redis.call('time')
    redis.pcall(ARGV[2], channel, string.format('open %d%06d', time[1], time[2]))
  end
end
redis.call('set', marker, reply, 'px', ARGV[1])
return reply
