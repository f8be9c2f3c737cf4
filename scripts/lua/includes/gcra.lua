-- gcra: rate limits: GCRA buckets (theoretical arrival times) and the gate a run passes
-- before it is claimed.
-- Builds on: args, keys, events.

-- Rate limits: GCRA (the generic cell rate algorithm) over one string key per bucket
-- holding its TAT, the theoretical arrival time in epoch ms (a float). A bucket is
-- declared with limit L per period P ms and burst B >= 1 (store/ratelimits.py):
-- the emission interval is T = P / L and the tolerance tau = T * B, so an idle bucket
-- lets B tokens pass at once and then one every T; over any window of W ms at most
-- B + floor(W / T) tokens pass (limit + burst over one period). The key expires when
-- its TAT is past: an absent key is a full bucket. The clock is always now_ms().
--
-- The signatures the transition scripts share (claim_runs gates a run's start with
-- rate_gate; take_tokens and push_bucket serve handlers):
--   gcra_check(key, now, limit, period_ms, burst, cost) -> allow_at, new_tat
--       reads only. The cost may pass at allow_at (passes now when allow_at <= now);
--       taking it means gcra_commit(key, now, new_tat). cost <= burst (else it never
--       passes: callers refuse such a cost before they get here).
--   gcra_commit(key, now, new_tat)           the one write: SET key new_tat PX ...
--   gcra_push(key, now, limit, period_ms, burst, retry_after_ms) -> tat
--       an upstream said 429, Retry-After R: TAT := max(TAT, now + R + tau - T), so
--       nobody passes before now + R and the bucket then refills one token per T.
--   rate_gate(run_key, run_prefix, now) -> eligible_ms, bucket
--       see below.
local function gcra_tat(key, now)
  local tat = tonumber(redis.call('GET', key) or '')
  if not tat or tat < now then
    return now
  end
  return tat
end

local function gcra_check(key, now, limit, period_ms, burst, cost)
  local t = period_ms / limit
  local new_tat = gcra_tat(key, now) + t * cost
  return new_tat - t * burst, new_tat
end

local function gcra_commit(key, now, new_tat)
  if new_tat > now then
    redis.call('SET', key, string.format('%.17g', new_tat), 'PX', math.ceil(new_tat - now))
  end
end

local function gcra_push(key, now, limit, period_ms, burst, retry_after_ms)
  local t = period_ms / limit
  local tat = math.max(gcra_tat(key, now), now + retry_after_ms + t * burst - t)
  gcra_commit(key, now, tat)
  return tat
end

-- A run's `rate_limits` argument (create_run): a JSON list of at most 8
-- [bucket, limit, period_ms, burst, cost], each number an integer as int_arg takes it
-- (limit, period_ms, burst >= 1; 0 <= cost <= burst), so rate_gate never meets a bad one.
local function rate_limits_arg(raw)
  local specs = json_arg(raw, 'rate_limits')
  if type(specs) ~= 'table' or #specs > 8 then
    bad_argument('rate_limits', raw)
  end
  for _, spec in ipairs(specs) do
    if type(spec) ~= 'table' or #spec ~= 5 or type(spec[1]) ~= 'string'
        or not string.match(spec[1], '^[%w_.:%-]+$') then
      bad_argument('rate_limits', raw)
    end
    for i = 2, 5 do
      if type(spec[i]) ~= 'number' or spec[i] ~= math.floor(spec[i]) or spec[i] > 1e15
          or spec[i] < (i == 5 and 0 or 1) then
        bad_argument('rate_limits', raw)
      end
    end
    if spec[5] > spec[4] then
      bad_argument('rate_limits (a cost above its burst never passes)', raw)
    end
  end
  return specs
end

-- The start gate of one run about to be claimed. The run's `rate_limits` field (JSON,
-- written by create_run from declarations the API resolved) lists
-- [bucket, limit, period_ms, burst, cost] per bucket it names.
-- Returns 0 (and '') when the run may start now: its tokens are taken in every bucket,
-- here, at its start, so over any window the starts of a bucket never pass
-- limit + burst, however late a worker claims. Otherwise returns the epoch ms at which
-- it may start and the bucket that holds it back: the caller must ZADD it to the queue's
-- delayed set with that score and write nothing else for it. That time is a *slot* in
-- each bucket's schedule (`<bucket>:next`, the first free slot): held-back runs line up
-- one emission interval apart, so N of them get N staggered times (no herd, no spinning
-- claim), and a new run waits behind those already in line (FIFO). A run claimed at or
-- after its slot (`rate_slot_at`) only checks the bucket; if a late claim finds it full
-- after all, the run takes a new slot at the end of the line. A run cancelled in line
-- leaves its slot unused: a bucket may under-admit, never over-admit. Call it after the
-- run's reads, before its own writes; an undecodable field counts as no gate
-- (create_run validated it). known: {rate_limits, rate_slot_at} as the caller already
-- read them (claim_runs reads a run once), nil to read them here.
local function rate_gate(run_key, run_prefix, now, known)
  local cur = known or redis.call('HMGET', run_key, 'rate_limits', 'rate_slot_at')
  if not cur[1] or cur[1] == '' then
    return 0, ''
  end
  local ok, specs = pcall(cjson.decode, cur[1])
  if not ok or type(specs) ~= 'table' then
    return 0, ''
  end
  local slotted = tonumber(cur[2])
  if slotted and slotted > now then
    return slotted, ''  -- promoted before its slot (it cannot be, but never start early)
  end
  local eligible, holder, buckets = now, '', {}
  for i, spec in ipairs(specs) do
    local key = start_bucket_of(run_prefix, tostring(spec[1]))
    local allow_at, new_tat = gcra_check(key, now, spec[2], spec[3], spec[4], spec[5])
    local line = tonumber(redis.call('GET', key .. ':next') or '') or 0
    -- a run already in line goes at its slot; a new one behind the runs in line
    local at = slotted and allow_at or math.max(allow_at, line)
    if at > eligible then
      eligible, holder = at, tostring(spec[1])
    end
    buckets[i] = {key = key, new_tat = new_tat, line = line, t = spec[3] / spec[2] * spec[5]}
  end
  if eligible <= now then
    for _, b in ipairs(buckets) do
      gcra_commit(b.key, now, b.new_tat)
    end
    if slotted then
      redis.call('HDEL', run_key, 'rate_slot_at')
    end
    return 0, ''
  end
  local slot = math.ceil(eligible)
  for _, b in ipairs(buckets) do
    if slot < b.line then
      slot = math.ceil(b.line)  -- a late run re-queued: at the end of every line
    end
  end
  for _, b in ipairs(buckets) do
    local next_free = math.max(b.line, slot) + b.t
    redis.call('SET', b.key .. ':next', string.format('%.17g', next_free), 'PX',
      math.ceil(next_free - now) + 1)
  end
  redis.call('HSET', run_key, 'rate_slot_at', slot)
  return slot, holder
end

-- The whole start gate for a claim, in one call: a run its buckets hold back (rate_gate)
-- moves to the queue's delayed set (`delayed_key`) at the exact ms it may start, and its
-- stream says why ({kind = rate_limited, key, until_ms}, a `wait` event at its current
-- fence). Returns true when the run was held back (the caller writes nothing else for
-- it and claims the next), false when it may be leased now (its tokens are taken).
-- claim_runs calls it for each run right before leasing it, with the run's
-- rate_limits, rate_slot_at and fence fields as it read them (known; nil: read here).
local function rate_hold(run_prefix, events_prefix, delayed_key, run_id, now, maxlen, known)
  local run_key = run_prefix .. run_id
  local eligible, bucket = rate_gate(run_key, run_prefix, now, known)
  if eligible == 0 then
    return false
  end
  redis.call('ZADD', delayed_key, eligible, run_id)
  if bucket ~= '' then
    local fence = (known and known[3]) or redis.call('HGET', run_key, 'fence') or 0
    xadd_event(events_prefix .. run_id, 'wait', fence, now,
      cjson.encode({kind = 'rate_limited', key = bucket, until_ms = eligible,
        wait_ms = eligible - now}), maxlen)
  end
  return true
end
