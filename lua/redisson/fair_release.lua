-- redisson/fair_release.lua: give back one hold of a fair lock in Redisson's layout; the last
-- one deletes the lock and wakes the waiter at the head of the queue, on its own channel
-- (Java's RFairLock unlock, Redisson's format).
--
-- KEYS[1]  the lock hash    <name>
-- KEYS[2]  the queue        redisson_lock_queue:{<name>}
-- KEYS[3]  the deadlines    redisson_lock_timeout:{<name>}
-- KEYS[4]  the channel      redisson_lock__channel:{<name>}   (the head's is this + ":" + head)
-- KEYS[5]  the unlock latch (only with ARGV[5])
-- ARGV[1]  owner field
-- ARGV[2]  now              epoch ms, the caller's clock
-- ARGV[3]  holds            the owner's holds before this release (>= 1); absent: 1
-- ARGV[4]  publish command  PUBLISH or SPUBLISH; absent: PUBLISH
--                           by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
-- ARGV[5]  latch ttl        ms (only with KEYS[5])
-- (The caller leaves off the end what says nothing: a usual release sends ARGV[1] and [2].)
--
-- Replies as redisson/release.lua's: 1 released, 2 still held, 3 gone, 0 not ours.
-- Errors: "WRONGTYPE lock" when the key is a read-write lock's hash (it has a `mode` field,
-- which a lock's never has), even where it has a field named as the owner (a read of the
-- same thread's): nothing deleted, set, published or latched, and stale heads not dropped.
-- The hash is read first (HMGET of the owner's field and `mode`, in place of an HGET).
-- Stale heads are dropped first (as every fair-lock script of Java's does), so the "0" goes
-- to a waiter still valid. A lock found gone wakes the head all the same, as Java does: the
-- head may be sleeping towards a lease that ended. Idempotent as redisson/release.lua.

local lock, queue, deadlines, owner = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local latch = KEYS[5]
local now = tonumber(ARGV[2])

if latch then
  local replay = redis.call('get', latch)
  if replay then
    return replay == '1' and 1 or 2
  end
end
local fields = redis.call('hmget', lock, owner, 'mode')
if fields[2] then
  return redis.error_reply('WRONGTYPE lock')
end
local count = fields[1]
while true do
  local head = redis.call('lindex', queue, 0)
  if not head then
    break
  end
  local deadline = redis.call('zscore', deadlines, head)
  if not deadline or tonumber(deadline) > now then
    break
  end
  redis.call('zrem', deadlines, head)
  redis.call('lpop', queue)
end
local function wake_head()
  local head = redis.call('lindex', queue, 0)
  if head then
    redis.pcall(ARGV[4] or 'PUBLISH', KEYS[4] .. ':' .. head, '0')
  end
end

if not count then
  if redis.call('exists', lock) == 1 then
    return 0
  end
  wake_head()
  return 3
end
local holds = tonumber(ARGV[3]) or 1
if tonumber(count) < holds then
  return 2
end
if holds > 1 then
  redis.call('hset', lock, owner, holds - 1)
  if latch then
    redis.call('set', latch, '0', 'px', ARGV[5])
  end
  return 2
end
redis.call('del', lock)
if latch then
  redis.call('set', latch, '1', 'px', ARGV[5])
end
wake_head()
return 1
