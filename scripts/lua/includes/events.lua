-- events: a run's event stream and the queue's activity stream, written in the same step
-- as the change they describe.
-- Builds on: args.

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
