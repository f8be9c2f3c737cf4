-- renew_leases: extend every lease one worker holds on one queue, in one call.
--
-- KEYS[1]  leases       zset    id -> lease expiry ms
-- KEYS[2]  run_prefix   prefix  run keys are this prefix .. id (same hash tag)
-- ARGV[1]  owner_id     string
-- ARGV[2]  lease_ttl_ms integer
-- ARGV[3..] id, fence   pairs, one per held run
-- returns  a list with one code per pair, in order: OK (renewed), CANCEL (renewed,
--          and a client asked to cancel), LOST (fenced out: stop the run, write nothing)
-- events   none
-- invariant: renewal compares owner, fence and status, never the expiry, so a late
--          renewal before any reconciler acted keeps its run; a lease only moves
--          forward in time (the new expiry is never earlier than the stored one).
-- validate-then-write: the TTL and the pairs are checked before the first write;
--          each run is read before its own writes.
--- @include args
--- @include finalize

check_argc(@groups - 1)
local owner = ARGV[@owner_id]
local ttl = int_arg(ARGV[@lease_ttl_ms], 'lease_ttl_ms', 1)
check_groups(@groups, @LeaseGroup)
local now = now_ms()
local answers = {}
-- the renewed leases (expiry, id pairs): one ZADD per thousand, not one per run
local renewed = {}
for i = @groups, #ARGV, @LeaseGroup do
  local id = ARGV[i + @LeaseGroup.id]
  local run_key = KEYS[2] .. id
  local cur = redis.call('HMGET', run_key, 'status', 'owner_id', 'fence', 'lease_expires_at')
  if (cur[1] == 'running' or cur[1] == 'cancelling') and cur[2] == owner
      and cur[3] == ARGV[i + @LeaseGroup.fence] then
    local expires = num_arg(math.max(now + ttl, tonumber(cur[4]) or 0))
    redis.call('HSET', run_key, 'lease_expires_at', expires, 'last_renewed_at', num_arg(now))
    renewed[#renewed + 1] = expires
    renewed[#renewed + 1] = id
    if cur[1] == 'cancelling' then
      answers[#answers + 1] = 'CANCEL'
    else
      answers[#answers + 1] = 'OK'
    end
  else
    answers[#answers + 1] = 'LOST'
  end
end
call_chunked('ZADD', KEYS[1], renewed)
return answers
