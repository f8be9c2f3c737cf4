-- recount_slots: the reconciler repairs a queue's slot counters from its live leases.
--
-- KEYS[1]  leases       zset    id -> lease expiry ms: the runs that hold slots
-- KEYS[2]  ready        list    the ring of lanes (lanes.lua, flow control)
-- KEYS[3]  run_prefix   prefix  run keys are this prefix .. id (same hash tag)
-- ARGV[1]  wake_max     integer how many blocked lanes to move back to the ring at most
-- ARGV[2]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- derived  slots, limits, wait:<res>, blocked, placed: from the queue's tag
-- returns  {code, fixes, woken}  codes: OK; fixes is a list of {field, counted, held}
--          for every slots field that disagreed with the leases (counted: what the
--          hash said, held: what the leases hold; '' for none); woken is how many
--          blocked lanes went back to the ring because their resource has room
-- events   none: the reconciler logs each fix and counts it in a metric
-- invariant: afterwards the slots hash says exactly what the runs in `leases` hold
--          (their `held` fields), so a counter that drifted (a bug, a restore of an
--          old snapshot) can neither block a key forever nor let it past its limit
--          for longer than one reconcile interval. A lane blocked on a resource with
--          room (a wake lost to a lane emptied meanwhile) is woken. Idempotent.
-- validate-then-write: the numbers are checked and every lease and counter read
--          before the first write.
--- @include args
--- @include keys
--- @include slots

check_argc(@RecountArgs)
local wake_max = int_arg(ARGV[@wake_max], 'wake_max', 0)
local tag = string.sub(KEYS[3], 1, -5)

-- what the leases hold
local held = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local cur = redis.call('HMGET', KEYS[3] .. id, 'status', 'held')
  if (cur[1] == 'running' or cur[1] == 'cancelling') and cur[2] then
    for res in string.gmatch(cur[2], '[^\n]+') do
      if string.sub(res, 1, 2) == 's:' then
        held[res] = id
      else
        held[res] = (held[res] or 0) + 1
      end
    end
  end
end
local counted = {}
local raw = redis.call('HGETALL', tag .. 'slots')
for i = 1, #raw, 2 do
  counted[raw[i]] = raw[i + 1]
end
local fixes = {}
for res, value in pairs(held) do
  if tostring(counted[res]) ~= tostring(value) then
    fixes[#fixes + 1] = {res, counted[res] or '', tostring(value)}
  end
end
for res, value in pairs(counted) do
  if held[res] == nil then
    fixes[#fixes + 1] = {res, value, ''}
  end
end

-- blocked resources with room now
local limits = redis.call('HGETALL', tag .. 'limits')
local limit_of = {}
for i = 1, #limits, 2 do
  limit_of[limits[i]] = tonumber(limits[i + 1])
end
local rooms = {}
for _, res in ipairs(redis.call('SMEMBERS', tag .. 'blocked')) do
  local kind = string.sub(res, 1, 1)
  local room
  if kind == 's' then
    room = held[res] and 0 or 1
  else
    local limit = limit_of[res] or (kind == 'k' and limit_of['k:*'])
    room = limit and (limit - (held[res] or 0)) or wake_max
  end
  if room > 0 then
    rooms[#rooms + 1] = {res, room}
  end
end

if #fixes > 0 then
  redis.call('DEL', tag .. 'slots')
  for res, value in pairs(held) do
    redis.call('HSET', tag .. 'slots', res, value)
  end
end
local woken = 0
for _, entry in ipairs(rooms) do
  if woken < wake_max then
    woken = woken + wake_lanes(tag, entry[1], math.min(entry[2], wake_max - woken))
  end
end
if woken > 0 then
  redis.call('PUBLISH', ARGV[@wake_channel], 'ready')
end
return {'OK', fixes, woken}
