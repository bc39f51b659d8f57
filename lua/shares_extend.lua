-- shares_extend.lua: give one hold of a kind with shares (a read or a write of a read-write
-- lock, an acquisition's permits) a new lease, from now (WriteGuard::extend,
-- ReadGuard::extend, Permits::extend). The lease is set, not added to, so it may shorten it.
--
-- KEYS[1]  the holders   <prefix>:{<name>}:<kind>          hash: owner -> "<count> <token>"
-- KEYS[2]  their leases  <prefix>:{<name>}:<kind>:leases   zset: owner -> lease end (ms)
-- ARGV[1]  lease         ms from now (the server's clock)
-- ARGV[2]  owner id      whose hold it is
-- ARGV[3]  fencing token of that hold
--
-- Reply: 1 = still ours, its lease now ends ARGV[1] ms from now; 0 = no longer ours, nothing
-- written: a hold is never revived.
--
-- Ours only as shares_renew.lua has it: the field carries the hold's token and its own lease
-- has not ended (a hold whose lease ended is lost even while nobody has purged it yet). The
-- holders and leases keys live as long as the latest lease of anyone's, so they are only
-- ever extended. A key of another type counts as not ours.
-- Idempotent under retry: a retry sets the same lease again, from a moment later.

local holders, leases = KEYS[1], KEYS[2]
local lease, owner, token = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local clock = redis.call('time')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local v = redis.pcall('hget', holders, owner)
local score = redis.pcall('zscore', leases, owner)
if type(v) ~= 'string' or type(score) ~= 'string' or tonumber(score) <= now
    or string.match(v, '^%d+ (%d+)$') ~= token then
  return 0
end
redis.call('zadd', leases, 'xx', string.format('%d', now + lease), owner)
for _, key in ipairs({holders, leases}) do
  if redis.call('pttl', key) < lease then
    redis.call('pexpire', key, lease)
  end
end
return 1
