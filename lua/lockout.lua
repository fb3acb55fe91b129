--[[ lockout.lua: lockout penalties (SPEC §5.3).
Mirrors src/limit/lockout.rs line for line.

A function library over common.lua:

  lock_params(args, i) -> p   p from args[i .. i + 5]: after, within, duration,
                              escalate, max_duration, forget_after
  lock_load(key) -> st        the hash {n, s, lu, lv} (zeros when missing)
  lock_strike(p, st, now) -> st', length
                              count one rejection; length is the length of the
                              lockout it started, or nil
  lock_ttl(p, st, now)        how long st must be kept (0: delete it)
  lock_store(key, st, ttl)    HSET n s lu lv, PEXPIRE; DEL when ttl is 0

State: n strikes in the current `within` window, which started at s; lu the
end of the latest lockout (0: never); lv lockouts so far (escalation level).

  locked(now) = lu > now
  strike(now): if lv > 0 and now >= lu + forget_after: lv = 0
               if n == 0 or now >= s + within: n = 0, s = now
               n = n + 1
               if n >= after: d = duration * escalate^lv capped at max_duration
                              lu = now + d, lv = lv + 1, n = 0, s = 0
  ttl(now) = max(lu + forget_after - now if lv > 0, s + within - now if n > 0, 0)
]]

local LOCK_FIELDS = {'n', 's', 'lu', 'lv'}

local function lock_params(args, i)
  local a = take(args, i, 6,
    'lockout (after, within, duration, escalate, max_duration, forget_after)')
  return {after = a[1], within = a[2], duration = a[3], escalate = a[4],
    max_duration = a[5], forget_after = a[6]}
end

local function lock_load(key)
  return hash_load(key, LOCK_FIELDS)
end

-- The length of lockout number level + 1 (lockout::lock_length).
local function lock_length(p, level)
  local d = min(p.duration, p.max_duration)
  if p.escalate > 1 then
    for _ = 1, level do
      d = d * p.escalate
      if d >= p.max_duration then return p.max_duration end
    end
  end
  return d
end

local function lock_strike(p, st, now)
  local s = {n = st.n, s = st.s, lu = st.lu, lv = st.lv, foreign = st.foreign}
  if s.lv > 0 and now >= s.lu + p.forget_after then s.lv = 0 end
  if s.n == 0 or now >= s.s + p.within then
    s.n, s.s = 0, now
  end
  s.n = s.n + 1
  if s.n >= p.after then
    local d = lock_length(p, s.lv)
    s.lu, s.lv, s.n, s.s = now + d, s.lv + 1, 0, 0
    return s, d
  end
  return s, nil
end

local function lock_ttl(p, st, now)
  local forget, window = 0, 0
  if st.lv > 0 then forget = max(st.lu + p.forget_after - now, 0) end
  if st.n > 0 then window = max(st.s + p.within - now, 0) end
  return max(forget, window)
end

local function lock_store(key, st, ttl)
  hash_store(key, st, LOCK_FIELDS, ttl, st.foreign)
end
