-- semaphore_set.lua: set a semaphore's total, and grant the waiters that now fit.
-- shares.lua comes first: see it for KEYS[1] (and the keys made from it), ARGV[1..3] (policy "sem") and the grant
-- rule.
--
-- ARGV[4]  total             the new number of permits
--
-- Reply: 1. Holders keep what they hold, also when the total falls below it: nobody is
-- admitted until enough is given back.
-- Errors: "WRONGTYPE permits" (or another role) for foreign data; nothing written then.
-- Idempotent: setting the same total again changes nothing more.

check_types()
total() -- refuses a foreign total before anything is written
redis.call('set', total_key, ARGV[4])
purge()
grant_waiters()
fix_expiry()
return 1
