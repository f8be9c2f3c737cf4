-- finish_runs: a worker records the outcome of a batch of its runs.
--
-- KEYS[1]  leases       zset    id -> lease expiry ms
-- KEYS[2]  ready        list    runnable ids (FIFO)
-- KEYS[3]  delayed      zset    id -> epoch ms it may run (retry backoff)
-- KEYS[4]  run_prefix   prefix  run keys are this prefix .. id (same hash tag)
--          (a run's effects hash is derived from it too, and expires with the run)
-- KEYS[5]  events_prefix  prefix  event streams are this prefix .. id
-- KEYS[6]  idem_prefix  prefix  idempotency keys are this prefix .. key
-- ARGV[1]  owner_id     string
-- ARGV[2]  retention    string  per-status retention spec (store/retention.py)
-- ARGV[3]  maxlen       integer approximate cap of each event stream
-- ARGV[4]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- ARGV[5..] id, fence, outcome, output, error, retry_delay_ms  groups of six:
--          outcome is succeeded | failed | cancelled, or waiting_human (the watchdog
--          escalated: output then holds the escalation {reason, evidence});
--          output and error are json or ''; retry_delay_ms >= 0 asks for a retry
--          when attempts remain, -1 for none. A run a client is cancelling (status
--          cancelling: the cancel was answered 202) is never requeued nor parked:
--          a retry or an escalation of it ends it cancelled instead (the failure or
--          the escalation rides in the event), while succeeded and a final failed
--          stay, being what it actually reached
-- returns  a list with one code per group, in order: OK (terminal or parked state
--          written, or this owner's same terminal outcome already written: a resend
--          after a lost reply), RETRY (requeued for another attempt), CANCEL (a
--          retry or escalation of a cancelling run: it ended cancelled instead), LOST
--          (fenced out: nothing written)
-- events   succeeded | failed | cancelled (terminal), requeued, or waiting_human
-- invariant: the terminal state and the terminal event are written together and
--          only by the current holder; a run is retried only while
--          attempt < max_attempts and never once cancelling; a parked run's lease is
--          released with fence+1; an acknowledged cancel is never lost.
-- validate-then-write: every group's outcome, delay and json are decoded and checked
--          before the first write; each run is then read and its event encoded
--          before its own writes (a later group's run is read after an earlier
--          group's writes, so the same run twice in one batch is answered as a resend).
--- @include args
--- @include keys
--- @include events
--- @include fence
--- @include slots
--- @include lanes
--- @include park
--- @include family
--- @include finalize

check_argc(@groups - 1)
-- the lease ZREMs and outcome counts of the whole batch are written once, at its end
local k = {leases = KEYS[1], run_prefix = KEYS[4], events_prefix = KEYS[5],
  idem_prefix = KEYS[6], defer = new_defer()}
local owner = ARGV[@owner_id]
local retention = retention_arg(ARGV[@retention])
local maxlen = ARGV[@maxlen]
int_arg(maxlen, 'maxlen', 0)
check_groups(@groups, @FinishGroup)
local OUTCOMES = {'succeeded', 'failed', 'cancelled', 'waiting_human'}

-- every group's arguments, checked and decoded: nothing below can raise on them
local groups = {}
for i = @groups, #ARGV, @FinishGroup do
  local group = {id = run_id_arg(ARGV[i + @FinishGroup.id]),
    fence = ARGV[i + @FinishGroup.fence],
    outcome = enum_arg(ARGV[i + @FinishGroup.outcome], 'outcome', OUTCOMES),
    output = ARGV[i + @FinishGroup.output], err = ARGV[i + @FinishGroup.error],
    delay = int_arg(ARGV[i + @FinishGroup.retry_delay_ms], 'retry_delay_ms', -1)}
  if group.outcome == 'waiting_human' then
    group.escalation = json_arg(group.output, 'escalation')
  end
  if group.err ~= '' then
    group.error = json_arg(group.err, 'error')
  end
  groups[#groups + 1] = group
end

local now = now_ms()
local answers = {}
-- the batch's activity entries: their stream trimmed once, at the end (events.lua)
defer_activity_trim()

local function retry(group, attempt)
  local id = group.id
  local run_key = KEYS[4] .. id
  local run_at = now + group.delay
  local data = cjson.encode({reason = 'retry', attempt = attempt, run_at_ms = run_at,
    error = group.error})
  redis.call('HSET', run_key, 'attempt', attempt, 'status', 'queued', 'error', group.err)
  redis.call('HDEL', run_key, 'owner_id', 'lease_expires_at')
  redis.call('ZREM', KEYS[1], id)
  emit(run_key, KEYS[5] .. id, 'requeued', group.fence, now, data, maxlen)
  if group.delay > 0 then
    -- its backoff holds no slot: they come back now (make_ready does it for the rest)
    give_back(KEYS[4], id)
    redis.call('ZADD', KEYS[3], run_at, id)
  else
    make_ready(KEYS[2], ARGV[@wake_channel], id, false)
  end
end

-- A terminal event without an error has the data of an empty table, encoded once.
local NO_ERROR = cjson.encode({})

local function terminate(group, known)
  local fields = {}
  local data = NO_ERROR
  if group.output ~= '' then
    fields = {'output', group.output}
  end
  if group.err ~= '' then
    fields[#fields + 1] = 'error'
    fields[#fields + 1] = group.err
    data = cjson.encode({error = group.error})
  end
  finalize(k, group.id, group.outcome, group.fence, now, fields, data, retention, maxlen, known)
end

-- A retry or an escalation of a cancelling run: the client's cancel wins, and what
-- the handler reached instead is kept in the terminal event's data.
local function supersedes_cancel(outcome, delay)
  return outcome == 'waiting_human' or (outcome == 'failed' and delay >= 0)
end

-- This owner already wrote this terminal outcome under this fence: the same
-- write sent again because its reply was lost. Answer what the first one did
-- (a retry or escalation that a cancel turned into cancelled included: the
-- reconciler's cancel moves the fence, this script's keeps it). cur: the run's
-- status, owner_id, fence.
local function already_settled(cur, group)
  if cur[2] ~= owner or cur[3] ~= group.fence then
    return nil
  end
  if cur[1] == group.outcome then
    return 'OK'
  end
  if cur[1] == 'cancelled' and supersedes_cancel(group.outcome, group.delay) then
    return 'CANCEL'
  end
  return nil
end

local function cancel_instead(group, known)
  local data = cjson.encode({reason = 'requested', superseded = group.outcome,
    error = group.error, escalation = group.escalation})
  finalize(k, group.id, 'cancelled', group.fence, now, {}, data, retention, maxlen, known)
end

-- One read of the run per group: the holder check, the attempt counts and what
-- finalize reads (FINALIZE_READS, in its order from cur[6] on: status is cur[1]).
local function settle(group)
  local run_key = KEYS[4] .. group.id
  local cur = redis.call('HMGET', run_key, 'status', 'owner_id', 'fence', 'attempt',
    'max_attempts', 'retention_ms', 'idempotency_key', 'held', 'parent_id', 'spawned', 'pin')
  if not holding(cur, owner, group.fence) then
    return already_settled(cur, group) or 'LOST'
  end
  local known = {cur[1], cur[6], cur[7], cur[8], cur[9], cur[10], cur[11]}
  if supersedes_cancel(group.outcome, group.delay) and cur[1] == 'cancelling' then
    cancel_instead(group, known)
    return 'CANCEL'
  end
  if group.outcome == 'waiting_human' then
    park(k, group.id, 'waiting_human', now, {'escalation', group.output}, group.output, maxlen)
    return 'OK'
  end
  local attempt, max_attempts = tonumber(cur[4]) or 1, tonumber(cur[5]) or 1
  if group.outcome == 'failed' and group.delay >= 0 and attempt < max_attempts then
    retry(group, attempt + 1)
    return 'RETRY'
  end
  terminate(group, known)
  return 'OK'
end

for _, group in ipairs(groups) do
  answers[#answers + 1] = settle(group)
end
flush_defer(k, k.defer, now)
trim_activity()
return answers
