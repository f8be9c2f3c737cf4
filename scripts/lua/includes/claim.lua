-- claim: the claim core, what makes queued runs `running` under one owner's lease.
-- claim_runs calls it for a worker's own claim; create_run and create_runs call it on
-- an idle worker's behalf (the hand-off), so a handed-off run is exactly the one a
-- claim_runs call at that moment would have given: one copy of the serving code
-- (lanes, priorities, limits, singletons, rate buckets, the queue-wide limit).
-- Builds on: args, keys, events, lanes, finalize, gcra.

-- A claimed run's reply row, in claim_runs' format (its header says the fields): cur is
-- the run's record read with CLAIM_FIELDS (or the replay's HMGET, which keeps
-- the first eight of them in the same places), state and resume_input its fields of
-- those names (nil: none).
local function claim_row(id, fence, cur, state, resume_input, prior_fence, prior_owner)
  return {id, fence, cur[2], cur[3], tonumber(cur[4]), tonumber(cur[5]), state or '',
    resume_input or '', cur[6] or '', cur[7] or '', cur[8] or '', prior_fence, prior_owner}
end

-- The claim's parts below share one table, c: the call's keys and lease (c.k: {ready,
-- delayed, leases, run_prefix, events_prefix (KEYS of claim_runs), owner, ttl (ms), maxlen
-- (string, the events' cap), now (ms, TIME), build (the worker's build id, '' for none),
-- build_ready (its build's ring, nil: serve only the queue's)}), the queue's hash tag,
-- and what the call gathers as it goes (limits read, runs claimed, leases and first
-- claims written once at the end, runs taken out of lanes, lanes throttled).

-- Due retries, delayed starts and durable waits join their lanes, aging from the time
-- they were due.
local function promote_due(c, promote_max)
  local k = c.k
  local due = redis.call('ZRANGEBYSCORE', k.delayed, '-inf', k.now, 'WITHSCORES', 'LIMIT', 0,
    promote_max)
  local ids = {}
  for i = 1, #due, 2 do
    enqueue(c.tag, k.run_prefix .. due[i], due[i], tonumber(due[i + 1]), false)
    redis.call('ZREM', k.delayed, due[i])
    ids[#ids + 1] = due[i]
  end
  -- a durable wait whose time came is no longer parked: it is in a lane
  for first = 1, #ids, 1000 do
    redis.call('ZREM', waiting_of(k.run_prefix), unpack(ids, first, math.min(first + 999, #ids)))
  end
end

-- Under one limit (nil: none), how many more may start: nil and the room left, or the
-- resource and its limit when it is full.
local function under_limit(res, limit, used, room)
  if not limit then
    return nil, room
  end
  local free = limit - (tonumber(used) or 0)
  if free <= 0 then
    return res, limit
  end
  return nil, math.min(room, free)
end

-- The queue's limits, each field read once per call (a call serves one handler or a
-- few: one HGET each, not one per run): a number, or false for none.
local function limit_of(c, field)
  local known = c.limits[field]
  if known == nil then
    known = tonumber(redis.call('HGET', c.tag .. 'limits', field)) or false
    c.limits[field] = known
  end
  return known
end

-- What the lane's head run needs, or nil when one is at its limit: then the resource
-- it waits for ('h:<handler>', 'k:<key>', 's:<singleton key>') and that limit. Else
-- nil and how many of the lane may start now (1 for a singleton lane). A key's limit
-- is its own, else the default key limit ('k:*').
local function lane_gate(c, cur, room)
  local handler, ckey, skey = cur[2], cur[9] or '', cur[10] or ''
  local hlimit = limit_of(c, 'h:' .. handler)
  local klimit = ckey ~= '' and (limit_of(c, 'k:' .. ckey) or limit_of(c, 'k:*'))
  if not hlimit and not klimit and skey == '' then
    return nil, room  -- the fast path: nothing limits this run, no slot to read
  end
  local used = redis.call('HMGET', c.tag .. 'slots', 'h:' .. handler, 'k:' .. ckey, 's:' .. skey)
  local res
  res, room = under_limit('h:' .. handler, hlimit or nil, used[1], room)
  if res then
    return res, room
  end
  if ckey ~= '' then
    res, room = under_limit('k:' .. ckey, klimit or nil, used[2], room)
    if res then
      return res, room
    end
  end
  if skey ~= '' then
    if used[3] then
      return 's:' .. skey, 1
    end
    room = 1
  end
  return nil, room
end

-- A blocked lane waits in its resource's set; its head run hears why, once per cause.
local BLOCKED_RESOURCE = {h = 'handler', k = 'concurrency_key', s = 'singleton_key'}
local function block_lane(c, lane, id, cur, res, limit)
  local tag, k = c.tag, c.k
  redis.call('SADD', tag .. 'wait:' .. res, lane)
  redis.call('SADD', tag .. 'blocked', res)
  redis.call('HSET', tag .. 'placed', lane, res)
  if cur[11] ~= res then
    local kind = string.sub(res, 1, 1) == 's' and 'singleton' or 'concurrency_limit'
    local data = cjson.encode({kind = kind, subject = string.sub(res, 3),
      resource = BLOCKED_RESOURCE[string.sub(res, 1, 1)], limit = limit,
      holder = kind == 'singleton' and redis.call('HGET', tag .. 'slots', res) or nil})
    redis.call('HSET', k.run_prefix .. id, 'blocked_on', res)
    xadd_event(k.events_prefix .. id, 'wait', tonumber(cur[12]) or 0, k.now, data, k.maxlen)
  end
end

-- What every run looked at is read with (cur[1..16] in this order). Fields a run
-- can only have once something moved its fence are read apart (AFTER_FENCE), by
-- after_fence, and only for a run about to be leased.
local CLAIM_FIELDS = {'status', 'handler', 'input', 'attempt', 'max_attempts', 'budget',
  'traceparent', 'created_at', 'ckey', 'skey', 'blocked_on', 'fence', 'rate_limits',
  'rate_slot_at', 'retry_of', 'versioning'}
local AFTER_FENCE = {'state', 'resume_input', 'attempt_claim', 'first_started_at'}
local NO_FIELDS = {}
-- a queued run, or a waiting one (park_run's durable sleep) whose time came
local CLAIMABLE = {queued = true, waiting = true}

-- A run's AFTER_FENCE fields (state, resume_input, attempt_claim, first_started_at), or
-- none without a read when its fence is still '0' and it is no re-run: a claim moves
-- the fence (and writes attempt_claim, first_started_at), checkpoint_run needs a holder,
-- resume_run moves it before it writes resume_input, and only retry_run copies a
-- state into a new record, which says retry_of (before 7912d97 at fence 0). A record
-- nobody claimed yet - most of a claim's runs - so skips four field lookups that would
-- each scan the whole record for nothing (~6k instructions a run).
local function after_fence(run_key, cur)
  if cur[12] == '0' and not cur[15] then
    return NO_FIELDS
  end
  return redis.call('HMGET', run_key, unpack(AFTER_FENCE))
end

-- The run's previous claim as claim_row reports it (its fence and owner, '' for none),
-- from `attempt_claim` ('<fence> <owner>': one field of the record where there were
-- two; a fence has no space, so the first one splits it). A record last claimed
-- before that field existed has attempt_fence and attempt_owner instead: they are read
-- only for a run claimed before (first_started_at) that has no attempt_claim.
-- later: the run's AFTER_FENCE fields.
local function prior_claim(run_key, later)
  local last = later[3]
  if last then
    local gap = string.find(last, ' ', 1, true)
    return string.sub(last, 1, gap - 1), string.sub(last, gap + 1)
  end
  if later[4] then
    local old = redis.call('HMGET', run_key, 'attempt_fence', 'attempt_owner')
    return old[1] or '', old[2] or ''
  end
  return '', ''
end

-- A run this call took out of its lane: the queue's `queued` counter goes down once, at
-- the end of the call.
local function dequeued_one(c, ckey, skey, id)
  c.dequeued = c.dequeued + 1
  uncount_keys(c.tag, ckey, skey, id)
end

-- What a run about to be leased takes: a slot of its handler when the handler has a
-- limit, of its key when it has one, its singleton. The `held` field lists them, for
-- release_held; a run that takes none (the fast path) gets no field.
local function take_slots(c, id, cur)
  local tag, handler, ckey, skey = c.tag, cur[2], cur[9] or '', cur[10] or ''
  local held = {}
  if limit_of(c, 'h:' .. handler) then
    held[#held + 1] = 'h:' .. handler
    redis.call('HINCRBY', tag .. 'slots', 'h:' .. handler, 1)
  end
  if ckey ~= '' then
    held[#held + 1] = 'k:' .. ckey
    redis.call('HINCRBY', tag .. 'slots', 'k:' .. ckey, 1)
  end
  if skey ~= '' then
    held[#held + 1] = 's:' .. skey
    redis.call('HSET', tag .. 'slots', 's:' .. skey, id)
  end
  return table.concat(held, '\n')
end

-- The `claimed` event's data, encoded once per call and attempt number (a call's runs
-- share the owner, and most are at attempt 1): the same bytes as one encode per run.
local function claimed_data(c, attempt)
  local data = c.claimed_json[attempt]
  if not data then
    local build = c.k.build
    data = cjson.encode({owner_id = c.k.owner, attempt = attempt,
      build_id = (build ~= nil and build ~= '') and build or nil})
    c.claimed_json[attempt] = data
  end
  return data
end

-- The record fields a lease writes, in one HSET with the `claimed` event (emit): the
-- fence is the one read with the run plus one (the read and the lease are one atomic
-- call). started_at is also the attempt's first renewal: no last_renewed_at is written
-- here (renew_leases writes it; reconcile_expired takes the later of the two). The
-- first claim's time stays once written: a run's duration spans every attempt and park.
local function lease_fields(c, fence_s, held, later)
  local owner, at = c.k.owner, c.now_s
  local fields = {'status', 'running', 'owner_id', owner, 'fence', fence_s,
    'lease_expires_at', c.expires_s, 'lease_ttl_ms', c.ttl_s, 'started_at', at,
    'attempt_claim', fence_s .. ' ' .. owner}
  local build = c.k.build
  if build ~= nil and build ~= '' then
    fields[#fields + 1] = 'build_id'
    fields[#fields + 1] = build
  end
  if held ~= '' then
    fields[#fields + 1] = 'held'
    fields[#fields + 1] = held
  end
  if not later[4] then
    fields[#fields + 1] = 'first_started_at'
    fields[#fields + 1] = at
  end
  return fields
end

-- Whether this claim pins the run to the claiming build: its `versioning` field, which
-- the create wrote from the run's option, else its handler's policy, else the
-- deployment's (LEASEHOLD_DEFAULT_VERSIONING); absent is auto_upgrade. A pinned run goes
-- back to its build's lanes whenever it is queued again (enqueue), until it ends
-- (finalize) or an upgrade (upgrade_runs) moves it.
local function pins_run(c, cur)
  local build = c.k.build
  return cur[16] == 'pinned' and build ~= nil and build ~= ''
end

-- Pin a run to the claiming build: its `pin` field (written with the lease) and the
-- queue's index of the build's open pinned runs.
local function pin_run(c, id, fields)
  local build = c.k.build
  fields[#fields + 1] = 'pin'
  fields[#fields + 1] = build
  index_pin(c.tag, id, build)
end

-- Lease one queued run (already out of its lane) to this owner; take its slots.
local function lease_run(c, id, cur)
  local k = c.k
  local run_key = k.run_prefix .. id
  dequeued_one(c, cur[9], cur[10], id)
  local held = take_slots(c, id, cur)
  local fence = (tonumber(cur[12]) or 0) + 1
  local later = after_fence(run_key, cur)
  local prior_fence, prior_owner = prior_claim(run_key, later)
  if cur[11] then
    redis.call('HDEL', run_key, 'blocked_on')
  end
  if not later[4] then
    -- claimed at last: its queued time-to-live no longer applies (a re-run's fence
    -- goes on from its old run's, so its first claim is not fence 1)
    c.first_claims[#c.first_claims + 1] = id
  end
  local new_leases = c.new_leases
  new_leases[#new_leases + 1] = c.expires_s
  new_leases[#new_leases + 1] = id
  local fields = lease_fields(c, num_arg(fence), held, later)
  if pins_run(c, cur) then
    pin_run(c, id, fields)
  end
  emit(run_key, k.events_prefix .. id, 'claimed', fence, k.now,
    claimed_data(c, tonumber(cur[4])), k.maxlen, 'running', fields,
    activity_of_prefix(k.events_prefix), id)
  c.claimed[#c.claimed + 1] = claim_row(id, fence, cur, later[1], later[2], prior_fence,
    prior_owner)
end

-- A run its rate-limit buckets hold back leaves its lane for `delayed` at its exact start
-- time (gcra.lua's rate_hold: the tokens are taken only when it is leased).
local function rate_held_back(c, id, cur)
  local k = c.k
  return rate_hold(k.run_prefix, k.events_prefix, k.delayed, id, k.now, k.maxlen,
    {cur[13], cur[14], cur[12]})
end

-- Lease the lane's popped runs (room > 1, the only lane in its ring): each still
-- claimable and not held back by its rate buckets; the others only leave the lane.
local function lease_popped(c, lane_key, cur, n)
  local popped = redis.call('ZPOPMIN', lane_key, n)
  for i = 1, #popped, 2 do
    local id = popped[i]
    local run = i == 1 and cur or redis.call('HMGET', c.k.run_prefix .. id, unpack(CLAIM_FIELDS))
    if CLAIMABLE[run[1]] and not rate_held_back(c, id, run) then
      lease_run(c, id, run)
    else
      dequeued_one(c, run[9], run[10], id)
    end
  end
end

-- Serve one lane from its ring: lease its head (or, when it is the only lane, as many
-- as may start), block it on the resource its head waits for, or drop it when empty.
-- Each visit leases a run or takes a lane out of the ring: O(1) per claimed run.
local function serve_lane(c, lane, room, ring)
  local tag, k = c.tag, c.k
  local lane_key = tag .. 'lane:' .. lane
  local head = redis.call('ZRANGE', lane_key, 0, 0)
  if #head == 0 then
    redis.call('HDEL', tag .. 'placed', lane)
    return
  end
  local cur = redis.call('HMGET', k.run_prefix .. head[1], unpack(CLAIM_FIELDS))
  if not CLAIMABLE[cur[1]] then
    -- not queued any more (a record gone): drop the entry, look at the lane again
    redis.call('ZREM', lane_key, head[1])
    dequeued_one(c, cur[9], cur[10], head[1])
    redis.call('LPUSH', ring, lane)
    return
  end
  local res, n = lane_gate(c, cur, room)
  if res then
    block_lane(c, lane, head[1], cur, res, n)
    c.throttled = c.throttled + 1
    return
  end
  if n > 1 and redis.call('LLEN', ring) == 0 then
    lease_popped(c, lane_key, cur, n)
  else
    redis.call('ZREM', lane_key, head[1])
    if rate_held_back(c, head[1], cur) then
      dequeued_one(c, cur[9], cur[10], head[1])
    else
      lease_run(c, head[1], cur)
    end
  end
  if redis.call('EXISTS', lane_key) == 1 then
    redis.call('RPUSH', ring, lane)
  else
    redis.call('HDEL', tag .. 'placed', lane)
  end
end

-- Claim up to `want` runs for k.owner, after promoting up to promote_max due retries:
-- claim_runs' invariant (its header) is this function's. k: the keys and lease (see c.k
-- above). Returns the claimed rows (claim_row) and how many lanes (or the queue-wide
-- limit) throttled it. Every write (the lease, slots, record, `claimed` event, lane and
-- counter updates) is in here; the caller checks its arguments before calling it.
local function claim_core(k, want, promote_max)
  -- the lease's numbers as the record stores them, formatted once for every run
  local c = {k = k, tag = tag_of_prefix(k.run_prefix), limits = {}, claimed = {},
    dequeued = 0, new_leases = {}, first_claims = {}, claimed_json = {}, throttled = 0,
    now_s = num_arg(k.now), expires_s = num_arg(k.now + k.ttl), ttl_s = num_arg(k.ttl)}
  promote_due(c, promote_max)
  local qlimit = limit_of(c, 'q')
  -- the leases held before this call (read once: this call's own are #c.claimed)
  local leased_before = qlimit and redis.call('ZCARD', k.leases)
  -- runs the rate gate holds back are looked at but not claimed: bound the looking
  local visits = 2 * want + 64
  -- the build's ring, when it has lanes (one EXISTS a call, not one LPOP a visit)
  local own_ring = k.build_ready
  if own_ring and redis.call('EXISTS', own_ring) == 0 then
    own_ring = nil
  end
  while #c.claimed < want and visits > 0 do
    visits = visits - 1
    local room = want - #c.claimed
    if qlimit then
      local free = qlimit - leased_before - #c.claimed
      if free <= 0 then
        c.throttled = c.throttled + 1
        break
      end
      room = math.min(room, free)
    end
    -- the worker's own build's pinned lanes first (resumed runs only it may take); once
    -- its ring is found empty it is not asked again in this call
    local ring = own_ring
    local lane = ring and redis.call('LPOP', ring)
    if not lane then
      own_ring = nil
      ring = k.ready
      lane = redis.call('LPOP', ring)
      if not lane then
        break
      end
    end
    serve_lane(c, lane, room, ring)
  end
  if c.dequeued > 0 then
    redis.call('DECRBY', c.tag .. 'queued', c.dequeued)
  end
  call_chunked('ZADD', k.leases, c.new_leases)
  call_chunked('ZREM', unclaimed_key_of(k.run_prefix), c.first_claims)
  return c.claimed, c.throttled
end
