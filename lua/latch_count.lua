-- latch_count.lua: read a count-down latch's count. Reads only.
--
-- KEYS[1]  the count    <prefix>:{<name>}:latch   string: what remains
-- ARGV[1]  "t"          (optional) answer the server time of this look as well
--
-- Reply: the count as a decimal string; "0" for a latch never set (or expired at zero).
-- With ARGV[1]: "<count> <server time, µs>", which a waiter holds against the time an "open"
-- message carries (latch_count_down.lua): an opening after this look needs no other look.
-- Errors: "WRONGTYPE latch" when the key holds data that is not a count of ours.

local function answer(count)
  if ARGV[1] ~= 't' then
    return count
  end
  local time = redis.call('time')
  return string.format('%s %d%06d', count, time[1], time[2])
end

-- A key of another type fails the GET (the pcall's table).
local current = redis.pcall('get', KEYS[1])
if not current then
  return answer('0')
end
-- Digits of a 64-bit count (a longer run of digits is no count of ours).
if type(current) == 'table' or not (string.match(current, '^%d+$')
    and (#current < 19 or (#current == 19 and current <= '9223372036854775807'))) then
  return redis.error_reply('WRONGTYPE latch')
end
return answer(current)
