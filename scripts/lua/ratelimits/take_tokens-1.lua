-- take_tokens: a handler takes (or reserves) tokens from a shared rate-limit bucket.
--
-- KEYS[1]  bucket       string  the bucket's TAT, epoch ms (GCRA, see gcra.lua); its own
--          hash tag, so one bucket is shared by every queue and worker
-- ARGV[1]  limit        integer tokens per period (>= 1)
-- ARGV[2]  period_ms    integer the period, ms (>= 1)
-- ARGV[3]  burst        integer tokens an idle bucket lets pass at once (>= 1)
-- ARGV[4]  cost         integer tokens to take (0: read the bucket, take nothing, and
--          answer OK with when one token would pass); at most burst, since a larger
--          cost could never pass
-- ARGV[5]  max_wait_ms  integer reserve tokens at most this far ahead (0: only now)
-- returns  {code, wait_ms, now_ms, remaining}  codes: OK (taken: usable after wait_ms,
--          0 for at once; the reservation is spent whether or not the caller uses
--          it), LIMITED (the wait would pass max_wait_ms: nothing taken, wait_ms is
--          when this cost would pass); remaining is how many tokens an immediate take
--          would still find afterwards
-- events   none (the caller emits the run's `wait` event: a bucket has no stream)
-- invariant: over any window of W ms the tokens taken from one bucket never exceed
--          burst + floor(W * limit / period_ms), however many callers race: every
--          take is one atomic read-check-commit of the TAT by the Redis clock.
-- validate-then-write: every number is checked before the one write (the SET of the
--          new TAT), the last command.
--- @include args
--- @include gcra

check_argc(@TakeArgs)
local limit = int_arg(ARGV[@limit], 'limit', 1)
local period_ms = int_arg(ARGV[@period_ms], 'period_ms', 1)
local burst = int_arg(ARGV[@burst], 'burst', 1)
local cost = int_arg(ARGV[@cost], 'cost', 0)
if cost > burst then
  bad_argument('cost (more than the burst: it could never pass)', cost)
end
local max_wait_ms = int_arg(ARGV[@max_wait_ms], 'max_wait_ms', 0)
local now = now_ms()
local t = period_ms / limit
local allow_at, new_tat = gcra_check(KEYS[1], now, limit, period_ms, burst, math.max(cost, 1))
local wait_ms = math.max(0, math.ceil(allow_at - now))
if cost == 0 then
  new_tat = gcra_tat(KEYS[1], now)
elseif wait_ms > max_wait_ms then
  return {'LIMITED', wait_ms, now, 0}
else
  gcra_commit(KEYS[1], now, new_tat)
end
local remaining = math.max(0, math.floor((now + t * burst - new_tat) / t))
return {'OK', wait_ms, now, remaining}
