-- record_effect: a worker records the outcome of a side effect it started.
--
-- KEYS[1]  run          hash    the run's record (field open_effects)
-- KEYS[2]  events       stream  the run's events
-- KEYS[3]  effects      hash    the run's effects: field -> record json
-- ARGV[1]  owner_id     string
-- ARGV[2]  fence        integer
-- ARGV[3]  field        string  the effect's field: <name>:<ordinal>
-- ARGV[4]  outcome      applied | not_applied  (not_applied: the side effect said it
--          certainly did not happen, so it may run again)
-- ARGV[5]  result       json    what the side effect returned ('' when not_applied)
-- ARGV[6]  maxlen       integer approximate cap of the event stream
-- returns  {code, ''}  codes: OK (recorded, or recorded already by this owner and
--          fence: a retry after a lost reply), LOST (fenced out: nothing written),
--          INVALID (no started record under this field: nothing written)
-- events   effect {phase: recorded | not_applied}
-- invariant: only the current holder records an outcome, once, for a record it
--          started; a stale owner that wakes after a takeover cannot replace the
--          result the new owner recorded.
-- validate-then-write: the arguments are checked, the holder and the record read and
--          decoded, and the record, the open list and the event encoded before the
--          first write.
--- @include args
--- @include events
--- @include fence
--- @include effects

check_argc(@RecordEffectArgs)
local owner, fence, field = ARGV[@owner_id], ARGV[@fence], ARGV[@field]
enum_arg(ARGV[@outcome], 'outcome', {'applied', 'not_applied'})
int_arg(ARGV[@maxlen], 'maxlen', 0)
if not holds(KEYS[1], owner, fence) then
  return {'LOST', ''}
end
local raw = redis.call('HGET', KEYS[3], field)
if not raw then
  -- dropped already (a not_applied sent again after a lost reply), or never started
  return {ARGV[@outcome] == 'not_applied' and 'OK' or 'INVALID', ''}
end
local record = cjson.decode(raw)
if record.status ~= 'started' then
  local mine = record.owner_id == owner and record.fence == tonumber(fence)
  return {mine and 'OK' or 'INVALID', ''}
end
local now = now_ms()
local phase = 'recorded'
local encoded
if ARGV[@outcome] == 'not_applied' then
  phase = 'not_applied'
else
  record.status = 'done'
  record.result = ARGV[@result]
  record.owner_id = owner
  record.fence = tonumber(fence)
  record.finished_at_ms = now
  encoded = cjson.encode(record)
end
local kept = still_open(KEYS[1], field)
local data = cjson.encode({phase = phase, name = record.name, key = record.key,
  ordinal = record.ordinal, starts = record.starts})
set_open_effects(KEYS[1], kept)
if encoded then
  redis.call('HSET', KEYS[3], field, encoded)
else
  redis.call('HDEL', KEYS[3], field)
end
emit(KEYS[1], KEYS[2], 'effect', fence, now, data, ARGV[@maxlen])
return {'OK', ''}
