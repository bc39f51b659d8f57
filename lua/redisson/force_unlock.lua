-- redisson/force_unlock.lua: delete a lock in Redisson's layout whoever holds it, and wake
-- every waiter (REDISSON-FORMAT.md 4.4, publishing "1", which Java's lock waiters read as
-- "wake all", where Java's own force-unlock wakes one waiter per client).
--
-- KEYS[1]  the lock hash    <name>
-- KEYS[2]  the channel      redisson_lock__channel:{<name>}
-- KEYS[3]  the latch        redisson_unlock_latch:{<name>}:<request id>
-- ARGV[1]  publish command  PUBLISH or SPUBLISH
-- ARGV[2]  latch ttl        ms
--
-- Reply: 1 if the lock was there, else 0. Idempotent: the latch records the first run's
-- answer for a retry of the same request.
-- Errors: "WRONGTYPE lock" when the key is not a hash (a Java map of the same name, say):
-- nothing was deleted.

local replay = redis.call('get', KEYS[3])
if replay then
  return tonumber(replay)
end
local found = redis.call('type', KEYS[1]).ok
if found ~= 'hash' and found ~= 'none' then
  return redis.error_reply('WRONGTYPE lock')
end
local deleted = redis.call('del', KEYS[1])
if deleted == 1 then
  redis.call(ARGV[1], KEYS[2], '1')
end
redis.call('set', KEYS[3], deleted, 'px', ARGV[2])
return deleted
