-- set_limits: an operator replaces a queue's concurrency limits.
--
-- KEYS[1]  limits       hash    q / h:<handler> / k:* / k:<key> -> limit
-- KEYS[2]  ready        list    the ring of lanes (lib.lua, flow control)
-- ARGV[1]  wake_max     integer how many blocked lanes to move back to the ring at most
-- ARGV[2]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- ARGV[3..] field, limit  pairs: q | h:<handler> | k:* | k:<key>, and an integer >= 1
-- derived  wait:<res>, blocked, placed: from the queue's tag (KEYS[2] less 'ready')
-- returns  {code, woken}  codes: OK; woken is how many blocked lanes went back to the ring
-- events   none (a lane blocked again gets no second wait event for the same resource)
-- invariant: the limits are replaced whole in one step. Lanes blocked on a resource
--          go back to the ring (up to wake_max; the reconciler's recount wakes the
--          rest), so a raised or removed limit lets waiting runs start without a
--          slot being given back first; a lowered one takes nothing from a running
--          run: claims stop until the count is below it.
-- validate-then-write: every field and limit is checked before the DEL.
--- @include lib

check_argc(2)
local wake_max = int_arg(ARGV[1], 'wake_max', 0)
check_groups(3, 2)
for i = 3, #ARGV, 2 do
  local field = ARGV[i]
  if not (field == 'q' or string.match(field, '^[hk]:[^|\n]+$')) then
    bad_argument('limit field', field)
  end
  int_arg(ARGV[i + 1], 'limit', 1)
end
local tag = tag_of_ready(KEYS[2])
local resources = redis.call('SMEMBERS', tag .. 'blocked')

redis.call('DEL', KEYS[1])
if #ARGV > 2 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 3))
end
local woken = 0
for _, res in ipairs(resources) do
  if woken < wake_max then
    woken = woken + wake_lanes(tag, res, wake_max - woken)
  end
end
if woken > 0 then
  redis.call('PUBLISH', ARGV[2], 'ready')
end
return {'OK', woken}
