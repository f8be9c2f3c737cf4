-- report_drift: a replay asked for another step than the run recorded at that position:
-- park the run for a person instead of replaying a result under the wrong step.
--
-- KEYS[1]  run          hash    the run's record
-- KEYS[2]  events       stream  the run's events
-- KEYS[3]  leases       zset    id -> lease expiry ms (a parked run leaves it)
-- ARGV[1]  owner_id     string
-- ARGV[2]  fence        integer
-- ARGV[3]  run_id       string
-- ARGV[4]  details      json    what the worker found: position, recorded, taken, steps
--          recorded and taken so far, build (bounded by the worker)
-- ARGV[5]  maxlen       integer approximate cap of the event stream
-- returns  {code, fence}  codes: OK (parked in reconciliation_required with error code
--          version_drift; fence: the new one), LOST (fenced out: nothing written)
-- events   reconciliation_required {error}
-- invariant: the drift is found before the step is replayed or run, and the run parks
--          in the same call (fence+1): its owner can write nothing more, so no recorded
--          result reaches the wrong step and no side effect runs under another's key.
-- validate-then-write: the details decoded and the error and event encoded, and the
--          holder read, before the first write.
--- @include args
--- @include keys
--- @include events
--- @include fence
--- @include slots
--- @include park

check_argc(@DriftArgs)
local owner, fence = ARGV[@owner_id], ARGV[@fence]
local run_id = run_id_arg(ARGV[@run_id], KEYS[1], KEYS[2])
local details = json_arg(ARGV[@details], 'details')
local maxlen = int_arg(ARGV[@maxlen], 'maxlen', 0)
if not holds(KEYS[1], owner, fence) then
  return {'LOST', ''}
end
local err = {code = 'version_drift',
  message = 'the handler asked for step ' .. tostring(details.taken) .. ' at position '
    .. tostring(details.position) .. ', where the run recorded ' .. tostring(details.recorded)
    .. ': its code changed under it; a person must resolve the run',
  retryable = false, details = details}
local err_json = cjson.encode(err)
local data = cjson.encode({error = err})
local now = now_ms()
local k = {leases = KEYS[3], run_prefix = string.sub(KEYS[1], 1, #KEYS[1] - #run_id),
  events_prefix = string.sub(KEYS[2], 1, #KEYS[2] - #run_id)}
local new_fence = park(k, run_id, 'reconciliation_required', now, {'error', err_json}, data,
  maxlen)
return {'OK', tostring(new_fence)}
