-- signal_run: a client sends a named signal with a JSON payload to a run
--          (POST /runs/{id}/signals/{name}).
--
-- KEYS[1]  run          hash    the run's record
-- KEYS[2]  events       stream  the run's events
-- KEYS[3]  waits        hash    the run's waits (park_run): step records and the inbox
-- KEYS[4]  delayed      zset    id -> epoch ms it may run (the promotion path claims use)
-- ARGV[1]  run_id       string
-- ARGV[2]  name         string  the signal's name
-- ARGV[3]  payload      json    what the signal carries (bounded by the API)
-- ARGV[4]  max_pending  integer how many signals a run may hold unread (its inbox bound)
-- ARGV[5]  maxlen       integer approximate cap of the event stream
-- ARGV[6]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- ARGV[7]  signal_id    string  the client's Idempotency-Key for this signal, '' for none: the
--          same key again answers what the first did (REPLAYED), with another name or
--          payload CONFLICT; kept in the waits hash ('seen:<key>') as long as the run
-- ARGV[8]  max_waits    integer how many fields the waits hash may hold (park_run's bound);
--          a key past it is refused FULL like a full inbox
-- returns  {code, value}  codes: OK (value: delivered: the run waited for this signal and
--          is queued again; or buffered: kept in its inbox until a wait for it consumes
--          it), NOT_FOUND, INVALID (the run finished or is being cancelled, so no wait can
--          ever take it: value is its status), FULL (the inbox holds max_pending signals
--          already, or the waits hash max_waits fields: nothing written), REPLAYED (this
--          signal_id was sent before: value is what became of it; nothing written),
--          CONFLICT (this signal_id was sent before with another name or payload)
-- events   signal {name, delivered, step | pending}
-- invariant: a signal is never dropped silently: it wakes the wait that asks for it, or
--          is kept in order in the inbox (bounded), or is refused. A woken run is queued
--          through the delayed set at the Redis clock's now, so the claim path (and its
--          slots and limits) takes it; a run already promoted is not queued twice.
-- validate-then-write: the run id, name, payload, key and numbers are checked, the record,
--          its wait and the inbox read and decoded (written by these scripts), and every
--          record and event encoded, before the first write.
--- @include args
--- @include events
--- @include keys
--- @include park
--- @include finalize

check_argc(@SignalArgs)
local run_id = run_id_arg(ARGV[@run_id], KEYS[1], KEYS[2])
local name = wait_name_arg(ARGV[@name])
json_arg(ARGV[@payload], 'payload')
local max_pending = int_arg(ARGV[@max_pending], 'max_pending', 0)
local maxlen = int_arg(ARGV[@maxlen], 'maxlen', 0)
local signal_id = ARGV[@signal_id]
if #signal_id > 128 or (signal_id ~= '' and not string.match(signal_id, '^[A-Za-z0-9_.:%-]+$')) then
  bad_argument('signal_id', signal_id)
end
local max_waits = int_arg(ARGV[@max_waits], 'max_waits', 1)
local fingerprint = name .. ' ' .. redis.sha1hex(ARGV[@payload])

local cur = redis.call('HMGET', KEYS[1], 'status', 'waiting_for', 'fence')
local status = cur[1]
if not status then
  return {'NOT_FOUND', ''}
end
-- a repeat of a signal already taken answers what the first did, whatever the run is now
local seen_field = signal_id ~= '' and 'seen:' .. signal_id
local seen = seen_field and redis.call('HGET', KEYS[3], seen_field)
if seen then
  local first, outcome = string.match(seen, '^(.*) (%a+)$')
  return {first == fingerprint and 'REPLAYED' or 'CONFLICT', outcome}
end
if TERMINAL[status] or status == 'cancelling' then
  return {'INVALID', status}
end
if seen_field and redis.call('HLEN', KEYS[3]) >= max_waits then
  return {'FULL', 'waits'}
end
local now = now_ms()
local wait = status == 'waiting' and cur[2] and cjson.decode(cur[2])
local waited = wait and wait.kind == 'signal' and wait.subject == name
local raw = waited and redis.call('HGET', KEYS[3], wait.step)
local record = raw and cjson.decode(raw)
local pending = redis.call('HGET', KEYS[3], 'inbox:' .. name)
local inbox = pending and cjson.decode(pending) or {}

if waited then
  record = record or {kind = 'signal', name = name, step = wait.step}
  record.status = 'done'
  record.payload = ARGV[@payload]
  record.ended_ms = now
  local record_json = cjson.encode(record)
  local data = cjson.encode({name = name, delivered = true, step = wait.step})
  redis.call('HSET', KEYS[3], wait.step, record_json)
  if seen_field then
    redis.call('HSET', KEYS[3], seen_field, fingerprint .. ' delivered')
  end
  requeue_waiting(KEYS[1], KEYS[4], run_id, wait, now, ARGV[@wake_channel])
  emit(KEYS[1], KEYS[2], 'signal', cur[3], now, data, maxlen)
  return {'OK', 'delivered'}
end

local count = tonumber(redis.call('HGET', KEYS[3], 'inbox_count')) or 0
if count >= max_pending then
  return {'FULL', tostring(count)}
end
inbox[#inbox + 1] = ARGV[@payload]
local inbox_json = cjson.encode(inbox)
local data = cjson.encode({name = name, delivered = false, pending = count + 1})
redis.call('HSET', KEYS[3], 'inbox:' .. name, inbox_json, 'inbox_count', count + 1)
if seen_field then
  redis.call('HSET', KEYS[3], seen_field, fingerprint .. ' buffered')
end
emit(KEYS[1], KEYS[2], 'signal', cur[3], now, data, maxlen)
return {'OK', 'buffered'}
