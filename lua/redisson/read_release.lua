-- redisson/read_release.lua: give back one read hold of a read-write lock in Redisson's
-- layout (Redisson's format). The hash lives on as long as the longest timeout key of
-- the holders left; with none left it is deleted and "0" is published on the lock's channel,
-- which wakes one waiter of every client, Java's and ours.
--
-- KEYS[1]  the lock hash      <name>
-- KEYS[2]  the channel        redisson_rwlock:{<name>}
-- KEYS[3]  the reader's timeout keys, without the hold's number
--                             {<name>}:<owner>:rwlock_timeout
-- KEYS[4]  what every holder's timeout keys start with: {<name>} (<name> when it has a '{');
--                             holder x's hold k has <that>:<x>:rwlock_timeout:<k>
-- KEYS[5]  the unlock latch   redisson_unlock_latch:{<name>}:<32 hex>   (only with ARGV[4])
-- ARGV[1]  read field         <client id>:<thread number>
-- ARGV[2]  holds              the reader's holds before this release (>= 1); absent: 1
-- ARGV[3]  publish command    PUBLISH, or SPUBLISH on a Redis 7 Cluster (as Redisson
--                             chooses); absent: PUBLISH
--                             by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
-- ARGV[4]  latch ttl          ms (only with KEYS[5])
-- (The caller leaves off the end what says nothing: a usual release sends ARGV[1] alone.)
--
-- Replies (as redisson/release.lua's, which the engine reads):
--   1  the reader's last hold released (and the lock freed if nobody else held it)
--   2  still held: the reader's count is now holds - 1
--   3  gone: the reader has no field (its lease ran out, a Java read unlock found no live
--      timeout key of it, or an earlier run of this call released it and its reply was lost)
-- Errors: "WRONGTYPE lock" when the key is a hash without a `mode` field: a lock's (Java's
-- getLock, getFairLock, getSpinLock of the same name, or ours), not a read-write lock's,
-- even where it has a field named as the reader (the same thread's lock). Nothing is
-- deleted, set or published (Java's read unlock publishes "0" on such a hash; its holder's
-- waiters do not listen there anyway). The check costs only the unusual case, a hash found
-- without `mode` (an EXISTS then). Redis's own WRONGTYPE when the key is not a hash.
--
-- As Java's read unlock: the hold's timeout key (number = the old count) goes with it; when
-- holders remain, the hash's TTL becomes the longest PTTL of their timeout keys (a write
-- field has none); with none of them positive the hash is deleted, unless a write is held
-- (then it is left alone). We differ in one point: while a write is held the TTL is only
-- extended, so that a shorter read lease never cuts the writer's. With no hash at all, "0"
-- is published all the same, as Java does.
--
-- Idempotent: the count is set to holds - 1, so a retry that finds it there already answers
-- "still held" again, and one that finds the field gone answers "gone" (the engine knows
-- whether an earlier run was sent). Where the connection may retry out of the caller's sight
-- (a Cluster's), Redisson's unlock latch records the first run's answer: "1" released, "0"
-- still held.

local lock, channel, field = KEYS[1], KEYS[2], ARGV[1]
local publish = ARGV[3] or 'PUBLISH'
local latch = KEYS[5]

local function answer(reply)
  if latch then
    redis.call('set', latch, reply == 1 and '1' or '0', 'px', ARGV[4])
  end
  return reply
end

if latch then
  local replay = redis.call('get', latch)
  if replay then
    return replay == '1' and 1 or 2
  end
end
local mode = redis.call('hget', lock, 'mode')
if not mode then
  if redis.call('exists', lock) == 1 then
    return redis.error_reply('WRONGTYPE lock')
  end
  redis.pcall(publish, channel, '0')
  return 3
end
local count = tonumber(redis.call('hget', lock, field))
if not count then
  return 3
end
local holds = tonumber(ARGV[2]) or 1
if count < holds then
  return 2
end
local left = holds - 1
if left > 0 then
  redis.call('hset', lock, field, left)
else
  redis.call('hdel', lock, field)
end
redis.call('del', KEYS[3] .. ':' .. holds)
local reply = left > 0 and 2 or 1

if redis.call('hlen', lock) > 1 then
  local longest = -3
  local fields = redis.call('hgetall', lock)
  for i = 1, #fields, 2 do
    local n = tonumber(fields[i + 1])
    if n then
      local timeouts = KEYS[4] .. ':' .. fields[i] .. ':rwlock_timeout:'
      for k = n, 1, -1 do
        longest = math.max(longest, redis.call('pttl', timeouts .. k))
      end
    end
  end
  if longest > 0 then
    if mode ~= 'write' or redis.call('pttl', lock) < longest then
      redis.call('pexpire', lock, longest)
    end
    return answer(reply)
  end
  if mode == 'write' then
    return answer(reply)
  end
end
redis.call('del', lock)
redis.pcall(publish, channel, '0')
return answer(1)
