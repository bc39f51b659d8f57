-- release.lua: give back one hold; the last one hands the lock to the first live waiter in
-- the queue, or deletes it and wakes a waiter.
--
-- KEYS[1]  the lock hash     <prefix>:{<name>}
-- KEYS[2]  the fence         <prefix>:{<name>}:fence
-- KEYS[3]  the channel       <prefix>:{<name>}:unlocked
-- KEYS[4]  the release latch <prefix>:{<name>}:released:<owner>:<token>
-- KEYS[5]  the wait queue    <prefix>:{<name>}:queue
-- KEYS[6]  waiters' terms    <prefix>:{<name>}:waiters
-- ARGV[1]  owner id
-- ARGV[2]  holds             how many holds the caller has before this release (>= 1)
-- ARGV[3]  token             the fencing token of the hold being released
-- ARGV[4]  latch ttl         milliseconds the latch outlives a final release
-- ARGV[5]  publish command   PUBLISH (or SPUBLISH on a sharded cluster)
-- ARGV[6]  how the hold was taken, which says whether the owner's "granted <token>" terms
--          are still in the waiters' hash:
--          "0" by an attempt of its own (which removed any "granted" terms; a place left
--              from an earlier wait that failed may remain, removed when others queue);
--          "1" it was not: a hand-over nobody took up, given back. Act only while the
--              owner's terms still say "granted <token>" (taking it up, by an attempt or a
--              withdrawal, removes them; a thread that took it from the message holds it
--              and never gives it back);
--          "2" from a hand-over's message, without a round trip: the terms are still there.
-- ARGV[7]  fence retention   ms the fencing counter outlives a hand-over's lease
--
-- Replies:
--   1  released: the lock went to the next waiter ("grant <token> <lease ms> <owner>"
--      published on the channel), or was deleted ("unlock" published if anyone was queued)
--   2  still held: the caller's hold count is now holds - 1
--   0  not ours: nothing was changed
-- Errors: Redis's own when it refuses the first write (an intermediate release at maxmemory,
-- READONLY on a replica); nothing was changed then.
--
-- The hold is ours only if the owner's field is there *and* the fence still shows the hold's
-- token: a release that timed out and reaches Redis late must not touch a newer hold.
--
-- Handing over inside the release is what makes a hand-off cheap and fair: the next holder
-- is the oldest waiter still waiting (its terms say until when), anywhere in the fleet; it
-- needs no attempt of its own, only the message; and nobody else is woken to race for it.
-- Its terms become "granted <token>", so that its own later calls know the hold for a
-- hand-over (acquire.lua, withdraw.lua). A waiter whose message is lost still finds the lock
-- is its own at its next attempt.
--
-- Idempotent, so a retry after a lost reply tells the owner the truth: an intermediate
-- release *sets* the count to holds - 1; the final release leaves a short-lived latch named
-- after the hold's owner and fencing token, and a retry that finds the latch answers 1
-- instead of "not ours" (Redisson issues #4871 and #6651). The script is atomic, so that the
-- latch is written after the lock is deleted changes nothing a retry can see.
--
-- Frees first, at maxmemory too: a release is what gives memory back, so it must not be the
-- call a full server refuses. Redis checks memory for a script only at its first write that
-- may need memory (SET, HSET, INCR...), and only if nothing was written before it; a DEL,
-- ZREM or HDEL needs none. Seen on redis-server 7.0.15 with maxmemory below the memory used
-- and noeviction: a script whose first write is SET fails with OOM and changes nothing; one
-- that DELs first (even a key that does not exist) runs to the end, its SETs and HSETs
-- included. So the final release deletes the lock before it writes the latch or hands the
-- lock over. Should the latch write be refused anyway (not for memory, after the DEL), the
-- release goes on, wakes or hands over as usual and answers 1: the lock is free, and only a
-- retry of this same call after a lost reply would then answer 0 ("not ours").
-- The intermediate release (holds > 1) frees nothing and is refused at maxmemory like any
-- write; the count left in Redis is then one too high, which the final release ignores.

local lock, fence, channel, latch, queue, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local owner, holds, token = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local latch_ttl, publish, unused_only, granted = ARGV[4], ARGV[5], ARGV[6] == '1', ARGV[6] ~= '0'

if unused_only and redis.pcall('hget', waiters, owner) ~= 'granted ' .. token then
  return 0
end

-- A key of another type is not ours: HEXISTS fails on it, and nothing is touched.
if redis.pcall('hexists', lock, owner) ~= 1 or redis.pcall('get', fence) ~= token then
  if holds <= 1 and redis.call('exists', latch) == 1 then
    return 1
  end
  return 0
end

if holds > 1 then
  redis.call('hset', lock, owner, holds - 1)
  return 2
end

-- The oldest queued owner, if any.
local function queue_head()
  local head = redis.pcall('zrange', queue, 0, 0)
  if type(head) == 'table' and not head.err then
    return head[1]
  end
  return nil
end

-- Read the queue and the clock before writing anything.
local head = queue_head()
local now
if head then
  local t = redis.call('time')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
end

-- The DEL is the script's first write: from here on a server at maxmemory refuses nothing.
redis.call('del', lock)
-- The owner's terms go: a hand-over's "granted" ones, and, when others queue, a place of its
-- own left from an earlier wait that failed without withdrawing (its uncontended attempt did
-- not leave the queue). Behind an older waiter, such a place would outlive this release, and
-- a later one would hand the lock to a thread that no longer waits.
if granted or head then
  redis.pcall('hdel', waiters, owner)
end
-- A pcall: the lock is already free, and a refused latch must not stop the wake-up below.
redis.pcall('set', latch, '1', 'px', latch_ttl)
if not head then
  -- Nobody waits: a waiter queues in the attempt that finds the lock busy, before it sleeps.
  return 1
end

-- The oldest waiter whose terms have not run out gets the lock. Stale entries (a waiter that
-- gave up without withdrawing, or died, or the releasing owner's own leftover place) are
-- dropped on the way; a bounded number per release.
for _ = 1, 64 do
  if not head then
    break
  end
  redis.call('zrem', queue, head)
  local terms = redis.pcall('hget', waiters, head)
  local expiry, lease
  if type(terms) == 'string' then
    expiry, lease = string.match(terms, '^(%d+) (%d+)$')
  end
  if head ~= owner and expiry and tonumber(expiry) > now then
    local next_token = redis.call('incr', fence) -- the released hold's token is there
    redis.call('pexpire', fence, tonumber(lease) + tonumber(ARGV[7]))
    redis.call('hset', lock, head, 1)
    redis.call('pexpire', lock, lease)
    redis.call('hset', waiters, head, string.format('granted %d', next_token))
    -- The "granted" terms must outlive the hand-over's lease: they are what tells an
    -- unused hand-over from one taken up.
    if redis.call('pttl', waiters) < tonumber(lease) then
      redis.call('pexpire', waiters, lease)
    end
    redis.call(publish, channel, string.format('grant %d %s %s', next_token, lease, head))
    return 1
  end
  redis.pcall('hdel', waiters, head)
  head = queue_head()
end

redis.call(publish, channel, 'unlock')
return 1
