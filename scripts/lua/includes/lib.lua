-- lib: helpers shared by the transition scripts. A script pulls them in with the
-- line `--- @include lib`; store/scripts.py splices this file in at load time.

-- The one clock every lease decision uses: the Redis server's, in epoch ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Append one event to a run's stream, approximately capped at maxlen.
local function xadd_event(events_key, event_type, fence, ts, data, maxlen)
  return redis.call('XADD', events_key, 'MAXLEN', '~', maxlen, '*',
    'type', event_type, 'ts', ts, 'fence', fence, 'data', data)
end

-- Append one event and record its id on the run, so a state change and its event
-- are always written together.
local function emit(run_key, events_key, event_type, fence, ts, data, maxlen)
  local id = xadd_event(events_key, event_type, fence, ts, data, maxlen)
  redis.call('HSET', run_key, 'last_event_id', id)
  return id
end

-- Does (owner, fence) still hold this run? The check every worker write makes.
local function holds(run_key, owner, fence)
  local cur = redis.call('HMGET', run_key, 'status', 'owner_id', 'fence')
  return (cur[1] == 'running' or cur[1] == 'cancelling')
    and cur[2] == owner and cur[3] == fence
end

-- Put a run on the ready queue and wake every idle worker of the queue. Pub/sub
-- is a broadcast: unlike a token in a list, a paused or partitioned worker cannot
-- swallow the wake-up meant for the others.
local function make_ready(ready_key, wake_channel, run_id, at_front)
  if at_front then
    redis.call('LPUSH', ready_key, run_id)
  else
    redis.call('RPUSH', ready_key, run_id)
  end
  redis.call('PUBLISH', wake_channel, 'ready')
end

-- Write a terminal state and its terminal event in one step, drop the lease, and
-- start the retention clock on the record, its events and its idempotency key.
-- fields: extra HSET field/value pairs (output, error, ...).
local function finalize(k, run_id, status, fence, now, fields, data, retention_ms, maxlen)
  local run_key = k.run_prefix .. run_id
  local events_key = k.events_prefix .. run_id
  redis.call('HSET', run_key, 'status', status, 'finished_at', now)
  if #fields > 0 then
    redis.call('HSET', run_key, unpack(fields))
  end
  redis.call('HDEL', run_key, 'lease_expires_at')
  redis.call('ZREM', k.leases, run_id)
  emit(run_key, events_key, status, fence, now, data, maxlen)
  redis.call('PEXPIRE', run_key, retention_ms)
  redis.call('PEXPIRE', events_key, retention_ms)
  local idem = redis.call('HGET', run_key, 'idempotency_key')
  if idem and idem ~= '' then
    redis.call('PEXPIRE', k.idem_prefix .. idem, retention_ms)
  end
end
