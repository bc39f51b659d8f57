-- redisson/extend.lua: give one hold of a lock in Redisson's layout a new lease, from now
-- (LockGuard::extend, OwnedLockGuard::extend): the hash's PX, set, not added to, so it may
-- shorten it. Java has no such call on RLock; its watchdog's renewal is the same PEXPIRE.
--
-- KEYS[1]  the lock hash         <name>
-- KEYS[2]  its token counter     redisson_lock_token:{<name>}
-- ARGV[1]  lease                 ms from now
-- ARGV[2]  the owner's field     <client id>:<thread> (or an owned guard's <client id>:<n>)
-- ARGV[3]  the hold's token
--
-- Reply: 1 = still ours, the lease now ends ARGV[1] ms from now; 0 = no longer ours, nothing
-- written: a hold is never revived (and PEXPIRE on an absent key creates nothing).
--
-- Ours only as redisson/renew.lua has it: our field is there, the hash has no `mode` (it is
-- a lock's, not a read-write lock's), and the counter still shows the hold's token. A key of
-- another type counts as not ours.
-- Idempotent under retry: a retry sets the same lease again, from a moment later.

local lock = KEYS[1]
local fields = redis.pcall('hmget', lock, ARGV[2], 'mode')
-- An error reply (another type) is a table with neither field.
if not fields[1] or fields[2] or redis.pcall('get', KEYS[2]) ~= ARGV[3] then
  return 0
end
redis.call('pexpire', lock, ARGV[1])
return 1
