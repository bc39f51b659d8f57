-- redisson/semaphore.lua: what the scripts of a semaphore in Redisson's layout share (Java's
-- getPermitExpirableSemaphore(name): Redisson's format). Not a script of its own: it is
-- put in front of each (scripts::splice).
--
-- KEYS[1]  the permits free     <name>              string: a number, below 0 while the
--                                                   total is lowered under what is held
-- KEYS[2]  the permits held     {<name>}:timeout    zset: permit id (16 raw bytes) -> lease
--                               (<name>:timeout when the name has a '{')
--                                                   end, epoch ms by the acquiring client's
--                                                   clock; 922337203685477: no lease
-- KEYS[3]  the channel          redisson_sc:{<name>}
-- Each script says what follows.
--
-- Messages on the channel are counts, decimal, as Java's: a waiter of any client that reads
-- n > 0 wakes up to n waiters of its own, which attempt again.

local sem, held, channel = KEYS[1], KEYS[2], KEYS[3]

-- The role of a key that holds foreign data ("lock" for the count, "leases" for the zset),
-- or nil: checked before anything is written.
local function foreign()
  local found = redis.call('type', sem).ok
  -- A count is decimal, within what Lua counts exactly: tonumber would take "inf", "nan",
  -- "1.5", "0x10", " 5" or "1e3", and the scripts grant against it or write back what they
  -- made of it. Java's counts are ints.
  local count = found == 'string' and redis.call('get', sem)
  if found ~= 'none' and not (count and string.match(count, '^%-?%d+$')
      and math.abs(tonumber(count)) <= 9007199254740991) then
    return 'lock'
  end
  found = redis.call('type', held).ok
  if found ~= 'none' and found ~= 'zset' then
    return 'leases'
  end
  return nil
end

-- Java's reclaim: the permits whose lease ended by `now` (at most `limit` of them; all
-- without one) are free again; if any were, the new count is published when above 0 (by
-- pcall: refused by an ACL, it fails nothing; see lua/release.lua).
-- Returns that count, or nil when nothing had ended.
local function reclaim(now, limit, publish)
  local ended
  if limit then
    ended = redis.call('zrangebyscore', held, 0, now, 'limit', 0, limit)
  else
    ended = redis.call('zrangebyscore', held, 0, now)
  end
  if #ended == 0 then
    return nil
  end
  for _, id in ipairs(ended) do
    redis.call('zrem', held, id)
  end
  local free = redis.call('incrby', sem, #ended)
  if free > 0 then
    redis.pcall(publish, channel, free)
  end
  return free
end
