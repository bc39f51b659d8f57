-- withdraw.lua: a waiter gives up its place in the queue; if the lock was handed to it and
-- not taken up yet, it takes it up instead. Runs with places.lua in front.
--
-- KEYS[1]  the lock hash     <prefix>:{<name>}
-- KEYS[2]  the fence         <prefix>:{<name>}:fence
-- KEYS[3]  the wait queue    <prefix>:{<name>}:queue
-- KEYS[4]  the hand-over mark <prefix>:{<name>}:granted   "<owner> <token>" (release.lua)
-- ARGV[1]  owner id
-- ARGV[2]  lease             milliseconds, if the lock turns out to be the caller's
-- ARGV[3]  fence retention   ms the fencing counter outlives the lease
-- ARGV[4]  place             the place the wait's last attempt named (acquire.lua):
--                            "<arrival µs> <valid ms>", or "" if it had none
-- ARGV[5]  hand-over lease   ms, as the wait's attempts passed it (part of the place's name)
--
-- Replies: { 1, token } the lock had been handed to the caller, which now holds it with the
-- hand-over's token and at least the given lease; { 0, 0 } it had not, and the caller is out
-- of the queue, so nothing will be handed to it any more.
--
-- Only a hand-over is taken up (the mark names the caller and the fence's token, and the
-- caller's field is there): a withdrawal that reaches Redis late must not touch a hold the
-- thread took since (taking a hold up deletes the mark; a new hold has a new token).
--
-- Under retry after a lost reply: the place is gone either way; if the lost call had taken a
-- hand-over up, the retry answers {0, 0} (the mark that told is gone), and that hold
-- expires with its lease.
-- Runs at maxmemory: it writes only ZREM, DEL and PEXPIRE, none of which needs memory, so
-- a full server (noeviction) does not refuse it (see release.lua). Keep it that way: a
-- write that may need memory would have to come after the ZREM.

local lock, fence, queue, granted = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, lease = ARGV[1], tonumber(ARGV[2])

-- The place by its member, or by its arrival should an attempt whose reply was lost have
-- moved its validity on (acquire.lua).
local arrival, valid = string.match(ARGV[4], '^(%d+) (%d+)$')
if arrival then
  remove_place(queue, owner, place_member(owner, ARGV[5], valid), arrival)
end
local mark = redis.pcall('get', granted)
local current = redis.pcall('get', fence)
if type(mark) ~= 'string' or type(current) ~= 'string' or mark ~= owner .. ' ' .. current
   or redis.pcall('hexists', lock, owner) ~= 1 then
  return {0, 0}
end
redis.call('del', granted)
if redis.call('pttl', lock) < lease then
  redis.call('pexpire', lock, lease)
  redis.call('pexpire', fence, lease + tonumber(ARGV[3]))
end
return {1, tonumber(current)}
