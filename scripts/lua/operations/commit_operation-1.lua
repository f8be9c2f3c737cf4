-- commit_operation: a bulk operation's driver saves one step's progress, holding its lease.
--
-- KEYS[1]  operation    hash    the operation's record (status, filter, counters, driver)
-- ARGV[1]  operation_id string  the id KEYS[1] ends with
-- ARGV[2]  driver       string  the API process driving it (a random token per process)
-- ARGV[3]  lease_ms     integer how long the driver's claim lasts from now (Redis clock)
-- ARGV[4]  retention_ms integer how long the record is kept from now
-- ARGV[5]  fields       json    object of the fields to set: strings and finite numbers
-- ARGV[6]  force        0 | 1   1: write whoever drives it (a cancel); 0: only as its driver
-- returns  {code, detail}  codes: OK (written; the driver's lease runs lease_ms from now),
--          NOT_FOUND (no such operation, or its record expired), INVALID (it is no longer
--          running: detail is its status), CONFLICT (another driver's lease is live:
--          detail is that driver)
-- events   none (an operation is not a run: its progress is its record)
-- invariant: at most one live driver writes an operation's progress at a time; a
--          driver whose lease ran out keeps it when nobody else took it (a late save is
--          not thrown away), and loses it once another driver has. Setting status away
--          from running ends the lease (driver cleared) and stamps finished_at.
-- validate-then-write: the arguments are checked, the fields decoded and each value's
--          type and finiteness checked, and the record's status and driver read before
--          the first HSET.
--- @include args

-- fields one save may set: an operation's record has a couple of dozen
local MAX_FIELDS = 64

check_argc(@CommitOperationArgs)
local op_id, driver = ARGV[@operation_id], ARGV[@driver]
if type(op_id) ~= 'string' or not string.match(op_id, '^[0-9A-Z]+$')
    or string.sub(KEYS[1], -(#op_id + 1)) ~= ':' .. op_id then
  bad_argument('operation_id', op_id)
end
if driver == '' then
  bad_argument('driver', driver)
end
local lease_ms = int_arg(ARGV[@lease_ms], 'lease_ms', 1)
local retention_ms = int_arg(ARGV[@retention_ms], 'retention_ms', 1)
local fields = json_arg(ARGV[@fields], 'fields')
enum_arg(ARGV[@force], 'force', {'0', '1'})
if type(fields) ~= 'table' then
  bad_argument('fields (not an object)', ARGV[@fields])
end
local flat = {}
for name, value in pairs(fields) do
  local kind = type(value)
  if type(name) ~= 'string' or (kind ~= 'string' and kind ~= 'number')
      or (kind == 'number' and (value ~= value or value == math.huge or value == -math.huge))
      or name == 'driver' or name == 'driver_expires_ms' or name == 'finished_at' then
    bad_argument('fields (strings and finite numbers only, not driver/finished_at)', name)
  end
  flat[#flat + 1] = name
  flat[#flat + 1] = kind == 'number' and string.format('%.17g', value) or value
end

if #flat > 2 * MAX_FIELDS then
  bad_argument('fields (at most ' .. MAX_FIELDS .. ')', #flat / 2)
end
if fields.status ~= nil then
  enum_arg(fields.status, 'fields.status', {'running', 'done', 'cancelled'})
end

local cur = redis.call('HMGET', KEYS[1], 'status', 'driver', 'driver_expires_ms')
if not cur[1] then
  return {'NOT_FOUND', ''}
end
if cur[1] ~= 'running' then
  return {'INVALID', cur[1]}
end
local now = now_ms()
if ARGV[@force] == '0' and cur[2] and cur[2] ~= '' and cur[2] ~= driver
    and (tonumber(cur[3]) or 0) > now then
  return {'CONFLICT', cur[2]}
end
local ending = fields.status ~= nil and fields.status ~= 'running'

if #flat > 0 then
  redis.call('HSET', KEYS[1], unpack(flat))
end
if ending then
  redis.call('HSET', KEYS[1], 'driver', '', 'driver_expires_ms', 0, 'finished_at', now,
    'updated_at', now)
else
  redis.call('HSET', KEYS[1], 'driver', driver, 'driver_expires_ms', now + lease_ms,
    'updated_at', now)
end
redis.call('PEXPIRE', KEYS[1], retention_ms)
return {'OK', ''}
