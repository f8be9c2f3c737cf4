-- start_effect: before a handler's side effect runs, look up its record or open one.
--
-- KEYS[1]  run          hash    the run's record (field open_effects)
-- KEYS[2]  events       stream  the run's events
-- KEYS[3]  effects      hash    the run's effects: field -> record json
-- KEYS[4]  leases       zset    id -> lease expiry ms (a parked run leaves it)
-- ARGV[1]  owner_id     string
-- ARGV[2]  fence        integer
-- ARGV[3]  run_id       string
-- ARGV[4]  field        string  the effect's field: <name>:<ordinal>
-- ARGV[5]  key          string  the effect's idempotency key, handed to the side effect
-- ARGV[6]  name         string
-- ARGV[7]  ordinal      integer the call's number among this run's calls of this name
-- ARGV[8]  idempotent   0 | 1   whether calling it again with the same key is safe
-- ARGV[9]  maxlen       integer approximate cap of the event stream
-- ARGV[10] position     integer the step's place among the run's steps, noted when it opens:
--          the worker's count from the last checkpoint; '' notes nothing (includes/steps.lua)
-- returns  {code, payload}  codes: OK (started: run it; payload is how many times it
--          has been started, 1 the first time), REPLAYED (recorded before: payload is
--          its result json; do not run it), UNKNOWN (started before without a recorded
--          outcome and not idempotent: the run is now reconciliation_required; payload
--          is the record), LOST (fenced out: nothing written)
-- events   effect {phase: started | replayed}, or reconciliation_required
-- invariant: a side effect is never started twice unless it is idempotent: a started
--          record without an outcome parks the run for a person instead (fence+1, so
--          this owner can write nothing more). The same owner and fence starting it
--          again (a retry after a lost reply) gets OK and changes nothing.
-- validate-then-write: the arguments are checked, the holder, the record and the open
--          list read and decoded, and every record and event encoded before the first
--          write.
--- @include args
--- @include keys
--- @include events
--- @include fence
--- @include slots
--- @include park
--- @include effects
--- @include steps

check_argc(@StartEffectArgs)
local owner, fence, run_id, field = ARGV[@owner_id], ARGV[@fence], ARGV[@run_id], ARGV[@field]
run_id_arg(run_id, KEYS[1], KEYS[2])
local ordinal = int_arg(ARGV[@ordinal], 'ordinal', 0)
enum_arg(ARGV[@idempotent], 'idempotent', {'0', '1'})
int_arg(ARGV[@maxlen], 'maxlen', 0)
local position = position_arg(ARGV[@position])
if not holds(KEYS[1], owner, fence) then
  return {'LOST', ''}
end
local now = now_ms()
local idempotent = ARGV[@idempotent] == '1'
local raw = redis.call('HGET', KEYS[3], field)
-- a new record joins the run's open list: read it now, before any branch writes
local open = not raw and open_effects(KEYS[1]) or nil
local record
if raw then
  record = cjson.decode(raw)
  if record.status == 'done' then
    local data = cjson.encode({phase = 'replayed', name = record.name, key = record.key,
      ordinal = record.ordinal})
    emit(KEYS[1], KEYS[2], 'effect', fence, now, data, ARGV[@maxlen])
    return {'REPLAYED', record.result}
  end
  if record.owner_id == owner and record.fence == tonumber(fence) then
    -- this owner's own start, sent again after a lost reply: nothing new happened
    return {'OK', tostring(record.starts)}
  end
  if not idempotent then
    local k = {leases = KEYS[4],
      run_prefix = string.sub(KEYS[1], 1, #KEYS[1] - #run_id),
      events_prefix = string.sub(KEYS[2], 1, #KEYS[2] - #run_id)}
    local fields, data = reconciliation_fields({record},
      {detected_by = 'executor', owner_id = owner, fence = tonumber(fence), detected_at_ms = now})
    require_reconciliation(k, run_id, now, fields, data, ARGV[@maxlen])
    return {'UNKNOWN', raw}
  end
  record.starts = (tonumber(record.starts) or 0) + 1
end
if open then
  record = {key = ARGV[@key], name = ARGV[@name], ordinal = ordinal, status = 'started',
    starts = 1, first_started_at_ms = now}
  open[#open + 1] = field
end
record.idempotent = idempotent
record.owner_id = owner
record.fence = tonumber(fence)
record.started_at_ms = now
local encoded = cjson.encode(record)
local data = cjson.encode({phase = 'started', name = record.name, key = record.key,
  ordinal = record.ordinal, starts = record.starts, idempotent = idempotent})
if open then
  set_open_effects(KEYS[1], open)
  note_step(KEYS[1], run_id, position, 'e|' .. field)
end
redis.call('HSET', KEYS[3], field, encoded)
emit(KEYS[1], KEYS[2], 'effect', fence, now, data, ARGV[@maxlen])
return {'OK', tostring(record.starts)}
