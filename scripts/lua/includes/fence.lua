-- fence: whether a worker still holds a run (owner and fence): the check every fenced
-- write makes.
-- Builds on: nothing.

-- Does (owner, fence) still hold this run? The check every worker write makes. cur:
-- the run's status, owner_id and fence, as a script that reads more of the run at once
-- already has them (holding); holds reads them.
local function holding(cur, owner, fence)
  return (cur[1] == 'running' or cur[1] == 'cancelling')
    and cur[2] == owner and cur[3] == fence
end

local function holds(run_key, owner, fence)
  return holding(redis.call('HMGET', run_key, 'status', 'owner_id', 'fence'), owner, fence)
end
