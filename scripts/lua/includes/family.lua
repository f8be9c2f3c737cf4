-- family: a child's end, told to its parent through the outbox.
-- Builds on: keys.

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
