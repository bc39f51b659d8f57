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
-- lock's, whose waiters listen on another channel), or one that is no read-write lock's
-- (`mode` not "read" or "write", a field not "<owner>:<thread>[:write]", a count not 1 to
-- 99999): nothing is deleted, published or latched. It reads the whole hash (HGETALL), as it
-- did to find the readers' timeout keys: a lock's hash has a field per holding thread.
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
-- Only what looks like a read-write lock is deleted: `mode` "read" or "write", every other
-- field an owner "<id>:<thread>" (a writer's with ":write") with a positive count. An
-- application's hash with a `mode` field stays, and no count from it ("inf", "1e9") drives
-- the loop below.
for i = 1, #fields, 2 do
  local field, value = fields[i], fields[i + 1]
  if field == 'mode' then
    if value ~= 'read' and value ~= 'write' then
      return redis.error_reply('WRONGTYPE lock')
    end
  elseif not (string.match(field, '^.+:%d+$') or string.match(field, '^.+:%d+:write$'))
      or not string.match(value, '^[1-9]%d?%d?%d?%d?$') then
    return redis.error_reply('WRONGTYPE lock')
  end
end
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
