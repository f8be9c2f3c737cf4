-- create_run: a new run enters the queue as `queued`, with its `created` event.
--
-- KEYS[1]  run          hash    the new run's record
-- KEYS[2]  events       stream  the new run's events
-- KEYS[3]  ready        list    runnable ids (FIFO)
-- KEYS[4]  runs         zset    every run of the queue by created_at ms
-- KEYS[5]  idem         string  the idempotency key's record (unused when ARGV[8] is '')
-- KEYS[6]  unclaimed    zset    id -> epoch ms when the run expires if nobody claimed it
-- ARGV[1]  run_id       string
-- ARGV[2]  queue        string
-- ARGV[3]  handler      string
-- ARGV[4]  input        json
-- ARGV[5]  max_attempts integer
-- ARGV[6]  on_lease_expired  "orphan" | "retry"
-- ARGV[7]  metadata     json
-- ARGV[8]  idempotency_key   string, '' for none
-- ARGV[9]  fingerprint  string  hash of the request body, for replay detection
-- ARGV[10] maxlen       integer approximate cap of the event stream
-- ARGV[11] wake_channel string  pub/sub channel idle workers of the queue listen on
-- ARGV[12] budget       json    run-level budgets (max_steps, max_duration_s), '' for none
-- ARGV[13] retention_ms integer the run's own retention once it ends, '' for the per-status one
-- ARGV[14] queued_ttl_ms integer how long it may wait unclaimed before it ends `expired`
-- ARGV[15] traceparent  string  W3C trace context the worker parents each attempt on, '' for none
-- ARGV[16] start_at_ms  integer epoch ms before which it may not start (run_at), '' for none
-- ARGV[17] delay_ms     integer ms from now (the Redis clock) before it may start, '' for none;
--          a run with a start time in the future waits in the queue's delayed zset (derived
--          from KEYS[1]'s prefix, as claim_runs' retries do) and its queued TTL counts from then
-- ARGV[18] rate_limits  json    the start buckets the run waits on, '' for none: a list of
--          [bucket, limit, period_ms, burst, cost] (rate_gate in lib.lua), at most 8
-- returns  {code, run_id, created_at_ms}  codes: OK (created), REPLAYED (same key and
--          same body, or this run id exists already: the earlier run's id),
--          CONFLICT (same key, other body: the earlier run's id)
-- events   created, then wait (kind run_at, until_ms) when its start time is ahead
-- invariant: one idempotency key names at most one run, one run id one record; a run is ready only once
--          its record and its `created` event exist.
-- validate-then-write: every argument is checked, the record and the idempotency key
--          looked up and the event encoded before the first SET; input, metadata and
--          budget are stored as the API encoded them (it refuses non-finite numbers).
--- @include lib

check_argc(18)
local run_id = run_id_arg(ARGV[1], KEYS[1], KEYS[2])
local max_attempts = int_arg(ARGV[5], 'max_attempts', 1)
enum_arg(ARGV[6], 'on_lease_expired', {'orphan', 'retry'})
int_arg(ARGV[10], 'maxlen', 0)
if ARGV[13] ~= '' then
  int_arg(ARGV[13], 'retention_ms', 0)
end
local queued_ttl_ms = int_arg(ARGV[14], 'queued_ttl_ms', 1)
local start_at_ms, delay_ms
if ARGV[16] ~= '' then
  start_at_ms = int_arg(ARGV[16], 'start_at_ms', 0)
end
if ARGV[17] ~= '' then
  delay_ms = int_arg(ARGV[17], 'delay_ms', 0)
end
if ARGV[18] ~= '' then
  rate_limits_arg(ARGV[18])
end
-- a create retried after a lost reply must not enqueue the run twice
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'REPLAYED', run_id, 0}
end
local idem_key = ARGV[8]
local prior_code, prior_id = idempotent_prior(KEYS[5], idem_key, ARGV[9])
if prior_code then
  return {prior_code, prior_id, 0}
end

local now = now_ms()
local data = cjson.encode({handler = ARGV[3], queue = ARGV[2], max_attempts = max_attempts})
local start_ms = start_at_ms or (delay_ms and now + delay_ms) or now
local waiting = start_ms > now
local wait_data
if waiting then
  wait_data = cjson.encode({kind = 'run_at', subject = 'start', until_ms = start_ms})
end
if idem_key ~= '' then
  redis.call('SET', KEYS[5], run_id .. ' ' .. ARGV[9])
end
redis.call('HSET', KEYS[1],
  'id', run_id, 'queue', ARGV[2], 'handler', ARGV[3], 'status', 'queued',
  'input', ARGV[4], 'attempt', 1, 'max_attempts', ARGV[5],
  'on_lease_expired', ARGV[6], 'fence', 0, 'created_at', now,
  'metadata', ARGV[7], 'idempotency_key', idem_key, 'budget', ARGV[12],
  'retention_ms', ARGV[13], 'traceparent', ARGV[15], 'rate_limits', ARGV[18])
emit(KEYS[1], KEYS[2], 'created', 0, now, data, ARGV[10])
redis.call('ZADD', KEYS[4], now, run_id)
-- a delayed run's time-to-live unclaimed counts from its start time, not from now
redis.call('ZADD', KEYS[6], math.max(now, start_ms) + queued_ttl_ms, run_id)
if waiting then
  redis.call('HSET', KEYS[1], 'run_at', start_ms)
  emit(KEYS[1], KEYS[2], 'wait', 0, now, wait_data, ARGV[10])
  redis.call('ZADD', delayed_of(string.sub(KEYS[1], 1, #KEYS[1] - #run_id)), start_ms, run_id)
  -- idle workers claim once and learn the earliest delayed time (their timer's next wake)
  redis.call('PUBLISH', ARGV[11], 'ready')
else
  make_ready(KEYS[3], ARGV[11], run_id, false)
end
return {'OK', run_id, now}
