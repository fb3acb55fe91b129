--[[ leaky_bucket.lua: a bucket of size `burst` draining at the rate; a request
adds its cost if it fits, else it is rejected. max_delay = 0: policing
(admitted requests pass at once); max_delay > 0: shaping (each admitted
request is held until what is ahead of it has drained; one that would wait
longer than max_delay is rejected).
Mirrors src/limit/algorithm/leaky_bucket.rs line for line.

A function library over common.lua; registers DEFINE.leaky_bucket (building
ALGO.leaky_bucket) with the functions every algorithm file has (see
fixed_window.lua).

Params (nparams = 4): unit, drain, burst, max_delay (as token_bucket.lua).
State: a hash {lv = the level in ticks, ts = when lv was computed, u = the
tick size lv is counted in (0: fresh)}.

  cap = burst * unit;  md = max_delay * drain;  window = ceil(cap / drain)
  lv  = drained(adopt(s.lv, s.u), max(0, now - s.ts));  ts = max(s.ts, now)
  k   = cost * unit;  delay = ceil(lv / drain) if shaping else 0
  ok  = cost <= burst and lv + k <= cap and delay <= max_delay
  lv' = lv + k if ok else lv;  state = {lv = lv', ts = ts, u = unit}
  remaining = floor((cap - lv') / unit), shaping: min(that, floor((md - lv') / unit) + 1
              if lv' <= md else 0)
  reset_after = ttl = ceil(lv' / drain)
  retry_after = max(ceil(max(lv + k - cap, 0) / drain), shaping: ceil(max(lv - md, 0) / drain))
]]

DEFINE.leaky_bucket = function()
  local FIELDS = {'lv', 'ts', 'u'}

  return hash_state(FIELDS, {
    nparams = 4,

    params = function(args, i)
      local a = take(args, i, 4, 'leaky_bucket (unit, drain, burst, max_delay)')
      local p = {unit = a[1], drain = a[2], burst = a[3], max_delay = a[4]}
      -- The level never exceeds the bucket: no slack.
      p.fluid = fluid(p.unit, p.drain, p.burst, 0)
      p.md = p.max_delay * p.drain
      return p
    end,

    check = function(p, s, now, cost)
      cost = max(cost, 1)
      local f = p.fluid
      local shaping = p.max_delay > 0
      local lv = fl_drained(f, fl_adopt(f, s.lv, s.u), max(now - s.ts, 0))
      local ts = max(s.ts, now)
      local allowed, delay, retry = false, 0, -1
      if cost <= p.burst then
        local k = cost * f.unit
        local ahead = shaping and fl_drain_time(f, lv) or 0
        if lv + k <= f.cap and ahead <= p.max_delay then
          allowed, delay, retry = true, ahead, 0
        else
          -- Room in the bucket, and (shaping) a short enough queue.
          local room = fl_drain_time(f, max(lv + k - f.cap, 0))
          local queue = shaping and fl_drain_time(f, max(lv - p.md, 0)) or 0
          retry = max(room, queue)
        end
      end
      local lv2 = allowed and lv + cost * f.unit or lv
      local remaining = fl_units_free(f, lv2)
      if shaping then
        local queued = 0
        if lv2 <= p.md then queued = floor((p.md - lv2) / f.unit) + 1 end
        remaining = min(remaining, queued)
      end
      local ttl = fl_drain_time(f, lv2)
      return {
        allowed = allowed, delay = delay, limit = p.burst, window = fl_drain_time(f, f.cap),
        remaining = remaining, reset_after = ttl, retry_after = retry,
        state = {lv = lv2, ts = ts, u = f.unit}, ttl = ttl,
      }
    end,
  })
end
