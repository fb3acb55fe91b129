--[[ dispatch.lua: decide all of one request's limits in one atomic step,
all or nothing (SPEC §5.1, §5.3). Mirrors decide::decide (src/limit/decide.rs).

Called as `FCALL tollgate_<hash>_dispatch <number of KEYS> KEYS... ARGV...`
(see common.lua for the library).

KEYS (2n + 1): for check c = 1..n, KEYS[2c - 1] its state key
      "<prefix>:{<32 hex>}:s" and KEYS[2c] its lockout key "<prefix>:{<32 hex>}:l"
      (one hash tag per (limit, client)); last, the lockout index
      "<prefix>:lockouts" (a sorted set: member = the 32 hex, score = lock end).
ARGV: now (µs since the epoch; '' = Redis TIME), n, then for each check:
        algo        fixed_window | sliding_window | sliding_log | token_bucket |
                    gcra | leaky_bucket | concurrency
        cost        units this request takes
        shadow      1 = mode: shadow (never rejects, never locks), else 0
        lease       the request's lease id (concurrency), a decimal u64
        lockout     0, or 1 followed by after, within, duration, escalate,
                    max_duration, forget_after
        params...   the algorithm's params (see its file)
Return: one string of 8 decimal integers per check, space-separated, in
        order: status (0 allowed, 1 rejected, 2 locked_out, 3 shadow_rejected,
        4 not_consumed), lock_started (0|1), delay, limit, window, remaining,
        reset, retry_after (µs). (One string, not an array of 8n integers:
        the gateway parses it in a sixth of the instructions.)

  for each check: v = check(params, state, now, cost)     -- nothing stored yet
  locked   = enforced checks with a lockout whose lock runs (lu > now)
  rejected = enforced checks not locked whose v is not allowed
  nothing locked or rejected: store every allowed v.state for v.ttl
  otherwise: store no limit state at all; each rejected check with a lockout
             counts a strike, and one that starts a lockout answers locked_out
             with the lock's length (and enters the lockout index)
]]

local function dispatch(KEYS, ARGV)
  if #ARGV < 2 then
    return redis.error_reply('ERR tollgate: dispatch: ARGV must start with now, n')
  end
  local now = now_arg(ARGV[1])
  local n = int(ARGV[2], 'dispatch: n')
  if #KEYS ~= 2 * n + 1 then
    return redis.error_reply('ERR tollgate: dispatch: ' .. n .. ' checks need '
      .. (2 * n + 1) .. ' KEYS (state and lockout key each, then the index), got ' .. #KEYS)
  end

  local ALLOWED, REJECTED, LOCKED_OUT, SHADOW_REJECTED, NOT_CONSUMED = 0, 1, 2, 3, 4

  -- Parse every check before touching any key.
  local checks = {}
  local i = 3
  for c = 1, n do
    if #ARGV < i + 4 then
      fail('dispatch: the arguments end inside check ' .. c .. ' of ' .. n)
    end
    local algo = ALGO[ARGV[i]]
    if algo == nil then fail('dispatch: unknown algorithm ' .. ARGV[i]) end
    -- Every field named here, nil ones too: Lua sizes the table once for them
    -- (adding fields later would grow it step by step).
    local ch = {
      algo = algo, cost = int(ARGV[i + 1], 'cost'), shadow = ARGV[i + 2] == '1',
      lease = ARGV[i + 3], skey = KEYS[2 * c - 1], lkey = KEYS[2 * c],
      taken = 1, lock = nil, p = nil, st = nil, v = nil, lst = nil, status = nil, o = nil,
    }
    -- Units the request would have taken: one slot for concurrency, else its
    -- cost (at least 1, as the algorithms count it).
    if ARGV[i] ~= 'concurrency' then ch.taken = max(ch.cost, 1) end
    local has_lock = ARGV[i + 4]
    i = i + 5
    if has_lock == '1' then
      ch.lock = lock_params(ARGV, i)
      i = i + 6
    elseif has_lock ~= '0' then
      fail('dispatch: check ' .. c .. ': lockout must be 0 or 1, got ' .. has_lock)
    end
    ch.p = algo.params(ARGV, i)
    i = i + algo.nparams
    checks[c] = ch
  end
  if i ~= #ARGV + 1 then
    fail('dispatch: ' .. n .. ' checks take ' .. (i - 1) .. ' arguments, got ' .. #ARGV)
  end

  -- Check every limit; nothing is stored yet.
  local blocked = false
  for c = 1, n do
    local ch = checks[c]
    ch.st = ch.algo.load(ch.skey, ch.p)
    local v = ch.algo.check(ch.p, ch.st, now, ch.cost, ch.lease)
    ch.v = v
    if ch.lock ~= nil then ch.lst = lock_load(ch.lkey) end
    local enforced = not ch.shadow
    local locked = enforced and ch.lock ~= nil and ch.lst.lu > now
    if locked then
      ch.status = LOCKED_OUT
    elseif v.allowed then
      ch.status = ALLOWED
    elseif enforced then
      ch.status = REJECTED
    else
      ch.status = SHADOW_REJECTED
    end
    if ch.status == LOCKED_OUT or ch.status == REJECTED then blocked = true end
    if locked then
      local left = ch.lst.lu - now
      ch.o = {started = 0, delay = 0, remaining = 0,
        reset = min(left, v.window), retry = left}
    else
      ch.o = {started = 0, delay = v.delay, remaining = v.remaining,
        reset = reset_hint(v), retry = v.allowed and 0 or retry_hint(v)}
    end
  end

  -- Commit: everything, or only the strikes.
  local index = KEYS[#KEYS]
  for c = 1, n do
    local ch = checks[c]
    local v, o = ch.v, ch.o
    if not blocked then
      if v.allowed then ch.algo.store(ch.skey, ch.p, ch.st, v, now) end
    elseif ch.status == ALLOWED then
      -- Another limit rejected the request: nothing was taken here.
      ch.status = NOT_CONSUMED
      o.delay = 0
      o.remaining = min(v.remaining + ch.taken, v.limit)
    elseif ch.status == REJECTED and ch.lock ~= nil then
      local lst, length = lock_strike(ch.lock, ch.lst, now)
      lock_store(ch.lkey, lst, lock_ttl(ch.lock, lst, now))
      if length ~= nil then
        ch.status = LOCKED_OUT
        o.started, o.remaining, o.retry = 1, 0, length
        o.reset = min(length, v.window)
        -- The index behind GET /lockouts. It has no hash tag of its own, so
        -- it may live on another slot: Redis Cluster support must move it.
        local hex = string.match(ch.lkey, '{(%x+)}:l$') or ch.lkey
        redis.call('ZADD', index, fmt(lst.lu), hex)
        redis.call('ZREMRANGEBYSCORE', index, '-inf', fmt(now))
        local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')
        set_ttl(index, tonumber(last[2]) - now)
      end
    elseif ch.status == SHADOW_REJECTED then
      o.delay = 0
    end
  end

  local out = {}
  for c = 1, n do
    local ch = checks[c]
    local v, o = ch.v, ch.o
    out[c] = string.format('%d %d %d %d %d %d %d %d', ch.status, o.started, o.delay,
      v.limit, v.window, o.remaining, o.reset, o.retry)
  end
  return table.concat(out, ' ')
end
