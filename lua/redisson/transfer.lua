-- redisson/transfer.lua: release a lock in Redisson's layout straight to another owner, a
-- thread of the releasing client that waits for it: the hash changes hands in one step, so
-- nobody else is woken to race for it, and no "0" is published (the lock stays held).
--
-- KEYS[1]  the lock hash      <name>
-- KEYS[2]  the token counter  redisson_lock_token:{<name>}
-- ARGV[1]  owner field        the releasing holder's (its last hold)
-- ARGV[2]  successor field    the waiting owner's
-- ARGV[3]  lease              ms, the successor's (the watchdog's, until it renews or sets
--                             its own)
--
-- Replies:
--   {1, token}  handed to the successor, with a new token
--   {0}         not ours: another owner holds it; nothing was changed
--   {3}         gone: no hash at all; nothing was changed
-- Errors (nothing written): "WRONGTYPE lock" when the key is a read-write lock's hash (it has
-- a `mode` field, which a lock's never has), even where it has a field named as the owner or
-- the successor (their threads' reads); "WRONGTYPE fence" when the counter is not a number.
-- The owner's field and `mode` are read in one HMGET: no command more.
--
-- To Java the lock is an RLock held all along, first by one field, then by another. A
-- re-entered hold is never transferred (the caller releases only its last hold here).
-- Idempotent: a retry after a lost reply finds the releasing field gone and the successor's
-- there, and answers the token the counter shows (nobody takes one while it is held).

local lock, owner, successor = KEYS[1], ARGV[1], ARGV[2]

local fields = redis.call('hmget', lock, owner, 'mode')
if fields[2] then
  return redis.error_reply('WRONGTYPE lock')
end
if not fields[1] then
  if redis.call('hexists', lock, successor) == 1 then
    return {1, tonumber(redis.call('get', KEYS[2]) or '0')}
  end
  return {redis.call('exists', lock) == 1 and 0 or 3}
end
local token = redis.pcall('incr', KEYS[2])
if type(token) == 'table' then
  return redis.error_reply('WRONGTYPE fence')
end
redis.call('hdel', lock, owner)
redis.call('hset', lock, successor, 1)
redis.call('pexpire', lock, ARGV[3])
return {1, token}
