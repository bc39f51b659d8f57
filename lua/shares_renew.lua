-- shares_renew.lua: the watchdog for shares (read-write locks, semaphores); extend the lease
-- of many holds in one call.
--
-- KEYS[2i-1]  holders i       <prefix>:{<name>}:<kind>          hash: owner -> "<count> <token>"
-- KEYS[2i]    its leases      <prefix>:{<name>}:<kind>:leases   zset: owner -> lease end (ms)
-- ARGV[1]     lease           milliseconds
-- ARGV[2i]    owner id of hold i
-- ARGV[2i+1]  fencing token of hold i
--
-- Reply: an array with one entry per hold: 1 = still ours, 0 = no longer ours.
--
-- A hold is ours only if its field carries its token and its own lease has not ended: a hold
-- whose lease ended is lost even while nobody has purged it yet (the next acquisition will).
-- A lease is only ever extended; the holders and leases keys live as long as the latest
-- lease. A key of another type counts as 0.

local lease = tonumber(ARGV[1])
local clock = redis.call('time')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local result = {}
for i = 1, #KEYS / 2 do
  local holders, leases = KEYS[2 * i - 1], KEYS[2 * i]
  local owner, token = ARGV[2 * i], ARGV[2 * i + 1]
  result[i] = 0
  local v = redis.pcall('hget', holders, owner)
  local score = redis.pcall('zscore', leases, owner)
  if type(v) == 'string' and type(score) == 'string' and tonumber(score) > now
     and string.match(v, '^%d+ (%d+)$') == token then
    if now + lease > tonumber(score) then
      redis.call('zadd', leases, now + lease, owner)
    end
    for _, key in ipairs({holders, leases}) do
      if redis.call('pttl', key) < lease then
        redis.call('pexpire', key, lease)
      end
    end
    result[i] = 1
  end
end
return result
