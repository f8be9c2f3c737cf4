-- lib: helpers shared by the transition scripts. A script pulls them in with the
-- line `--- @include lib`; store/scripts.py splices this file in at load time.

-- Validate, then write. Redis never rolls a script back: an error raised after a
-- write leaves whatever was written so far. So every script decodes, encodes,
-- looks up and checks everything it needs before its first write, and these
-- helpers raise (an error reply, nothing written yet) on an argument that would
-- make a later command fail.
local function bad_argument(what, value)
  error(redis.error_reply('ERR leasehold: bad argument ' .. what .. ': '
    .. string.sub(tostring(value), 1, 80)))
end

-- An integer argument as Redis commands take it (XADD MAXLEN, PEXPIRE, ZADD):
-- decimal digits only, no exponent, sign or fraction, at most 15 digits (exact
-- in a Lua number). min: the smallest value allowed. A value already proven in this
-- script call is not matched again (a batch's runs repeat the same few: attempts,
-- time-to-live, priority), only held against its own min.
local proven_ints = {}
local function int_arg(value, what, min)
  local n = proven_ints[value]
  if not n then
    if type(value) ~= 'string' or not string.match(value, '^%-?%d+$') or #value > 16 then
      bad_argument(what, value)
    end
    n = tonumber(value)
    proven_ints[value] = n
  end
  if min and n < min then
    bad_argument(what, value)
  end
  return n
end

-- One of a few allowed strings.
local function enum_arg(value, what, allowed)
  for _, candidate in ipairs(allowed) do
    if value == candidate then
      return value
    end
  end
  bad_argument(what, value)
end

-- Decode a JSON argument, and prove it can be encoded again: cjson decodes NaN,
-- Infinity and 1e400 but refuses to encode them, and refuses nesting deeper than
-- 1000 levels, so a value that passes here cannot make a later encode fail.
local function json_arg(raw, what)
  local decoded, value = pcall(cjson.decode, raw)
  if not decoded or not pcall(cjson.encode, value) then
    bad_argument(what, raw)
  end
  return value
end

-- A run id as keys are built from it: no ':' (store/keys.py relies on it), and,
-- when given, the run and events keys end with it, so a derived key (the queue's
-- activity stream, the effects hash) is the run's own.
local function run_id_arg(run_id, run_key, events_key)
  -- a plain find, not the pattern '^[^:]+$': same answer, a tenth of the work per id
  if type(run_id) ~= 'string' or run_id == '' or string.find(run_id, ':', 1, true) then
    bad_argument('run_id', run_id)
  end
  local run_end, events_end = ':run:' .. run_id, ':events:' .. run_id
  if (run_key and string.sub(run_key, -#run_end) ~= run_end)
      or (events_key and string.sub(events_key, -#events_end) ~= events_end) then
    bad_argument('run_id (not the one its keys name)', run_id)
  end
  return run_id
end

-- At least n ARGV values: a missing one would reach a command as nil (an error)
-- after the writes before it.
local function check_argc(n)
  if #ARGV < n then
    bad_argument('count of ARGV (at least ' .. n .. ')', #ARGV)
  end
end

-- ARGV from index `first` on, in groups of `size`: refuse a ragged tail, which
-- would hand a nil to a command after the groups before it were written.
local function check_groups(first, size)
  if (#ARGV - first + 1) % size ~= 0 then
    bad_argument('groups of ' .. size .. ' from ARGV[' .. first .. ']', #ARGV - first + 1)
  end
end

-- The one clock every lease decision uses: the Redis server's, in epoch ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A number as redis.call would send it (Redis 7.0 formats every number argument with
-- snprintf "%.17g", a few hundred ns each): formatted once per script call and value,
-- so the same time, expiry or fence written to many fields and runs costs one
-- format. A string passes as it is.
local formatted = {}
local function num_arg(value)
  if type(value) ~= 'number' then
    return value
  end
  local known = formatted[value]
  if not known then
    known = string.format('%.17g', value)
    formatted[value] = known
  end
  return known
end

-- Append one event to a run's stream, approximately capped at maxlen.
local function xadd_event(events_key, event_type, fence, ts, data, maxlen)
  return redis.call('XADD', events_key, 'MAXLEN', '~', maxlen, '*',
    'type', event_type, 'ts', num_arg(ts), 'fence', num_arg(fence), 'data', data)
end

-- Entries kept (approximately) in a queue's activity stream; store/activity.py
-- documents the same number. A string: redis.call formats a Lua number argument with
-- snprintf("%.17g") at every call (~2k instructions), and this one goes with every
-- lifecycle event.
local ACTIVITY_MAXLEN = '1000'

-- A batch script (claim_runs, finish_runs: fifty claims or ends a call, each with its
-- activity entry) trims each activity stream it appended to once, at its end, not at
-- every entry (MAXLEN ~ on each XADD: ~3k instructions apiece): defer_activity_trim()
-- at its top makes emit append without MAXLEN and note the stream, trim_activity()
-- before its return trims each noted one (XTRIM MAXLEN ~, the same approximate cap).
-- A call that raises in between leaves a stream a few entries over the cap until the
-- next append to it: the cap is approximate anyway, and trimming only ever leaves at
-- least ACTIVITY_MAXLEN entries (store/activity.py's `trimmed` relies on that alone).
local activity_trim = {deferred = false, keys = {}, noted = {}}
local function defer_activity_trim()
  activity_trim.deferred = true
end

local function trim_activity()
  for _, key in ipairs(activity_trim.keys) do
    redis.call('XTRIM', key, 'MAXLEN', '~', ACTIVITY_MAXLEN)
  end
  activity_trim.keys, activity_trim.noted = {}, {}
end

-- A queue's activity stream sits beside its event streams: store/keys.py builds
-- `<tag>:events:<run id>` and `<tag>:activity` from the same hash-tagged prefix, and
-- run ids never contain ':'. Deriving it here from the events key (a KEYS entry,
-- same hash tag) gives every lifecycle transition the key without a KEYS slot.
-- The key is split at its last ':' with plain finds (a key has three or four), not the
-- backtracking pattern '^(.*):events:([^:]+)$' it equals, which cost ~8k instructions a
-- lifecycle event; a key of another shape still fails at the concatenation.
local function activity_of(events_key)
  local last, at = 0, string.find(events_key, ':', 1, true)
  while at do
    last, at = at, string.find(events_key, ':', at + 1, true)
  end
  local tag, run_id
  if last >= 8 and last < #events_key and string.sub(events_key, last - 7, last) == ':events:' then
    tag, run_id = string.sub(events_key, 1, last - 8), string.sub(events_key, last + 1)
  end
  return tag .. ':activity', run_id
end

-- The activity stream of the runs whose event streams are events_prefix .. id (a
-- claim's or a finish's KEYS entry), derived once per script call and prefix: a batch
-- that claims or ends fifty runs splits the key once, not fifty times.
local activity_of_prefix_memo = {}
local function activity_of_prefix(events_prefix)
  local key = activity_of_prefix_memo[events_prefix]
  if not key then
    key = activity_of(events_prefix .. '-')  -- any id without ':' names the same stream
    activity_of_prefix_memo[events_prefix] = key
  end
  return key
end

-- Append one lifecycle event and record its id on the run, so a state change and its
-- event are always written together. The same step adds a summary line to the
-- queue's activity stream (run id, the event's id, type, status afterwards, fence,
-- time), which the console's live runs view follows. Handler events (progress,
-- token, wait, verdict) use xadd_event directly and stay out of it. status: the
-- status the caller just wrote, when it knows it (the hot paths: claim, finalize);
-- nil reads it back from the record. fields: field/value pairs the caller writes with
-- the change (the hot paths: claim, finalize), written in the same HSET as the event's
-- id (one command, not two); the caller then passes the status they set. A fields
-- table reused run after run (create's record, one per shape of run) ends in
-- 'last_event_id' and a slot whose index is fields.event_at: the id goes there; its
-- first fields.n entries are written (nil: all).
-- activity_key, run_id: the queue's activity stream and the run, when the caller has
-- them (a create of many runs: one key for all), else derived from events_key.
local function emit(run_key, events_key, event_type, fence, ts, data, maxlen, status, fields,
    activity_key, run_id)
  local id = xadd_event(events_key, event_type, fence, ts, data, maxlen)
  if fields then
    local at = fields.event_at
    if at then
      fields[at] = id
    else
      fields[#fields + 1] = 'last_event_id'
      fields[#fields + 1] = id
    end
    redis.call('HSET', run_key, unpack(fields, 1, fields.n))
  else
    redis.call('HSET', run_key, 'last_event_id', id)
  end
  if not activity_key then
    activity_key, run_id = activity_of(events_key)
  end
  status = status or redis.call('HGET', run_key, 'status') or ''
  if activity_trim.deferred then
    if not activity_trim.noted[activity_key] then
      activity_trim.noted[activity_key] = true
      activity_trim.keys[#activity_trim.keys + 1] = activity_key
    end
    redis.call('XADD', activity_key, '*', 'run_id', run_id, 'event_id', id,
      'type', event_type, 'status', status, 'fence', num_arg(fence), 'ts', num_arg(ts))
  else
    redis.call('XADD', activity_key, 'MAXLEN', '~', ACTIVITY_MAXLEN, '*',
      'run_id', run_id, 'event_id', id, 'type', event_type, 'status', status,
      'fence', num_arg(fence), 'ts', num_arg(ts))
  end
  return id
end

-- The terminal statuses, as app/models.py's TERMINAL_STATUSES (a test keeps them
-- equal): nothing changes a run in one but its retention or a delete.
local TERMINAL = {succeeded = true, failed = true, cancelled = true, orphaned = true,
  expired = true}

-- A retention spec argument, "succeeded=<ms> failed=<ms> ..." (store/retention.py): it
-- must name every terminal status, or retention_for would hand PEXPIRE a nil after
-- the terminal state was written.
local function retention_arg(spec)
  if type(spec) ~= 'string' then
    bad_argument('retention', spec)
  end
  for status in pairs(TERMINAL) do
    local ms = string.match(spec, status .. '=(%d+)')
    if not ms or #ms > 15 then
      bad_argument('retention (no ' .. status .. '=<ms>)', spec)
    end
  end
  return spec
end

-- Does (owner, fence) still hold this run? The check every worker write makes. cur:
-- the run's status, owner_id and fence, as a script that reads more of the run at once
-- already has them (holding); holds reads them.
local function holding(cur, owner, fence)
  return (cur[1] == 'running' or cur[1] == 'cancelling')
    and cur[2] == owner and cur[3] == fence
end

local function holds(run_key, owner, fence)
  return holding(redis.call('HMGET', run_key, 'status', 'owner_id', 'fence'), owner, fence)
end

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
-- singleton key, so its runs start in order whatever their handler). A run holds what
-- its `held` field lists (one resource per line; no field: nothing, the fast path of a
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

local function tag_of_ready(ready_key)
  return string.sub(ready_key, 1, -6)
end

local function lane_of(handler, ckey, skey)
  if skey and skey ~= '' then
    return '!' .. skey
  end
  return (handler or '') .. '|' .. (ckey or '')
end

-- One fewer run of (ckey, skey) waits in a lane: the per-key counts (uncount_keys) and
-- the queue's `queued` counter (claim_runs takes many at once: it counts the keys per
-- run and the counter once per call).
local function uncount_keys(tag, ckey, skey, run_id)
  if ckey and ckey ~= '' and tonumber(redis.call('ZINCRBY', tag .. 'kqueued', -1, ckey)) <= 0 then
    redis.call('ZREM', tag .. 'kqueued', ckey)
  end
  if skey and skey ~= '' then
    local one = tag .. 'one:' .. skey
    if redis.call('HINCRBY', one, 'queued', -1) <= 0 then
      redis.call('HDEL', one, 'queued')
    end
    if redis.call('HGET', one, 'last') == run_id then
      redis.call('HDEL', one, 'last')
    end
  end
end

local function count_dequeued(tag, ckey, skey, run_id)
  redis.call('DECR', tag .. 'queued')
  uncount_keys(tag, ckey, skey, run_id)
end

-- Put a queued run in its lane, its lane in the ring if it is in no place yet. qbase:
-- the enqueue time its score ages from (0: the head of its lane, for release, resume).
-- known: the run's {handler, ckey, skey, boost_ms, lane} when the caller has just
-- written them (a create), nil to read them.
local function enqueue(tag, run_key, run_id, qbase, at_front, known)
  local f = known or redis.call('HMGET', run_key, 'handler', 'ckey', 'skey', 'boost_ms', 'lane')
  local lane = f[5] or lane_of(f[1], f[2], f[3])
  local score = qbase - (tonumber(f[4]) or 0)
  if redis.call('ZADD', tag .. 'lane:' .. lane, score, run_id) == 1 then
    redis.call('INCR', tag .. 'queued')
    if f[2] and f[2] ~= '' then
      redis.call('ZINCRBY', tag .. 'kqueued', 1, f[2])
    end
    if f[3] and f[3] ~= '' then
      redis.call('HINCRBY', tag .. 'one:' .. f[3], 'queued', 1)
      redis.call('HSET', tag .. 'one:' .. f[3], 'last', run_id)
    end
  end
  if not (known and known.qbase_written) then
    redis.call('HSET', run_key, 'qbase', qbase)
  end
  if redis.call('HSETNX', tag .. 'placed', lane, '') == 1 then
    if at_front then
      redis.call('LPUSH', tag .. 'ready', lane)
    else
      redis.call('RPUSH', tag .. 'ready', lane)
    end
  end
end

-- Take a run out of its lane without claiming it (cancelled, expired or superseded
-- while queued). A lane left empty leaves its place too (LREM on the ring is O(lanes),
-- paid only when the last queued run of a lane goes this way).
local function unqueue(tag, run_key, run_id)
  local f = redis.call('HMGET', run_key, 'lane', 'ckey', 'skey', 'handler')
  local lane = f[1] or lane_of(f[4], f[2], f[3])
  local lane_key = tag .. 'lane:' .. lane
  if redis.call('ZREM', lane_key, run_id) == 0 then
    return
  end
  count_dequeued(tag, f[2], f[3], run_id)
  if redis.call('EXISTS', lane_key) == 0 then
    local where = redis.call('HGET', tag .. 'placed', lane)
    if where == '' then
      redis.call('LREM', tag .. 'ready', 1, lane)
    elseif where then
      redis.call('SREM', tag .. 'wait:' .. where, lane)
      if redis.call('EXISTS', tag .. 'wait:' .. where) == 0 then
        redis.call('SREM', tag .. 'blocked', where)
      end
    end
    redis.call('HDEL', tag .. 'placed', lane)
  end
end

-- Move up to n lanes blocked on res back to the head of the ring; how many moved.
local function wake_lanes(tag, res, n)
  local lanes = redis.call('SPOP', tag .. 'wait:' .. res, n)
  for _, lane in ipairs(lanes) do
    redis.call('HSET', tag .. 'placed', lane, '')
    redis.call('LPUSH', tag .. 'ready', lane)
  end
  if redis.call('EXISTS', tag .. 'wait:' .. res) == 0 then
    redis.call('SREM', tag .. 'blocked', res)
  end
  return #lanes
end

-- Does the queue have a queue-wide limit? Read once per script call (no script both
-- changes a queue's limits and gives slots back), so a batch that ends many runs asks
-- once. The queue-wide limit counts the leases themselves, so a run holds nothing for it.
local queue_limited_memo = {}
local function queue_limited(tag)
  local known = queue_limited_memo[tag]
  if known == nil then
    known = redis.call('HEXISTS', tag .. 'limits', 'q') == 1
    queue_limited_memo[tag] = known
  end
  return known
end

-- Give back everything a run holds: its slots (handler, key), its singleton, and one
-- blocked lane per resource freed, so a waiting lane is served next. Idempotent: the
-- `held` field goes first, so a second call (a finish resent after the reconciler
-- acted) gives back nothing, and no counter goes below zero. A run that took no slot
-- (no limit applied to it, no key: the fast path) has no `held` field and costs one
-- read. held: the field as the caller already read it (false: absent), nil to read it
-- here. Returns true when idle workers should look again (a lane woke, or the queue
-- has a queue-wide limit: a lease ended).
local function release_held(tag, run_key, run_id, held)
  if held == nil then
    held = redis.call('HGET', run_key, 'held')
  end
  if not held then
    return queue_limited(tag)
  end
  redis.call('HDEL', run_key, 'held')
  local woke = 0
  for res in string.gmatch(held, '[^\n]+') do
    if string.sub(res, 1, 2) == 's:' then
      if redis.call('HGET', tag .. 'slots', res) == run_id then
        redis.call('HDEL', tag .. 'slots', res)
      end
    elseif redis.call('HINCRBY', tag .. 'slots', res, -1) <= 0 then
      redis.call('HDEL', tag .. 'slots', res)
    end
    woke = woke + wake_lanes(tag, res, 1)
  end
  return woke > 0 or queue_limited(tag)
end

-- release_held, then tell idle workers of the queue when a slot they wait for freed:
-- once per script call and queue (the wake is a broadcast, read after the script, so
-- one message says all that fifty would). held: as release_held's.
local woken_queues = {}
local function give_back(run_prefix, run_id, held)
  local tag = tag_of_prefix(run_prefix)
  -- held false: the caller read no `held` field, so release_held would only ask
  -- queue_limited; the record's key is not even built (the fast path)
  local wake
  if held == false then
    wake = queue_limited(tag)
  else
    wake = release_held(tag, run_prefix .. run_id, run_id, held)
  end
  if wake and not woken_queues[tag] then
    woken_queues[tag] = true
    redis.call('PUBLISH', tag .. 'wake', 'ready')
  end
end

-- Put a run on the ready queue (its lane) and wake every idle worker of the queue.
-- Pub/sub is a broadcast: unlike a token in a list, a paused or partitioned worker
-- cannot swallow the wake-up meant for the others. A run queued again holds nothing:
-- whatever it held is given back first. at_front: the head of its lane and of the
-- ring (release, resume, resolve); otherwise it ages from now (create, retry).
local function make_ready(ready_key, wake_channel, run_id, at_front)
  local tag = tag_of_ready(ready_key)
  local run_key = tag .. 'run:' .. run_id
  release_held(tag, run_key, run_id)
  enqueue(tag, run_key, run_id, at_front and 0 or now_ms(), at_front)
  redis.call('PUBLISH', wake_channel, 'ready')
end

-- Ask the owner of a held, running run to stop: status cancelling, its
-- cancel_requested event (data: extra, with the owner), and the push on the queue's
-- cancel channel. Its owner (or, if the owner is dead, the reconciler) writes the
-- terminal state; tag as in the flow-control keys above. Encodes only strings and
-- numbers, so it may follow a script's first write.
local function request_cancel(tag, run_id, now, extra, maxlen)
  local run_key = tag .. 'run:' .. run_id
  local cur = redis.call('HMGET', run_key, 'fence', 'owner_id')
  extra.owner_id = cur[2]
  redis.call('HSET', run_key, 'cancel_requested_at', now, 'status', 'cancelling')
  emit(run_key, tag .. 'events:' .. run_id, 'cancel_requested', cur[1], now,
    cjson.encode(extra), maxlen)
  redis.call('PUBLISH', tag .. 'cancel', run_id .. ' ' .. cur[1])
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

-- Park a held run for a person (waiting_human, reconciliation_required): the lease is
-- released with fence+1, so its owner can write nothing more, and the event named
-- after the status is written with the change. Parked runs do not expire.
-- fields: extra HSET field/value pairs (evidence, error, ...).
local function park(k, run_id, status, now, fields, data, maxlen)
  local run_key = k.run_prefix .. run_id
  redis.call('ZADD', parked_of(k.run_prefix), now, run_id)
  local fence = redis.call('HINCRBY', run_key, 'fence', 1)
  redis.call('HSET', run_key, 'status', status, 'parked_at', now)
  if #fields > 0 then
    redis.call('HSET', run_key, unpack(fields))
  end
  redis.call('HDEL', run_key, 'owner_id', 'lease_expires_at')
  redis.call('ZREM', k.leases, run_id)
  give_back(k.run_prefix, run_id)
  emit(run_key, k.events_prefix .. run_id, status, fence, now, data, maxlen)
  return fence
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

-- A wait's or signal's name (ctx.sleep(name=...), ctx.wait_for_signal(name)): what the
-- API's route and the handler's context accept, so a step field never holds a ':'.
local function wait_name_arg(value)
  if type(value) ~= 'string' or #value > 128 or not string.match(value, '^[A-Za-z0-9_.%-]+$') then
    bad_argument('name', value)
  end
  return value
end

-- Park a held run in `waiting` on a durable wait (park_run's sleeps and signals,
-- join_children's joins): the lease goes (fence+1, owner dropped), so its owner can write
-- nothing more, every slot it held comes back (give_back), and the `wait` event (data)
-- says what for; with a deadline it wakes through the delayed set (claim_runs promotes
-- it), and idle workers learn the earliest delayed time. k: {leases, run_prefix, delayed}.
-- Encodes nothing: the caller encoded data and waiting_for before its first write.
local function park_waiting(k, run_key, events_key, run_id, now, data, waiting_for, until_ms,
    wake_channel, maxlen)
  local new_fence = redis.call('HINCRBY', run_key, 'fence', 1)
  redis.call('HSET', run_key, 'status', 'waiting', 'waiting_for', waiting_for)
  redis.call('HDEL', run_key, 'owner_id', 'lease_expires_at')
  redis.call('ZREM', k.leases, run_id)
  -- a waiting run holds no slot and no singleton: they come back now (release_held)
  give_back(k.run_prefix, run_id)
  emit(run_key, events_key, 'wait', new_fence, now, data, maxlen)
  if until_ms then
    redis.call('ZADD', k.delayed, until_ms, run_id)
    redis.call('PUBLISH', wake_channel, 'ready')
  end
  return new_fence
end

-- A parked `waiting` run's wait is over (its signal came: signal_run; its children met
-- its join: child_ended): it is queued again through the delayed set at the Redis
-- clock's now, so the claim path (its slots and limits) takes it, and the handler replays
-- from the top. wait: its decoded waiting_for. The caller emits the event after this
-- (the status is then `queued`). A timeout already due was promoted by a claim: the run
-- is in its lane then, and is not queued twice.
local function requeue_waiting(run_key, delayed_key, run_id, wait, now, wake_channel)
  redis.call('HSET', run_key, 'status', 'queued')
  redis.call('HDEL', run_key, 'waiting_for')
  if redis.call('ZSCORE', delayed_key, run_id) or not wait.until_ms then
    redis.call('ZADD', delayed_key, now, run_id)
  end
  redis.call('PUBLISH', wake_channel, 'ready')
end

-- A queue's unclaimed index sits beside its run records: store/keys.py builds
-- `<tag>:run:` and `<tag>:unclaimed` from the same tag (a test holds the two equal).
-- Derived from the run prefix, so a run's first claim and finalize drop it from the
-- index without a KEYS slot, and the index holds only runs still waiting.
local function unclaimed_key_of(run_prefix)
  return queue_key_of(run_prefix, 'unclaimed')
end

-- A queue's outcome counters, one hash per minute (`<tag>:series:<minute>`, field: a
-- terminal status or `lease_expired` -> runs that came to it that minute), beside its
-- run records: store/keys.py builds the same name (a test holds the two equal). Each
-- bucket expires SERIES_KEEP_MS after its first count, so a queue holds at most ~61 of
-- them however busy it is: GET /queues/{name}/series reads the last hour from them.
local SERIES_KEEP_MS = 3660000

local function add_outcomes(run_prefix, kind, n, now)
  local key = queue_key_of(run_prefix, 'series:' .. math.floor(now / 60000))
  if redis.call('HINCRBY', key, kind, n) == n and redis.call('PTTL', key) < 0 then
    redis.call('PEXPIRE', key, SERIES_KEEP_MS)
  end
end

-- defer: a batch script's deferred writes (new_defer), or nil to count now.
local function count_outcome(run_prefix, kind, now, defer)
  if defer then
    defer.outcomes[kind] = (defer.outcomes[kind] or 0) + 1
  else
    add_outcomes(run_prefix, kind, 1, now)
  end
end

-- How long a run that ended in `status` is kept, in ms: its own `retention_ms` (own:
-- the field as read; set at create from the request's retention_s) or the value the
-- retention spec names for the status. The spec is one ARGV, "succeeded=<ms>
-- failed=<ms> ...", as store/retention.py encodes it for every terminal status: reading
-- it is a string.match, which cannot fail, so callers may use it after their first write.
-- The spec's value for a status is looked up once per script call (a batch that ends
-- fifty runs of one status scans the spec once, not fifty times).
local retention_memo = {}
local function retention_for(own, status, spec)
  local ms = tonumber(own)
  if ms then
    return ms
  end
  local of_spec = retention_memo[spec]
  if not of_spec then
    of_spec = {}
    retention_memo[spec] = of_spec
  end
  ms = of_spec[status]
  if ms == nil then
    ms = tonumber(string.match(spec, status .. '=(%d+)')) or false
    of_spec[status] = ms
  end
  return ms or nil
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

-- A run of a family ended (finalize calls this, once, for every terminal write): its
-- family keys expire with it, a parked join's set goes, and its end enters the outbox
-- of its own slot (Redis Cluster: the parent or the children may live in other slots),
-- in the same step as the terminal state, so no end is lost between the two.
-- family: the run's parent_id and spawned fields as the caller read them, nil to read here.
-- The outbox entry that carries a child's end to its parent: 'ended <child> <parent>'
-- (entries written before the parent was in them, 'ended <child>', are delivered too).
local function ended_entry(run_id, parent_id)
  return 'ended ' .. run_id .. ' ' .. parent_id
end

local function note_family_end(k, run_id, retention_ms, now, family)
  -- one read for a run outside any family (spawn_child marks a parent `spawned`)
  family = family or redis.call('HMGET', k.run_prefix .. run_id, 'parent_id', 'spawned')
  if family[2] then
    redis.call('PEXPIRE', children_key_of(k.run_prefix, run_id), retention_ms)
    redis.call('DEL', queue_key_of(k.run_prefix, 'joining:' .. run_id))
    redis.call('PEXPIRE', family_key_of(k.run_prefix, run_id), retention_ms)
    redis.call('ZADD', outbox_of(k.run_prefix), 'NX', now, 'cascade ' .. run_id)
  end
  local parent = family[1]
  if parent and parent ~= '' then
    -- the parent in the entry: a delivery that finds the child's record gone (expired,
    -- deleted by hand) still knows whom to tell (outbox.py, child_record_gone)
    redis.call('ZADD', outbox_of(k.run_prefix), 'NX', now, ended_entry(run_id, parent))
  end
end

-- A batch script's writes that many runs share (finish_runs): the lease ZREMs and the
-- outcome counts gathered while it ends its runs, written once at its end by
-- flush_defer, one ZREM for every lease and one HINCRBY per status, not one of each per
-- run. Only for a script that reads neither the leases nor the counters after a
-- finalize.
local function new_defer()
  return {leases = {}, outcomes = {}}
end

-- One command over many members, in chunks (Lua's unpack takes a few thousand values).
local function call_chunked(command, key, members)
  for first = 1, #members, 1000 do
    redis.call(command, key, unpack(members, first, math.min(first + 999, #members)))
  end
end

local function flush_defer(k, defer, now)
  call_chunked('ZREM', k.leases, defer.leases)
  for kind, n in pairs(defer.outcomes) do
    add_outcomes(k.run_prefix, kind, n, now)
  end
end

-- What finalize reads of a run, in this order; a caller that already read them passes
-- them (known) instead of finalize reading them again.
local FINALIZE_READS = {'status', 'retention_ms', 'idempotency_key', 'held', 'parent_id',
  'spawned'}

-- Write a terminal state and its terminal event in one step, drop the lease, and
-- start the retention clock (retention_for: per run, else per status) on the record,
-- its events, its effects and its idempotency key, so a key lives exactly as long
-- as its run; the queue's counter of that status this minute goes up by one.
-- fields: extra HSET field/value pairs (output, error, ...). The run is read once
-- (known: FINALIZE_READS as the caller read them, nil to read them here). A
-- run that was held (running, cancelling) is in no lane, no parked index and no
-- unclaimed index (its claim took it out of its lane and, at its first claim, out of
-- the unclaimed index; resume and resolve take a run out of the parked index before it
-- can be claimed again), so only a run ended while nobody held it is looked for there.
-- The state, its fields and the event's id are one HSET (emit). k.defer: a batch's
-- deferred lease and counter writes (new_defer), nil to write them now.
local function finalize(k, run_id, status, fence, now, fields, data, retention, maxlen, known)
  local run_key = k.run_prefix .. run_id
  local events_key = k.events_prefix .. run_id
  local cur = known or redis.call('HMGET', run_key, unpack(FINALIZE_READS))
  local retention_ms = num_arg(retention_for(cur[2], status, retention))
  local held = cur[1] == 'running' or cur[1] == 'cancelling'
  if k.defer then
    k.defer.leases[#k.defer.leases + 1] = run_id
  else
    redis.call('ZREM', k.leases, run_id)
  end
  give_back(k.run_prefix, run_id, cur[4])
  if not held then
    redis.call('HDEL', run_key, 'lease_expires_at')
    unqueue(tag_of_prefix(k.run_prefix), run_key, run_id)
    redis.call('ZREM', parked_of(k.run_prefix), run_id)
    redis.call('ZREM', unclaimed_key_of(k.run_prefix), run_id)
  end
  local written = {'status', status, 'finished_at', num_arg(now)}
  if held then
    -- its lease ends: '' is no lease to every reader (codec.ms_to_datetime, tonumber),
    -- and one more field of the HSET below costs less than an HDEL of its own (~9k
    -- instructions a run); a run nobody held has no lease field to keep (HDEL above)
    written[5], written[6] = 'lease_expires_at', ''
  end
  for _, value in ipairs(fields) do
    written[#written + 1] = value
  end
  emit(run_key, events_key, status, fence, now, data, maxlen, status, written,
    activity_of_prefix(k.events_prefix), run_id)
  count_outcome(k.run_prefix, status, now, k.defer)
  redis.call('PEXPIRE', run_key, retention_ms)
  redis.call('PEXPIRE', events_key, retention_ms)
  -- most runs have neither an effects nor a waits hash: one EXISTS of both costs less
  -- than two PEXPIREs (a redis.call is ~7k instructions even on a missing key)
  local effects_key, waits_key = effects_key_of(k.run_prefix, run_id), waits_key_of(k.run_prefix, run_id)
  if redis.call('EXISTS', effects_key, waits_key) > 0 then
    redis.call('PEXPIRE', effects_key, retention_ms)
    redis.call('PEXPIRE', waits_key, retention_ms)
  end
  local idem = cur[3]
  if idem and idem ~= '' then
    redis.call('PEXPIRE', k.idem_prefix .. idem, retention_ms)
  end
  note_family_end(k, run_id, retention_ms, now, {cur[5], cur[6]})
end

-- Giving a held run back to its queue (release_runs' per-run body; reconcile_expired's
-- for a hand-off its worker never took): in two steps, so that a caller can read and
-- encode everything before its first write. release_plan reads nothing (status: the
-- run's, as the caller read it; owner: the holder giving it back) and encodes the
-- event: a run with a cancel pending ends `cancelled` (reason `requested`), any other
-- is `released` for `reason`, with delay_ms > 0 meaning in `delayed` until now +
-- delay_ms (a rate limit's token) instead of at the head of the line now.
local function release_plan(status, owner, reason, delay_ms, now)
  if status == 'cancelling' then
    return {cancel = true, data = cjson.encode({reason = 'requested', released_by = owner})}
  end
  return {delay_ms = delay_ms, data = cjson.encode({owner_id = owner, reason = reason,
    run_at_ms = delay_ms > 0 and now + delay_ms or nil})}
end

-- release_plan's writes for run_id (k: leases, ready, run_prefix, events_prefix,
-- idem_prefix, as finalize's): the fence moves on, so the old holder can write nothing
-- more; the attempt count is kept (a release is not a failure). Returns the new fence.
local function release_run(k, run_id, plan, wake_channel, retention, maxlen, now)
  local run_key = k.run_prefix .. run_id
  local fence = redis.call('HINCRBY', run_key, 'fence', 1)
  if plan.cancel then
    finalize(k, run_id, 'cancelled', fence, now, {}, plan.data, retention, maxlen)
    return fence
  end
  redis.call('HSET', run_key, 'status', 'queued')
  redis.call('HDEL', run_key, 'owner_id', 'lease_expires_at')
  redis.call('ZREM', k.leases, run_id)
  emit(run_key, k.events_prefix .. run_id, 'released', fence, now, plan.data, maxlen)
  if plan.delay_ms > 0 then
    give_back(k.run_prefix, run_id)  -- a run waiting for its token holds no slot meanwhile
    redis.call('ZADD', delayed_of(k.run_prefix), now + plan.delay_ms, run_id)
    redis.call('PUBLISH', wake_channel, 'ready')  -- idle workers learn the new due time
  else
    make_ready(k.ready, wake_channel, run_id, true)
  end
  return fence
end

-- A worker's hand-off inbox (store/keys.py handoff_inbox, from the queue's tag as
-- tag_of_prefix gives it, and the owner): the claim rows (JSON, claim_row's) create scripts handed to it (claim.lua's
-- hand_off pushes them), which it moves to its `taken` list as it reads them.
local HANDOFF_INBOX = 'handoff:inbox:'
local function handoff_inbox_of(tag, owner)
  return tag .. HANDOFF_INBOX .. owner
end

-- The effects of a run that started and have no recorded outcome, as fields of its
-- effects hash. The list lives on the run record (`open_effects`, JSON) so that
-- finding them never reads the effects hash, whose recorded results may be large.
local function open_effects(run_key)
  local raw = redis.call('HGET', run_key, 'open_effects')
  if not raw or raw == '' then
    return {}
  end
  return cjson.decode(raw)
end

local function set_open_effects(run_key, fields)
  if #fields == 0 then
    redis.call('HDEL', run_key, 'open_effects')
  else
    redis.call('HSET', run_key, 'open_effects', cjson.encode(fields))
  end
end

-- An effect's outcome became known (recorded, or declared not applied): the open
-- list without it, for set_open_effects to write once the script's checks are done.
local function still_open(run_key, field)
  local kept = {}
  for _, open in ipairs(open_effects(run_key)) do
    if open ~= field then
      kept[#kept + 1] = open
    end
  end
  return kept
end

-- Records of the open effects that are not idempotent: their outcome is unknown and
-- calling them again could apply them twice, so nobody may guess.
local function unknown_effects(run_key, effects_key)
  local fields = open_effects(run_key)
  local unknown = {}
  if #fields == 0 then
    return unknown
  end
  for _, raw in ipairs(redis.call('HMGET', effects_key, unpack(fields))) do
    if raw then
      local record = cjson.decode(raw)
      if record.status == 'started' and not record.idempotent then
        unknown[#unknown + 1] = record
      end
    end
  end
  return unknown
end

-- Park a run in reconciliation_required because effects started and their outcome is
-- unknown: the error names them (name, key, owner, fence, start time) with how it was
-- found, and a person resolves the run. reconciliation_fields encodes what park
-- writes, so a script can do it before its first write; require_reconciliation
-- parks the run and returns the new fence.
local function reconciliation_fields(records, evidence)
  local first = records[1]
  evidence.effect = first
  evidence.effects = records
  local err = {code = 'effect_outcome_unknown',
    message = 'effect ' .. tostring(first.name) .. ' (key ' .. tostring(first.key)
      .. ') started but its outcome was never recorded: a person must resolve the run',
    retryable = false, details = evidence}
  return {'error', cjson.encode(err)}, cjson.encode({error = err})
end

local function require_reconciliation(k, run_id, now, fields, data, maxlen)
  return park(k, run_id, 'reconciliation_required', now, fields, data, maxlen)
end

-- What an idempotency key's record (`<run id> <fingerprint>`, KEYS entry `key`) says about
-- a request with this fingerprint: nil when the key is unused (or '' was given), else
-- 'REPLAYED' (same request: answer with that run) or 'CONFLICT' (another request), and
-- the run it names. Reads only, so a script calls it before its first write.
local function idempotent_prior(key, idem_key, fingerprint)
  if idem_key == '' then
    return nil
  end
  local prior = redis.call('GET', key)
  if not prior then
    return nil
  end
  local sep = string.find(prior, ' ', 1, true)
  local prior_id = string.sub(prior, 1, sep - 1)
  if string.sub(prior, sep + 1) == fingerprint then
    return 'REPLAYED', prior_id
  end
  return 'CONFLICT', prior_id
end

-- Rate limits: GCRA (the generic cell rate algorithm) over one string key per bucket
-- holding its TAT, the theoretical arrival time in epoch ms (a float). A bucket is
-- declared with limit L per period P ms and burst B >= 1 (store/ratelimits.py):
-- the emission interval is T = P / L and the tolerance tau = T * B, so an idle bucket
-- lets B tokens pass at once and then one every T; over any window of W ms at most
-- B + floor(W / T) tokens pass (limit + burst over one period). The key expires when
-- its TAT is past: an absent key is a full bucket. The clock is always now_ms().
--
-- The signatures the transition scripts share (claim_runs gates a run's start with
-- rate_gate; take_tokens and push_bucket serve handlers):
--   gcra_check(key, now, limit, period_ms, burst, cost) -> allow_at, new_tat
--       reads only. The cost may pass at allow_at (passes now when allow_at <= now);
--       taking it means gcra_commit(key, now, new_tat). cost <= burst (else it never
--       passes: callers refuse such a cost before they get here).
--   gcra_commit(key, now, new_tat)           the one write: SET key new_tat PX ...
--   gcra_push(key, now, limit, period_ms, burst, retry_after_ms) -> tat
--       an upstream said 429, Retry-After R: TAT := max(TAT, now + R + tau - T), so
--       nobody passes before now + R and the bucket then refills one token per T.
--   rate_gate(run_key, run_prefix, now) -> eligible_ms, bucket
--       see below.
local function gcra_tat(key, now)
  local tat = tonumber(redis.call('GET', key) or '')
  if not tat or tat < now then
    return now
  end
  return tat
end

local function gcra_check(key, now, limit, period_ms, burst, cost)
  local t = period_ms / limit
  local new_tat = gcra_tat(key, now) + t * cost
  return new_tat - t * burst, new_tat
end

local function gcra_commit(key, now, new_tat)
  if new_tat > now then
    redis.call('SET', key, string.format('%.17g', new_tat), 'PX', math.ceil(new_tat - now))
  end
end

local function gcra_push(key, now, limit, period_ms, burst, retry_after_ms)
  local t = period_ms / limit
  local tat = math.max(gcra_tat(key, now), now + retry_after_ms + t * burst - t)
  gcra_commit(key, now, tat)
  return tat
end

-- A queue's start bucket (a run names it in `rate_limits`): `<tag>:rl:<bucket>`
-- beside the run records (store/keys.py QueueKeys.start_bucket builds the same name),
-- so a claim gates starts inside its own hash slot.
local function start_bucket_of(run_prefix, bucket)
  return queue_key_of(run_prefix, 'rl:' .. bucket)
end

-- A run's `rate_limits` argument (create_run): a JSON list of at most 8
-- [bucket, limit, period_ms, burst, cost], each number an integer as int_arg takes it
-- (limit, period_ms, burst >= 1; 0 <= cost <= burst), so rate_gate never meets a bad one.
local function rate_limits_arg(raw)
  local specs = json_arg(raw, 'rate_limits')
  if type(specs) ~= 'table' or #specs > 8 then
    bad_argument('rate_limits', raw)
  end
  for _, spec in ipairs(specs) do
    if type(spec) ~= 'table' or #spec ~= 5 or type(spec[1]) ~= 'string'
        or not string.match(spec[1], '^[%w_.:%-]+$') then
      bad_argument('rate_limits', raw)
    end
    for i = 2, 5 do
      if type(spec[i]) ~= 'number' or spec[i] ~= math.floor(spec[i]) or spec[i] > 1e15
          or spec[i] < (i == 5 and 0 or 1) then
        bad_argument('rate_limits', raw)
      end
    end
    if spec[5] > spec[4] then
      bad_argument('rate_limits (a cost above its burst never passes)', raw)
    end
  end
  return specs
end

-- The start gate of one run about to be claimed. The run's `rate_limits` field (JSON,
-- written by create_run from declarations the API resolved) lists
-- [bucket, limit, period_ms, burst, cost] per bucket it names.
-- Returns 0 (and '') when the run may start now: its tokens are taken in every bucket,
-- here, at its start, so over any window the starts of a bucket never pass
-- limit + burst, however late a worker claims. Otherwise returns the epoch ms at which
-- it may start and the bucket that holds it back: the caller must ZADD it to the queue's
-- delayed set with that score and write nothing else for it. That time is a *slot* in
-- each bucket's schedule (`<bucket>:next`, the first free slot): held-back runs line up
-- one emission interval apart, so N of them get N staggered times (no herd, no spinning
-- claim), and a new run waits behind those already in line (FIFO). A run claimed at or
-- after its slot (`rate_slot_at`) only checks the bucket; if a late claim finds it full
-- after all, the run takes a new slot at the end of the line. A run cancelled in line
-- leaves its slot unused: a bucket may under-admit, never over-admit. Call it after the
-- run's reads, before its own writes; an undecodable field counts as no gate
-- (create_run validated it). known: {rate_limits, rate_slot_at} as the caller already
-- read them (claim_runs reads a run once), nil to read them here.
local function rate_gate(run_key, run_prefix, now, known)
  local cur = known or redis.call('HMGET', run_key, 'rate_limits', 'rate_slot_at')
  if not cur[1] or cur[1] == '' then
    return 0, ''
  end
  local ok, specs = pcall(cjson.decode, cur[1])
  if not ok or type(specs) ~= 'table' then
    return 0, ''
  end
  local slotted = tonumber(cur[2])
  if slotted and slotted > now then
    return slotted, ''  -- promoted before its slot (it cannot be, but never start early)
  end
  local eligible, holder, buckets = now, '', {}
  for i, spec in ipairs(specs) do
    local key = start_bucket_of(run_prefix, tostring(spec[1]))
    local allow_at, new_tat = gcra_check(key, now, spec[2], spec[3], spec[4], spec[5])
    local line = tonumber(redis.call('GET', key .. ':next') or '') or 0
    -- a run already in line goes at its slot; a new one behind the runs in line
    local at = slotted and allow_at or math.max(allow_at, line)
    if at > eligible then
      eligible, holder = at, tostring(spec[1])
    end
    buckets[i] = {key = key, new_tat = new_tat, line = line, t = spec[3] / spec[2] * spec[5]}
  end
  if eligible <= now then
    for _, b in ipairs(buckets) do
      gcra_commit(b.key, now, b.new_tat)
    end
    if slotted then
      redis.call('HDEL', run_key, 'rate_slot_at')
    end
    return 0, ''
  end
  local slot = math.ceil(eligible)
  for _, b in ipairs(buckets) do
    if slot < b.line then
      slot = math.ceil(b.line)  -- a late run re-queued: at the end of every line
    end
  end
  for _, b in ipairs(buckets) do
    local next_free = math.max(b.line, slot) + b.t
    redis.call('SET', b.key .. ':next', string.format('%.17g', next_free), 'PX',
      math.ceil(next_free - now) + 1)
  end
  redis.call('HSET', run_key, 'rate_slot_at', slot)
  return slot, holder
end

-- The whole start gate for a claim, in one call: a run its buckets hold back (rate_gate)
-- moves to the queue's delayed set (`delayed_key`) at the exact ms it may start, and its
-- stream says why ({kind = rate_limited, key, until_ms}, a `wait` event at its current
-- fence). Returns true when the run was held back (the caller writes nothing else for
-- it and claims the next), false when it may be leased now (its tokens are taken).
-- claim_runs calls it for each run right before leasing it, with the run's
-- rate_limits, rate_slot_at and fence fields as it read them (known; nil: read here).
local function rate_hold(run_prefix, events_prefix, delayed_key, run_id, now, maxlen, known)
  local run_key = run_prefix .. run_id
  local eligible, bucket = rate_gate(run_key, run_prefix, now, known)
  if eligible == 0 then
    return false
  end
  redis.call('ZADD', delayed_key, eligible, run_id)
  if bucket ~= '' then
    local fence = (known and known[3]) or redis.call('HGET', run_key, 'fence') or 0
    xadd_event(events_prefix .. run_id, 'wait', fence, now,
      cjson.encode({kind = 'rate_limited', key = bucket, until_ms = eligible,
        wait_ms = eligible - now}), maxlen)
  end
  return true
end

-- A new run, its record about to be written (status queued, fence 0), enters its queue:
-- the `created` event, the listing and unclaimed indexes, then the ready list, or, when
-- start_ms is ahead of now, the delayed set (claim_runs promotes it when due) with a
-- `wait` event saying until when. create_run and fire_schedule both enter runs here,
-- so a run made by a schedule is queued exactly as one a client created.
-- q: {ready, runs, unclaimed, wake (channel; nil: the caller publishes), maxlen, known
-- (optional: enqueue's fields, as the record holds them; known.qbase_written when the
-- record holds qbase), record (optional: the record's fields, its run_at or qbase
-- included, HSET here with the event's id: emit's fields), activity (optional: the
-- queue's activity stream), index (optional: create_runs' chunk index, new_index)}.
-- Encodes only numbers and strings.
-- The members of a create_runs chunk's ZADD of one plain lane (index_created sends it):
-- its first run of the chunk places the lane in the ring, as enqueue would.
local function chunk_lane(q, index, lane)
  local members = index.lanes[lane]
  if not members then
    members = {}
    index.lanes[lane] = members
    index.lane_order[#index.lane_order + 1] = lane
    if redis.call('HSETNX', tag_of_ready(q.ready) .. 'placed', lane, '') == 1 then
      redis.call('RPUSH', q.ready, lane)
    end
  end
  return members
end

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

-- A schedule's cancel_previous stops the schedule's last run, which has not ended: a
-- held one is asked to stop (request_cancel: its owner, or the reconciler if it is
-- dead, writes `cancelled`); one nobody holds (queued, delayed, parked) ends
-- `cancelled` now, as cancel_run ends it. cur: HMGET status, fence of the run.
-- k: {leases, run_prefix, events_prefix, idem_prefix}. Returns the status afterwards.
local function cancel_unended(k, run_id, cur, now, reason, retention, maxlen)
  if cur[1] == 'cancelling' then
    return 'cancelling'  -- asked already: its owner is stopping it
  end
  if cur[1] == 'running' then
    request_cancel(string.sub(k.run_prefix, 1, -5), run_id, now, {reason = reason}, maxlen)
    return 'cancelling'
  end
  local data = cjson.encode({reason = reason, previous_status = cur[1]})
  redis.call('HSET', k.run_prefix .. run_id, 'cancel_requested_at', now)
  redis.call('ZREM', delayed_of(k.run_prefix), run_id)
  finalize(k, run_id, 'cancelled', cur[2], now, {}, data, retention, maxlen)
  return 'cancelled'
end

-- A schedule's next fire time: its record and its queue's due set (what reconcilers
-- scan) say the same, or, for none (paused, or a spec that never fires again), neither
-- holds it. put_schedule and fire_schedule both move it here.
local function set_next_fire(schedule_key, due_key, schedule_id, next_fire)
  if next_fire then
    redis.call('HSET', schedule_key, 'next_fire_ms', next_fire)
    redis.call('ZADD', due_key, next_fire, schedule_id)
  else
    redis.call('HDEL', schedule_key, 'next_fire_ms')
    redis.call('ZREM', due_key, schedule_id)
  end
end

-- Creating runs: create_run creates one, create_runs a chunk of one queue's, and both
-- do it with the functions below, so a run is the same whichever way it came in. Their
-- ARGV share one layout: queue, maxlen, wake_channel, retention, then segments. A
-- segment is a shape (CREATE_SHAPE_SIZE fields: everything its runs share), a count,
-- and that many runs of CREATE_RUN_SIZE fields each (run_id, input, idempotency_key,
-- fingerprint); create_run: one segment of one run. A shape is checked and turned into
-- its record, lane and `created` event once per segment, not once per run: a batch's
-- runs mostly share one.
local CREATE_SHAPE_SIZE, CREATE_RUN_SIZE = 19, 4

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

-- A shape's template record (place_shape) under q.template: every field but the
-- idempotency key, the run's own values empty. create_runs deletes it before it
-- returns, so it never outlives the call; it is deleted before each placing too, so
-- neither the previous shape's nor one a call that errored midway left (Redis keeps a
-- failed script's writes) can add a field to a record.
local function create_template_of(ready_key)
  return tag_of_ready(ready_key) .. 'create_template'
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
  local run_id, idem, fingerprint = ARGV[j], ARGV[j + 2], ARGV[j + 3]
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
  record[RECORD_ID], record[s.input_at], record[n] = run_id, ARGV[j + 1], idem
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
  for j = s.first, s.last, CREATE_RUN_SIZE do
    local run_id, idem = ARGV[j], ARGV[j + 2]
    local run_key, idem_key = run_prefix .. run_id, idem ~= '' and idem_prefix .. idem
    local code, id
    if idem_key and redis.call('SETNX', idem_key, run_id .. ' ' .. ARGV[j + 3]) == 0 then
      -- the key was there, SETNX wrote nothing: create_prior's answer, the record first
      if redis.call('EXISTS', run_key) == 1 then
        code, id = 'REPLAYED', run_id
      else
        code, id = idempotent_prior(idem_key, idem, ARGV[j + 3])
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
        run_id, ARGV[j + 1], event_id, idem
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
