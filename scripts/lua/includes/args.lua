-- args: arguments checked before any write (validate, then write), and the Redis clock.
-- Builds on: nothing.

-- Validate, then write. Redis never rolls a script back: an error raised after a
-- write leaves whatever was written so far. So every script decodes, encodes,
-- looks up and checks everything it needs before its first write, and these
-- helpers raise (an error reply, nothing written yet) on an argument that would
-- make a later command fail.
local function bad_argument(what, value)
  error(redis.error_reply('ERR leasehold: bad argument ' .. what .. ': '
    .. string.sub(tostring(value), 1, 80)))
end

-- An integer argument as Redis commands take it (XADD MAXLEN, PEXPIRE, ZADD):
-- decimal digits only, no exponent, sign or fraction, at most 15 digits (exact
-- in a Lua number). min: the smallest value allowed. A value already proven in this
-- script call is not matched again (a batch's runs repeat the same few: attempts,
-- time-to-live, priority), only held against its own min.
local proven_ints = {}
local function int_arg(value, what, min)
  local n = proven_ints[value]
  if not n then
    if type(value) ~= 'string' or not string.match(value, '^%-?%d+$') or #value > 16 then
      bad_argument(what, value)
    end
    n = tonumber(value)
    proven_ints[value] = n
  end
  if min and n < min then
    bad_argument(what, value)
  end
  return n
end

-- One of a few allowed strings.
local function enum_arg(value, what, allowed)
  for _, candidate in ipairs(allowed) do
    if value == candidate then
      return value
    end
  end
  bad_argument(what, value)
end

-- Decode a JSON argument, and prove it can be encoded again: cjson decodes NaN,
-- Infinity and 1e400 but refuses to encode them, and refuses nesting deeper than
-- 1000 levels, so a value that passes here cannot make a later encode fail.
local function json_arg(raw, what)
  local decoded, value = pcall(cjson.decode, raw)
  if not decoded or not pcall(cjson.encode, value) then
    bad_argument(what, raw)
  end
  return value
end

-- A run id as keys are built from it: no ':' (store/keys.py relies on it), and,
-- when given, the run and events keys end with it, so a derived key (the queue's
-- activity stream, the effects hash) is the run's own.
local function run_id_arg(run_id, run_key, events_key)
  -- a plain find, not the pattern '^[^:]+$': same answer, a tenth of the work per id
  if type(run_id) ~= 'string' or run_id == '' or string.find(run_id, ':', 1, true) then
    bad_argument('run_id', run_id)
  end
  local run_end, events_end = ':run:' .. run_id, ':events:' .. run_id
  if (run_key and string.sub(run_key, -#run_end) ~= run_end)
      or (events_key and string.sub(events_key, -#events_end) ~= events_end) then
    bad_argument('run_id (not the one its keys name)', run_id)
  end
  return run_id
end

-- At least n ARGV values: a missing one would reach a command as nil (an error)
-- after the writes before it.
local function check_argc(n)
  if #ARGV < n then
    bad_argument('count of ARGV (at least ' .. n .. ')', #ARGV)
  end
end

-- ARGV from index `first` on, in groups of `size`: refuse a ragged tail, which
-- would hand a nil to a command after the groups before it were written.
local function check_groups(first, size)
  if (#ARGV - first + 1) % size ~= 0 then
    bad_argument('groups of ' .. size .. ' from ARGV[' .. first .. ']', #ARGV - first + 1)
  end
end

-- The one clock every lease decision uses: the Redis server's, in epoch ms.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A number as redis.call would send it (Redis 7.0 formats every number argument with
-- snprintf "%.17g", a few hundred ns each): formatted once per script call and value,
-- so the same time, expiry or fence written to many fields and runs costs one
-- format. A string passes as it is.
local formatted = {}
local function num_arg(value)
  if type(value) ~= 'number' then
    return value
  end
  local known = formatted[value]
  if not known then
    known = string.format('%.17g', value)
    formatted[value] = known
  end
  return known
end
