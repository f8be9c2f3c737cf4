-- push_bucket: an upstream answered 429; push a shared bucket forward for everyone.
--
-- KEYS[1]  bucket       string  the bucket's TAT, epoch ms (GCRA, see gcra.lua)
-- ARGV[1]  limit        integer tokens per period (>= 1)
-- ARGV[2]  period_ms    integer the period, ms (>= 1)
-- ARGV[3]  burst        integer tokens an idle bucket lets pass at once (>= 1)
-- ARGV[4]  retry_after_ms integer the upstream's Retry-After, ms (>= 0)
-- returns  {code, until_ms, now_ms}  codes: OK; until_ms is the first moment a token
--          passes again (now + retry_after_ms, or later if the bucket was already
--          further behind)
-- events   none (the reporting run's handler emits its own; a bucket has no stream)
-- invariant: after a push nobody takes a token before until_ms; the bucket then refills
--          one token per period/limit (no burst right after a 429). A push never
--          moves a bucket back in time.
-- validate-then-write: every number is checked before the one write, the last command.
--- @include args
--- @include gcra

check_argc(@PushArgs)
local limit = int_arg(ARGV[@limit], 'limit', 1)
local period_ms = int_arg(ARGV[@period_ms], 'period_ms', 1)
local burst = int_arg(ARGV[@burst], 'burst', 1)
local retry_after_ms = int_arg(ARGV[@retry_after_ms], 'retry_after_ms', 0)
local now = now_ms()
local t = period_ms / limit
local tat = gcra_push(KEYS[1], now, limit, period_ms, burst, retry_after_ms)
return {'OK', math.max(now, math.ceil(tat - t * burst + t)), now}
