-- semaphore_counts.lua: a semaphore's total and the permits held now under a live lease
-- (`available()` is the one less the other, never below 0).
-- Reads only.
--
-- KEYS[1]  the holders   <prefix>:{<name>}:semaphore          hash: owner -> "<count> <token>"
-- KEYS[2]  the leases    <prefix>:{<name>}:semaphore:leases   zset: owner -> lease end (ms)
-- KEYS[3]  the total     <prefix>:{<name>}:semaphore:permits
--
-- Reply: {total, held} (total 0 when none is set). Errors: "WRONGTYPE <role>" for foreign
-- data.

local clock = redis.call('time')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local total = redis.pcall('get', KEYS[3])
-- A total as shares.lua's total() judges it: digits, at most 4294967295.
if type(total) == 'table'
    or (total and not (string.match(total, '^%d+$') and tonumber(total) <= 4294967295)) then
  return redis.error_reply('WRONGTYPE permits')
end
local live = redis.pcall('zrangebyscore', KEYS[2], '(' .. now, '+inf')
if live.err then
  return redis.error_reply('WRONGTYPE leases')
end
local used = 0
for _, owner in ipairs(live) do
  local v = redis.pcall('hget', KEYS[1], owner)
  if type(v) == 'table' then
    return redis.error_reply('WRONGTYPE lock')
  end
  used = used + tonumber(string.match(v or '0', '^(%d+)') or '0')
end
return {string.format('%d', tonumber(total or '0')), used}
