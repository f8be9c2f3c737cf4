-- upgrade_runs: move pinned runs off their build (issue 36): to another build, or to none
-- (the next claim by any build takes them, and pins them again if their versioning is
-- pinned).
--
-- KEYS[1]  run_prefix   prefix  run keys are this prefix .. id (one queue's hash tag)
-- KEYS[2]  events_prefix  prefix  event streams are this prefix .. id
-- ARGV[1]  from_build   string  only runs pinned to this build ('' : pinned to any)
-- ARGV[2]  to_build     string  the build to pin them to ('' : none)
-- ARGV[3]  handler      string  only runs of this handler ('' : any)
-- ARGV[4]  maxlen       integer approximate cap of each event stream
-- ARGV[5]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- ARGV[6..] id          the runs, one per group, each of this queue
-- derived  lane:<lane>, placed, ready, ready@<build>, pins:<build>, pinned_builds, queued,
--          kqueued, one:<key> (includes/keys.lua), from the queue's tag
-- returns  {code, answers}  codes: OK; answers: one '<code> <status> <from build>' per
--          run, in order: OK (moved), NOT_FOUND, INVALID (ended: a finished run needs no
--          build; or open and pinned to none: any build takes it already), CONFLICT
--          (another build or handler than the filters name, or pinned to to_build)
-- events   upgraded ({from, to (absent: none)}) on each run moved
-- invariant: a run moved leaves its old build's index and, when queued, its old build's
--          lane, and enters the new build's (or the queue's) lane at the same place
--          (its qbase) in the same step: it is never in two rings nor in none. A
--          running run keeps running where it is; its next claim is the new build's.
--          Repeating the call changes nothing (the runs are then CONFLICT or INVALID).
-- validate-then-write: the builds and handler are checked as tokens, the numbers and
--          every id before the first write.
--- @include args
--- @include keys
--- @include events
--- @include slots
--- @include lanes

check_argc(@groups - 1)
local TOKEN = '^[%w._-]*$'
local from = string.match(ARGV[@from_build], TOKEN) or bad_argument('from_build', ARGV[@from_build])
local to = string.match(ARGV[@to_build], TOKEN) or bad_argument('to_build', ARGV[@to_build])
local handler = string.match(ARGV[@handler], TOKEN) or bad_argument('handler', ARGV[@handler])
int_arg(ARGV[@maxlen], 'maxlen', 0)
check_groups(@groups, @UpgradeGroup)
for i = @groups, #ARGV, @UpgradeGroup do
  run_id_arg(ARGV[i + @UpgradeGroup.id])
end
local tag = tag_of_prefix(KEYS[1])
local ENDED = {succeeded = true, failed = true, cancelled = true, orphaned = true,
  expired = true}
local now = now_ms()
local answers, woke = {}, false

local function upgrade(id)
  local run_key = KEYS[1] .. id
  local cur = redis.call('HMGET', run_key, 'status', 'pin', 'handler', 'fence', 'qbase',
    'blocked_on')
  local pin = cur[2] or ''
  if not cur[1] then
    return 'NOT_FOUND', pin, '-'
  elseif ENDED[cur[1]] or pin == '' then
    return 'INVALID', pin, cur[1]
  elseif (from ~= '' and pin ~= from) or (handler ~= '' and cur[3] ~= handler) or pin == to then
    return 'CONFLICT', pin, cur[1]
  end
  local queued = unqueue(tag, run_key, id)
  unindex_pin(tag, id, pin)
  if to == '' then
    redis.call('HDEL', run_key, 'pin')
  else
    redis.call('HSET', run_key, 'pin', to)
    index_pin(tag, id, to)
  end
  if cur[6] and string.sub(cur[6], 1, 2) == 'b:' then
    redis.call('HDEL', run_key, 'blocked_on')  -- it waited for the old build only
  end
  if queued then
    enqueue(tag, run_key, id, tonumber(cur[5]) or now, false)
    woke = true
  end
  xadd_event(KEYS[2] .. id, 'upgraded', tonumber(cur[4]) or 0, now,
    cjson.encode({from = pin, to = to ~= '' and to or nil}), ARGV[@maxlen])
  return 'OK', pin, cur[1]
end

for i = @groups, #ARGV, @UpgradeGroup do
  local id = ARGV[i + @UpgradeGroup.id]
  local answer, pin, status = upgrade(id)
  answers[#answers + 1] = answer .. ' ' .. status .. ' ' .. pin
end
if woke then
  redis.call('PUBLISH', ARGV[@wake_channel], 'ready')
end
return {'OK', answers}
