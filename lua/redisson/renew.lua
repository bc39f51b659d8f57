-- redisson/renew.lua: the watchdog for locks in Redisson's layout; extend many leases in one
-- call (what Redisson's batched renewal does, Redisson's format, with the token checked
-- as in renew.lua).
--
-- KEYS[2i-1]  lock hash i          <name>
-- KEYS[2i]    its token counter    redisson_lock_token:{<name>}
-- ARGV[1]     lease                ms
-- ARGV[2i]    owner field of lock i
-- ARGV[2i+1]  the token of the hold being renewed
--
-- Reply: one entry per lock: 1 = still ours (lease set), 0 = no longer ours.
--
-- Ours only if the owner's field is there and the counter still shows the hold's token
-- (nobody takes a token while we hold the lock): a renewal in flight while its hold was
-- released and the same thread took the lock again must not touch the new hold. A lease is
-- only extended. A key of another type counts as 0 rather than failing the whole batch, and
-- so does a read-write lock's hash (one with a `mode` field, which a lock's never has), even
-- where it has a field named as the owner (a read of the same thread's): its lease is left
-- alone, and the hold is reported lost, as its own hash is gone. The field and `mode` are
-- read in one HMGET.

local lease = tonumber(ARGV[1])
local result = {}
for i = 1, #KEYS / 2 do
  local lock = KEYS[2 * i - 1]
  result[i] = 0
  local fields = redis.pcall('hmget', lock, ARGV[2 * i], 'mode')
  -- An error reply (another type) is a table with neither field.
  if fields[1] and not fields[2]
      and redis.pcall('get', KEYS[2 * i]) == ARGV[2 * i + 1] then
    if redis.call('pttl', lock) < lease then
      redis.call('pexpire', lock, lease)
    end
    result[i] = 1
  end
end
return result
