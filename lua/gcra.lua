--[[ gcra.lua: the generic cell rate algorithm with redis-cell's CL.THROTTLE
semantics and figures (burst = max_burst + 1), plus max_delay.
Mirrors src/limit/algorithm/gcra.rs line for line.

A function library over common.lua; registers DEFINE.gcra (building ALGO.gcra)
with the functions every algorithm file has (see fixed_window.lua).

Params (nparams = 3): interval T = floor(period / count) (µs, >= 1), burst,
max_delay.
State: a hash {tat = the theoretical arrival time (0: fresh)}.

  tau  = T * burst                                  -- the window
  tat  = min(max(s.tat, now), now + tau + max_delay)
  cost > burst: rejected, retry never
  new  = tat + T * cost;  wait = max(0, new - tau - now)
  ok   = wait <= max_delay;  delay = wait;  tat' = new if ok else tat
  ttl  = tat' - now;  reset_after = min(ttl, tau)
  remaining = floor(max(tau - ttl, 0) / T);  retry_after = wait - max_delay
]]

DEFINE.gcra = function()
  local FIELDS = {'tat'}

  return hash_state(FIELDS, {
    nparams = 3,

    params = function(args, i)
      local a = take(args, i, 3, 'gcra (interval, burst, max_delay)')
      if a[1] < 1 then fail('gcra: interval must be at least 1') end
      return {interval = a[1], burst = a[2], max_delay = a[3]}
    end,

    check = function(p, s, now, cost)
      cost = max(cost, 1)
      local tau = p.interval * p.burst
      local tat = min(max(s.tat, now), now + tau + p.max_delay)
      local allowed, delay, retry, tat2 = false, 0, -1, tat
      if cost <= p.burst then
        local new = tat + p.interval * cost
        local wait = max(new - (now + tau), 0)
        if wait <= p.max_delay then
          allowed, delay, retry, tat2 = true, wait, 0, new
        else
          retry = wait - p.max_delay
        end
      end
      local ttl = tat2 - now
      return {
        allowed = allowed, delay = delay, limit = p.burst, window = tau,
        remaining = floor(max(tau - ttl, 0) / p.interval),
        reset_after = min(ttl, tau), retry_after = retry,
        state = {tat = tat2}, ttl = ttl,
      }
    end,
  })
end
