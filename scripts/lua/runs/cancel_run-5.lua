-- cancel_run: a client asks for a run to stop.
--
-- KEYS[1]  run          hash    the run's record
--          (a run's effects hash is derived from it too, and expires with the run)
-- KEYS[2]  events       stream  the run's events
-- KEYS[3]  leases       zset    id -> lease expiry ms
-- KEYS[4]  delayed      zset    id -> epoch ms it may run (retry backoff)
-- KEYS[5]  idem_prefix  prefix  idempotency keys are this prefix .. key
-- ARGV[1]  run_id       string
-- ARGV[2]  retention    string  per-status retention spec (store/retention.py)
-- ARGV[3]  maxlen       integer
-- ARGV[4]  channel      string  pub/sub channel that pushes the request to owners
-- returns  {code, status}  codes: OK (status is the run's status afterwards:
--          cancelled, or cancelling while its owner stops), NOT_FOUND,
--          INVALID (the run already ended otherwise: status says how)
-- events   cancel_requested (running runs), cancelled (runs nobody holds)
-- invariant: a run nobody holds is cancelled at once; a held run is only marked,
--          and its owner (or, if the owner is dead, the reconciler) writes the
--          terminal state. Repeating the request changes nothing.
-- validate-then-write: retention and stream cap are checked, the record read and
--          the event encoded before the first HSET.
--- @include args
--- @include keys
--- @include events
--- @include slots
--- @include lanes
--- @include family
--- @include finalize

check_argc(@CancelArgs)
local run_id = run_id_arg(ARGV[@run_id], KEYS[1], KEYS[2])
local retention = retention_arg(ARGV[@retention])
int_arg(ARGV[@maxlen], 'maxlen', 0)
local cur = redis.call('HMGET', KEYS[1], 'status', 'fence', 'owner_id')
local status = cur[1]
if not status then
  return {'NOT_FOUND', ''}
end
if status == 'cancelling' or status == 'cancelled' then
  return {'OK', status}
end
if TERMINAL[status] then
  return {'INVALID', status}
end

local now = now_ms()
if status == 'running' then
  request_cancel(string.sub(KEYS[1], 1, -(#run_id + 5)), run_id, now, {}, ARGV[@maxlen])
  return {'OK', 'cancelling'}
end

-- queued, waiting_human, reconciliation_required: nobody holds it, end it now
local run_prefix = string.sub(KEYS[1], 1, #KEYS[1] - #run_id)
local events_prefix = string.sub(KEYS[2], 1, #KEYS[2] - #run_id)
local k = {leases = KEYS[3], run_prefix = run_prefix, events_prefix = events_prefix,
  idem_prefix = KEYS[5]}
local data = cjson.encode({reason = 'requested', previous_status = status})
redis.call('HSET', KEYS[1], 'cancel_requested_at', now)
redis.call('ZREM', KEYS[4], run_id)
finalize(k, run_id, 'cancelled', cur[2], now, {}, data, retention, ARGV[@maxlen])
return {'OK', 'cancelled'}
