--[[ token_bucket.lua: a bucket of `burst` tokens refilled continuously at the
rate, starting full; with max_delay, a request allowed within max_delay is
admitted now and held for that wait.
Mirrors crates/limit/src/algorithm/token_bucket.rs line for line.

A function library over common.lua; registers DEFINE.token_bucket (building
ALGO.token_bucket) with the functions every algorithm file has (see
fixed_window.lua).

Params (nparams = 4): unit, drain, burst, max_delay. The rate count/period
arrives reduced (Rate::ticks): one token is `unit` ticks, one microsecond
refills `drain` ticks; both are at least 1.
State (tag 3): d the ticks missing from a full bucket, ts when d was
computed, u the tick size d is counted in (0: fresh).

  cap = burst * unit;  slack = max_delay * drain;  window = ceil(cap / drain)
  d   = drained(adopt(s.d, s.u), max(0, now - s.ts));  ts = max(s.ts, now)
  need = d + cost * unit;  wait = ceil(max(need - cap, 0) / drain)
  ok  = cost <= burst and wait <= max_delay;  delay = wait
  d'  = need if ok else d;  state = {d = d', ts = ts, u = unit}
  remaining = floor(max(cap - d', 0) / unit);  ttl = ceil(d' / drain)
  reset_after = min(ttl, window);  retry_after = wait - max_delay (never if cost > burst)
  grows_after = fl_next_unit(d'): until the next whole token is back

  settle: d as above at max(now, at)
          (d', applied) = settle_shift(d, delta, unit, 0, cap + slack)
          state = {d = d', ts = ts, u = unit};  ttl = ceil(d' / drain)
]]

DEFINE.token_bucket = function()
  local TAG = 3
  -- The state string: the tag, d, ts, u (common.lua, "States").
  local FORMAT = '<dddd'

  return {
    nparams = 4,
    what = 'token_bucket (unit, drain, burst, max_delay)',

    -- check runs for every request: the state's decoding and the fluid's
    -- maths (common.lua, fl_*) are spelled out here, each step named after
    -- its Fluid method, with no calls but the rare fl_adopt (common.lua,
    -- "Speed"). unit and drain are at least 1: no zero divisor to test.
    check = function(st, now, cost, unit, drain, burst, max_delay)
      if cost < 1 then cost = 1 end
      local sd, ts, su = 0, 0, 0
      if st and #st == 32 then
        local tag, a, b, c = sunpack(FORMAT, st)
        if tag == TAG then sd, ts, su = a, b, c end
      end
      local cap = burst * unit
      local top = cap + max_delay * drain
      -- effective(): adopt (a level of another tick size: fl_adopt) ...
      local d = sd
      if su ~= unit then
        d = fl_adopt(sd, su, unit, top)
      elseif d > top then
        d = top
      end
      -- ... then drained for the time since ts (unchanged if none)
      local elapsed = now - ts
      if elapsed > 0 then
        local q = d / drain
        if elapsed >= q + (-q) % 1 then d = 0 else d = d - elapsed * drain end
      end
      if ts < now then ts = now end
      local allowed, delay, retry = false, 0, -1
      if cost <= burst then
        local need = d + cost * unit
        local wait = 0
        if need > cap then
          wait = (need - cap) / drain
          wait = wait + (-wait) % 1
        end
        if wait <= max_delay then
          allowed, delay, retry, d = true, wait, 0, need
        else
          retry = wait - max_delay
        end
      end
      -- time_to_drain(d), and of a full bucket (the window)
      local ttl, window = d / drain, cap / drain
      ttl, window = ttl + (-ttl) % 1, window + (-window) % 1
      -- units_free(d)
      local free = 0
      if d < cap then
        free = (cap - d) / unit
        free = free - free % 1
      end
      -- next_unit(d)
      local grows = (d >= cap and d - cap + unit or unit - (cap - d) % unit) / drain
      grows = grows + (-grows) % 1
      return allowed, delay, burst, window, free, ttl < window and ttl or window, retry, ttl,
        allowed and spack(FORMAT, TAG, d, ts, unit) or nil, grows
    end,

    -- Redis Cluster refund (refund.lua): puts cost tokens back, i.e. takes
    -- cost units off the level drained to now (never below empty: a level
    -- that drained past them never held them). The state to store, or nil.
    refund = function(st, _, now, cost, unit, drain, burst, max_delay)
      local sd, ts, su = state_unpack(st, TAG, 3)
      if sd == nil then return nil end
      local d = fl_drained(fl_adopt(sd, su, unit, burst * unit + max_delay * drain),
        max(now - ts, 0), drain)
      return state_pack(TAG, 3, max(d - max(cost, 1) * unit, 0), max(ts, now), unit)
    end,

    -- A cost settlement (settle.lua): delta tokens out of (or back into)
    -- the bucket refilled to now; token_bucket::settle.
    settle = function(st, at, now, delta, unit, drain, burst, max_delay)
      return fl_settle(st, TAG, at, now, delta, unit, drain, burst * unit + max_delay * drain)
    end,

    decode = function(st)
      return state_decode(st, TAG, 3)
    end,
  }
end
