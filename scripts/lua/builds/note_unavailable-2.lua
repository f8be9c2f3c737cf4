-- note_unavailable: a queue's runs pinned to a build no live worker has wait visibly
-- (issue 36): each queued one gets a `wait` event naming the build, once, and
-- `blocked_on` b:<build>, so a client, GET /runs/{id} and GET /queues/{q} say why it
-- does not start instead of it waiting silently for code that is gone.
--
-- KEYS[1]  run_prefix   prefix  run keys are this prefix .. id (one queue's hash tag)
-- KEYS[2]  events_prefix  prefix  event streams are this prefix .. id
-- ARGV[1]  live_builds  string  the builds of the live, claiming workers of the queue,
--          space-separated ('' : none)
-- ARGV[2]  maxlen       integer approximate cap of each event stream
-- ARGV[3]  max_reads    integer most queued runs read in this call (a page: the next
--          call reads again from each lane's head, skipping runs told already)
-- derived  pinned_builds, ready@<build>, lane:<lane> (includes/keys.lua)
-- returns  {code, noted, waiting}  codes: OK; noted: runs told in this call; waiting:
--          a flat list of build, queued runs pinned to it, for each pinned build that
--          no live worker has
-- events   wait ({kind = build_unavailable, resource = build, subject, build_id}) on each
--          run in such a build's lanes not told yet (its blocked_on is not b:<build>):
--          queued, or waiting (a durable sleep whose time came, promoted to its lane)
-- invariant: only reads and a run's own blocked_on and event are written: a run's
--          place (lane, ring, pin) never changes here, so a worker of the build that
--          comes back claims it as it would have (claim_runs clears blocked_on).
-- validate-then-write: the builds are checked as tokens and the numbers before the
--          first write.
--- @include args
--- @include keys
--- @include events

check_argc(@UnavailableArgs)
local live = {}
for build in string.gmatch(ARGV[@live_builds], '[^ ]+') do
  live[string.match(build, '^[%w._-]+$') or bad_argument('live_builds', build)] = true
end
int_arg(ARGV[@maxlen], 'maxlen', 0)
local reads = int_arg(ARGV[@max_reads], 'max_reads', 0)
local tag = tag_of_prefix(KEYS[1])
local now = now_ms()
local noted, waiting = 0, {}

local function tell(id, build, data)
  local cur = redis.call('HMGET', KEYS[1] .. id, 'blocked_on', 'fence', 'status')
  -- queued, or waiting: a durable sleep whose time came waits in its lane as `waiting`
  if (cur[3] == 'queued' or cur[3] == 'waiting') and cur[1] ~= 'b:' .. build then
    redis.call('HSET', KEYS[1] .. id, 'blocked_on', 'b:' .. build)
    xadd_event(KEYS[2] .. id, 'wait', tonumber(cur[2]) or 0, now, data, ARGV[@maxlen])
    noted = noted + 1
  end
end

for _, build in ipairs(redis.call('SMEMBERS', tag .. 'pinned_builds')) do
  if not live[build] then
    local data = cjson.encode({kind = 'build_unavailable', resource = 'build',
      subject = build, build_id = build})
    local queued = 0
    for _, lane in ipairs(redis.call('LRANGE', tag .. 'ready@' .. build, 0, -1)) do
      local lane_key = tag .. 'lane:' .. lane
      queued = queued + redis.call('ZCARD', lane_key)
      if reads > 0 then
        local ids = redis.call('ZRANGE', lane_key, 0, reads - 1)
        reads = reads - #ids
        for _, id in ipairs(ids) do
          tell(id, build, data)
        end
      end
    end
    waiting[#waiting + 1] = build
    waiting[#waiting + 1] = queued
  end
end
return {'OK', noted, waiting}
