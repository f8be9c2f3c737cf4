-- resume_run: a person resumes a run the watchdog escalated (waiting_human).
--
-- KEYS[1]  run          hash    the run's record
-- KEYS[2]  events       stream  the run's events
-- KEYS[3]  ready        list    runnable ids (FIFO)
-- ARGV[1]  run_id       string
-- ARGV[2]  resume_input json    what the person says, handed to ctx.resume_input
-- ARGV[3]  maxlen       integer approximate cap of the event stream
-- ARGV[4]  wake_channel string  pub/sub channel idle workers of the queue listen on
-- returns  {code, status}  codes: OK (queued again), NOT_FOUND, INVALID (the run is not
--          waiting for a person: status says what it is)
-- events   resumed
-- invariant: only a waiting_human run can be resumed; it is queued again at the head
--          of the line with fence+1 and keeps its attempt, checkpoint and effects. When
--          it waits on ctx.ask_human (park_run), the input is recorded as the answer of
--          that question (in its waits hash, derived from KEYS[1]), in the same step.
-- validate-then-write: the input is decoded and the event encoded (cjson refuses to
--          encode NaN, Infinity or nesting past 1000 levels), the stream cap checked,
--          the record and the question's wait read and its answer encoded before the
--          fence moves.
--- @include args
--- @include keys
--- @include events
--- @include slots
--- @include lanes

check_argc(@ResumeArgs)
run_id_arg(ARGV[@run_id], KEYS[1], KEYS[2])
int_arg(ARGV[@maxlen], 'maxlen', 0)
local data = cjson.encode({input = json_arg(ARGV[@resume_input], 'resume_input')})
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  return {'NOT_FOUND', ''}
end
if status ~= 'waiting_human' then
  return {'INVALID', status}
end
local now = now_ms()
-- a question the handler asked (ctx.ask_human, park_run): the input is its answer,
-- recorded on the question's step so the handler's replay of it returns the answer
local waits_key, asked_json
local asked = redis.call('HGET', KEYS[1], 'waiting_for')
if asked then
  local wait = cjson.decode(asked)
  waits_key = waits_key_of(string.sub(KEYS[1], 1, #KEYS[1] - #ARGV[@run_id]), ARGV[@run_id])
  local raw = wait.kind == 'human' and redis.call('HGET', waits_key, wait.step)
  local record = raw and cjson.decode(raw)
  if record and record.status == 'waiting' then
    record.status, record.payload, record.ended_ms = 'done', ARGV[@resume_input], now
    asked_json = {wait.step, cjson.encode(record)}
  end
end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('HSET', KEYS[1], 'status', 'queued', 'resume_input', ARGV[@resume_input], 'resumed_at', now)
if asked then
  redis.call('HDEL', KEYS[1], 'waiting_for')
end
if asked_json then
  redis.call('HSET', waits_key, asked_json[1], asked_json[2])
end
redis.call('ZREM', parked_of(string.sub(KEYS[1], 1, #KEYS[1] - #ARGV[@run_id])), ARGV[@run_id])
emit(KEYS[1], KEYS[2], 'resumed', fence, now, data, ARGV[@maxlen])
make_ready(KEYS[3], ARGV[@wake_channel], ARGV[@run_id], true)
return {'OK', 'queued'}
