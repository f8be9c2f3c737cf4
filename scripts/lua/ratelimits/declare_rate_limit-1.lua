-- declare_rate_limit: an operator declares (or changes) a rate-limit key.
--
-- KEYS[1]  rate_limits  hash    declared key (or template, `crm:{tenant}`) -> spec JSON
--          (a single cross-queue key, so the script still runs on a cluster)
-- ARGV[1]  name         string  the key, already checked against the key pattern
-- ARGV[2]  spec         json    {"limit", "period_s", "burst"}, encoded by the store
-- ARGV[3]  max_keys     integer most keys the hash may hold after a declaration
-- returns  {code, count}  codes: OK (declared now), REPLAYED (it was declared already:
--          its spec is replaced), CONFLICT (max_keys are declared: nothing written);
--          count is how many are declared afterwards
-- events   none (rate-limit keys have no event stream)
-- invariant: a declaration never takes the hash past max_keys, however many callers
--          race; changing a declared key's spec never counts against the bound.
-- validate-then-write: the name, spec and bound are checked and the hash read before
--          its one write, the last command.
--- @include args

check_argc(@DeclareRateLimitArgs)
if ARGV[@name] == '' then
  bad_argument('name', ARGV[@name])
end
local spec = json_arg(ARGV[@spec], 'spec')
if type(spec) ~= 'table' then
  bad_argument('spec', ARGV[@spec])
end
local max_keys = int_arg(ARGV[@max_keys], 'max_keys', 0)
local exists = redis.call('HEXISTS', KEYS[1], ARGV[@name]) == 1
local count = redis.call('HLEN', KEYS[1])
if not exists and count >= max_keys then
  return {'CONFLICT', count}
end
redis.call('HSET', KEYS[1], ARGV[@name], ARGV[@spec])
if exists then
  return {'REPLAYED', count}
end
return {'OK', count + 1}
