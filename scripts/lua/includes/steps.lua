-- steps: the order a run's steps were first taken in, for the drift check on replay.
-- Builds on: args, keys.

-- Each step a handler takes (an effect, a durable wait, a spawn, a join) has a position:
-- its place among the run's steps, counted by the worker from the last checkpoint's
-- (effects.py). The step's own script, in the same call that first records the step,
-- writes '~<position>' -> '<kind>|<field>' in the run's effects hash (beside the effect
-- records: it lives and expires with them), and '~n' -> one past the highest position.
-- A later attempt reads them back and refuses to go on when the handler asks for
-- another step at a recorded position (app/executor/effects.py: version_drift). The
-- first record of a position stands (HSETNX): a repeat after a lost reply rewrites
-- nothing. position '' (a caller from before the check): nothing is noted.
local function position_arg(value)
  if value == '' then
    return nil
  end
  return int_arg(value, 'position', 0)
end

local function note_step(run_key, run_id, position, entry)
  if not position then
    return
  end
  local effects_key = effects_key_of(string.sub(run_key, 1, #run_key - #run_id), run_id)
  redis.call('HSETNX', effects_key, '~' .. position, entry)
  local n = tonumber(redis.call('HGET', effects_key, '~n')) or 0
  if position + 1 > n then
    redis.call('HSET', effects_key, '~n', position + 1)
  end
end

-- The step log's fields of a run's effects hash, '~n' last: what resolve_run deletes when
-- a person retries a run parked for version_drift on the code it now meets.
local function step_fields_of(effects_key)
  local fields = {}
  local noted = tonumber(redis.call('HGET', effects_key, '~n')) or 0
  for n = 0, noted - 1 do
    fields[#fields + 1] = '~' .. n
  end
  fields[#fields + 1] = '~n'
  return fields
end
