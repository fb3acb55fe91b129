--[[ lockout.lua: lockout penalties (docs/configuration/limits.md).
Mirrors crates/limit/src/algorithm/lockout.rs line for line.

A function library over common.lua:

  lock_params(args, i) -> after, within, duration, escalate, max_duration,
                              forget_after: args[i .. i + 5] (fail if missing)
  lock_parse(st) -> n, s, lu, lv
                              a stored lockout state (zeros for none, or for
                              a string that is not one)
  lock_strike(n, s, lu, lv, now, after, within, duration, escalate,
              max_duration, forget_after) -> n, s, lu, lv, length
                              count one rejection; length is the length of
                              the lockout it started, or nil
  lock_ttl(n, s, lu, lv, now, within, forget_after)
                              how long the state must be kept (0: delete it)
  lock_format(n, s, lu, lv)   the state as stored

State (tag 9): n strikes in the current `within` window, which started at
s; lu the end of the latest lockout (0: never); lv lockouts so far
(escalation level). One string, written with SET ... PX like the
algorithms' states (common.lua, "States").

  locked(now) = lu > now
  strike(now): if lv > 0 and now >= lu + forget_after: lv = 0
               if n == 0 or now >= s + within: n = 0, s = now
               n = n + 1
               if n >= after: d = duration * escalate^lv capped at max_duration
                              lu = now + d, lv = lv + 1, n = 0, s = 0
  ttl(now) = max(lu + forget_after - now if lv > 0, s + within - now if n > 0, 0)
]]

local function lock_params(args, i)
  return ints(args, i, 6,
    'lockout (after, within, duration, escalate, max_duration, forget_after)')
end

local LOCK_TAG = 9

local function lock_parse(st)
  local n, s, lu, lv = state_unpack(st, LOCK_TAG, 4)
  if n == nil then return 0, 0, 0, 0 end
  return n, s, lu, lv
end

-- The length of lockout number level + 1 (lockout::lock_length).
local function lock_length(level, duration, escalate, max_duration)
  local d = min(duration, max_duration)
  if escalate > 1 then
    for _ = 1, level do
      d = d * escalate
      if d >= max_duration then return max_duration end
    end
  end
  return d
end

local function lock_strike(n, s, lu, lv, now, after, within, duration, escalate,
    max_duration, forget_after)
  if lv > 0 and now >= lu + forget_after then lv = 0 end
  if n == 0 or now >= s + within then
    n, s = 0, now
  end
  n = n + 1
  if n >= after then
    local d = lock_length(lv, duration, escalate, max_duration)
    return 0, 0, now + d, lv + 1, d
  end
  return n, s, lu, lv, nil
end

local function lock_ttl(n, s, lu, lv, now, within, forget_after)
  local forget, window = 0, 0
  if lv > 0 then forget = max(lu + forget_after - now, 0) end
  if n > 0 then window = max(s + within - now, 0) end
  return max(forget, window)
end

local function lock_format(n, s, lu, lv)
  return state_pack(LOCK_TAG, 4, n, s, lu, lv)
end
