-- lanes: a queue's ready runs: one lane per handler, concurrency key and singleton key,
-- served by priority and age.
-- Builds on: args, keys, slots.

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

-- The queue's index of open pinned runs (pins:<build>, pinned_builds): what GET /builds
-- counts and the unavailable-build sweep walks. A run joins it when a claim pins it and
-- leaves it when it ends (finalize) or an upgrade moves it.
local function index_pin(tag, run_id, build)
  redis.call('SADD', tag .. 'pins:' .. build, run_id)
  redis.call('SADD', tag .. 'pinned_builds', build)
end

local function unindex_pin(tag, run_id, build)
  if build and build ~= '' and redis.call('SREM', tag .. 'pins:' .. build, run_id) == 1
      and redis.call('EXISTS', tag .. 'pins:' .. build) == 0 then
    redis.call('SREM', tag .. 'pinned_builds', build)
  end
end

local function count_dequeued(tag, ckey, skey, run_id)
  redis.call('DECR', tag .. 'queued')
  uncount_keys(tag, ckey, skey, run_id)
end

-- Put a queued run in its lane, its lane in the ring if it is in no place yet. qbase:
-- the enqueue time its score ages from (0: the head of its lane, for release, resume).
-- known: the run's {handler, ckey, skey, boost_ms, lane} when the caller has just
-- written them (a create: a new run is pinned to no build), nil to read them (and pin).
local function enqueue(tag, run_key, run_id, qbase, at_front, known)
  local f = known or redis.call('HMGET', run_key, 'handler', 'ckey', 'skey', 'boost_ms', 'lane',
    'pin')
  local lane = pinned_lane(f[6], f[5] or lane_of(f[1], f[2], f[3]))
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
      redis.call('LPUSH', ring_of(tag, lane), lane)
    else
      redis.call('RPUSH', ring_of(tag, lane), lane)
    end
  end
end

-- Take a run out of its lane without claiming it (cancelled, expired or superseded
-- while queued; moved to another build's lanes); true when it was in one. A lane left
-- empty leaves its place too (LREM on the ring is O(lanes), paid only when the last
-- queued run of a lane goes this way).
local function unqueue(tag, run_key, run_id)
  local f = redis.call('HMGET', run_key, 'lane', 'ckey', 'skey', 'handler', 'pin')
  local lane = pinned_lane(f[5], f[1] or lane_of(f[4], f[2], f[3]))
  local lane_key = tag .. 'lane:' .. lane
  if redis.call('ZREM', lane_key, run_id) == 0 then
    return false
  end
  count_dequeued(tag, f[2], f[3], run_id)
  if redis.call('EXISTS', lane_key) == 0 then
    local where = redis.call('HGET', tag .. 'placed', lane)
    if where == '' then
      redis.call('LREM', ring_of(tag, lane), 1, lane)
    elseif where then
      redis.call('SREM', tag .. 'wait:' .. where, lane)
      if redis.call('EXISTS', tag .. 'wait:' .. where) == 0 then
        redis.call('SREM', tag .. 'blocked', where)
      end
    end
    redis.call('HDEL', tag .. 'placed', lane)
  end
  return true
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
