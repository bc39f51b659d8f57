-- shares_release.lua: give back one hold of a share; the last one frees it and admits the
-- waiters that now fit. shares.lua comes first: see it for KEYS[1] (and the keys made from
-- it), ARGV[1..3] and the grant rule. The release latch is made from KEYS[1] too:
-- <KEYS[1]>:released:<owner>:<token>.
-- ARGV[4]  owner id
-- ARGV[5]  holds             how many holds the caller has before this release (>= 1)
-- ARGV[6]  token             the fencing token of the hold being released
-- ARGV[7]  latch ttl         milliseconds the latch outlives a final release; "0" leaves
--                            none (the caller's connection never retries out of its sight)
-- ARGV[8]  how the hold was taken, as release.lua's ARGV[6]: "0" (or absent, as an attempt
--          sends it) by an attempt of its own,
--          "1" not at all (an unused grant, given back: act only while the owner's terms
--          still say "granted <token>"), "2" from a grant's message (terms still there)
--
-- Replies: 1 released (the waiters that now fit were granted: one message per client, or
-- one on the channel; see grant_waiters), 2 still held
-- (the count is now holds - 1), 0 not ours (nothing changed), 3 gone without a latch to
-- say why, as release.lua's: a final release found no field of the owner's, and the counter
-- stands at the hold's token or above (the caller's earlier attempt, whose reply was lost,
-- may have released it: the caller knows whether there was one).
--
-- The hold is ours only if the owner's field carries the hold's token and its lease has not
-- ended: a release that reaches Redis late must not touch a newer hold.
-- Idempotent as release.lua: an intermediate release *sets* the count; the final one leaves
-- a short-lived latch where the caller asks for one (ARGV[7]), and a retry that finds it
-- answers 1 instead of "not ours"; without one, a retry answers 3.
-- Frees first (HDEL), so that a server at maxmemory does not refuse it (see release.lua).
-- A key of another type answers 0 ("not ours") and is left alone.

-- The usual case first, before shares.lua's helpers are made: the last hold of the only
-- holder, taken by an attempt of its own, with nobody queued. The holders hash is read whole
-- (one HGETALL): the owner's field with the hold's token, and nothing else but, for a write,
-- "writer" naming it. Its lease needs no look of its own: the hash lives as long as its
-- latest lease, and any acquisition drops a holder whose lease ended, so a field still there
-- is a hold nobody has taken over. Then the holders and the leases go with one DEL (a
-- deletion: a server at maxmemory lets it through), and the latch is left if asked for.
-- Anything else,
-- foreign data included (a read that fails goes this way), takes the general way below.
if ARGV[5] == '1' and (ARGV[8] or '0') == '0' then
  local H, owner = KEYS[1], ARGV[4]
  local fields = redis.pcall('hgetall', H)
  local held, writer
  if not fields.err and (#fields == 2 or (#fields == 4 and ARGV[1] == 'rw')) then
    for i = 1, #fields, 2 do
      if fields[i] == owner then
        held = fields[i + 1]
      elseif fields[i] == 'writer' then
        writer = fields[i + 1]
      end
    end
  end
  local alone = held and (#fields == 2 or writer == owner)
  if alone and string.match(held, '^%d+ (%d+)$') == ARGV[6]
      and redis.call('exists', H .. ':queue') == 0 then
    redis.call('del', H, H .. ':leases')
    if ARGV[7] ~= '0' then
      redis.pcall('set', H .. ':released:' .. owner .. ':' .. ARGV[6], '1', 'px', ARGV[7])
    end
    return 1
  end
end

-- shares.lua goes here

local owner, holds, token = ARGV[4], tonumber(ARGV[5]), ARGV[6]
local latch = H .. ':released:' .. owner .. ':' .. token
local mode = ARGV[8] or '0'
local latch_ttl, unused_only, granted = ARGV[7], mode == '1', mode ~= '0'

local ok = pcall(check_types)
if not ok then
  return 0
end
if unused_only and redis.call('hget', waiters, owner) ~= 'granted ' .. token then
  return 0
end

local count, held = holding(owner)
local lease_end = tonumber(redis.call('zscore', leases, owner) or '0')
if not count or held ~= token or lease_end <= now then
  if holds > 1 then
    return 0
  end
  if latch_ttl ~= '0' and redis.call('exists', latch) == 1 then
    return 1
  end
  if not count and tonumber(redis.call('get', fence) or '0') >= tonumber(token) then
    return 3
  end
  return 0
end

if holds > 1 then
  redis.call('hset', H, owner, string.format('%d %s', holds - 1, token))
  return 2
end

-- The HDEL is the first write: from here on a server at maxmemory refuses nothing.
redis.call('hdel', H, owner)
redis.call('zrem', leases, owner)
if rw and redis.call('hget', H, 'writer') == owner then
  redis.call('hdel', H, 'writer')
end
if granted then
  redis.call('hdel', waiters, owner)
end
if latch_ttl ~= '0' then
  redis.pcall('set', latch, '1', 'px', latch_ttl)
end
purge()
grant_waiters(lease_end)
fix_expiry()
return 1
