-- release.lua: give back one hold; the last one hands the lock to the first live waiter in
-- the queue, or deletes it and wakes a waiter.
--
-- KEYS[1]  the lock hash     <prefix>:{<name>}
-- KEYS[2]  the fence         <prefix>:{<name>}:fence
-- KEYS[3]  the wait queue    <prefix>:{<name>}:queue
-- KEYS[4]  hand-over mark    <prefix>:{<name>}:granted   "<owner> <token>" of the latest
--                          hand-over, living its lease
-- KEYS[5]  the release latch <prefix>:{<name>}:released:<owner>:<token>   (passed only when
--                          ARGV[7] > 0, below: the usual release sends no key it does not use)
-- ARGV[1]  owner id
-- ARGV[2]  token             the fencing token of the hold being released
-- ARGV[3]  fence retention   ms the fencing counter outlives a hand-over's lease
-- ARGV[4]  held lease        ms: the longest lease the hold ever set, so no more of it was
--                          left (which waiters may be sleeping towards; see "Whom a
--                          hand-over wakes" below)
-- ARGV[5]  holds             how many holds the caller has before this release (>= 1, in
--                          decimal: the usual case tests for "1" as text)
-- ARGV[6]  a give-back?       "1": the hold is a hand-over nobody took up, given back. Act
--                          only while the mark still says "<owner> <token>" (taking it up,
--                          by an attempt or a withdrawal, deletes it; a thread that took it
--                          from the message holds it and never gives it back). "0": a hold
--                          taken by an attempt, or from a hand-over's message
-- ARGV[7]  latch ttl         ms a latch records a final release; 0 = write none (below)
-- ARGV[8]  publish command   PUBLISH (or SPUBLISH on a sharded cluster)
--                            by pcall: refused by an ACL, it fails nothing (see "No channel")
-- Arguments after the fourth may be left off the end when they are what nothing says: "1"
-- (ARGV[5]), "0" (ARGV[6], [7]) and PUBLISH (ARGV[8]); the usual release sends four. Each
-- costs Redis about 1,300 instructions (see acquire.lua).
--
-- Replies:
--   1  released: the lock went to the next waiter ("grant <token> <lease ms> <owner>"
--      published on its client's grant channel, or on the channel: below), or was deleted
--      ("unlock" published on the channel if anyone was queued)
--   2  still held: the caller's hold count is now holds - 1
--   3  gone, and nothing here says it went otherwise than by an earlier run of this
--      release: the lock has no field of the owner's, and the fence shows this token or a
--      later one (see "Idempotent" below); nothing was changed
--   0  not ours: nothing was changed
-- Errors: Redis's own when it refuses the first write (an intermediate release at maxmemory,
-- READONLY on a replica); nothing was changed then. A refused publish is none (see "No
-- channel" below).
--
-- The hold is ours only if the owner's field is there *and* the fence still shows the hold's
-- token: a release that timed out and reaches Redis late must not touch a newer hold.
--
-- Handing over inside the release is what makes a hand-off cheap and fair: the next holder
-- is the oldest waiter still waiting (its terms say until when), anywhere in the fleet; it
-- needs no attempt of its own, only the message; and nobody else is woken to race for it.
-- The waiter's terms come with its place in the queue (acquire.lua), so the ZPOPMIN that takes
-- it out of the line also says until when it waits and for what lease. The mark
-- "<owner> <token>" records the hand-over for as long as its lease, so that the new holder's
-- own later calls know the hold for a hand-over (acquire.lua, withdraw.lua); one key serves
-- every hand-over, since only the latest one's hold can still be there. A waiter whose
-- message is lost still finds the lock is its own at its next attempt.
--
-- Whom a hand-over wakes: only the new holder's client, on its grant channel
-- "<channel>:<client id>" (the owner id up to its first ':'), which that client's subscriber
-- listens to beside the channel. Waiters of other clients sleep on; each sleeps no later than
-- the lease it last heard of, which ended no later than the released hold's (ARGV[4] from
-- now), and the new hold lasts at least as long when its lease is no shorter: should the new
-- holder have died in the queue, they still wake by the time its lease runs out. A shorter
-- lease is published on the channel instead, and every waiter learns it. Publishing to one
-- client costs Redis one socket write and one woken thread per hand-off, however many clients
-- wait.
--
-- No channel: every publish of every script (both layouts) is a redis.pcall, whose refusal
-- is returned to the script, not raised (seen on redis-server 6.2.14 and 7.0.15 for an ACL
-- without the channel and one without PUBLISH). A user whose ACL refuses the channel still
-- releases: the lock is freed or handed over all the same and only the message is lost, as
-- a message may be anyway. The waiters (whose SUBSCRIBE that ACL refuses too) sleep no later
-- than the lease they last heard of: one handed the lock finds it its own then, the others
-- find it free. (A refused redis.call raised instead: the script ended there with its writes
-- kept, as Redis keeps them, and the caller got an error for a release that had been done.)
-- The pcall costs what the call did: under callgrind (redis-server 7.0.15, 6,000 EVALSHAs
-- of a script that only publishes) an EVALSHA costs about 10,400 instructions either way, the
-- difference below the noise (under 100). A refused one costs Redis its ACL LOG entry.
--
-- Idempotent, so a retry after a lost reply tells the owner the truth (Redisson issues #4871
-- and #6651). An intermediate release *sets* the count to holds - 1. A retry of the final
-- release finds the hold gone and answers 3 rather than 0 when what it sees is what that
-- release leaves: the fence at the hold's token (nobody took the lock since) or later (the
-- release handed it over, or others took it since). The caller decides (engine::release): 3
-- counts as released if an earlier attempt of the same call may have reached Redis, the
-- hold's lease had not run out when the call began, since then the hold cannot have expired,
-- and no force-unlock freed this token: the caller reads that mark (force_unlock.lua) itself,
-- in this rare case, rather than every release passing its key (each key costs Redis about
-- 1,300 instructions). A lock key deleted by hand in that window would be taken for the
-- release. So the uncontended release writes nothing but its HDEL. Where the
-- connection retries out of the caller's sight (a Cluster's), the caller cannot know of an
-- earlier attempt, and asks for a latch instead (ARGV[7] > 0): the final release records
-- itself in a short-lived key named after the hold's owner and token, and a retry that finds
-- it answers 1. The script is atomic, so that the latch is written after the lock is
-- deleted changes nothing a retry can see.
--
-- Frees first, at maxmemory too: a release is what gives memory back, so it must not be the
-- call a full server refuses. Redis checks memory for a script only at its first write that
-- may need memory (SET, HSET, INCR...), and only if nothing was written before it; a DEL,
-- HDEL or ZREM needs none. Seen on redis-server 7.0.15 with maxmemory below the memory used
-- and noeviction: a script whose first write is SET fails with OOM and changes nothing; one
-- that DELs first (even a key that does not exist) runs to the end, its SETs and HSETs
-- included. So the final release deletes the owner's field (and with it the lock) before it
-- writes anything else. Should the latch write be refused anyway (not for memory, after the
-- HDEL), the release goes on, wakes or hands over as usual and answers 1.
-- The intermediate release (holds > 1) frees nothing and is refused at maxmemory like any
-- write; the count left in Redis is then one too high, which the final release ignores.
-- Cost (instructions per cycle under callgrind, as acquire.lua's notes say): each
-- redis.call costs about as much as the script's dispatch: the free path makes three (GET,
-- HDEL, ZPOPMIN), a hand-over nine (GET, HDEL, ZPOPMIN, TIME, the mark's SET, the fence's SET,
-- HSET, PEXPIRE, PUBLISH).
-- Numbers: a Lua number passed to redis.call costs Redis 7.0 a "%.17g" conversion, about as
-- much as a cheap command, and string.format and tonumber as much: the hand-over makes its
-- token's text once and passes the lease as the member gave it; the fence's life, a sum of
-- the lease and the retention, is its one number.
-- Closures: a `local function` is made anew by every run that reaches it, and reading ARGV
-- into locals costs too. So the usual case (the last hold, nobody queued, no latch) returns
-- before any function is made: 4,400 instructions fewer than with the helpers and locals in
-- front.
-- Arguments: each key and argument costs about 1,300 instructions (acquire.lua), so the
-- usual release sends four keys and four arguments, the channel is made from the lock's
-- name when it is needed, and the forced mark is read by the caller when a hold is gone.

local lock, fence, queue, granted, latch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, token, latch_ttl = ARGV[1], ARGV[2], ARGV[7] or '0'

if ARGV[6] == '1' and redis.pcall('get', granted) ~= owner .. ' ' .. token then
  return 0
end

-- The hold is ours while the fence shows its token. A final release (ARGV[5] "1") deletes
-- the owner's field with the HDEL, the script's first write and the check that the field is
-- there: from here on a server at maxmemory refuses nothing. The lock has no other field (a
-- lock has one owner), so it goes with it.
local fenced = redis.pcall('get', fence)
local released = fenced == token and (ARGV[5] or '1') == '1'
  and redis.pcall('hdel', lock, owner) == 1

-- The oldest place in the queue, if any (else nil), taken out of it: whether its owner is
-- handed the lock or the place is dropped as stale below, it is gone either way.
-- { member, arrival }. Popped inline, here and below, not by a function of the script's:
-- see "Closures" above.
local head
if released then
  head = redis.pcall('zpopmin', queue)
  head = type(head) == 'table' and head[1] and head or nil
  if not head and latch_ttl == '0' then
    -- The usual case, done before anything else is made (see "Closures" above). Nobody
    -- waits: a waiter queues in the attempt that finds the lock busy, before it sleeps.
    return 1
  end
end

local holds = tonumber(ARGV[5] or '1')

-- The reply when the hold is not in Redis. A key of another type is not ours either.
local function gone()
  if holds > 1 then
    return 0
  end
  if latch_ttl ~= '0' and redis.call('exists', latch) == 1 then
    return 1
  end
  local now_fenced = tonumber(fenced)
  if now_fenced and now_fenced >= tonumber(token) then
    return 3
  end
  return 0
end

if not released then
  if fenced ~= token or holds <= 1 then
    return gone() -- for a final release, the HDEL found no field of the owner's
  end
  if redis.pcall('hexists', lock, owner) ~= 1 then
    return 0
  end
  redis.call('hset', lock, owner, holds - 1)
  return 2
end

local publish = ARGV[8] or 'publish'
-- The channel, <prefix>:{<name>}:unlocked (keys.rs), made here rather than passed: a channel
-- is no key (Redis routes the call by KEYS; on a Cluster its name has the lock's hash tag),
-- and only a release that has waiters publishes, while every release would pay for its
-- argument (about 1,300 of Redis's instructions, see acquire.lua).
local channel = lock .. ':unlocked'

if latch_ttl ~= '0' then
  -- A pcall: the lock is already free, and a refused latch must not stop the wake-up below.
  redis.pcall('set', latch, '1', 'px', latch_ttl)
end
if not head then
  return 1
end

-- The oldest waiter whose place has not run out gets the lock. Stale places (a waiter that
-- gave up without withdrawing, or died, or the releasing owner's own place left from an
-- earlier wait that failed) are dropped on the way; a bounded number per release.
local t = redis.call('time')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
for _ = 1, 64 do
  if not head then
    break
  end
  local who, lease, valid_for = string.match(head[1], '^(.+) (%d+) (%d+)$')
  local valid_until = who and math.floor(tonumber(head[2]) / 1000) + tonumber(valid_for)
  if who and who ~= owner and valid_until > now then
    -- Text made once (see "Numbers" above).
    local next_token = string.format('%d', tonumber(token) + 1)
    -- The mark first: it is the one write that can meet data not ours (SET ... GET refuses
    -- another type without writing; a foreign string is put back). Then nobody is handed
    -- the lock, the waiter keeps its place, and a wake-up lets the waiters take it.
    local old = redis.pcall('set', granted, who .. ' ' .. next_token, 'PX', lease, 'GET')
    if type(old) == 'table' or (old and not string.match(old, '^[^ ]+ %d+$')) then
      if type(old) == 'string' then
        redis.call('set', granted, old)
      end
      -- Back in its place; the ZPOPMIN may have deleted the queue (and its expiry) with it.
      redis.pcall('zadd', queue, head[2], head[1])
      if redis.call('pttl', queue) < valid_until - now then
        redis.call('pexpire', queue, valid_until - now)
      end
      break
    end
    -- The fence shows the released hold's token (checked above): one SET moves it on and
    -- sets its life.
    redis.call('set', fence, next_token, 'PX', tonumber(lease) + tonumber(ARGV[3]))
    redis.call('hset', lock, who, '1')
    redis.call('pexpire', lock, lease)
    local to = channel
    if tonumber(lease) >= tonumber(ARGV[4]) then
      to = channel .. ':' .. string.match(who, '^[^:]*')
    end
    redis.pcall(publish, to, 'grant ' .. next_token .. ' ' .. lease .. ' ' .. who)
    return 1
  end
  head = redis.pcall('zpopmin', queue)
  head = type(head) == 'table' and head[1] and head or nil
end

redis.pcall(publish, channel, 'unlock')
return 1
