-- fire_schedule: materialize fire times of a schedule as runs, at most one run per fire time.
--
-- KEYS[1]  schedule     hash    the schedule's record
-- KEYS[2]  due          zset    the queue's schedule ids -> next fire time, epoch ms (UTC)
-- KEYS[3]  buffered     zset    the queue's schedule ids -> the fire buffer_one holds
-- KEYS[4]  ready        list    runnable ids (FIFO)
-- KEYS[5]  runs         zset    every run of the queue by created_at ms
-- KEYS[6]  unclaimed    zset    id -> epoch ms when the run expires if nobody claimed it
-- KEYS[7]  leases       zset    id -> lease expiry ms (a cancelled previous run leaves it)
-- KEYS[8]  run_prefix   prefix  run keys are this prefix .. id (same hash tag)
-- KEYS[9]  events_prefix  prefix  event streams are this prefix .. id
-- KEYS[10] idem_prefix  prefix  idempotency keys are this prefix .. key
-- ARGV[1]  schedule_id  string
-- ARGV[2]  mode         "tick" (the reconciler: fires due now) | "buffered" (the fire
--          buffer_one held, once the previous run ended) | "trigger" | "backfill"
-- ARGV[3]  expected_ms  integer tick: the next fire time the caller read ('' otherwise);
--          the call acts only if the schedule's due score is still exactly this, and it
--          is not ahead of the Redis clock
-- ARGV[4]  version      integer the schedule version the fire times were computed from
-- ARGV[5]  next_ms      integer tick: the next fire time after these, '' for none
-- ARGV[6]  missed       integer tick: fires the missed-fire policy dropped (counted)
-- ARGV[7]  overlap      string  '' for the schedule's own, else skip | allow |
--          cancel_previous | buffer_one (a backfill or trigger may choose)
-- ARGV[8]  queued_ttl_ms integer the default queued TTL (the schedule's own wins)
-- ARGV[9]  maxlen       integer approximate cap of each event stream
-- ARGV[10] wake_channel string  pub/sub channel idle workers of the queue listen on
-- ARGV[11] cancel_channel string  pub/sub channel that pushes a cancel to a run's owner (the
--          queue's; request_cancel in events.lua derives the same name from its tag)
-- ARGV[12] retention    string  per-status retention spec (a cancelled previous run)
-- ARGV[13..] fire_ms, run_id  each fire time (oldest first) and the run id made from it
-- returns  {code, created, skipped, buffered, cancelled}  codes: OK, NOT_FOUND,
--          CONFLICT (another reconciler fired these already, the version moved, or it is
--          not due by the Redis clock: nothing written); created and cancelled are run ids,
--          skipped counts fires the overlap policy (or an existing run) dropped, buffered
--          is 1 when buffer_one now holds a fire
-- events   created on each new run (data names schedule_id and fire_ms), wait when the
--          fire is ahead (a backfill never is), cancel_requested / cancelled on a
--          previous run that cancel_previous stops
-- invariant: one run per (schedule, fire time), however many reconcilers race: a tick acts
--          only while the due score equals the fire time it computed from and moves it
--          past its fires in the same step, and a fire's run id is derived from the
--          schedule and the fire time, so an existing run is never made twice.
--          buffer_one holds at most one fire; overlap is judged on the schedule's last run.
-- validate-then-write: every argument and group is checked, the schedule and the
--          previous run read, before the first write; the writes after it encode only
--          strings and numbers, which cannot fail.
--- @include args
--- @include keys
--- @include events
--- @include fence
--- @include slots
--- @include lanes
--- @include family
--- @include finalize
--- @include schedule
--- @include create

check_argc(@groups - 1)
check_groups(@groups, @FireGroup)
local id = ARGV[@schedule_id]
local mode = enum_arg(ARGV[@mode], 'mode', {'tick', 'buffered', 'trigger', 'backfill'})
local expected
if mode == 'tick' then
  expected = int_arg(ARGV[@expected_ms], 'expected_ms', 0)
end
local version = int_arg(ARGV[@version], 'version', 1)
local next_ms
if ARGV[@next_ms] ~= '' then
  next_ms = int_arg(ARGV[@next_ms], 'next_ms', 0)
end
local missed = int_arg(ARGV[@missed], 'missed', 0)
local OVERLAP = {'skip', 'allow', 'cancel_previous', 'buffer_one'}
if ARGV[@overlap] ~= '' then
  enum_arg(ARGV[@overlap], 'overlap', OVERLAP)
end
local default_ttl = int_arg(ARGV[@queued_ttl_ms], 'queued_ttl_ms', 1)
int_arg(ARGV[@maxlen], 'maxlen', 0)
local retention = retention_arg(ARGV[@retention])

-- The fire groups as {fire_ms, run_id}, oldest first: each run id of the schedule's
-- queue, the fire times increasing and all before next_ms.
local function fires_arg(queue)
  local fires = {}
  local last_fire
  for i = @groups, #ARGV, @FireGroup do
    local fire_ms = int_arg(ARGV[i + @FireGroup.fire_ms], 'fire_ms', 0)
    local run_id = run_id_arg(ARGV[i + @FireGroup.run_id])
    if string.sub(run_id, 1, #queue + 1) ~= queue .. '.' then
      bad_argument('run_id (not of the schedule\'s queue)', run_id)
    end
    if last_fire and fire_ms <= last_fire then
      bad_argument('fire_ms (not increasing)', ARGV[i + @FireGroup.fire_ms])
    end
    last_fire = fire_ms
    fires[#fires + 1] = {fire_ms, run_id}
  end
  if next_ms and last_fire and next_ms <= last_fire then
    bad_argument('next_ms (not after the fires)', ARGV[@next_ms])
  end
  return fires
end

-- Whether the fires are stale (CONFLICT): the schedule's version moved, a tick's fire
-- time is no longer its due score (another reconciler fired it), is ahead of the Redis
-- clock or the schedule is paused, or a buffered fire is not the one buffer_one holds.
local function superseded(s, fires, now)
  if tonumber(s[1]) ~= version then
    return true
  end
  if mode == 'tick' then
    local score = redis.call('ZSCORE', KEYS[2], id)
    if not score or tonumber(score) ~= expected or expected > now or s[12] == '1' then
      return true
    end
  end
  return mode == 'buffered' and (#fires ~= 1 or tostring(fires[1][1]) ~= s[14]
    or fires[1][2] ~= s[15])
end

local s = redis.call('HMGET', KEYS[1], 'version', 'queue', 'handler', 'input',
  'max_attempts', 'on_lease_expired', 'metadata', 'budget', 'retention_ms', 'queued_ttl_ms',
  'overlap', 'paused', 'last_run_id', 'buffered_fire_ms', 'buffered_run_id', 'rate_limits')
if not s[1] then
  return {'NOT_FOUND', {}, 0, 0, {}}
end
local queue = s[2]
local fires = fires_arg(queue)
local now = now_ms()
if superseded(s, fires, now) then
  return {'CONFLICT', {}, 0, 0, {}}
end

local overlap = ARGV[@overlap] ~= '' and ARGV[@overlap] or s[11]
local k = {leases = KEYS[7], run_prefix = KEYS[8], events_prefix = KEYS[9],
  idem_prefix = KEYS[10]}
local q = {ready = KEYS[4], runs = KEYS[5], unclaimed = KEYS[6], wake = ARGV[@wake_channel],
  maxlen = ARGV[@maxlen]}
local queued_ttl = tonumber(s[10]) or default_ttl
local previous = s[13]
local buffered = tonumber(s[14] or '') ~= nil and s[15] ~= nil

-- A run's status, fence and owner while it has not ended, else nil: overlap is judged on
-- the schedule's last run.
local function active(run_id)
  if not run_id or run_id == '' then
    return nil
  end
  local cur = redis.call('HMGET', KEYS[8] .. run_id, 'status', 'fence', 'owner_id')
  if cur[1] and not TERMINAL[cur[1]] then
    return cur
  end
  return nil
end

local created, cancelled, skipped, held = {}, {}, 0, 0
local function materialize(fire_ms, run_id, trigger)
  local run_key = KEYS[8] .. run_id
  redis.call('HSET', run_key,
    'id', run_id, 'queue', queue, 'handler', s[3], 'status', 'queued', 'input', s[4],
    'attempt', 1, 'max_attempts', s[5], 'on_lease_expired', s[6], 'fence', 0,
    'created_at', now, 'metadata', s[7], 'idempotency_key', '', 'budget', s[8] or '',
    'retention_ms', s[9] or '', 'traceparent', '', 'rate_limits', s[16] or '',
    'schedule_id', id, 'fire_ms', fire_ms, 'root_id', run_id)
  local data = cjson.encode({handler = s[3], queue = queue, max_attempts = tonumber(s[5]),
    schedule_id = id, fire_ms = fire_ms, trigger = trigger or mode})
  enter_queue(run_key, KEYS[9] .. run_id, run_id, q, data, now, now, queued_ttl)
  created[#created + 1] = run_id
  previous = run_id
  redis.call('HSET', KEYS[1], 'last_run_id', run_id, 'last_fire_ms', fire_ms)
  redis.call('HINCRBY', KEYS[1], 'fired_count', 1)
end

-- The fire buffer_one held leaves the buffer (it is about to run, or its run exists).
local function unbuffer()
  redis.call('HDEL', KEYS[1], 'buffered_fire_ms', 'buffered_run_id')
  redis.call('ZREM', KEYS[3], id)
  buffered = false
end

-- One fire, as the overlap policy says while the previous run has not ended. Returns
-- the reply when the call ends at this fire (a buffered fire whose previous run still
-- runs), else nil.
local function fire_one(fire_ms, run_id)
  local prev = active(previous)
  if redis.call('EXISTS', KEYS[8] .. run_id) == 1 then
    skipped = skipped + 1  -- this fire's run was made already (a repeated backfill)
  elseif mode == 'buffered' then
    if prev then
      return {'CONFLICT', {}, 0, 1, {}}  -- still running: the fire stays buffered
    end
    unbuffer()
    materialize(fire_ms, run_id)
  elseif not prev or overlap == 'allow' then
    materialize(fire_ms, run_id)
  elseif overlap == 'cancel_previous' then
    cancel_unended(k, previous, prev, now, 'schedule_overlap', retention, ARGV[@maxlen])
    cancelled[#cancelled + 1] = previous
    materialize(fire_ms, run_id)
  elseif overlap == 'buffer_one' and not buffered then
    redis.call('HSET', KEYS[1], 'buffered_fire_ms', fire_ms, 'buffered_run_id', run_id)
    redis.call('ZADD', KEYS[3], fire_ms, id)
    buffered = true
    held = 1
  else
    skipped = skipped + 1  -- skip while the previous runs; buffer_one already holds one
  end
  return nil
end

-- A fire buffer_one held goes first once the previous run has ended, even when a newer
-- fire (a tick, a trigger) gets here before the pass that starts buffered fires.
local function start_held_fire()
  if buffered and mode ~= 'buffered' and not active(previous) then
    unbuffer()
    if redis.call('EXISTS', KEYS[8] .. s[15]) == 0 then
      materialize(tonumber(s[14]), s[15], 'buffered')
    end
  end
end

-- The schedule's counters of dropped fires, and a tick's move of its due score past
-- the fires (the step that makes a racing reconciler's tick a CONFLICT).
local function count_and_advance()
  if skipped > 0 then
    redis.call('HINCRBY', KEYS[1], 'skipped_count', skipped)
  end
  if mode == 'tick' then
    if missed > 0 then
      redis.call('HINCRBY', KEYS[1], 'missed_count', missed)
    end
    set_next_fire(KEYS[1], KEYS[2], id, next_ms)
  end
end

start_held_fire()
for _, fire in ipairs(fires) do
  local reply = fire_one(fire[1], fire[2])
  if reply then
    return reply
  end
end
count_and_advance()
return {'OK', created, skipped, held, cancelled}
