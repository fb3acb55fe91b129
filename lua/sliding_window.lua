--[[ sliding_window.lua: Cloudflare's approximate sliding window,
estimate = prev * (1 - elapsed / window) + cur, O(1) state.
Mirrors crates/limit/src/algorithm/sliding_window.rs line for line.

A function library over common.lua; registers DEFINE.sliding_window (building
ALGO.sliding_window) with the functions every algorithm file has (see
fixed_window.lua).

Params (nparams = 2): limit, window (µs).
State (tag 2): ws the start of the current window, cur the units in it,
prev the units in the window before.

  S     = 1000;  start = now - now % w;  e = now - start
  (prev, cur) = (s.prev, s.cur) if s.ws >= start
              = (s.cur, 0)      if s.ws + w >= start
              = (0, 0)          otherwise;   each min(_, limit)
  wt    = ceil((w - e) * S / w)
  room  = max(0, floor(max(limit * S - prev * wt, 0) / S) - cur)
  ok    = cost <= limit and cost <= room
  cur'  = cur + cost if ok else cur;  state = {ws = start, cur = cur', prev = prev}
  remaining = room - cost if ok else room
  (reset_after, ttl) = (w, 2w - e) if cur' > 0, (w - e, w - e) if prev > 0, else (0, 0)
  grows_after = fade(cur' + remaining + 1), or w - e if it is none
  retry_after: see sw_retry() below

  settle: now = max(now, at);  (start, prev, cur) as above
          (prev', applied) = settle_shift(prev, delta, 1, 0, limit) if at's window
          is the one before start, else (cur', applied) = settle_shift(cur, ...)
          ttl = 2w - e if cur' > 0, w - e if prev' > 0, else 0
]]

DEFINE.sliding_window = function()
  local S = 1000

  -- The first offset into a window of w at which the weight is at most r (< S).
  local function first_offset_with_weight(w, r)
    return w - floor(r * w / S)
  end

  -- The wait from offset e until prev's decaying weight leaves room for n
  -- units (cur included), if that happens before the window ends; else nil.
  -- (floor, min and max as operators: common.lua, "Speed".)
  local function fade(w, limit, e, prev, n)
    if n > limit or prev == 0 then return nil end
    local r = (limit - n) * S / prev
    r = r - r % 1
    if r > S then r = S end
    local first = r * w / S
    first = w - (first - first % 1)
    if first < w then return first > e and first - e or 0 end
    return nil
  end

  -- The wait until a rejected request (cost <= limit) would be admitted.
  local function sw_retry(w, limit, e, prev, cur, cost)
    local wait = fade(w, limit, e, prev, cur + cost)
    if wait ~= nil then return wait end
    -- In the next window the current count becomes prev, decaying from full
    -- weight, and nothing is current.
    local e2 = 0
    if cur > 0 then
      local r2 = floor((limit - cost) * S / cur)
      if r2 < S then e2 = first_offset_with_weight(w, r2) end
    end
    return (w - e) + e2
  end

  local TAG = 2
  -- The state string: the tag, ws, cur, prev (common.lua, "States").
  local FORMAT = '<dddd'

  -- The stored state st brought to now (effective()): the current window's
  -- start, and the previous and current counts, each at most limit.
  local function counts(st, now, limit, w)
    local start = now - now % w
    local prev, cur = 0, 0
    -- (decoded here, not by state_unpack: one call fewer per request)
    if st and #st == 32 then
      local tag, ws, scur, sprev = sunpack(FORMAT, st)
      if tag ~= TAG then
        -- fresh
      elseif ws >= start then
        prev, cur = sprev, scur
      elseif ws + w >= start then
        prev, cur = scur, 0
      end
    end
    return start, prev < limit and prev or limit, cur < limit and cur or limit
  end

  return {
    nparams = 2,
    what = 'sliding_window (limit, window)',

    check = function(st, now, cost, limit, w)
      if cost < 1 then cost = 1 end
      local start, prev, cur = counts(st, now, limit, w)
      local e = now - start
      local wt = (w - e) * S / w
      wt = wt + (-wt) % 1
      local room = limit * S - prev * wt
      if room > 0 then
        room = room / S
        room = room - room % 1 - cur
        if room < 0 then room = 0 end
      else
        room = 0
      end
      local fits = cost <= limit
      local allowed = fits and cost <= room
      local cur2 = allowed and cur + cost or cur
      local retry = -1
      if allowed then
        retry = 0
      elseif fits then
        retry = sw_retry(w, limit, e, prev, cur, cost)
      end
      local remaining = allowed and room - cost or room
      local grows = fade(w, limit, e, prev, cur2 + remaining + 1) or w - e
      local reset, ttl = 0, 0
      if cur2 > 0 then
        reset, ttl = w, 2 * w - e
      elseif prev > 0 then
        reset, ttl = w - e, w - e
      end
      return allowed, 0, limit, w, remaining, reset, retry, ttl,
        allowed and spack(FORMAT, TAG, start, cur2, prev) or nil, grows
    end,

    -- Redis Cluster refund (refund.lua): gives back cost units taken at `at`:
    -- from the current count if at's window is still the current one, from
    -- the previous count if it has become the previous one (where the units
    -- still weigh). The state to store (its TTL kept), or nil.
    refund = function(st, at, _, cost, _, w)
      local ws, cur, prev = state_unpack(st, TAG, 3)
      if ws == nil then return nil end
      local start = at - at % w
      cost = max(cost, 1)
      if ws == start then
        cur = max(cur - cost, 0)
      elseif ws == start + w then
        prev = max(prev - cost, 0)
      else
        return nil
      end
      return state_pack(TAG, 3, ws, cur, prev)
    end,

    -- A cost settlement (settle.lua): to the window `at` was in while it is
    -- the current one or the one before, else to the current one;
    -- sliding_window::settle.
    settle = function(st, at, now, delta, limit, w)
      now = max(now, at)
      local start, prev, cur = counts(st, now, limit, w)
      local applied
      if at - at % w + w == start then
        prev, applied = settle_shift(prev, delta, 1, 0, limit)
      else
        cur, applied = settle_shift(cur, delta, 1, 0, limit)
      end
      local e = now - start
      local ttl = 0
      if cur > 0 then ttl = 2 * w - e elseif prev > 0 then ttl = w - e end
      return ttl > 0 and state_pack(TAG, 3, start, cur, prev) or nil, ttl, applied
    end,

    decode = function(st)
      return state_decode(st, TAG, 3)
    end,
  }
end
