-- slots: the concurrency slots a leased run holds, given back by every script that ends,
-- releases, parks or requeues it.
-- Builds on: keys.

-- Move up to n lanes blocked on res back to the head of the ring; how many moved.
local function wake_lanes(tag, res, n)
  local lanes = redis.call('SPOP', tag .. 'wait:' .. res, n)
  for _, lane in ipairs(lanes) do
    redis.call('HSET', tag .. 'placed', lane, '')
    redis.call('LPUSH', ring_of(tag, lane), lane)
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
