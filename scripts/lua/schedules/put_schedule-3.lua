-- put_schedule: create a schedule, or replace its spec and options (PATCH, pause, resume).
--
-- KEYS[1]  schedule     hash    the schedule's record
-- KEYS[2]  due          zset    the queue's schedule ids -> next fire time, epoch ms (UTC)
-- KEYS[3]  buffered     zset    the queue's schedule ids -> a fire held by buffer_one
-- ARGV[1]  schedule_id  string
-- ARGV[2]  mode         "create" | "update"
-- ARGV[3]  expected_version  integer the version the caller read ('' for any)
-- ARGV[4]  fields       json    object: record field -> string or number (spec, run options)
-- ARGV[5]  next_fire_ms integer the first fire time of the new spec, '' for none (paused,
--          or a spec that never fires again)
-- returns  {code, version, now_ms}  codes: OK, CONFLICT (create: the id exists; update: the
--          version moved since the caller read it), NOT_FOUND (update of a missing schedule)
-- events   none (a schedule has no stream; its runs have)
-- invariant: every change bumps `version`, and fire_schedule acts only on fire times
--          computed from the version it names: a reconciler holding an older spec fires
--          nothing. A schedule is in `due` exactly while it is not paused and has a next
--          fire time; pausing drops it, so nothing fires or is counted missed while paused,
--          and the caller computes the next fire from now when it resumes.
-- validate-then-write: the fields are decoded, each name checked against the ones a
--          schedule has and each value a string or a number, and the record read,
--          before the first HSET.
--- @include args
--- @include schedule

check_argc(@PutScheduleArgs)
local id = ARGV[@schedule_id]
if type(id) ~= 'string' or not string.match(id, '^[A-Za-z0-9_.%-]+$') or #id > 128 then
  bad_argument('schedule_id', id)
end
local mode = enum_arg(ARGV[@mode], 'mode', {'create', 'update'})
local expected
if ARGV[@expected_version] ~= '' then
  expected = int_arg(ARGV[@expected_version], 'expected_version', 0)
end
local fields = json_arg(ARGV[@fields], 'fields')
local next_fire
if ARGV[@next_fire_ms] ~= '' then
  next_fire = int_arg(ARGV[@next_fire_ms], 'next_fire_ms', 0)
end
local ALLOWED = {queue = true, handler = true, input = true, max_attempts = true,
  on_lease_expired = true, metadata = true, budget = true, retention_ms = true,
  queued_ttl_ms = true, cron = true, timezone = true, interval_ms = true, anchor_ms = true,
  overlap = true, missed = true, catchup_window_ms = true, paused = true, run = true,
  rate_limits = true}
if type(fields) ~= 'table' then
  bad_argument('fields', ARGV[@fields])
end
local pairs_out = {}
for name, value in pairs(fields) do
  if not ALLOWED[name] or (type(value) ~= 'string' and type(value) ~= 'number') then
    bad_argument('fields (' .. tostring(name) .. ')', ARGV[@fields])
  end
  pairs_out[#pairs_out + 1] = name
  pairs_out[#pairs_out + 1] = tostring(value)
end

local exists = redis.call('EXISTS', KEYS[1]) == 1
if mode == 'create' and exists then
  return {'CONFLICT', tonumber(redis.call('HGET', KEYS[1], 'version')) or 0, 0}
end
if mode == 'update' then
  if not exists then
    return {'NOT_FOUND', 0, 0}
  end
  local version = tonumber(redis.call('HGET', KEYS[1], 'version')) or 0
  if expected and expected ~= version then
    return {'CONFLICT', version, 0}
  end
end

local now = now_ms()
if #pairs_out > 0 then
  redis.call('HSET', KEYS[1], unpack(pairs_out))
end
if mode == 'create' then
  redis.call('HSET', KEYS[1], 'id', id, 'created_at', now, 'fired_count', 0, 'skipped_count', 0,
    'missed_count', 0)
end
redis.call('HSET', KEYS[1], 'updated_at', now)
local version = redis.call('HINCRBY', KEYS[1], 'version', 1)
set_next_fire(KEYS[1], KEYS[2], id, next_fire)
return {'OK', version, now}
