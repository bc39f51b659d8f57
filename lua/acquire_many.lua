-- acquire_many.lua: take several free locks for one owner, all of them or none. Runs with
-- places.lua in front.
--
-- KEYS[3i-2]  lock i's hash          <prefix>:{<name i>}
-- KEYS[3i-1]  lock i's fencing counter <prefix>:{<name i>}:fence
-- KEYS[3i]    lock i's wait queue    <prefix>:{<name i>}:queue   (acquire.lua)
-- ARGV[1]     owner id              "<client uuid>:<thread number>"
-- ARGV[2]     lease                 milliseconds
-- ARGV[3]     fence retention       ms each fencing counter outlives the lease
-- ARGV[3+i]   lock i's leftovers    places in lock i's queue that earlier waits of the owner
--                                   left when they failed, as acquire.lua's ARGV[9] gives
--                                   them, or "" (or absent, for the last locks). Voided on
--                                   the way out, whatever the reply, so that no release hands
--                                   a lock to them
--
-- Replies (an array):
--   { 1, token 1, ..., token n }  every lock taken, each with a new fencing token
--   { 0, i, pttl }                lock i (from 1) is held, by anyone, for pttl ms more; nothing
--                                 was changed
-- Errors: "WRONGTYPE lock <i>" / "WRONGTYPE fence <i>" when that key of lock i holds data
-- that is not ours; Redis's own error (READONLY, OOM...) when it refuses a write.
--
-- Every check runs before the first write, so a busy or foreign lock leaves every other lock
-- as it was (leftover places aside: they go whatever the reply, after any write, as in
-- acquire.lua, so that at maxmemory a removal does not let a later write through). On a
-- single server all the keys are there; on a Cluster the caller sends one call per slot.
-- Tokens are made as in acquire.lua: above the last one, and at least the server's clock in
-- microseconds.

local owner, lease = ARGV[1], ARGV[2]
local fence_ttl = tonumber(lease) + tonumber(ARGV[3])
local n = #KEYS / 3

-- Every reply goes out through here: the leftovers go last.
local function done(reply)
  for i = 1, n do
    void_places(KEYS[3 * i], owner, ARGV[3 + i] or '')
  end
  return reply
end

local lasts = {}
for i = 1, n do
  local lock, fence = KEYS[3 * i - 2], KEYS[3 * i - 1]
  local pttl = redis.call('pttl', lock)
  if pttl == -1 then
    return done(redis.error_reply('WRONGTYPE lock ' .. i)) -- every lock of ours has a lease
  end
  if pttl >= 0 then
    if type(redis.pcall('hexists', lock, owner)) == 'table' then
      return done(redis.error_reply('WRONGTYPE lock ' .. i))
    end
    return done({0, i, pttl})
  end
  local last = redis.pcall('get', fence)
  if type(last) == 'table' then
    return done(redis.error_reply('WRONGTYPE fence ' .. i))
  end
  -- A token of ours: digits below 2^53 (see acquire.lua's next_token).
  if last and not (string.match(last, '^%d+$')
      and (#last < 16 or (#last == 16 and last <= '9007199254740991')
        or tonumber(last) <= 9007199254740991)) then
    return done(redis.error_reply('WRONGTYPE fence ' .. i))
  end
  lasts[i] = tonumber(last) or 0
end

local now = redis.call('time')
local clock = now[1] * 1000000 + now[2]
local reply = {1}
for i = 1, n do
  local lock, fence = KEYS[3 * i - 2], KEYS[3 * i - 1]
  local token = math.max(lasts[i] + 1, clock)
  redis.call('set', fence, string.format('%d', token), 'PX', fence_ttl)
  redis.call('hset', lock, owner, 1)
  redis.call('pexpire', lock, lease)
  reply[i + 1] = token
end
return done(reply)
