-- latch_set.lua: start a count-down latch's round: set its count, unless one is running.
--
-- KEYS[1]  the count    <prefix>:{<name>}:latch                  string: what remains
-- KEYS[2]  the marker   <prefix>:{<name>}:latch:req:<request id> this call's reply
-- ARGV[1]  count        the new count (1 .. 2^63-1, checked by the caller)
-- ARGV[2]  marker ttl   ms the marker lives: the longest a retry of this call can take
--
-- Replies: 1 the count was set (no count was running: never set, expired, or at 0);
--          0 a count is running, nothing changed.
-- Errors: "WRONGTYPE latch" when the key holds data that is not a count of ours (another
-- type, or a string that is not a whole number); nothing is written then.
--
-- Idempotent: the first run records its reply in the marker, and a retry after a lost reply
-- answers that instead of "a count is running" (its own). The SET also drops the expiry the
-- key got when it last reached zero: a running count never expires.

local count, marker = KEYS[1], KEYS[2]
local done = redis.call('get', marker)
if done then
  return tonumber(done)
end
local kind = redis.call('type', count).ok
if kind ~= 'none' and kind ~= 'string' then
  return redis.error_reply('WRONGTYPE latch')
end
local current = redis.call('get', count)
-- Digits of a 64-bit count (a longer run of digits is no count of ours).
if current and not (string.match(current, '^%d+$')
    and (#current < 19 or (#current == 19 and current <= '9223372036854775807'))) then
  return redis.error_reply('WRONGTYPE latch')
end
local reply = 0
if not current or current == '0' then
  redis.call('set', count, ARGV[1])
  reply = 1
end
redis.call('set', marker, reply, 'px', ARGV[2])
return reply
