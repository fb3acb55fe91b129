--[[ gcra.lua: the generic cell rate algorithm with redis-cell's CL.THROTTLE
semantics and figures (burst = max_burst + 1), plus max_delay.
Mirrors crates/limit/src/algorithm/gcra.rs line for line.

A function library over common.lua; registers DEFINE.gcra (building ALGO.gcra)
with the functions every algorithm file has (see fixed_window.lua).

Params (nparams = 3): interval T = floor(period / count) (µs, >= 1), burst,
max_delay.
State (tag 4): tat, the theoretical arrival time (0: fresh).

  tau  = T * burst                                  -- the window
  tat  = min(max(s.tat, now), now + tau + max_delay)
  cost > burst: rejected, retry never
  new  = tat + T * cost;  wait = max(0, new - tau - now)
  ok   = wait <= max_delay;  delay = wait;  tat' = new if ok else tat
  ttl  = tat' - now;  reset_after = min(ttl, tau)
  remaining = floor(max(tau - ttl, 0) / T);  retry_after = wait - max_delay
  grows_after = ttl - tau + T if ttl >= tau else T - (tau - ttl) % T  (fl_next_unit)
  settle: now = max(now, at);  tat as above
          (tat', applied) = settle_shift(tat, delta, T, now, now + tau + max_delay)
          ttl = tat' - now
]]

DEFINE.gcra = function()
  local TAG = 4

  return {
    nparams = 3,
    what = 'gcra (interval, burst, max_delay)',

    check = function(st, now, cost, interval, burst, max_delay)
      if interval < 1 then fail('gcra: interval must be at least 1') end
      cost = max(cost, 1)
      local tau = interval * burst
      local tat = min(max(state_unpack(st, TAG, 1) or 0, now), now + tau + max_delay)
      local allowed, delay, retry, tat2 = false, 0, -1, tat
      if cost <= burst then
        local new = tat + interval * cost
        local wait = max(new - (now + tau), 0)
        if wait <= max_delay then
          allowed, delay, retry, tat2 = true, wait, 0, new
        else
          retry = wait - max_delay
        end
      end
      local ttl = tat2 - now
      -- The next cell is back when ttl has fallen below the next multiple of
      -- T under tau: the bucket maths with one tick per microsecond.
      local grows = fl_next_unit(ttl, tau, interval, 1)
      return allowed, delay, burst, tau, floor(max(tau - ttl, 0) / interval),
        min(ttl, tau), retry, ttl, allowed and state_pack(TAG, 1, tat2) or nil, grows
    end,

    -- Redis Cluster refund (refund.lua): moves the theoretical arrival time
    -- back by the cells taken, never before now (a tat in the past is a
    -- fresh key). The state to store, or nil.
    refund = function(st, _, now, cost, interval)
      local tat = state_unpack(st, TAG, 1)
      if tat == nil or tat <= now then return nil end
      return state_pack(TAG, 1, max(tat - interval * max(cost, 1), now))
    end,

    -- A cost settlement (settle.lua): tat moved by delta cells, never
    -- before now; gcra::settle.
    settle = function(st, at, now, delta, interval, burst, max_delay)
      now = max(now, at)
      local top = now + interval * burst + max_delay
      local tat = min(max(state_unpack(st, TAG, 1) or 0, now), top)
      local applied
      tat, applied = settle_shift(tat, delta, interval, now, top)
      local ttl = tat - now
      return ttl > 0 and state_pack(TAG, 1, tat) or nil, ttl, applied
    end,

    decode = function(st)
      return state_decode(st, TAG, 1)
    end,
  }
end
