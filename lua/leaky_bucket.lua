--[[ leaky_bucket.lua: a bucket of size `burst` draining at the rate; a request
adds its cost if it fits, else it is rejected. max_delay = 0: policing
(admitted requests pass at once); max_delay > 0: shaping (each admitted
request is held until what is ahead of it has drained; one that would wait
longer than max_delay is rejected).
Mirrors crates/limit/src/algorithm/leaky_bucket.rs line for line.

A function library over common.lua; registers DEFINE.leaky_bucket (building
ALGO.leaky_bucket) with the functions every algorithm file has (see
fixed_window.lua).

Params (nparams = 4): unit, drain, burst, max_delay (as token_bucket.lua).
State (tag 5): lv the level in ticks, ts when lv was computed, u the tick
size lv is counted in (0: fresh).

  cap = burst * unit;  md = max_delay * drain;  window = ceil(cap / drain)
  lv  = drained(adopt(s.lv, s.u), max(0, now - s.ts));  ts = max(s.ts, now)
  k   = cost * unit;  delay = ceil(lv / drain) if shaping else 0
  ok  = cost <= burst and lv + k <= cap and delay <= max_delay
  lv' = lv + k if ok else lv;  state = {lv = lv', ts = ts, u = unit}
  remaining = floor((cap - lv') / unit), shaping: min(that, floor((md - lv') / unit) + 1
              if lv' <= md else 0)
  reset_after = ttl = ceil(lv' / drain)
  grows_after = max(fl_next_unit(lv') if remaining is all free units else 0,
                    shaping: ceil(max(lv' + remaining * unit - md, 0) / drain))
  retry_after = max(ceil(max(lv + k - cap, 0) / drain), shaping: ceil(max(lv - md, 0) / drain))
  settle: lv as above at max(now, at)
          (lv', applied) = settle_shift(lv, delta, unit, 0, cap)
          state = {lv = lv', ts = ts, u = unit};  ttl = ceil(lv' / drain)
]]

DEFINE.leaky_bucket = function()
  local TAG = 5

  return {
    nparams = 4,
    what = 'leaky_bucket (unit, drain, burst, max_delay)',

    check = function(st, now, cost, unit, drain, burst, max_delay)
      cost = max(cost, 1)
      local slv, ts, su = state_unpack(st, TAG, 3)
      if slv == nil then slv, ts, su = 0, 0, 0 end
      local cap, md = burst * unit, max_delay * drain
      local shaping = max_delay > 0
      local lv = fl_drained(fl_adopt(slv, su, unit, cap), max(now - ts, 0), drain)
      ts = max(ts, now)
      local allowed, delay, retry = false, 0, -1
      if cost <= burst then
        local k = cost * unit
        local ahead = shaping and fl_drain_time(lv, drain) or 0
        if lv + k <= cap and ahead <= max_delay then
          allowed, delay, retry = true, ahead, 0
        else
          local room = fl_drain_time(max(lv + k - cap, 0), drain)
          local queue = shaping and fl_drain_time(max(lv - md, 0), drain) or 0
          retry = max(room, queue)
        end
      end
      local lv2 = allowed and lv + cost * unit or lv
      local free = fl_units_free(lv2, cap, unit)
      local remaining = free
      if shaping then
        local queued = 0
        if lv2 <= md then queued = floor((md - lv2) / unit) + 1 end
        remaining = min(remaining, queued)
      end
      -- remaining + 1 passes once the bucket has room for one more unit (if
      -- that is what binds) and, shaping, the queue is short enough.
      local grows = 0
      if remaining == free then grows = fl_next_unit(lv2, cap, unit, drain) end
      if shaping then
        grows = max(grows, fl_drain_time(max(lv2 + remaining * unit - md, 0), drain))
      end
      local ttl = fl_drain_time(lv2, drain)
      return allowed, delay, burst, fl_drain_time(cap, drain), remaining, ttl, retry, ttl,
        allowed and state_pack(TAG, 3, lv2, ts, unit) or nil, grows
    end,

    -- Redis Cluster refund (refund.lua): takes cost units off the level
    -- drained to now (never below empty). The state to store, or nil.
    refund = function(st, _, now, cost, unit, drain, burst)
      local slv, ts, su = state_unpack(st, TAG, 3)
      if slv == nil then return nil end
      local lv = fl_drained(fl_adopt(slv, su, unit, burst * unit), max(now - ts, 0), drain)
      return state_pack(TAG, 3, max(lv - max(cost, 1) * unit, 0), max(ts, now), unit)
    end,

    -- A cost settlement (settle.lua): delta units into (or out of) the
    -- bucket drained to now; leaky_bucket::settle.
    settle = function(st, at, now, delta, unit, drain, burst)
      return fl_settle(st, TAG, at, now, delta, unit, drain, burst * unit)
    end,

    decode = function(st)
      return state_decode(st, TAG, 3)
    end,
  }
end
