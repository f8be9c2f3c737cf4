-- set_limits: an operator replaces a queue's concurrency limits.
--
-- KEYS[1]  limits       hash    q / h:<handler> / k:* / k:<key> -> limit
-- KEYS[2]  ready        list    the ring of lanes (lanes.lua, flow control)
-- ARGV[1]  wake_max     integer how many blocked lanes to move back to the ring at most
-- ARGV[2]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- ARGV[3..] field, limit  pairs: q | h:<handler> | k:* | k:<key>, and an integer >= 1
-- derived  wait:<res>, blocked, placed, leases, slots, run:<id>: from the queue's tag
--          (KEYS[2] less 'ready')
-- returns  {code, woken}  codes: OK; woken is how many blocked lanes went back to the ring
-- events   none (a lane blocked again gets no second wait event for the same resource)
-- invariant: the limits are replaced whole in one step. Lanes blocked on a resource
--          go back to the ring (up to wake_max; the reconciler's recount wakes the
--          rest), so a raised or removed limit lets waiting runs start without a
--          slot being given back first; a lowered one takes nothing from a running
--          run: claims stop until the count is below it. A handler limit declared
--          anew adopts the runs of that handler already running: a run takes a
--          handler slot only while its handler has a limit (claim_runs' fast path), so
--          each such lease gains the slot in its `held` field and the counter counts
--          it, and the counter equals the live leases at once (O(leases), once per
--          declaration; release_held gives each back as for any slot).
-- validate-then-write: every field and limit is checked before the DEL.
--- @include args
--- @include keys
--- @include slots

check_argc(@groups - 1)
local wake_max = int_arg(ARGV[@wake_max], 'wake_max', 0)
check_groups(@groups, @LimitPair)
for i = @groups, #ARGV, @LimitPair do
  local field = ARGV[i + @LimitPair.field]
  if not (field == 'q' or string.match(field, '^[hk]:[^|\n]+$')) then
    bad_argument('limit field', field)
  end
  int_arg(ARGV[i + @LimitPair.limit], 'limit', 1)
end
local tag = tag_of_ready(KEYS[2])
local resources = redis.call('SMEMBERS', tag .. 'blocked')

-- handlers whose limit is new: their running runs took no slot
local adopting = {}
for i = @groups, #ARGV, @LimitPair do
  local field = ARGV[i + @LimitPair.field]
  if string.sub(field, 1, 2) == 'h:' and redis.call('HEXISTS', KEYS[1], field) == 0 then
    adopting[field] = 0
  end
end
local adoptions = {}
if next(adopting) then
  for _, id in ipairs(redis.call('ZRANGE', tag .. 'leases', 0, -1)) do
    local cur = redis.call('HMGET', tag .. 'run:' .. id, 'status', 'handler', 'held')
    local res = 'h:' .. tostring(cur[2])
    if (cur[1] == 'running' or cur[1] == 'cancelling') and adopting[res] then
      local held = cur[3] or ''
      if not string.find('\n' .. held .. '\n', '\n' .. res .. '\n', 1, true) then
        adoptions[#adoptions + 1] = {id, held == '' and res or (held .. '\n' .. res)}
        adopting[res] = adopting[res] + 1
      end
    end
  end
end

redis.call('DEL', KEYS[1])
if #ARGV >= @groups then
  redis.call('HSET', KEYS[1], unpack(ARGV, 3))
end
for _, adoption in ipairs(adoptions) do
  redis.call('HSET', tag .. 'run:' .. adoption[1], 'held', adoption[2])
end
for res, n in pairs(adopting) do
  if n > 0 then
    redis.call('HINCRBY', tag .. 'slots', res, n)
  end
end
local woken = 0
for _, res in ipairs(resources) do
  if woken < wake_max then
    woken = woken + wake_lanes(tag, res, wake_max - woken)
  end
end
if woken > 0 then
  redis.call('PUBLISH', ARGV[@wake_channel], 'ready')
end
return {'OK', woken}
