-- claim: the claim core, what makes queued runs `running` under one owner's lease.
-- claim_runs calls it for a worker's own claim; create_run and create_runs call it on
-- an idle worker's behalf (the hand-off), so a handed-off run is exactly the one a
-- claim_runs call at that moment would have given: one copy of the serving code
-- (lanes, priorities, limits, singletons, rate buckets, the queue-wide limit).
-- Included after lib (`--- @include claim` below `--- @include lib`): it uses lib's
-- enqueue, emit, rate_hold, uncount_keys, call_chunked and the key helpers.

-- A claimed run's reply row, in claim_runs' format (its header says the fields): cur is
-- the run's record read with claim_core's FIELDS (or the replay's HMGET, which keeps
-- the first eight of them in the same places), state and resume_input its fields of
-- those names (nil: none).
local function claim_row(id, fence, cur, state, resume_input, prior_fence, prior_owner)
  return {id, fence, cur[2], cur[3], tonumber(cur[4]), tonumber(cur[5]), state or '',
    resume_input or '', cur[6] or '', cur[7] or '', cur[8] or '', prior_fence, prior_owner}
end

-- Claim up to `want` runs for k.owner, after promoting up to promote_max due retries:
-- claim_runs' invariant (its header) is this function's. k names the queue's keys and
-- the lease: {ready, delayed, leases, run_prefix, events_prefix (KEYS of claim_runs),
-- owner, ttl (ms), maxlen (string, the events' cap), now (ms, TIME)}. Returns the
-- claimed rows (claim_row) and how many lanes (or the queue-wide limit) throttled it.
-- Every write (the lease, slots, record, `claimed` event, lane and counter updates) is
-- in here; the caller checks its arguments before calling it.
local function claim_core(k, want, promote_max)
  local owner, ttl, now = k.owner, k.ttl, k.now
  local tag = tag_of_prefix(k.run_prefix)


  -- due retries (and delayed starts) join their lanes, aging from the time they were due
  local due = redis.call('ZRANGEBYSCORE', k.delayed, '-inf', now, 'WITHSCORES', 'LIMIT', 0,
    promote_max)
  for i = 1, #due, 2 do
    enqueue(tag, k.run_prefix .. due[i], due[i], tonumber(due[i + 1]), false)
    redis.call('ZREM', k.delayed, due[i])
  end

  -- What the lane's head run needs, or nil when one is at its limit: then the resource
  -- it waits for ('h:<handler>', 'k:<key>', 's:<singleton key>') and that limit. Else
  -- nil and how many of the lane may start now (1 for a singleton lane).
  -- Under one limit (nil: none), how many more may start: nil and the room left, or the
  -- resource and its limit when it is full.
  local function under(res, limit, used, room)
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
  local limits_read = {}
  local function limit_of(field)
    local known = limits_read[field]
    if known == nil then
      known = tonumber(redis.call('HGET', tag .. 'limits', field)) or false
      limits_read[field] = known
    end
    return known
  end

  -- The limit of a run's key (its own, else the default key limit), false for none.
  local function key_limit(ckey)
    return limit_of('k:' .. ckey) or limit_of('k:*')
  end

  local function gate(cur, room)
    local handler, ckey, skey = cur[2], cur[9] or '', cur[10] or ''
    local hlimit = limit_of('h:' .. handler)
    local klimit = ckey ~= '' and key_limit(ckey)
    if not hlimit and not klimit and skey == '' then
      return nil, room  -- the fast path: nothing limits this run, no slot to read
    end
    local used = redis.call('HMGET', tag .. 'slots', 'h:' .. handler, 'k:' .. ckey, 's:' .. skey)
    local res
    res, room = under('h:' .. handler, hlimit or nil, used[1], room)
    if res then
      return res, room
    end
    if ckey ~= '' then
      res, room = under('k:' .. ckey, klimit or nil, used[2], room)
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
  local function block(lane, id, cur, res, limit)
    redis.call('SADD', tag .. 'wait:' .. res, lane)
    redis.call('SADD', tag .. 'blocked', res)
    redis.call('HSET', tag .. 'placed', lane, res)
    if cur[11] ~= res then
      local kind = string.sub(res, 1, 1) == 's' and 'singleton' or 'concurrency_limit'
      local data = cjson.encode({kind = kind, subject = string.sub(res, 3),
        resource = ({h = 'handler', k = 'concurrency_key', s = 'singleton_key'})[string.sub(res, 1, 1)],
        limit = limit, holder = kind == 'singleton' and redis.call('HGET', tag .. 'slots', res) or nil})
      redis.call('HSET', k.run_prefix .. id, 'blocked_on', res)
      xadd_event(k.events_prefix .. id, 'wait', tonumber(cur[12]) or 0, now, data, k.maxlen)
    end
  end

  -- What every run looked at is read with (cur[1..15] in this order). Fields a run
  -- can only have once something moved its fence are read apart (AFTER_FENCE), by
  -- after_fence, and only for a run about to be leased.
  local FIELDS = {'status', 'handler', 'input', 'attempt', 'max_attempts', 'budget',
    'traceparent', 'created_at', 'ckey', 'skey', 'blocked_on', 'fence', 'rate_limits',
    'rate_slot_at', 'retry_of'}
  local AFTER_FENCE = {'state', 'resume_input', 'attempt_claim', 'first_started_at'}
  local NONE = {}

  -- A run's AFTER_FENCE fields (state, resume_input, attempt_claim, first_started_at), or
  -- none without a read when its fence is still '0' and it is no re-run: a claim moves
  -- the fence (and writes attempt_claim, first_started_at), checkpoint_run needs a holder,
  -- resume_run moves it before it writes resume_input, and only retry_run copies a
  -- state into a new record, which says retry_of (before 7912d97 at fence 0). A record
  -- nobody claimed yet - most of a claim's runs - so skips four field lookups that would
  -- each scan the whole record for nothing (~6k instructions a run).
  local function after_fence(run_key, cur)
    if cur[12] == '0' and not cur[15] then
      return NONE
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

  local claimed = {}
  -- a queued run, or a waiting one (park_run's durable sleep) whose time came
  local CLAIMABLE = {queued = true, waiting = true}

  -- Runs this call took out of lanes: the queue's `queued` counter goes down once, at the end.
  local dequeued = 0
  local function dequeue(ckey, skey, id)
    dequeued = dequeued + 1
    uncount_keys(tag, ckey, skey, id)
  end

  -- What a run about to be leased takes: a slot of its handler when the handler has a
  -- limit, of its key when it has one, its singleton. The `held` field lists them, for
  -- release_held; a run that takes none (the fast path) gets no field.
  local function take_slots(id, cur)
    local handler, ckey, skey = cur[2], cur[9] or '', cur[10] or ''
    local held = {}
    if limit_of('h:' .. handler) then
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

  -- The call's leases (expiry, id pairs) and the runs claimed for the first time: one
  -- ZADD and one ZREM at the end of the call, not one of each per run (nothing in the
  -- call reads either set after a lease: the queue-wide limit counts #claimed on top of
  -- the leases it read once).
  local new_leases = {}
  local first_claims = {}

  -- The `claimed` event's data, encoded once per call and attempt number (a call's runs
  -- share the owner, and most are at attempt 1): the same bytes as one encode per run.
  local claimed_json = {}
  local function claimed_data(attempt)
    local data = claimed_json[attempt]
    if not data then
      data = cjson.encode({owner_id = owner, attempt = attempt})
      claimed_json[attempt] = data
    end
    return data
  end

  -- Lease one queued run (already out of its lane) to this owner; take its slots. The
  -- run's fence is the one read with it, plus one (the read and the lease are in the same
  -- atomic call); its state, the event's id and the first claim's time are one HSET.
  -- started_at is also the attempt's first renewal: no last_renewed_at is written here
  -- (renew_leases writes it; reconcile_expired takes the later of the two).
  local function lease(id, cur)
    local run_key = k.run_prefix .. id
    dequeue(cur[9], cur[10], id)
    local held = take_slots(id, cur)
    local data = claimed_data(tonumber(cur[4]))
    local fence = (tonumber(cur[12]) or 0) + 1
    local fence_s, expires, at = num_arg(fence), num_arg(now + ttl), num_arg(now)
    local later = after_fence(run_key, cur)
    local prior_fence, prior_owner = prior_claim(run_key, later)
    local fields = {'status', 'running', 'owner_id', owner, 'fence', fence_s,
      'lease_expires_at', expires, 'lease_ttl_ms', num_arg(ttl), 'started_at', at,
      'attempt_claim', fence_s .. ' ' .. owner}
    if held ~= '' then
      fields[#fields + 1] = 'held'
      fields[#fields + 1] = held
    end
    if cur[11] then
      redis.call('HDEL', run_key, 'blocked_on')
    end
    -- the first claim's time stays: a run's duration spans every attempt and park
    if not later[4] then
      fields[#fields + 1] = 'first_started_at'
      fields[#fields + 1] = at
      -- claimed at last: its queued time-to-live no longer applies (a re-run's fence
      -- goes on from its old run's, so its first claim is not fence 1)
      first_claims[#first_claims + 1] = id
    end
    new_leases[#new_leases + 1] = expires
    new_leases[#new_leases + 1] = id
    emit(run_key, k.events_prefix .. id, 'claimed', fence, now, data, k.maxlen, 'running', fields,
      activity_of_prefix(k.events_prefix), id)
    claimed[#claimed + 1] = claim_row(id, fence, cur, later[1], later[2], prior_fence,
      prior_owner)
  end

  -- A run its rate-limit buckets hold back leaves its lane for `delayed` at its exact start
  -- time (rate_hold in lib.lua: the tokens are taken only when it is leased).
  local function held_back(id, cur)
    return rate_hold(k.run_prefix, k.events_prefix, k.delayed, id, now, k.maxlen,
      {cur[13], cur[14], cur[12]})
  end

  -- Serve one lane from the ring: lease its head (or, when it is the only lane, as many
  -- as may start), block it on the resource its head waits for, or drop it when empty.
  -- Each visit leases a run or takes a lane out of the ring: O(1) per claimed run.
  local throttled = 0
  local function serve(lane, room)
    local lane_key = tag .. 'lane:' .. lane
    local head = redis.call('ZRANGE', lane_key, 0, 0)
    if #head == 0 then
      redis.call('HDEL', tag .. 'placed', lane)
      return
    end
    local cur = redis.call('HMGET', k.run_prefix .. head[1], unpack(FIELDS))
    if not CLAIMABLE[cur[1]] then
      -- not queued any more (a record gone): drop the entry, look at the lane again
      redis.call('ZREM', lane_key, head[1])
      dequeue(cur[9], cur[10], head[1])
      redis.call('LPUSH', k.ready, lane)
      return
    end
    local res, n = gate(cur, room)
    if res then
      block(lane, head[1], cur, res, n)
      throttled = throttled + 1
      return
    end
    if n > 1 and redis.call('LLEN', k.ready) == 0 then
      local popped = redis.call('ZPOPMIN', lane_key, n)
      for i = 1, #popped, 2 do
        local id = popped[i]
        local run = i == 1 and cur or redis.call('HMGET', k.run_prefix .. id, unpack(FIELDS))
        if CLAIMABLE[run[1]] and not held_back(id, run) then
          lease(id, run)
        else
          dequeue(run[9], run[10], id)
        end
      end
    else
      redis.call('ZREM', lane_key, head[1])
      if held_back(head[1], cur) then
        dequeue(cur[9], cur[10], head[1])
      else
        lease(head[1], cur)
      end
    end
    if redis.call('EXISTS', lane_key) == 1 then
      redis.call('RPUSH', k.ready, lane)
    else
      redis.call('HDEL', tag .. 'placed', lane)
    end
  end

  local qlimit = limit_of('q')
  -- the leases held before this call (read once: this call's own are #claimed)
  local leased_before = qlimit and redis.call('ZCARD', k.leases)
  -- runs the rate gate holds back are looked at but not claimed: bound the looking
  local visits = 2 * want + 64
  while #claimed < want and visits > 0 do
    visits = visits - 1
    local room = want - #claimed
    if qlimit then
      local free = qlimit - leased_before - #claimed
      if free <= 0 then
        throttled = throttled + 1
        break
      end
      room = math.min(room, free)
    end
    local lane = redis.call('LPOP', k.ready)
    if not lane then
      break
    end
    serve(lane, room)
  end
  if dequeued > 0 then
    redis.call('DECRBY', tag .. 'queued', dequeued)
  end
  call_chunked('ZADD', k.leases, new_leases)
  call_chunked('ZREM', unclaimed_key_of(k.run_prefix), first_claims)
  return claimed, throttled
end

-- The hand-off (Temporal's "sync match"): a worker with a free slot whose claim found
-- nothing registers in `<tag>handoff:idle` (owner -> registration expiry ms, Redis
-- clock) with what a claim needs on its behalf in `<tag>handoff:args` (owner ->
-- "<lease ttl ms> <events maxlen> <promote max>"); claim_runs writes both. One
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
  local ttl, maxlen, promote_max = string.match(args, '^(%d+) (%d+) (%d+)$')
  if not ttl then
    return false  -- never written so by claim_runs; nothing is claimed on its word
  end
  local claimed = claim_core({ready = tag .. 'ready', delayed = tag .. 'delayed',
    leases = tag .. 'leases', run_prefix = tag .. 'run:', events_prefix = tag .. 'events:',
    owner = owner, ttl = tonumber(ttl), maxlen = maxlen, now = now}, 1, tonumber(promote_max))
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
