-- redisson/semaphore_renew.lua: the watchdog for permits of semaphores in Redisson's layout;
-- move the lease end of many acquisitions' permit ids in one call (Java's updateLeaseTime:
-- Redisson's format, ZADD of an id already held).
--
-- KEYS[i]     the permits held of acquisition i's semaphore    {<name>}:timeout
-- ARGV[1]     the new lease end   epoch ms by this client's clock (now + lease)
-- ARGV[2]     now                 epoch ms by this client's clock
-- then, for each acquisition i in turn: how many ids it has (c), then its c ids (16 raw bytes)
--
-- Reply: one entry per acquisition: 1 = still ours (every id held, with a lease not yet
-- ended: each now ends at ARGV[1] or later), 0 = no longer ours (nothing changed for it).
--
-- A lease is only extended. Nothing is reclaimed here (Java's reclaims first; our next
-- acquisition or availability check will). A key of another type counts as 0 rather than
-- failing the whole batch.

local ends, now = tonumber(ARGV[1]), tonumber(ARGV[2])
local result = {}
local at = 3
for i = 1, #KEYS do
  local held = KEYS[i]
  local first, last = at + 1, at + tonumber(ARGV[at])
  at = last + 1
  result[i] = 1
  for j = first, last do
    local score = redis.pcall('zscore', held, ARGV[j])
    if type(score) ~= 'string' or tonumber(score) <= now then
      result[i] = 0
      break
    end
  end
  if result[i] == 1 then
    for j = first, last do
      if tonumber(redis.call('zscore', held, ARGV[j])) < ends then
        redis.call('zadd', held, 'xx', ends, ARGV[j])
      end
    end
  end
end
return result
