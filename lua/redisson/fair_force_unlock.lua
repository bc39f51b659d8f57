-- redisson/fair_force_unlock.lua: delete a fair lock in Redisson's layout whoever holds it,
-- and wake the head of its queue (Java's RFairLock forceUnlock, REDISSON-FORMAT.md 6.7).
--
-- KEYS[1]  the lock hash    <name>
-- KEYS[2]  the queue        redisson_lock_queue:{<name>}
-- KEYS[3]  the deadlines    redisson_lock_timeout:{<name>}
-- KEYS[4]  the channel      redisson_lock__channel:{<name>}
-- KEYS[5]  the latch        redisson_unlock_latch:{<name>}:<request id>
-- ARGV[1]  now              epoch ms
-- ARGV[2]  publish command
-- ARGV[3]  latch ttl        ms
--
-- Reply: 1 if the lock was there, else 0; a retry of the same request answers the same.
-- Errors: "WRONGTYPE lock" when the key is not a hash: nothing was deleted.

local lock, queue, deadlines = KEYS[1], KEYS[2], KEYS[3]
local replay = redis.call('get', KEYS[5])
if replay then
  return tonumber(replay)
end
local found = redis.call('type', lock).ok
if found ~= 'hash' and found ~= 'none' then
  return redis.error_reply('WRONGTYPE lock')
end
local now = tonumber(ARGV[1])
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
local deleted = redis.call('del', lock)
if deleted == 1 then
  local head = redis.call('lindex', queue, 0)
  if head then
    redis.call(ARGV[2], KEYS[4] .. ':' .. head, '0')
  end
end
redis.call('set', KEYS[5], deleted, 'px', ARGV[3])
return deleted
