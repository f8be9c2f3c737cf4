-- claim_runs: move up to N queued runs to `running` under one owner's lease.
--
-- KEYS[1]  ready        list    runnable ids (FIFO)
-- KEYS[2]  delayed      zset    id -> epoch ms it may run (retry backoff)
-- KEYS[3]  leases       zset    id -> lease expiry ms
-- KEYS[4]  run_prefix   prefix  run keys are this prefix .. id (same hash tag)
-- KEYS[5]  events_prefix  prefix  event streams are this prefix .. id
-- KEYS[6]  receipt_prefix prefix  claim receipts are this prefix .. owner .. ':' .. token
-- ARGV[1]  owner_id     string  the claiming worker
-- ARGV[2]  max_runs     integer how many runs at most (0: only promote due retries)
-- ARGV[3]  lease_ttl_ms integer
-- ARGV[4]  maxlen       integer approximate cap of each event stream
-- ARGV[5]  promote_max  integer how many due retries to promote at most
-- ARGV[6]  token        string  this claim's request token ('' for none); the same token
--          again (a retry after a lost reply) answers what the first call claimed
-- returns  {code, runs, next_due_ms}  codes: OK; runs is a list of
--          {id, fence, handler, input, attempt, max_attempts, state, resume_input,
--          budget, traceparent, created_at, prior_fence, prior_owner}; the last two
--          name the run's previous claim (attempt_fence/attempt_owner, kept on the
--          record so tracing can link a takeover to the lost attempt), '' if none
--          (and on a replayed receipt)
--          next_due_ms is the earliest delayed run's time, or -1
-- events   claimed; wait ({kind = rate_limited, key, until_ms}) on a run its start
--          buckets hold back (rate_hold in lib.lua): it moves to `delayed` at that time
-- invariant: a claimed run leaves `ready` and gains its lease in the same atomic
--          step: there is no moment when it is neither queued nor leased. Run keys
--          are derived from KEYS[4]/KEYS[5] because a claim cannot know in advance
--          which ids it will pop; every derived key carries the queue's hash tag.
--          A claim is idempotent per (owner, token) for one lease TTL: its receipt
--          (ids and fences) is kept that long, and a repeat returns those runs that
--          are still running under that owner and fence, claiming nothing new. A
--          reply lost on the way back therefore never leaves runs leased to a
--          worker that does not know it holds them.
-- validate-then-write: every number is checked and a receipt decoded before the
--          first write; each popped run is read and its event encoded before its
--          own writes (reads and encodes of strings and integers, which cannot fail).
--- @include lib

check_argc(6)
local owner = ARGV[1]
local want = int_arg(ARGV[2], 'count', 0)
local ttl = int_arg(ARGV[3], 'lease_ttl_ms', 1)
int_arg(ARGV[4], 'maxlen', 0)
local promote_max = int_arg(ARGV[5], 'promote_max', 0)
local token = ARGV[6]
local now = now_ms()
local receipt = KEYS[6] .. owner .. ':' .. token

local function next_due_ms()
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if #first > 0 then
    return tonumber(first[2])
  end
  return -1
end

local function row(id, fence, cur, prior_fence, prior_owner)
  return {id, fence, cur[2], cur[3], tonumber(cur[4]), tonumber(cur[5]), cur[6] or '',
    cur[7] or '', cur[8] or '', cur[11] or '', cur[12] or '', prior_fence, prior_owner}
end

if token ~= '' then
  local prior = redis.call('GET', receipt)
  if prior then
    local replayed = {}
    for _, held in ipairs(cjson.decode(prior)) do
      local cur = redis.call('HMGET', KEYS[4] .. held[1], 'status', 'handler', 'input',
        'attempt', 'max_attempts', 'state', 'resume_input', 'budget', 'owner_id', 'fence',
        'traceparent', 'created_at')
      if cur[1] == 'running' and cur[9] == owner and tonumber(cur[10]) == held[2] then
        replayed[#replayed + 1] = row(held[1], held[2], cur, '', '')
      end
    end
    return {'OK', replayed, next_due_ms()}
  end
end

local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, promote_max)
for _, id in ipairs(due) do
  redis.call('RPUSH', KEYS[1], id)
end
if #due > 0 then
  redis.call('ZREM', KEYS[2], unpack(due))
end

local claimed = {}
-- runs the rate gate holds back are looked at but not claimed: bound the looking
local visits = 2 * want + 64
while #claimed < want and visits > 0 do
  local ids = redis.call('LPOP', KEYS[1], math.min(want - #claimed, visits))
  if not ids then
    break
  end
  visits = visits - #ids
  for _, id in ipairs(ids) do
    local run_key = KEYS[4] .. id
    local cur = redis.call('HMGET', run_key, 'status', 'handler', 'input', 'attempt',
      'max_attempts', 'state', 'resume_input', 'budget', 'attempt_fence', 'attempt_owner',
      'traceparent', 'created_at')
    -- anything not queued (cancelled while waiting, expired) is dropped lazily here; a
    -- run its rate-limit buckets hold back waits in `delayed` for its exact start time
    -- (a waiting run, park_run's, whose time came is claimed like a queued one)
    if (cur[1] == 'queued' or cur[1] == 'waiting')
        and not rate_hold(KEYS[4], KEYS[5], KEYS[2], id, now, ARGV[4]) then
      local data = cjson.encode({owner_id = owner, attempt = tonumber(cur[4])})
      local fence = redis.call('HINCRBY', run_key, 'fence', 1)
      local expires = now + ttl
      redis.call('HSET', run_key, 'status', 'running', 'owner_id', owner,
        'lease_expires_at', expires, 'lease_ttl_ms', ttl, 'started_at', now,
        'last_renewed_at', now, 'attempt_fence', fence, 'attempt_owner', owner)
      -- the first claim's time stays: a run's duration spans every attempt and park
      redis.call('HSETNX', run_key, 'first_started_at', now)
      redis.call('ZADD', KEYS[3], expires, id)
      if fence == 1 then
        -- claimed at last: its queued time-to-live no longer applies
        redis.call('ZREM', unclaimed_key_of(KEYS[4]), id)
      end
      emit(run_key, KEYS[5] .. id, 'claimed', fence, now, data, ARGV[4])
      claimed[#claimed + 1] = row(id, fence, cur, cur[9] or '', cur[10] or '')
    end
  end
end

if token ~= '' and #claimed > 0 then
  local held = {}
  for i, run in ipairs(claimed) do
    held[i] = {run[1], run[2]}
  end
  redis.call('SET', receipt, cjson.encode(held), 'PX', ttl)
end
return {'OK', claimed, next_due_ms()}
