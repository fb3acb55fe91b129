--[[ dispatch.lua: decide requests' limits, each request in one atomic step,
all or nothing (docs/configuration/limits.md). Mirrors decide::decide (crates/limit/src/decide.rs).

Called as `FCALL tollgate_<hash>_dispatch <number of KEYS> KEYS... ARGV...`
(see common.lua for the library). One call carries one request or several:
under load the gateway sends the decisions that arrived while its previous
call was in flight together, and they are decided one after another, in
order, exactly as separate calls at one `now` would decide them.

KEYS: for each request, for each of its checks: the check's state key
      "<prefix>:{<32 hex>}:s", then, if the check reads its key's own
      values (flag 4), its quota key "<prefix>:{<32 hex>}:q" (quota.lua),
      then, if the check has a lockout, its lockout
      key "<prefix>:{<32 hex>}:l" (one hash tag per (limit, client)); last,
      if any check has a lockout, the lockout index "<prefix>:lockouts" (a
      sorted set: member = the 32 hex, score = the lock's end). On Redis
      Cluster the index lives on a slot of its own, so the gateway leaves it
      out and enters a lockout that starts in the index itself.
ARGV: now (µs since the epoch; '' = Redis TIME), r (the number of requests),
      then for each request: n, its number of checks, then for each check
      its spec, one string of space-separated words:
        algo        fixed_window | sliding_window | sliding_log | token_bucket |
                    gcra | leaky_bucket | concurrency
        flags       0, or the sum of 1 (mode: shadow: never rejects, never
                    locks), 2 (a lockout follows), 4 (a quota key
                    follows the state key: decide under the key's own
                    values, read in this call) and 8 (leased: this
                    instance takes a block of units, lease.lua)
        cost        units this request takes
        params...   the algorithm's params (see its file)
        lockout     with flag 2: after, within, duration, escalate,
                    max_duration, forget_after
        most        with flag 8: the most units the lease takes
      and for concurrency, then the request's lease id (a decimal u64) as
      an argument of its own; for a leased check, then two arguments: the
      units of the key's previous lease to give back (0: none) and when
      that lease was taken (µs). A spec is the same for every request of a
      limit (and override), so each distinct one is parsed once per load
      (a cache of at most 1024).
Return: one string of little-endian doubles, each an integer: one record
        per check (every request's checks in order), then the call's now
        (µs), which a Redis Cluster refund (refund.lua) names as the time
        the units were taken. A record is 10 doubles: status (0 allowed, 1
        rejected, 2 locked_out, 3 shadow_rejected, 4 not_consumed),
        lock_started (0|1), delay, limit, window, remaining, reset (draft
        10's t), retry_after, grows (draft 11's t: until the available
        quota next grows; for a rejection or lockout the wait, as
        retry_after) (µs), taken (a leased check: the units the lease took,
        the request's cost included, its figures those after them; else
        0); or, for an allowed check with no delay and nothing leased, 6:
        8 (SHORT_ALLOWED), limit, window, remaining, reset, grows (its
        lock_started, delay, retry_after and taken are 0), which another
        check's rejection turns into 12 (SHORT_NOT_CONSUMED) and the same
        figures, its remaining given back what it would have taken. Binary
        (struct.pack), because Redis turns an array of n integers into its
        reply at several hundred instructions each, and a text of them costs
        an snprintf each (common.lua, "States"); short, because packing a
        double costs ~300 instructions (an allowed check is the common
        answer).

  one MGET reads every string state of the call (algorithms and lockouts;
  each distinct key once)
  for each request, in order:
    for each leased check: the previous lease's unspent units go back
      first (lease_give_back; written whatever the request's fate), and
      v = lease_take(state, now, cost, most): check of the largest k in
      [cost, most] that fits, or of cost when none does
    for each other check: v = check(state, now, cost, params)   -- nothing stored
    locked   = enforced checks with a lockout whose lock runs (lu > now)
    rejected = enforced checks not locked whose v is not allowed
    nothing locked or rejected: every allowed v.state becomes the key's state
    otherwise: no limit state changes at all; each rejected check with a
               lockout counts a strike, and one that starts a lockout
               answers locked_out with the lock's length (and enters the
               lockout index)
  last, one SET ... PX (or DEL) per string key whose state changed, with its
  latest state; sorted sets are written as each request is decided

The scratch arrays below are built once per load and reused: a call never
runs while another does, and each call clears what it reads (common.lua,
"Speed"). Argument errors fail the call before any string state is written.
A check of a string state with no lease, quota key or lockout (the common
case: `sp.plain`) takes a short path through check_one: its spec, its key,
the algorithm's check. A lone request whose checks are all plain and all
allowed (the commonest call of all) takes a shorter one still: lone().
]]

local ALLOWED, REJECTED, LOCKED_OUT, SHADOW_REJECTED, NOT_CONSUMED = 0, 1, 2, 3, 4

-- '1' .. '64' -> 1 .. 64: the counts in ARGV without tonumber (strtod).
local SMALL = {}
for j = 1, 64 do SMALL[tostring(j)] = j end

-- spec string -> {algo, check, name, shadow, locks, quota, leased, plain,
-- cost, taken, p1 .. p4, after .. forget_after, most, px, px_lo, px_text};
-- SPEC_COUNT entries.
local SPECS, SPEC_COUNT = {}, 0

-- The parsed spec s (see ARGV above), from the cache or parsed now.
local function spec(s)
  local sp = SPECS[s]
  if sp ~= nil then return sp end
  if type(s) ~= 'string' then fail('dispatch: the arguments end inside a request') end
  local words = {}
  for w in string.gmatch(s, '[^ ]+') do words[#words + 1] = w end
  local algo = ALGO[words[1] or '']
  if algo == nil then fail('dispatch: unknown algorithm ' .. (words[1] or '')) end
  local flags = tonumber(match(words[2] or '', '^1?%d$') or '')
  if flags == nil or flags > 15 then
    fail('dispatch: flags must be 0 to 15, got ' .. tostring(words[2]))
  end
  sp = {algo = algo, check = algo.check, name = words[1], shadow = flags % 2 == 1,
    locks = flags % 4 >= 2, quota = flags % 8 >= 4, leased = flags >= 8,
    cost = int(words[3], 'cost'), taken = 1, px = 0, px_lo = 0, px_text = ''}
  if sp.leased and not LEASABLE[words[1]] then
    fail('dispatch: ' .. words[1] .. ' takes no leases')
  end
  -- A string state and nothing but its key and spec: check_one's short path.
  sp.plain = not (algo.zset or algo.lease or sp.locks or sp.quota or sp.leased)
  -- Units the request would take: one slot for concurrency, else its cost
  -- (at least 1, as the algorithms count it).
  if not algo.lease then sp.taken = max(sp.cost, 1) end
  local np = algo.nparams
  sp.p1, sp.p2, sp.p3, sp.p4 = ints(words, 4, np, algo.what)
  local used = 3 + np
  if sp.locks then
    sp.after, sp.within, sp.duration, sp.escalate, sp.max_duration, sp.forget_after =
      lock_params(words, used + 1)
    used = used + 6
  end
  if sp.leased then
    sp.most = int(words[used + 1], 'lease size')
    used = used + 1
  end
  if #words ~= used then
    fail('dispatch: ' .. words[1] .. ' takes ' .. used .. ' words here, got ' .. #words
      .. ': ' .. s)
  end
  if SPEC_COUNT >= 1024 then SPECS, SPEC_COUNT = {}, 0 end
  SPECS[s], SPEC_COUNT = sp, SPEC_COUNT + 1
  return sp
end

-- The checks of the request being decided, by check number: its spec,
-- the place of its state key (see the call's states below), the state to
-- store and its TTL, where its answer starts in OUT (records are of two
-- widths); for a sorted set, the loaded state and the params it was
-- decided under (its spec's, or its key's own), to store it; with a
-- lockout, the place of its lockout key.
local D_SPEC, D_AT, D_NEW, D_TTL, D_O = {}, {}, {}, {}, {}
local D_ST, D_P1, D_P2, D_P3, D_P4, D_LAT = {}, {}, {}, {}, {}, {}

-- The call's string states: vals (MGET's reply, or for a batch VALS) holds
-- each key's state as of the request being decided (false: none), at the
-- key's first place in KEYS (FIRST: key -> that place, for a batch only).
-- The states to write at the end: DIRTY[j] is the TTL of place j's state
-- (false: untouched), and DLIST[1 .. NDIRTY] those places, in order.
local FIRST, VALS, DKEYS, DPOS = {}, {}, {}, {}
local first_used = false
local DIRTY, DLIST, NDIRTY = {}, {}, 0

-- Makes st the state at place j, to be written at the end with ttl (0:
-- deleted).
local function keep(vals, j, st, ttl)
  vals[j] = st
  if not DIRTY[j] then
    NDIRTY = NDIRTY + 1
    DLIST[NDIRTY] = j
  end
  DIRTY[j] = ttl
end

-- The answers: W integers per check (see Return above; a short record,
-- SHORT_ALLOWED or SHORT_NOT_CONSUMED then 5), and struct formats of m
-- doubles.
local W = 10
local SHORT_ALLOWED, SHORT_NOT_CONSUMED = 8, 12
local OUT, OUT_FORMAT = {}, {}

-- The reply: OUT[1 .. out], then now.
local function reply(out, now)
  local f = OUT_FORMAT[out]
  if f == nil then
    f = '<' .. string.rep('d', out + 1)
    OUT_FORMAT[out] = f
  end
  OUT[out + 1] = now
  return spack(f, unpack(OUT, 1, out + 1))
end

-- Decides check c of the request whose arguments continue at ARGV[i] and
-- keys at KEYS[k], and writes its answer from OUT[out + 1]: a short record
-- if it can be one (unless full), else a full one. Returns i and k past
-- it, its status, and out past its answer.
local function check_one(KEYS, ARGV, vals, batch, i, k, c, now, out, full)
  local sp = SPECS[ARGV[i]] or spec(ARGV[i])
  i = i + 1
  local ok, delay, limit, window, remaining, reset, retry, ttl, new, grows
  local at, lu, taken
  if sp.plain then
    local key = KEYS[k]
    if key == nil then fail('dispatch: the KEYS end before check ' .. c) end
    at = batch and FIRST[key] or k
    k, lu, taken = k + 1, 0, 0
    ok, delay, limit, window, remaining, reset, retry, ttl, new, grows =
      sp.check(vals[at], now, sp.cost, sp.p1, sp.p2, sp.p3, sp.p4)
  else
    local algo = sp.algo
    local lease = nil
    if algo.lease then
      lease = ARGV[i]
      if lease == nil then fail('dispatch: ' .. algo.what .. ': the lease id is missing') end
      i = i + 1
    end
    local back, back_at = 0, 0
    if sp.leased then
      if ARGV[i + 1] == nil then
        fail('dispatch: check ' .. c .. ': the lease to give back is missing')
      end
      back, back_at = int(ARGV[i], 'give-back units'), int(ARGV[i + 1], 'give-back time')
      i = i + 2
    end
    local key = KEYS[k]
    if key == nil then fail('dispatch: the KEYS end before check ' .. c) end
    at = batch and FIRST[key] or k
    k = k + 1
    local p1, p2, p3, p4 = sp.p1, sp.p2, sp.p3, sp.p4
    if sp.quota then
      if KEYS[k] == nil then fail('dispatch: the KEYS end before the quota key of check ' .. c) end
      p1, p2, p3, p4 = quota_params(sp, vals[batch and FIRST[KEYS[k]] or k])
      k = k + 1
    end
    lu = 0
    if sp.locks then
      if KEYS[k] == nil then fail('dispatch: the KEYS end before the lockout key of check ' .. c) end
      local lat = batch and FIRST[KEYS[k]] or k
      D_LAT[c] = lat
      if not sp.shadow then
        local _
        _, _, lu = lock_parse(vals[lat])
      end
      k = k + 1
    end

    local st
    if algo.zset then
      st = algo.load(key)
      D_ST[c], D_P1[c], D_P2[c], D_P3[c], D_P4[c] = st, p1, p2, p3, p4
    else
      st = vals[at]
    end
    taken = 0
    if sp.leased then
      if back > 0 then
        -- The previous lease's unspent units, back where they came from
        -- (stored whatever this request's fate).
        local back_st, back_ttl, applied = lease_give_back(algo, sp.name, st, back_at, now,
          back, p1, p2, p3, p4)
        if applied ~= nil then
          st = back_ttl > 0 and back_st or false
          keep(vals, at, st, back_ttl)
        end
      end
      local v
      taken, v = lease_take(algo, st, now, sp.cost, sp.most, p1, p2, p3, p4)
      ok, delay, limit, window, remaining, reset, retry, ttl, new, grows = unpack(v, 1, 10)
    else
      ok, delay, limit, window, remaining, reset, retry, ttl, new, grows =
        algo.check(st, now, sp.cost, p1, p2, p3, p4, lease)
    end
  end
  local status = ALLOWED
  if lu > now then
    local left = lu - now
    status, delay, remaining, retry, grows = LOCKED_OUT, 0, 0, left, left
    reset = left < window and left or window
    taken = 0
  elseif not ok then
    status = sp.shadow and SHADOW_REJECTED or REJECTED
    reset = reset_hint(retry, window)
    retry = retry_hint(retry, window)
    grows = retry
  end
  local OUT = OUT
  D_SPEC[c], D_AT[c], D_NEW[c], D_TTL[c], D_O[c] = sp, at, new, ttl, out
  if status == ALLOWED and delay == 0 and taken == 0 and not full then
    -- (an allowed check's retry_after is 0: see lone())
    OUT[out + 1], OUT[out + 2], OUT[out + 3], OUT[out + 4] = SHORT_ALLOWED, limit, window,
      remaining
    OUT[out + 5], OUT[out + 6] = reset, grows
    return i, k, status, out + 6
  end
  OUT[out + 1], OUT[out + 2], OUT[out + 3], OUT[out + 4] = status, 0, delay, limit
  OUT[out + 5], OUT[out + 6], OUT[out + 7], OUT[out + 8] = window, remaining, reset, retry
  OUT[out + 9], OUT[out + 10] = grows, taken
  return i, k, status, out + W
end

-- Counts a strike for the rejected check c; starts a lockout (and enters
-- it in the index) when it is the one too many. Returns its length, or nil.
local function strike(KEYS, vals, c, now)
  local sp, at = D_SPEC[c], D_LAT[c]
  local n, s, lu, lv = lock_parse(vals[at])
  local length
  n, s, lu, lv, length = lock_strike(n, s, lu, lv, now, sp.after, sp.within, sp.duration,
    sp.escalate, sp.max_duration, sp.forget_after)
  local ttl = lock_ttl(n, s, lu, lv, now, sp.within, sp.forget_after)
  keep(vals, at, ttl > 0 and lock_format(n, s, lu, lv), ttl)
  -- The index behind GET /lockouts. It has no hash tag of its own, so it
  -- may live on another slot: on Redis Cluster the gateway leaves it out
  -- of KEYS, which then end with this lockout key ("}:l"), not the index.
  local index, lkey = KEYS[#KEYS], KEYS[at]
  if length ~= nil and string.byte(index, -3) ~= 125 then
    local hex = match(lkey, '{(%x+)}:l$') or lkey
    redis.call('ZADD', index, fmt(lu), hex)
    redis.call('ZREMRANGEBYSCORE', index, '-inf', fmt(now))
    local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
    set_ttl(index, tonumber(last[2]) - now)
  end
  return length
end

-- Decides the request whose arguments start at ARGV[i] (its n) and keys at
-- KEYS[k], writing its answer to OUT from out + 1. Returns i, k and out
-- past it, and whether it has a lockout.
local function decide_one(KEYS, ARGV, vals, batch, i, k, out, now)
  local n = SMALL[ARGV[i]] or int(ARGV[i], 'dispatch: n')
  if n < 1 then fail('dispatch: a request of no checks') end
  i = i + 1
  local blocked, locks, status = false, false, nil
  local past = out
  for c = 1, n do
    i, k, status, past = check_one(KEYS, ARGV, vals, batch, i, k, c, now, past, false)
    if status == REJECTED or status == LOCKED_OUT then blocked = true end
    if D_SPEC[c].locks then locks = true end
  end

  if not blocked then
    -- Commit every allowed check's state (a rejected one has none).
    for c = 1, n do
      local new = D_NEW[c]
      if new ~= nil then
        local algo, at, ttl = D_SPEC[c].algo, D_AT[c], D_TTL[c]
        if algo.zset then
          algo.store(KEYS[at], D_ST[c], new, ttl, now, D_P1[c], D_P2[c], D_P3[c], D_P4[c])
        else
          keep(vals, at, ttl > 0 and new, ttl)
        end
      end
    end
  else
    -- Store no limit state; count the strikes.
    for c = 1, n do
      local o = D_O[c]
      local st = OUT[o + 1]
      if st == SHORT_ALLOWED then
        -- As below: its short record (delay and taken 0) becomes
        -- not_consumed's.
        OUT[o + 1] = SHORT_NOT_CONSUMED
        OUT[o + 4] = min(OUT[o + 4] + D_SPEC[c].taken, OUT[o + 2])
      elseif st == ALLOWED then
        -- Another limit rejected the request: nothing was taken here (a
        -- lease gives back all it would have taken).
        local taken = OUT[o + 10] > 0 and OUT[o + 10] or D_SPEC[c].taken
        OUT[o + 1], OUT[o + 3], OUT[o + 10] = NOT_CONSUMED, 0, 0
        OUT[o + 6] = min(OUT[o + 6] + taken, OUT[o + 4])
      elseif st == REJECTED and D_SPEC[c].locks then
        local length = strike(KEYS, vals, c, now)
        if length ~= nil then
          OUT[o + 1], OUT[o + 2], OUT[o + 6] = LOCKED_OUT, 1, 0
          OUT[o + 7], OUT[o + 8], OUT[o + 9] = min(length, OUT[o + 5]), length, length
        end
      end
    end
  end
  return i, k, past, locks
end

-- The lone call's short path (see dispatch): the states to write, by check,
-- and their TTLs as PX texts (false: deleted).
local L_NEW, L_PX = {}, {}

-- Decides a lone request of n plain checks (KEYS[c] and ARGV[3 + c] check
-- c's) when every one of them is allowed: writes their states and answers
-- as the general path would. Returns nil, having written nothing, as soon
-- as a check is not plain or not allowed (a rejection, a shadow one
-- included): the checks are pure, so the general path then decides the
-- whole request again from the same states. No scratch but the answers
-- and the states to write, no bookkeeping for batches or the
-- all-or-nothing rule: with every check allowed, every state is written.
local function lone(KEYS, ARGV, vals, n, now)
  local OUT, out = OUT, 0
  for c = 1, n do
    local s = ARGV[3 + c]
    local sp = SPECS[s] or spec(s)
    if not sp.plain then return nil end
    local ok, delay, limit, window, remaining, reset, _, ttl, new, grows =
      sp.check(vals[c], now, sp.cost, sp.p1, sp.p2, sp.p3, sp.p4)
    if not ok then return nil end
    -- An allowed check's retry_after is 0, its lock_started and taken
    -- too: with no delay either, its record is a short one.
    if delay == 0 then
      OUT[out + 1], OUT[out + 2], OUT[out + 3], OUT[out + 4] = SHORT_ALLOWED, limit, window,
        remaining
      OUT[out + 5], OUT[out + 6] = reset, grows
      out = out + 6
    else
      OUT[out + 1], OUT[out + 2], OUT[out + 3], OUT[out + 4] = ALLOWED, 0, delay, limit
      OUT[out + 5], OUT[out + 6], OUT[out + 7], OUT[out + 8] = window, remaining, reset, 0
      OUT[out + 9], OUT[out + 10] = grows, 0
      out = out + W
    end
    -- The TTL in ms, rounded up (common.lua, ttl_ms), as text. A limit's
    -- TTLs mostly repeat or shrink slowly (a window's end draws nearer),
    -- so its spec keeps the last one formatted, px, and reuses it for any
    -- TTL in (px - px / 64, px]: never shorter than needed, longer by less
    -- than 1/64, and no string.format (~1,800 instructions) for most
    -- writes.
    local px = false
    if ttl > 0 then
      local ms = ttl / 1000
      ms = ms + (-ms) % 1
      if ms <= sp.px and ms > sp.px_lo then
        px = sp.px_text
      else
        px = format('%d', ms)
        sp.px, sp.px_lo, sp.px_text = ms, ms - ms / 64, px
      end
    end
    L_NEW[c], L_PX[c] = new, px
  end
  for c = 1, n do
    local new, px = L_NEW[c], L_PX[c]
    if new == nil then
      -- (a check that stores nothing)
    elseif px then
      redis.call('SET', KEYS[c], new, 'PX', px)
    else
      redis.call('DEL', KEYS[c])
    end
  end
  return reply(out, now)
end

local function dispatch(KEYS, ARGV)
  local nargs, nkeys = #ARGV, #KEYS
  if nargs < 4 then
    return redis.error_reply('ERR tollgate: dispatch: ARGV must start with now, r, n')
  end
  local now = now_arg(ARGV[1])
  local r = SMALL[ARGV[2]] or int(ARGV[2], 'dispatch: r')
  local batch = r > 1
  -- A call that failed (or a probe) may have left these behind.
  if first_used then
    for key in pairs(FIRST) do FIRST[key] = nil end
    first_used = false
  end
  for d = 1, NDIRTY do DIRTY[DLIST[d]] = false end
  NDIRTY = 0
  -- Every string state at once; a sorted set (or a hash) reads as false.
  local vals
  if not batch then
    vals = redis.call('MGET', unpack(KEYS))
    -- The common call: one request whose checks each have one key and one
    -- argument, as plain checks do (lone() sees whether they are).
    if nargs == nkeys + 3 and SMALL[ARGV[3]] == nkeys then
      local reply = lone(KEYS, ARGV, vals, nkeys, now)
      if reply ~= nil then return reply end
    end
  else
    -- A key of several requests keeps one state, at its first place, and
    -- is read once.
    local nd = 0
    for j = 1, nkeys do
      local key = KEYS[j]
      if FIRST[key] == nil then
        FIRST[key] = j
        nd = nd + 1
        DKEYS[nd], DPOS[nd] = key, j
      end
    end
    first_used = true
    local got = redis.call('MGET', unpack(DKEYS, 1, nd))
    vals = VALS
    for d = 1, nd do vals[DPOS[d]] = got[d] end
  end

  local i, k, out, locks = 3, 1, 0, false
  for _ = 1, r do
    local lock
    i, k, out, lock = decide_one(KEYS, ARGV, vals, batch, i, k, out, now)
    locks = locks or lock
  end
  if i ~= nargs + 1 then
    fail('dispatch: ' .. r .. ' requests take ' .. (i - 1) .. ' arguments, got ' .. nargs)
  end
  local want = k - 1 + (locks and 1 or 0)
  if want ~= nkeys and not (locks and nkeys == k - 1) then
    fail('dispatch: the checks need ' .. want .. ' KEYS (a state key each, a quota key and a lockout key '
      .. 'each with a lockout, then the index if any), got ' .. nkeys)
  end

  for d = 1, NDIRTY do
    local j = DLIST[d]
    put(KEYS[j], vals[j], DIRTY[j])
    DIRTY[j] = false
  end
  NDIRTY = 0
  return reply(out, now)
end
