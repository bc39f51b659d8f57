-- acquire.lua: take the lock, or re-enter it, for one owner; or queue the owner for it.
-- Runs with places.lua (place_member, find_place, remove_place, void_places) after its usual
-- case (see "Closures" below).
--
-- KEYS[1]  the lock hash        <prefix>:{<name>}          field = owner, value = hold count
-- KEYS[2]  the fencing counter  <prefix>:{<name>}:fence    lives ARGV[3]: the hold's lease plus
--                                                           the retention
-- KEYS[3]  the wait queue       <prefix>:{<name>}:queue    zset, below. Passed when the caller
--                                                           may queue (ARGV[4] > 0), names a
--                                                           place or has leftovers (ARGV[5], [9])
-- KEYS[4]  the hand-over mark   <prefix>:{<name>}:granted  "<owner> <token>" (release.lua).
--                                                           Passed when ARGV[5] names a place
-- ARGV[1]  owner id             "<client uuid>:<thread number>"
-- ARGV[2]  lease                milliseconds
-- ARGV[3]  fence life           ms the fencing counter lives: the lease plus the retention
--                               (the client's builder setting), after which it expires and
--                               tokens restart from the server's clock
-- ARGV[4]  queue for            ms the caller will wait if the lock is busy (0: don't queue)
-- ARGV[5]  place                "" on a wait's first attempt; after that, the place the last
--                               reply of this wait named: "<arrival µs> <valid ms>" (below)
-- ARGV[6]  holds                how many holds the caller has (0 = a first acquisition)
-- ARGV[7]  token                the fencing token of the caller's hold (when holds > 0)
-- ARGV[8]  hand-over lease      ms the lock is handed over for, if handed to the caller
-- ARGV[9]  leftovers            places earlier waits of the caller left when they failed (they
--                               could not withdraw): "<arrival µs> <hand-over lease> <valid>"
--                               each, space-separated (arrival 0: not known), or "". Voided
--                               on the way out, so that no release hands the lock to them
-- Arguments after the third may be left off the end when they are what nothing says: 0
-- (ARGV[4], [6]), "" (ARGV[5], [7], [9]), and the lease (ARGV[8]). Every key and argument
-- costs Redis about 1,300 instructions (callgrind), nearly half a PTTL's, so the client
-- sends only what the attempt can use: a try_lock(ZERO) of a free lock sends two keys and
-- three arguments, a first attempt that would queue three keys and four.
--
-- The queue holds each waiter's terms in its member, so that the release that hands the
-- lock over reads them with the ZPOPMIN that takes the waiter out of the line:
--   member "<owner> <hand-over lease, ms> <valid, ms>", score = arrival (µs, server clock);
--   the place is valid until arrival + <valid> ms.
-- The arrival names a place: it never changes while the place lasts. A wait's later attempts
-- name the member they last heard of; an attempt that finds its place about to run out
-- moves its validity on (a new member, the same arrival), and a retry of that attempt after
-- a lost reply, which names the old member, finds the new one by its arrival (by score, then
-- by owner), so a place is never taken twice.
--
-- Replies:
--   token                 acquired: the fencing token alone, as text (a re-entry keeps the
--                         first one's; taking up a hand-over keeps the hand-over's). Not an
--                         array, and not a number: each costs Redis a conversion (below)
--   { 0, pttl, fence, arrival, valid }
--                         held by another owner; pttl bounds how long the caller should sleep,
--                         fence is the fencing counter now (a hand-over that comes later has a
--                         larger token); with ARGV[4] > 0 the caller is now in the queue, at
--                         the place its next attempt passes as ARGV[5] (else 0, 0)
--   {-1, 0 }              the caller believed it held the lock (holds > 0) but its hold is gone
-- Errors: "WRONGTYPE lock" / "WRONGTYPE fence" / "WRONGTYPE queue" when that key holds data
-- that is not ours; Redis's own error when it refuses a write (READONLY, OOM, ...).
--
-- Idempotent: the hold count is *set* to holds + 1, never incremented, so a retry after a
-- lost reply changes nothing it should not. A first acquisition that finds the caller's
-- field already there takes that hold up: a hand-over made during the caller's current wait
-- (ARGV[5] names a place, and the mark names the caller and the current token) whose message
-- was lost keeps the hand-over's token; anything else (its own earlier attempt whose reply was lost,
-- a release that never reached Redis, a hand-over from an earlier wait) gets a *new* token,
-- so tokens are never handed out twice. Neither ever shortens the lease. Taking a hand-over
-- up deletes its mark, so that a give-back (release.lua) no longer frees it.
-- A wait's first attempt (re)queues at the back: a place of the same member left by an
-- earlier wait that ended without leaving the queue gets this wait's arrival and validity.
-- A retry of that first attempt after a lost reply does the same; it costs the caller the
-- few places that queued in between, never a place twice. A later attempt keeps its place
-- or moves the same place's validity on (above), whatever runs of it came before.
-- Queueing never shortens the expiry of the queue, only extends it.
-- Nothing is written before every check has passed, so an error leaves no partial change,
-- with two exceptions, both removals: leftovers are voided whatever the reply, and an error
-- ends the caller's wait, so a caller that may be queued (ARGV[5] names a place) leaves the
-- queue with it. Otherwise a release would hand the lock to a thread
-- that no longer waits, and the lock would stay held, by nobody, for the hand-over's lease.
--
-- At maxmemory: Redis refuses a script's first write that may need memory (SET, HSET, ZADD)
-- unless something was written before it; ZREM, HDEL and DEL need none and are not refused
-- (seen on redis-server 7.0.15, see release.lua). So taking or queueing for a lock is
-- refused, as it should be, but leaving the queue is not: a refused waiter leaves it, and a
-- waiter taking up a hand-over deletes its mark and leaves the queue *before* it sets its
-- hold, which then is not refused either (the hold was the releaser's, memory it just gave
-- back). Leftovers are voided last, after any write that may need memory: a removal before
-- it would let that write through.
-- Cost: Redis's instructions per lock+unlock cycle under callgrind (repeatable, unlike
-- SLOWLOG's microseconds) measure every change here: with release.lua's usual case, 111,000
-- for a try_lock(ZERO) and its unlock; the seed scripts take 80,000, the seed lock with our
-- fence 104,000 (redis-server 7.0.15, the same driver).
-- Each redis.call costs about as much as the script's dispatch: the free path makes five
-- (PTTL, TIME, the fence's SET, HSET, PEXPIRE), a first queueing attempt six (PTTL, HEXISTS,
-- TIME, ZADD, the queue's PTTL, GET), a later one five (ZSCORE for ZADD and PTTL) while its
-- place is valid long enough, eight when it moves the place's validity on (ZSCORE, ZREM,
-- ZADD, PTTL). A PTTL costs about 3,000 instructions, a TIME 6,500 (its reply is a table).
-- Arguments: every key and argument costs about 1,300 (an object when Redis reads it, a Lua
-- string in KEYS or ARGV, both freed after), so the client leaves off what the script can
-- tell by its absence (above): a try_lock(ZERO) sends five, where all of them were thirteen.
-- Numbers: a Lua number passed to redis.call costs Redis 7.0 a "%.17g" conversion, about as
-- much as a cheap command; string.format and tonumber (strtod) cost as much. So the hot paths
-- pass the text they were given (ARGV) or read (TIME) instead, compare tokens as text, and
-- answer the token as text: 3,000 instructions fewer than comparing numbers. An array reply
-- costs a conversion of its own, so an acquisition answers its token alone (5,000 fewer).
-- Closures: a `local function` is made anew by every run that reaches it (600 instructions
-- and more each), and reading ARGV into locals costs too. So the usual case (a free lock, a
-- first attempt with nothing to leave or void) comes first, with next_token alone made, and
-- returns before anything else exists; `refused`, `micros`, places.lua's helpers (3,000
-- instructions) and the rest of the locals come after it.

local lock, fence = KEYS[1], KEYS[2]
-- The fence lives as long as the lease it fences, plus the retention: a holder's token stays
-- checkable while it holds, and an abandoned name leaves nothing behind.
local fence_ttl = ARGV[3]

-- The next fencing token as text, or nil and why not: the pcall's failure (another type, a
-- read-only replica...: nothing written, `refused` below says which) or "WRONGTYPE fence".
-- Above the last token, and at least the server's clock in microseconds. The clock is what
-- keeps tokens increasing when the counter went back: a restart without persistence lost it,
-- or a failover promoted a replica that had not received its last tokens (provided the new
-- master's clock is not behind the old one's by more than the time between). A release's
-- hand-over only adds one to a counter this function set on the same master, since a hold
-- exists there.
-- One SET ... PX ... GET reads the counter, writes it and sets its life: a key of another type
-- refuses it without writing anything, and a string that is not ours is put back (its value;
-- an expiry it had is lost, which leaves it persistent: never deleted, at worst kept).
-- The usual case makes this function alone (see "Closures" above), so the clock's text is
-- made here as `micros` below makes it.
local function next_token()
  local now = redis.call('time')
  local clock = now[1] .. string.sub('00000' .. now[2], -6)
  local old = redis.pcall('set', fence, clock, 'PX', fence_ttl, 'GET')
  if type(old) == 'table' then
    return nil, old
  end
  if not old then
    return clock
  end
  -- A token of ours is digits below 2^53 (what Lua counts exactly; the clock in µs stays
  -- below it until the year 2255): tonumber would read "1e3" or a longer run of digits, and
  -- the token after it would be wrong.
  -- (Compared as text first: the usual 16 digits cost no number's conversion.)
  if not (string.match(old, '^%d+$') and (#old < 16
      or (#old == 16 and old <= '9007199254740991') or tonumber(old) <= 9007199254740991)) then
    redis.call('set', fence, old) -- not ours: put it back
    return nil, redis.error_reply('WRONGTYPE fence')
  end
  -- Compared as text, without a number's conversion: of two strings of digits, the shorter is
  -- the smaller number, and of two of one length the smaller in collation order (every locale
  -- orders the digits 0-9). Ours have no leading zeros; a longer one with them compares as
  -- numbers below.
  if #old < #clock or (#old == #clock and old < clock) then
    return clock
  end
  local last = tonumber(old)
  if last < tonumber(clock) then
    return clock
  end
  local next = string.format('%d', last + 1)
  redis.call('set', fence, next, 'KEEPTTL')
  return next
end

-- PTTL answers for a key of any type: -2 absent, -1 no expiry.
local pttl = redis.call('pttl', lock)

-- A free lock, taken by a first acquisition (no holds, ARGV[6]): its writes are made here,
-- whoever calls. The usual case, with no place to leave (ARGV[5]) and no leftover to void
-- (ARGV[9]), is then done, before anything else is read or made (see "Closures" above);
-- the others, and a failure, carry on below with the lock taken (`taken`, or why not).
local taken, taking_failed
if pttl == -2 and (ARGV[6] or '0') == '0' then
  taken, taking_failed = next_token()
  if taken then
    redis.call('hset', lock, ARGV[1], '1')
    redis.call('pexpire', lock, ARGV[2])
    if (ARGV[5] or '') == '' and (ARGV[9] or '') == '' then
      return taken
    end
  end
end

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

-- The server's clock, "<seconds><microseconds>" as TIME answered it: the µs since the epoch,
-- as text made without a number's conversion (see "Numbers" above).
local function micros(now)
  return now[1] .. string.sub('00000' .. now[2], -6)
end

-- places.lua goes here

local queue, granted = KEYS[3], KEYS[4]
local owner, lease, queue_for_text = ARGV[1], tonumber(ARGV[2]), ARGV[4] or '0'
local queue_for, holds, held_token = tonumber(queue_for_text), tonumber(ARGV[6] or '0'), ARGV[7]
local handover_lease, leftovers = ARGV[8] or ARGV[2], ARGV[9] or ''
local arrival_was, valid_was = string.match(ARGV[5] or '', '^(%d+) (%d+)$')
local queued = arrival_was ~= nil

-- The member of a place of the caller's, valid for `valid` ms after its arrival.
local function member(lease_ms, valid)
  return place_member(owner, lease_ms, valid)
end

-- The caller got the lock, or its wait ends with an error: it no longer waits.
local function leave_queue()
  if queued then
    remove_place(queue, owner, member(handover_lease, valid_was), arrival_was)
  end
end

-- The member of the place this attempt keeps or takes, if it queues.
local current

-- Every reply goes out through here: the leftovers go last (see "At maxmemory"), all but
-- this attempt's own place (a first attempt of the same terms, as a wait without end makes
-- each time, took a leftover's member over with its ZADD).
local function done(reply)
  void_places(queue, owner, leftovers, current)
  return reply
end

-- The reply to an error that ends the caller's wait: out of the queue first.
local function failed(failure)
  leave_queue()
  return done(failure)
end

if pttl == -2 then
  if holds > 0 then
    return done({-1, 0})
  end
  if not taken then
    return failed(refused(taking_failed, 'fence'))
  end
  leave_queue()
  return done(taken)
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
    return done({-1, 0})
  end
  local arrival, valid = 0, 0
  if queue_for > 0 then
    local now = redis.call('time')
    local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
    -- The place must stay valid until this wait's next attempt (the caller's queue_for
    -- includes slack for that attempt's round trip).
    local needed = now_ms + queue_for
    local name
    if queued then
      name = member(handover_lease, valid_was)
      local score = redis.pcall('zscore', queue, name)
      if type(score) == 'table' then
        return failed(refused(score, 'queue'))
      end
      if score then
        arrival, valid = tonumber(score), tonumber(valid_was)
      else
        -- Renamed by a run of this attempt whose reply was lost, or gone (dropped as stale).
        name = find_place(queue, owner, arrival_was)
        if name then
          arrival, valid = tonumber(arrival_was), tonumber(string.match(name, ' (%d+)$'))
        end
      end
    end
    local written
    if arrival > 0 and math.floor(arrival / 1000) + valid >= needed - 1000 then
      -- Valid long enough: nothing to write.
    elseif arrival > 0 then
      -- About to run out: the same arrival (the same place in line), valid for longer.
      valid = needed - math.floor(arrival / 1000)
      redis.pcall('zrem', queue, name)
      name = member(handover_lease, string.format('%d', valid))
      written = redis.pcall('zadd', queue, arrival, name)
    else
      -- A first attempt, or a place that is gone: at the back.
      local arrival_text = micros(now)
      arrival, valid, name = tonumber(arrival_text), queue_for, member(handover_lease, queue_for_text)
      written = redis.pcall('zadd', queue, arrival_text, name)
    end
    if type(written) == 'table' then
      return failed(refused(written, 'queue'))
    end
    current = name
    -- The queue outlives its last valid place, so an abandoned lock leaves nothing behind.
    -- It is only ever extended, never shortened, by any script. An extension goes to twice
    -- the need, so that the waiters who queue after this one with the same wait find it long
    -- enough, and spare the PEXPIRE; abandoned, the queue outlives its last place by at
    -- most that much.
    if written and redis.call('pttl', queue) < queue_for then
      redis.call('pexpire', queue, 2 * queue_for)
    end
  end
  return done({0, pttl, tonumber(redis.pcall('get', fence)) or 0, arrival, valid})
end

if holds == 0 then
  -- Our field without a hold of ours: take it up.
  local fenced = redis.pcall('get', fence)
  if type(fenced) == 'table'
      or (fenced and not (string.match(fenced, '^%d+$') and (#fenced < 16
        or (#fenced == 16 and fenced <= '9007199254740991')
        or tonumber(fenced) <= 9007199254740991))) then
    -- Not a fence of ours: neither its text is a token, nor can one follow it (next_token).
    return failed(redis.error_reply('WRONGTYPE fence'))
  end
  local token
  if queued and fenced and redis.pcall('get', granted) == owner .. ' ' .. fenced then
    -- Handed over during this wait (its first attempt found the field absent), and nobody
    -- acquired since: the hand-over's token is fresh. Taken up, it is no longer the
    -- hand-over a give-back may free (release.lua).
    token = fenced
    redis.call('del', granted)
  else
    local failure
    token, failure = next_token()
    if not token then
      return failed(refused(failure, 'fence'))
    end
  end
  -- Out of the queue before the HSET: at maxmemory, a first write that frees is what lets
  -- the HSET through (the field is there already; it takes no memory to speak of).
  leave_queue()
  redis.call('hset', lock, owner, '1')
  if lease > pttl then
    redis.call('pexpire', lock, ARGV[2])
    redis.call('pexpire', fence, fence_ttl)
  end
  return done(token)
end

-- A re-entry: the field must belong to the caller's current hold.
local fenced = redis.pcall('get', fence)
if type(fenced) == 'table' or not (fenced and string.match(fenced, '^%d+$')) then
  return done(redis.error_reply('WRONGTYPE fence'))
end
if fenced ~= held_token then
  return done({-1, 0})
end
redis.call('hset', lock, owner, holds + 1)
-- A re-entry never shortens the lease the outer holds rely on; a longer one takes the fence
-- with it.
if lease > pttl then
  redis.call('pexpire', lock, ARGV[2])
  redis.call('pexpire', fence, fence_ttl)
end
return done(fenced)
