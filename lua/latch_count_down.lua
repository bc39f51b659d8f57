-- latch_count_down.lua: count a latch down by one; at zero, open it for every waiter.
--
-- KEYS[1]  the count    <prefix>:{<name>}:latch                  string: what remains
-- KEYS[2]  the channel  <prefix>:{<name>}:latch:unlocked
-- KEYS[3]  the marker   <prefix>:{<name>}:latch:req:<request id> this call's reply
-- ARGV[1]  ttl          ms the marker lives, and the count once it reached zero
-- ARGV[2]  publish      PUBLISH (or SPUBLISH on a sharded cluster)
--                       by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
--
-- Reply: what remains after this call, as a decimal string (exact for any 64-bit count); "0"
-- when no count was running (nothing changed).
-- Errors: "WRONGTYPE latch" when the key holds data that is not a count of ours; nothing is
-- written then.
--
-- The count-down that reaches zero publishes "open <server time, µs>" on the channel, which
-- wakes every waiter
-- of every client, and gives the key an expiry of ARGV[1]: an absent latch counts 0, so a
-- waiter or a count() that comes after it expired sees what it would have seen before, and
-- nothing is left behind.
-- Idempotent: the reply is recorded in the marker, and a retry after a lost reply answers it
-- instead of counting down again.

local count, channel, marker = KEYS[1], KEYS[2], KEYS[3]
local ttl, publish = ARGV[1], ARGV[2]
local done = redis.call('get', marker)
if done then
  return done
end
-- A key of another type fails the GET (the pcall's table): foreign data, nothing written.
local current = redis.pcall('get', count)
if type(current) == 'table' or (current and not string.match(current, '^%d+$')) then
  return redis.error_reply('WRONGTYPE latch')
end
local reply = '0'
if current and current ~= '0' then
  local left = redis.pcall('decr', count)
  if type(left) == 'table' then
    -- Only "not an integer or out of range" says the count is not ours (digits beyond a
    -- 64-bit count); anything else is the server refusing (OOM, READONLY), passed on as
    -- acquire.lua's `refused` passes it: nothing was written.
    if string.find(left.err, 'not an integer', 1, true) then
      return redis.error_reply('WRONGTYPE latch')
    end
    return left
  end
  -- DECR's integer reaches Lua as a double, exact below 2^53; a larger count is read as text.
  if left < 9007199254740992 then
    reply = string.format('%d', left)
  else
    reply = redis.call('get', count)
  end
  if reply == '0' then
    redis.call('pexpire', count, ttl)
    -- The server time (µs) goes with it: a waiter whose last look came before it returns
    -- without another (latch_count.lua answers the time of that look).
    local time = redis.call('time')
    redis.pcall(publish, channel, string.format('open %d%06d', time[1], time[2]))
  end
end
redis.call('set', marker, reply, 'px', ttl)
return reply
