-- redisson/semaphore_extend.lua: give the permits of one acquisition of a semaphore in
-- Redisson's layout a new lease end (Permits::extend; Java's updateLeaseTime,
-- Redisson's format, for each of the acquisition's ids). redisson/semaphore.lua comes
-- first: see it for KEYS[1..3].
--
-- ARGV[1]  the new lease end  epoch ms by this client's clock (now + lease)
-- ARGV[2]  now                epoch ms by this client's clock
-- ARGV[3]  publish command    PUBLISH or SPUBLISH
-- ARGV[4..] the permit ids    16 raw bytes each
--
-- Reply: 1 = still ours: every id was held with a lease not yet ended, and each now ends at
-- ARGV[1] (set, not extended: it may come sooner than before); 0 = no longer ours: not every
-- id was held, and none was changed (a hold is never revived).
-- Errors: "WRONGTYPE lock", "WRONGTYPE leases"; nothing was written.
--
-- As Java's updateLeaseTime, permits whose lease ended are reclaimed first (and the count
-- published), so an acquisition of ours whose lease ended gives 0 as Java's gives for its.
-- Idempotent under retry: a retry sets the same lease again, from a moment later.

local wrong = foreign()
if wrong then
  return redis.error_reply('WRONGTYPE ' .. wrong)
end
reclaim(tonumber(ARGV[2]), nil, ARGV[3])
for i = 4, #ARGV do
  if not redis.call('zscore', held, ARGV[i]) then
    return 0
  end
end
for i = 4, #ARGV do
  redis.call('zadd', held, 'xx', ARGV[1], ARGV[i])
end
return 1
