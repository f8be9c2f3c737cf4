-- create_runs: a chunk of new runs of one queue enters it as `queued`, each with its
-- `created` event, in one call; each run exactly as create_run creates it.
--
-- KEYS[1]  ready        list    runnable ids (FIFO)
-- KEYS[2]  runs         zset    every run of the queue by created_at ms
-- KEYS[3]  unclaimed    zset    id -> epoch ms when a run expires if nobody claimed it
-- KEYS[4]  run_prefix   prefix  run keys are this prefix .. id (same hash tag)
-- KEYS[5]  events_prefix  prefix  event streams are this prefix .. id
-- KEYS[6]  idem_prefix  prefix  idempotency keys are this prefix .. key
-- ARGV[1]  queue        string
-- ARGV[2]  maxlen       integer approximate cap of each event stream
-- ARGV[3]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- ARGV[4]  retention    string  per-status retention spec (store/retention.py), for a run
--          replace_queued supersedes
-- ARGV[5..] CreateShape segments  in create order: a CreateShape record (shared by the
--          segment's runs), then a count n >= 1 and n CreateRun records, one per run (both
--          records: app/store/runs/bindings.py, as create_run's header says)
-- derived  as create_run's: the flow-control keys, the delayed zset, a child's
--          tombstone, the hand-off's keys and the leases, from the queue's tag (KEYS[1]
--          less ':ready'); and <tag>:create_template (hash), a shape's record less the
--          run's own values, which each of its runs' records is a COPY of when the
--          segment has two or more (then one HSET of the run's own fields): written at
--          its first run created, deleted before the script returns
-- returns  a flat list of {code, run_id, created_at_ms} per group, in order, with the
--          codes of create_run: OK (created), REPLAYED (same key and same body, or the
--          run id exists: the earlier run's id), CONFLICT (same key, other body: the
--          earlier run's id), SINGLETON (reject: nothing written for it), CANCEL (a
--          child its parent's end cancelled: nothing written for it)
-- events   per run as create_run: created, then wait (run_at) when its start is ahead;
--          cancel_requested / cancelled (superseded) on a singleton's runs; the
--          hand-off's claim events (create_run's header)
-- invariant: create_run's, per run: the runs are created one after the other, so two
--          runs of one chunk naming the same idempotency key (or singleton key) meet
--          as two create_run calls in that order would (the second a replay, or a
--          conflict if its body differs). One TIME for the chunk (its runs share
--          created_at) and at most one PUBLISH of the wake channel; the
--          record of each run the fields, values and order create_run writes (a
--          segment of plain runs, create.lua create_plain: the same writes in a leaner
--          loop); the
--          index writes (runs, unclaimed, the plain runs' lanes, `queued`) once per chunk
--          after its runs (create.lua index_created). Then up to one hand-off per run
--          created, each to another live registration (create_run's rule), and the
--          wake published unless a hand-off left the ring empty and no run of the
--          chunk starts later.
-- validate-then-write: every segment is checked (create_segments: each shape's fields,
--          its count, its runs' ids) before the first write; each run's record,
--          idempotency key, tombstone and singleton key are then read before its own
--          writes (after the earlier runs' writes); in a plain segment the key's SETNX and
--          the record's COPY are those reads (create.lua create_plain: a key or record
--          that was there is left as it was).
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
local shared = create_shared()
local run_prefix, events_prefix, idem_prefix = KEYS[4], KEYS[5], KEYS[6]
local q = {tag = tag_of_ready(KEYS[1]), ready = KEYS[1], runs = KEYS[2], unclaimed = KEYS[3],
  index = new_index(), template = create_template_of(KEYS[1]), run_prefix = run_prefix,
  events_prefix = events_prefix, idem_prefix = idem_prefix}
local now = now_ms()
local reply, n, created, delayed = {}, 0, 0, false
for _, s in ipairs(segments) do
  place_shape(s, q, shared, now)
  if s.plain then  -- the usual segment: create.lua create_plain's lean loop, the same writes
    local made
    n, made = create_plain(s, q, now, reply, n)
    created = created + made
  else
    for j = s.first, s.last, @CreateRun do
      local run_id, idem = ARGV[j + @CreateRun.run_id], ARGV[j + @CreateRun.idempotency_key]
      local code, id, created_ms = create_one(s, j, run_prefix .. run_id,
        events_prefix .. run_id, idem ~= '' and idem_prefix .. idem, q, shared, now)
      reply[n + 1], reply[n + 2], reply[n + 3] = code, id, created_ms
      n = n + 3
      if code == 'OK' then
        created = created + 1
        delayed = delayed or s.start_ms > now
      end
    end
  end
end
index_created(q, q.index)
if q.template_of then
  redis.call('DEL', q.template)
end
-- the hand-off, once the chunk is in its lanes: a run each to up to `created` idle workers
local handed = 0
while handed < created and hand_off(q.tag, now) do
  handed = handed + 1
end
if created > 0 and (handed == 0 or delayed or redis.call('LLEN', q.ready) > 0) then
  redis.call('PUBLISH', shared.wake, 'ready')
end
return reply
