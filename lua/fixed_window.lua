--[[ fixed_window.lua: at most `limit` units per aligned window.
Mirrors crates/limit/src/algorithm/fixed_window.rs line for line.

A function library over common.lua; registers DEFINE.fixed_window, which
builds ALGO.fixed_window on first use (and DEFINE.calendar_window: the same
counter over calendar periods, below). Every algorithm's table has:

  nparams     how many integer params follow the check's cost in ARGV
  lease       true if the request's lease id (a decimal string: it may exceed
              2^53) follows the params (concurrency only)
  zset        true if the state is a sorted set the algorithm reads and writes
              itself (sliding_log, concurrency); else one string (common.lua,
              "States"), which dispatch.lua reads with MGET and writes with SET
  check(st, now, cost, a, b, c, d, lease) -> allowed, delay, limit, window,
              remaining, reset_after, retry_after (-1: never), ttl, state',
              grows_after
              the verdict, nothing stored; a .. d are the params. st is the
              stored string (false or nil: none), or load(key) for a zset
              algorithm; state' is what to store for ttl (0: delete), only
              when allowed (else nil): a string, or for a zset algorithm
              what its store() takes; grows_after is draft 11's t, the time
              until the available quota next grows (Verdict::grows_after),
              last so that a caller reading the first nine is unchanged
  settle(st, at, now, delta, a, b, c, d) -> state', ttl, applied
              (string states; not sliding_log nor concurrency) a cost
              settlement (settle.lua): delta units (signed) on the state
              read at max(now, at) for a request decided at `at`; state' is
              the string to store for ttl (0 or nil: delete), applied the
              units that took effect (algorithm::settle)
  decode(st) -> array   (string states) the stored string's fields in the
              Rust state's order, or nil if st is not a state of this
              algorithm (inspect.lua)
  load(key) -> st, store(key, st, state', ttl, now, a, b, c, d), encode(st)
              (sorted-set states) read, write, and list for inspect.lua

Multiple return values, not tables: check runs for every check of every
request (common.lua, "Speed").

Params (nparams = 2): limit, window (µs; 0 = calendar months, UTC).
State (tag 1): ws the start of the counted window, n the units taken in it.

  (start, end) = bounds(now)
  n   = s.n if start <= s.ws < end else 0
  ok  = cost <= limit and n + cost <= limit
  n'  = n + cost if ok else n;  state = {ws = start, n = n'}
  remaining = max(limit - n', 0);  reset_after = grows_after = end - now
  retry_after = 0 if ok, end - now if cost <= limit, else never
  ttl = end - now if n' > 0 else 0;  window = end - start

  settle: now = max(now, at);  n = the count of bounds(now), as above
          (n', applied) = settle_shift(n, delta, 1, 0, SETTLE_MAX)
          state = {ws = start, n = n'};  ttl = end - now + linger if n' > 0 else 0
]]

-- The algorithm's table over a bounds function (window params -> start,
-- finish) and the time state outlives its window (`linger`, µs). Shared by
-- fixed_window (params: limit, window) and calendar_window (params: limit,
-- start, finish, next): the same counter, tag 1.
local function fixed_table(nparams, what, bounds, linger)
  local TAG = 1
  -- The state string: the tag, ws, n (common.lua, "States").
  local FORMAT = '<ddd'
  return {
    nparams = nparams,
    what = what,

    -- (the state decoded and encoded here, not by state_unpack and
    -- state_pack: one call fewer each, for every request)
    check = function(st, now, cost, limit, a, b, c)
      if cost < 1 then cost = 1 end
      local start, finish = bounds(now, a, b, c)
      local n = 0
      if st and #st == 24 then
        local tag, ws, sn = sunpack(FORMAT, st)
        if tag == TAG and ws >= start and ws < finish then n = sn end
      end
      local fits = cost <= limit
      local allowed = fits and n + cost <= limit
      local left = finish - now
      if not allowed then
        return false, 0, limit, finish - start, n < limit and limit - n or 0, left,
          fits and left or -1, n > 0 and left + linger or 0, nil, left
      end
      n = n + cost
      return true, 0, limit, finish - start, n < limit and limit - n or 0, left, 0,
        left + linger, spack(FORMAT, TAG, start, n), left
    end,

    -- Redis Cluster refund (refund.lua): gives back cost units taken at `at`,
    -- from the window that held `at` if it is still the stored one (a later
    -- window never counted them). The state to store (its TTL kept), or nil.
    refund = function(st, at, _, cost, _, a, b, c)
      local ws, n = state_unpack(st, TAG, 2)
      if ws == nil or ws ~= bounds(at, a, b, c) then return nil end
      return state_pack(TAG, 2, ws, max(n - max(cost, 1), 0))
    end,

    -- A cost settlement (settle.lua): to the window `at` was in while it is
    -- current, else to the current one; fixed_window::settle.
    settle = function(st, at, now, delta, _, a, b, c)
      now = max(now, at)
      local ws, n = state_unpack(st, TAG, 2)
      local start, finish = bounds(now, a, b, c)
      if ws == nil or ws < start or ws >= finish then n = 0 end
      local applied
      n, applied = settle_shift(n, delta, 1, 0, SETTLE_MAX)
      if n == 0 then return nil, 0, applied end
      return state_pack(TAG, 2, start, n), finish - now + linger, applied
    end,

    decode = function(st)
      return state_decode(st, TAG, 2)
    end,
  }
end

-- calendar_window: a fixed window of calendar periods the gateway computed
-- (crates/limit/src/calendar.rs) for its clock: [start, finish), then
-- [finish, next). A store clock already past finish counts in the next
-- period; the state outlives its period by a day (Window::Calendar).
DEFINE.calendar_window = function()
  local DAY = 86400 * 1000000
  return fixed_table(4, 'calendar_window (limit, start, finish, next)',
    function(now, start, finish, next)
      if now >= finish then return finish, max(next, now + 1) end
      return start, finish
    end, DAY)
end

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
  local function bounds(now, window)
    if window > 0 then
      local start = now - now % window
      return start, start + window
    end
    local y, m = civil_from_days(floor(now / DAY))
    local ny, nm = y, m + 1
    if m == 12 then ny, nm = y + 1, 1 end
    return days_from_civil(y, m, 1) * DAY, days_from_civil(ny, nm, 1) * DAY
  end

  return fixed_table(2, 'fixed_window (limit, window)', bounds, 0)
end
