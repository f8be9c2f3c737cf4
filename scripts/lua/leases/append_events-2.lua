-- append_events: a worker appends a batch of handler events to its run, in order.
--
-- KEYS[1]  run          hash    the run's record
-- KEYS[2]  events       stream  the run's events
-- ARGV[1]  owner_id     string
-- ARGV[2]  fence        integer
-- ARGV[3]  maxlen       integer approximate cap of the event stream
-- ARGV[4..] type, data  pairs (data is json), appended in this order
-- returns  {code, last_event_id}  codes: OK, LOST (fenced out: nothing was written)
-- events   whatever the handler emitted (progress, token, ...)
-- invariant: only the current holder (owner and fence) can add to a run's stream.
-- validate-then-write: the stream cap and the type/data pairs are checked, and the
--          holder looked up, before the first XADD.
--- @include args
--- @include events
--- @include fence

check_argc(@groups - 1)
int_arg(ARGV[@maxlen], 'maxlen', 0)
check_groups(@groups, @EventPair)
if not holds(KEYS[1], ARGV[@owner_id], ARGV[@fence]) then
  return {'LOST', ''}
end
local now = now_ms()
local last = ''
for i = @groups, #ARGV, @EventPair do
  last = xadd_event(KEYS[2], ARGV[i + @EventPair.type], ARGV[@fence], now,
    ARGV[i + @EventPair.data], ARGV[@maxlen])
end
redis.call('HSET', KEYS[1], 'last_event_id', last)
return {'OK', last}
