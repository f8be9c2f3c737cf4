-- finalize: the one way a run ends: its terminal event, retention and counters, and all
-- it held given back.
-- Builds on: args, keys, events, fence, slots, lanes, family.

-- The terminal statuses, as app/models.py's TERMINAL_STATUSES (a test keeps them
-- equal): nothing changes a run in one but its retention or a delete.
local TERMINAL = {succeeded = true, failed = true, cancelled = true, orphaned = true,
  expired = true}

-- A retention spec argument, "succeeded=<ms> failed=<ms> ..." (store/retention.py): it
-- must name every terminal status, or retention_for would hand PEXPIRE a nil after
-- the terminal state was written.
local function retention_arg(spec)
  if type(spec) ~= 'string' then
    bad_argument('retention', spec)
  end
  for status in pairs(TERMINAL) do
    local ms = string.match(spec, status .. '=(%d+)')
    if not ms or #ms > 15 then
      bad_argument('retention (no ' .. status .. '=<ms>)', spec)
    end
  end
  return spec
end

-- A queue's outcome counters, one hash per minute (`<tag>:series:<minute>`, field: a
-- terminal status or `lease_expired` -> runs that came to it that minute), beside its
-- run records: store/keys.py builds the same name (a test holds the two equal). Each
-- bucket expires SERIES_KEEP_MS after its first count, so a queue holds at most ~61 of
-- them however busy it is: GET /queues/{name}/series reads the last hour from them.
local SERIES_KEEP_MS = 3660000

local function add_outcomes(run_prefix, kind, n, now)
  local key = queue_key_of(run_prefix, 'series:' .. math.floor(now / 60000))
  if redis.call('HINCRBY', key, kind, n) == n and redis.call('PTTL', key) < 0 then
    redis.call('PEXPIRE', key, SERIES_KEEP_MS)
  end
end

-- defer: a batch script's deferred writes (new_defer), or nil to count now.
local function count_outcome(run_prefix, kind, now, defer)
  if defer then
    defer.outcomes[kind] = (defer.outcomes[kind] or 0) + 1
  else
    add_outcomes(run_prefix, kind, 1, now)
  end
end

-- How long a run that ended in `status` is kept, in ms: its own `retention_ms` (own:
-- the field as read; set at create from the request's retention_s) or the value the
-- retention spec names for the status. The spec is one ARGV, "succeeded=<ms>
-- failed=<ms> ...", as store/retention.py encodes it for every terminal status: reading
-- it is a string.match, which cannot fail, so callers may use it after their first write.
-- The spec's value for a status is looked up once per script call (a batch that ends
-- fifty runs of one status scans the spec once, not fifty times).
local retention_memo = {}
local function retention_for(own, status, spec)
  local ms = tonumber(own)
  if ms then
    return ms
  end
  local of_spec = retention_memo[spec]
  if not of_spec then
    of_spec = {}
    retention_memo[spec] = of_spec
  end
  ms = of_spec[status]
  if ms == nil then
    ms = tonumber(string.match(spec, status .. '=(%d+)')) or false
    of_spec[status] = ms
  end
  return ms or nil
end

-- A batch script's writes that many runs share (finish_runs): the lease ZREMs and the
-- outcome counts gathered while it ends its runs, written once at its end by
-- flush_defer, one ZREM for every lease and one HINCRBY per status, not one of each per
-- run. Only for a script that reads neither the leases nor the counters after a
-- finalize.
local function new_defer()
  return {leases = {}, outcomes = {}}
end

-- One command over many members, in chunks (Lua's unpack takes a few thousand values).
local function call_chunked(command, key, members)
  for first = 1, #members, 1000 do
    redis.call(command, key, unpack(members, first, math.min(first + 999, #members)))
  end
end

local function flush_defer(k, defer, now)
  call_chunked('ZREM', k.leases, defer.leases)
  for kind, n in pairs(defer.outcomes) do
    add_outcomes(k.run_prefix, kind, n, now)
  end
end

-- What finalize reads of a run, in this order; a caller that already read them passes
-- them (known) instead of finalize reading them again.
local FINALIZE_READS = {'status', 'retention_ms', 'idempotency_key', 'held', 'parent_id',
  'spawned', 'pin'}

-- Write a terminal state and its terminal event in one step, drop the lease, and
-- start the retention clock (retention_for: per run, else per status) on the record,
-- its events, its effects and its idempotency key, so a key lives exactly as long
-- as its run; the queue's counter of that status this minute goes up by one.
-- fields: extra HSET field/value pairs (output, error, ...). The run is read once
-- (known: FINALIZE_READS as the caller read them, nil to read them here). A
-- run that was held (running, cancelling) is in no lane, no parked index and no
-- unclaimed index (its claim took it out of its lane and, at its first claim, out of
-- the unclaimed index; resume and resolve take a run out of the parked index before it
-- can be claimed again), so only a run ended while nobody held it is looked for there.
-- The state, its fields and the event's id are one HSET (emit). k.defer: a batch's
-- deferred lease and counter writes (new_defer), nil to write them now.
local function finalize(k, run_id, status, fence, now, fields, data, retention, maxlen, known)
  local run_key = k.run_prefix .. run_id
  local events_key = k.events_prefix .. run_id
  local cur = known or redis.call('HMGET', run_key, unpack(FINALIZE_READS))
  local retention_ms = num_arg(retention_for(cur[2], status, retention))
  local held = cur[1] == 'running' or cur[1] == 'cancelling'
  if k.defer then
    k.defer.leases[#k.defer.leases + 1] = run_id
  else
    redis.call('ZREM', k.leases, run_id)
  end
  give_back(k.run_prefix, run_id, cur[4])
  if cur[7] then
    unindex_pin(tag_of_prefix(k.run_prefix), run_id, cur[7])  -- an ended run needs no build
  end
  if not held then
    redis.call('HDEL', run_key, 'lease_expires_at')
    unqueue(tag_of_prefix(k.run_prefix), run_key, run_id)
    redis.call('ZREM', parked_of(k.run_prefix), run_id)
    redis.call('ZREM', waiting_of(k.run_prefix), run_id)
    redis.call('ZREM', unclaimed_key_of(k.run_prefix), run_id)
  end
  local written = {'status', status, 'finished_at', num_arg(now)}
  if held then
    -- its lease ends: '' is no lease to every reader (codec.ms_to_datetime, tonumber),
    -- and one more field of the HSET below costs less than an HDEL of its own (~9k
    -- instructions a run); a run nobody held has no lease field to keep (HDEL above)
    written[5], written[6] = 'lease_expires_at', ''
  end
  for _, value in ipairs(fields) do
    written[#written + 1] = value
  end
  emit(run_key, events_key, status, fence, now, data, maxlen, status, written,
    activity_of_prefix(k.events_prefix), run_id)
  count_outcome(k.run_prefix, status, now, k.defer)
  redis.call('PEXPIRE', run_key, retention_ms)
  redis.call('PEXPIRE', events_key, retention_ms)
  -- most runs have neither an effects nor a waits hash: one EXISTS of both costs less
  -- than two PEXPIREs (a redis.call is ~7k instructions even on a missing key)
  local effects_key, waits_key = effects_key_of(k.run_prefix, run_id), waits_key_of(k.run_prefix, run_id)
  if redis.call('EXISTS', effects_key, waits_key) > 0 then
    redis.call('PEXPIRE', effects_key, retention_ms)
    redis.call('PEXPIRE', waits_key, retention_ms)
  end
  local idem = cur[3]
  if idem and idem ~= '' then
    redis.call('PEXPIRE', k.idem_prefix .. idem, retention_ms)
  end
  note_family_end(k, run_id, retention_ms, now, {cur[5], cur[6]})
end

-- Giving a held run back to its queue (release_runs' per-run body; reconcile_expired's
-- for a hand-off its worker never took): in two steps, so that a caller can read and
-- encode everything before its first write. release_plan reads nothing (status: the
-- run's, as the caller read it; owner: the holder giving it back) and encodes the
-- event: a run with a cancel pending ends `cancelled` (reason `requested`), any other
-- is `released` for `reason`, with delay_ms > 0 meaning in `delayed` until now +
-- delay_ms (a rate limit's token) instead of at the head of the line now.
local function release_plan(status, owner, reason, delay_ms, now)
  if status == 'cancelling' then
    return {cancel = true, data = cjson.encode({reason = 'requested', released_by = owner})}
  end
  return {delay_ms = delay_ms, data = cjson.encode({owner_id = owner, reason = reason,
    run_at_ms = delay_ms > 0 and now + delay_ms or nil})}
end

-- release_plan's writes for run_id (k: leases, ready, run_prefix, events_prefix,
-- idem_prefix, as finalize's): the fence moves on, so the old holder can write nothing
-- more; the attempt count is kept (a release is not a failure). Returns the new fence.
local function release_run(k, run_id, plan, wake_channel, retention, maxlen, now)
  local run_key = k.run_prefix .. run_id
  local fence = redis.call('HINCRBY', run_key, 'fence', 1)
  if plan.cancel then
    finalize(k, run_id, 'cancelled', fence, now, {}, plan.data, retention, maxlen)
    return fence
  end
  redis.call('HSET', run_key, 'status', 'queued')
  redis.call('HDEL', run_key, 'owner_id', 'lease_expires_at')
  redis.call('ZREM', k.leases, run_id)
  emit(run_key, k.events_prefix .. run_id, 'released', fence, now, plan.data, maxlen)
  if plan.delay_ms > 0 then
    give_back(k.run_prefix, run_id)  -- a run waiting for its token holds no slot meanwhile
    redis.call('ZADD', delayed_of(k.run_prefix), now + plan.delay_ms, run_id)
    redis.call('PUBLISH', wake_channel, 'ready')  -- idle workers learn the new due time
  else
    make_ready(k.ready, wake_channel, run_id, true)
  end
  return fence
end

-- A schedule's cancel_previous stops the schedule's last run, which has not ended: a
-- held one is asked to stop (request_cancel: its owner, or the reconciler if it is
-- dead, writes `cancelled`); one nobody holds (queued, delayed, parked) ends
-- `cancelled` now, as cancel_run ends it. cur: HMGET status, fence of the run.
-- k: {leases, run_prefix, events_prefix, idem_prefix}. Returns the status afterwards.
local function cancel_unended(k, run_id, cur, now, reason, retention, maxlen)
  if cur[1] == 'cancelling' then
    return 'cancelling'  -- asked already: its owner is stopping it
  end
  if cur[1] == 'running' then
    request_cancel(string.sub(k.run_prefix, 1, -5), run_id, now, {reason = reason}, maxlen)
    return 'cancelling'
  end
  local data = cjson.encode({reason = reason, previous_status = cur[1]})
  redis.call('HSET', k.run_prefix .. run_id, 'cancel_requested_at', now)
  redis.call('ZREM', delayed_of(k.run_prefix), run_id)
  finalize(k, run_id, 'cancelled', cur[2], now, {}, data, retention, maxlen)
  return 'cancelled'
end
