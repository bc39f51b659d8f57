-- shares.lua: what the scripts of the kinds with shares (the read-write lock, the semaphore)
-- have in common. Not a script of its own: scripts/shares.rs puts it in
-- shares_acquire.lua, shares_release.lua, shares_withdraw.lua and semaphore_set.lua (after
-- the usual case of the first two, at their line "-- shares.lua goes here", so that case
-- makes none of the functions below; in front of the others), which all pass KEYS[1] and
-- ARGV[1..3]:
--
-- KEYS[1]  the holders     <prefix>:{<name>}:<kind>          hash: owner -> "<count> <token>"
--                          (a read-write lock also has field "writer" -> the write owner)
--
-- and make the object's other keys from it, as release.lua makes a lock's channel: every key
-- and argument costs Redis a Lua table entry on every call (about 1,300 instructions), a
-- name made here a few hundred, and only where it is used. All share KEYS[1]'s hash tag, so
-- a Cluster node that serves KEYS[1] serves them all:
--   <KEYS[1]>:fence     string: the last token; lives the latest token's lease plus the
--                       retention (ARGV[3])
--   <KEYS[1]>:queue     zset: owner -> arrival (µs)
--   <KEYS[1]>:waiters   hash: owner -> terms (below)
--   <KEYS[1]>:leases    zset: owner -> lease end (ms)
--   <KEYS[1]>:unlocked  the channel
--   <KEYS[1]>:permits   string: a semaphore's total (a read-write lock never reads it)
-- ARGV[1]  policy          "rw" (read-write lock) or "sem" (semaphore)
-- ARGV[2]  publish command PUBLISH (or SPUBLISH on a sharded cluster), for grants
--                          by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
-- ARGV[3]  fence retention ms the fencing counter outlives the lease of the latest token
--
-- An owner's count is its hold count (a read-write lock: reads and writes re-enter) or the
-- permits it holds (a semaphore: an owner per acquisition, never re-entered). Every holder
-- has a lease of its own, in the leases zset; the holders hash and the leases zset expire
-- together with the latest lease, so a crashed holder's share comes back after its own lease
-- (every acquisition drops the holders whose lease ended: the general way by `purge`, and
-- the usual cases run only while every lease lives), and an abandoned object leaves nothing
-- behind.
--
-- A waiter's terms are "<valid until, ms> <hand-over lease, ms> <need>" while it waits (need:
-- "r" or "w" for a read-write lock, the number of permits for a semaphore), and
-- "granted <token>" once it was admitted from the queue.
--
-- The grant rule (`grant_waiters`), the same for both kinds: waiters are admitted from the
-- head of the queue, in arrival order, while each fits; the first that does not fit stops
-- the run, so nobody behind it overtakes it (a writer is not starved by readers, a large
-- request by small ones). A semaphore's waiter asking more than the total is stepped over,
-- not stopped at: no release can admit it, only a raised total, and it would block the
-- queue for nothing; it keeps its place for then. Admitting takes place when something is
-- released, when a waiter leaves, when the total changes, and when an attempt finds live
-- waiters that fit (an object freed by a lease running out, with nobody to publish).
-- The admissions of one call go out in one message, or in one per client when a release
-- made them (see `grant_waiters`): "grant <token> <lease ms> <owner>[ <token> <owner>]...".
--
-- Tokens: a write and an acquisition of permits take the next fencing token (above every
-- earlier one of the object, and at least the server's clock in µs: see acquire.lua's
-- next_token); a read takes the counter as it is (a read does not move it), so a write's
-- token is above every read's before it.
--
-- Foreign data: every key's type is checked before anything is written ("WRONGTYPE <role>",
-- raised with error(), which Redis answers as that error); nothing of anyone's is changed.

local H = KEYS[1]
local fence, queue, waiters, leases, channel, total_key =
  H .. ':fence', H .. ':queue', H .. ':waiters', H .. ':leases', H .. ':unlocked', H .. ':permits'
local policy, publish, retention = ARGV[1], ARGV[2], tonumber(ARGV[3])
local rw = policy == 'rw'
local clock = redis.call('time')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)

local function wrongtype(which)
  -- Redis 7 (which has REDIS_VERSION) answers an error table raised here as the error
  -- itself; 6.2's error handler cannot take a table, and is given the string, which it
  -- wraps in its own text (scripts::refusal finds the code in it).
  if redis.REDIS_VERSION then
    error(redis.error_reply('WRONGTYPE ' .. which))
  end
  error('WRONGTYPE ' .. which)
end

-- A key is ours only if it is absent or of the type we make it; holders and leases always
-- carry an expiry.
local function check_types()
  for _, k in ipairs({ {H, 'hash', 'lock'}, {leases, 'zset', 'leases'}, {queue, 'zset', 'queue'},
                       {waiters, 'hash', 'waiters'} }) do
    local t = redis.call('type', k[1]).ok
    if t ~= 'none' and t ~= k[2] then
      wrongtype(k[3])
    end
  end
  -- PTTL answers -2 for a key that is absent, -1 for one without an expiry.
  if redis.call('pttl', H) == -1 then
    wrongtype('lock')
  end
  local f = redis.pcall('get', fence)
  -- Digits below 2^53, as acquire.lua's next_token judges a token.
  if type(f) == 'table' or (f and not (string.match(f, '^%d+$') and (#f < 16
      or (#f == 16 and f <= '9007199254740991') or tonumber(f) <= 9007199254740991))) then
    wrongtype('fence') -- another type, or a string that is not a counter (as the usual cases
    -- judge it: tonumber would take "1.5", " 7" or "inf")
  end
end

-- "<count> <token>" -> count, token (strings as stored; nil if not ours)
local function holding(owner)
  local v = redis.call('hget', H, owner)
  if not v then
    return nil
  end
  local count, token = string.match(v, '^(%d+) (%d+)$')
  if not count then
    wrongtype('lock')
  end
  return tonumber(count), token
end

-- The next fencing token (see acquire.lua), for a hold of `lease` ms: the counter lives that
-- long plus the retention, then tokens restart from the clock. The clock is the one this run
-- read first (`clock`), microseconds earlier: as good a floor, since runs never overlap, and
-- a second TIME would cost Redis 6,500 instructions (a table for its reply).
local function next_token(lease)
  local micros = clock[1] * 1000000 + clock[2]
  local last = tonumber(redis.call('get', fence) or '0')
  local token = math.max(micros, last + 1)
  redis.call('set', fence, string.format('%d', token), 'PX', tonumber(lease) + retention)
  return string.format('%d', token)
end

-- Keeps the counter, whose token a read took as it stands, at least as long as this read's
-- lease plus the retention. Called after the read's field is written: a PEXPIRE is no write
-- Redis refuses at maxmemory, and once a script has written, Redis refuses none of its writes.
local function keep_counter(lease)
  if redis.call('pttl', fence) < tonumber(lease) + retention then
    redis.call('pexpire', fence, tonumber(lease) + retention)
  end
end

-- Drops the holders whose lease has ended (a crashed holder's share comes back).
local function purge()
  local gone = redis.call('zrangebyscore', leases, '-inf', now)
  if #gone == 0 then
    return
  end
  local writer = rw and redis.call('hget', H, 'writer')
  for _, owner in ipairs(gone) do
    redis.call('hdel', H, owner)
    if owner == writer then
      redis.call('hdel', H, 'writer')
    end
  end
  redis.call('zremrangebyscore', leases, '-inf', now)
end

-- The permits held (a semaphore).
local function used()
  local sum = 0
  for _, owner in ipairs(redis.call('zrange', leases, 0, -1)) do
    sum = sum + (holding(owner) or 0)
  end
  return sum
end

-- The total: decimal digits up to the largest total set_permits takes. tonumber alone would
-- take "inf", "nan", "1.5", "0x10", " 5" or "1e3", and a script would then grant against it
-- or write back what it made of it.
local function total()
  local v = redis.call('get', total_key)
  if v and not (string.match(v, '^%d+$') and tonumber(v) <= 4294967295) then
    wrongtype('permits')
  end
  return tonumber(v or '0')
end

-- Whether `owner`, needing `need`, fits now: true, false, or 'aside' (a semaphore's request
-- above the total, which waits aside). `writer_of` is the read owner's thread's write owner.
local function fits(owner, need, writer_of)
  if rw then
    if need == 'w' then
      return redis.call('hlen', H) == 0
    end
    local writer = redis.call('hget', H, 'writer')
    return not writer or writer == writer_of
  end
  local n, all = tonumber(need), total()
  if n > all then
    return 'aside'
  end
  return used() + n <= all
end

-- Gives `owner` its share: the token, the holders' field, its lease.
local function take(owner, need, lease)
  -- A read takes the counter as it stands (made from the clock if there is none yet).
  local current = rw and need == 'r' and redis.call('get', fence)
  local token = current or next_token(lease)
  local count = rw and '1' or need
  redis.call('hset', H, owner, count .. ' ' .. token)
  if rw and need == 'w' then
    redis.call('hset', H, 'writer', owner)
  end
  if current then
    keep_counter(lease)
  end
  redis.call('zadd', leases, now + tonumber(lease), owner)
  return token
end

-- Out of the queue (a waiter that took its share, or gave up).
local function leave_queue(owner)
  redis.call('zrem', queue, owner)
  redis.call('hdel', waiters, owner)
end

-- Holders and leases live as long as the latest lease; gone with the last holder.
local function fix_expiry()
  local last = redis.call('zrange', leases, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('del', H, leases)
    return
  end
  local ttl = math.max(1, tonumber(last[2]) - now)
  redis.call('pexpire', H, ttl)
  redis.call('pexpire', leases, ttl)
end

-- Admits live waiters from the head of the queue while each fits (the grant rule above),
-- dropping stale places on the way, and publishes the admissions. Returns the first live
-- waiter left that did not fit, if any.
--
-- Whom a grant wakes: `released_end` is the lease end (ms) of a hold this call released,
-- if it released one. When every admission's lease ends no earlier, each client's
-- admissions go in one message on that client's grant channel "<channel>:<client id>" (the
-- owner id up to its first ':'), and no other client is woken. That is safe: a waiter sleeps
-- no later than the lease end it last heard of, the earliest holder's when it attempted, and
-- every holder since then ends no earlier than that (a lease is never shortened, and a hold
-- granted out of its sight ends no earlier than the one released for it). Otherwise (no
-- hold released: a waiter left, the total changed, a lease ran out) all admissions go in one
-- message on the channel, and every waiter learns the new lease ends.
local function grant_waiters(released_end)
  local granted = {}
  local aside, blocked = 0, nil
  local to_clients = released_end ~= nil
  for _ = 1, 1000 do
    local head = redis.call('zrange', queue, aside, aside)[1]
    if not head then
      break
    end
    local terms = redis.call('hget', waiters, head)
    local expiry, lease, need
    if terms then
      expiry, lease, need = string.match(terms, '^(%d+) (%d+) (%w+)$')
    end
    if not expiry or tonumber(expiry) <= now then
      leave_queue(head) -- gave up without withdrawing, or died
    else
      local fit = fits(head, need, nil)
      if fit == 'aside' then
        aside = aside + 1
      elseif not fit then
        blocked = head
        break
      else
        local token = take(head, need, lease)
        redis.call('zrem', queue, head)
        -- The "granted" terms must outlive the lease: they tell an unused grant from one
        -- taken up. They do without a PEXPIRE: the head queued with this lease, and
        -- shares_acquire.lua made the key outlive its terms' expiry (still ahead) by it.
        redis.call('hset', waiters, head, 'granted ' .. token)
        if to_clients and now + tonumber(lease) < released_end then
          to_clients = false
        end
        table.insert(granted, {token = token, lease = lease, owner = head})
      end
    end
  end
  -- "grant <token> <lease ms> <owner>[ <token> <owner>]..." for `list`, on `to`.
  local function announce(to, list)
    local words = {'grant', list[1].token, list[1].lease, list[1].owner}
    for i = 2, #list do
      table.insert(words, list[i].token)
      table.insert(words, list[i].owner)
    end
    redis.pcall(publish, to, table.concat(words, ' '))
  end
  if #granted == 0 then
    return blocked
  end
  if not to_clients then
    announce(channel, granted)
    return blocked
  end
  local by_client, clients = {}, {}
  for _, grant in ipairs(granted) do
    local client = string.match(grant.owner, '^[^:]*')
    if not by_client[client] then
      by_client[client] = {}
      table.insert(clients, client)
    end
    table.insert(by_client[client], grant)
  end
  for _, client in ipairs(clients) do
    announce(channel .. ':' .. client, by_client[client])
  end
  return blocked
end
