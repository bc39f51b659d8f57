-- redisson/rw_inspect.lua: read a read-write lock's state in Redisson's layout without
-- changing it (Redisson's format).
--
-- KEYS[1]  the lock hash    <name>
--
-- Reply: {mode, pttl}
--   mode  0 free, 1 read (`mode` = read), 2 write (`mode` = write: a writer holds it, maybe
--         reading too)
--   pttl  the hash's PTTL, ms (-2 when free): the longest lease of its holders
-- Errors: "WRONGTYPE lock" when the key is not a hash, or a hash without `mode` (a lock's).

local lock = KEYS[1]
local found = redis.call('type', lock).ok
if found == 'none' then
  return {0, -2}
end
if found ~= 'hash' then
  return redis.error_reply('WRONGTYPE lock')
end
local mode = redis.call('hget', lock, 'mode')
if mode == 'read' then
  return {1, redis.call('pttl', lock)}
elseif mode == 'write' then
  return {2, redis.call('pttl', lock)}
end
return redis.error_reply('WRONGTYPE lock')
