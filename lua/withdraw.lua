-- withdraw.lua: a waiter gives up its place in the queue; if the lock was handed to it
-- meanwhile, it keeps it.
--
-- KEYS[1]  the lock hash     <prefix>:{<name>}
-- KEYS[2]  the fence         <prefix>:{<name>}:fence
-- KEYS[3]  the wait queue    <prefix>:{<name>}:queue
-- KEYS[4]  waiters' terms    <prefix>:{<name>}:waiters
-- ARGV[1]  owner id
-- ARGV[2]  lease             milliseconds, if the lock turns out to be the caller's
--
-- Replies: { 1, token } the lock had been handed to the caller, which now holds it with a new
-- token and the given lease (the token of the hand-off is never used); { 0, 0 } it had not,
-- and the caller is out of the queue, so nothing will be handed to it any more.

local lock, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, lease = ARGV[1], ARGV[2]

redis.pcall('zrem', queue, owner)
redis.pcall('hdel', waiters, owner)
if redis.pcall('hexists', lock, owner) ~= 1 then
  return {0, 0}
end
local token = redis.pcall('incr', fence)
if type(token) == 'table' then
  return redis.error_reply('WRONGTYPE fence')
end
redis.call('hset', lock, owner, 1)
redis.call('pexpire', lock, lease)
return {1, token}
