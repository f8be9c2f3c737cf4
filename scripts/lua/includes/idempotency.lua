-- idempotency: a create or re-run replayed under its key answers with the first one's
-- run, or a conflict.
-- Builds on: nothing.

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
