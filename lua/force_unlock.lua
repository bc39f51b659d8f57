-- force_unlock.lua: delete the lock whoever holds it, and wake every waiter.
--
-- KEYS[1]  the lock hash   <prefix>:{<name>}
-- KEYS[2]  the channel     <prefix>:{<name>}:unlocked
-- KEYS[3]  a request latch <prefix>:{<name>}:forced:<request id>
-- KEYS[4]  the forced mark <prefix>:{<name>}:forced   the token freed; lives as long as the
--                          latch or the freed lease, whichever is longer: tells the old
--                          holder's client why its hold is gone, and its release (release.lua)
--                          that the hold did not end by an earlier run of its own
-- KEYS[5]  the fence       <prefix>:{<name>}:fence
-- ARGV[1]  publish command PUBLISH (or SPUBLISH on a sharded cluster)
--                          by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
-- ARGV[2]  latch ttl       milliseconds
--
-- Replies: 1 = it was locked and is now free, 0 = it was not locked.
-- Errors: "WRONGTYPE lock" when the key holds data that is not a lock of ours (another
-- type, or a hash without a lease); it is left untouched.
--
-- Idempotent per request: the answer is kept in the latch, so a retry after a lost reply
-- answers the same and does not delete a lock somebody took in the meantime.
-- Frees first: the DEL comes before the latch's SET, so a server at maxmemory (noeviction)
-- runs it to the end (see release.lua). With no lock to delete the SET is the first write,
-- and a full server refuses the call with OOM: nothing was changed, nothing needed to be.

local lock, channel, latch, forced, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local publish, latch_ttl = ARGV[1], ARGV[2]

local earlier = redis.call('get', latch)
if earlier then
  return tonumber(earlier)
end

local kind = redis.call('type', lock).ok
local result = 0
if kind ~= 'none' then
  local pttl = redis.call('pttl', lock)
  if kind ~= 'hash' or pttl == -1 then
    return redis.error_reply('WRONGTYPE lock')
  end
  redis.call('del', lock)
  local freed = redis.pcall('get', fence)
  if type(freed) ~= 'string' then
    freed = '0' -- not a fence of ours: the mark still says why, just for no token
  end
  redis.call('set', forced, freed, 'px', math.max(tonumber(latch_ttl), pttl))
  redis.pcall(publish, channel, 'force')
  result = 1
end
redis.call('set', latch, result, 'px', latch_ttl)
return result
