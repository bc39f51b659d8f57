-- redisson/acquire_many.lua: take several free locks in Redisson's layout for one owner, all
-- of them or none (the members of a MultiLock: Java's getMultiLock over RLocks keeps no keys
-- of its own, so each member is an RLock hash).
--
-- KEYS[2i-1]  lock i's hash           <name i>
-- KEYS[2i]    lock i's token counter  redisson_lock_token:{<name i>}
-- ARGV[1]     owner field             <client id>:<thread number>
-- ARGV[2]     lease                   ms
--
-- Replies (an array):
--   { 1, token 1, ..., token n }  every lock taken, each with a new token
--   { 0, i, pttl }                lock i (from 1) is held by another owner for pttl ms more;
--                                 nothing was changed (a key without a lease is no lock:
--                                 "WRONGTYPE lock <i>", as acquire.lua)
-- Errors: "WRONGTYPE lock <i>" / "WRONGTYPE fence <i>" when that key of lock i holds data
-- that is not a lock or a counter (a lock's key: another type, or a read-write lock's hash,
-- which has a `mode` field that a lock's never has); nothing was changed then.
--
-- Every check runs before the first write. Idempotent: a retry after a lost reply finds the
-- owner's own fields (a MultiLock never re-enters a member) and answers the tokens the
-- counters show, which nobody moves while we hold the locks.

local owner, lease = ARGV[1], ARGV[2]
local n = #KEYS / 2
local mine = {}
for i = 1, n do
  local lock, fence = KEYS[2 * i - 1], KEYS[2 * i]
  local kind = redis.call('type', lock).ok
  if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE lock ' .. i)
  end
  local counter = redis.call('type', fence).ok
  if counter ~= 'none' and (counter ~= 'string'
      or not string.match(redis.call('get', fence), '^%d+$')) then
    return redis.error_reply('WRONGTYPE fence ' .. i)
  end
  if kind == 'hash' then
    local fields = redis.call('hmget', lock, owner, 'mode')
    if fields[2] then
      return redis.error_reply('WRONGTYPE lock ' .. i)
    end
    if not fields[1] then
      -- Without a lease no lock (see acquire.lua).
      local pttl = redis.call('pttl', lock)
      if pttl == -1 then
        return redis.error_reply('WRONGTYPE lock ' .. i)
      end
      return {0, i, pttl}
    end
    mine[i] = true
  end
end
local reply = {1}
for i = 1, n do
  local lock, fence = KEYS[2 * i - 1], KEYS[2 * i]
  if mine[i] then
    reply[i + 1] = tonumber(redis.call('get', fence) or '0')
  else
    reply[i + 1] = redis.call('incr', fence)
    redis.call('hset', lock, owner, 1)
  end
  redis.call('pexpire', lock, lease)
end
return reply
