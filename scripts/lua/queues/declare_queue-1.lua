-- declare_queue: an operator declares a queue that runs may be created on.
--
-- KEYS[1]  queues       set     every declared queue name (the one cross-queue key
--          a script touches: a single key, so the script still runs on a cluster)
-- ARGV[1]  name         string  the queue, already checked against the queue-name pattern
-- ARGV[2]  max_queues   integer most names the set may hold after a declaration
-- returns  {code, count}  codes: OK (declared now), REPLAYED (it was declared
--          already: nothing written), CONFLICT (max_queues are declared: nothing
--          written); count is how many are declared afterwards
-- events   none (queues have no event stream)
-- invariant: a declaration never takes the set past max_queues, however many
--          callers race; declaring a declared queue changes nothing.
-- validate-then-write: the name and the bound are checked and the set read before
--          its one write, the last command.
--- @include args

check_argc(@DeclareArgs)
if ARGV[@name] == '' then
  bad_argument('name', ARGV[@name])
end
local max_queues = int_arg(ARGV[@max_queues], 'max_queues', 0)
if redis.call('SISMEMBER', KEYS[1], ARGV[@name]) == 1 then
  return {'REPLAYED', redis.call('SCARD', KEYS[1])}
end
local count = redis.call('SCARD', KEYS[1])
if count >= max_queues then
  return {'CONFLICT', count}
end
redis.call('SADD', KEYS[1], ARGV[@name])
return {'OK', count + 1}
