--[[ concurrency.lua: at most `limit` requests of a key in flight at once,
each holding a lease that expires after `lease` unless released or renewed.
Mirrors crates/limit/src/algorithm/concurrency.rs line for line.

A function library over common.lua; registers DEFINE.concurrency (building
ALGO.concurrency) with the functions every algorithm file has (see
fixed_window.lua), and release(key, id, now) for release.lua.

Params (nparams = 2): limit, lease (µs); then the request's lease id (the
table's `lease` is true), which check() gets as its last argument.
State: a sorted set of leases: member = the lease id (a decimal u64, kept as
a string: it may exceed 2^53), score = its expiry.

  drop every lease with exp <= now;  exp = min(exp, now + lease)
  acquire(id): id held -> renewed to now + lease, allowed (idempotent)
               n < limit -> added with now + lease, allowed
               otherwise -> rejected, retry_after = max(min exp - now, 1)
  remaining = max(limit - n', 0);  reset_after = ttl = max exp - now (0: none)
  grows_after = 1 s (a release may free a slot any moment)
  release(id) -> found: drop it and the expired ones; 1 if it was held, else 0
]]

DEFINE.concurrency = function()
  local function leases_load(key)
    local st = {leases = {}, foreign = false}
    local raw = read('ZRANGE', key, 0, -1, 'WITHSCORES')
    if raw == nil then
      st.foreign = true
      return st
    end
    for i = 1, #raw, 2 do
      st.leases[#st.leases + 1] = {id = raw[i], exp = tonumber(raw[i + 1])}
    end
    return st
  end

  local function leases_ttl(leases, now)
    local ttl = 0
    for _, l in ipairs(leases) do ttl = max(ttl, l.exp - now) end
    return ttl
  end

  return {
    nparams = 2,
    what = 'concurrency (limit, lease)',
    lease = true,
    zset = true,

    load = function(key)
      return leases_load(key)
    end,

    check = function(s, now, cost, limit, lease, _, _, id)
      local top = now + lease
      local live = {}
      for _, l in ipairs(s.leases) do
        if l.exp > now then live[#live + 1] = {id = l.id, exp = min(l.exp, top)} end
      end
      local n = #live
      local allowed, retry = false, -1
      local held = nil
      for _, l in ipairs(live) do
        if l.id == id then held = l end
      end
      if held ~= nil then
        held.exp = top
        allowed, retry = true, 0
      elseif n < limit then
        live[#live + 1] = {id = id, exp = top}
        allowed, retry = true, 0
      else
        local first = now
        if n > 0 then
          first = live[1].exp
          for _, l in ipairs(live) do first = min(first, l.exp) end
        end
        -- Never 0 for a rejection: a full set has a live lease.
        retry = max(first - now, 1)
      end
      local ttl = leases_ttl(live, now)
      return allowed, 0, limit, lease, max(limit - #live, 0), ttl, retry, ttl,
        allowed and id or nil, 1000000
    end,

    store = function(key, s, id, ttl, now, limit, lease)
      if s.foreign then redis.call('DEL', key) end
      local top = now + lease
      redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
      -- Leases granted under a longer lease (the limit changed) end by top.
      local long = redis.call('ZRANGEBYSCORE', key, '(' .. fmt(top), '+inf')
      for _, m in ipairs(long) do redis.call('ZADD', key, fmt(top), m) end
      redis.call('ZADD', key, fmt(top), id)
      set_ttl(key, ttl)
    end,

    release = function(key, id, now)
      local s = leases_load(key)
      if s.foreign then return 0 end
      local found, left = 0, {}
      for _, l in ipairs(s.leases) do
        if l.id == id then
          if l.exp > now then found = 1 end
        elseif l.exp > now then
          left[#left + 1] = l
        end
      end
      if #s.leases > 0 then
        redis.call('ZREM', key, id)
        redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now))
        set_ttl(key, leases_ttl(left, now))
      end
      return found
    end,

    encode = function(s)
      local out = {}
      for _, l in ipairs(s.leases) do
        out[#out + 1] = l.id
        out[#out + 1] = l.exp
      end
      return out
    end,
  }
end
