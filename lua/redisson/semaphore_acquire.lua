-- redisson/semaphore_acquire.lua: take permits of a semaphore in Redisson's layout, each
-- under a permit id of its own (Java's tryAcquire, Redisson's format), with a fencing
-- token from the fenced lock's counter (the guide's data layout; Java takes none for a
-- semaphore). redisson/semaphore.lua comes first: see it for KEYS[1..3].
--
-- KEYS[4]  the token counter  redisson_lock_token:{<name>}    INCR per acquisition
-- ARGV[1]  lease end          epoch ms by this client's clock (now + lease)
-- ARGV[2]  now                epoch ms by this client's clock
-- ARGV[3]  publish command    PUBLISH or SPUBLISH (a reclaim publishes)
-- ARGV[4..] the permit ids    16 raw bytes each, one per permit asked for
--
-- Replies (as redisson/acquire.lua's):
--   <token>     an integer: taken
--   {0, ms}     not enough free: the earliest lease among the holders ends in ms (at least
--               1), by this client's clock; -1 when none will end (only held without a lease,
--               or none held): then only a message frees permits
-- Errors: "WRONGTYPE lock", "WRONGTYPE leases", "WRONGTYPE fence" for foreign data; nothing
-- was written.
--
-- As Java's: first the permits whose lease ended are reclaimed (at most as many as asked
-- for); then, if enough are free, the count goes down and each id goes into the zset with
-- the lease end (the zset gets the count key's TTL, if it has one). A request above the
-- total only ever finds too few free.
-- Idempotent: a retry whose first run took the permits finds its first id held, and answers
-- a new token (still above every earlier one, and nobody else's).

local ends, now, publish = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local asked = #ARGV - 3
local fence = KEYS[4]

local wrong = foreign()
if wrong then
  return redis.error_reply('WRONGTYPE ' .. wrong)
end
local found = redis.call('type', fence).ok
if found ~= 'none'
    and (found ~= 'string' or not string.match(redis.call('get', fence), '^%d+$')) then
  return redis.error_reply('WRONGTYPE fence')
end

if redis.call('zscore', held, ARGV[4]) then
  return redis.call('incr', fence)
end
reclaim(now, asked, publish)
local free = tonumber(redis.call('get', sem) or '-1')
if free >= asked then
  redis.call('decrby', sem, asked)
  for i = 4, #ARGV do
    redis.call('zadd', held, ends, ARGV[i])
  end
  local ttl = redis.call('pttl', sem)
  if ttl > 0 then
    redis.call('pexpire', held, ttl)
  end
  return redis.call('incr', fence)
end
local first = redis.call('zrange', held, 0, 0, 'withscores')
if first[2] and first[2] ~= '922337203685477' then
  return {0, math.max(1, tonumber(first[2]) - now)}
end
return {0, -1}
