-- resolve_run: a person decides what happens to a run parked in reconciliation_required.
--
-- KEYS[1]  run          hash    the run's record
-- KEYS[2]  events       stream  the run's events
-- KEYS[3]  effects      hash    the run's effects: field -> record json
-- KEYS[4]  leases       zset    id -> lease expiry ms
-- KEYS[5]  ready        list    runnable ids (FIFO)
-- KEYS[6]  idem_prefix  prefix  idempotency keys are this prefix .. key
-- ARGV[1]  run_id       string
-- ARGV[2]  action       retry | fail | succeed
-- ARGV[3]  output       json    the run's output when action is succeed, else ''
-- ARGV[4]  effect_outcome  applied | not_applied | ''  what the person found out about
--          the effects whose outcome was unknown ('' leaves their records as they are)
-- ARGV[5]  effect_result  json  the result to record when applied ('' records null)
-- ARGV[6]  note         string  why, in the person's words ('' for none)
-- ARGV[7]  retention    string  per-status retention spec (store/retention.py)
-- ARGV[8]  maxlen       integer
-- ARGV[9]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- returns  {code, status}  codes: OK (status is the run's status afterwards: queued,
--          failed or succeeded), NOT_FOUND, INVALID (the run is not waiting for a
--          reconciliation: status says what it is)
-- events   resolved, then failed | succeeded (terminal) when the decision ends the run
-- invariant: only a reconciliation_required run is resolved, and the decision is an
--          event written with its effect. applied marks the unknown effects done, so a
--          retried run replays them; not_applied drops their records, so it runs them
--          again. A retry is queued at the head of the line with fence+1; a retry of a
--          run parked for version_drift forgets its recorded step order (the '~' fields
--          of includes/steps.lua), so it goes on under the code it now meets.
-- validate-then-write: the arguments are checked, the record, the previous error and
--          the unknown effects read and decoded, and every record and event encoded
--          before the first write.
--- @include args
--- @include keys
--- @include events
--- @include slots
--- @include lanes
--- @include family
--- @include finalize
--- @include effects
--- @include steps

check_argc(@ResolveArgs)
local run_id, action, outcome = ARGV[@run_id], ARGV[@action], ARGV[@effect_outcome]
run_id_arg(run_id, KEYS[1], KEYS[2])
enum_arg(action, 'action', {'retry', 'fail', 'succeed'})
enum_arg(outcome, 'effect_outcome', {'applied', 'not_applied', ''})
local retention = retention_arg(ARGV[@retention])
local maxlen = ARGV[@maxlen]
int_arg(maxlen, 'maxlen', 0)
if ARGV[@output] ~= '' then
  json_arg(ARGV[@output], 'output')
end
if ARGV[@effect_result] ~= '' then
  json_arg(ARGV[@effect_result], 'effect_result')
end
local cur = redis.call('HMGET', KEYS[1], 'status', 'fence', 'error')
local status = cur[1]
if not status then
  return {'NOT_FOUND', ''}
end
if status ~= 'reconciliation_required' then
  return {'INVALID', status}
end
local now = now_ms()

-- What settling every effect whose outcome was unknown writes, as the person found it:
-- the settled effects' keys, and field -> encoded record (applied) or false
-- (not_applied: the record is dropped).
local function settle_effects()
  local settled = {}
  local rewrites = {}
  for _, field in ipairs(open_effects(KEYS[1])) do
    local raw = redis.call('HGET', KEYS[3], field)
    if raw then
      local record = cjson.decode(raw)
      settled[#settled + 1] = record.key
      if outcome == 'applied' then
        record.status = 'done'
        record.result = ARGV[@effect_result] ~= '' and ARGV[@effect_result] or 'null'
        record.resolved_at_ms = now
        rewrites[#rewrites + 1] = {field, cjson.encode(record)}
      else
        rewrites[#rewrites + 1] = {field, false}
      end
    end
  end
  return settled, rewrites
end

local settled, rewrites = {}, {}
if outcome ~= '' then
  settled, rewrites = settle_effects()
end

-- a drifted run retried: the step order it recorded is forgotten (the person accepts the
-- code it will meet); its effects' records stay, replayed by name and number
local drifted = action == 'retry' and cur[3] and string.find(cur[3], '"version_drift"', 1, true)
local step_fields = drifted and step_fields_of(KEYS[3]) or {}
local decision = {action = action, steps_forgotten = drifted and #step_fields - 1 or nil}
if ARGV[@note] ~= '' then
  decision.note = ARGV[@note]
end
if outcome ~= '' then
  decision.effect_outcome = outcome
  decision.effects = settled
end
local resolved = cjson.encode(decision)
local k = {leases = KEYS[4], idem_prefix = KEYS[6],
  run_prefix = string.sub(KEYS[1], 1, #KEYS[1] - #run_id),
  events_prefix = string.sub(KEYS[2], 1, #KEYS[2] - #run_id)}
local failed_fields, failed_data
if action == 'fail' then
  local previous = cur[3] and cjson.decode(cur[3]) or cjson.null
  local err = {code = 'resolved_as_failed', message = 'a person resolved the run as failed',
    retryable = false, details = {decision = decision, previous_error = previous}}
  failed_fields, failed_data = {'error', cjson.encode(err)}, cjson.encode({error = err})
end

-- The effects' records as settled, and none left open.
local function write_settled(rewrites)
  for _, rewrite in ipairs(rewrites) do
    if rewrite[2] then
      redis.call('HSET', KEYS[3], rewrite[1], rewrite[2])
    else
      redis.call('HDEL', KEYS[3], rewrite[1])
    end
  end
  if outcome ~= '' then
    set_open_effects(KEYS[1], {})
  end
end

-- A retry: queued at the head of the line with fence+1, out of the parked index.
local function requeue(k, resolved)
  local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
  redis.call('HSET', KEYS[1], 'status', 'queued', 'resolved_at', now)
  redis.call('HDEL', KEYS[1], 'error', 'parked_at')
  redis.call('ZREM', parked_of(k.run_prefix), run_id)
  emit(KEYS[1], KEYS[2], 'resolved', fence, now, resolved, maxlen)
  make_ready(KEYS[5], ARGV[@wake_channel], run_id, true)
end

-- every check is done: write
write_settled(rewrites)
if #step_fields > 0 then
  redis.call('HDEL', KEYS[3], unpack(step_fields))
end
if action == 'retry' then
  requeue(k, resolved)
  return {'OK', 'queued'}
end

local fence = cur[2]
emit(KEYS[1], KEYS[2], 'resolved', fence, now, resolved, maxlen)
if action == 'succeed' then
  local output = ARGV[@output] ~= '' and ARGV[@output] or 'null'
  finalize(k, run_id, 'succeeded', fence, now, {'output', output}, '{}', retention, maxlen)
  return {'OK', 'succeeded'}
end
finalize(k, run_id, 'failed', fence, now, failed_fields, failed_data, retention, maxlen)
return {'OK', 'failed'}
