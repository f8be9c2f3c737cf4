-- keys: the key names a script derives from the prefixes it was given; each carries the
-- queue's hash tag (tests/store/test_lua_key_layout.py holds them to app/store/keys.py).
-- Builds on: nothing.

-- Flow control (issue 15): lanes, slots and singletons. Every key here is the queue's
-- tag ('<prefix>:{<queue>}:', the run prefix without 'run:') and a name, as
-- store/keys.py builds them (a test holds the two equal):
--   ready          list   the ring: lanes that have queued runs and are not blocked
--   placed         hash   lane -> where it is: '' (in the ring) or the resource whose
--                         wait set holds it; a lane is in exactly one place, or none
--   lane:<lane>    zset   queued run ids of one lane, score = qbase - boost_ms
--   wait:<res>     set    lanes blocked on one resource (res: h:<handler>, k:<key>,
--                         s:<singleton key>); blocked: set of res with a non-empty one
--   limits         hash   q -> N, h:<handler> -> N, k:* -> default N, k:<key> -> N
--   slots          hash   h:<handler> / k:<key> -> running count; s:<key> -> the run id
--                         holding that singleton
--   queued         string how many runs sit in lanes; kqueued: zset key -> queued
--   one:<key>      hash   queued -> runs of that singleton key in lanes, last -> the
--                         newest of them
-- A lane is '<handler>|<concurrency key>', or '!<singleton key>' (one lane per
-- singleton key, so its runs start in order whatever their handler); a run pinned to a
-- build waits in '@<build>/<lane>', served from ready@<build> (pinned_lane below).
--   pins:<build>   set    open runs pinned to a build; pinned_builds: set of builds
--                         with such runs (GET /builds, the unavailable-build sweep)
-- A run holds what its `held` field lists (one resource per line; no field: nothing, the fast path of a
-- run nothing limits), written by claim_runs (and set_limits, adopting) and given back
-- by release_held, which every script that ends, parks, releases or requeues a run
-- calls (through finalize, park and make_ready; a script that moves a held run
-- anywhere else, e.g. straight to `delayed` or a parked state of its own, calls
-- give_back itself).
-- The queue's tag of a run prefix (`<tag>run:` less `run:`), cut once per script call
-- and prefix: a batch that ends fifty runs derives their queue's keys from one cut.
local tags_of_prefix = {}
local function tag_of_prefix(run_prefix)
  local tag = tags_of_prefix[run_prefix]
  if not tag then
    tag = string.sub(run_prefix, 1, -5)
    tags_of_prefix[run_prefix] = tag
  end
  return tag
end

-- Build pinning (issue 36): a run pinned to a build (its `pin` field) waits in that
-- build's copy of its lane, '@<build>/<lane>', in that build's ring `ready@<build>`, which
-- only workers of the build serve: a claim never looks at another build's runs. A plain
-- lane starts with a handler name or '!', never '@', and a build id has no '/'.
local function pinned_lane(pin, lane)
  if pin and pin ~= '' then
    return '@' .. pin .. '/' .. lane
  end
  return lane
end

-- The ring a lane is served from: its build's for a pinned lane, else the queue's.
local function ring_of(tag, lane)
  if string.byte(lane, 1) == 64 then  -- '@'
    return tag .. 'ready@' .. string.match(lane, '^@([^/]*)/')
  end
  return tag .. 'ready'
end

local function tag_of_ready(ready_key)
  return string.sub(ready_key, 1, -6)
end

-- A key of the queue beside its run records: store/keys.py builds `<tag>:run:<id>` and
-- `<tag>:<name>` from the same hash-tagged tag, so a script holding the run prefix
-- (`<tag>:run:`, a KEYS entry) derives the queue's other keys without a KEYS slot.
local function queue_key_of(run_prefix, name)
  return tag_of_prefix(run_prefix) .. name
end

-- A queue's parked index (zset id -> parked_at ms, for GET /queues) sits beside its
-- run records: store/keys.py builds `<tag>:parked` and `<tag>:run:<id>` from the same
-- tag. Every script that parks, resumes or ends a run derives it from its run prefix.
local function parked_of(run_prefix)
  return queue_key_of(run_prefix, 'parked')
end

-- A queue's waiting index (zset id -> the epoch ms its durable wait ends by, +inf for
-- none: runs parked `waiting` on a sleep, a signal or a join, for GET /queues) sits
-- beside its run records: store/keys.py builds `<tag>:waiting` from the same tag. The
-- scripts that park a run there (park_waiting), wake it (requeue_waiting, promote_due)
-- or end it (finalize) derive it from its run prefix.
local function waiting_of(run_prefix)
  return queue_key_of(run_prefix, 'waiting')
end

-- A run's effects hash sits beside its record: store/keys.py builds both from the
-- queue's tag, differing only in the `run:` / `effects:` segment. Deriving it here
-- from the run prefix (a KEYS entry, same hash tag) lets every script that ends a run
-- expire the effects with it, as the batch scripts derive run keys from their prefix.
local function effects_key_of(run_prefix, run_id)
  return queue_key_of(run_prefix, 'effects:' .. run_id)
end

-- A queue's delayed zset (id -> epoch ms it may start: retry backoff and delayed starts)
-- sits beside its run records: store/keys.py builds `<tag>:delayed` from the same tag (a
-- test holds the two equal), so create_run derives it from its run key's prefix.
local function delayed_of(run_prefix)
  return queue_key_of(run_prefix, 'delayed')
end

-- A run's waits hash (durable sleeps, signals, questions: `<kind>:<name>:<ordinal>` ->
-- record, and the signal inbox `inbox:<name>` -> pending payloads) sits beside its
-- record: store/keys.py builds `<tag>:waits:<id>` from the same tag (a test holds the
-- two equal), so every script that ends a run expires it with the run.
local function waits_key_of(run_prefix, run_id)
  return queue_key_of(run_prefix, 'waits:' .. run_id)
end

-- A queue's unclaimed index sits beside its run records: store/keys.py builds
-- `<tag>:run:` and `<tag>:unclaimed` from the same tag (a test holds the two equal).
-- Derived from the run prefix, so a run's first claim and finalize drop it from the
-- index without a KEYS slot, and the index holds only runs still waiting.
local function unclaimed_key_of(run_prefix)
  return queue_key_of(run_prefix, 'unclaimed')
end

-- Runs that start runs (issue 17). A parent's children index, spawn steps and its
-- children's outcomes sit in the PARENT's slot beside its record (store/keys.py builds
-- the same names: a test holds them equal); a child's own record is in its queue's slot.
local function children_key_of(run_prefix, run_id)
  return queue_key_of(run_prefix, 'children:' .. run_id)
end

local function family_key_of(run_prefix, run_id)
  return queue_key_of(run_prefix, 'family:' .. run_id)
end

-- The queue's outbox (zset '<kind> <run id>' -> ms): ends that must reach another slot,
-- kept until a deliverer (store/outbox.py) has written them there. 'ended <id>': a child
-- ended, its parent must learn its outcome (child_ended); 'cascade <id>': a parent ended,
-- its live children get its policy (cancel_children). take_outbox hands them out.
local function outbox_of(run_prefix)
  return queue_key_of(run_prefix, 'outbox')
end

-- A worker's hand-off inbox (store/keys.py handoff_inbox, from the queue's tag as
-- tag_of_prefix gives it, and the owner): the claim rows (JSON, claim_row's) create scripts handed to it (claim.lua's
-- hand_off pushes them), which it moves to its `taken` list as it reads them.
local HANDOFF_INBOX = 'handoff:inbox:'
local function handoff_inbox_of(tag, owner)
  return tag .. HANDOFF_INBOX .. owner
end

-- A queue's start bucket (a run names it in `rate_limits`): `<tag>:rl:<bucket>`
-- beside the run records (store/keys.py QueueKeys.start_bucket builds the same name),
-- so a claim gates starts inside its own hash slot.
local function start_bucket_of(run_prefix, bucket)
  return queue_key_of(run_prefix, 'rl:' .. bucket)
end

-- A shape's template record (place_shape) under q.template: every field but the
-- idempotency key, the run's own values empty. create_runs deletes it before it
-- returns, so it never outlives the call; it is deleted before each placing too, so
-- neither the previous shape's nor one a call that errored midway left (Redis keeps a
-- failed script's writes) can add a field to a record.
local function create_template_of(ready_key)
  return tag_of_ready(ready_key) .. 'create_template'
end
