-- note_patch: which side of a code change (ctx.patched) a run takes, decided once.
--
-- KEYS[1]  run          hash    the run's record
-- KEYS[2]  events       stream  the run's events
-- KEYS[3]  effects      hash    the run's effects: '~patch:<id>' -> '1' (the patched code)
--          or '0' (the code before it), beside the step log (includes/steps.lua)
-- ARGV[1]  owner_id     string
-- ARGV[2]  fence        integer
-- ARGV[3]  patch_id     string  the change's id: [A-Za-z0-9_.-], 1..128
-- ARGV[4]  patched      0 | 1   the worker's proposal: 1 unless the run has recorded steps
--          past this point (older code went on there without the patch)
-- ARGV[5]  maxlen       integer approximate cap of the event stream
-- returns  {code, value}  codes: OK (value: '1' or '0', what the run takes: the first
--          decision recorded, this one or an earlier attempt's), LOST (fenced out)
-- events   patch {id, patched} (the first decision only)
-- invariant: a run decides each patch once (HSETNX), so every replay takes the branch
--          its first attempt took, whatever the code the worker runs now.
-- validate-then-write: the id and proposal checked, the holder and the decision read,
--          and the event encoded, before the first write.
--- @include args
--- @include events
--- @include fence

check_argc(@PatchArgs)
local owner, fence, patch_id = ARGV[@owner_id], ARGV[@fence], ARGV[@patch_id]
if type(patch_id) ~= 'string' or #patch_id > 128 or not string.match(patch_id, '^[A-Za-z0-9_.%-]+$') then
  bad_argument('patch_id', patch_id)
end
local proposed = enum_arg(ARGV[@patched], 'patched', {'0', '1'})
int_arg(ARGV[@maxlen], 'maxlen', 0)
if not holds(KEYS[1], owner, fence) then
  return {'LOST', ''}
end
local field = '~patch:' .. patch_id
local decided = redis.call('HGET', KEYS[3], field)
if decided then
  return {'OK', decided}
end
local data = cjson.encode({id = patch_id, patched = proposed == '1'})
redis.call('HSET', KEYS[3], field, proposed)
emit(KEYS[1], KEYS[2], 'patch', fence, now_ms(), data, ARGV[@maxlen])
return {'OK', proposed}
