-- retry_run: re-run a run that ended failed, orphaned, cancelled or expired, as a new
-- linked run of the same queue that inherits its effect records (and its checkpoint);
-- it keeps the old run's start rate limits (the same gate applies to it).
--
-- KEYS[1]  old          hash    the ended run's record
-- KEYS[2]  old_effects  hash    the ended run's effects: field -> record json
-- KEYS[3]  run          hash    the new run's record
-- KEYS[4]  events       stream  the new run's events
-- KEYS[5]  effects      hash    the new run's effects
-- KEYS[6]  ready        list    runnable ids (FIFO)
-- KEYS[7]  runs         zset    every run of the queue by created_at ms
-- KEYS[8]  idem         string  the retry's idempotency key record (unused when ARGV[4] is '')
-- ARGV[1]  old_id       string  the run to re-run
-- ARGV[2]  run_id       string  the new run's id (same queue)
-- ARGV[3]  checkpoint   keep | drop   whether the new run starts from the old run's
--          last checkpoint (state and effect counts) or from the beginning
-- ARGV[4]  idempotency_key  string, '' for none
-- ARGV[5]  fingerprint  string  hash of what the retry asked for, for replay detection
-- ARGV[6]  max_attempts integer the new run's attempts, '' for the old run's
-- ARGV[7]  maxlen       integer approximate cap of the event stream
-- ARGV[8]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- ARGV[9]  queued_ttl_ms integer how long it may wait unclaimed before it ends `expired`
-- returns  {code, run_id, detail}  codes: OK (run_id is the new run; detail its
--          created_at ms), REPLAYED (this idempotency key with the same request, or this
--          new id, exists already: run_id is that run), CONFLICT (run_id is the run the
--          key or the old run's retried_by names; detail: 'key' or 'retried'),
--          NOT_FOUND, INVALID (detail: the old run's status, which cannot be re-run)
-- events   created (on the new run, with retry_of); the old run's stream gets nothing,
--          so it still ends with its one terminal event
-- invariant: a run is re-run at most once at a time: retried_by names the one new run
--          (a new one may be made only once that run is gone), the new run's retry_of
--          names the old one, and both are written in this one step. The new run's
--          effects hash is a copy of the old one's and its effect keys keep the first
--          run's id (retry_root), so a recorded effect is replayed, never called again,
--          and one whose outcome is unknown parks the new run for a person exactly as
--          a retry of the old run would have.
-- validate-then-write: the arguments are checked, both records, the idempotency key,
--          the old effects and the link read, and the event encoded before the first
--          SET; records are copied as stored (nothing is decoded).
--- @include args
--- @include keys
--- @include events
--- @include slots
--- @include lanes
--- @include effects
--- @include idempotency

-- field/value items copied per HSET (an even number: whole pairs)
local EFFECT_COPY_SLICE = 200

check_argc(@RetryArgs)
local old_id, run_id = ARGV[@old_id], ARGV[@run_id]
run_id_arg(old_id, KEYS[1])
run_id_arg(run_id, KEYS[3], KEYS[4])
local checkpoint = enum_arg(ARGV[@checkpoint], 'checkpoint', {'keep', 'drop'})
if ARGV[@max_attempts] ~= '' then
  int_arg(ARGV[@max_attempts], 'max_attempts', 1)
end
int_arg(ARGV[@maxlen], 'maxlen', 0)
local queued_ttl_ms = int_arg(ARGV[@queued_ttl_ms], 'queued_ttl_ms', 1)
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {'REPLAYED', run_id, ''}
end
local idem_key = ARGV[@idempotency_key]
local prior_code, prior_id = idempotent_prior(KEYS[8], idem_key, ARGV[@fingerprint])
if prior_code then
  return {prior_code, prior_id, prior_code == 'CONFLICT' and 'key' or ''}
end

local old = redis.call('HMGET', KEYS[1], 'status', 'queue', 'handler', 'input',
  'max_attempts', 'on_lease_expired', 'metadata', 'budget', 'retention_ms', 'traceparent',
  'retried_by', 'retry_root', 'state', 'effect_seq', 'open_effects', 'checkpoints',
  'rate_limits', 'ckey', 'skey', 'priority', 'boost_ms', 'fence', 'versioning')
if not old[1] then
  return {'NOT_FOUND', old_id, ''}
end
if not (old[1] == 'failed' or old[1] == 'orphaned' or old[1] == 'cancelled'
    or old[1] == 'expired') then
  return {'INVALID', old_id, old[1]}
end
local run_prefix = string.sub(KEYS[1], 1, #KEYS[1] - #old_id)
if old[11] and old[11] ~= '' and redis.call('EXISTS', run_prefix .. old[11]) == 1 then
  return {'CONFLICT', old[11], 'retried'}
end
local max_attempts = ARGV[@max_attempts] ~= '' and ARGV[@max_attempts] or old[5]
local root = (old[12] and old[12] ~= '') and old[12] or old_id
local effects = redis.call('HGETALL', KEYS[2])
local now = now_ms()
local data = cjson.encode({handler = old[3], queue = old[2],
  max_attempts = tonumber(max_attempts), retry_of = old_id, checkpoint = checkpoint})

if idem_key ~= '' then
  redis.call('SET', KEYS[8], run_id .. ' ' .. ARGV[@fingerprint])
end
redis.call('HSET', KEYS[3],
  'id', run_id, 'queue', old[2], 'handler', old[3], 'status', 'queued',
  'input', old[4], 'attempt', 1, 'max_attempts', max_attempts,
  -- the fence goes on from the old run's: a copied effect record started but never
  -- recorded (the old run cut mid-effect) can then never pass for the new holder's own
  -- start resent (same owner_id, same fence), so it is not called again
  'on_lease_expired', old[6], 'fence', tonumber(old[22]) or 0, 'created_at', now,
  'metadata', old[7] or '{}', 'idempotency_key', idem_key, 'budget', old[8] or '',
  'retention_ms', old[9] or '', 'traceparent', old[10] or '',
  'retry_of', old_id, 'retry_root', root, 'rate_limits', old[17] or '',
  -- a re-run counts against the same limits and singleton, at the same priority
  'ckey', old[18] or '', 'skey', old[19] or '', 'priority', old[20] or 0,
  'boost_ms', old[21] or 0, 'lane', lane_of(old[3], old[18], old[19]),
  -- a re-run is a top-level run of its own: its parent (if any) never spawned it; it
  -- keeps the versioning policy but no pin (its own first claim pins it)
  'root_id', run_id, 'versioning', old[23] or 'auto_upgrade')
if checkpoint == 'keep' and old[13] then
  redis.call('HSET', KEYS[3], 'state', old[13], 'effect_seq', old[14] or '',
    'checkpoints', old[16] or 0)
end
if old[15] and old[15] ~= '' then
  redis.call('HSET', KEYS[3], 'open_effects', old[15])
end
-- in slices: unpack of a whole large hash would pass Lua's stack limit after the writes
for first = 1, #effects, EFFECT_COPY_SLICE do
  redis.call('HSET', KEYS[5], unpack(effects, first, math.min(first + EFFECT_COPY_SLICE - 1,
    #effects)))
end
redis.call('HSET', KEYS[1], 'retried_by', run_id)
emit(KEYS[3], KEYS[4], 'created', 0, now, data, ARGV[@maxlen])
redis.call('ZADD', KEYS[7], now, run_id)
redis.call('ZADD', unclaimed_key_of(run_prefix), now + queued_ttl_ms, run_id)
make_ready(KEYS[6], ARGV[@wake_channel], run_id, false)
return {'OK', run_id, tostring(now)}
