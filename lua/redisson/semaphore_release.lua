-- redisson/semaphore_release.lua: give back the permits of one acquisition of a semaphore in
-- Redisson's layout (Java's tryRelease, Redisson's format). redisson/semaphore.lua
-- comes first: see it for KEYS[1..3].
--
-- ARGV[1]  publish command    PUBLISH or SPUBLISH
--                             by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
-- ARGV[2..] the permit ids    16 raw bytes each
--
-- Replies (as redisson/release.lua's):
--   1  released: every id was held; all given back
--   3  gone: none of them was held, or not all (their lease ended and a reclaim gave them
--      back, or an earlier run of this call did and its reply was lost); those still held
--      are given back all the same
-- Errors: "WRONGTYPE lock", "WRONGTYPE leases"; nothing was written.
--
-- The count goes up by the ids removed, and the new count is published, as Java's release
-- of one permit does (Java's release of several ids publishes how many; the count wakes
-- Java's waiters at least as well). Unlike Java, a count of 0 or below is not published:
-- it wakes nobody, and a negative one makes Java's listener throw.
-- Idempotent: an id is removed once; a retry finds none.

local wrong = foreign()
if wrong then
  return redis.error_reply('WRONGTYPE ' .. wrong)
end
local removed = 0
for i = 2, #ARGV do
  removed = removed + redis.call('zrem', held, ARGV[i])
end
if removed == 0 then
  return 3
end
local free = redis.call('incrby', sem, removed)
if free > 0 then
  redis.pcall(ARGV[1], channel, free)
end
return removed == #ARGV - 1 and 1 or 3
