-- acquire_many.lua: take several free locks for one owner, all of them or none.
--
-- KEYS[2i-1]  lock i's hash          <prefix>:{<name i>}
-- KEYS[2i]    lock i's fencing counter <prefix>:{<name i>}:fence
-- ARGV[1]     owner id              "<client uuid>:<thread number>"
-- ARGV[2]     lease                 milliseconds
-- ARGV[3]     fence retention       ms each fencing counter outlives the lease
--
-- Replies (an array):
--   { 1, token 1, ..., token n }  every lock taken, each with a new fencing token
--   { 0, i, pttl }                lock i (from 1) is held, by anyone, for pttl ms more; nothing
--                                 was changed
-- Errors: "WRONGTYPE lock <i>" / "WRONGTYPE fence <i>" when that key of lock i holds data
-- that is not ours; Redis's own error (READONLY, OOM...) when it refuses a write.
--
-- Every check runs before the first write, so a busy or foreign lock leaves every other lock
-- as it was. On a single server all the keys are there; on a Cluster the caller sends one
-- call per slot. Tokens are made as in acquire.lua: above the last one, and at least the
-- server's clock in microseconds.

local owner, lease = ARGV[1], ARGV[2]
local fence_ttl = tonumber(lease) + tonumber(ARGV[3])
local n = #KEYS / 2

local lasts = {}
for i = 1, n do
  local lock, fence = KEYS[2 * i - 1], KEYS[2 * i]
  local pttl = redis.call('pttl', lock)
  if pttl == -1 then
    return redis.error_reply('WRONGTYPE lock ' .. i) -- every lock of ours has a lease
  end
  if pttl >= 0 then
    if type(redis.pcall('hexists', lock, owner)) == 'table' then
      return redis.error_reply('WRONGTYPE lock ' .. i)
    end
    return {0, i, pttl}
  end
  local last = redis.pcall('get', fence)
  if type(last) == 'table' then
    return redis.error_reply('WRONGTYPE fence ' .. i)
  end
  if last and not string.match(last, '^%d+$') then
    return redis.error_reply('WRONGTYPE fence ' .. i)
  end
  lasts[i] = tonumber(last) or 0
end

local now = redis.call('time')
local clock = now[1] * 1000000 + now[2]
local reply = {1}
for i = 1, n do
  local lock, fence = KEYS[2 * i - 1], KEYS[2 * i]
  local token = math.max(lasts[i] + 1, clock)
  redis.call('set', fence, string.format('%d', token), 'PX', fence_ttl)
  redis.call('hset', lock, owner, 1)
  redis.call('pexpire', lock, lease)
  reply[i + 1] = token
end
return reply
