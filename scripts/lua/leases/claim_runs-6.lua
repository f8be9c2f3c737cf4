-- claim_runs: move up to N queued runs to `running` under one owner's lease, within the
-- queue's concurrency limits, serving its lanes round-robin.
--
-- KEYS[1]  ready        list    the ring: lanes with queued runs, not blocked (lanes.lua)
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
-- ARGV[7]  handoff_ms   integer 0: leave the owner's hand-off registration alone; more:
--          remove it, and when the claim got fewer runs than asked, register the owner
--          for that long, and remove up to 8 other registrations whose time is over
--          (includes/claim.lua: hand_off, reregister, prune_registrations)
-- ARGV[8]  build_id     string  the worker's build ('' for none): written on each claimed
--          run (build_id) and in its `claimed` event, and in the hand-off registration;
--          the claim serves the build's ring (ready@<build>: runs pinned to it) first
-- derived  lane:<lane>, placed, slots, limits, wait:<res>, blocked, queued, kqueued,
--          ready@<build>, pins:<build>, pinned_builds (build pinning, includes/keys.lua),
--          one:<key> (lanes.lua, flow control), handoff:idle, handoff:args (the owner's
--          hand-off registration, includes/claim.lua), from the queue's tag (KEYS[4]
--          less 'run:')
-- returns  {code, runs, next_due_ms, throttled, unregistered, registered}  codes: OK;
--          unregistered: 1 when handoff_ms > 0 found the owner's registration still
--          there (no run was handed to it since), else 0; registered: 1 when the call
--          registered it again (one of the slots it asked for is then kept for the
--          hand-off); runs is a list of
--          {id, fence, handler, input, attempt, max_attempts, state, resume_input,
--          budget, traceparent, created_at, prior_fence, prior_owner}; the last two
--          name the run's previous claim (attempt_claim, '<fence> <owner>', kept on the
--          record so tracing can link a takeover to the lost attempt), '' if none
--          (and on a replayed receipt)
--          next_due_ms is the earliest delayed run's time, or -1; throttled counts the
--          lanes this call found at a limit (and 1 when the queue-wide limit stopped it)
-- events   claimed; wait on a blocked lane's head run, once per resource it waits for
--          ({kind = concurrency_limit | singleton, resource, subject, limit, holder});
--          wait ({kind = rate_limited, key, until_ms}) on a run its start buckets hold
--          back (rate_hold in gcra.lua): it leaves its lane for `delayed` at that time
-- invariant: a claimed run leaves its lane and gains its lease and its slots in the
--          same atomic step: there is no moment when it is neither queued nor leased,
--          and no claim takes a slot past a limit (queue: ZCARD leases; handler, key:
--          the slots counters; singleton: its holder). Each lane visit leases a run or
--          takes the lane out of the ring (empty, or blocked into wait:<res> until a
--          slot of res is given back), at most 2*count+64 visits: O(1) per claimed run
--          whatever the number of lanes. Lanes take turns: the ring is FIFO and a
--          served lane goes to its tail; only the one lane in the ring is served in bulk.
--          A run takes a handler slot only while its handler has a limit, a key slot
--          when it names a key, its singleton when it names one; a run that takes none
--          (the fast path: nothing limits it) gets no `held` field and costs no slot
--          read or write (set_limits adopts the running runs of a handler it limits
--          anew). Each limit is read once per call; `queued` is counted down once.
--          A run pinned to a build (its `pin`, written by the claim of a run whose
--          versioning is pinned) waits in that build's ring, which only claims by that
--          build serve, before the queue's ring: no claim looks at another build's runs.
--          A `waiting` run (park_run) whose time came is promoted to its lane and
--          claimed like a queued one, retaking its slots. Run keys
--          are derived from KEYS[4]/KEYS[5] because a claim cannot know in advance
--          which ids it will pop; every derived key carries the queue's hash tag.
--          A claim is idempotent per (owner, token) for one lease TTL: its receipt
--          (ids and fences) is kept that long, and a repeat returns those runs that
--          are still running under that owner and fence, claiming nothing new. A
--          reply lost on the way back therefore never leaves runs leased to a
--          worker that does not know it holds them. The hand-off registration is one
--          per owner (a zset member): removing it answers whether a create claimed a
--          run for the owner since it was made (includes/claim.lua).
-- validate-then-write: every number is checked and a receipt decoded before the
--          first write (claim_core, includes/claim.lua); each popped run is read and
--          its event encoded before its own writes (reads and encodes of strings and
--          integers, which cannot fail).
--- @include args
--- @include keys
--- @include events
--- @include lanes
--- @include finalize
--- @include gcra
--- @include claim
--- @include handoff

check_argc(@ClaimArgs)
local owner = ARGV[@owner_id]
local want = int_arg(ARGV[@max_runs], 'count', 0)
local ttl = int_arg(ARGV[@lease_ttl_ms], 'lease_ttl_ms', 1)
int_arg(ARGV[@maxlen], 'maxlen', 0)
local promote_max = int_arg(ARGV[@promote_max], 'promote_max', 0)
local token = ARGV[@token]
local handoff_ms = int_arg(ARGV[@handoff_ms], 'handoff_ms', 0)
-- the worker's build (a token: no space), recorded on every run it claims
local build = string.match(ARGV[@build_id], '^[%w._-]*$') or bad_argument('build_id', ARGV[@build_id])
local now = now_ms()
local receipt = KEYS[6] .. owner .. ':' .. token
-- the call's activity entries: their stream trimmed once, before the reply (events.lua)
defer_activity_trim()

local function next_due_ms()
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if #first > 0 then
    return tonumber(first[2])
  end
  return -1
end

if token ~= '' then
  local prior = redis.call('GET', receipt)
  if prior then
    local replayed = {}
    for _, held in ipairs(cjson.decode(prior)) do
      local cur = redis.call('HMGET', KEYS[4] .. held[1], 'status', 'handler', 'input',
        'attempt', 'max_attempts', 'budget', 'traceparent', 'created_at', 'owner_id', 'fence',
        'state', 'resume_input')
      if cur[1] == 'running' and cur[9] == owner and tonumber(cur[10]) == held[2] then
        replayed[#replayed + 1] = claim_row(held[1], held[2], cur, cur[11], cur[12], '', '')
      end
    end
    local unregistered = 0
    if handoff_ms > 0 then
      unregistered = reregister(tag_of_prefix(KEYS[4]), owner, now, handoff_ms, 0, 0, '')
    end
    return {'OK', replayed, next_due_ms(), 0, unregistered, 0}
  end
end

local claimed, throttled = claim_core({ready = KEYS[1], delayed = KEYS[2], leases = KEYS[3],
  run_prefix = KEYS[4], events_prefix = KEYS[5], owner = owner, ttl = ttl, maxlen = ARGV[@maxlen],
  now = now, build = build,
  build_ready = build ~= '' and tag_of_prefix(KEYS[4]) .. 'ready@' .. build or nil},
  want, promote_max)

if token ~= '' and #claimed > 0 then
  local held = {}
  for i, run in ipairs(claimed) do
    held[i] = {run[1], run[2]}
  end
  redis.call('SET', receipt, cjson.encode(held), 'PX', ttl)
end
local unregistered, registered = 0, 0
if handoff_ms > 0 then
  unregistered, registered = reregister(tag_of_prefix(KEYS[4]), owner, now, handoff_ms, want,
    #claimed, ttl .. ' ' .. ARGV[@maxlen] .. ' ' .. promote_max .. ' ' .. build)
end
trim_activity()
return {'OK', claimed, next_due_ms(), throttled, unregistered, registered}
