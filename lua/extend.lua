-- extend.lua: give one hold of a lock a new lease, from now (LockGuard::extend,
-- OwnedLockGuard::extend). The lease is set, not added to, so it may also shorten it.
--
-- KEYS[1]  the lock hash         <prefix>:{<name>}
-- KEYS[2]  its fencing counter   <prefix>:{<name>}:fence
-- ARGV[1]  lease                 ms from now
-- ARGV[2]  fence retention       ms the fencing counter outlives the lease
-- ARGV[3]  owner id              whose hold it is
-- ARGV[4]  fencing token         of that hold
--
-- Reply: 1 = still ours, the lease now ends ARGV[1] ms from now; 0 = no longer ours, nothing
-- written (so a lost hold is never revived: PEXPIRE on an absent key creates nothing either).
--
-- Ours only as renew.lua has it: the owner's field is there and the fence still shows the
-- hold's token (the same thread may have released and taken the lock again meanwhile, and
-- that newer hold is not this one). A key of another type counts as not ours.
-- The fence is only ever extended: it must outlive every lease it fenced by the retention.
-- Idempotent under retry: a retry sets the same lease again, from a moment later.

local lock, fence = KEYS[1], KEYS[2]
local lease = tonumber(ARGV[1])
local owner, token = ARGV[3], ARGV[4]
if redis.pcall('hexists', lock, owner) ~= 1 or redis.pcall('get', fence) ~= token then
  return 0
end
redis.call('pexpire', lock, lease)
local fence_ttl = lease + tonumber(ARGV[2])
if redis.call('pttl', fence) < fence_ttl then
  redis.call('pexpire', fence, fence_ttl)
end
return 1
