-- counting_available.lua: read the permits free of a counting semaphore, in either layout
-- (Java's availablePermits: GET). Reads only.
--
-- KEYS[1]  the count    <prefix>:{<name>}:counting, or <name>    string
--
-- Reply: the count as a decimal string, "0" when there is none; below 0 after permits were
-- taken away (add_permits with a negative delta) while they were in use.
-- Errors: "WRONGTYPE lock" when the key holds something that is not a count.

local current = redis.pcall('get', KEYS[1])
if not current then
  return '0'
end
-- A count is decimal, within what Lua counts exactly (tonumber would take "inf", "1.5"...).
if type(current) == 'table'
    or not (string.match(current, '^%-?%d+$')
      and math.abs(tonumber(current)) <= 9007199254740991) then
  return redis.error_reply('WRONGTYPE lock')
end
return current
