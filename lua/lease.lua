--[[ lease.lua: leased limits' maths (docs/scaling-out.md, "Leased limits"): an instance takes
a block of up to `most` units of a key in one call and spends them itself.
Mirrors crates/limit/src/algorithm/lease.rs line for line; dispatch.lua
takes leases and gives back what the previous one left, give_back.lua gives
back what leases that ended outside a decision left.

  lease_take(algo, st, now, cost, most, a, b, c, d) -> units, {check's results}
              the largest k in [cost, most] (cost at least 1) that
              algo.check allows at now on st, by bisection (every leasable
              algorithm is monotone in the cost), with check's results for
              k (the state to store, the figures); 0 and check's rejection
              of cost when cost does not fit
  lease_counts(algo, name, at, now, a, b, c, d) -> boolean
              whether units a lease took at `at` still count at now: a fixed
              or calendar window's own window (its end, from check's
              reset_after, the same at both instants), a sliding window's
              current or previous one, a bucket or GCRA always
  lease_give_back(algo, name, st, at, now, units, a, b, c, d) -> state', ttl, applied
              what the lease did not spend, given back when it still counts
              (a settlement of -units: never below empty); nil when nothing
              changes

Leases are taken rarely (one call per block of units), so the results of
check are kept in tables here.
]]

local LEASABLE = {fixed_window = true, calendar_window = true, sliding_window = true,
  token_bucket = true, gcra = true}

local function lease_take(algo, st, now, cost, most, a, b, c, d)
  if cost < 1 then cost = 1 end
  if most < cost then most = cost end
  local full = {algo.check(st, now, most, a, b, c, d)}
  if full[1] then return most, full end
  local best = {algo.check(st, now, cost, a, b, c, d)}
  if not best[1] then return 0, best end
  local lo, hi = cost, most
  while hi - lo > 1 do
    local mid = lo + floor((hi - lo) / 2)
    local v = {algo.check(st, now, mid, a, b, c, d)}
    if v[1] then
      lo, best = mid, v
    else
      hi = mid
    end
  end
  return lo, best
end

-- The end of the window a fixed or calendar window counts at t.
local function window_end(algo, t, a, b, c, d)
  local _, _, _, _, _, reset = algo.check(nil, t, 1, a, b, c, d)
  return t + reset
end

local function lease_counts(algo, name, at, now, a, b, c, d)
  if name == 'fixed_window' or name == 'calendar_window' then
    return window_end(algo, at, a, b, c, d) == window_end(algo, now, a, b, c, d)
  elseif name == 'sliding_window' then
    return floor(now / b) - floor(at / b) <= 1
  end
  return LEASABLE[name] == true
end

local function lease_give_back(algo, name, st, at, now, units, a, b, c, d)
  if now < at then now = at end
  if units == 0 or not lease_counts(algo, name, at, now, a, b, c, d) then return nil end
  return algo.settle(st, at, now, -units, a, b, c, d)
end
