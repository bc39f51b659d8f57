-- renew.lua: the watchdog; extend the lease of many locks in one call.
--
-- KEYS[2i-1]  lock hash i          <prefix>:{<name>}
-- KEYS[2i]    its fencing counter  <prefix>:{<name>}:fence
-- ARGV[1]     lease                milliseconds
-- ARGV[2]     fence retention      ms the fencing counter outlives the lease
-- ARGV[2i+1]  owner id of lock i
-- ARGV[2i+2]  fencing token of the hold being renewed
--
-- Reply: an array with one entry per lock: 1 = still ours, 0 = no longer ours.
--
-- A lock is ours only if the owner's field is there *and* the fence still shows the hold's
-- token: a renewal that was in flight while its hold was released and the same thread took
-- the lock again must not touch the new hold. A lease is only ever extended, never
-- shortened (a re-entry may have set a longer fixed lease, and its fence with it). A key of
-- another type counts as 0 rather than failing the whole batch.

local lease, fence_ttl = tonumber(ARGV[1]), tonumber(ARGV[1]) + tonumber(ARGV[2])
local result = {}
for i = 1, #KEYS / 2 do
  local lock, fence = KEYS[2 * i - 1], KEYS[2 * i]
  local owner, token = ARGV[2 * i + 1], ARGV[2 * i + 2]
  result[i] = 0
  if redis.pcall('hexists', lock, owner) == 1 and redis.pcall('get', fence) == token then
    if redis.call('pttl', lock) < lease then
      redis.call('pexpire', lock, lease)
      -- The fence outlives the lease it fences by the retention, never less.
      redis.call('pexpire', fence, fence_ttl)
    end
    result[i] = 1
  end
end
return result
