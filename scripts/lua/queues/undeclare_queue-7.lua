-- undeclare_queue: an operator undeclares a queue that holds no runs.
--
-- KEYS[1]  queues       set     every declared queue name
-- KEYS[2]  ready        list    the queue's runnable ids
-- KEYS[3]  delayed      zset    the queue's ids waiting for their retry time
-- KEYS[4]  leases       zset    the queue's held leases
-- KEYS[5]  parked       zset    the queue's waiting_human / reconciliation_required runs
-- KEYS[6]  unclaimed    zset    the queue's queued runs by when they expire unclaimed
-- KEYS[7]  runs         zset    every run record the queue keeps (the listing index)
-- ARGV[1]  name         string  the queue, already checked against the queue-name pattern
-- returns  {code, ready, delayed, leased, parked, unclaimed, stored}  codes: OK
--          (undeclared now), NOT_FOUND (it was not declared: nothing written),
--          CONFLICT (it still holds runs: nothing written); the counts are what
--          each index held when the script looked
-- events   none (queues have no event stream)
-- invariant: a queue leaves the declared set only while every index of it is
--          empty, so no run is left on an undeclared queue by this script (a
--          create racing it re-declares the queue after its own write; see
--          app/store/queues.py). KEYS[1] is in another slot than KEYS[2..7]: on
--          a cluster the store does these steps without this script.
-- validate-then-write: the name is checked, membership and every index read
--          before the one write, the last command.
--- @include args

check_argc(@UndeclareArgs)
if ARGV[@name] == '' then
  bad_argument('name', ARGV[@name])
end
local counts = {
  redis.call('LLEN', KEYS[2]),
  redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]),
  redis.call('ZCARD', KEYS[5]),
  redis.call('ZCARD', KEYS[6]),
  redis.call('ZCARD', KEYS[7]),
}
local code = 'OK'
if redis.call('SISMEMBER', KEYS[1], ARGV[@name]) == 0 then
  code = 'NOT_FOUND'
else
  for _, count in ipairs(counts) do
    if count > 0 then
      code = 'CONFLICT'
    end
  end
end
if code == 'OK' then
  redis.call('SREM', KEYS[1], ARGV[@name])
end
return {code, counts[1], counts[2], counts[3], counts[4], counts[5], counts[6]}
