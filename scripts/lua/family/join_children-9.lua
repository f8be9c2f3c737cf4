-- join_children: a handler waits for its children (ctx.join): the join's condition is
--          checked against the outcomes delivered so far, and the run parks without a
--          lease until child_ended finds it holds, or its timeout comes.
--
-- KEYS[1]  run          hash    the parent's record
-- KEYS[2]  events       stream  the parent's events
-- KEYS[3]  waits        hash    the parent's waits: 'join:<ordinal>' -> record json
-- KEYS[4]  leases       zset    id -> lease expiry ms
-- KEYS[5]  delayed      zset    id -> epoch ms it may run (the promotion path claims use)
-- KEYS[6]  family       hash    the parent's family: 'out:<child id>' -> outcome json
-- KEYS[7]  children     zset    the parent's children index (who may be joined)
-- KEYS[8]  joining      set     the children a parked join still waits for
-- KEYS[9]  joins        zset    the queue's parked joins: parent id -> ms parked or last
--          checked (app/store/outbox.py check_joins finds a child whose record vanished)
-- ARGV[1]  owner_id     string
-- ARGV[2]  fence        integer
-- ARGV[3]  run_id       string
-- ARGV[4]  ordinal      integer this join's place among the run's joins (from 1)
-- ARGV[5]  mode         string  all (every child succeeds, or the first failure) | any (the
--          first success, or all failed) | settled (every child ended, however)
-- ARGV[6]  timeout_ms   integer how long from now (the Redis clock) it may wait, '' for no
--          bound; only the first call of a step sets the deadline
-- ARGV[7]  maxlen       integer approximate cap of the event stream
-- ARGV[8]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- ARGV[9]  max_waits    integer how many fields the waits hash may hold (park_run's bound)
-- ARGV[10] position     integer the step's place among the run's steps, noted when it is new:
--          the worker's count from the last checkpoint; '' notes nothing (includes/steps.lua)
-- ARGV[11..] child_id  the children joined, in the order the handler gave (at least one)
-- returns  {code, value, outcomes...}  codes: REPLAYED (the condition holds: outcomes are
--          the delivered outcome json of each child in order, '' for one not ended; the
--          lease is kept), OK (parked: status waiting, value until_ms or ''), TIMEOUT (the
--          deadline passed first: value until_ms), INVALID (value: an id that is not this
--          run's child; nothing written), CANCEL (a client is cancelling the run: not
--          parked), FULL (a new step past max_waits: nothing written), LOST (fenced out:
--          nothing written)
-- events   wait {kind join, subject mode, step, until_ms, children, pending} (parked)
-- invariant: the outcomes are read and the run parked in one step, and child_ended records
--          an outcome and wakes a parked join in one step in the same slot, so no child's
--          end slips between a join's check and its park. A parked join holds no lease
--          (fence+1) and no slot (give_back); it wakes only through the delayed set.
--          A parked join is listed in KEYS[9] (removed lazily by its checker once the
--          parent is no longer waiting), so a child deleted before it ended (no outbox
--          entry ever) still reaches its parent, as child_record_gone.
-- validate-then-write: every argument and id is checked, the record, the index and the
--          outcomes read and every record and event encoded before the first write.
--- @include args
--- @include keys
--- @include events
--- @include fence
--- @include slots
--- @include park
--- @include steps

check_argc(@groups)
local owner, fence = ARGV[@owner_id], ARGV[@fence]
local run_id = run_id_arg(ARGV[@run_id], KEYS[1], KEYS[2])
local ordinal = int_arg(ARGV[@ordinal], 'ordinal', 1)
local mode = enum_arg(ARGV[@mode], 'mode', {'all', 'any', 'settled'})
local timeout_ms
if ARGV[@timeout_ms] ~= '' then
  timeout_ms = int_arg(ARGV[@timeout_ms], 'timeout_ms', 0)
end
local maxlen = int_arg(ARGV[@maxlen], 'maxlen', 0)
local max_waits = int_arg(ARGV[@max_waits], 'max_waits', 1)
local position = position_arg(ARGV[@position])
local ids, fields = {}, {}
for i = @groups, #ARGV, @ChildIdGroup do
  ids[#ids + 1] = run_id_arg(ARGV[i + @ChildIdGroup.child_id])
  fields[#fields + 1] = 'out:' .. ARGV[i + @ChildIdGroup.child_id]
end
local step = 'join:' .. ordinal

-- The outcomes delivered so far ('' for a child not ended), the children still pending,
-- and whether the join's condition holds with them. Read in slices (unpack has a stack
-- limit); an outcome is '{"status":"<status>",...' (child_ended).
local function delivered()
  local outcomes = {}
  for first = 1, #fields, 1000 do
    local got = redis.call('HMGET', KEYS[6], unpack(fields, first, math.min(first + 999, #fields)))
    for i = 1, #got do
      outcomes[first + i - 1] = got[i]
    end
  end
  local pending, ok, bad = {}, 0, 0
  local OK_PREFIX = '{"status":"succeeded"'
  for i = 1, #ids do
    local out = outcomes[i]
    if out then
      if string.sub(out, 1, #OK_PREFIX) == OK_PREFIX then
        ok = ok + 1
      else
        bad = bad + 1
      end
    else
      outcomes[i] = ''
      pending[#pending + 1] = ids[i]
    end
  end
  local done = #pending == 0 or (mode == 'all' and bad > 0) or (mode == 'any' and ok > 0)
  return outcomes, pending, done
end

local cur = redis.call('HMGET', KEYS[1], 'status', 'owner_id', 'fence')
if not holding(cur, owner, fence) then
  return {'LOST', ''}
end
for _, id in ipairs(ids) do
  if not redis.call('ZSCORE', KEYS[7], id) then
    return {'INVALID', id}
  end
end
local raw = redis.call('HGET', KEYS[3], step)
local record = raw and cjson.decode(raw)
if record and record.status == 'timed_out' then
  return {'TIMEOUT', tostring(record.until_ms)}
end

local outcomes, pending, done = delivered()
if record and record.status == 'done' then
  done = true  -- a replay answers what the first time found, with what has come since
end
if not record and not done and redis.call('HLEN', KEYS[3]) >= max_waits then
  return {'FULL', tostring(redis.call('HLEN', KEYS[3]))}
end

local now = now_ms()
local until_ms
if record then
  until_ms = record.until_ms
elseif timeout_ms then
  until_ms = now + timeout_ms
end
record = record or {kind = 'join', name = mode, step = step, until_ms = until_ms,
  started_ms = now, children = #ids}
local reply = {'REPLAYED', ''}
for i = 1, #ids do
  reply[#reply + 1] = outcomes[i]
end

-- The join is over (its condition held, or its deadline passed): its record says how,
-- and the children a parked join waited for are no longer waited for.
local function end_join(record, status, ended_ms)
  if not raw then
    note_step(KEYS[1], run_id, position, 'j|' .. step)
  end
  record.status = status
  record.ended_ms = ended_ms
  local encoded = cjson.encode(record)
  redis.call('HSET', KEYS[3], step, encoded)
  redis.call('DEL', KEYS[8])
end

-- Park the parent until child_ended finds the condition holds, or its deadline comes.
local function park_join(record, until_ms, pending, now)
  if not raw then
    note_step(KEYS[1], run_id, position, 'j|' .. step)
  end
  record.status = 'waiting'
  local record_json = cjson.encode(record)
  local data = cjson.encode({kind = 'join', subject = mode, step = step, until_ms = until_ms,
    children = #ids, pending = #pending})
  local waiting_for = cjson.encode({kind = 'join', subject = mode, step = step,
    until_ms = until_ms, since_ms = now, children = #ids, pending = #pending})
  redis.call('HSET', KEYS[3], step, record_json)
  redis.call('DEL', KEYS[8])
  for first = 1, #pending, 1000 do
    redis.call('SADD', KEYS[8], unpack(pending, first, math.min(first + 999, #pending)))
  end
  -- a joining parent holds no lease, no slot and no singleton (park_waiting)
  local k = {leases = KEYS[4], run_prefix = string.sub(KEYS[1], 1, #KEYS[1] - #run_id),
    delayed = KEYS[5]}
  park_waiting(k, KEYS[1], KEYS[2], run_id, now, data, waiting_for, until_ms, ARGV[@wake_channel], maxlen)
  redis.call('ZADD', KEYS[9], now, run_id)
end

if done then
  end_join(record, 'done', record.ended_ms or now)
  return reply
end
if until_ms and until_ms <= now then
  end_join(record, 'timed_out', now)
  return {'TIMEOUT', tostring(until_ms)}
end
if cur[1] == 'cancelling' then
  return {'CANCEL', ''}
end
park_join(record, until_ms, pending, now)
return {'OK', until_ms and tostring(until_ms) or ''}
