-- shares_force_unlock.lua: free a read-write lock (every reader and the writer) or a
-- semaphore (every holder's permits) whoever holds it, and admit its waiters at once.
-- shares.lua comes first: see it for KEYS[1] (and the keys made from it), ARGV[1..3] ("rw"
-- or "sem") and the grant rule. A semaphore's total (<KEYS[1]>:permits) stays as it is.
--
-- KEYS[2]  a request latch <KEYS[1]>:forced:<request id>
-- KEYS[3]  the forced mark <KEYS[1]>:forced   for a read-write lock, the counter as it was
--                          (every live hold's token: a read takes the counter as it stands,
--                          a write moves it, and no read can start beside a write); for a
--                          semaphore, whose holders each took a token of their own,
--                          "<lowest live token> <counter>";
--                          lives as long as the latch or the freed leases, whichever is
--                          longer: tells the old holders' clients why their holds are gone
-- ARGV[4]  latch ttl       milliseconds
--
-- Reply: 1 = somebody held it and now nobody does, 0 = nobody held it (a hold whose lease
-- had ended does not count). Either way the waiters that now fit are granted, in arrival
-- order (the grant rule), in one message on the channel.
-- Errors: "WRONGTYPE <role>" for foreign data (check_types): nothing is changed.
-- Idempotent per request, as force_unlock.lua: a retry after a lost reply answers the same
-- and does not free holds taken in the meantime.

local latch, mark, latch_ttl = KEYS[2], KEYS[3], tonumber(ARGV[4])

local earlier = redis.call('get', latch)
if earlier then
  return tonumber(earlier)
end
check_types()
purge()
local result = 0
if redis.call('exists', H) == 1 then
  local pttl = redis.call('pttl', H)
  local freed = redis.call('get', fence) or '0'
  if policy == 'sem' then
    local lowest = freed
    local fields = redis.call('hgetall', H)
    for i = 2, #fields, 2 do
      local token = string.match(fields[i], ' (%d+)$')
      if token and tonumber(token) < tonumber(lowest) then
        lowest = token
      end
    end
    freed = lowest .. ' ' .. freed
  end
  redis.call('del', H, leases)
  redis.call('set', mark, freed, 'px', math.max(latch_ttl, pttl))
  result = 1
end
grant_waiters()
fix_expiry()
redis.call('set', latch, result, 'px', latch_ttl)
return result
