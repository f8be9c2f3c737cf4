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
-- ARGV[19] concurrency_key  string  the key whose limit the run counts against, '' for none
-- ARGV[20] singleton_key    string  at most one run of this key runs at a time, '' for none
-- ARGV[21] on_conflict  reject | enqueue | cancel_active | replace_queued  (with a
--          singleton key: what to do when a run of the key is active or queued)
-- ARGV[22] priority     integer  higher first within its lane (-100..100, checked by the API)
-- ARGV[23] boost_ms     integer  priority x aging step: its lane score is enqueue ms - boost_ms
-- ARGV[24] retention    string  per-status retention spec (store/retention.py), for a run
--          replace_queued supersedes
-- ARGV[25] parent_id    string  the run that spawns this one (ctx.spawn), '' for a top-level run
-- ARGV[26] root_id      string  the top-level run of its tree ('' : this run's own id)
-- ARGV[27] depth        integer parents above it (0 for a top-level run)
-- derived  the flow-control keys of lib.lua, the idempotency prefix and the cancel
--          channel, from the queue's tag (KEYS[1] less 'run:<id>'); a child's tombstone
--          `<tag>:unborn:<id>` (cancel_children: its parent ended before it was created)
-- returns  {code, run_id, created_at_ms}  codes: OK (created), REPLAYED (same key and
--          same body, or this run id exists already: the earlier run's id),
--          CONFLICT (same key, other body: the earlier run's id), SINGLETON (reject:
--          a run of the singleton key is active or queued: its id; nothing written),
--          CANCEL (a child whose parent's end cancelled it before it existed: nothing
--          written, so a stale parent worker cannot bring it to life)
-- events   created, then wait (kind run_at, until_ms) when its start time is ahead;
--          with cancel_active, cancel_requested on the active run; with
--          replace_queued, cancelled (reason superseded) on the queued one
-- invariant: one idempotency key names at most one run, one run id one record; a run is ready only once
--          its record and its `created` event exist. A singleton key's conflict is
--          decided in this same step, so two creates of one key in one millisecond
--          meet in order; only a never-claimed queued run (no first_started_at; not
--          fence 0, as a re-run's fence starts above 0) is superseded.
-- validate-then-write: every argument is checked, the record and the idempotency key
--          looked up and the event encoded before the first SET; input, metadata and
--          budget are stored as the API encoded them (it refuses non-finite numbers).
--- @include lib

check_argc(27)
local run_id = run_id_arg(ARGV[1], KEYS[1], KEYS[2])
local parent_id, root_id = ARGV[25], ARGV[26]
if parent_id ~= '' then
  run_id_arg(parent_id)
end
if root_id ~= '' then
  run_id_arg(root_id)
else
  root_id = run_id
end
local depth = int_arg(ARGV[27], 'depth', 0)
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
local ckey, skey = ARGV[19], ARGV[20]
local on_conflict = enum_arg(ARGV[21], 'on_conflict',
  {'reject', 'enqueue', 'cancel_active', 'replace_queued'})
local priority = int_arg(ARGV[22], 'priority', -1000000)
local boost_ms = int_arg(ARGV[23], 'boost_ms', -1000000000000)
local retention = retention_arg(ARGV[24])
if string.find(ckey, '[|\n]') or string.find(skey, '[|\n]') then
  bad_argument('concurrency_key or singleton_key', ckey .. skey)
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
local tag = string.sub(KEYS[1], 1, -(#run_id + 5))
if parent_id ~= '' and redis.call('EXISTS', tag .. 'unborn:' .. run_id) == 1 then
  return {'CANCEL', run_id, 0}
end

-- a singleton key's holder and newest queued run, and what this create does to them
local active, superseded
if skey ~= '' then
  active = redis.call('HGET', tag .. 'slots', 's:' .. skey)
  local last = redis.call('HGET', tag .. 'one:' .. skey, 'last')
  if on_conflict == 'reject' and (active or last) then
    return {'SINGLETON', active or last, 0}
  end
  if on_conflict == 'replace_queued' and last then
    local cur = redis.call('HMGET', tag .. 'run:' .. last, 'status', 'first_started_at')
    if cur[1] == 'queued' and not cur[2] then
      superseded = last
    end
  end
  if active and (on_conflict ~= 'cancel_active'
      or redis.call('HGET', tag .. 'run:' .. active, 'status') ~= 'running') then
    active = nil
  end
end

local now = now_ms()
local data = cjson.encode({handler = ARGV[3], queue = ARGV[2], max_attempts = max_attempts,
  concurrency_key = ckey ~= '' and ckey or nil, singleton_key = skey ~= '' and skey or nil,
  priority = priority ~= 0 and priority or nil})
local start_ms = start_at_ms or (delay_ms and now + delay_ms) or now
if idem_key ~= '' then
  redis.call('SET', KEYS[5], run_id .. ' ' .. ARGV[9])
end
redis.call('HSET', KEYS[1],
  'id', run_id, 'queue', ARGV[2], 'handler', ARGV[3], 'status', 'queued',
  'input', ARGV[4], 'attempt', 1, 'max_attempts', ARGV[5],
  'on_lease_expired', ARGV[6], 'fence', 0, 'created_at', now,
  'metadata', ARGV[7], 'idempotency_key', idem_key, 'budget', ARGV[12],
  'retention_ms', ARGV[13], 'traceparent', ARGV[15], 'rate_limits', ARGV[18],
  'ckey', ckey, 'skey', skey, 'priority', priority, 'boost_ms', boost_ms,
  'lane', lane_of(ARGV[3], ckey, skey), 'root_id', root_id)
if parent_id ~= '' then
  redis.call('HSET', KEYS[1], 'parent_id', parent_id, 'depth', depth)
end
if superseded then
  local k = {leases = tag .. 'leases', run_prefix = tag .. 'run:', events_prefix = tag .. 'events:',
    idem_prefix = tag .. 'idem:'}
  local err = {code = 'superseded', message = 'replaced by a newer run of its singleton key '
    .. 'before it started', retryable = false, details = {superseded_by = run_id}}
  finalize(k, superseded, 'cancelled', 0, now, {'error', cjson.encode(err)},
    cjson.encode({reason = 'superseded', superseded_by = run_id}), retention, ARGV[10])
end
if active then
  request_cancel(tag, active, now, {reason = 'cancel_active', superseded_by = run_id}, ARGV[10])
end
enter_queue(KEYS[1], KEYS[2], run_id,
  {ready = KEYS[3], runs = KEYS[4], unclaimed = KEYS[6], wake = ARGV[11], maxlen = ARGV[10]},
  data, now, start_ms, queued_ttl_ms)
return {'OK', run_id, now}
