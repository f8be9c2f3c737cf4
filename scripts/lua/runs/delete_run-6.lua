-- delete_run: remove a finished run and every key of it, now, before its retention ends.
--
-- KEYS[1]  run          hash    the run's record
-- KEYS[2]  events       stream  the run's events
-- KEYS[3]  effects      hash    the run's memoized effects
--          (its waits hash, park_run's, is derived from KEYS[1] and deleted with it)
-- KEYS[4]  runs         zset    every run of the queue by created_at ms (the listing index)
-- KEYS[5]  unclaimed    zset    id -> epoch ms when an unclaimed run expires
-- KEYS[6]  idem_prefix  prefix  idempotency keys are this prefix .. key
-- ARGV[1]  run_id       string
-- returns  {code, status}  codes: OK (deleted; status is the one it had), NOT_FOUND,
--          INVALID (the run is not terminal, or its end is still in its slot's outbox:
--          status says which; nothing deleted)
-- events   none: the run's stream is deleted with it (the queue's capped activity
--          stream keeps its summary lines until they are trimmed)
-- invariant: only a terminal run is deleted, checked in the same step as the
--          deletion, so a run a worker holds or may still claim is never removed
--          however a purge races it. The idempotency key goes only while it still
--          names this run. Repeating it answers NOT_FOUND and changes nothing.
--          A run whose end has not reached its family yet (an 'ended' or 'cascade'
--          entry in its slot's outbox; 'ended <id>' written before the entry named
--          the parent too) is not deleted either: the delivery reads the
--          record, and a child deleted first would leave its parent's join waiting for
--          ever (the soak found it: a purge inside a taken entry's hold).
-- validate-then-write: the run id is checked against its keys, and the record and
--          its idempotency key read, before the first DEL.
--- @include args
--- @include keys
--- @include family
--- @include finalize

check_argc(@DeleteArgs)
local run_id = run_id_arg(ARGV[@run_id], KEYS[1], KEYS[2])
local cur = redis.call('HMGET', KEYS[1], 'status', 'idempotency_key', 'parent_id')
local status = cur[1]
if not status then
  return {'NOT_FOUND', ''}
end
if not TERMINAL[status] then
  return {'INVALID', status}
end
local outbox = outbox_of(string.sub(KEYS[1], 1, #KEYS[1] - #run_id))
local parent = cur[3] or ''
if (parent ~= '' and (redis.call('ZSCORE', outbox, ended_entry(run_id, parent))
      or redis.call('ZSCORE', outbox, 'ended ' .. run_id)))
    or redis.call('ZSCORE', outbox, 'cascade ' .. run_id) then
  return {'INVALID', status .. ', and its end has not reached its family yet'}
end
local idem_key = nil
if cur[2] and cur[2] ~= '' then
  local named = redis.call('GET', KEYS[6] .. cur[2])
  if named and string.sub(named, 1, #run_id + 1) == run_id .. ' ' then
    idem_key = KEYS[6] .. cur[2]
  end
end

redis.call('DEL', KEYS[1], KEYS[2], KEYS[3],
  waits_key_of(string.sub(KEYS[1], 1, #KEYS[1] - #run_id), run_id))
if idem_key then
  redis.call('DEL', idem_key)
end
redis.call('ZREM', KEYS[4], run_id)
redis.call('ZREM', KEYS[5], run_id)
return {'OK', status}
