-- schedule: a schedule's next fire time, kept in the queue's due set.
-- Builds on: nothing.

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
