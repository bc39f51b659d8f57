-- force_unlock.lua: delete the lock whoever holds it, and wake every waiter.
--
-- KEYS[1]  the lock hash   <prefix>:{<name>}
-- KEYS[2]  the channel     <prefix>:{<name>}:unlocked
-- ARGV[1]  publish command PUBLISH (or SPUBLISH on a sharded cluster)
--
-- Replies: 1 = it was locked and is now free, 0 = it was not locked.
-- Errors: "WRONGTYPE <key> ..." when the key holds data that is not a lock of ours (another
-- type, or a hash without a lease); it is left untouched.

local lock, channel, publish = KEYS[1], KEYS[2], ARGV[1]

local kind = redis.call('type', lock).ok
if kind == 'none' then
  return 0
end
if kind ~= 'hash' or redis.call('pttl', lock) == -1 then
  return redis.error_reply('WRONGTYPE ' .. lock .. ' is not a lock of ours; left untouched')
end
redis.call('del', lock)
redis.call(publish, channel, 'force')
return 1
