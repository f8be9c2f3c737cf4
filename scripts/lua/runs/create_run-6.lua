-- create_run: a new run enters the queue as `queued`, with its `created` event.
--
-- KEYS[1]  run          hash    the new run's record
-- KEYS[2]  events       stream  the new run's events
-- KEYS[3]  ready        list    runnable ids (FIFO)
-- KEYS[4]  runs         zset    every run of the queue by created_at ms
-- KEYS[5]  idem         string  the idempotency key's record (unused when idempotency_key is '')
-- KEYS[6]  unclaimed    zset    id -> epoch ms when the run expires if nobody claimed it
-- ARGV[1]  queue        string
-- ARGV[2]  maxlen       integer approximate cap of the event stream
-- ARGV[3]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- ARGV[4]  retention    string  per-status retention spec (store/retention.py), for a run
--          replace_queued supersedes
-- ARGV[5..] CreateShape segments  one segment (create_runs takes many of the same): the
--          run's CreateShape record (app/store/runs/bindings.py: every field, its meaning
--          and unit), then the count 1 and the run's CreateRun record (its id, input json,
--          idempotency key, '' for none, and the request's fingerprint, for replay
--          detection: '' with no idempotency key, unread), each field read by its name
--          (max_steps, max_duration_s), '' for none; retention_ms: the run's own retention
--          once it ends, '' for the per-status one; queued_ttl_ms: how long it may wait
--          unclaimed before it ends `expired`; traceparent: W3C trace context the worker
--          parents each attempt on, '' for none; start_at_ms: epoch ms before which it may
--          not start (run_at), '' for none; delay_ms: ms from now (the Redis clock) before
--          it may start, '' for none (a run with a start time in the future waits in the
--          queue's delayed zset, derived from the ready key's prefix as claim_runs'
--          retries do, and its queued TTL counts from then); rate_limits: json list of
--          the start buckets [bucket, limit, period_ms, burst, cost] it waits on
--          (rate_gate in gcra.lua), at most 8, '' for none; concurrency_key: the key whose
--          limit it counts against, '' for none; singleton_key: at most one run of this
--          key runs at a time, '' for none; on_conflict: reject | enqueue | cancel_active
--          | replace_queued (with a singleton key: what to do when a run of the key is
--          active or queued); priority: higher first within its lane (-100..100, checked
--          by the API); boost_ms: priority x aging step, its lane score is enqueue ms -
--          boost_ms; parent_id: the run that spawns this one (ctx.spawn), '' for a
--          top-level run; root_id: the top-level run of its tree ('' : this run's own
--          id); depth: parents above it (0 for a top-level run)
-- derived  the flow-control keys (lanes.lua), the idempotency prefix and the cancel
--          channel, from the queue's tag (KEYS[3] less ':ready'); a child's tombstone
--          `<tag>:unborn:<id>` (cancel_children: its parent ended before it was created);
--          the hand-off's handoff:idle, handoff:args, handoff:inbox:<owner>, and
--          claim_runs' delayed and leases (includes/claim.lua)
-- returns  {code, run_id, created_at_ms}  codes: OK (created), REPLAYED (same key and
--          same body, or this run id exists already: the earlier run's id),
--          CONFLICT (same key, other body: the earlier run's id), SINGLETON (reject:
--          a run of the singleton key is active or queued: its id; nothing written),
--          CANCEL (a child whose parent's end cancelled it before it existed: nothing
--          written, so a stale parent worker cannot bring it to life)
-- events   created, then wait (kind run_at, until_ms) when its start time is ahead;
--          with cancel_active, cancel_requested on the active run; with
--          replace_queued, cancelled (reason superseded) on the queued one; the
--          hand-off: when a worker is registered idle, the events of a claim_runs
--          call of that worker for one run (claimed, or wait on a blocked lane)
-- invariant: one idempotency key names at most one run, one run id one record; a run is ready only once
--          its record and its `created` event exist. A singleton key's conflict is
--          decided in this same step, so two creates of one key in one millisecond
--          meet in order; only a never-claimed queued run (no first_started_at; not
--          fence 0, as a re-run's fence starts above 0) is superseded. Once created,
--          a live hand-off registration gets the run claim_runs would give its worker
--          (claim_core: fairness, limits and rate buckets hold), pushed to its inbox;
--          the wake is published unless that left no lane in the ring and the run
--          has no start time ahead (an idle worker learns it from its wake).
-- validate-then-write: every argument is checked, the record and the idempotency key
--          looked up and the event encoded before the first SET; input, metadata and
--          budget are stored as the API encoded them (it refuses non-finite numbers).
--          The checks and the create are shapes.lua's create_segments and create.lua's
--          create_one, which create_runs calls for each run of a chunk: a run is the same
--          either way.
--- @include args
--- @include keys
--- @include events
--- @include fence
--- @include slots
--- @include lanes
--- @include family
--- @include finalize
--- @include idempotency
--- @include gcra
--- @include shapes
--- @include create
--- @include claim
--- @include handoff

local segments = create_segments()
local s = segments[1]
if not s or #segments ~= 1 or s.first ~= s.last or s.last + @CreateRun - 1 ~= #ARGV then
  bad_argument('count of runs (one)', #ARGV)
end
run_id_arg(ARGV[s.first + @CreateRun.run_id], KEYS[1], KEYS[2])
local shared = create_shared()
local q = {tag = tag_of_ready(KEYS[3]), ready = KEYS[3], runs = KEYS[4], unclaimed = KEYS[6]}
local now = now_ms()
place_shape(s, q, shared, now)
local code, id, created_ms = create_one(s, s.first, KEYS[1], KEYS[2], KEYS[5], q, shared, now)
if code == 'OK' then
  local delayed = s.start_ms > now
  if not (hand_off(q.tag, now) and not delayed and redis.call('LLEN', q.ready) == 0) then
    redis.call('PUBLISH', shared.wake, 'ready')
  end
end
return {code, id, created_ms}
