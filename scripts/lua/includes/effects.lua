-- effects: side effects in flight, and the reconciliation a person decides when one's
-- outcome is unknown.
-- Builds on: park.

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
