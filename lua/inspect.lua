-- inspect.lua: read a lock's state without changing it.
--
-- KEYS[1]  the lock hash   <prefix>:{<name>}
-- ARGV[1]  owner id        whose hold count to report
--
-- Reply: {locked, holds, pttl}
--   locked  1 if the lock is held by anyone, else 0
--   holds   the owner's hold count (0 if it holds none)
--   pttl    remaining lease in milliseconds (-2 when not locked)
-- Errors: "WRONGTYPE lock" when the key holds data that is not a lock of ours (another type,
-- or a hash without a lease).

local lock, owner = KEYS[1], ARGV[1]

local pttl = redis.call('pttl', lock)
if pttl == -2 then
  return {0, 0, -2}
end
local holds = redis.pcall('hget', lock, owner)
if pttl == -1 or type(holds) == 'table' then
  return redis.error_reply('WRONGTYPE lock')
end
return {1, tonumber(holds) or 0, pttl}
