-- withdraw.lua: a waiter gives up its place in the queue; if the lock was handed to it and
-- not taken up yet, it takes it up instead.
--
-- KEYS[1]  the lock hash     <prefix>:{<name>}
-- KEYS[2]  the fence         <prefix>:{<name>}:fence
-- KEYS[3]  the wait queue    <prefix>:{<name>}:queue
-- KEYS[4]  waiters' terms    <prefix>:{<name>}:waiters
-- ARGV[1]  owner id
-- ARGV[2]  lease             milliseconds, if the lock turns out to be the caller's
-- ARGV[3]  fence retention   ms the fencing counter outlives the lease
--
-- Replies: { 1, token } the lock had been handed to the caller, which now holds it with the
-- hand-over's token and at least the given lease; { 0, 0 } it had not, and the caller is out
-- of the queue, so nothing will be handed to it any more.
--
-- Only a hand-over is taken up (terms "granted <token>" with the fence still at that token):
-- a withdrawal that reaches Redis late must not touch a hold the thread took since.
--
-- Under retry after a lost reply: the place is gone either way; if the lost call had taken a
-- hand-over up, the retry answers {0, 0} (the terms that told are gone), and that hold
-- expires with its lease.
-- Runs at maxmemory: it writes only ZREM, HDEL and PEXPIRE, none of which needs memory, so
-- a full server (noeviction) does not refuse it (see release.lua). Keep it that way: a
-- write that may need memory would have to come after the ZREM.

local lock, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, lease = ARGV[1], tonumber(ARGV[2])

local terms = redis.pcall('hget', waiters, owner)
local current = redis.pcall('get', fence)
redis.pcall('zrem', queue, owner)
redis.pcall('hdel', waiters, owner)
if type(terms) ~= 'string' or type(current) ~= 'string' or terms ~= 'granted ' .. current
   or redis.pcall('hexists', lock, owner) ~= 1 then
  return {0, 0}
end
if redis.call('pttl', lock) < lease then
  redis.call('pexpire', lock, lease)
  redis.call('pexpire', fence, lease + tonumber(ARGV[3]))
end
return {1, tonumber(current)}
