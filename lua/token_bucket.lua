--[[ token_bucket.lua: a bucket of `burst` tokens refilled continuously at the
rate, starting full; with max_delay, a request allowed within max_delay is
admitted now and held for that wait.
Mirrors src/limit/algorithm/token_bucket.rs line for line.

A function library over common.lua; registers DEFINE.token_bucket (building
ALGO.token_bucket) with the functions every algorithm file has (see
fixed_window.lua).

Params (nparams = 4): unit, drain, burst, max_delay. The rate count/period
arrives reduced (Rate::ticks): one token is `unit` ticks, one microsecond
refills `drain` ticks.
State: a hash {d = ticks missing from a full bucket, ts = when d was
computed, u = the tick size d is counted in (0: fresh)}.

  cap = burst * unit;  slack = max_delay * drain;  window = ceil(cap / drain)
  d   = drained(adopt(s.d, s.u), max(0, now - s.ts));  ts = max(s.ts, now)
  need = d + cost * unit;  wait = ceil(max(need - cap, 0) / drain)
  ok  = cost <= burst and wait <= max_delay;  delay = wait
  d'  = need if ok else d;  state = {d = d', ts = ts, u = unit}
  remaining = floor(max(cap - d', 0) / unit);  ttl = ceil(d' / drain)
  reset_after = min(ttl, window);  retry_after = wait - max_delay (never if cost > burst)
]]

DEFINE.token_bucket = function()
  local FIELDS = {'d', 'ts', 'u'}

  return hash_state(FIELDS, {
    nparams = 4,

    params = function(args, i)
      local a = take(args, i, 4, 'token_bucket (unit, drain, burst, max_delay)')
      local p = {unit = a[1], drain = a[2], burst = a[3], max_delay = a[4]}
      p.fluid = fluid(p.unit, p.drain, p.burst, p.max_delay * p.drain)
      return p
    end,

    check = function(p, s, now, cost)
      cost = max(cost, 1)
      local f = p.fluid
      local d = fl_drained(f, fl_adopt(f, s.d, s.u), max(now - s.ts, 0))
      local ts = max(s.ts, now)
      local allowed, delay, retry = false, 0, -1
      if cost <= p.burst then
        local need = d + cost * f.unit
        local wait = fl_drain_time(f, max(need - f.cap, 0))
        if wait <= p.max_delay then
          allowed, delay, retry, d = true, wait, 0, need
        else
          retry = wait - p.max_delay
        end
      end
      local ttl = fl_drain_time(f, d)
      local window = fl_drain_time(f, f.cap)
      return {
        allowed = allowed, delay = delay, limit = p.burst, window = window,
        remaining = fl_units_free(f, d), reset_after = min(ttl, window),
        retry_after = retry, state = {d = d, ts = ts, u = f.unit}, ttl = ttl,
      }
    end,
  })
end
