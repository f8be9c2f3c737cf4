-- create: making runs, one or a batch, each placed in its lane (create_run, create_runs,
-- retry_run, fire_schedule, spawns).
-- Builds on: args, keys, events, lanes, finalize, idempotency.

local function enter_queue(run_key, events_key, run_id, q, created_data, now, start_ms,
    queued_ttl_ms)
  local record, known = q.record, q.known
  emit(run_key, events_key, 'created', 0, now, created_data, q.maxlen, 'queued', record,
    q.activity, run_id)
  local index = q.index  -- create_runs: the chunk's index writes, sent once (index_created)
  -- a delayed run's time-to-live unclaimed counts from its start time, not from now
  local expires_ms = math.max(now, start_ms) + queued_ttl_ms
  if index then
    local n = index.n
    index.runs[n + 1], index.runs[n + 2] = num_arg(now), run_id
    index.unclaimed[n + 1], index.unclaimed[n + 2] = num_arg(expires_ms), run_id
    index.n = n + 2
  else
    redis.call('ZADD', q.runs, now, run_id)
    redis.call('ZADD', q.unclaimed, expires_ms, run_id)
  end
  if start_ms > now then
    local prefix = string.sub(run_key, 1, #run_key - #run_id)
    if not record then
      redis.call('HSET', run_key, 'run_at', start_ms)
    end
    emit(run_key, events_key, 'wait', 0, now,
      cjson.encode({kind = 'run_at', subject = 'start', until_ms = start_ms}), q.maxlen,
      'queued', nil, q.activity, run_id)
    redis.call('ZADD', delayed_of(prefix), start_ms, run_id)
  elseif index and known[2] == '' and known[3] == '' then
    -- a run of no concurrency or singleton key: its lane's one ZADD for the chunk
    local members = chunk_lane(q, index, known[5])
    local m = #members
    members[m + 1] = num_arg(now - (tonumber(known[4]) or 0))
    members[m + 2] = run_id
  else
    -- make_ready less its give-back: a new run holds nothing
    enqueue(tag_of_ready(q.ready), run_key, run_id, now, false, known)
  end
  -- idle workers claim (a delayed run: once, to learn the earliest delayed time, their
  -- timer's next wake); q.wake nil: the caller publishes once for many runs
  if q.wake then
    redis.call('PUBLISH', q.wake, 'ready')
  end
end

-- The index writes of a create_runs chunk, gathered by enter_queue (q.index) and sent
-- here once per chunk: one ZADD of the runs index and one of the unclaimed set for all
-- its runs, one ZADD per lane of its runs without a concurrency or singleton key (those
-- take enqueue's path, per run), one INCRBY of `queued`. A new lane is still placed in
-- the ring when its first run comes (enqueue's HSETNX + RPUSH, once per lane), so the
-- ring's order is the one-by-one order. Nothing a later run of the chunk reads waits on
-- these writes: its checks read its record, key and singleton key.
local function new_index()
  return {n = 0, runs = {}, unclaimed = {}, lanes = {}, lane_order = {}}
end

local function index_created(q, index)
  if index.n == 0 then
    return
  end
  redis.call('ZADD', q.runs, unpack(index.runs))
  redis.call('ZADD', q.unclaimed, unpack(index.unclaimed))
  local tag, queued = q.tag, 0
  for _, lane in ipairs(index.lane_order) do
    queued = queued + redis.call('ZADD', tag .. 'lane:' .. lane, unpack(index.lanes[lane]))
  end
  if queued > 0 then
    redis.call('INCRBY', tag .. 'queued', queued)
  end
end

-- The data of a run's `created` event, encoded once per call for the shapes that share
-- it (a chunk's mostly do): handler, queue, attempts, keys, priority.
local function created_data(shared, s)
  local ckey, skey, priority = s.ckey, s.skey, s.priority
  local same = s.handler .. '|' .. num_arg(s.max_attempts) .. '|' .. ckey .. '|' .. skey .. '|'
    .. num_arg(priority)
  local data = shared.created[same]
  if not data then
    data = cjson.encode({handler = s.handler, queue = shared.queue,
      max_attempts = s.max_attempts, concurrency_key = ckey ~= '' and ckey or nil,
      singleton_key = skey ~= '' and skey or nil, priority = priority ~= 0 and priority or nil})
    shared.created[same] = data
  end
  return data
end

-- Where a shape's runs go in this call (now: the call's TIME): its start time, its
-- `created` data, and its record, one table every run of the segment reuses: the run's
-- own values fill slots RECORD_ID, RECORD_INPUT, RECORD_ROOT (a run that is its own
-- root) and the last, its idempotency key (left out, record.n, for a run without one);
-- emit fills the event's id. A field whose value is empty or its default is left out
-- of the record: every reader, Lua and Python, takes an absent idempotency_key,
-- budget, traceparent, rate_limits, ckey, skey, retention_ms as '', metadata as {},
-- priority and boost_ms as 0, and lane as the one lane_of names (records written
-- before hold them all, '' or not), and a record of fewer fields is a cheaper HSET
-- (each field is searched for in the listpack before it is added). q: the queue's
-- keys (create_one); the shape's enter_queue argument is s.q.
local RECORD_ID, RECORD_INPUT, RECORD_ROOT = 2, 10, 22
local function place_shape(s, q, shared, now)
  local start_ms = s.start_at_ms or (s.delay_ms and now + s.delay_ms) or now
  s.start_ms, s.data = start_ms, created_data(shared, s)
  local record = {
    'id', '', 'queue', shared.queue, 'handler', s.handler, 'status', 'queued',
    'input', '', 'attempt', '1', 'max_attempts', num_arg(s.max_attempts),
    'on_lease_expired', s.on_lease_expired, 'fence', '0', 'created_at', num_arg(now),
    'root_id', s.root_id}
  local function add(field, value, absent)
    if value ~= absent then
      record[#record + 1] = field
      record[#record + 1] = value
    end
  end
  add('metadata', s.metadata, '{}')
  add('budget', s.budget, '')
  add('traceparent', s.traceparent, '')
  add('rate_limits', s.rate_limits, '')
  add('ckey', s.ckey, '')
  add('skey', s.skey, '')
  add('lane', s.lane, lane_of(s.handler, '', ''))
  add('retention_ms', s.retention_ms, '')
  add('priority', num_arg(s.priority), '0')
  add('boost_ms', num_arg(s.boost_ms), '0')
  add('versioning', s.versioning, '')
  if s.parent_id ~= '' then
    add('parent_id', s.parent_id)
    add('depth', num_arg(s.depth))
  end
  if start_ms > now then
    add('run_at', num_arg(start_ms))
  else
    add('qbase', num_arg(now))
  end
  add('last_event_id', '')
  record.event_at = #record
  add('idempotency_key', '')
  s.own_root = s.root_id == ''
  s.input_at, s.root_at = RECORD_INPUT, RECORD_ROOT
  if q.template and s.last > s.first then
    -- many runs of this shape: each record is a COPY of one template hash (the record
    -- with the run's own values empty: one memcpy of its listpack), then one HSET of
    -- the run's own fields; the same fields, values and order as the whole HSET
    s.template, record = record, {'id', '', 'input', ''}
    s.input_at, s.root_at = 4, s.own_root and 6
    if s.own_root then
      add('root_id', '')
    end
    add('last_event_id', '')
    record.event_at = #record
    add('idempotency_key', '')
    s.plain = s.skey == '' and s.ckey == '' and s.parent_id == '' and start_ms <= now
  end
  s.q = {ready = q.ready, runs = q.runs, unclaimed = q.unclaimed, wake = q.wake,
    maxlen = shared.maxlen, activity = q.tag .. 'activity', index = q.index, record = record,
    known = {s.handler, s.ckey, s.skey, s.boost_ms, s.lane, qbase_written = start_ms <= now}}
end

local function place_template(q, record)
  redis.call('DEL', q.template)
  redis.call('HSET', q.template, unpack(record, 1, #record - 2))
end

-- What an earlier create decides for this one, before anything is written: REPLAYED and
-- the run's id when its record exists (a create retried after a lost reply must not
-- enqueue the run twice), else idempotent_prior's answer for its key, else nil (create
-- it). A fresh run with an unused key, the usual create, is told by one EXISTS of both
-- keys (a count of 0): one redis.call instead of an EXISTS and a GET.
local function create_prior(run_key, idem_key, run_id, idem, fingerprint)
  if idem ~= '' and redis.call('EXISTS', run_key, idem_key) == 0 then
    return nil
  end
  if redis.call('EXISTS', run_key) == 1 then
    return 'REPLAYED', run_id
  end
  return idempotent_prior(idem_key, idem, fingerprint)
end

-- Create the run at ARGV[j..j+3] of shape s (create_shape, then place_shape for this
-- call) in the queue whose keys q holds ({tag, ready, runs, unclaimed, wake; wake nil:
-- the caller publishes once for all}); run_key, events_key, idem_key: its own keys
-- (idem_key nil or anything for a run without an idempotency key). Reads what decides
-- it (the record, the idempotency key, a child's tombstone, the singleton key) before
-- its own writes. Returns code, run id, created ms (0 when nothing was written): OK,
-- REPLAYED, CONFLICT, SINGLETON or CANCEL as create_run's header says.
local function create_one(s, j, run_key, events_key, idem_key, q, shared, now)
  local run_id, idem = ARGV[j + @CreateRun.run_id], ARGV[j + @CreateRun.idempotency_key]
  local fingerprint = ARGV[j + @CreateRun.fingerprint]
  local skey, tag = s.skey, q.tag
  local prior_code, prior_id = create_prior(run_key, idem_key, run_id, idem, fingerprint)
  if prior_code then
    return prior_code, prior_id, 0
  end
  if s.parent_id ~= '' and redis.call('EXISTS', tag .. 'unborn:' .. run_id) == 1 then
    return 'CANCEL', run_id, 0
  end
  -- a singleton key's holder and newest queued run, and what this create does to them
  local active, superseded
  if skey ~= '' then
    active = redis.call('HGET', tag .. 'slots', 's:' .. skey)
    local last = redis.call('HGET', tag .. 'one:' .. skey, 'last')
    if s.on_conflict == 'reject' and (active or last) then
      return 'SINGLETON', active or last, 0
    end
    if s.on_conflict == 'replace_queued' and last then
      local cur = redis.call('HMGET', tag .. 'run:' .. last, 'status', 'first_started_at')
      if cur[1] == 'queued' and not cur[2] then
        superseded = last
      end
    end
    if active and (s.on_conflict ~= 'cancel_active'
        or redis.call('HGET', tag .. 'run:' .. active, 'status') ~= 'running') then
      active = nil
    end
  end

  if idem ~= '' then
    redis.call('SET', idem_key, run_id .. ' ' .. fingerprint)
  end
  -- the record is written with its `created` event's id (enter_queue): one HSET
  if s.template then
    if q.template_of ~= s then
      place_template(q, s.template)
      q.template_of = s
    end
    redis.call('COPY', q.template, run_key)
  end
  local record = s.q.record
  local n = #record
  record[RECORD_ID], record[s.input_at], record[n] = run_id, ARGV[j + @CreateRun.input], idem
  record.n = idem ~= '' and n or n - 2
  if s.own_root then
    record[s.root_at] = run_id
  end
  if superseded then
    local k = {leases = tag .. 'leases', run_prefix = tag .. 'run:', events_prefix = tag .. 'events:',
      idem_prefix = tag .. 'idem:'}
    local err = {code = 'superseded', message = 'replaced by a newer run of its singleton key '
      .. 'before it started', retryable = false, details = {superseded_by = run_id}}
    finalize(k, superseded, 'cancelled', 0, now, {'error', cjson.encode(err)},
      cjson.encode({reason = 'superseded', superseded_by = run_id}), shared.retention,
      shared.maxlen)
  end
  if active then
    request_cancel(tag, active, now, {reason = 'cancel_active', superseded_by = run_id},
      shared.maxlen)
  end
  enter_queue(run_key, events_key, run_id, s.q, s.data, now, s.start_ms, s.queued_ttl_ms)
  return 'OK', run_id, now
end

-- Create the runs of segment s (place_shape says s.plain: a template, no singleton or
-- concurrency key, no parent, starting now) in the create_runs chunk whose keys q holds
-- ({run_prefix, events_prefix, idem_prefix, template} beside create_one's); their codes
-- go to reply from index n on. Each run is what create_one makes of it, write for write
-- (the key's SET, the COPY, the created event, the record's own fields, the activity
-- entry, the chunk's index and lane members), in one loop whose per-call values (the
-- time, the expiry, the lane's score) are formatted once: create_one's general path
-- runs ~twice the Lua per run (callgrind: 135k against 116k instructions per run).
-- The writes are the checks, not reads before them: the key's SETNX says whether it was
-- there (then nothing is written, and create_prior's answer is read: the record first,
-- then the key), the COPY whether the record was (then the SETNX's key is deleted, as
-- create_prior would have written none, and the run is REPLAYED). Both decide only
-- whether a run is written, on what a run of this chunk or an earlier call left; no
-- check that can fail comes after them (every argument is checked before the first
-- write, create_segments). Returns the next reply index and how many runs it created.
local function create_plain(s, q, now, reply, n)
  local run_prefix, events_prefix, idem_prefix = q.run_prefix, q.events_prefix, q.idem_prefix
  local record, index, maxlen, data, activity = s.q.record, q.index, s.q.maxlen, s.data,
    s.q.activity
  local now_s, expires_s = num_arg(now), num_arg(now + s.queued_ttl_ms)
  local score, last, root_at = num_arg(now - s.boost_ms), #record, s.root_at
  local runs, unclaimed, members, created = index.runs, index.unclaimed, nil, 0
  local template = q.template
  for j = s.first, s.last, @CreateRun do
    local run_id, idem = ARGV[j + @CreateRun.run_id], ARGV[j + @CreateRun.idempotency_key]
    local run_key, idem_key = run_prefix .. run_id, idem ~= '' and idem_prefix .. idem
    local code, id
    if idem_key and redis.call('SETNX', idem_key,
        run_id .. ' ' .. ARGV[j + @CreateRun.fingerprint]) == 0 then
      -- the key was there, SETNX wrote nothing: create_prior's answer, the record first
      if redis.call('EXISTS', run_key) == 1 then
        code, id = 'REPLAYED', run_id
      else
        code, id = idempotent_prior(idem_key, idem, ARGV[j + @CreateRun.fingerprint])
      end
    else
      if q.template_of ~= s then
        place_template(q, s.template)
        q.template_of = s
      end
      if redis.call('COPY', template, run_key) == 0 then
        -- the record was there, COPY wrote nothing: a replay of that run; the key the
        -- SETNX just wrote is taken back (create_prior would have written none)
        if idem_key then
          redis.call('DEL', idem_key)
        end
        code, id = 'REPLAYED', run_id
      end
    end
    if code then
      reply[n + 1], reply[n + 2], reply[n + 3] = code, id, 0
    else
      local event_id = redis.call('XADD', events_prefix .. run_id, 'MAXLEN', '~', maxlen, '*',
        'type', 'created', 'ts', now_s, 'fence', '0', 'data', data)
      record[RECORD_ID], record[s.input_at], record[last - 2], record[last] =
        run_id, ARGV[j + @CreateRun.input], event_id, idem
      if root_at then
        record[root_at] = run_id
      end
      redis.call('HSET', run_key, unpack(record, 1, idem_key and last or last - 2))
      redis.call('XADD', activity, 'MAXLEN', '~', ACTIVITY_MAXLEN, '*', 'run_id', run_id,
        'event_id', event_id, 'type', 'created', 'status', 'queued', 'fence', '0', 'ts', now_s)
      local k = index.n
      runs[k + 1], runs[k + 2], unclaimed[k + 1], unclaimed[k + 2] =
        now_s, run_id, expires_s, run_id
      index.n = k + 2
      members = members or chunk_lane(q, index, s.lane)
      local m = #members
      members[m + 1], members[m + 2] = score, run_id
      reply[n + 1], reply[n + 2], reply[n + 3] = 'OK', run_id, now
      created = created + 1
    end
    n = n + 3
  end
  return n, created
end
