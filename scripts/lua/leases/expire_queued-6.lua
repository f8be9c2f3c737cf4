-- expire_queued: end the runs nobody claimed within their queued time-to-live.
--
-- KEYS[1]  unclaimed    zset    id -> epoch ms when the run expires if still unclaimed
-- KEYS[2]  ready        list    the ring of lanes (lanes.lua; finalize takes the run out of its lane)
-- KEYS[3]  leases       zset    id -> lease expiry ms (finalize drops the id from it)
-- KEYS[4]  run_prefix   prefix  run keys are this prefix .. id (same hash tag)
--          (a run's effects hash is derived from it too, and expires with the run)
-- KEYS[5]  events_prefix  prefix  event streams are this prefix .. id
-- KEYS[6]  idem_prefix  prefix  idempotency keys are this prefix .. key
-- ARGV[1]  limit        integer how many due entries to look at, at most
-- ARGV[2]  retention    string  per-status retention spec (store/retention.py)
-- ARGV[3]  maxlen       integer approximate cap of each event stream
-- returns  {code, actions}  codes: OK; actions is a list of {id, 'expired', fence}
-- events   expired (terminal), data {reason = 'queued_ttl', queued_for_ms}
-- invariant: only a run that is still `queued` and was never claimed (no
--          first_started_at; not fence 0, as a re-run's fence goes on from its old
--          run's) when its time-to-live has passed by the Redis clock *now* is
--          expired, with one terminal event, and leaves its lane in the same step. A first
--          claim and every terminal write drop their run from the index themselves;
--          any other entry found due (a record gone) is only dropped. Idempotent: a
--          second pass finds nothing left to do.
-- validate-then-write: the numbers are checked, then every due run is read and its
--          event encoded, all before the first write.
--- @include args
--- @include keys
--- @include events
--- @include slots
--- @include lanes
--- @include family
--- @include finalize

check_argc(@ExpireArgs)
local k = {leases = KEYS[3], run_prefix = KEYS[4], events_prefix = KEYS[5],
  idem_prefix = KEYS[6]}
local limit = int_arg(ARGV[@limit], 'limit', 0)
local retention = retention_arg(ARGV[@retention])
int_arg(ARGV[@maxlen], 'maxlen', 0)
local now = now_ms()

-- read every due entry first: the plans hold what gets written
local plans = {}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)
for _, id in ipairs(due) do
  local cur = redis.call('HMGET', KEYS[4] .. id, 'status', 'first_started_at', 'created_at')
  local plan = {id = id}
  if cur[1] == 'queued' and not cur[2] then
    local queued_for = now - (tonumber(cur[3]) or now)
    plan.fields = {'error', cjson.encode({code = 'queued_ttl_expired',
      message = 'not claimed within its queued time-to-live', retryable = false,
      details = {queued_for_ms = queued_for}})}
    plan.data = cjson.encode({reason = 'queued_ttl', queued_for_ms = queued_for})
  end
  plans[#plans + 1] = plan
end

local actions = {}
for _, plan in ipairs(plans) do
  redis.call('ZREM', KEYS[1], plan.id)
  if plan.data then
    -- finalize takes it out of its lane (lanes.lua: unqueue)
    finalize(k, plan.id, 'expired', 0, now, plan.fields, plan.data, retention, ARGV[@maxlen])
    actions[#actions + 1] = {plan.id, 'expired', 0}
  end
end
return {'OK', actions}
