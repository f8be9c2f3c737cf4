-- cancel_children: a parent's end reaches its live children of one queue (the outbox
--          delivery of 'cascade <parent>'): each is cancelled as cancel_run cancels a run.
--
-- KEYS[1]  run_prefix   prefix  run records are this prefix .. id (the children's queue)
-- KEYS[2]  events_prefix prefix event streams are this prefix .. id
-- KEYS[3]  leases       zset    id -> lease expiry ms
-- KEYS[4]  delayed      zset    id -> epoch ms it may run
-- KEYS[5]  idem_prefix  prefix  idempotency keys are this prefix .. key
-- ARGV[1]  parent_id    string  the parent whose end this is
-- ARGV[2]  reason       string  parent_cancelled | parent_ended
-- ARGV[3]  retention    string  per-status retention spec (store/retention.py)
-- ARGV[4]  maxlen       integer approximate cap of each event stream
-- ARGV[5]  unborn_ms    integer how long a tombstone keeps a child not yet created from
--          ever being created (`<tag>:unborn:<id>`)
-- ARGV[6..] child_id  of this queue, each the parent's child
-- returns  {code, statuses...}  code OK; one status per id afterwards: cancelled (ended
--          now), cancelling (held: its owner, or the reconciler if the owner is dead,
--          writes cancelled), unborn (no record yet: tombstoned), or the terminal status it
--          had (nothing written for it); INVALID (an id whose record names another parent:
--          nothing written for any)
-- events   cancel_requested (held children), cancelled (children nobody holds), each with
--          {reason, parent_id}
-- invariant: each child gets exactly one terminal event however often the cascade is
--          delivered: a child already ended or being cancelled is left alone, a held one
--          is only asked (fenced like any cancel), and a child whose create has not come
--          yet is tombstoned so a stale parent worker cannot bring it to life (create_run).
-- validate-then-write: every argument and id is checked and every child's record read
--          before the first write; afterwards only strings and numbers are encoded.
--- @include args
--- @include keys
--- @include events
--- @include slots
--- @include lanes
--- @include family
--- @include finalize

check_argc(@groups)
local parent_id = run_id_arg(ARGV[@parent_id])
local reason = enum_arg(ARGV[@reason], 'reason', {'parent_cancelled', 'parent_ended'})
local retention = retention_arg(ARGV[@retention])
int_arg(ARGV[@maxlen], 'maxlen', 0)
local unborn_ms = int_arg(ARGV[@unborn_ms], 'unborn_ms', 1)
local ids, cur = {}, {}
for i = @groups, #ARGV, @ChildIdGroup do
  local id = run_id_arg(ARGV[i + @ChildIdGroup.child_id])
  ids[#ids + 1] = id
  cur[#cur + 1] = redis.call('HMGET', KEYS[1] .. id, 'status', 'fence', 'parent_id')
  local parent = cur[#cur][3]
  if cur[#cur][1] and parent ~= parent_id then
    return {'INVALID', id}
  end
end

local tag = string.sub(KEYS[1], 1, -5)
local k = {leases = KEYS[3], run_prefix = KEYS[1], events_prefix = KEYS[2],
  idem_prefix = KEYS[5]}
local now = now_ms()
local reply = {'OK'}
for i, id in ipairs(ids) do
  local status = cur[i][1]
  if not status then
    redis.call('SET', tag .. 'unborn:' .. id, parent_id, 'PX', unborn_ms)
    status = 'unborn'
  elseif status == 'running' then
    request_cancel(tag, id, now, {reason = reason, parent_id = parent_id}, ARGV[@maxlen])
    status = 'cancelling'
  elseif status ~= 'cancelling' and not TERMINAL[status] then
    local data = cjson.encode({reason = reason, parent_id = parent_id,
      previous_status = status})
    redis.call('HSET', KEYS[1] .. id, 'cancel_requested_at', now)
    redis.call('ZREM', KEYS[4], id)
    finalize(k, id, 'cancelled', cur[i][2], now, {}, data, retention, ARGV[@maxlen])
    status = 'cancelled'
  end
  reply[#reply + 1] = status
end
return reply
