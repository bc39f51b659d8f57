-- shares_acquire.lua: take a share (a read, a write, permits) for one owner, or re-enter a
-- read or write it holds; or queue the owner for it. shares.lua comes first: see it for
-- KEYS[1] (and the keys made from it), ARGV[1..3], the terms, the grant rule and the tokens.
--
-- ARGV[4]  owner id        a thread's ("<client>:<n>" writes, "<client>:<n>:r" reads) or an
--                          acquisition's ("<client>:p<n>", permits)
-- ARGV[5]  holds           how many holds the caller has (0 = a first acquisition)
-- ARGV[6]  lease           milliseconds
-- ARGV[7]  need            "r" / "w" (read-write lock) or the number of permits
-- ARGV[8]  token           the fencing token of the caller's hold (when holds > 0)
-- ARGV[9]  queue for       ms the caller will wait if it must (0: don't queue)
-- ARGV[10] queued          "1" if an earlier attempt of this wait may have queued it
-- ARGV[11] hand-over lease ms the share is granted for, if granted to the caller
-- ARGV[12] writer of       a read's thread's write owner, sent while the thread holds the
--                          write: a thread that writes may read
-- Arguments after the seventh may be left off the end when they are what nothing says: "0"
-- (ARGV[8], [9], [10]), the lease (ARGV[11]) and "" (ARGV[12]); an attempt that does not
-- queue sends seven.
--
-- Replies, as acquire.lua's:
--   token               acquired by the usual case below (the token as text, not an array)
--   { 1, token }        acquired (a re-entry keeps its token; taking up a grant the grant's)
--   { 0, ttl, fence }   not now: ttl bounds how long to sleep (the earliest holder's lease
--                       end), fence is the counter now (a grant that comes later for a write
--                       or permits has a larger token). With ARGV[9] > 0 the caller is queued.
--   {-1, 0 }            the caller believed it held a share (holds > 0) but it is gone
-- Errors: "WRONGTYPE <role>" for foreign data (nothing written); Redis's own when it refuses
-- a write (READONLY, OOM).
--
-- Idempotent as acquire.lua: the count is *set*; a first acquisition that finds the
-- caller's field already there takes it up (a grant of this wait keeps its token, anything
-- else a write or permits get a new one); queueing only extends expiries.
-- Who goes first: waiters that fit are admitted before the caller (the grant rule), and the
-- caller takes its share only if nobody is left waiting ahead of it and it fits. A thread's
-- read while it writes is the exception: it never waits.
-- At maxmemory the first write that needs memory is refused, as a lock's attempt is.

-- The usual cases first, before shares.lua's helpers are made (each costs Redis a function
-- made on every run): a first acquisition (or a later attempt of a wait nobody granted) that
-- either takes its share at once, nobody being queued, or queues behind live holders. Both
-- hold only when nothing would be different had the general way run: every lease is live (a
-- purge would drop nothing), nobody the grant rule would admit is queued (grant_waiters would
-- admit nobody: the queue's head, if any, is a waiter, the caller included, whose terms live
-- and whose need does not fit), and the caller holds nothing (no grant to take up).
-- Every key is read before the first write, with pcalls, and anything unexpected goes the
-- general way below, which names foreign data. An object nobody holds or waits for has no
-- holders, leases or queue (one EXISTS), so none of them can hold foreign data. Otherwise: the
-- holders (a hash with an expiry, without the caller's field; a semaphore's values, every one
-- "<count> <token>", summed to the permits used, which are the leases' members' while every
-- lease lives; a read-write lock's "writer"), a semaphore's total, the earliest lease, the
-- head's terms, and the counter (by the write that moves it, or for a read, before).
-- The first write needs memory: the counter's, the holders' (a read that keeps the counter as
-- it is), or the caller's terms. Refused at maxmemory (or by another type), it has written
-- nothing, and the general way says why.
-- Cost: a free object's cycle makes no function and eight calls, a busy attempt eight reads
-- and to queue four or six writes, where the general way made about 25 calls (and one HGET
-- per holder for a semaphore). Callgrind, redis-server 7.0.15: a busy semaphore's attempt
-- that does not queue went from 237,000 instructions to 109,000 (a lock's: 57,000).
-- A semaphore's values are still read on every attempt beside holders (HVALS), about 6,000
-- instructions a holder (with its release's share): a running count in the hash would end
-- that, but a field that clients of an earlier version neither keep nor skip could let them
-- admit more permits than the total while both run.
local held_by, leased = KEYS[1], KEYS[1] .. ':leases'
local present = ARGV[5] == '0' and redis.call('exists', held_by, leased, held_by .. ':queue')
if present then
  local rw, owner, need, lease = ARGV[1] == 'rw', ARGV[4], ARGV[7], ARGV[6]
  -- Each tonumber costs Redis a strtod (about 600 instructions): made once.
  local lease_ms, permits = tonumber(lease), not rw and tonumber(need)
  -- What others hold: the holders' TTL (the latest lease), the permits used, the writer.
  local sane, ttl, used, writer = true, 0, 0, nil
  if present > 0 then
    -- PTTL answers for a key of any type: -2 absent, -1 no expiry (not ours).
    ttl = redis.call('pttl', held_by)
    if rw then
      local f = ttl > 0 and redis.pcall('hmget', held_by, 'writer', owner)
      sane = f and not f.err and not f[2]
      writer = sane and f[1] or nil
    else
      -- The caller's own field, then the counts alone (HVALS: half HGETALL's reply).
      local own = ttl > 0 and redis.pcall('hexists', held_by, owner)
      local counts = own == 0 and redis.pcall('hvals', held_by)
      sane = counts and not counts.err
      for i = 1, sane and #counts or 0 do
        local count = string.match(counts[i], '^(%d+) %d+$')
        if not count then
          sane = false
        else
          used = used + tonumber(count)
        end
      end
    end
    -- A thread's read beside its own write never waits: the general way takes it.
    sane = sane and not (writer and writer == ARGV[12])
  end
  -- A semaphore's total (none: 0), judged as the general way's total() judges it. A request
  -- above it waits aside: the general way.
  local total
  if sane and not rw then
    local text = redis.pcall('get', held_by .. ':permits')
    -- Digits only (one string.match on a total that is set; see shares.lua's total()):
    -- anything else takes the general way, which refuses it.
    total = type(text) ~= 'table' and (not text or string.match(text, '^%d+$') ~= nil)
      and tonumber(text or '0')
    sane = total and total <= 4294967295 and permits <= total
  end
  -- Every lease live, and the queue's head.
  local earliest, head
  if sane and present > 0 then
    earliest = redis.pcall('zrange', leased, 0, 0, 'WITHSCORES')
    sane = not earliest.err and earliest[2] ~= nil
  end
  local time = sane and redis.call('time')
  local now = time and tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  if sane and present > 0 then
    head = tonumber(earliest[2]) > now and redis.pcall('zrange', held_by .. ':queue', 0, 0)
    sane = head and not head.err
  end
  local fits, blocked = false, false
  if sane then
    if rw then
      fits = present == 0 or (need == 'r' and not writer)
    else
      fits = used + permits <= total
    end
  end
  if sane and head and head[1] then
    -- The head's terms. The caller may be the head (a later attempt of its wait): its own
    -- terms must still live and not fit, as another head's.
    local terms = redis.pcall('hget', held_by .. ':waiters', head[1])
    local until_ms, head_need
    if type(terms) == 'string' then
      until_ms, head_need = string.match(terms, '^(%d+) %d+ (%w+)$')
    end
    if rw then
      blocked = head_need == 'w' or (head_need == 'r' and writer ~= nil)
    elseif head_need and string.match(head_need, '^%d+$') then
      local n = tonumber(head_need)
      blocked = n <= total and used + n > total
    end
    sane = blocked and tonumber(until_ms) > now
  end

  -- A later attempt of a wait takes a share beside others the general way, which also takes
  -- it out of the queue.
  if sane and fits and not blocked and (present == 0 or ARGV[10] ~= '1') then
    -- Taken. The token: a read takes the counter as it is; a write or permits the next one.
    -- Numbers go to Redis as text made here with %d: a Lua number passed as it is costs a
    -- floating-point conversion, and ARGV's text none.
    local counter_key = held_by .. ':fence'
    local life_ms = lease_ms + tonumber(ARGV[3])
    local counter_life = string.format('%d', life_ms)
    local token, kept
    if rw and need == 'r' then
      local counter = redis.pcall('get', counter_key)
      if type(counter) == 'table' or (counter and not string.match(counter, '^%d+$')) then
        sane = false
      elseif counter then
        token, kept = counter, true -- kept alive below, after the first write
      end
    end
    if sane and not token then
      -- As acquire.lua's next_token: one SET ... GET reads the counter, writes the clock (µs)
      -- and sets its life; a key of another type refuses it without writing, and a string
      -- that is not a counter is put back (its expiry is lost: kept, never deleted) for the
      -- general way below to name. Above the last, at least the clock.
      local clock = time[1] .. string.sub('00000' .. time[2], -6)
      local old = redis.pcall('set', counter_key, clock, 'PX', counter_life, 'GET')
      if type(old) == 'table' then
        sane = false
      elseif old and not (string.match(old, '^%d+$') and (#old < 16
          or (#old == 16 and old <= '9007199254740991') or tonumber(old) <= 9007199254740991)) then
        redis.call('set', counter_key, old)
        sane = false
      elseif old and not (#old < #clock or (#old == #clock and old < clock))
        and tonumber(old) >= tonumber(clock) then
        -- (Compared as text first, as acquire.lua's next_token: the usual older counter
        -- costs no number's conversion.)
        token = string.format('%d', tonumber(old) + 1)
        redis.call('set', counter_key, token, 'KEEPTTL')
      else
        token = clock
      end
    end
    if sane then
      if rw and need == 'w' then
        redis.call('hset', held_by, owner, '1 ' .. token, 'writer', owner)
      else
        redis.call('hset', held_by, owner, (rw and '1' or need) .. ' ' .. token)
      end
      -- A read keeps the counter alive. Not before the HSET: a PEXPIRE is no write Redis
      -- refuses at maxmemory, and once a script has written, Redis refuses none of its writes.
      if kept and redis.call('pttl', counter_key) < life_ms then
        redis.call('pexpire', counter_key, counter_life)
      end
      if rw and need == 'r' then
        -- A thread's read owner outlives its waits, and a read takes the counter as it stands:
        -- terms an earlier wait left ("granted <this token>", if its grant went unused and
        -- expired) would let a late give-back of that grant release this read. They go, as
        -- the general way's leave_queue has them go. A key of another type is left as it is.
        redis.pcall('hdel', held_by .. ':waiters', owner)
      end
      redis.call('zadd', leased, string.format('%d', now + lease_ms), owner)
      -- Holders and leases live as long as the latest lease.
      if lease_ms > ttl then
        redis.call('pexpire', held_by, lease)
        redis.call('pexpire', leased, lease)
      end
      return token -- as acquire.lua answers: an array costs Redis a conversion of its own
    end
  end

  local settled = sane and present > 0 and (blocked or not fits)
  local fence = settled and redis.pcall('get', held_by .. ':fence')
  if settled and (fence == false or (type(fence) == 'string' and string.match(fence, '^%d+$')
    and (#fence < 16 or (#fence == 16 and fence <= '9007199254740991')
        or tonumber(fence) <= 9007199254740991))) then
    local queue_for, queued = ARGV[9] or '0', true
    if queue_for ~= '0' then
      local queue, waiters = held_by .. ':queue', held_by .. ':waiters'
      local wait_ms, handover_lease = tonumber(queue_for), ARGV[11] or ARGV[6]
      local terms = string.format('%d %s %s', now + wait_ms, handover_lease, need)
      queued = type(redis.pcall('hset', waiters, owner, terms)) == 'number'
      if queued then
        redis.call('zadd', queue, 'NX', time[1] .. string.sub('00000' .. time[2], -6), owner)
        -- A queue that was empty is new, with no expiry yet: no need to look.
        if not head[1] or redis.call('pttl', queue) < wait_ms then
          redis.call('pexpire', queue, queue_for)
        end
        -- The terms' key outlives the wait by the hand-over's lease, as the general way's.
        local terms_for = wait_ms + tonumber(handover_lease)
        if redis.call('pttl', waiters) < terms_for then
          redis.call('pexpire', waiters, string.format('%d', terms_for))
        end
      end
    end
    if queued then
      return {0, math.max(1, tonumber(earliest[2]) - now), tonumber(fence or '0')}
    end
  end
end

-- shares.lua goes here

local owner, holds, lease, need = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local held_token, queue_for = ARGV[8] or '0', tonumber(ARGV[9] or '0')
local queued, handover_lease = ARGV[10] == '1', ARGV[11] or ARGV[6]
local writer_of = ARGV[12] or ''

-- A lease is only ever extended by an acquisition.
local function extend(who, ms)
  local score = tonumber(redis.call('zscore', leases, who) or '0')
  if now + ms > score then
    redis.call('zadd', leases, now + ms, who)
  end
end

check_types()
purge()

if holds > 0 then
  local count, token = holding(owner)
  if not count or token ~= held_token then
    return {-1, 0}
  end
  redis.call('hset', H, owner, string.format('%d %s', holds + 1, token))
  extend(owner, lease)
  fix_expiry()
  return {1, tonumber(token)}
end

-- Our field without a hold of ours: a grant (its message may be lost), or an attempt of
-- ours whose reply was lost. Take it up.
local function take_up()
  local count, token = holding(owner)
  if not count then
    return nil
  end
  local granted = redis.call('hget', waiters, owner) == 'granted ' .. token
  if not (need == 'r' or (queued and granted)) then
    token = next_token(lease) -- never hand a write's or permits' token out twice
  end
  leave_queue(owner)
  redis.call('hset', H, owner, (rw and '1' or need) .. ' ' .. token)
  extend(owner, lease)
  fix_expiry()
  return {1, tonumber(token)}
end

local taken = take_up()
if taken then
  return taken
end

-- Waiters that fit go first; then we may be one of them.
local blocked = grant_waiters()
taken = take_up()
if taken then
  return taken
end

local writing_thread = rw and need == 'r' and writer_of ~= '' and
  redis.call('hget', H, 'writer') == writer_of
local fit = fits(owner, need, writer_of)
if writing_thread or (fit == true and (not blocked or blocked == owner)) then
  local token = take(owner, need, lease)
  leave_queue(owner)
  fix_expiry()
  return {1, tonumber(token)}
end

if queue_for > 0 then
  -- Arrival: the clock this run read first (shares.lua), not a second TIME.
  redis.call('zadd', queue, 'NX', clock[1] * 1000000 + clock[2], owner)
  redis.call('hset', waiters, owner, string.format('%d %s %s', now + queue_for, handover_lease, need))
  if redis.call('pttl', queue) < queue_for then
    redis.call('pexpire', queue, queue_for)
  end
  -- The terms' key outlives the wait by the hand-over's lease: a grant made before the
  -- terms run out makes them "granted", which must outlive the grant's lease (shares.lua).
  local terms_for = queue_for + tonumber(handover_lease)
  if redis.call('pttl', waiters) < terms_for then
    redis.call('pexpire', waiters, terms_for)
  end
end
fix_expiry()
local earliest = redis.call('zrange', leases, 0, 0, 'WITHSCORES')
-- Nobody holds (a request above the total): only a change of the total helps, which
-- publishes; sleep as long as the caller lets (it bounds this by its watchdog timeout).
local ttl = earliest[2] and math.max(1, tonumber(earliest[2]) - now) or 3600000
return {0, ttl, tonumber(redis.call('get', fence) or '0')}
