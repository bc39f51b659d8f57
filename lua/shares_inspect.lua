-- shares_inspect.lua: read a read-write lock's state (our layout) without changing it.
--
-- KEYS[1]  the holders     <prefix>:{<name>}:rwlock   hash: owner -> "<count> <token>",
--                          "writer" -> the write owner (see shares.lua)
-- KEYS[2]  the leases      <KEYS[1]>:leases           zset: owner -> lease end (ms)
--
-- Reply: {held, writing, pttl}
--   held     how many holders (readers and the writer) have a lease that has not ended
--   writing  1 if the writer's lease has not ended, else 0
--   pttl     ms until the last live lease ends (-2 when nobody holds it)
-- Holders whose lease ended count as gone, as every other script of the kind counts them,
-- though the next write drops them (shares.lua's purge).
-- Errors: "WRONGTYPE lock" / "WRONGTYPE leases" for foreign data.

local H, leases = KEYS[1], KEYS[2]
local kind = redis.call('type', H).ok
if kind == 'none' then
  return {0, 0, -2}
end
if kind ~= 'hash' or redis.call('pttl', H) == -1 then
  return redis.error_reply('WRONGTYPE lock')
end
local lkind = redis.call('type', leases).ok
if lkind ~= 'zset' and lkind ~= 'none' then
  return redis.error_reply('WRONGTYPE leases')
end
local clock = redis.call('time')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local held = redis.call('zcount', leases, '(' .. now, '+inf')
if held == 0 then
  return {0, 0, -2}
end
local writing = 0
local writer = redis.call('hget', H, 'writer')
if writer then
  local ends = redis.call('zscore', leases, writer)
  if ends and tonumber(ends) > now then
    writing = 1
  end
end
local last = redis.call('zrange', leases, -1, -1, 'WITHSCORES')
return {held, writing, tonumber(last[2]) - now}
