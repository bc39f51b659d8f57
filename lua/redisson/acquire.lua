-- redisson/acquire.lua: take or re-enter a lock in Redisson's layout (Java's RLock and
-- RFencedLock: Redisson's format), with a fencing token from the fenced lock's
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
--   {0, pttl}      held by another owner for pttl ms more
--   {-1, 0}        a re-entry whose hold is gone
-- Errors (nothing was written with any of them):
--   "WRONGTYPE lock"   the key is a read-write lock's hash (it has a `mode` field, which a
--                      lock's never has: Java's getReadWriteLock of the same name), whether
--                      busy, re-entered or holding a field named as the caller
--   "WRONGTYPE lock"   the key has no lease (PTTL -1): no lock of Redisson's or ours, which
--                      always have one while held, but an application's hash (or a lock
--                      whose expiry someone cleared: force_unlock.lua frees that one)
--   "WRONGTYPE fence"  the counter holds something that is not a number
--   Redis's own WRONGTYPE when the lock's key is not a hash.
--
-- Idempotent: a first attempt whose reply was lost finds its own field on the retry and
-- answers the token the counter still shows (nobody takes a token while we hold the lock);
-- a re-entry sets the count to holds + 1 rather than adding one. Java adds a token on every
-- re-entry; ours keeps the first, as in our own layout.
--
-- Leases: a first acquisition sets the lease; a re-entry keeps the longer of the lease left
-- and the one asked for (Java resets it; both keep the lock alive at least as long as asked).
--
-- The kind check: a read-write lock's reader field is named as a lock holder's (`<client
-- id>:<thread>`), so without it a thread that reads `n` would take its read for its own lock
-- (a first attempt "whose reply was lost", or a re-entry that adds to the read's count).
-- It costs a free key nothing: the lock's PTTL is read first, -2 says the key is free, and
-- otherwise it is the busy reply; a key that exists has the caller's field and `mode` read
-- in one HMGET, where an HEXISTS of the field was (a busy attempt runs PTTL and HMGET, two
-- commands, where it ran EXISTS, HEXISTS and PTTL).

local lock, owner, lease = KEYS[1], ARGV[1], ARGV[2]

if ARGV[3] then
  local fields = redis.call('hmget', lock, owner, 'mode')
  if fields[2] then
    return redis.error_reply('WRONGTYPE lock')
  end
  if not fields[1] then
    return {-1, 0}
  end
  redis.call('hset', lock, owner, tonumber(ARGV[3]) + 1)
  if redis.call('pttl', lock) < tonumber(lease) then
    redis.call('pexpire', lock, lease)
  end
  return tonumber(ARGV[4])
end

local pttl = redis.call('pttl', lock)
if pttl == -2 then
  local token = redis.pcall('incr', KEYS[2])
  if type(token) == 'table' then
    return redis.error_reply('WRONGTYPE fence')
  end
  redis.call('hset', lock, owner, 1)
  redis.call('pexpire', lock, lease)
  return token
end
-- A key without a lease is no lock: Java's lock scripts give the hash a PX whenever they
-- hold it (the watchdog's or leaseTime), and so do ours. An application's hash (HSET user:2
-- name bob) would otherwise be waited for forever, and called busy by every attempt.
if pttl == -1 then
  return redis.error_reply('WRONGTYPE lock')
end
local fields = redis.call('hmget', lock, owner, 'mode')
if fields[2] then
  return redis.error_reply('WRONGTYPE lock')
end
if fields[1] then
  -- Our own first attempt, whose reply was lost.
  redis.call('pexpire', lock, lease)
  return tonumber(redis.call('get', KEYS[2]) or '0')
end
return {0, pttl}
