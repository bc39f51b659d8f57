-- redisson/rw_force_unlock.lua: free a read-write lock in Redisson's layout whoever holds it
-- (every reader and the writer: Java's readLock().forceUnlock() frees only a read-mode hash,
-- and writeLock().forceUnlock() only a write-mode one, Redisson's format), and wake
-- every waiter, Java's and ours, readers and writers.
--
-- KEYS[1]  the lock hash    <name>                      mode, readers, the writer
-- KEYS[2]  the channel      redisson_rwlock:{<name>}
-- KEYS[3]  the key prefix   {<name>}                    reader x's hold k has
--                                                       <that>:<x>:rwlock_timeout:<k>
-- KEYS[4]  the latch        <granted prefix>:<request id>
-- ARGV[1]  publish command  PUBLISH or SPUBLISH
--                           by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
-- ARGV[2]  latch ttl        ms
--
-- Reply: 1 if the lock was held, else 0; a retry of the same request answers the same.
-- Errors: "WRONGTYPE lock" when the key is not a hash, or is a hash without `mode` (a plain
-- lock's, whose waiters listen on another channel): nothing is deleted, published or latched.
--
-- Publishes "1" (Java's READ_UNLOCK message), which every Java waiter of the lock reads as
-- "wake all" (a "0" wakes one per JVM, and Java's write force-unlock sends "1" too). The
-- readers' timeout keys go with the hash: Java's force-unlocks leave them to expire, where
-- a later read unlock of the same reader could take their leases for the hash's.

local lock, channel, prefix, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local replay = redis.call('get', latch)
if replay then
  return tonumber(replay)
end
local found = redis.call('type', lock).ok
if found == 'none' then
  redis.call('set', latch, 0, 'px', ARGV[2])
  return 0
end
if found ~= 'hash' or redis.call('hexists', lock, 'mode') == 0 then
  return redis.error_reply('WRONGTYPE lock')
end
local fields = redis.call('hgetall', lock)
redis.call('del', lock)
for i = 1, #fields, 2 do
  local field, count = fields[i], tonumber(fields[i + 1])
  if field ~= 'mode' and string.sub(field, -6) ~= ':write' and count then
    for k = 1, count do
      redis.call('del', prefix .. ':' .. field .. ':rwlock_timeout:' .. k)
    end
  end
end
redis.pcall(ARGV[1], channel, '1')
redis.call('set', latch, 1, 'px', ARGV[2])
return 1
