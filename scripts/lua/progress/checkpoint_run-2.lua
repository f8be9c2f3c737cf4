-- checkpoint_run: a worker saves its handler's state, so a later attempt resumes from it.
--
-- KEYS[1]  run          hash    the run's record (fields state, effect_seq, checkpoints)
-- KEYS[2]  events       stream  the run's events
-- ARGV[1]  owner_id     string
-- ARGV[2]  fence        integer
-- ARGV[3]  state        json    the handler's state (its size is bounded by the worker)
-- ARGV[4]  effect_seq   json    effect calls so far per name, or '' to keep the stored ones
-- ARGV[5]  maxlen       integer approximate cap of the event stream
-- returns  {code, seq}  codes: OK (seq: how many checkpoints the run has written),
--          LOST (fenced out: nothing written)
-- events   checkpoint {seq, size_bytes}
-- invariant: only the current holder replaces the state, and the state and the effect
--          ordinals it was taken at are written together, so an attempt resuming from
--          it numbers its next effects exactly as the attempt that wrote it did.
-- validate-then-write: the effect ordinals are decoded, the stream cap checked, the
--          holder and checkpoint count read and the event encoded before the first HSET.
--- @include args
--- @include events
--- @include fence

check_argc(@CheckpointArgs)
int_arg(ARGV[@maxlen], 'maxlen', 0)
if ARGV[@effect_seq] ~= '' then
  json_arg(ARGV[@effect_seq], 'effect_seq')
end
if not holds(KEYS[1], ARGV[@owner_id], ARGV[@fence]) then
  return {'LOST', 0}
end
local now = now_ms()
local seq = (tonumber(redis.call('HGET', KEYS[1], 'checkpoints')) or 0) + 1
local data = cjson.encode({seq = seq, size_bytes = #ARGV[@state]})
redis.call('HSET', KEYS[1], 'checkpoints', seq, 'state', ARGV[@state], 'checkpointed_at', now)
if ARGV[@effect_seq] ~= '' then
  redis.call('HSET', KEYS[1], 'effect_seq', ARGV[@effect_seq])
end
emit(KEYS[1], KEYS[2], 'checkpoint', ARGV[@fence], now, data, ARGV[@maxlen])
return {'OK', seq}
