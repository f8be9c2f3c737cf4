-- shapes: a create's argument records (what every run of a call shares, then one record
-- per run) read and checked into shapes, before create.lua writes anything.
-- Builds on: args, fence, lanes, finalize, gcra.

-- Creating runs: create_run creates one, create_runs a chunk of one queue's, and both
-- do it with the functions below, so a run is the same whichever way it came in. Their
-- ARGV share one layout: queue, maxlen, wake_channel, retention, then segments. A
-- segment is a shape (CREATE_SHAPE_SIZE fields: everything its runs share), a count,
-- and that many runs of CREATE_RUN_SIZE fields each (run_id, input, idempotency_key,
-- fingerprint); create_run: one segment of one run. A shape is checked and turned into
-- its record, lane and `created` event once per segment, not once per run: a batch's
-- runs mostly share one.
local CREATE_SHAPE_SIZE, CREATE_RUN_SIZE = 19, 4

-- The call's shared arguments, checked: {queue, maxlen, wake, retention}, and the
-- `created` event data its runs share (created_data).
local function create_shared()
  int_arg(ARGV[2], 'maxlen', 0)
  return {queue = ARGV[1], maxlen = ARGV[2], wake = ARGV[3], retention = retention_arg(ARGV[4]),
    created = {}}
end

-- One shape (ARGV[i..i+18]), every field checked and decoded, nothing read or written.
local function create_shape(i)
  local s = {handler = ARGV[i], max_attempts = int_arg(ARGV[i + 1], 'max_attempts', 1),
    on_lease_expired = enum_arg(ARGV[i + 2], 'on_lease_expired', {'orphan', 'retry'}),
    metadata = ARGV[i + 3], budget = ARGV[i + 4], retention_ms = ARGV[i + 5],
    queued_ttl_ms = int_arg(ARGV[i + 6], 'queued_ttl_ms', 1), traceparent = ARGV[i + 7],
    rate_limits = ARGV[i + 10], ckey = ARGV[i + 11], skey = ARGV[i + 12],
    on_conflict = enum_arg(ARGV[i + 13], 'on_conflict',
      {'reject', 'enqueue', 'cancel_active', 'replace_queued'}),
    priority = int_arg(ARGV[i + 14], 'priority', -1000000),
    boost_ms = int_arg(ARGV[i + 15], 'boost_ms', -1000000000000),
    parent_id = ARGV[i + 16], root_id = ARGV[i + 17],
    depth = int_arg(ARGV[i + 18], 'depth', 0)}
  if s.parent_id ~= '' then
    run_id_arg(s.parent_id)
  end
  if s.root_id ~= '' then
    run_id_arg(s.root_id)
  end
  if s.retention_ms ~= '' then
    int_arg(s.retention_ms, 'retention_ms', 0)
  end
  if ARGV[i + 8] ~= '' then
    s.start_at_ms = int_arg(ARGV[i + 8], 'start_at_ms', 0)
  end
  if ARGV[i + 9] ~= '' then
    s.delay_ms = int_arg(ARGV[i + 9], 'delay_ms', 0)
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

-- Every segment from ARGV[5] on, checked (create_shape, the count, each run's id): the
-- shapes in order, each with the ARGV index of its first run (first) and of its last
-- (last). Nothing read or written: a script checks them all before its first write.
local function create_segments()
  local segments, i, argc = {}, 5, #ARGV
  while i <= argc do
    if i + CREATE_SHAPE_SIZE > argc then
      bad_argument('segment from ARGV[' .. i .. '] (shape and count)', argc - i + 1)
    end
    local s = create_shape(i)
    local first = i + CREATE_SHAPE_SIZE + 1
    local last = first + (int_arg(ARGV[first - 1], 'count', 1) - 1) * CREATE_RUN_SIZE
    if last + CREATE_RUN_SIZE - 1 > argc then
      bad_argument('count (more runs than ARGV holds)', ARGV[first - 1])
    end
    for j = first, last, CREATE_RUN_SIZE do
      run_id_arg(ARGV[j])
    end
    s.first, s.last = first, last
    segments[#segments + 1] = s
    i = last + CREATE_RUN_SIZE
  end
  return segments
end
