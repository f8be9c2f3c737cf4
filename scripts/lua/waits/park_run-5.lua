-- park_run: a handler waits (ctx.sleep, ctx.wait_for_signal, ctx.ask_human): the run is
--          parked without a lease until its time, its signal or a person's answer.
--
-- KEYS[1]  run          hash    the run's record
-- KEYS[2]  events       stream  the run's events
-- KEYS[3]  waits        hash    the run's waits: '<kind>:<name>:<ordinal>' -> record json,
--                               'inbox:<name>' -> json list of pending signal payloads,
--                               'inbox_count' -> pending signals in all
-- KEYS[4]  leases       zset    id -> lease expiry ms
-- KEYS[5]  delayed      zset    id -> epoch ms it may run (the promotion path claims use)
-- ARGV[1]  owner_id     string
-- ARGV[2]  fence        integer
-- ARGV[3]  run_id       string
-- ARGV[4]  kind         string  sleep | signal | human
-- ARGV[5]  ordinal      integer this call's place among the run's waits of that kind and name
-- ARGV[6]  name         string  the sleep's or question's name, or the signal's
-- ARGV[7]  duration_ms  integer how long from now (the Redis clock) the wait lasts, '' for none
-- ARGV[8]  at_ms        integer epoch ms the wait ends at (sleep_until), '' for none; a sleep
--          needs one of the two, a signal may have one (its timeout), a question none. Only
--          the first call of a step sets the deadline: a replay keeps the recorded one
-- ARGV[9]  question     json    what ctx.ask_human asks ('' for the other kinds)
-- ARGV[10] maxlen       integer approximate cap of the event stream
-- ARGV[11] wake_channel string  pub/sub channel idle workers of the queue listen on
-- ARGV[12] max_waits    integer how many fields the waits hash may hold (steps and inbox):
--          a new step past it is refused (LEASEHOLD_MAX_WAITS_PER_RUN)
-- ARGV[13] position     integer the step's place among the run's steps, noted when it is new:
--          the worker's count from the last checkpoint; '' notes nothing (includes/steps.lua)
-- returns  {code, value}  codes: OK (parked: status waiting, or waiting_human for a
--          question; value is until_ms or ''), REPLAYED (the wait is over: its sleep ended,
--          its signal came, or its question was answered; value is the payload json, ''
--          for a sleep), TIMEOUT (the signal did not come by until_ms: value), CANCEL (a
--          client is cancelling the run: not parked), FULL (a new step past max_waits: value
--          is the count; nothing written), LOST (fenced out: nothing written)
-- events   wait {kind, subject, step, until_ms} (sleep, signal), waiting_human
--          {reason: ask_human, question, step} (question)
-- invariant: a parked run holds no lease (ZREM leases, fence+1, owner dropped), so its
--          former owner can write nothing more; it is woken only through the delayed set
--          (its time) or signal_run / resume_run. A signal already in the inbox is
--          consumed here instead of parking, in the same step that would park, so no
--          signal is lost between a handler's check and its park. A step's record, once
--          done or timed out, answers every later call of it the same (the replay).
-- validate-then-write: every argument is checked and the question decoded, the record,
--          the inbox and the status read, and every record, event and field encoded,
--          before the first write (records and inboxes were encoded by these scripts
--          and decode).
--- @include args
--- @include keys
--- @include events
--- @include fence
--- @include slots
--- @include park
--- @include steps

check_argc(@ParkArgs)
local owner, fence = ARGV[@owner_id], ARGV[@fence]
local run_id = run_id_arg(ARGV[@run_id], KEYS[1], KEYS[2])
local kind = enum_arg(ARGV[@kind], 'kind', {'sleep', 'signal', 'human'})
local ordinal = int_arg(ARGV[@ordinal], 'ordinal', 1)
local name = wait_name_arg(ARGV[@name])

-- The wait's deadline arguments, duration_ms and at_ms: at most one of the two; a sleep
-- needs one, a question takes none.
local function deadline_args()
  local duration_ms, at_ms
  if ARGV[@duration_ms] ~= '' then
    duration_ms = int_arg(ARGV[@duration_ms], 'duration_ms', 0)
  end
  if ARGV[@at_ms] ~= '' then
    at_ms = int_arg(ARGV[@at_ms], 'at_ms', 0)
  end
  if (duration_ms and at_ms) or (kind == 'sleep' and not (duration_ms or at_ms))
      or (kind == 'human' and (duration_ms or at_ms)) then
    bad_argument('duration_ms / at_ms for a ' .. kind, ARGV[@duration_ms] .. '/' .. ARGV[@at_ms])
  end
  return duration_ms, at_ms
end

local duration_ms, at_ms = deadline_args()
local question
if kind == 'human' then
  question = json_arg(ARGV[@question], 'question')
end
local maxlen = int_arg(ARGV[@maxlen], 'maxlen', 0)
local max_waits = int_arg(ARGV[@max_waits], 'max_waits', 1)
local position = position_arg(ARGV[@position])
local step = kind .. ':' .. name .. ':' .. ordinal

local cur = redis.call('HMGET', KEYS[1], 'status', 'owner_id', 'fence')
if not holding(cur, owner, fence) then
  return {'LOST', ''}
end
local raw = redis.call('HGET', KEYS[3], step)
local record = raw and cjson.decode(raw)
if record and record.status == 'done' then
  return {'REPLAYED', record.payload or ''}
end
if record and record.status == 'timed_out' then
  return {'TIMEOUT', tostring(record.until_ms)}
end
if cur[1] == 'cancelling' then
  return {'CANCEL', ''}
end

if not record then
  local count = redis.call('HLEN', KEYS[3])
  if count >= max_waits then
    return {'FULL', tostring(count)}
  end
end

-- When the wait ends: only the first call of a step sets it, a replay keeps the recorded one.
local function deadline(now)
  if record then
    return record.until_ms
  elseif duration_ms then
    return now + duration_ms
  end
  return at_ms
end

local now = now_ms()
local until_ms = deadline(now)
record = record or {kind = kind, name = name, step = step, until_ms = until_ms,
  started_ms = now}

local inbox = {}
if kind == 'signal' then
  local pending = redis.call('HGET', KEYS[3], 'inbox:' .. name)
  inbox = pending and cjson.decode(pending) or {}
end

-- the wait is already over: record it, answer, and keep the lease
local function finish_step(status, fields, answer)
  if not raw then
    note_step(KEYS[1], run_id, position, 'w|' .. step)
  end
  record.status = status
  record.ended_ms = now
  local encoded = cjson.encode(record)
  redis.call('HSET', KEYS[3], step, encoded, unpack(fields))
  return answer
end

-- A signal already in the inbox is this step's answer: taken out of the inbox in the
-- step that would park, so none is lost between the handler's check and its park.
local function take_signal()
  record.payload = table.remove(inbox, 1)
  local rest = #inbox > 0 and cjson.encode(inbox) or nil
  local count = math.max(0, (tonumber(redis.call('HGET', KEYS[3], 'inbox_count')) or 1) - 1)
  local answer = finish_step('done', {'inbox_count', count}, {'REPLAYED', record.payload})
  if rest then
    redis.call('HSET', KEYS[3], 'inbox:' .. name, rest)
  else
    redis.call('HDEL', KEYS[3], 'inbox:' .. name)
  end
  return answer
end

-- Park the run: for a person (waiting_human, until resume_run), else waiting until its
-- time (the delayed set) or its signal (signal_run).
local function park_step()
  if not raw then
    note_step(KEYS[1], run_id, position, 'w|' .. step)
  end
  record.status = 'waiting'
  local record_json = cjson.encode(record)
  local run_prefix = string.sub(KEYS[1], 1, #KEYS[1] - #run_id)
  local k = {leases = KEYS[4], run_prefix = run_prefix,
    events_prefix = string.sub(KEYS[2], 1, #KEYS[2] - #run_id), delayed = KEYS[5]}
  if kind == 'human' then
    local escalation = cjson.encode({reason = 'ask_human', question = question, step = step})
    local waiting_for = cjson.encode({kind = kind, subject = name, step = step, since_ms = now})
    redis.call('HSET', KEYS[3], step, record_json)
    -- park gives back what the run holds (its slots, its singleton: release_held)
    park(k, run_id, 'waiting_human', now, {'escalation', escalation, 'waiting_for', waiting_for},
      escalation, maxlen)
    return {'OK', ''}
  end
  local data = cjson.encode({kind = kind, subject = name, step = step, until_ms = until_ms})
  local waiting_for = cjson.encode({kind = kind, subject = name, step = step,
    until_ms = until_ms, since_ms = now})
  redis.call('HSET', KEYS[3], step, record_json)
  park_waiting(k, KEYS[1], KEYS[2], run_id, now, data, waiting_for, until_ms, ARGV[@wake_channel], maxlen)
  return {'OK', until_ms and tostring(until_ms) or ''}
end

if kind == 'sleep' and until_ms <= now then
  return finish_step('done', {}, {'REPLAYED', ''})
end
if kind == 'signal' then
  if #inbox > 0 then
    return take_signal()
  end
  if until_ms and until_ms <= now then
    return finish_step('timed_out', {}, {'TIMEOUT', tostring(until_ms)})
  end
end
return park_step()
