-- acquire.lua: take the lock, or re-enter it, for one owner.
--
-- KEYS[1]  the lock hash        <prefix>:{<name>}          field = owner, value = hold count
-- KEYS[2]  the fencing counter  <prefix>:{<name>}:fence    never expires
-- ARGV[1]  owner id             "<client uuid>:<thread number>"
-- ARGV[2]  holds                how many holds the caller believes it has (0 = first acquisition)
-- ARGV[3]  lease                milliseconds
--
-- Replies (an array {status, value}):
--   { 1, token }   acquired; token is the fencing token (a re-entry keeps the first one's)
--   { 0, pttl  }   held by another owner; pttl bounds how long the caller should sleep
--   {-1, 0     }   the caller believed it held the lock (holds > 0) but its hold is gone
-- Errors: "WRONGTYPE <key> ..." when a key of ours holds data that is not a lock of ours.
--
-- Idempotent: the caller's hold count is *set* to holds + 1, never incremented, so a retry
-- after a lost reply (the first attempt already ran) changes nothing and answers the same.
-- Nothing is written before every check has passed, so an error leaves no partial change.
-- Every redis.call costs about as much as the script's own dispatch: the free path makes four.

local lock, fence = KEYS[1], KEYS[2]
local owner, holds, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

-- PTTL answers for a key of any type: -2 absent, -1 no expiry.
local pttl = redis.call('pttl', lock)

if pttl == -2 then
  if holds > 0 then
    return {-1, 0}
  end
  -- INCR refuses a non-integer or a non-string without writing anything.
  local token = redis.pcall('incr', fence)
  if type(token) == 'table' and token.err then
    return redis.error_reply('WRONGTYPE ' .. fence .. ' is not a fencing counter')
  end
  redis.call('hset', lock, owner, 1)
  redis.call('pexpire', lock, lease)
  return {1, token}
end

if pttl == -1 then
  -- Every lock of ours carries a lease: a key without one is someone else's data.
  return redis.error_reply('WRONGTYPE ' .. lock .. ' has no lease, so it is not a lock')
end

local mine = redis.pcall('hexists', lock, owner)
if type(mine) == 'table' and mine.err then
  return redis.error_reply('WRONGTYPE ' .. lock .. ' is not a hash, so it is not a lock')
end

if mine == 0 then
  if holds > 0 then
    return {-1, 0}
  end
  return {0, pttl}
end

redis.call('hset', lock, owner, holds + 1)
-- A re-entry never shortens the lease the outer holds rely on.
if lease > pttl then
  redis.call('pexpire', lock, lease)
end
return {1, tonumber(redis.call('get', fence)) or 0}
