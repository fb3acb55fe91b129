--[[ sliding_window.lua: Cloudflare's approximate sliding window,
estimate = prev * (1 - elapsed / window) + cur, O(1) state.
Mirrors src/limit/algorithm/sliding_window.rs line for line.

A function library over common.lua; registers DEFINE.sliding_window (building
ALGO.sliding_window) with the functions every algorithm file has (see
fixed_window.lua).

Params (nparams = 2): limit, window (µs).
State: a hash {ws = start of the current window, cur = units in it,
prev = units in the window before}.

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
  retry_after: see retry() below
]]

DEFINE.sliding_window = function()
  local S = 1000

  -- The first offset into a window of w at which the weight is at most r (< S).
  local function first_offset_with_weight(w, r)
    return w - floor(r * w / S)
  end

  -- The wait until a rejected request (cost <= limit) would be admitted.
  local function sw_retry(w, limit, e, prev, cur, cost)
    if cur + cost <= limit and prev > 0 then
      local r = floor((limit - cur - cost) * S / prev)
      local first = first_offset_with_weight(w, min(r, S))
      if first < w then return max(first - e, 0) end
    end
    -- In the next window the current count becomes prev, decaying from full
    -- weight, and nothing is current.
    local e2 = 0
    if cur > 0 then
      local r2 = floor((limit - cost) * S / cur)
      if r2 < S then e2 = first_offset_with_weight(w, r2) end
    end
    return (w - e) + e2
  end

  local FIELDS = {'ws', 'cur', 'prev'}

  return hash_state(FIELDS, {
    nparams = 2,

    params = function(args, i)
      local a = take(args, i, 2, 'sliding_window (limit, window)')
      return {limit = a[1], window = a[2]}
    end,

    check = function(p, s, now, cost)
      cost = max(cost, 1)
      local w, limit = p.window, p.limit
      local start = now - now % w
      local prev, cur = 0, 0
      if s.ws >= start then
        prev, cur = s.prev, s.cur
      elseif s.ws + w >= start then
        prev, cur = s.cur, 0
      end
      prev, cur = min(prev, limit), min(cur, limit)
      local e = now - start
      local wt = ceil((w - e) * S / w)
      local room = max(floor(max(limit * S - prev * wt, 0) / S) - cur, 0)
      local fits = cost <= limit
      local allowed = fits and cost <= room
      local cur2 = allowed and cur + cost or cur
      local retry = -1
      if allowed then
        retry = 0
      elseif fits then
        retry = sw_retry(w, limit, e, prev, cur, cost)
      end
      local reset, ttl = 0, 0
      if cur2 > 0 then
        reset, ttl = w, 2 * w - e
      elseif prev > 0 then
        reset, ttl = w - e, w - e
      end
      return {
        allowed = allowed, delay = 0, limit = limit, window = w,
        remaining = allowed and room - cost or room, reset_after = reset,
        retry_after = retry, state = {ws = start, cur = cur2, prev = prev}, ttl = ttl,
      }
    end,
  })
end
