-- redisson/rw_renew.lua: the watchdog for read-write locks in Redisson's layout; extend the
-- leases of many read and write holds in one call (Redisson's format).
--
-- KEYS[2i-1]  lock hash i      <name>
-- KEYS[2i]    a write's token counter   redisson_lock_token:{<name>}, or
--             a read's timeout keys     {<name>}:<owner>:rwlock_timeout (without the number)
-- ARGV[1]     lease            ms
-- ARGV[2i]    the field of hold i       <owner>:write for a write, <owner> for a read
-- ARGV[2i+1]  a write's token, or "read"
--
-- Reply: one entry per hold: 1 = still ours (leases extended), 0 = no longer ours.
--
-- A write is ours while its field is there and the counter still shows its token (as
-- redisson/renew.lua has it for a lock). A read is ours while its field is there and one of
-- its timeout keys, k = its count down to 1, lives with a positive TTL: Java counts a reader
-- alive by those keys alone. Its renewal extends every one of them and the hash, as Java
-- 4.x's read renewal does for its own readers, so that a Java read unlock keeps the hash for
-- ours. Leases are only extended (Java's sets the hash's TTL, which may shorten it). A key
-- of another type counts as 0 rather than failing the whole batch, and so does a hash
-- without a `mode` field (a lock's, not a read-write lock's), even where it has a field
-- named as the holder (a lock of the reader's thread): nothing of it is extended, and the
-- hold is reported lost, as its own hash is gone. The field and `mode` come in one HMGET.

local lease = tonumber(ARGV[1])

local function extend(key)
  if redis.call('pttl', key) < lease then
    redis.call('pexpire', key, lease)
  end
end

local result = {}
for i = 1, #KEYS / 2 do
  local lock, second = KEYS[2 * i - 1], KEYS[2 * i]
  local field, token = ARGV[2 * i], ARGV[2 * i + 1]
  result[i] = 0
  local fields = redis.pcall('hmget', lock, field, 'mode')
  -- An error reply (another type) is a table with neither field.
  local count = fields[2] and fields[1]
  if count then
    local ours = false
    if token ~= 'read' then
      ours = redis.pcall('get', second) == token
    else
      for k = tonumber(count) or 0, 1, -1 do
        local timeout = second .. ':' .. k
        local left = redis.call('pttl', timeout)
        if left > 0 then
          ours = true
          if left < lease then
            redis.call('pexpire', timeout, lease)
          end
        end
      end
    end
    if ours then
      extend(lock)
      result[i] = 1
    end
  end
end
return result
