-- redisson/acquire.lua: take or re-enter a lock in Redisson's layout (Java's RLock and
-- RFencedLock: REDISSON-FORMAT.md 4.2 and 5.1), with a fencing token from the fenced lock's
-- counter.
--
-- KEYS[1]  the lock hash      <name>                          field <owner> -> hold count
-- KEYS[2]  the token counter  redisson_lock_token:{<name>}    INCR per first acquisition
-- ARGV[1]  owner field        <client id>:<thread number>
-- ARGV[2]  lease              ms
-- ARGV[3]  holds              (re-entry only) the owner's holds before this attempt
-- ARGV[4]  token              (re-entry only) the token of the hold re-entered
--
-- Replies:
--   <token>        an integer: taken, or re-entered (with the hold's own token)
--   {0, pttl}      held by another owner for pttl ms more (-1: a holder without a lease,
--                  which only a foreign client can leave)
--   {-1, 0}        a re-entry whose hold is gone
-- Errors: "WRONGTYPE fence" when the counter holds something that is not a number (nothing
-- was written); Redis's own WRONGTYPE when the lock's key is not a hash.
--
-- Idempotent: a first attempt whose reply was lost finds its own field on the retry and
-- answers the token the counter still shows (nobody takes a token while we hold the lock);
-- a re-entry sets the count to holds + 1 rather than adding one. Java adds a token on every
-- re-entry; ours keeps the first, as in our own layout.
--
-- Leases: a first acquisition sets the lease; a re-entry keeps the longer of the lease left
-- and the one asked for (Java resets it; both keep the lock alive at least as long as asked).

local lock, owner, lease = KEYS[1], ARGV[1], ARGV[2]

if ARGV[3] then
  local count = redis.call('hget', lock, owner)
  if not count then
    return {-1, 0}
  end
  redis.call('hset', lock, owner, tonumber(ARGV[3]) + 1)
  if redis.call('pttl', lock) < tonumber(lease) then
    redis.call('pexpire', lock, lease)
  end
  return tonumber(ARGV[4])
end

if redis.call('exists', lock) == 0 then
  local token = redis.pcall('incr', KEYS[2])
  if type(token) == 'table' then
    return redis.error_reply('WRONGTYPE fence')
  end
  redis.call('hset', lock, owner, 1)
  redis.call('pexpire', lock, lease)
  return token
end
if redis.call('hexists', lock, owner) == 1 then
  -- Our own first attempt, whose reply was lost.
  redis.call('pexpire', lock, lease)
  return tonumber(redis.call('get', KEYS[2]) or '0')
end
return {0, redis.call('pttl', lock)}
