--[[ token_bucket.lua: a bucket of `burst` tokens refilled continuously at the
rate, starting full; with max_delay, a request allowed within max_delay is
admitted now and held for that wait.
Mirrors crates/limit/src/algorithm/token_bucket.rs line for line.

A function library over common.lua; registers DEFINE.token_bucket (building
ALGO.token_bucket) with the functions every algorithm file has (see
fixed_window.lua).

Params (nparams = 4): unit, drain, burst, max_delay. The rate count/period
arrives reduced (Rate::ticks): one token is `unit` ticks, one microsecond
refills `drain` ticks.
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

  return {
    nparams = 4,
    what = 'token_bucket (unit, drain, burst, max_delay)',

    -- (max and min as comparisons: common.lua, "In Lua arithmetic")
    check = function(st, now, cost, unit, drain, burst, max_delay)
      if cost < 1 then cost = 1 end
      local sd, ts, su = state_unpack(st, TAG, 3)
      if sd == nil then sd, ts, su = 0, 0, 0 end
      local cap = burst * unit
      local d = fl_drained(fl_adopt(sd, su, unit, cap + max_delay * drain),
        now > ts and now - ts or 0, drain)
      if ts < now then ts = now end
      local allowed, delay, retry = false, 0, -1
      if cost <= burst then
        local need = d + cost * unit
        local wait = need > cap and fl_drain_time(need - cap, drain) or 0
        if wait <= max_delay then
          allowed, delay, retry, d = true, wait, 0, need
        else
          retry = wait - max_delay
        end
      end
      local ttl = fl_drain_time(d, drain)
      local window = fl_drain_time(cap, drain)
      return allowed, delay, burst, window, fl_units_free(d, cap, unit),
        ttl < window and ttl or window, retry, ttl,
        allowed and state_pack(TAG, 3, d, ts, unit) or nil, fl_next_unit(d, cap, unit, drain)
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
