-- redisson/fair_acquire.lua: take, re-enter or queue for a fair lock in Redisson's layout
-- (Java's RFairLock, Redisson's format): the lock's hash, a queue of waiting
-- owners, and each waiter's deadline (epoch ms, the caller's wall clock).
--
-- KEYS[1]  the lock hash      <name>
-- KEYS[2]  the token counter  redisson_lock_token:{<name>}
-- KEYS[3]  the queue          redisson_lock_queue:{<name>}     list of owners, oldest first
-- KEYS[4]  the deadlines      redisson_lock_timeout:{<name>}   zset owner -> epoch ms
-- ARGV[1]  owner field        <client id>:<n>
-- ARGV[2]  lease              ms
-- ARGV[3]  now                epoch ms, the caller's clock (Java's deadlines are too)
-- ARGV[4]  slot               ms a queued waiter stays valid past its predecessor's
--                             deadline (Java: the tryLock wait, or fairLockWaitTimeout);
--                             0: one attempt that never queues
-- ARGV[5]  holds              (re-entry only) the owner's holds before this attempt
-- ARGV[6]  token              (re-entry only) the token of the hold re-entered
--
-- Replies:
--   <token>       taken (by the head of the queue, or with nobody queued), or re-entered
--   {0, ms}       not ours: sleep at most ms before the next attempt (the holder's lease,
--                 or until the waiter ahead of us would be dropped), at least 5 ms
--   {-1, 0}       a re-entry whose hold is gone
-- Errors:
--   "WRONGTYPE lock"   the lock's key is a read-write lock's hash (it has a `mode` field,
--                      which a lock's never has: Java's getReadWriteLock of the same name),
--                      whether busy, re-entered or holding a field named as the caller:
--                      nothing written, not even the queue's stale heads dropped; or the
--                      key, held by another, has no lease (PTTL -1): no lock (see
--                      acquire.lua), likewise nothing written
--   "WRONGTYPE fence"  the counter is not a number (the lock not taken; stale heads may
--                      have been dropped, as any attempt drops them)
--   Redis's own WRONGTYPE when a key is of another type.
--
-- As Java: stale heads (deadline passed) are dropped first; the head, or anyone when nobody
-- queues, takes a free lock, leaves the queue, and takes `slot` off every later deadline; a
-- new waiter's deadline is its predecessor's (or the lease's end) plus `slot`, and an attempt
-- of a waiter already queued does not move it. Only the release's "0", sent to the head's
-- own channel, wakes the next waiter; the reply bounds every sleep, so a dead head costs time
-- up to its deadline, never a hang.
-- Idempotent: a first attempt whose reply was lost finds its own field on the retry and
-- answers the counter's token; a re-entry sets the count to holds + 1.
-- The lock's hash is read before the queue is purged: EXISTS, and only where it exists one
-- HMGET of the caller's field and `mode` (a free lock costs no check).

local lock, queue, deadlines = KEYS[1], KEYS[3], KEYS[4]
local owner, lease = ARGV[1], ARGV[2]
local now, slot = tonumber(ARGV[3]), tonumber(ARGV[4])

if ARGV[5] then
  local fields = redis.call('hmget', lock, owner, 'mode')
  if fields[2] then
    return redis.error_reply('WRONGTYPE lock')
  end
  if not fields[1] then
    return {-1, 0}
  end
  redis.call('hset', lock, owner, tonumber(ARGV[5]) + 1)
  if redis.call('pttl', lock) < tonumber(lease) then
    redis.call('pexpire', lock, lease)
  end
  return tonumber(ARGV[6])
end

local held = redis.call('exists', lock) == 1
local mine = false
local pttl = -2
if held then
  local fields = redis.call('hmget', lock, owner, 'mode')
  if fields[2] then
    return redis.error_reply('WRONGTYPE lock')
  end
  mine = fields[1]
  pttl = redis.call('pttl', lock)
  -- Without a lease no lock (see acquire.lua): checked before the queue is touched.
  if pttl == -1 and not mine then
    return redis.error_reply('WRONGTYPE lock')
  end
end

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

local head = redis.call('lindex', queue, 0)
if not held and (not head or head == owner) then
  local token = redis.pcall('incr', KEYS[2])
  if type(token) == 'table' then
    return redis.error_reply('WRONGTYPE fence')
  end
  if head then
    redis.call('lpop', queue)
  end
  redis.call('zrem', deadlines, owner)
  local others = redis.call('zrange', deadlines, 0, -1)
  for _, other in ipairs(others) do
    redis.call('zincrby', deadlines, -slot, other)
  end
  redis.call('hset', lock, owner, 1)
  redis.call('pexpire', lock, lease)
  return token
end
if mine then
  -- Our own first attempt, whose reply was lost.
  redis.call('pexpire', lock, lease)
  return tonumber(redis.call('get', KEYS[2]) or '0')
end

local function bound(ms)
  return {0, math.max(ms, 5)}
end
if slot == 0 then
  return bound(pttl)
end
if redis.call('zscore', deadlines, owner) then
  if pttl > 0 then
    return bound(pttl)
  end
  local ahead = head and redis.call('zscore', deadlines, head)
  return bound(ahead and tonumber(ahead) - now or 5)
end
local last = redis.call('lindex', queue, -1)
local ttl = pttl
if last and last ~= owner then
  local score = redis.call('zscore', deadlines, last)
  if score then
    ttl = tonumber(score) - now
  end
end
if redis.call('zadd', deadlines, ttl + slot + now, owner) == 1 then
  redis.call('rpush', queue, owner)
end
return bound(ttl)
