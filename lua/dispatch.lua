--[[ dispatch.lua: decide requests' limits, each request in one atomic step,
all or nothing (SPEC §5.1, §5.3). Mirrors decide::decide (src/limit/decide.rs).

Called as `FCALL tollgate_<hash>_dispatch <number of KEYS> KEYS... ARGV...`
(see common.lua for the library). One call carries one request or several:
under load the gateway sends the decisions that arrived while its previous
call was in flight together, and they are decided one after another, in
order, exactly as separate calls at one `now` would decide them.

KEYS: for each request, for each of its checks: the check's state key
      "<prefix>:{<32 hex>}:s", then, if the check has a lockout, its lockout
      key "<prefix>:{<32 hex>}:l" (one hash tag per (limit, client)); last,
      if any check has a lockout, the lockout index "<prefix>:lockouts" (a
      sorted set: member = the 32 hex, score = the lock's end).
ARGV: now (µs since the epoch; '' = Redis TIME), then for each request: n,
      its number of checks, then for each check:
        algo        fixed_window | sliding_window | sliding_log | token_bucket |
                    gcra | leaky_bucket | concurrency
        flags       0, or the sum of 1 (mode: shadow: never rejects, never
                    locks) and 2 (a lockout follows)
        cost        units this request takes
        params...   the algorithm's params (see its file); for concurrency
                    then the request's lease id, a decimal u64
        lockout     with flag 2: after, within, duration, escalate,
                    max_duration, forget_after
Return: an array, one string per request: 8 decimal integers per check,
        space-separated, in order: status (0 allowed, 1 rejected, 2
        locked_out, 3 shadow_rejected, 4 not_consumed), lock_started (0|1),
        delay, limit, window, remaining, reset, retry_after (µs). (A string,
        not 8n integers: the gateway parses it in a sixth of the
        instructions.)

  one MGET reads every string state of the call (algorithms and lockouts)
  for each request, in order:
    for each check: v = check(state, now, cost, params)     -- nothing stored
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
]]

local ALLOWED, REJECTED, LOCKED_OUT, SHADOW_REJECTED, NOT_CONSUMED = 0, 1, 2, 3, 4

-- The checks of the request being decided, by check number: what was
-- parsed, and the figures its answer is made of.
local D_ALGO, D_KEY, D_LKEY, D_LOCKAT, D_ST = {}, {}, {}, {}, {}
local D_P1, D_P2, D_P3, D_P4, D_LEASE, D_TAKEN = {}, {}, {}, {}, {}, {}
local D_STATUS, D_OK, D_NEW, D_TTL = {}, {}, {}, {}
local D_DELAY, D_LIMIT, D_WINDOW, D_REMAIN, D_RESET, D_RETRY = {}, {}, {}, {}, {}, {}
local PARTS = {}

-- The call's string states by key, as of the request being decided (false:
-- none), and the keys to write at the end with the TTL of their state.
local CURRENT, DIRTY = {}, {}

-- The answers, one per request.
local OUT = {}

-- Parses and checks check c of the request whose arguments continue at
-- ARGV[i] and keys at KEYS[k]. Returns i and k past it, and whether the
-- check blocks the request (locked out, or rejected).
local function check_one(KEYS, ARGV, nargs, i, k, c, now)
  if nargs < i + 2 then fail('dispatch: the arguments end inside a check') end
  local algo = ALGO[ARGV[i]]
  if algo == nil then fail('dispatch: unknown algorithm ' .. ARGV[i]) end
  local flags = ARGV[i + 1]
  if flags ~= '0' and flags ~= '1' and flags ~= '2' and flags ~= '3' then
    fail('dispatch: flags must be 0 to 3, got ' .. flags)
  end
  local shadow = flags == '1' or flags == '3'
  local cost = int(ARGV[i + 2], 'cost')
  i = i + 3
  local p1, p2, p3, p4 = ints(ARGV, i, algo.nparams, algo.what)
  i = i + algo.nparams
  local lease = nil
  if algo.lease then
    lease = ARGV[i]
    if lease == nil then fail('dispatch: ' .. algo.what .. ': the lease id is missing') end
    i = i + 1
  end
  local key = KEYS[k]
  if key == nil then fail('dispatch: the KEYS end before check ' .. c) end
  k = k + 1
  local lu = 0
  D_LOCKAT[c] = 0
  if flags >= '2' then
    lock_params(ARGV, i)
    D_LOCKAT[c], D_LKEY[c] = i, KEYS[k]
    if KEYS[k] == nil then fail('dispatch: the KEYS end before the lockout key of check ' .. c) end
    if not shadow then
      local _
      _, _, lu = lock_parse(CURRENT[KEYS[k]])
    end
    i, k = i + 6, k + 1
  end

  local st
  if algo.zset then st = algo.load(key) else st = CURRENT[key] end
  local ok, delay, limit, window, remaining, reset, retry, ttl, new =
    algo.check(st, now, cost, p1, p2, p3, p4, lease)
  local status
  if lu > now then
    local left = lu - now
    status, delay, remaining, reset, retry = LOCKED_OUT, 0, 0, min(left, window), left
  else
    if ok then
      status = ALLOWED
    elseif shadow then
      status = SHADOW_REJECTED
    else
      status = REJECTED
    end
    reset = reset_hint(ok, reset, retry, window)
    retry = ok and 0 or retry_hint(retry, window)
  end
  D_ALGO[c], D_KEY[c], D_ST[c], D_LEASE[c] = algo, key, st, lease
  D_P1[c], D_P2[c], D_P3[c], D_P4[c] = p1, p2, p3, p4
  -- Units the request would have taken: one slot for concurrency, else its
  -- cost (at least 1, as the algorithms count it).
  D_TAKEN[c] = algo.lease and 1 or max(cost, 1)
  D_STATUS[c], D_OK[c], D_NEW[c], D_TTL[c] = status, ok, new, ttl
  D_DELAY[c], D_LIMIT[c], D_WINDOW[c] = delay, limit, window
  D_REMAIN[c], D_RESET[c], D_RETRY[c] = remaining, reset, retry
  return i, k, status == LOCKED_OUT or status == REJECTED
end

-- Counts a strike for the rejected check c; starts a lockout (and enters
-- it in the index) when it is the one too many. Returns its length, or nil.
local function strike(ARGV, c, now, index)
  local after, within, duration, escalate, max_duration, forget_after =
    lock_params(ARGV, D_LOCKAT[c])
  local lkey = D_LKEY[c]
  local n, s, lu, lv = lock_parse(CURRENT[lkey])
  local length
  n, s, lu, lv, length = lock_strike(n, s, lu, lv, now, after, within, duration,
    escalate, max_duration, forget_after)
  local ttl = lock_ttl(n, s, lu, lv, now, within, forget_after)
  CURRENT[lkey], DIRTY[lkey] = ttl > 0 and lock_format(n, s, lu, lv), ttl
  if length ~= nil then
    -- The index behind GET /lockouts. It has no hash tag of its own, so it
    -- may live on another slot: Redis Cluster support must move it.
    local hex = match(lkey, '{(%x+)}:l$') or lkey
    redis.call('ZADD', index, fmt(lu), hex)
    redis.call('ZREMRANGEBYSCORE', index, '-inf', fmt(now))
    local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
    set_ttl(index, tonumber(last[2]) - now)
  end
  return length
end

-- Decides the request whose arguments start at ARGV[i] (its n) and keys at
-- KEYS[k]. Returns i and k past it, its answer, and whether it has a
-- lockout.
local function decide_one(KEYS, ARGV, nargs, i, k, now, index)
  local n = int(ARGV[i], 'dispatch: n')
  if n < 1 then fail('dispatch: a request of no checks') end
  i = i + 1
  local blocked, locks = false, false
  for c = 1, n do
    local stops
    i, k, stops = check_one(KEYS, ARGV, nargs, i, k, c, now)
    blocked = blocked or stops
    locks = locks or D_LOCKAT[c] > 0
  end

  -- Commit: everything, or only the strikes.
  for c = 1, n do
    local status, started = D_STATUS[c], 0
    if not blocked then
      if D_OK[c] then
        local algo, key, ttl = D_ALGO[c], D_KEY[c], D_TTL[c]
        if algo.zset then
          algo.store(key, D_ST[c], D_NEW[c], ttl, now, D_P1[c], D_P2[c], D_P3[c], D_P4[c])
        else
          CURRENT[key], DIRTY[key] = ttl > 0 and D_NEW[c], ttl
        end
      end
    elseif status == ALLOWED then
      -- Another limit rejected the request: nothing was taken here.
      status = NOT_CONSUMED
      D_DELAY[c] = 0
      D_REMAIN[c] = min(D_REMAIN[c] + D_TAKEN[c], D_LIMIT[c])
    elseif status == REJECTED and D_LOCKAT[c] > 0 then
      local length = strike(ARGV, c, now, index)
      if length ~= nil then
        status, started = LOCKED_OUT, 1
        D_REMAIN[c], D_RETRY[c], D_RESET[c] = 0, length, min(length, D_WINDOW[c])
      end
    elseif status == SHADOW_REJECTED then
      D_DELAY[c] = 0
    end
    PARTS[c] = format('%d %d %d %d %d %d %d %d', status, started, D_DELAY[c],
      D_LIMIT[c], D_WINDOW[c], D_REMAIN[c], D_RESET[c], D_RETRY[c])
  end
  return i, k, table.concat(PARTS, ' ', 1, n), locks
end

local function dispatch(KEYS, ARGV)
  local nargs, nkeys = #ARGV, #KEYS
  if nargs < 3 then
    return redis.error_reply('ERR tollgate: dispatch: ARGV must start with now, n')
  end
  local now = now_arg(ARGV[1])
  -- A call that failed may have left these behind.
  for key in pairs(DIRTY) do DIRTY[key] = nil end
  for key in pairs(CURRENT) do CURRENT[key] = nil end
  if nkeys > 0 then
    -- Every string state at once; a sorted set (or a hash) reads as false.
    local vals = redis.call('MGET', unpack(KEYS))
    for j = 1, nkeys do CURRENT[KEYS[j]] = vals[j] end
  end

  local index = KEYS[nkeys]
  local i, k, r, locks = 2, 1, 0, false
  while i <= nargs do
    local answer, lock
    i, k, answer, lock = decide_one(KEYS, ARGV, nargs, i, k, now, index)
    r = r + 1
    OUT[r] = answer
    locks = locks or lock
  end
  local want = k - 1 + (locks and 1 or 0)
  if want ~= nkeys then
    fail('dispatch: the checks need ' .. want .. ' KEYS (a state key each, a lockout key '
      .. 'each with a lockout, then the index if any), got ' .. nkeys)
  end

  for key, ttl in pairs(DIRTY) do put(key, CURRENT[key], ttl) end
  for j = r + 1, #OUT do OUT[j] = nil end
  return OUT
end
