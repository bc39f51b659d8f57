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
-- ARGV[12] writer of       a read's thread's write owner: a thread that writes may read
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

-- The usual case first, before shares.lua's helpers are made (each costs Redis a function
-- made on every run): a first acquisition of an object nobody holds or waits for. Its
-- holders, leases and queue are all absent (one EXISTS), so none of them can hold foreign
-- data; a semaphore's total is read before any write, and the counter by the write that
-- moves it (or, for a read, before), and anything unexpected there goes the general way
-- below, which names what is foreign. The first write is the counter's (or, for a read that
-- keeps the counter as it is, the holders'): refused at maxmemory, it leaves nothing written.
local held_by, leased = KEYS[1], KEYS[1] .. ':leases'
local present = ARGV[5] == '0' and redis.call('exists', held_by, leased, held_by .. ':queue')
if present == 0 then
  local counter_key = held_by .. ':fence'
  local rw, need, lease = ARGV[1] == 'rw', ARGV[7], ARGV[6]
  local fits = true
  if not rw then
    local permits = redis.pcall('get', held_by .. ':permits')
    local total = type(permits) ~= 'table' and tonumber(permits or '0')
    fits = total and tonumber(need) <= total
  end
  local token, time, counter_life
  if fits then
    -- Numbers go to Redis as text made here with %d: a Lua number passed as it is costs a
    -- floating-point conversion, and ARGV's text none.
    counter_life = string.format('%d', tonumber(lease) + tonumber(ARGV[3]))
    time = redis.call('time')
    if rw and need == 'r' then
      -- A read takes the counter as it is, and keeps it alive.
      local counter = redis.pcall('get', counter_key)
      if type(counter) == 'table' or (counter and not string.match(counter, '^%d+$')) then
        fits = false
      elseif counter then
        token = counter -- kept alive below, after the first write
      end
    end
    if fits and not token then
      -- The next token, as acquire.lua's next_token: one SET ... GET reads the counter,
      -- writes the clock (µs) and sets its life; a key of another type refuses it without
      -- writing, and a string that is not a counter is put back (its expiry is lost: kept,
      -- never deleted) for the general way below to name. Above the last, at least the clock.
      local clock = time[1] .. string.sub('00000' .. time[2], -6)
      local old = redis.pcall('set', counter_key, clock, 'PX', counter_life, 'GET')
      if type(old) == 'table' then
        fits = false
      elseif old and not string.match(old, '^%d+$') then
        redis.call('set', counter_key, old)
        fits = false
      elseif old and tonumber(old) >= tonumber(clock) then
        token = string.format('%d', tonumber(old) + 1)
        redis.call('set', counter_key, token, 'KEEPTTL')
      else
        token = clock
      end
    end
  end
  if fits then
    local owner = ARGV[4]
    if rw and need == 'w' then
      redis.call('hset', held_by, owner, '1 ' .. token, 'writer', owner)
    else
      redis.call('hset', held_by, owner, (rw and '1' or need) .. ' ' .. token)
    end
    -- A read keeps the counter alive. Not before the HSET: a PEXPIRE is no write Redis
    -- refuses at maxmemory, and once a script has written, Redis refuses none of its writes.
    if rw and need == 'r' and redis.call('pttl', counter_key) < tonumber(counter_life) then
      redis.call('pexpire', counter_key, counter_life)
    end
    local ends = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000) + tonumber(lease)
    redis.call('zadd', leased, string.format('%d', ends), owner)
    redis.call('pexpire', held_by, lease)
    redis.call('pexpire', leased, lease)
    return token -- as acquire.lua answers: an array costs Redis a conversion of its own
  end
end

-- The usual busy case, with no functions made either: a first acquisition (or a later
-- attempt of a wait that was not granted) that finds the object held by others, every lease
-- live, and nobody the grant rule would admit now (the queue's head, if any, is another
-- waiter whose terms live and whose need does not fit). The caller does not fit, or would
-- overtake that head, so it is not let in: it queues if it may wait, and hears how long to
-- sleep. The general way's purge and grant_waiters would do nothing here, and its
-- fix_expiry change nothing.
-- Every key is read first, with pcalls, and anything unexpected takes the general way, which
-- names foreign data: the holders (a hash with an expiry, every field "<count> <token>" or a
-- read-write lock's "writer", none the caller's: that would be a grant to take up), a
-- semaphore's total, the earliest lease, the head's terms and the counter. The permits used
-- are summed from the holders' fields, which are the leases' members while every lease
-- lives. The first write is the caller's terms: refused (another type, maxmemory), it has
-- written nothing, and the general way says why.
-- Cost: eight reads, and to queue four or six writes, where the general way made about 25
-- calls and its functions. Under callgrind (redis-server 7.0.15) a busy semaphore's attempt
-- that does not queue went from 237,000 instructions to 109,000 (a lock's: 57,000).
if present and present > 0 then
  local rw, owner, need = ARGV[1] == 'rw', ARGV[4], ARGV[7]
  local queue, waiters = held_by .. ':queue', held_by .. ':waiters'
  -- PTTL answers for a key of any type: -2 absent, -1 no expiry (not ours).
  local fields = redis.call('pttl', held_by) > 0 and redis.pcall('hgetall', held_by)
  local sane = fields and not fields.err
  local holders, used, writer = 0, 0, nil
  for i = 1, sane and #fields or 0, 2 do
    local count = string.match(fields[i + 1], '^(%d+) %d+$')
    if rw and fields[i] == 'writer' then
      writer = fields[i + 1]
    elseif fields[i] == owner or not count then
      sane = false
    else
      holders, used = holders + 1, used + tonumber(count)
    end
  end
  -- A thread's read beside its own write never waits: the general way takes it.
  sane = sane and holders > 0 and not (rw and writer and writer == ARGV[12])
  -- A semaphore's total. A request above it waits aside: the general way.
  local total
  if sane and not rw then
    local text = redis.pcall('get', held_by .. ':permits')
    total = type(text) == 'string' and string.match(text, '^%d+$') and tonumber(text)
    sane = total and tonumber(need) <= total
  end
  local earliest = sane and redis.pcall('zrange', leased, 0, 0, 'WITHSCORES')
  local time = earliest and not earliest.err and earliest[2] and redis.call('time')
  local now = time and tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local head = now and tonumber(earliest[2]) > now and redis.pcall('zrange', queue, 0, 0)
  sane = head and not head.err
  local blocked, fits = false, false
  if sane then
    if rw then
      fits = need == 'r' and not writer
    else
      fits = used + tonumber(need) <= total
    end
  end
  if sane and head[1] then
    -- The caller as the head (its own terms may have run out) takes the general way.
    local terms = head[1] ~= owner and redis.pcall('hget', waiters, head[1])
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
  local settled = sane and (blocked or not fits)
  local fence = settled and redis.pcall('get', held_by .. ':fence')
  if settled and (fence == false or (type(fence) == 'string' and string.match(fence, '^%d+$'))) then
    local queue_for, queued = ARGV[9] or '0', true
    if queue_for ~= '0' then
      local wait_ms, handover_lease = tonumber(queue_for), ARGV[11] or ARGV[6]
      local terms = string.format('%d %s %s', now + wait_ms, handover_lease, need)
      queued = type(redis.pcall('hset', waiters, owner, terms)) == 'number'
      if queued then
        redis.call('zadd', queue, 'NX', time[1] .. string.sub('00000' .. time[2], -6), owner)
        if redis.call('pttl', queue) < wait_ms then
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
