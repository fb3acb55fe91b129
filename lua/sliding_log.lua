--[[ sliding_log.lua: exact: at most `limit` units in any trailing window.
Mirrors crates/limit/src/algorithm/sliding_log.rs line for line.

A function library over common.lua; registers DEFINE.sliding_log (building
ALGO.sliding_log) with the functions every algorithm file has (see
fixed_window.lua).

Params (nparams = 2): limit, window (µs).
State: a sorted set, one member per entry: member "<t>:<n>" (n units taken at
t), score t. Members are unique because entries of one instant are merged
into one (as the Rust log does), and t is part of the member. O(limit) state.

  an entry counts while now < t + w; the others are dropped when storing
  used = sum of n;  ok = cost <= limit and used + cost <= limit
  if ok: add (now, cost), merged into an entry at now if there is one
  remaining   = max(limit - used', 0)
  ttl         = max t + w - now (0 for an empty log);  reset_after = min(ttl, w)
  retry_after = t_k + w - now for the oldest entry k whose leaving makes room
  grows_after = the same for room for remaining + 1 (the oldest entry; w when
                the log is empty)
]]

DEFINE.sliding_log = function()
  local function member(t, n)
    return fmt(t) .. ':' .. fmt(n)
  end

  -- The wait until the oldest live entries leaving the window have freed
  -- at least excess units; nil if all of them free less.
  local function freed_after(live, excess, w, now)
    local freed = 0
    for _, e in ipairs(live) do
      freed = freed + e.n
      if freed >= excess then return max(e.t + w - now, 0) end
    end
    return nil
  end

  return {
    nparams = 2,
    what = 'sliding_log (limit, window)',
    zset = true,

    load = function(key)
      local st = {entries = {}, foreign = false}
      local raw = read('ZRANGE', key, 0, -1)
      if raw == nil then
        st.foreign = true
        return st
      end
      for i, m in ipairs(raw) do
        local t, n = string.match(m, '^(%d+):(%d+)$')
        if t == nil then fail('sliding_log: malformed entry ' .. m .. ' in ' .. key) end
        st.entries[i] = {t = tonumber(t), n = tonumber(n)}
      end
      return st
    end,

    check = function(s, now, cost, limit, w)
      cost = max(cost, 1)
      local live, used = {}, 0
      for _, e in ipairs(s.entries) do
        if e.t + w > now then
          live[#live + 1] = {t = e.t, n = e.n}
          used = used + e.n
        end
      end
      local fits = cost <= limit
      local allowed = fits and used + cost <= limit
      local retry = -1
      if allowed then
        retry = 0
      elseif fits then
        -- Free the oldest entries until the request fits.
        retry = freed_after(live, used + cost - limit, w, now) or -1
      end
      local merged, added = nil, nil
      if allowed then
        -- Entries are sorted; only a clock that stepped back puts now before
        -- the newest one.
        local at = 0
        while at < #live and live[at + 1].t <= now do at = at + 1 end
        if at > 0 and live[at].t == now then
          merged = member(live[at].t, live[at].n)
          live[at].n = live[at].n + cost
          added = live[at]
        else
          added = {t = now, n = cost}
          table.insert(live, at + 1, added)
        end
        used = used + cost
      end
      local remaining = max(limit - used, 0)
      -- The next unit comes back when the oldest entries leave the window.
      local grows = freed_after(live, used + remaining + 1 - limit, w, now) or w
      local ttl = 0
      if #live > 0 then ttl = max(live[#live].t + w - now, 0) end
      return allowed, 0, limit, w, remaining, min(ttl, w), retry, ttl,
        allowed and {merged = merged, added = added} or nil, grows
    end,

    store = function(key, s, new, ttl, now, limit, w)
      if s.foreign then redis.call('DEL', key) end
      redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - w))
      local a = new.added
      if a ~= nil then
        if new.merged ~= nil then redis.call('ZREM', key, new.merged) end
        redis.call('ZADD', key, fmt(a.t), member(a.t, a.n))
      end
      set_ttl(key, ttl)
    end,

    -- Redis Cluster refund (refund.lua): takes cost units off the entry made
    -- at `at` (entries of one instant are one entry); gone or lapsed, there
    -- is nothing to give back. The TTL stays.
    refund_zset = function(key, at, _, cost)
      local t = fmt(at)
      local found = read('ZRANGEBYSCORE', key, t, t)
      for _, m in ipairs(found or {}) do
        local n = tonumber(string.match(m, '^%d+:(%d+)$') or '')
        if n ~= nil then
          redis.call('ZREM', key, m)
          local left = n - max(cost, 1)
          if left > 0 then redis.call('ZADD', key, t, member(at, left)) end
          return
        end
      end
    end,

    encode = function(s)
      local out = {}
      for _, e in ipairs(s.entries) do
        out[#out + 1] = e.t
        out[#out + 1] = e.n
      end
      return out
    end,
  }
end
