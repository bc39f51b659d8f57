-- redisson/write_acquire.lua: take or re-enter the write of a read-write lock in Redisson's
-- layout (Java's getReadWriteLock(name).writeLock(): Redisson's format), with a
-- fencing token from the fenced lock's counter (the guide's data layout).
--
-- KEYS[1]  the lock hash      <name>    mode -> read|write, <owner> -> reads,
--                                       <owner>:write -> writes
-- KEYS[2]  the token counter  redisson_lock_token:{<name>}    INCR per first write
-- ARGV[1]  write field        <client id>:<thread number>:write
-- ARGV[2]  lease              ms
-- ARGV[3]  holds              (re-entry only) the writer's holds before this attempt
-- ARGV[4]  token              (re-entry only) the token of the hold re-entered
--
-- Replies (as redisson/acquire.lua's):
--   <token>        an integer: taken, or re-entered (with the hold's own token)
--   {0, pttl}      read, or written by another owner, for pttl ms more (-1: a holder
--                  without a lease, which only a foreign client can leave)
--   {-1, 0}        a re-entry whose hold is gone
-- Errors (nothing was written with any of them):
--   "WRONGTYPE lock"   the key is a hash without a `mode` field: not a read-write lock's,
--                      which always has one, but a lock's (Java's getLock, getFairLock,
--                      getSpinLock of the same name, or ours), on a first write and on a
--                      re-entry alike (Redisson's format has Java's write acquire take
--                      such a hash as free and join it; ours never does)
--   "WRONGTYPE fence"  the counter holds something that is not a number
--   Redis's own WRONGTYPE when the lock's key is not a hash.
--
-- Free is no key at all: the hash's PTTL, read first, says -2, and nothing else is read. A
-- key that exists has its `mode` read (a re-entry: with its field, in one HMGET), and its
-- PTTL serves the busy reply and the lease's check. There is no queue: a waiting writer
-- keeps no reader out. A thread that reads and asks to write is refused before this script
-- runs (WouldDeadlock); here it would find the lock busy, as Java does.
--
-- Idempotent: a first attempt whose reply was lost finds its own field on the retry and
-- answers the token the counter still shows (nobody takes a token while we write); a
-- re-entry sets the count to holds + 1 rather than adding one.
-- Leases: a re-entry keeps the longer of the lease left and the one asked for (Java adds the
-- two; both keep the lock at least as long as asked).

local lock, field, lease = KEYS[1], ARGV[1], tonumber(ARGV[2])

local pttl = redis.call('pttl', lock)
if ARGV[3] then
  if pttl == -2 then
    return {-1, 0}
  end
  local fields = redis.call('hmget', lock, 'mode', field)
  if not fields[1] then
    return redis.error_reply('WRONGTYPE lock')
  end
  if fields[1] ~= 'write' or not fields[2] then
    return {-1, 0}
  end
  redis.call('hset', lock, field, tonumber(ARGV[3]) + 1)
  if pttl < lease then
    redis.call('pexpire', lock, lease)
  end
  return tonumber(ARGV[4])
end

if pttl == -2 then
  local token = redis.pcall('incr', KEYS[2])
  if type(token) == 'table' then
    return redis.error_reply('WRONGTYPE fence')
  end
  redis.call('hset', lock, 'mode', 'write', field, 1)
  redis.call('pexpire', lock, lease)
  return token
end
local mode = redis.call('hget', lock, 'mode')
if not mode then
  return redis.error_reply('WRONGTYPE lock')
end
if mode == 'write' and redis.call('hexists', lock, field) == 1 then
  -- Our own first attempt, whose reply was lost.
  if pttl < lease then
    redis.call('pexpire', lock, lease)
  end
  return tonumber(redis.call('get', KEYS[2]) or '0')
end
return {0, pttl}
