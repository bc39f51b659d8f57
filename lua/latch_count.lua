-- latch_count.lua: read a count-down latch's count. Reads only.
--
-- KEYS[1]  the count    <prefix>:{<name>}:latch   string: what remains
--
-- Reply: the count as a decimal string; "0" for a latch never set (or expired at zero).
-- Errors: "WRONGTYPE latch" when the key holds data that is not a count of ours.

local kind = redis.call('type', KEYS[1]).ok
if kind == 'none' then
  return '0'
end
local current = kind == 'string' and redis.call('get', KEYS[1])
if not current or not string.match(current, '^%d+$') then
  return redis.error_reply('WRONGTYPE latch')
end
return current
