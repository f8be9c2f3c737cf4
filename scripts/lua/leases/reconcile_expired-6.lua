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
--          action being orphaned | requeued | cancelled | reconciliation_required |
--          released
-- events   orphaned | cancelled (terminal), or lease_expired then requeued, or
--          reconciliation_required, or released (reason handoff_undelivered)
-- invariant: only a lease that is expired by the Redis clock *now* is acted on (the
--          scan re-checks the record, not just the index); acting moves the fence,
--          so the old owner's later writes are all rejected. A run with a started,
--          non-idempotent effect whose outcome was never recorded is parked for a
--          person whatever on_lease_expired says: retrying could apply it twice.
--          A run handed off (includes/claim.lua hand_off) whose claim row is still
--          in its owner's inbox was never seen by any worker: whatever the policy,
--          it is taken out of the inbox and given back to its queue as release_runs
--          gives a run back (lib's release_run: at the head, attempt kept, fence
--          moved; cancelled if a cancel is pending). A row the worker moved to its
--          `taken` list keeps the policy: the worker may have started it.
--          Idempotent: a second reconciler finds nothing left to do. Run and effects
--          keys are derived from KEYS[3]/KEYS[6], like every batch script's, and a
--          hand-off inbox from KEYS[3]'s tag and the record's owner. Every
--          expired lease acted on counts once in the queue's `lease_expired` series,
--          except a released hand-off: no worker ever held that lease, so it is no
--          expiry an operator should be alerted on.
-- validate-then-write: the numbers are checked, then every expired run is read (and
--          its owner's inbox), its effects decoded and its events encoded, all before
--          the first write.
--- @include args
--- @include keys
--- @include events
--- @include fence
--- @include slots
--- @include lanes
--- @include park
--- @include family
--- @include finalize
--- @include effects

check_argc(@ReconcileArgs)
local k = {leases = KEYS[1], ready = KEYS[2], run_prefix = KEYS[3], events_prefix = KEYS[4],
  idem_prefix = KEYS[5]}
local limit = int_arg(ARGV[@limit], 'limit', 0)
local retention = retention_arg(ARGV[@retention])
local maxlen = ARGV[@maxlen]
int_arg(maxlen, 'maxlen', 0)
local now = now_ms()

-- When the holder last renewed, by the Redis clock: a claim is its attempt's first
-- renewal (started_at; claim_core writes no last_renewed_at of its own), renew_leases
-- writes last_renewed_at, and one an earlier attempt wrote is older than this
-- attempt's started_at: the later of the two.
local function renewed_at(last_renewed, started)
  local renewed, claimed = tonumber(last_renewed), tonumber(started)
  if renewed and claimed then
    return math.max(renewed, claimed)
  end
  return renewed or claimed
end

-- The claim row of this lease (run id, fence) still in its owner's hand-off inbox, or
-- nil: then no worker ever read it (a row read is moved to `taken` in the same step).
local tag = tag_of_prefix(KEYS[3])
local function undelivered(owner, id, fence)
  if not owner then
    return nil
  end
  local inbox = handoff_inbox_of(tag, owner)
  for _, raw in ipairs(redis.call('LRANGE', inbox, 0, -1)) do
    local ok, row = pcall(cjson.decode, raw)
    if ok and type(row) == 'table' and row[1] == id and tostring(row[2]) == fence then
      return inbox, raw
    end
  end
  return nil
end

-- What to do with a lease the scan found expired and why, decided before any write: a
-- hand-off no worker read is given back, a cancel ends it, an unknown effect parks it
-- for a person, else the run's on_lease_expired policy (retry while attempts remain).
local function plan_expired(plan, cur, status, expires)
  local id, run_key = plan.id, plan.run_key
  local evidence = {owner_id = cur[2], fence = tonumber(cur[3]),
    last_renewed_at_ms = renewed_at(cur[5], cur[9]), lease_expires_at_ms = expires,
    detected_at_ms = now}
  local inbox, row = undelivered(cur[2], id, cur[3])
  local unknown = inbox and {} or unknown_effects(run_key, KEYS[6] .. id)
  if inbox then
    plan.action = status == 'cancelling' and 'cancelled' or 'released'
    plan.inbox, plan.row = inbox, row
    plan.release = release_plan(status, cur[2], 'handoff_undelivered', 0, now)
  elseif status == 'cancelling' then
    plan.action = 'cancelled'
    if #unknown > 0 then
      evidence.unknown_effects = unknown
    end
    plan.data = cjson.encode({reason = 'owner_lost', evidence = evidence})
  elseif #unknown > 0 then
    plan.action = 'reconciliation_required'
    evidence.detected_by = 'reconciler'
    plan.fields, plan.data = reconciliation_fields(unknown, evidence)
  elseif cur[6] == 'retry' and (tonumber(cur[7]) or 1) < (tonumber(cur[8]) or 1) then
    plan.action = 'requeued'
    plan.data = cjson.encode(evidence)
    plan.attempt = tonumber(cur[7]) + 1
    plan.requeued = cjson.encode({reason = 'lease_expired', attempt = plan.attempt})
  else
    plan.action = 'orphaned'
    local err = {code = 'lease_expired', message = 'executor lease expired',
      retryable = false, details = evidence}
    plan.fields = {'error', cjson.encode(err)}
    plan.data = cjson.encode({error = err})
  end
end

-- The plan for one lease the index says expired: the record is read again, as the
-- index may be stale (the run ended: drop; renewed since: reindex).
local function plan_for(id)
  local run_key = KEYS[3] .. id
  local cur = redis.call('HMGET', run_key, 'status', 'owner_id', 'fence',
    'lease_expires_at', 'last_renewed_at', 'on_lease_expired', 'attempt', 'max_attempts',
    'started_at')
  local status, expires = cur[1], tonumber(cur[4])
  local plan = {id = id, run_key = run_key}
  if status ~= 'running' and status ~= 'cancelling' then
    plan.action = 'drop'
  elseif expires and expires >= now then
    plan.action = 'reindex'
    plan.expires = expires
  else
    plan_expired(plan, cur, status, expires)
  end
  return plan
end

-- Carry out an expired lease's plan: the fence moves in every branch, so the old owner's
-- later writes are rejected. Returns the new fence.
local function act_on(plan)
  local id, run_key = plan.id, plan.run_key
  local fence
  if plan.release then
    redis.call('LREM', plan.inbox, 1, plan.row)
    fence = release_run(k, id, plan.release, ARGV[@wake_channel], retention, maxlen, now)
  elseif plan.action == 'reconciliation_required' then
    fence = require_reconciliation(k, id, now, plan.fields, plan.data, maxlen)
  elseif plan.action == 'requeued' then
    local events_key = KEYS[4] .. id
    fence = redis.call('HINCRBY', run_key, 'fence', 1)
    redis.call('HSET', run_key, 'attempt', plan.attempt, 'status', 'queued')
    redis.call('HDEL', run_key, 'owner_id', 'lease_expires_at')
    redis.call('ZREM', KEYS[1], id)
    emit(run_key, events_key, 'lease_expired', fence, now, plan.data, maxlen)
    emit(run_key, events_key, 'requeued', fence, now, plan.requeued, maxlen)
    make_ready(KEYS[2], ARGV[@wake_channel], id, false)
  else
    -- cancelled or orphaned: a terminal state with the fence moved on
    fence = redis.call('HINCRBY', run_key, 'fence', 1)
    finalize(k, id, plan.action, fence, now, plan.fields or {}, plan.data, retention, maxlen)
  end
  if not plan.release then
    count_outcome(k.run_prefix, 'lease_expired', now)
  end
  return fence
end

-- read and decide for every expired lease first: the plans hold what gets written
local plans = {}
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  plans[#plans + 1] = plan_for(id)
end

local actions = {}
for _, plan in ipairs(plans) do
  if plan.action == 'drop' then
    redis.call('ZREM', KEYS[1], plan.id)
  elseif plan.action == 'reindex' then
    redis.call('ZADD', KEYS[1], plan.expires, plan.id)
  else
    actions[#actions + 1] = {plan.id, plan.action, act_on(plan)}
  end
end
return {'OK', actions}
