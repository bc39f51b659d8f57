-- places.lua: a caller's places in a lock's queue, for the lock's scripts that take them out
-- (acquire.lua, withdraw.lua, acquire_many.lua). Not a script of its own: scripts/lock.rs
-- puts it in front of each of them, except in acquire.lua, where it goes after the usual
-- case, on the line that script marks for it; the test support does the same.
--
-- A place, as acquire.lua writes it: member "<owner> <hand-over lease, ms> <valid, ms>" in the
-- queue (a zset), scored with its arrival (µs, server clock). The arrival names the place
-- while it lasts: an attempt that moves the place's validity on writes a new member with the
-- same score, so a caller that knows an older member finds the place by its arrival.
--
-- These functions take everything they use as arguments and refer to no local of the script
-- they are put in: every run that reaches them makes them, and a function that captures a
-- script's locals costs more to make. Made so, the four cost a run about 3,000 of Redis's
-- instructions (callgrind), which acquire.lua's usual case spares itself by returning
-- before them.

-- The member of a place of `owner`'s, valid for `valid` ms after its arrival.
local function place_member(owner, lease_ms, valid)
  return owner .. ' ' .. lease_ms .. ' ' .. valid
end

-- The member of `owner`'s place in `queue` that arrived at `arrival` (µs), or nil.
local function find_place(queue, owner, arrival)
  local members = redis.pcall('zrangebyscore', queue, arrival, arrival)
  if type(members) == 'table' and not members.err then
    for _, m in ipairs(members) do
      if string.sub(m, 1, #owner + 1) == owner .. ' ' then
        return m
      end
    end
  end
  return nil
end

-- Takes out `owner`'s place last known as member `name`, which arrived at `arrival` (µs; 0
-- if not known): by its arrival, should a run whose reply was lost have renamed it. Never
-- member `kept` (nil: none), a place the calling run holds: a place it took over under the
-- same name is that place now, at a new arrival, and only what the old arrival still names
-- goes then. ZREM needs no memory, so this runs at maxmemory too.
local function remove_place(queue, owner, name, arrival, kept)
  if name ~= kept and redis.pcall('zrem', queue, name) == 1 then
    return
  end
  if tonumber(arrival) > 0 then
    local renamed = find_place(queue, owner, arrival)
    if renamed and renamed ~= kept then
      redis.pcall('zrem', queue, renamed)
    end
  end
end

-- Takes out the places `leftovers` names in `queue`: "<arrival µs> <hand-over lease, ms>
-- <valid, ms>" each, space-separated (arrival 0: not known), places of `owner`'s that earlier
-- waits left when they failed. Never member `kept` (see remove_place).
local function void_places(queue, owner, leftovers, kept)
  for arrival, lease_ms, valid in string.gmatch(leftovers, '(%d+) (%d+) (%d+)') do
    remove_place(queue, owner, place_member(owner, lease_ms, valid), arrival, kept)
  end
end
