-- child_ended: a child's outcome reaches its parent's slot (the outbox delivery of
--          'ended <child>'): recorded once, and a parked join whose condition now holds wakes.
--
-- KEYS[1]  run          hash    the parent's record
-- KEYS[2]  events       stream  the parent's events
-- KEYS[3]  family       hash    the parent's family: 'out:<child id>' -> outcome json
-- KEYS[4]  children     zset    the parent's children index
-- KEYS[5]  joining      set     the children a parked join still waits for
-- KEYS[6]  delayed      zset    id -> epoch ms it may run (the promotion path claims use)
-- ARGV[1]  parent_id    string
-- ARGV[2]  child_id     string
-- ARGV[3]  status       string  the child's terminal status
-- ARGV[4]  outcome      json    '{"status":"<status>","output":...,"error":...}', as the
--          deliverer composed it from the child's record (stored as text, never re-encoded)
-- ARGV[5]  maxlen       integer approximate cap of the event stream
-- ARGV[6]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- ARGV[7]  reason       string  '' (the outcome is the child's record's) | child_record_gone
--          (no record was left to read: expired or deleted by hand before its delivery;
--          the outcome is a failure that says so)
-- returns  {code, value}  codes: OK (recorded; value 'woke' when it woke the parked join,
--          else 'recorded'), REPLAYED (delivered before: nothing written), NOT_FOUND (no
--          parent record: its retention ended), INVALID (the parent ended, value its status,
--          or the child is not in its index: nothing written)
-- events   child_ended {child_id, status, woke, reason when given} on the parent's stream
--          (a lifecycle event when it woke the parent: status queued)
-- invariant: one outcome per child, delivered any number of times (a deliverer that died
--          after this step redelivers it): the first write wins and nothing else changes.
--          The join's check and its park (join_children) and this record and wake are
--          scripts of one slot, so a child's end is never lost between them; a woken
--          parent is queued through the delayed set at the Redis clock's now, as a
--          signal wakes a wait, and its handler replays the join.
-- validate-then-write: the ids, status, reason and numbers are checked, the records, the index and
--          the parked join read and decoded (written by join_children), and the event
--          encoded, before the first write.
--- @include args
--- @include events
--- @include keys
--- @include park
--- @include finalize

check_argc(@ChildEndedArgs)
local parent_id = run_id_arg(ARGV[@parent_id], KEYS[1], KEYS[2])
local child_id = run_id_arg(ARGV[@child_id])
local status = ARGV[@status]
if not TERMINAL[status] or string.sub(ARGV[@outcome], 1, 12 + #status) ~= '{"status":"' .. status .. '"' then
  bad_argument('status / outcome', status)
end
local maxlen = int_arg(ARGV[@maxlen], 'maxlen', 0)
local reason = enum_arg(ARGV[@reason], 'reason', {'', 'child_record_gone'})

local cur = redis.call('HMGET', KEYS[1], 'status', 'fence', 'waiting_for')
if not cur[1] then
  return {'NOT_FOUND', ''}
end
if redis.call('HEXISTS', KEYS[3], 'out:' .. child_id) == 1 then
  return {'REPLAYED', ''}
end
if TERMINAL[cur[1]] then
  return {'INVALID', cur[1]}
end
if not redis.call('ZSCORE', KEYS[4], child_id) then
  return {'INVALID', 'not_a_child'}
end
local wait = cur[1] == 'waiting' and cur[3] and cjson.decode(cur[3])
local joined = wait and wait.kind == 'join' and redis.call('SISMEMBER', KEYS[5], child_id) == 1
local woke = false
if joined then
  local left = redis.call('SCARD', KEYS[5]) - 1
  woke = left == 0 or (wait.subject == 'all' and status ~= 'succeeded')
    or (wait.subject == 'any' and status == 'succeeded')
end
local now = now_ms()
local data = cjson.encode({child_id = child_id, status = status, woke = woke,
  reason = reason ~= '' and reason or nil})

redis.call('HSET', KEYS[3], 'out:' .. child_id, ARGV[@outcome])
if joined then
  redis.call('SREM', KEYS[5], child_id)
end
if not woke then
  xadd_event(KEYS[2], 'child_ended', cur[2], now, data, maxlen)
else
  requeue_waiting(KEYS[1], KEYS[6], parent_id, wait, now, ARGV[@wake_channel])
  -- the status change and its event together (emit: the queue's activity sees it too)
  emit(KEYS[1], KEYS[2], 'child_ended', cur[2], now, data, maxlen)
end
return {'OK', woke and 'woke' or 'recorded'}
