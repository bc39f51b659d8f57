-- acquire.lua: take the lock, or re-enter it, for one owner; or queue the owner for it.
--
-- KEYS[1]  the lock hash        <prefix>:{<name>}          field = owner, value = hold count
-- KEYS[2]  the fencing counter  <prefix>:{<name>}:fence    lives the hold's lease plus ARGV[8]
-- KEYS[3]  the wait queue       <prefix>:{<name>}:queue    zset: owner -> arrival (µs)
-- KEYS[4]  the waiters' terms   <prefix>:{<name>}:waiters  hash: owner -> terms (below)
-- ARGV[1]  owner id             "<client uuid>:<thread number>"
-- ARGV[2]  holds                how many holds the caller has (0 = a first acquisition)
-- ARGV[3]  lease                milliseconds
-- ARGV[4]  token                the fencing token of the caller's hold (when holds > 0)
-- ARGV[5]  queue for            ms the caller will wait if the lock is busy (0: don't queue)
-- ARGV[6]  queued               "1" if an earlier attempt of this wait may have queued it
-- ARGV[7]  hand-over lease      ms the lock is handed over for, if handed to the caller
-- ARGV[8]  fence retention      ms the fencing counter outlives the hold's lease; after that
--                               it expires and tokens restart from the server's clock
--
-- A waiter's terms are "<valid until, ms> <hand-over lease, ms>" while it waits, and
-- "granted <token>" once a release handed the lock to it (release.lua).
--
-- Replies (an array):
--   { 1, token }          acquired; token is the fencing token (a re-entry keeps the first
--                         one's; taking up a hand-over keeps the hand-over's)
--   { 0, pttl, fence }    held by another owner; pttl bounds how long the caller should sleep,
--                         fence is the fencing counter now (a hand-over that comes later has a
--                         larger token). With ARGV[5] > 0 the caller is now in the queue.
--   {-1, 0 }              the caller believed it held the lock (holds > 0) but its hold is gone
-- Errors: "WRONGTYPE lock" / "WRONGTYPE fence" / "WRONGTYPE queue" / "WRONGTYPE waiters" when
-- that key holds data that is not ours; Redis's own error when it refuses a write (READONLY,
-- OOM, ...).
--
-- Idempotent: the hold count is *set* to holds + 1, never incremented, so a retry after a
-- lost reply changes nothing it should not. A first acquisition that finds the caller's
-- field already there takes that hold up: a hand-over made during the caller's current wait
-- (ARGV[6]) whose message was lost keeps the hand-over's token; anything else (its own
-- earlier attempt whose reply was lost, a release that never reached Redis, a hand-over from
-- an earlier wait) gets a *new* token, so tokens are never handed out twice. Neither ever
-- shortens the lease.
-- Queueing never shortens the expiry of the queue or of the terms, only extends it.
-- Nothing is written before every check has passed, so an error leaves no partial change,
-- with one exception: an error ends the caller's wait, so a caller that may be queued
-- (ARGV[6]) leaves the queue with it. Otherwise a release would hand the lock to a thread
-- that no longer waits, and the lock would stay held, by nobody, for the hand-over's lease.
--
-- At maxmemory: Redis refuses a script's first write that may need memory (SET, HSET, ZADD)
-- unless something was written before it; ZREM and HDEL need none and are not refused (seen
-- on redis-server 7.0.15, see release.lua). So taking or queueing for a lock is refused,
-- as it should be, but leaving the queue is not: a refused waiter leaves it, and a waiter
-- taking up a hand-over leaves it *before* it sets its hold, which then is not refused
-- either (the hold was the releaser's, memory it just gave back).
-- Each redis.call costs about as much as the script's dispatch: the free path makes five.

local lock, fence, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, holds, lease, held_token = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local queue_for, queued, handover_lease = tonumber(ARGV[5]), ARGV[6] == '1', ARGV[7]
-- The fence lives as long as the lease it fences, plus the retention: a holder's token stays
-- checkable while it holds, and an abandoned name leaves nothing behind.
local fence_ttl = lease + tonumber(ARGV[8])

-- The reply to a pcall that failed. Data of another type under the key, or a fence that is
-- not a number, is foreign data: "WRONGTYPE <which>". Anything else (a read-only replica,
-- maxmemory reached, ...) is Redis refusing the command, passed on as Redis said it.
local function refused(failure, which)
  local err = failure.err or ''
  if string.sub(err, 1, 9) == 'WRONGTYPE' or string.find(err, 'not an integer', 1, true) then
    return redis.error_reply('WRONGTYPE ' .. which)
  end
  return failure
end

-- The next fencing token, or nil and the error to answer: above the last one, and at least
-- the server's clock in microseconds. The clock is what keeps tokens increasing when the
-- counter went back: a restart without persistence lost it, or a failover promoted a replica
-- that had not received its last tokens (provided the new master's clock is not behind the
-- old one's by more than the time between). A release's hand-over only adds one to a
-- counter this function set on the same master, since a hold exists there.
-- One SET ... PX ... GET reads the counter, writes it and sets its life: a key of another type
-- refuses it without writing anything, and a string that is not ours is put back (its value;
-- an expiry it had is lost, which leaves it persistent: never deleted, at worst kept).
local function next_token()
  local now = redis.call('time')
  local clock = now[1] * 1000000 + now[2]
  local old = redis.pcall('set', fence, string.format('%d', clock), 'PX', fence_ttl, 'GET')
  if type(old) == 'table' then
    return nil, refused(old, 'fence') -- another type, a read-only replica...: nothing written
  end
  if not old then
    return clock
  end
  if not string.match(old, '^%d+$') then
    redis.call('set', fence, old) -- not ours: put it back
    return nil, redis.error_reply('WRONGTYPE fence')
  end
  local last = tonumber(old)
  if last < clock then
    return clock
  end
  redis.call('set', fence, string.format('%d', last + 1), 'KEEPTTL')
  return last + 1
end

-- The caller got the lock, or its wait ends with an error: it no longer waits.
local function leave_queue()
  if queued then
    redis.pcall('zrem', queue, owner)
    redis.pcall('hdel', waiters, owner)
  end
end

-- The reply to an error that ends the caller's wait: out of the queue first.
local function failed(failure)
  leave_queue()
  return failure
end

-- PTTL answers for a key of any type: -2 absent, -1 no expiry.
local pttl = redis.call('pttl', lock)

if pttl == -2 then
  if holds > 0 then
    return {-1, 0}
  end
  local token, failure = next_token()
  if not token then
    return failed(failure)
  end
  redis.call('hset', lock, owner, 1)
  redis.call('pexpire', lock, lease)
  leave_queue()
  return {1, token}
end

if pttl == -1 then
  -- Every lock of ours carries a lease: a key without one is someone else's data.
  return failed(redis.error_reply('WRONGTYPE lock'))
end

local mine = redis.pcall('hexists', lock, owner)
if type(mine) == 'table' then
  return failed(redis.error_reply('WRONGTYPE lock'))
end

if mine == 0 then
  if holds > 0 then
    return {-1, 0}
  end
  if queue_for > 0 then
    -- Keep the place of an owner already queued (NX); refresh how long it stays valid.
    local now = redis.call('time')
    local queued_ok = redis.pcall('zadd', queue, 'NX', now[1] * 1000000 + now[2], owner)
    if type(queued_ok) == 'table' then
      return failed(refused(queued_ok, 'queue'))
    end
    local expiry = now[1] * 1000 + math.floor(now[2] / 1000) + queue_for
    local terms_ok = redis.pcall('hset', waiters, owner, string.format('%d %s', expiry, handover_lease))
    if type(terms_ok) == 'table' then
      -- Give the place just taken back: a refused attempt leaves nothing behind (a queue
      -- without its terms would also never expire).
      if queued_ok == 1 then
        redis.call('zrem', queue, owner)
      end
      return failed(refused(terms_ok, 'waiters'))
    end
    -- The queue outlives its last valid place, and the terms that place's hand-over too, so
    -- an abandoned lock leaves nothing behind. The terms' key lives at least the wait plus
    -- the hand-over's lease: a release that hands the lock over (any time before the terms
    -- run out) makes them "granted", and those must outlive the hand-over's lease (they tell
    -- an unused hand-over from one taken up). Set here, that spares every hand-over a PTTL.
    -- Each key is only ever extended, never shortened, by any script. An extension goes to
    -- twice the need, so that the waiters who queue after this one with the same wait find
    -- it long enough, and spare the PEXPIRE; abandoned, the keys outlive their last place by
    -- at most that much.
    if redis.call('pttl', queue) < queue_for then
      redis.call('pexpire', queue, 2 * queue_for)
    end
    local terms_for = queue_for + tonumber(handover_lease)
    if redis.call('pttl', waiters) < terms_for then
      redis.call('pexpire', waiters, queue_for + terms_for)
    end
  end
  return {0, pttl, tonumber(redis.pcall('get', fence)) or 0}
end

if holds == 0 then
  -- Our field without a hold of ours: take it up.
  local current = redis.pcall('get', fence)
  if type(current) == 'table' then
    return failed(redis.error_reply('WRONGTYPE fence'))
  end
  local token
  if queued and current and redis.pcall('hget', waiters, owner) == 'granted ' .. current then
    -- Handed over during this wait (its first attempt found the field absent), and nobody
    -- acquired since: the hand-over's token is fresh.
    token = tonumber(current)
  else
    local failure
    token, failure = next_token()
    if not token then
      return failed(failure)
    end
  end
  -- Out of the queue before the HSET: at maxmemory, a first write that frees is what lets
  -- the HSET through (the field is there already; it takes no memory to speak of).
  redis.pcall('zrem', queue, owner)
  redis.pcall('hdel', waiters, owner)
  redis.call('hset', lock, owner, 1)
  if lease > pttl then
    redis.call('pexpire', lock, lease)
    redis.call('pexpire', fence, fence_ttl)
  end
  return {1, token}
end

-- A re-entry: the field must belong to the caller's current hold.
local current = redis.pcall('get', fence)
if type(current) == 'table' or not tonumber(current) then
  return redis.error_reply('WRONGTYPE fence')
end
if current ~= held_token then
  return {-1, 0}
end
redis.call('hset', lock, owner, holds + 1)
-- A re-entry never shortens the lease the outer holds rely on; a longer one takes the fence
-- with it.
if lease > pttl then
  redis.call('pexpire', lock, lease)
  redis.call('pexpire', fence, fence_ttl)
end
return {1, tonumber(current)}
