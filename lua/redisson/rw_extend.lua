-- redisson/rw_extend.lua: give one hold of a read-write lock in Redisson's layout a new
-- lease, from now (WriteGuard::extend, ReadGuard::extend). The lease is set, not added to,
-- so it may shorten it. Java has no such call; this keeps the rules its scripts keep
-- (Redisson's format).
--
-- KEYS[1]  the lock hash    <name>
-- KEYS[2]  a write's: its token counter    redisson_lock_token:{<name>}
--          a read's: the key prefix        {<name>} (<name> when it has a brace)
-- ARGV[1]  lease            ms from now
-- ARGV[2]  the hold's field   <owner>:write for a write, <owner> for a read
-- ARGV[3]  a write's token, or "read"
-- KEYS[3]  a write's: its thread's read timeout keys, without the number
--          {<name>}:<owner>:rwlock_timeout (with ARGV[4])
-- ARGV[4]  a write's: the field its thread reads under (<owner>)
--
-- Reply: 1 = still ours, the lease set; 0 = no longer ours, nothing written: a hold is never
-- revived (PEXPIRE on an absent key creates nothing).
--
-- Ours as redisson/rw_renew.lua has it: a write while its field is there, the mode is
-- `write` and the counter still shows its token; a read while its field is there and one of
-- its timeout keys lives with a positive TTL (Java counts a reader alive by those alone).
-- A write sets the hash's TTL to the lease, but never below what its own thread's reads
-- still have (their timeout keys): the hash carries them too. A read sets each of its
-- timeout keys to the lease, then the hash's TTL to the longest any reader has left, as
-- Java's read unlock computes it; while a write is held (the reader is the writer's own
-- thread) the hash's TTL is only extended, since it carries the write's lease too.
-- A key of another type, and a hash without a `mode` (a lock's), count as not ours.
-- Idempotent under retry: a retry sets the same leases again, from a moment later.

local lock, second = KEYS[1], KEYS[2]
local lease, field, token = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local fields = redis.pcall('hmget', lock, field, 'mode')
-- An error reply (another type) is a table with neither field.
local count, mode = fields[1], fields[2]
if not count or not mode then
  return 0
end

if token ~= 'read' then
  if mode ~= 'write' or redis.pcall('get', second) ~= token then
    return 0
  end
  local ttl = lease
  local reads = ARGV[4] and tonumber(redis.call('hget', lock, ARGV[4]))
  if reads then
    for k = reads, 1, -1 do
      local left = redis.call('pttl', KEYS[3] .. ':' .. k)
      if left > ttl then
        ttl = left
      end
    end
  end
  redis.call('pexpire', lock, ttl)
  return 1
end

local timeouts = second .. ':' .. field .. ':rwlock_timeout:'
local alive = false
for k = tonumber(count) or 0, 1, -1 do
  if redis.call('pttl', timeouts .. k) > 0 then
    alive = true
    break
  end
end
if not alive then
  return 0
end
for k = tonumber(count) or 0, 1, -1 do
  -- Never one that has already expired: that hold of the count is gone for Java.
  if redis.call('pttl', timeouts .. k) > 0 then
    redis.call('pexpire', timeouts .. k, lease)
  end
end
local longest = -3
local all = redis.call('hgetall', lock)
for i = 1, #all, 2 do
  local x = all[i]
  if x ~= 'mode' then
    -- A write's field has no timeout keys: its PTTLs answer -2.
    for k = tonumber(all[i + 1]) or 0, 1, -1 do
      local left = redis.call('pttl', second .. ':' .. x .. ':rwlock_timeout:' .. k)
      if left > longest then
        longest = left
      end
    end
  end
end
if mode == 'write' then
  if redis.call('pttl', lock) < longest then
    redis.call('pexpire', lock, longest)
  end
elseif longest > 0 then
  redis.call('pexpire', lock, longest)
end
return 1
