-- shapes: a create's argument records (what every run of a call shares, then one record
-- per run) read and checked into shapes, before create.lua writes anything.
-- Builds on: args, fence, lanes, finalize, gcra.

-- Creating runs: create_run creates one, create_runs a chunk of one queue's, and both
-- do it with the functions below, so a run is the same whichever way it came in. Their
-- ARGV is one record, CreateArgs (app/store/runs/bindings.py): queue, maxlen,
-- wake_channel, retention, then segments. A segment is a CreateShape record (everything
-- its runs share), a count, and that many CreateRun records (each run's own fields);
-- create_run: one segment of one run. Each field is read by its name in the record
-- (`@CreateShape.handler`: its offset, `@CreateShape`: the record's size), so the
-- records are the one list of fields. A shape is checked and turned into its record,
-- lane and `created` event once per segment, not once per run: a batch's runs mostly
-- share one.

-- The call's shared arguments, checked: {queue, maxlen, wake, retention}, and the
-- `created` event data its runs share (created_data).
local function create_shared()
  int_arg(ARGV[@maxlen], 'maxlen', 0)
  return {queue = ARGV[@queue], maxlen = ARGV[@maxlen], wake = ARGV[@wake_channel],
    retention = retention_arg(ARGV[@retention]), created = {}}
end

-- One shape (the CreateShape record at ARGV[i..]), every field checked and decoded,
-- nothing read or written.
local function create_shape(i)
  local s = {
    handler = ARGV[i + @CreateShape.handler],
    max_attempts = int_arg(ARGV[i + @CreateShape.max_attempts], 'max_attempts', 1),
    on_lease_expired = enum_arg(ARGV[i + @CreateShape.on_lease_expired], 'on_lease_expired',
      {'orphan', 'retry'}),
    metadata = ARGV[i + @CreateShape.metadata],
    budget = ARGV[i + @CreateShape.budget],
    retention_ms = ARGV[i + @CreateShape.retention_ms],
    queued_ttl_ms = int_arg(ARGV[i + @CreateShape.queued_ttl_ms], 'queued_ttl_ms', 1),
    traceparent = ARGV[i + @CreateShape.traceparent],
    rate_limits = ARGV[i + @CreateShape.rate_limits],
    ckey = ARGV[i + @CreateShape.concurrency_key],
    skey = ARGV[i + @CreateShape.singleton_key],
    on_conflict = enum_arg(ARGV[i + @CreateShape.on_conflict], 'on_conflict',
      {'reject', 'enqueue', 'cancel_active', 'replace_queued'}),
    priority = int_arg(ARGV[i + @CreateShape.priority], 'priority', -1000000),
    boost_ms = int_arg(ARGV[i + @CreateShape.boost_ms], 'boost_ms', -1000000000000),
    parent_id = ARGV[i + @CreateShape.parent_id],
    root_id = ARGV[i + @CreateShape.root_id],
    depth = int_arg(ARGV[i + @CreateShape.depth], 'depth', 0),
    versioning = ARGV[i + @CreateShape.versioning],
  }
  if s.versioning ~= '' then
    enum_arg(s.versioning, 'versioning', {'pinned', 'auto_upgrade'})
  end
  if s.parent_id ~= '' then
    run_id_arg(s.parent_id)
  end
  if s.root_id ~= '' then
    run_id_arg(s.root_id)
  end
  if s.retention_ms ~= '' then
    int_arg(s.retention_ms, 'retention_ms', 0)
  end
  if ARGV[i + @CreateShape.start_at_ms] ~= '' then
    s.start_at_ms = int_arg(ARGV[i + @CreateShape.start_at_ms], 'start_at_ms', 0)
  end
  if ARGV[i + @CreateShape.delay_ms] ~= '' then
    s.delay_ms = int_arg(ARGV[i + @CreateShape.delay_ms], 'delay_ms', 0)
  end
  if s.rate_limits ~= '' then
    rate_limits_arg(s.rate_limits)
  end
  if string.find(s.ckey, '[|\n]') or string.find(s.skey, '[|\n]') then
    bad_argument('concurrency_key or singleton_key', s.ckey .. s.skey)
  end
  s.lane = lane_of(s.handler, s.ckey, s.skey)
  return s
end

-- Every segment from ARGV[@groups] on, checked (create_shape, the count, each run's id): the
-- shapes in order, each with the ARGV index of its first run (first) and of its last
-- (last). Nothing read or written: a script checks them all before its first write.
local function create_segments()
  local segments, i, argc = {}, @groups, #ARGV
  while i <= argc do
    if i + @CreateShape > argc then
      bad_argument('segment from ARGV[' .. i .. '] (shape and count)', argc - i + 1)
    end
    local s = create_shape(i)
    local first = i + @CreateShape + 1
    local last = first + (int_arg(ARGV[first - 1], 'count', 1) - 1) * @CreateRun
    if last + @CreateRun - 1 > argc then
      bad_argument('count (more runs than ARGV holds)', ARGV[first - 1])
    end
    for j = first, last, @CreateRun do
      run_id_arg(ARGV[j + @CreateRun.run_id])
    end
    s.first, s.last = first, last
    segments[#segments + 1] = s
    i = last + @CreateRun
  end
  return segments
end
