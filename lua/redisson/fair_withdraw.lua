-- redisson/fair_withdraw.lua: a waiter of a fair lock in Redisson's layout gives up (Java's
-- "acquire failed", Redisson's format): it leaves the queue, and every waiter behind it
-- moves up one slot.
--
-- KEYS[1]  the queue        redisson_lock_queue:{<name>}
-- KEYS[2]  the deadlines    redisson_lock_timeout:{<name>}
-- ARGV[1]  owner field
-- ARGV[2]  slot             ms, as its attempts gave it
--
-- Reply: 0. Idempotent: a second run finds the owner gone and changes nothing.
-- Refuses nothing: it touches only the queue and the deadlines, never the lock's key (a
-- read-write lock's hash there kept the waiter from queueing: redisson/fair_acquire.lua).

local queue, deadlines, owner = KEYS[1], KEYS[2], ARGV[1]
local waiting = redis.call('lrange', queue, 0, -1)
local behind = false
for _, other in ipairs(waiting) do
  if behind then
    if redis.call('zscore', deadlines, other) then
      redis.call('zincrby', deadlines, -tonumber(ARGV[2]), other)
    end
  elseif other == owner then
    behind = true
  end
end
redis.call('zrem', deadlines, owner)
redis.call('lrem', queue, 0, owner)
return 0
