-- spawn_child: a handler starts a child run (ctx.spawn): the parent records, fenced, which
--          child its spawn step names, before the child is created in the child's slot.
--
-- KEYS[1]  run          hash    the parent's record (marked `spawned`: finalize then looks
--                               for its children)
-- KEYS[2]  children     zset    the parent's children index: child id -> created_at ms
-- KEYS[3]  family       hash    the parent's family: 'spawn:<ordinal>' -> child id,
--                               'detach:<child id>' -> '1' for a child that outlives its
--                               parent's end, 'out:<child id>' -> the child's outcome json
-- ARGV[1]  owner_id     string
-- ARGV[2]  fence        integer
-- ARGV[3]  run_id       string  the parent
-- ARGV[4]  ordinal      integer this spawn's place among the run's spawns (from 1)
-- ARGV[5]  child_id     string  the id the new child gets (`<its queue>.<ULID>`), used only
--          the first time the step is met: a replay answers the recorded one
-- ARGV[6]  on_parent_end string cancel | detach: what the parent's end (other than a
--          cancel, which always reaches its children) does to this child while it lives
-- ARGV[7]  max_children integer how many children the run may have
--          (LEASEHOLD_MAX_CHILDREN_PER_RUN)
-- ARGV[8]  max_depth    integer the deepest a run may sit (LEASEHOLD_MAX_RUN_DEPTH): a child
--          deeper than it is refused
-- ARGV[9]  position     integer the step's place among the run's steps, noted when it is new:
--          the worker's count from the last checkpoint; '' notes nothing (includes/steps.lua)
-- returns  {code, child_id, root_id, depth, concurrency_key, traceparent, ended}  codes: OK
--          (recorded: create the child with this id, root, depth), REPLAYED (the step was
--          recorded before: the same child; ended is '1' when its outcome came already,
--          so it certainly exists or existed), FULL (max_children reached: nothing
--          written, child_id is the count), LIMITED (the child would sit deeper than
--          max_depth: nothing written, depth is its depth), CANCEL (a client is
--          cancelling the parent: nothing written), LOST (fenced out: nothing written)
-- events   none (the child's own `created` event carries its parent_id)
-- invariant: one spawn step of a run names one child, for ever: a parent taken over after
--          spawning (even between this step and the child's create) gets the same child
--          id back, and create_run of an existing id creates nothing, so no second child
--          exists. A child is in its parent's index before it exists, so a cascade never
--          misses one (cancel_children leaves a tombstone for a child not yet created).
-- validate-then-write: every argument is checked and the record, the step and the counts
--          read before the first write.
--- @include args
--- @include keys
--- @include steps

check_argc(@SpawnArgs)
local owner, fence = ARGV[@owner_id], ARGV[@fence]
local run_id = run_id_arg(ARGV[@run_id], KEYS[1])
local ordinal = int_arg(ARGV[@ordinal], 'ordinal', 1)
local child_id = run_id_arg(ARGV[@child_id])
if not string.match(child_id, '^[A-Za-z0-9_%-]+%.[0-9A-Z]+$') or child_id == run_id then
  bad_argument('child_id', child_id)
end
local policy = enum_arg(ARGV[@on_parent_end], 'on_parent_end', {'cancel', 'detach'})
local max_children = int_arg(ARGV[@max_children], 'max_children', 0)
local max_depth = int_arg(ARGV[@max_depth], 'max_depth', 0)
local position = position_arg(ARGV[@position])
local step = 'spawn:' .. ordinal

local cur = redis.call('HMGET', KEYS[1], 'status', 'owner_id', 'fence', 'root_id', 'depth',
  'ckey', 'traceparent')
if not ((cur[1] == 'running' or cur[1] == 'cancelling') and cur[2] == owner
    and cur[3] == fence) then
  return {'LOST', '', '', '', '', '', ''}
end
local root = (cur[4] and cur[4] ~= '') and cur[4] or run_id
local depth = (tonumber(cur[5]) or 0) + 1
local ckey, traceparent = cur[6] or '', cur[7] or ''
local recorded = redis.call('HGET', KEYS[3], step)
if recorded then
  local ended = redis.call('HEXISTS', KEYS[3], 'out:' .. recorded) == 1 and '1' or ''
  return {'REPLAYED', recorded, root, depth, ckey, traceparent, ended}
end
if cur[1] == 'cancelling' then
  return {'CANCEL', '', '', '', '', '', ''}
end
if depth > max_depth then
  return {'LIMITED', '', root, depth, '', '', ''}
end
local count = redis.call('ZCARD', KEYS[2])
if count >= max_children then
  return {'FULL', tostring(count), root, depth, '', '', ''}
end

local now = now_ms()
note_step(KEYS[1], run_id, position, 's|' .. step)
redis.call('HSET', KEYS[3], step, child_id)
if policy == 'detach' then
  redis.call('HSET', KEYS[3], 'detach:' .. child_id, '1')
end
redis.call('ZADD', KEYS[2], now, child_id)
-- finalize's note_family_end looks for children only on a run marked so
redis.call('HSET', KEYS[1], 'spawned', 1)
return {'OK', child_id, root, depth, ckey, traceparent, ''}
