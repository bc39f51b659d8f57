-- shares_withdraw.lua: a waiter gives up its place; if it had been granted its share and has
-- not taken it up, it takes it up instead. shares.lua comes first: see it for KEYS[1] (and the keys made from it),
-- ARGV[1..3] and the grant rule.
--
-- ARGV[4]  owner id
-- ARGV[5]  lease             milliseconds, if the share turns out to be the caller's
--
-- Replies: { 1, token } the share had been granted to the caller, which now holds it with
-- the grant's token and at least the given lease; { 0, 0 } it had not, and the caller is out
-- of the queue. The waiters behind it that now fit are granted (a writer that gave up lets
-- the readers behind it in; a large request that gave up, the small ones).
--
-- Under retry after a lost reply: the place is gone either way; if the lost call had taken a
-- grant up, the retry answers {0, 0} (the terms that told are gone), and that share expires
-- with its lease.
-- At maxmemory: the ZREM and HDEL come first and need no memory, so what follows is not
-- refused (see release.lua).

local owner, lease = ARGV[4], tonumber(ARGV[5])

check_types()
local terms = redis.call('hget', waiters, owner)
leave_queue(owner)
purge()
local count, token = holding(owner)
if count and terms == 'granted ' .. token then
  local score = tonumber(redis.call('zscore', leases, owner) or '0')
  if now + lease > score then
    redis.call('zadd', leases, now + lease, owner)
  end
  fix_expiry()
  return {1, tonumber(token)}
end
grant_waiters()
fix_expiry()
return {0, 0}
