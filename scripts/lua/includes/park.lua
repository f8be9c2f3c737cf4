-- park: a run that waits (a person, a signal, a sleep, a join) holds no lease and no
-- slot.
-- Builds on: args, keys, events, slots.

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
  -- counted apart from retry backoff: a timed wait is in `delayed` too, by the same score
  redis.call('ZADD', waiting_of(k.run_prefix), until_ms or '+inf', run_id)
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
  redis.call('ZREM', waiting_of(string.sub(run_key, 1, #run_key - #run_id)), run_id)
  if redis.call('ZSCORE', delayed_key, run_id) or not wait.until_ms then
    redis.call('ZADD', delayed_key, now, run_id)
  end
  redis.call('PUBLISH', wake_channel, 'ready')
end
