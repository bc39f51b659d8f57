-- semaphore_try_set.lua: set a semaphore's total only if none is set yet, and grant the
-- waiters that now fit. shares.lua comes first: see it for KEYS[1] (and the keys made from
-- it), ARGV[1..3] (policy "sem") and the grant rule.
--
-- ARGV[4]  total             the number of permits
--
-- Reply: 1 if the total was set, 0 if one was there already (nothing written then).
-- Errors: "WRONGTYPE permits" (or another role) for foreign data; nothing written then.
-- Idempotent: a retry finds the total set and replies 0.

check_types()
local t = redis.call('type', total_key).ok
if t ~= 'none' and t ~= 'string' then
  wrongtype('permits') -- GET would fail with Redis's own error, which names no role
end
if redis.call('exists', total_key) == 1 then
  total() -- refuses a foreign total
  return 0
end
redis.call('set', total_key, ARGV[4])
purge()
grant_waiters()
fix_expiry()
return 1
