-- release_runs: a worker hands runs back to the queue (draining, or rate-limited).
--
-- KEYS[1]  leases       zset    id -> lease expiry ms
-- KEYS[2]  ready        list    runnable ids (FIFO)
-- KEYS[3]  run_prefix   prefix  run keys are this prefix .. id (same hash tag)
--          (a run's effects hash is derived from it too, and expires with the run)
-- KEYS[4]  events_prefix  prefix  event streams are this prefix .. id
-- KEYS[5]  idem_prefix  prefix  idempotency keys are this prefix .. key
-- ARGV[1]  owner_id     string
-- ARGV[2]  retention    string  per-status retention spec (store/retention.py)
-- ARGV[3]  maxlen       integer
-- ARGV[4]  reason       string  why the runs are released (e.g. drain)
-- ARGV[5]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- ARGV[6]  delay_ms     integer 0: at the head of the line now (drain); more: in the queue's
--          delayed set (derived from KEYS[3]) until now + delay_ms (a rate limit's token)
-- ARGV[7..] id, fence   pairs, one per released run
-- returns  a list with one code per pair, in order: OK (released, or cancelled if a
--          cancel was pending), LOST (fenced out: nothing written)
-- events   released, or cancelled
-- invariant: a released run is queued again at the head of the line with fence+1,
--          so another worker takes it at once and this owner can write nothing more;
--          with a delay it waits in `delayed` instead. Its attempt count is kept: a
--          release is not a failure.
-- validate-then-write: the numbers and pairs are checked before the first write;
--          each run is read and its event encoded before its own writes.
--- @include args
--- @include keys
--- @include events
--- @include fence
--- @include slots
--- @include lanes
--- @include family
--- @include finalize

check_argc(@groups - 1)
local k = {leases = KEYS[1], ready = KEYS[2], run_prefix = KEYS[3], events_prefix = KEYS[4],
  idem_prefix = KEYS[5]}
local owner = ARGV[@owner_id]
local retention = retention_arg(ARGV[@retention])
int_arg(ARGV[@maxlen], 'maxlen', 0)
local delay_ms = int_arg(ARGV[@delay_ms], 'delay_ms', 0)
check_groups(@groups, @LeaseGroup)
for i = @groups, #ARGV, @LeaseGroup do
  run_id_arg(ARGV[i + @LeaseGroup.id])
end
local now = now_ms()
local answers = {}
for i = @groups, #ARGV, @LeaseGroup do
  local id, fence = ARGV[i + @LeaseGroup.id], ARGV[i + @LeaseGroup.fence]
  local cur = redis.call('HMGET', KEYS[3] .. id, 'status', 'owner_id', 'fence')
  if not holding(cur, owner, fence) then
    answers[#answers + 1] = 'LOST'
  else
    local plan = release_plan(cur[1], owner, ARGV[@reason], delay_ms, now)
    release_run(k, id, plan, ARGV[@wake_channel], retention, ARGV[@maxlen], now)
    answers[#answers + 1] = 'OK'
  end
end
return answers
