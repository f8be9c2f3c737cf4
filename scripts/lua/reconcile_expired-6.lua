-- reconcile_expired: apply the lease-expiry policy to runs whose lease ran out.
--
-- KEYS[1]  leases       zset    id -> lease expiry ms
-- KEYS[2]  ready        list    runnable ids (FIFO)
-- KEYS[3]  run_prefix   prefix  run keys are this prefix .. id (same hash tag)
-- KEYS[4]  events_prefix  prefix  event streams are this prefix .. id
-- KEYS[5]  idem_prefix  prefix  idempotency keys are this prefix .. key
-- KEYS[6]  effects_prefix  prefix  effects hashes are this prefix .. id
-- ARGV[1]  limit        integer how many expired leases to handle at most
-- ARGV[2]  retention    string  per-status retention spec (store/retention.py)
-- ARGV[3]  maxlen       integer
-- ARGV[4]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- returns  {code, actions}  codes: OK; actions is a list of {id, action, fence},
--          action being orphaned | requeued | cancelled | reconciliation_required
-- events   orphaned | cancelled (terminal), or lease_expired then requeued, or
--          reconciliation_required
-- invariant: only a lease that is expired by the Redis clock *now* is acted on (the
--          scan re-checks the record, not just the index); acting moves the fence,
--          so the old owner's later writes are all rejected. A run with a started,
--          non-idempotent effect whose outcome was never recorded is parked for a
--          person whatever on_lease_expired says: retrying could apply it twice.
--          Idempotent: a second reconciler finds nothing left to do. Run and effects
--          keys are derived from KEYS[3]/KEYS[6], like every batch script's.
--- @include lib

local k = {leases = KEYS[1], run_prefix = KEYS[3], events_prefix = KEYS[4],
  idem_prefix = KEYS[5]}
local retention = ARGV[2]
local maxlen = ARGV[3]
local now = now_ms()
local actions = {}

local function requeue(id, run_key, events_key, evidence)
  local fence = redis.call('HINCRBY', run_key, 'fence', 1)
  local attempt = redis.call('HINCRBY', run_key, 'attempt', 1)
  redis.call('HSET', run_key, 'status', 'queued')
  redis.call('HDEL', run_key, 'owner_id', 'lease_expires_at')
  redis.call('ZREM', KEYS[1], id)
  emit(run_key, events_key, 'lease_expired', fence, now, cjson.encode(evidence), maxlen)
  emit(run_key, events_key, 'requeued', fence, now,
    cjson.encode({reason = 'lease_expired', attempt = attempt}), maxlen)
  make_ready(KEYS[2], ARGV[4], id, false)
  return fence
end

local function orphan(id, run_key, evidence)
  local fence = redis.call('HINCRBY', run_key, 'fence', 1)
  local err = cjson.encode({code = 'lease_expired',
    message = 'orphaned: executor lease expired', retryable = false, details = evidence})
  finalize(k, id, 'orphaned', fence, now, {'error', err},
    cjson.encode({error = cjson.decode(err)}), retention, maxlen)
  return fence
end

local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now,
  'LIMIT', 0, tonumber(ARGV[1]))
for _, id in ipairs(expired) do
  local run_key = KEYS[3] .. id
  local cur = redis.call('HMGET', run_key, 'status', 'owner_id', 'fence',
    'lease_expires_at', 'last_renewed_at', 'on_lease_expired', 'attempt', 'max_attempts')
  local status, expires = cur[1], tonumber(cur[4])
  if status ~= 'running' and status ~= 'cancelling' then
    redis.call('ZREM', KEYS[1], id)
  elseif expires and expires >= now then
    redis.call('ZADD', KEYS[1], expires, id)
  else
    local evidence = {owner_id = cur[2], fence = tonumber(cur[3]),
      last_renewed_at_ms = tonumber(cur[5]), lease_expires_at_ms = expires,
      detected_at_ms = now}
    local unknown = unknown_effects(run_key, KEYS[6] .. id)
    local action, fence
    if status == 'cancelling' then
      action = 'cancelled'
      fence = redis.call('HINCRBY', run_key, 'fence', 1)
      if #unknown > 0 then
        evidence.unknown_effects = unknown
      end
      finalize(k, id, 'cancelled', fence, now, {},
        cjson.encode({reason = 'owner_lost', evidence = evidence}), retention, maxlen)
    elseif #unknown > 0 then
      action = 'reconciliation_required'
      evidence.detected_by = 'reconciler'
      fence = require_reconciliation(k, id, now, unknown, evidence, maxlen)
    elseif cur[6] == 'retry' and tonumber(cur[7]) < tonumber(cur[8]) then
      action = 'requeued'
      fence = requeue(id, run_key, KEYS[4] .. id, evidence)
    else
      action = 'orphaned'
      fence = orphan(id, run_key, evidence)
    end
    actions[#actions + 1] = {id, action, fence}
  end
end
return {'OK', actions}
