-- semaphore_add.lua: move a semaphore's total by a delta, and grant the waiters that now
-- fit. shares.lua comes first: see it for KEYS[1] (and the keys made from it), ARGV[1..3]
-- (policy "sem") and the grant rule.
--
-- ARGV[4]  delta             a whole number, below 0 to shrink the total
--
-- Reply: {1, the new total}, or {0, the total as it is} when the new total would fall below
-- 0 or rise above 4294967295 (nothing written then). A total not set yet counts as 0.
-- Holders keep what they hold, also when the total falls below it: nobody is admitted
-- until enough is given back (the permits free never go below 0 in this layout).
-- Errors: "WRONGTYPE permits" (or another role) for foreign data; nothing written then.
-- Not idempotent: a retry adds the delta again (as Java's addPermits).

check_types()
local t = redis.call('type', total_key).ok
if t ~= 'none' and t ~= 'string' then
  wrongtype('permits') -- GET would fail with Redis's own error, which names no role
end
local was = total() -- refuses a foreign total before anything is written
local new = was + tonumber(ARGV[4])
if new < 0 or new > 4294967295 then
  return {0, string.format('%d', was)}
end
redis.call('set', total_key, string.format('%d', new))
purge()
grant_waiters()
fix_expiry()
return {1, string.format('%d', new)}
