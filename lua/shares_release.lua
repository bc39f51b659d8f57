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
-- The usual hand-over below writes the head's token first instead: refused, it has written
-- nothing, and the general way frees first.
-- A key of another type answers 0 ("not ours") and is left alone.
-- Grants are published by pcall: refused by an ACL, they fail nothing (see release.lua).

-- The usual cases first, before shares.lua's helpers are made: the last hold of an owner,
-- taken by an attempt of its own or from a grant's message, when it is the only holder and
-- nobody is queued (the object is freed), or the only holder and the queue's live head takes
-- all of it (a writer; permits as many as the total: the object is handed to it), or one of
-- several holders and nobody is queued (its share goes; the others keep theirs). Every key is
-- read before any write, with pcalls, and anything unexpected, foreign data included, takes
-- the general way below.
-- The holders hash is read whole (one HGETALL): the owner's field with the hold's token, and
-- whether anyone else holds ("writer" naming the owner is its own). Its reply grows with the
-- holders (about 2,500 instructions each); HRANDFIELD ... 3 WITHVALUES would bound it, but
-- cost the usual cycle of every kind a tenth more server time (INFO commandstats, same
-- runs). When nobody is queued the only holder's lease needs no look of its own: the hash
-- lives as long as its latest lease, and any acquisition drops a holder whose lease ended,
-- so a field still there is a hold nobody has taken over. Then the owner's lease goes (ZREM,
-- a pcall: a leases key of another type fails it, nothing is written, and the general way
-- answers) and the holders (deletions: a server at maxmemory lets them through). Every case
-- ends alike: a grant's own "granted" terms go, and the latch is left if asked for.
local mode = ARGV[8] or '0'
if ARGV[5] == '1' and mode ~= '1' then
  local H, owner, token = KEYS[1], ARGV[4], ARGV[6]
  local fields = redis.pcall('hgetall', H)
  local held, writer
  for i = 1, fields.err and 0 or #fields, 2 do
    if fields[i] == owner then
      held = fields[i + 1]
    elseif fields[i] == 'writer' then
      writer = fields[i + 1]
    end
  end
  local mine = held and string.match(held, '^%d+ (%d+)$') == token
  local alone = mine and (#fields == 2 or (#fields == 4 and writer == owner))
  local queue, leases = H .. ':queue', H .. ':leases'
  local nobody_queued = mine and redis.call('exists', queue) == 0
  -- Set by whichever case below gave the hold back; they end alike (after the last case).
  local released = false

  if alone and nobody_queued then
    released = type(redis.pcall('zrem', leases, owner)) == 'number'
    if released then
      redis.call('del', H)
    end

  -- Beside other holders, with nobody queued: nobody to admit. Others may outlive this hold,
  -- so its lease is looked at (a hold whose lease ended is not ours to release). The fields
  -- go first (deletions, let through at maxmemory), then the holders and the leases live as
  -- long as the latest lease left. A holder whose lease ended stays for the next
  -- acquisition's purge, as the general way's purge would have dropped it.
  elseif mine and nobody_queued then
    local ends = redis.pcall('zscore', leases, owner)
    local time = type(ends) == 'string' and redis.call('time')
    local now = time and tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    released = now and tonumber(ends) > now
    if released then
      if writer == owner then
        redis.call('hdel', H, owner, 'writer') -- a write released while its thread reads
      else
        redis.call('hdel', H, owner)
      end
      redis.call('zrem', leases, owner)
      local last = redis.call('zrange', leases, -1, -1, 'WITHSCORES')
      if #last == 0 then
        redis.call('del', H, leases) -- the others had no lease: not holds any more
      elseif tonumber(last[2]) < tonumber(ends) then
        local ttl = string.format('%d', math.max(1, tonumber(last[2]) - now))
        redis.call('pexpire', H, ttl)
        redis.call('pexpire', leases, ttl)
      end
    end

  -- A hand-over: the head's terms "<valid until, ms> <hand-over lease, ms> <need>", still
  -- valid, and a need that leaves nothing for whoever queued behind it, so that the grant
  -- rule admits it alone; and the released hold's lease, for whom the grant wakes
  -- (shares.lua's grant_waiters).
  elseif alone then
    local head = redis.pcall('zrange', queue, 0, 0)
    head = not head.err and head[1] ~= owner and head[1]
    local waiters = H .. ':waiters'
    local terms = head and redis.pcall('hget', waiters, head)
    local until_ms, lease, need
    if type(terms) == 'string' then
      until_ms, lease, need = string.match(terms, '^(%d+) (%d+) (%w+)$')
    end
    local takes_all = need == 'w'
    if need and ARGV[1] ~= 'rw' then
      local total = redis.pcall('get', H .. ':permits')
      takes_all = type(total) == 'string' and total == need
    end
    local released_end = takes_all and redis.pcall('zscore', leases, owner)
    local time = type(released_end) == 'string' and redis.call('time')
    local now = time and tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    if now and tonumber(until_ms) > now and tonumber(released_end) > now then
      -- The head's token, as acquire.lua's next_token (one SET ... GET), first of the writes:
      -- refused (maxmemory) it leaves nothing written, and the general way says why.
      local fence = H .. ':fence'
      local clock = time[1] .. string.sub('00000' .. time[2], -6)
      local life = string.format('%d', tonumber(lease) + tonumber(ARGV[3]))
      local old = redis.pcall('set', fence, clock, 'PX', life, 'GET')
      local next_token = clock
      if type(old) == 'table' then
        next_token = nil
      elseif old and not (string.match(old, '^%d+$') and (#old < 16
          or (#old == 16 and old <= '9007199254740991') or tonumber(old) <= 9007199254740991)) then
        redis.call('set', fence, old) -- not a counter: put back, for the general way to name
        next_token = nil
      elseif old and not (#old < #clock or (#old == #clock and old < clock))
        and tonumber(old) >= tonumber(clock) then -- text first, as acquire.lua's next_token
        next_token = string.format('%d', tonumber(old) + 1)
        redis.call('set', fence, next_token, 'KEEPTTL')
      end
      released = next_token ~= nil
      if released then
        redis.call('hdel', H, owner)
        if need == 'w' then
          redis.call('hset', H, head, '1 ' .. next_token, 'writer', head)
        else
          redis.call('hset', H, head, need .. ' ' .. next_token)
        end
        redis.call('zrem', leases, owner)
        redis.call('zadd', leases, string.format('%d', now + tonumber(lease)), head)
        redis.call('zrem', queue, head)
        redis.call('hset', waiters, head, 'granted ' .. next_token)
        -- The sole holder's lease is the latest: the keys live as long.
        redis.call('pexpire', H, lease)
        redis.call('pexpire', leases, lease)
        local channel = H .. ':unlocked'
        if now + tonumber(lease) >= tonumber(released_end) then
          channel = channel .. ':' .. string.match(head, '^[^:]*')
        end
        redis.pcall(ARGV[2], channel, 'grant ' .. next_token .. ' ' .. lease .. ' ' .. head)
      end
    end
  end

  if released then
    if mode == '2' then
      redis.pcall('hdel', H .. ':waiters', owner) -- its "granted" terms
    end
    if ARGV[7] ~= '0' then
      redis.pcall('set', H .. ':released:' .. owner .. ':' .. token, '1', 'px', ARGV[7])
    end
    return 1
  end
end

-- shares.lua goes here

local owner, holds, token = ARGV[4], tonumber(ARGV[5]), ARGV[6]
local latch = H .. ':released:' .. owner .. ':' .. token
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
