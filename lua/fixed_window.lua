--[[ fixed_window.lua: at most `limit` units per aligned window.
Mirrors src/limit/algorithm/fixed_window.rs line for line.

A function library over common.lua; registers DEFINE.fixed_window, which
builds ALGO.fixed_window on first use. Every algorithm's table has the same
five functions:

  nparams                   how many params the algorithm takes
  params(args, i) -> p      p from args[i .. i + nparams - 1] (decimal strings);
                            fails if args ends before
  load(key, p) -> st        the stored state (a fresh one if the key is missing)
  check(p, st, now, cost, lease) -> v
                            the verdict, nothing stored: {allowed (boolean), delay,
                            limit, window, remaining, reset_after, retry_after
                            (-1: never), state, ttl}
  store(key, p, st, v, now) commit v.state (loaded as st) for v.ttl; 0 deletes
  encode(st) -> array       the state for inspect.lua, fields in the Rust order

(load, store and encode come from common.lua's hash_state for the algorithms
whose state is one hash: all but sliding_log and concurrency.)

Params (nparams = 2): limit, window (µs; 0 = calendar months, UTC).
State: a hash {ws = start of the counted window, n = units taken in it}.

  (start, end) = bounds(now)
  n   = s.n if start <= s.ws < end else 0
  ok  = cost <= limit and n + cost <= limit
  n'  = n + cost if ok else n;  state = {ws = start, n = n'}
  remaining = max(limit - n', 0);  reset_after = end - now
  retry_after = 0 if ok, end - now if cost <= limit, else never
  ttl = end - now if n' > 0 else 0;  window = end - start
]]

DEFINE.fixed_window = function()
  local DAY = 86400 * 1000000

  -- Howard Hinnant's civil_from_days, for days since 1970-01-01.
  local function civil_from_days(days)
    local z = days + 719468
    local era = floor(z / 146097)
    local doe = z - era * 146097
    local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524)
      - floor(doe / 146096)) / 365)
    local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
    local mp = floor((5 * doy + 2) / 153)
    local d = doy - floor((153 * mp + 2) / 5) + 1
    local m = mp < 10 and mp + 3 or mp - 9
    local y = yoe + era * 400 + (m <= 2 and 1 or 0)
    return y, m, d
  end

  -- Days since 1970-01-01 of a civil date from 1970 on (days_from_civil).
  local function days_from_civil(y, m, d)
    y = y - (m <= 2 and 1 or 0)
    local era = floor(y / 400)
    local yoe = y - era * 400
    local mp = m > 2 and m - 3 or m + 9
    local doy = floor((153 * mp + 2) / 5) + d - 1
    local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
    return max(era * 146097 + doe - 719468, 0)
  end

  -- The window holding now: start <= now < end (Window::bounds).
  local function bounds(window, now)
    if window > 0 then
      local start = now - now % window
      return start, start + window
    end
    local y, m = civil_from_days(floor(now / DAY))
    local ny, nm = y, m + 1
    if m == 12 then ny, nm = y + 1, 1 end
    return days_from_civil(y, m, 1) * DAY, days_from_civil(ny, nm, 1) * DAY
  end

  local FIELDS = {'ws', 'n'}

  return hash_state(FIELDS, {
    nparams = 2,

    params = function(args, i)
      local a = take(args, i, 2, 'fixed_window (limit, window)')
      return {limit = a[1], window = a[2]}
    end,

    check = function(p, s, now, cost)
      cost = max(cost, 1)
      local start, finish = bounds(p.window, now)
      local n = 0
      if start <= s.ws and s.ws < finish then n = s.n end
      local fits = cost <= p.limit
      local allowed = fits and n + cost <= p.limit
      if allowed then n = n + cost end
      local left = finish - now
      local retry = -1
      if allowed then retry = 0 elseif fits then retry = left end
      return {
        allowed = allowed, delay = 0, limit = p.limit, window = finish - start,
        remaining = max(p.limit - n, 0), reset_after = left, retry_after = retry,
        state = {ws = start, n = n}, ttl = n > 0 and left or 0,
      }
    end,
  })
end
