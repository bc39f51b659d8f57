-- renew.lua: the watchdog; extend the lease of many locks in one call.
--
-- KEYS[i]    lock hash i          <prefix>:{<name>}
-- ARGV[1]    lease                milliseconds
-- ARGV[i+1]  owner id of lock i
--
-- Reply: an array with one entry per key: 1 = renewed (still ours), 0 = no longer ours.
-- A key that holds another type counts as 0 rather than failing the whole batch.

local lease = ARGV[1]
local result = {}
for i, lock in ipairs(KEYS) do
  local held = redis.pcall('hexists', lock, ARGV[i + 1])
  if held == 1 then
    redis.call('pexpire', lock, lease)
    result[i] = 1
  else
    result[i] = 0
  end
end
return result
