-- take_outbox: a deliverer takes the queue's due outbox entries for a while (a visibility
--          timeout): one deliverer works on an entry at a time, and one that dies leaves
--          it to the next.
--
-- KEYS[1]  outbox       zset    '<kind> <run id>' -> epoch ms it is due (its end, or when the
--                               last taker's hold runs out)
-- ARGV[1]  max_entries  integer how many to take at most
-- ARGV[2]  hold_ms      integer how long the taken entries are not handed to anyone else
-- ARGV[3]  entry        string  one entry to take whatever its time ('' for the due ones): the
--          run the caller just ended (its at-once delivery)
-- returns  {code, entries...}  code OK; the entries taken (each due again after hold_ms,
--          until the deliverer removes it)
-- events   none
-- invariant: an entry leaves the outbox only when its delivery is written (the deliverer's
--          ZREM), so an end reaches its other slot at least once; every delivery script is
--          idempotent, so at least once is exactly once in effect.
-- validate-then-write: the numbers are checked and the entries read before the first ZADD.
--- @include args

check_argc(@TakeOutboxArgs)
local max_entries = int_arg(ARGV[@max_entries], 'max_entries', 1)
local hold_ms = int_arg(ARGV[@hold_ms], 'hold_ms', 1)
local now = now_ms()
local taken
if ARGV[@entry] ~= '' then
  taken = redis.call('ZSCORE', KEYS[1], ARGV[@entry]) and {ARGV[@entry]} or {}
else
  taken = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, max_entries)
end
local reply = {'OK'}
for _, entry in ipairs(taken) do
  redis.call('ZADD', KEYS[1], 'XX', now + hold_ms, entry)
  reply[#reply + 1] = entry
end
return reply
