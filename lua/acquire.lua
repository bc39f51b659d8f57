-- acquire.lua: take the lock, or re-enter it, for one owner.
--
-- KEYS[1]  the lock hash        <prefix>:{<name>}          field = owner, value = hold count
-- KEYS[2]  the fencing counter  <prefix>:{<name>}:fence    never expires
-- ARGV[1]  owner id             "<client uuid>:<thread number>"
-- ARGV[2]  holds                how many holds the caller has (0 = a first acquisition)
-- ARGV[3]  lease                milliseconds
-- ARGV[4]  token                the fencing token of the caller's hold (when holds > 0)
--
-- Replies (an array {status, value}):
--   { 1, token }   acquired; token is the fencing token (a re-entry keeps the first one's)
--   { 0, pttl  }   held by another owner; pttl bounds how long the caller should sleep
--   {-1, 0     }   the caller believed it held the lock (holds > 0) but its hold is gone
-- Errors: "WRONGTYPE lock" / "WRONGTYPE fence" when that key holds data that is not ours.
--
-- Idempotent: the hold count is *set* to holds + 1, never incremented, so a retry after a
-- lost reply changes nothing it should not. A first acquisition that finds the caller's
-- field already there (its own earlier attempt whose reply was lost, or a release that never
-- reached Redis) takes over that hold with a *new* token: tokens are never handed out twice.
-- Nothing is written before every check has passed, so an error leaves no partial change.
-- Each redis.call costs about as much as the script's dispatch: the free path makes four.

local lock, fence = KEYS[1], KEYS[2]
local owner, holds, lease, held_token = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

-- INCR refuses a non-integer or a non-string without writing anything.
local function next_token()
  local token = redis.pcall('incr', fence)
  if type(token) == 'table' then
    return nil
  end
  return token
end

-- PTTL answers for a key of any type: -2 absent, -1 no expiry.
local pttl = redis.call('pttl', lock)

if pttl == -2 then
  if holds > 0 then
    return {-1, 0}
  end
  local token = next_token()
  if not token then
    return redis.error_reply('WRONGTYPE fence')
  end
  redis.call('hset', lock, owner, 1)
  redis.call('pexpire', lock, lease)
  return {1, token}
end

if pttl == -1 then
  -- Every lock of ours carries a lease: a key without one is someone else's data.
  return redis.error_reply('WRONGTYPE lock')
end

local mine = redis.pcall('hexists', lock, owner)
if type(mine) == 'table' then
  return redis.error_reply('WRONGTYPE lock')
end

if mine == 0 then
  if holds > 0 then
    return {-1, 0}
  end
  return {0, pttl}
end

if holds == 0 then
  -- Our field without a hold of ours: take it over, as a new hold with a new token and
  -- this acquisition's lease.
  local token = next_token()
  if not token then
    return redis.error_reply('WRONGTYPE fence')
  end
  redis.call('hset', lock, owner, 1)
  redis.call('pexpire', lock, lease)
  return {1, token}
end

-- A re-entry: the field must belong to the caller's current hold.
local current = redis.pcall('get', fence)
if type(current) == 'table' or not tonumber(current) then
  return redis.error_reply('WRONGTYPE fence')
end
if current ~= held_token then
  return {-1, 0}
end
redis.call('hset', lock, owner, holds + 1)
-- A re-entry never shortens the lease the outer holds rely on.
if lease > pttl then
  redis.call('pexpire', lock, lease)
end
return {1, tonumber(current)}
