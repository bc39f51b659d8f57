-- redisson/force_unlock.lua: delete a lock in Redisson's layout whoever holds it, and wake
-- every waiter: those of the plain lock on its channel, and the head of a fair lock's queue
-- on its own (Redisson's format; Java's getLock(n) and getFairLock(n) are one
-- hash, so either force-unlock frees both).
--
-- KEYS[1]  the lock hash    <name>
-- KEYS[2]  the fair queue   redisson_lock_queue:{<name>}
-- KEYS[3]  the deadlines    redisson_lock_timeout:{<name>}
-- KEYS[4]  the channel      redisson_lock__channel:{<name>}   (a fair waiter's: + ":" + owner)
-- KEYS[5]  the latch        redisson_unlock_latch:{<name>}:<request id>
-- ARGV[1]  now              epoch ms, the caller's clock (a fair queue's deadlines are too)
-- ARGV[2]  publish command  PUBLISH or SPUBLISH
--                           by pcall: refused by an ACL, it fails nothing (see lua/release.lua)
-- ARGV[3]  latch ttl        ms
--
-- Reply: 1 if the lock was there, else 0; a retry of the same request answers the same.
-- Errors: "WRONGTYPE lock" when the key is not a hash (a Java map of the same name, say), or
-- a hash that is not a lock's: not exactly one field "<owner>:<thread>" with a positive
-- count. A read-write lock's hash is one (it has a `mode` field: its waiters listen on
-- another channel, and its readers' timeout keys would outlive it), and so is an
-- application's hash: nothing was deleted, published or latched. A free key costs no check,
-- a held one HLEN and HGETALL of its one field.
--
-- The plain lock's waiters hear "1", which Java's lock waiters read as "wake all" (Java's
-- own force-unlock sends "0", waking one per client: the rest would sleep to their bound).
-- The fair queue's head hears "0" once stale heads are dropped, as Java's fair unlock sends.

local lock, queue, deadlines = KEYS[1], KEYS[2], KEYS[3]
local replay = redis.call('get', KEYS[5])
if replay then
  return tonumber(replay)
end
local found = redis.call('type', lock).ok
if found ~= 'hash' and found ~= 'none' then
  return redis.error_reply('WRONGTYPE lock')
end
if found == 'hash' then
  -- Only what looks like a lock is deleted: one field, an owner "<id>:<thread>" (Java's
  -- "<uuid>:<thread id>", ours "<client id>:<n>"), whose value is a hold count. Java's
  -- forceUnlock deletes any key; an application's hash of the same name (HSET user:2 name
  -- bob) stays. A lock whose lease someone cleared still goes: that is what a force-unlock
  -- is for. HLEN first, so that a big hash costs no more than a small one; a read-write
  -- lock's hash (its `mode` field) is refused by the same test.
  local ok = redis.call('hlen', lock) == 1
  if ok then
    local pair = redis.call('hgetall', lock)
    ok = string.match(pair[1], '^.+:%d+$') and string.match(pair[2], '^[1-9]%d*$')
  end
  if not ok then
    return redis.error_reply('WRONGTYPE lock')
  end
end
local deleted = redis.call('del', lock)
if deleted == 1 then
  redis.pcall(ARGV[2], KEYS[4], '1')
  local now = tonumber(ARGV[1])
  while true do
    local head = redis.call('lindex', queue, 0)
    if not head then
      break
    end
    local deadline = redis.call('zscore', deadlines, head)
    if not deadline or tonumber(deadline) > now then
      redis.pcall(ARGV[2], KEYS[4] .. ':' .. head, '0')
      break
    end
    redis.call('zrem', deadlines, head)
    redis.call('lpop', queue)
  end
end
redis.call('set', KEYS[5], deleted, 'px', ARGV[3])
return deleted
