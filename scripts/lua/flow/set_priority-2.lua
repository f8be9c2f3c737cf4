-- set_priority: a client changes the priority of a run that has not started yet.
--
-- KEYS[1]  run          hash    the run's record
-- KEYS[2]  events       stream  the run's events
-- ARGV[1]  run_id       string
-- ARGV[2]  priority     integer the new priority (-100..100, checked by the API)
-- ARGV[3]  boost_ms     integer priority x aging step, as create_run takes it
-- ARGV[4]  maxlen       integer approximate cap of the event stream
-- derived  lane:<lane> from the queue's tag (KEYS[1] less 'run:<id>')
-- returns  {code, status}  codes: OK (changed; status queued), NOT_FOUND, INVALID (the
--          run is not queued: status says what it is; nothing written)
-- events   priority_changed {from, to}
-- invariant: only a queued run changes priority; in its lane it is rescored to its
--          enqueue time (qbase) less the new boost, so it keeps its age and its
--          head-of-line placement (a released or resumed run's qbase is 0). A run
--          waiting in the delayed set takes the new boost when it joins its lane.
-- validate-then-write: the numbers are checked and the record read before the first HSET.
--- @include args
--- @include keys
--- @include events
--- @include lanes

check_argc(@SetPriorityArgs)
local run_id = run_id_arg(ARGV[@run_id], KEYS[1], KEYS[2])
local priority = int_arg(ARGV[@priority], 'priority', -1000000)
local boost_ms = int_arg(ARGV[@boost_ms], 'boost_ms', -1000000000000)
int_arg(ARGV[@maxlen], 'maxlen', 0)
local cur = redis.call('HMGET', KEYS[1], 'status', 'priority', 'lane', 'qbase', 'fence',
  'handler', 'ckey', 'skey', 'pin')
if not cur[1] then
  return {'NOT_FOUND', ''}
end
if cur[1] ~= 'queued' then
  return {'INVALID', cur[1]}
end
local now = now_ms()
local data = cjson.encode({from = tonumber(cur[2]) or 0, to = priority})
local tag = string.sub(KEYS[1], 1, -(#run_id + 5))
redis.call('HSET', KEYS[1], 'priority', priority, 'boost_ms', boost_ms)
if cur[4] then
  -- XX: only a run still in its lane is rescored (one in the delayed set is not there);
  -- a record without its lane is in the one lane_of names (create leaves a default out)
  local lane = pinned_lane(cur[9], cur[3] or lane_of(cur[6], cur[7], cur[8]))
  redis.call('ZADD', tag .. 'lane:' .. lane, 'XX', tonumber(cur[4]) - boost_ms, run_id)
end
xadd_event(KEYS[2], 'priority_changed', tonumber(cur[5]) or 0, now, data, ARGV[@maxlen])
return {'OK', 'queued'}
