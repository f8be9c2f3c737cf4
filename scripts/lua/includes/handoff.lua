-- handoff: a create hands a new run to an idle worker (Temporal's "sync match"), claimed
-- through claim.lua's claim_core as that worker's own claim_runs call would claim it,
-- and claim_runs keeps the worker's registration for it.
-- Builds on: keys, claim.

-- The hand-off (Temporal's "sync match"): a worker with a free slot whose claim found
-- nothing registers in `<tag>handoff:idle` (owner -> registration expiry ms, Redis
-- clock) with what a claim needs on its behalf in `<tag>handoff:args` (owner ->
-- "<lease ttl ms> <events maxlen> <promote max> <build id>"; a registration of a worker
-- from before builds has no build id); claim_runs writes both. One
-- registration is one hand-off at most: the hand-off consumes it.
local HANDOFF_IDLE, HANDOFF_ARGS = 'handoff:idle', 'handoff:args'

-- Claim one run for one live registration of the queue (tag as lib's), through
-- claim_core: the run is the one a claim_runs call by that worker would get now, or
-- none (nothing claimable: the registration stays). The claim's row (claim_row, JSON)
-- goes to the worker's inbox list (lib's handoff_inbox_of), which it waits on
-- (BLMOVE). Returns whether a run was handed off. An expired registration is skipped
-- (its worker may be dead); its worker's next claim removes it.
local function hand_off(tag, now)
  local idle = redis.call('ZRANGEBYSCORE', tag .. HANDOFF_IDLE, '(' .. now, '+inf', 'LIMIT', 0, 1)
  if #idle == 0 then
    return false
  end
  local owner = idle[1]
  local args = redis.call('HGET', tag .. HANDOFF_ARGS, owner) or ''
  local ttl, maxlen, promote_max, build = string.match(args, '^(%d+) (%d+) (%d+) ?([%w._-]*)$')
  if not ttl then
    return false  -- never written so by claim_runs; nothing is claimed on its word
  end
  local claimed = claim_core({ready = tag .. 'ready', delayed = tag .. 'delayed',
    leases = tag .. 'leases', run_prefix = tag .. 'run:', events_prefix = tag .. 'events:',
    owner = owner, ttl = tonumber(ttl), maxlen = maxlen, now = now, build = build}, 1,
    tonumber(promote_max))
  if #claimed == 0 then
    return false
  end
  redis.call('ZREM', tag .. HANDOFF_IDLE, owner)
  redis.call('HDEL', tag .. HANDOFF_ARGS, owner)
  redis.call('RPUSH', handoff_inbox_of(tag, owner), cjson.encode(claimed[1]))
  return true
end

-- Registrations whose time is over (a worker killed or gone for good never removes its
-- own; a restarted one comes back under a new owner id) are removed, HANDOFF_PRUNE at most
-- per call, with what a claim needed on their behalf: the idle set and its hash stay as
-- large as the workers alive, whatever the churn. Safe for a living worker whose
-- registration lapsed: no hand-off reaches an expired one, and its next claim registers
-- it again (its kept slot goes into that claim whatever the removal answers).
local HANDOFF_PRUNE = 8
local function prune_registrations(tag, now)
  local over = redis.call('ZRANGEBYSCORE', tag .. HANDOFF_IDLE, '-inf', now, 'LIMIT', 0,
    HANDOFF_PRUNE)
  if #over > 0 then
    redis.call('ZREM', tag .. HANDOFF_IDLE, unpack(over))
    redis.call('HDEL', tag .. HANDOFF_ARGS, unpack(over))
  end
end

-- A claim_runs call's registration step for its owner (handoff_ms > 0: the worker
-- takes hand-offs): its registration is removed first (1 when it was still there, so
-- no run was handed to it since: the worker frees the slot it kept for it; 0 when a
-- hand-off consumed it, or there was none); then, when the claim got fewer runs than
-- asked (want > got), it registers again for handoff_ms. Returns removed, registered.
local function reregister(tag, owner, now, handoff_ms, want, got, args)
  local removed = redis.call('ZREM', tag .. HANDOFF_IDLE, owner)
  prune_registrations(tag, now)
  if got < want then
    redis.call('ZADD', tag .. HANDOFF_IDLE, now + handoff_ms, owner)
    redis.call('HSET', tag .. HANDOFF_ARGS, owner, args)
    return removed, 1
  end
  if removed == 1 then
    redis.call('HDEL', tag .. HANDOFF_ARGS, owner)
  end
  return removed, 0
end
